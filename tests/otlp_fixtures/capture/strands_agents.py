"""Capture Strands Agents' built-in OpenTelemetry tracing (no network).

Run: python tests/otlp_fixtures/capture/strands_agents.py
Needs: strands-agents opentelemetry-sdk opentelemetry-exporter-otlp-proto-common

Strands traces itself (no instrumentor): its tracer takes the *global* tracer
provider, so this script sets it. The event loop opens the model-call span whatever
the model class, so the model here is a hand-written ``strands.models.Model`` that
streams Bedrock-style events (messageStart, contentBlock…, messageStop, metadata with
usage) from a script, by the number of tool results in the conversation.

Strands has two attribute dialects: the default, and the newer GenAI conventions
chosen with OTEL_SEMCONV_STABILITY_OPT_IN=gen_ai_latest_experimental. Both are
captured: strands_<scenario>.json and strands_latest_<scenario>.json.

``python strands_agents.py openinference`` (run on its own, in an environment with
openinference-instrumentation-strands-agents) makes strands_openinference_<scenario>.json:
the default dialect's spans rewritten by OpenInference's
``StrandsAgentsToOpenInferenceProcessor``, which runs before the exporter's processor.

Scenarios:
  loop        the tool is called three times with the same arguments, one call per
              model turn, then the model answers
  tool_error  the tool raises; Strands returns an error tool result to the model,
              which then answers
  nested      the outer agent's tool runs an inner agent, which calls its own tool
  swarm       a Swarm of two agents: triage hands off to expert with Strands' own
              ``handoff_to_agent`` tool (its target in the ``agent_name`` argument);
              expert calls its tool and answers
  max_tokens  the tool is called once; the model's next answer stops at its token
              limit (stop reason ``max_tokens``): Strands raises
              MaxTokensReachedException, which fails the run

``python strands_agents.py DIALECT SCENARIO…`` makes only those scenarios.
"""

from __future__ import annotations

import os
import subprocess
import sys

DIALECT = sys.argv[1] if len(sys.argv) > 1 else None
ONLY = set(sys.argv[2:])  # scenarios to make (all if none named)
if DIALECT is None:  # run both dialects, each in a fresh process (the env is read once)
    for dialect in ("default", "latest"):
        subprocess.run([sys.executable, __file__, dialect], check=True)
    raise SystemExit(0)
if DIALECT == "latest":
    os.environ["OTEL_SEMCONV_STABILITY_OPT_IN"] = "gen_ai_latest_experimental"

from _otlp import Capture  # noqa: E402
from opentelemetry import trace  # noqa: E402
from strands import Agent, tool  # noqa: E402
from strands.models.model import Model  # noqa: E402
from strands.multiagent import Swarm  # noqa: E402
from strands.types.exceptions import MaxTokensReachedException  # noqa: E402

cap = Capture(f"keelwave-capture-strands-{DIALECT}")
if DIALECT == "openinference":
    # The processor mutates spans as they end: it must run before the exporter's.
    from openinference.instrumentation.strands_agents import (
        StrandsAgentsToOpenInferenceProcessor,
    )

    processors = cap.provider._active_span_processor
    processors._span_processors = (
        StrandsAgentsToOpenInferenceProcessor(),
        *processors._span_processors,
    )
trace.set_tracer_provider(cap.provider)
PREFIX = {"default": "strands", "latest": "strands_latest"}.get(DIALECT, f"strands_{DIALECT}")

# What a model streams: the tool input as a JSON string (note the spacing).
LOOP_ARGS = '{"city": "Paris",  "unit": "celsius"}'

SCRIPTS = {
    "fake-loop-model": [("get_weather", LOOP_ARGS)] * 3 + [(None, "It is 18 degrees in Paris.")],
    "fake-error-model": [
        ("fetch_page", '{"url": "https://example.com/"}'),
        (None, "The page could not be fetched."),
    ],
    "fake-outer-model": [
        ("ask_researcher", '{"question": "What is a keel?"}'),
        (None, "Researcher says: a keel is a backbone."),
    ],
    "fake-inner-model": [("lookup", '{"term": "keel"}'), (None, "A keel is a ship's backbone.")],
    "fake-triage-model": [
        ("handoff_to_agent", '{"agent_name": "expert", "message": "please answer"}'),
        (None, "Handed over."),
    ],
    "fake-expert-model": [("lookup", '{"term": "keel"}'), (None, "A keel is a ship's backbone.")],
    # (a third item: the answer's stop reason, end_turn if none)
    "fake-truncated-model": [
        ("lookup", '{"term": "keel"}'),
        (None, "A keel is the long structural member alo", "max_tokens"),
    ],
}


class ScriptedModel(Model):
    """A Strands model streaming SCRIPTS[model_id][number of tool results so far]."""

    def __init__(self, model_id: str) -> None:
        self.config = {"model_id": model_id}

    def update_config(self, **model_config) -> None:
        self.config.update(model_config)

    def get_config(self):
        return self.config

    async def structured_output(self, output_model, prompt, system_prompt=None, **kwargs):
        raise NotImplementedError
        yield

    async def stream(self, messages, tool_specs=None, system_prompt=None, **kwargs):
        turn = sum("toolResult" in block for m in messages for block in m["content"])
        script = SCRIPTS[self.config["model_id"]]
        name, payload, *stop = script[min(turn, len(script) - 1)]
        yield {"messageStart": {"role": "assistant"}}
        if name is None:
            yield {"contentBlockStart": {"start": {}}}
            yield {"contentBlockDelta": {"delta": {"text": payload}}}
            yield {"contentBlockStop": {}}
            yield {"messageStop": {"stopReason": stop[0] if stop else "end_turn"}}
        else:
            start = {"toolUse": {"name": name, "toolUseId": f"tooluse_{turn}"}}
            yield {"contentBlockStart": {"start": start}}
            yield {"contentBlockDelta": {"delta": {"toolUse": {"input": payload}}}}
            yield {"contentBlockStop": {}}
            yield {"messageStop": {"stopReason": "tool_use"}}
        usage = {
            "inputTokens": 100 + 10 * turn,
            "outputTokens": 20 + turn,
            "totalTokens": 120 + 11 * turn,
        }
        yield {"metadata": {"usage": usage, "metrics": {"latencyMs": 5}}}


@tool
def get_weather(city: str, unit: str = "celsius") -> str:
    """Current weather for a city.

    Args:
        city: The city.
        unit: celsius or fahrenheit.
    """
    return f"18 degrees {unit} in {city}"


@tool
def fetch_page(url: str) -> str:
    """Fetch a web page.

    Args:
        url: The address.
    """
    raise RuntimeError(f"connection refused: {url}")


@tool
def lookup(term: str) -> str:
    """Look a term up in the encyclopedia.

    Args:
        term: The term.
    """
    return f"{term}: the structural backbone of a ship"


@tool
def ask_researcher(question: str) -> str:
    """Ask the research agent.

    Args:
        question: The question.
    """
    inner = Agent(
        model=ScriptedModel("fake-inner-model"),
        tools=[lookup],
        name="researcher",
        callback_handler=None,
    )
    return str(inner(question))


def loop() -> None:
    agent = Agent(
        model=ScriptedModel("fake-loop-model"),
        tools=[get_weather],
        name="weather_agent",
        system_prompt="Answer weather questions.",
        callback_handler=None,
    )
    print(agent("Weather in Paris?"))


def tool_error() -> None:
    agent = Agent(
        model=ScriptedModel("fake-error-model"),
        tools=[fetch_page],
        name="fetch_agent",
        callback_handler=None,
    )
    print(agent("Fetch example.com"))


def nested() -> None:
    agent = Agent(
        model=ScriptedModel("fake-outer-model"),
        tools=[ask_researcher],
        name="coordinator",
        callback_handler=None,
    )
    print(agent("What is a keel?"))


def swarm() -> None:
    triage = Agent(model=ScriptedModel("fake-triage-model"), name="triage", callback_handler=None)
    expert = Agent(
        model=ScriptedModel("fake-expert-model"),
        tools=[lookup],
        name="expert",
        callback_handler=None,
    )
    print(Swarm([triage, expert])("What is a keel?").status)


def max_tokens() -> None:
    agent = Agent(
        model=ScriptedModel("fake-truncated-model"),
        tools=[lookup],
        name="truncated_agent",
        callback_handler=None,
    )
    try:
        print(agent("What is a keel?"))
    except MaxTokensReachedException as error:
        print("stopped:", error)


SCENARIOS = {"loop": loop, "tool_error": tool_error, "nested": nested, "swarm": swarm,
             "max_tokens": max_tokens}  # fmt: skip


def main() -> None:
    for scenario, run in SCENARIOS.items():
        if ONLY and scenario not in ONLY:
            continue
        run()
        cap.save(f"{PREFIX}_{scenario}")
    cap.shutdown()


if __name__ == "__main__":
    main()
