"""Capture Haystack's Agent component through OpenInference (no network).

Run: python tests/otlp_fixtures/capture/haystack_agent.py
Needs: haystack-ai openinference-instrumentation-haystack opentelemetry-sdk
       opentelemetry-exporter-otlp-proto-common
Writes haystack_<scenario>.json.

The agent is ``haystack.components.agents.Agent``; the model is a hand-written chat
generator (a ``@component`` with ``run(messages, tools)``) answering from a script,
with OpenAI-style ``meta`` (model, finish_reason, usage) on its replies: reply *n* of
a generator reports prompt 100 + 10n, completion 20 + n tokens. Each agent has its own
generator. Haystack's tool calls carry their arguments as a dict (the model's JSON
string is parsed by the real generators), so there is no string to pass through.

The instrumentor wraps the ``run`` of every component class registered when it is
called, so it must run *after* the Agent is imported and the generator class defined:
instrumented earlier, Haystack's Agent produces no spans at all.

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

from _otlp import Capture
from haystack import component
from haystack.components.agents import Agent
from haystack.dataclasses import ChatMessage, ToolCall
from haystack.tools import ComponentTool, create_tool_from_function
from openinference.instrumentation.haystack import HaystackInstrumentor

LOOP_ARGS = {"city": "Paris", "unit": "celsius"}


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


cap = Capture("keelwave-capture-haystack-openinference")
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
    generator = ScriptedChatGenerator(
        "fake-loop-model",
        [("get_weather", LOOP_ARGS)] * 3 + [(None, "It is 18 degrees in Paris.")],
    )
    run(Agent(chat_generator=generator, tools=[weather_tool]), "Weather in Paris?")
    cap.save("haystack_loop")

    generator = ScriptedChatGenerator(
        "fake-error-model",
        [
            ("fetch_page", {"url": "https://example.com/"}),
            (None, "The page could not be fetched."),
        ],
    )
    run(Agent(chat_generator=generator, tools=[fetch_tool]), "Fetch example.com")
    cap.save("haystack_tool_error")

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
    generator = ScriptedChatGenerator(
        "fake-outer-model",
        [("ask_researcher", question), (None, "Researcher says: a keel is a backbone.")],
    )
    run(Agent(chat_generator=generator, tools=[ask_researcher]), "What is a keel?")
    cap.save("haystack_nested")

    generator = ScriptedChatGenerator(
        "fake-loop-model",
        [("get_weather", LOOP_ARGS)] * 3 + [(None, "It is 18 degrees in Paris.")],
    )
    agent = Agent(chat_generator=generator, tools=[weather_tool], max_agent_steps=3)
    run(agent, "Weather in Paris?")
    cap.save("haystack_step_limit")
    cap.shutdown()


if __name__ == "__main__":
    main()
