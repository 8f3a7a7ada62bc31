"""Capture Haystack's Agent component through OpenInference or OpenLLMetry (no network).

Run: python tests/otlp_fixtures/capture/haystack_agent.py [openinference|openllmetry]
Needs: haystack-ai opentelemetry-sdk opentelemetry-exporter-otlp-proto-common and
       openinference-instrumentation-haystack (mode openinference, the default) or
       opentelemetry-instrumentation-haystack (mode openllmetry)
Writes haystack_<scenario>.json (OpenInference) or haystack_openllmetry_<scenario>.json.

The agent is ``haystack.components.agents.Agent``; the model is a hand-written chat
generator (a ``@component`` with ``run(messages, tools)``) answering from a script,
with OpenAI-style ``meta`` (model, finish_reason, usage) on its replies: reply *n* of
a generator reports prompt 100 + 10n, completion 20 + n tokens. Each agent has its own
generator. Haystack's tool calls carry their arguments as a dict (the model's JSON
string is parsed by the real generators), so there is no string to pass through.

The instrumentor wraps the ``run`` of every component class registered when it is
called, so it must run *after* the Agent is imported and the generator class defined:
instrumented earlier, Haystack's Agent produces no spans at all.

OpenLLMetry's instrumentor wraps only ``Pipeline.run`` and the ``run`` of Haystack's
``OpenAIGenerator`` / ``OpenAIChatGenerator``: a hand-written generator would give no
span at all, so mode openllmetry uses the real ``OpenAIChatGenerator`` over an
``httpx.MockTransport`` (``http_client_kwargs``) answering Chat Completions from the same
script (this instrumentor version must be given only the wrap targets that exist in
Haystack 3: see below), the loop's arguments as the string ``{"city": "Paris",  "unit": "celsius"}``
(two spaces), with the same token counts. The Agent is run directly (no Pipeline), as
in the other mode. Mode openllmetry makes loop, tool_error and step_limit.

Scenarios (one fixture each):
  loop        the tool is called three times with the same arguments, one call per
              model turn, then the model answers
  tool_error  the tool raises; the Agent sends the error to the model as a tool
              result (raise_on_tool_invocation_failure=False, the default), which
              answers
  nested      the outer agent's tool is an inner Agent wrapped as a ComponentTool,
              which calls its own tool
  step_limit  the loop with max_agent_steps=3: the Agent stops without an answer and
              says so in its exit_reason (no error)
"""

from __future__ import annotations

import json
import sys

import httpx
from _otlp import Capture
from haystack import component
from haystack.components.agents import Agent
from haystack.dataclasses import ChatMessage, ToolCall
from haystack.tools import ComponentTool, create_tool_from_function

INSTRUMENTATION = sys.argv[1] if len(sys.argv) > 1 else "openinference"
if INSTRUMENTATION == "openinference":
    from openinference.instrumentation.haystack import HaystackInstrumentor

    PREFIX = "haystack"
elif INSTRUMENTATION == "openllmetry":
    import importlib.util

    import opentelemetry.instrumentation.haystack as openllmetry_haystack
    from opentelemetry.instrumentation.haystack import HaystackInstrumentor

    # This version also wraps haystack.components.generators.openai.OpenAIGenerator, a
    # module Haystack 3 no longer has: instrument() raises TargetModuleNotFoundError and
    # wraps nothing. Keep only the targets that exist (OpenAIChatGenerator, Pipeline).
    openllmetry_haystack.WRAPPED_METHODS[:] = [
        m for m in openllmetry_haystack.WRAPPED_METHODS if importlib.util.find_spec(m["package"])
    ]
    PREFIX = "haystack_openllmetry"
else:
    raise SystemExit(f"unknown instrumentation {INSTRUMENTATION!r}: openinference or openllmetry")

LOOP_ARGS = {"city": "Paris", "unit": "celsius"}
LOOP_ARGUMENTS = '{"city": "Paris",  "unit": "celsius"}'  # the model's string (two spaces)


@component
class ScriptedChatGenerator:
    """A chat generator answering from a script: (tool name, arguments) or (None, text)."""

    def __init__(self, model: str, script: list[tuple[str | None, object]]) -> None:
        self.model = model
        self.script = list(script)
        self.turn = 0

    @component.output_types(replies=list[ChatMessage])
    def run(self, messages: list[ChatMessage], tools=None, **kwargs):
        turn = self.turn
        self.turn += 1
        tool, value = self.script[min(turn, len(self.script) - 1)]
        meta = {
            "model": self.model,
            "index": 0,
            "finish_reason": "tool_calls" if tool else "stop",
            "usage": {
                "prompt_tokens": 100 + 10 * turn,
                "completion_tokens": 20 + turn,
                "total_tokens": 120 + 11 * turn,
            },
        }
        if tool:
            call = ToolCall(tool_name=tool, arguments=value, id=f"call_{tool}_{turn}")
            reply = ChatMessage.from_assistant(tool_calls=[call], meta=meta)
        else:
            reply = ChatMessage.from_assistant(text=value, meta=meta)
        return {"replies": [reply]}


class ScriptedChatAPI:
    """A Chat Completions endpoint answering from the same kind of script (mode openllmetry)."""

    def __init__(self, model: str, script: list[tuple[str | None, object]]) -> None:
        self.model = model
        self.script = list(script)
        self.turn = 0

    def __call__(self, request: httpx.Request) -> httpx.Response:
        turn = self.turn
        self.turn += 1
        tool, value = self.script[min(turn, len(self.script) - 1)]
        if tool:
            arguments = LOOP_ARGUMENTS if value == LOOP_ARGS else json.dumps(value)
            call = {"id": f"call_{tool}_{turn}", "type": "function",
                    "function": {"name": tool, "arguments": arguments}}  # fmt: skip
            message = {"role": "assistant", "content": None, "tool_calls": [call]}
        else:
            message = {"role": "assistant", "content": value}
        return httpx.Response(200, json={
            "id": f"chatcmpl-{turn}", "object": "chat.completion", "created": 0,
            "model": self.model,
            "choices": [{"index": 0, "message": message,
                         "finish_reason": "tool_calls" if tool else "stop"}],
            "usage": {"prompt_tokens": 100 + 10 * turn, "completion_tokens": 20 + turn,
                      "total_tokens": 120 + 11 * turn},
        })  # fmt: skip


def make_generator(model: str, script: list[tuple[str | None, object]]):
    if INSTRUMENTATION == "openinference":
        return ScriptedChatGenerator(model, script)
    from haystack.components.generators.chat import OpenAIChatGenerator
    from haystack.utils import Secret

    transport = httpx.MockTransport(ScriptedChatAPI(model, script))
    return OpenAIChatGenerator(
        api_key=Secret.from_token("fake"),
        model=model,
        http_client_kwargs={"transport": transport},
    )


cap = Capture(f"keelwave-capture-haystack-{INSTRUMENTATION}")
HaystackInstrumentor().instrument(tracer_provider=cap.provider)  # after the classes exist


# --- tools -------------------------------------------------------------------------------


def get_weather(city: str, unit: str = "celsius") -> str:
    """Current weather for a city."""
    return f"18 degrees {unit} in {city}"


def fetch_page(url: str) -> str:
    """Fetch a web page."""
    raise RuntimeError(f"connection refused: {url}")


def lookup(term: str) -> str:
    """Look a term up in the encyclopedia."""
    return f"{term}: the backbone of a ship."


weather_tool = create_tool_from_function(get_weather)
fetch_tool = create_tool_from_function(fetch_page)
lookup_tool = create_tool_from_function(lookup)


def run(agent: Agent, question: str) -> None:
    agent.warm_up()
    result = agent.run(messages=[ChatMessage.from_user(question)])
    print(repr(result["messages"][-1].text), "exit_reason:", result.get("exit_reason"))


# --- scenarios -----------------------------------------------------------------------------


def main() -> None:
    generator = make_generator(
        "fake-loop-model",
        [("get_weather", LOOP_ARGS)] * 3 + [(None, "It is 18 degrees in Paris.")],
    )
    run(Agent(chat_generator=generator, tools=[weather_tool]), "Weather in Paris?")
    cap.save(f"{PREFIX}_loop")

    generator = make_generator(
        "fake-error-model",
        [
            ("fetch_page", {"url": "https://example.com/"}),
            (None, "The page could not be fetched."),
        ],
    )
    run(Agent(chat_generator=generator, tools=[fetch_tool]), "Fetch example.com")
    cap.save(f"{PREFIX}_tool_error")

    if INSTRUMENTATION == "openinference":  # (mode openllmetry: no nested scenario)
        nested()

    generator = make_generator(
        "fake-loop-model",
        [("get_weather", LOOP_ARGS)] * 3 + [(None, "It is 18 degrees in Paris.")],
    )
    agent = Agent(chat_generator=generator, tools=[weather_tool], max_agent_steps=3)
    run(agent, "Weather in Paris?")
    cap.save(f"{PREFIX}_step_limit")
    cap.shutdown()


def nested() -> None:
    researcher = Agent(
        chat_generator=ScriptedChatGenerator(
            "fake-inner-model",
            [("lookup", {"term": "keel"}), (None, "A keel is a ship's backbone.")],
        ),
        tools=[lookup_tool],
    )
    ask_researcher = ComponentTool(
        component=researcher, name="ask_researcher", description="Ask the research agent."
    )
    question = {"messages": [{"role": "user", "content": [{"text": "What is a keel?"}]}]}
    generator = make_generator(
        "fake-outer-model",
        [("ask_researcher", question), (None, "Researcher says: a keel is a backbone.")],
    )
    run(Agent(chat_generator=generator, tools=[ask_researcher]), "What is a keel?")
    cap.save(f"{PREFIX}_nested")


if __name__ == "__main__":
    main()
