"""Capture an agent loop of one's own: only the OpenAI client is instrumented (no network).

Run: python tests/otlp_fixtures/capture/openai_client.py [openinference|genai]
Needs: openai opentelemetry-sdk opentelemetry-exporter-otlp-proto-common and
       openinference-instrumentation-openai (mode openinference, the default) or
       opentelemetry-instrumentation-genai-openai (mode genai: OpenTelemetry's own,
       content capture on; it writes openai_client_genai_<scenario>.json)

No framework: the loop calls ``chat.completions.create`` with a tool, runs the tool
calls the model asks for itself (no span for them) and answers. The model is the real
OpenAI client over an ``httpx.MockTransport`` that answers in-process. OpenInference's
OpenAI instrumentor makes one LLM span a call, with the tool calls of its answer.
OpenTelemetry's (mode genai) makes one ``chat <model>`` span (CLIENT) a call, with the
answer in ``gen_ai.output.messages`` (tool-call arguments parsed into an object: the
model's two spaces are gone).

Scenarios:
  handloop_root   the loop inside a plain span of the application's ("weather_agent")
  handloop_agent  the loop inside a span marked as an agent (``gen_ai.operation.name``
                  = ``invoke_agent``, ``gen_ai.agent.name`` = ``weather_agent``)
In both the model asks for get_weather with the same arguments three times, then
answers. (Without any enclosing span each call is a trace, and a run, of its own.)
"""

from __future__ import annotations

try:  # openai 3 sends through httpx2
    import httpx2 as httpx
except ImportError:  # pragma: no cover
    import httpx
import os
import sys

from _otlp import Capture, ScriptedTurns
from openai import OpenAI

INSTRUMENTATION = sys.argv[1] if len(sys.argv) > 1 else "openinference"
if INSTRUMENTATION == "openinference":
    from openinference.instrumentation.openai import OpenAIInstrumentor

    cap = Capture("keelwave-capture-openai-client")
    PREFIX = "openai_client"
elif INSTRUMENTATION == "genai":
    # The upstream GenAI instrumentation records content only when told to.
    os.environ["OTEL_SEMCONV_STABILITY_OPT_IN"] = "gen_ai_latest_experimental"
    os.environ["OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT"] = "SPAN_ONLY"
    from opentelemetry.instrumentation.genai.openai import OpenAIInstrumentor

    cap = Capture("keelwave-capture-openai-client-genai")
    PREFIX = "openai_client_genai"
else:
    raise SystemExit(f"unknown instrumentation {INSTRUMENTATION!r}: openinference or genai")
OpenAIInstrumentor().instrument(tracer_provider=cap.provider)
tracer = cap.provider.get_tracer("hand-written-agent")
ARGUMENTS = '{"city": "Paris",  "unit": "celsius"}'
TOOLS = [{"type": "function", "function": {
    "name": "get_weather",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"},
                                                    "unit": {"type": "string"}}},
}}]  # fmt: skip


class Model(ScriptedTurns):
    """Chat Completions' answers."""

    def answer(self, n: int) -> httpx.Response:
        if n < self.TOOL_TURNS:
            call = {"id": f"call_{n}", "type": "function",
                    "function": {"name": "get_weather", "arguments": ARGUMENTS}}  # fmt: skip
            message = {"role": "assistant", "content": None, "tool_calls": [call]}
            finish = "tool_calls"
        else:
            message = {"role": "assistant", "content": "It is 18 degrees in Paris."}
            finish = "stop"
        return httpx.Response(200, json={
            "id": f"chatcmpl-{n}", "object": "chat.completion", "created": 0,
            "model": "gpt-4o-mini",
            "choices": [{"index": 0, "message": message, "finish_reason": finish}],
            "usage": {"prompt_tokens": 100 + 10 * n, "completion_tokens": 20 + n,
                      "total_tokens": 120 + 11 * n},
        })  # fmt: skip


def agent_loop() -> str:
    transport = httpx.MockTransport(Model())
    client = OpenAI(api_key="fake", http_client=httpx.Client(transport=transport))
    messages: list[dict] = [{"role": "user", "content": "Weather in Paris?"}]
    while True:
        reply = (
            client.chat.completions.create(model="gpt-4o-mini", messages=messages, tools=TOOLS)
            .choices[0]
            .message
        )
        if not reply.tool_calls:
            return reply.content or ""
        messages.append(reply.model_dump(exclude_none=True))
        for call in reply.tool_calls:
            messages.append({"role": "tool", "tool_call_id": call.id, "content": "18 degrees"})


def main() -> None:
    with tracer.start_as_current_span("weather_agent"):
        agent_loop()
    cap.save(f"{PREFIX}_handloop_root")
    with cap.agent_span("weather_agent"):
        agent_loop()
    cap.save(f"{PREFIX}_handloop_agent")
    cap.shutdown()


if __name__ == "__main__":
    main()
