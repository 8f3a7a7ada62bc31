"""Capture an agent loop of one's own on Google's Gen AI SDK: only the client is
instrumented, by OpenTelemetry's own instrumentation (no network).

Run: python tests/otlp_fixtures/capture/google_genai_client.py
Needs: 'google-genai<3' opentelemetry-instrumentation-google-genai opentelemetry-sdk
       opentelemetry-exporter-otlp-proto-common (the instrumentation, 1.3b0, does not
       load with google-genai 3); content capture on (set here)

No framework: the loop calls ``models.generate_content`` with a function declaration
and automatic function calling off, runs the ``function_call`` parts of the answer
itself (no span for them) and sends ``function_response`` parts back. The model is the
real client over an ``httpx.MockTransport`` that answers in-process. Gemini's function
calls carry no id: the instrumentation names each ``<tool>_<index in its message>``, so
every call of one tool made alone has the same id, ``get_weather_0``.

Scenarios (google_genai_<scenario>.json), inside ``invoke_agent weather_agent``:
  handloop_agent       get_weather asked for 3 times with the same arguments, then the
                       answer
  handloop_tool_error  the same, the first result an error, the others the weather
"""

from __future__ import annotations

import os

from _otlp import Capture, ScriptedTurns

os.environ["OTEL_SEMCONV_STABILITY_OPT_IN"] = "gen_ai_latest_experimental"
os.environ["OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT"] = "SPAN_ONLY"
from google import genai  # noqa: E402
from google.genai import types  # noqa: E402
from opentelemetry.instrumentation.google_genai import GoogleGenAiSdkInstrumentor  # noqa: E402

try:  # google-genai 2 sends through httpx2
    import httpx2 as httpx
except ImportError:  # pragma: no cover
    import httpx

cap = Capture("keelwave-capture-google-genai")
GoogleGenAiSdkInstrumentor().instrument(tracer_provider=cap.provider)
ARGUMENTS = {"city": "Paris", "unit": "celsius"}
TOOL = types.Tool(function_declarations=[types.FunctionDeclaration(
    name="get_weather", description="Current weather for a city.",
    parameters={"type": "object", "properties": {"city": {"type": "string"},
                                                 "unit": {"type": "string"}}},
)])  # fmt: skip
CONFIG = types.GenerateContentConfig(
    tools=[TOOL], automatic_function_calling=types.AutomaticFunctionCallingConfig(disable=True)
)


class Model(ScriptedTurns):
    """The Gemini API's answers."""

    def answer(self, n: int) -> httpx.Response:
        if n < self.TOOL_TURNS:
            parts = [{"functionCall": {"name": "get_weather", "args": ARGUMENTS}}]
        else:
            parts = [{"text": "It is 18 degrees in Paris."}]
        return httpx.Response(200, json={
            "candidates": [{"content": {"role": "model", "parts": parts},
                            "finishReason": "STOP", "index": 0}],
            "usageMetadata": {"promptTokenCount": 100 + 10 * n, "candidatesTokenCount": 20 + n,
                              "totalTokenCount": 120 + 11 * n},
            "modelVersion": "gemini-2.5-flash", "responseId": f"resp-{n}",
        })  # fmt: skip


def agent_loop(fail_at: int | None = None) -> str:
    transport = httpx.MockTransport(Model())
    options = types.HttpOptions(httpx_client=httpx.Client(transport=transport))
    client = genai.Client(api_key="fake", http_options=options)
    contents = [types.Content(role="user", parts=[types.Part(text="Weather in Paris?")])]
    turn = 0
    while True:
        reply = client.models.generate_content(
            model="gemini-2.5-flash", contents=contents, config=CONFIG
        )
        calls = reply.function_calls or []
        if not calls:
            return reply.text or ""
        contents.append(reply.candidates[0].content)
        for call in calls:
            result = (
                {"error": "connection refused"} if turn == fail_at else {"result": "18 degrees"}
            )
            part = types.Part.from_function_response(name=call.name, response=result)
            contents.append(types.Content(role="user", parts=[part]))
        turn += 1


def main() -> None:
    with cap.agent_span("weather_agent"):
        agent_loop()
    cap.save("google_genai_handloop_agent")
    with cap.agent_span("weather_agent"):
        agent_loop(fail_at=0)
    cap.save("google_genai_handloop_tool_error")
    cap.shutdown()


if __name__ == "__main__":
    main()
