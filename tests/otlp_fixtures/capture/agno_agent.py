"""Capture Agno agents with two instrumentations (no network).

Run: python tests/otlp_fixtures/capture/agno_agent.py {openllmetry|genai}
Needs: agno opentelemetry-sdk opentelemetry-exporter-otlp-proto-common and
       openllmetry: opentelemetry-instrumentation-agno
       genai:       opentelemetry-instrumentation-genai-agno

- ``openllmetry``: OpenLLMetry's (traceloop) ``AgnoInstrumentor``, which wraps
  ``Agent.run``/``arun``, ``Team.run``/``arun`` and ``FunctionCall.execute``/``aexecute``:
  agno_openllmetry_<scenario>.json;
- ``genai``: OpenTelemetry's own ``opentelemetry-instrumentation-genai-agno`` (GenAI
  conventions through ``opentelemetry-util-genai``), content capture on
  (``OTEL_SEMCONV_STABILITY_OPT_IN=gen_ai_latest_experimental``,
  ``OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT=SPAN_ONLY``, set by the script):
  agno_genai_<scenario>.json.

Neither instrumentation wraps the model classes (a real deployment adds the provider
SDK's instrumentation for model spans), so the model here is a hand-written
``agno.models.base.Model`` answering from a script, by the number of tool results in
the conversation: a text answer or OpenAI-style tool calls with the arguments as a
JSON string, and the README's token counts in ``response_usage``.

Scenarios:
  loop        the tool is called three times with the same arguments, one call per
              model turn, then the model answers
  tool_error  the tool raises; Agno sends the error to the model as the tool result,
              and the model answers
  nested      a Team (``coordinator``) whose leader delegates to its member agent
              ``weather_expert`` (``delegate_task_to_member``), which calls its own tool
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass

INSTRUMENTATION = sys.argv[1] if len(sys.argv) > 1 else "openllmetry"
if INSTRUMENTATION == "genai":
    os.environ["OTEL_SEMCONV_STABILITY_OPT_IN"] = "gen_ai_latest_experimental"
    os.environ["OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT"] = "SPAN_ONLY"
os.environ.setdefault("AGNO_TELEMETRY", "false")  # Agno's own usage ping: no network

from _otlp import Capture  # noqa: E402
from opentelemetry import trace  # noqa: E402

cap = Capture(f"keelwave-capture-agno-{INSTRUMENTATION}")
trace.set_tracer_provider(cap.provider)
if INSTRUMENTATION == "openllmetry":
    from opentelemetry.instrumentation.agno import AgnoInstrumentor
elif INSTRUMENTATION == "genai":
    from opentelemetry.instrumentation.genai.agno import AgnoInstrumentor
else:
    raise SystemExit(f"unknown instrumentation {INSTRUMENTATION!r}")
AgnoInstrumentor().instrument(tracer_provider=cap.provider)
PREFIX = f"agno_{INSTRUMENTATION}"

from agno.agent import Agent  # noqa: E402
from agno.metrics import MessageMetrics  # noqa: E402
from agno.models.base import Model  # noqa: E402
from agno.models.response import ModelResponse  # noqa: E402
from agno.team import Team  # noqa: E402

# What an OpenAI-style model sends: the arguments as a JSON string (note the spacing).
LOOP_ARGS = '{"city": "Paris",  "unit": "celsius"}'

SCRIPTS = {
    "fake-loop-model": [("get_weather", LOOP_ARGS)] * 3 + [(None, "It is 18 degrees in Paris.")],
    "fake-error-model": [
        ("fetch_page", '{"url": "https://example.com/"}'),
        (None, "The page could not be fetched."),
    ],
    "fake-outer-model": [
        (
            "delegate_task_to_member",
            '{"member_id": "weather_expert", "task": "weather in Oslo"}',
        ),
        (None, "Pack a coat: Oslo is 3 degrees."),
    ],
    "fake-inner-model": [("get_weather", '{"city": "Oslo"}'), (None, "Oslo: 3 degrees and sunny.")],
}


@dataclass
class ScriptedModel(Model):
    """Answers turn n of SCRIPTS[id], n being the tool results in the conversation."""

    name: str = "ScriptedModel"
    provider: str = "fake-provider"

    def _respond(self, messages) -> ModelResponse:
        turn = sum(1 for m in messages if m.role == "tool")
        script = SCRIPTS[self.id]
        tool, payload = script[min(turn, len(script) - 1)]
        response = ModelResponse(role="assistant")
        if tool is None:
            response.content = payload
        else:
            response.tool_calls = [
                {
                    "id": f"call_{turn}",
                    "type": "function",
                    "function": {"name": tool, "arguments": payload},
                }
            ]
        response.response_usage = MessageMetrics(
            input_tokens=100 + 10 * turn, output_tokens=20 + turn, total_tokens=120 + 11 * turn
        )
        return response

    def invoke(self, messages, assistant_message, *args, **kwargs) -> ModelResponse:
        return self._respond(messages)

    async def ainvoke(self, messages, assistant_message, *args, **kwargs) -> ModelResponse:
        return self._respond(messages)

    def invoke_stream(self, messages, assistant_message, *args, **kwargs):
        yield self._respond(messages)

    async def ainvoke_stream(self, messages, assistant_message, *args, **kwargs):
        yield self._respond(messages)

    def _parse_provider_response(self, response, **kwargs) -> ModelResponse:
        return response

    def _parse_provider_response_delta(self, response) -> ModelResponse:
        return response


def get_weather(city: str, unit: str = "celsius") -> str:
    """Current weather for a city.

    Args:
        city: The city.
        unit: celsius or fahrenheit.
    """
    return f"18 degrees {unit} in {city}"


def fetch_page(url: str) -> str:
    """Fetch a web page.

    Args:
        url: The address.
    """
    raise RuntimeError(f"connection refused: {url}")


def main() -> None:
    agent = Agent(
        name="weather_agent",
        model=ScriptedModel(id="fake-loop-model"),
        instructions="Answer weather questions.",
        tools=[get_weather],
    )
    print(agent.run("Weather in Paris?").content)
    cap.save(f"{PREFIX}_loop")

    model = ScriptedModel(id="fake-error-model")
    agent = Agent(name="fetch_agent", model=model, tools=[fetch_page])
    print(agent.run("Fetch example.com").content)
    cap.save(f"{PREFIX}_tool_error")

    expert = Agent(
        id="weather_expert",
        name="weather_expert",
        role="Knows the weather.",
        model=ScriptedModel(id="fake-inner-model"),
        tools=[get_weather],
    )
    team = Team(
        name="coordinator",
        model=ScriptedModel(id="fake-outer-model"),
        members=[expert],
        instructions="Plan trips.",
    )
    print(team.run("Plan a trip to Oslo").content)
    cap.save(f"{PREFIX}_nested")
    cap.shutdown()


if __name__ == "__main__":
    main()
