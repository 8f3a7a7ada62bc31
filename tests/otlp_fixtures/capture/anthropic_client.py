"""Capture an agent loop of one's own on Anthropic's Messages API: only the Anthropic
client is instrumented (no network).

Run: python tests/otlp_fixtures/capture/anthropic_client.py [openinference|openllmetry|genai]
Needs: anthropic opentelemetry-sdk opentelemetry-exporter-otlp-proto-common and one of
       openinference-instrumentation-anthropic (mode openinference, the default:
       anthropic_client_<scenario>.json), opentelemetry-instrumentation-anthropic
       (OpenLLMetry: anthropic_client_openllmetry_<scenario>.json) or
       opentelemetry-instrumentation-genai-anthropic (OpenTelemetry's own, content
       capture on: anthropic_client_genai_<scenario>.json)

No framework: the loop calls ``messages.create`` with a tool, runs the ``tool_use``
blocks of the answer itself (no span for them) and sends their results back as
``tool_result`` blocks of a user message, as Anthropic's API wants them. The model is
the real Anthropic client over an ``httpx.MockTransport`` that answers in-process.

Scenarios:
  handloop_agent  the loop inside a span marked as an agent (``gen_ai.operation.name``
                  = ``invoke_agent``, ``gen_ai.agent.name`` = ``weather_agent``): the
                  model asks for get_weather with the same arguments three times, then
                  answers
  handloop_tool_error  the same, but the tool fails once (a ``tool_result`` with
                  ``is_error``) and the model answers after it
"""

from __future__ import annotations

try:  # anthropic 2 sends through httpx2
    import httpx2 as httpx
except ImportError:  # pragma: no cover
    import httpx
import json
import os
import sys

from _otlp import Capture, ScriptedTurns
from anthropic import Anthropic

INSTRUMENTATION = sys.argv[1] if len(sys.argv) > 1 else "openinference"
if INSTRUMENTATION == "openinference":
    from openinference.instrumentation.anthropic import AnthropicInstrumentor

    cap = Capture("keelwave-capture-anthropic-client")
    PREFIX = "anthropic_client"
elif INSTRUMENTATION == "openllmetry":
    os.environ["TRACELOOP_TRACE_CONTENT"] = "true"
    from opentelemetry.instrumentation.anthropic import AnthropicInstrumentor

    cap = Capture("keelwave-capture-anthropic-client-openllmetry")
    PREFIX = "anthropic_client_openllmetry"
elif INSTRUMENTATION == "genai":
    # The upstream GenAI instrumentation records content only when told to.
    os.environ["OTEL_SEMCONV_STABILITY_OPT_IN"] = "gen_ai_latest_experimental"
    os.environ["OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT"] = "SPAN_ONLY"
    from opentelemetry.instrumentation.genai.anthropic import AnthropicInstrumentor

    cap = Capture("keelwave-capture-anthropic-client-genai")
    PREFIX = "anthropic_client_genai"
else:
    raise SystemExit(
        f"unknown instrumentation {INSTRUMENTATION!r}: openinference, openllmetry or genai"
    )
AnthropicInstrumentor().instrument(tracer_provider=cap.provider)
ARGUMENTS = {"city": "Paris", "unit": "celsius"}
TOOLS = [{
    "name": "get_weather", "description": "Current weather for a city.",
    "input_schema": {"type": "object", "properties": {"city": {"type": "string"},
                                                      "unit": {"type": "string"}}},
}]  # fmt: skip


class Model(ScriptedTurns):
    """The Messages API's answers."""

    def answer(self, n: int) -> httpx.Response:
        if n < self.TOOL_TURNS:
            content = [
                {"type": "text", "text": "Let me look."},
                {"type": "tool_use", "id": f"toolu_{n}", "name": "get_weather",
                 "input": ARGUMENTS},
            ]  # fmt: skip
            stop = "tool_use"
        else:
            content = [{"type": "text", "text": "It is 18 degrees in Paris."}]
            stop = "end_turn"
        return httpx.Response(200, json={
            "id": f"msg_{n}", "type": "message", "role": "assistant",
            "model": "claude-sonnet-4-5-20250929", "content": content,
            "stop_reason": stop, "stop_sequence": None,
            "usage": {"input_tokens": 100 + 10 * n, "output_tokens": 20 + n},
        })  # fmt: skip


def agent_loop(fail_at: int | None = None) -> str:
    transport = httpx.MockTransport(Model())
    client = Anthropic(api_key="fake", http_client=httpx.Client(transport=transport))
    messages: list[dict] = [{"role": "user", "content": "Weather in Paris?"}]
    turn = 0
    while True:
        reply = client.messages.create(
            model="claude-sonnet-4-5", max_tokens=1024, messages=messages, tools=TOOLS
        )
        uses = [block for block in reply.content if block.type == "tool_use"]
        if not uses:
            return "".join(block.text for block in reply.content if block.type == "text")
        messages.append({"role": "assistant", "content": [b.model_dump() for b in reply.content]})
        results = []
        for use in uses:
            failed = turn == fail_at
            results.append({
                "type": "tool_result", "tool_use_id": use.id,
                "content": "connection refused" if failed else "18 degrees",
                **({"is_error": True} if failed else {}),
            })  # fmt: skip
        messages.append({"role": "user", "content": results})
        turn += 1


def main() -> None:
    with cap.agent_span("weather_agent"):
        agent_loop()
    cap.save(f"{PREFIX}_handloop_agent")
    with cap.agent_span("weather_agent"):
        agent_loop(fail_at=0)
    cap.save(f"{PREFIX}_handloop_tool_error")
    cap.shutdown()
    print(json.dumps({"done": PREFIX}))


if __name__ == "__main__":
    main()
