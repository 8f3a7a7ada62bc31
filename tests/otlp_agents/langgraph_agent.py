"""LangGraph ReAct agents traced by OpenInference's LangChain instrumentor, exported by OTLP.

Run: python tests/otlp_agents/langgraph_agent.py SCENARIO...
with OTEL_EXPORTER_OTLP_* set (see _otel.py). The agents are
``langgraph.prebuilt.create_react_agent`` graphs; the model is a subclass of
langchain-core's FakeMessagesListChatModel that picks its answer by the number of
tool results so far and reports usage as ChatOpenAI does (100 + 10n in, 20 + n out
on turn n, model "gpt-4o-mini-2024-07-18").

Scenarios, each one graph invocation (its own trace):
  loop        weather_agent calls get_weather three times with the same arguments,
              then answers
  nested      coordinator's tool ask_researcher invokes the graph researcher, which
              calls its own tool lookup
  tool_error  fetch_agent's tool raises; ToolNode's default handler re-raises it:
              the invocation fails
"""

from __future__ import annotations

import sys
from typing import Any

from _otel import finish, provider
from langchain_core.language_models.fake_chat_models import FakeMessagesListChatModel
from langchain_core.messages import AIMessage, BaseMessage, ToolMessage
from langchain_core.tools import tool
from langgraph.prebuilt import create_react_agent
from openinference.instrumentation.langchain import LangChainInstrumentor

LangChainInstrumentor().instrument(tracer_provider=provider)
MODEL = "gpt-4o-mini-2024-07-18"


class ScriptedChatModel(FakeMessagesListChatModel):
    """Answer i: the i-th response, where i is the number of ToolMessages so far."""

    model_name: str = "gpt-4o-mini"

    def bind_tools(self, tools: Any, **kwargs: Any) -> ScriptedChatModel:
        return self

    def _generate(self, messages: list[BaseMessage], stop=None, run_manager=None, **kwargs):
        self.i = min(sum(isinstance(m, ToolMessage) for m in messages), len(self.responses) - 1)
        return super()._generate(messages, stop=stop, run_manager=run_manager, **kwargs)

    def _get_ls_params(self, stop=None, **kwargs):
        return {**super()._get_ls_params(stop=stop, **kwargs), "ls_provider": "openai"}


def _usage(turn: int) -> dict:
    return {
        "input_tokens": 100 + 10 * turn,
        "output_tokens": 20 + turn,
        "total_tokens": 120 + 11 * turn,
    }


def call(name: str, args: dict, turn: int) -> AIMessage:
    return AIMessage(
        content="",
        tool_calls=[{"name": name, "args": args, "id": f"call_{turn}", "type": "tool_call"}],
        usage_metadata=_usage(turn),
        response_metadata={"model_name": MODEL, "finish_reason": "tool_calls"},
    )


def answer(text: str, turn: int) -> AIMessage:
    return AIMessage(
        content=text,
        usage_metadata=_usage(turn),
        response_metadata={"model_name": MODEL, "finish_reason": "stop"},
    )


@tool
def get_weather(city: str, unit: str = "celsius") -> str:
    """Current weather for a city."""
    return f"18 degrees {unit} in {city}"


@tool
def fetch_page(url: str) -> str:
    """Fetch a web page."""
    raise RuntimeError(f"connection refused: {url}")


@tool
def lookup(term: str) -> str:
    """Look a term up in the encyclopedia."""
    return f"{term}: the structural backbone of a ship"


PARIS = {"city": "Paris", "unit": "celsius"}
loop_model = ScriptedChatModel(
    responses=[call("get_weather", PARIS, i) for i in range(3)]
    + [answer("It is 18 degrees in Paris.", 3)]
)
inner_model = ScriptedChatModel(
    responses=[call("lookup", {"term": "keel"}, 0), answer("A keel is a ship's backbone.", 1)]
)
outer_model = ScriptedChatModel(
    responses=[
        call("ask_researcher", {"question": "What is a keel?"}, 0),
        answer("Researcher says: a keel is a ship's backbone.", 1),
    ]
)
error_model = ScriptedChatModel(
    responses=[call("fetch_page", {"url": "https://example.com/"}, 0), answer("Failed.", 1)]
)
researcher = create_react_agent(inner_model, [lookup], name="researcher")


@tool
def ask_researcher(question: str) -> str:
    """Ask the research agent."""
    result = researcher.invoke({"messages": [("user", question)]})
    return result["messages"][-1].content


def ask(graph, question: str) -> str:
    return graph.invoke({"messages": [("user", question)]})["messages"][-1].content


def scenario(name: str) -> None:
    if name == "loop":
        print(ask(create_react_agent(loop_model, [get_weather], name="weather_agent"), "Paris?"))
    elif name == "nested":
        coordinator = create_react_agent(outer_model, [ask_researcher], name="coordinator")
        print(ask(coordinator, "What is a keel?"))
    elif name == "tool_error":
        try:
            ask(create_react_agent(error_model, [fetch_page], name="fetch_agent"), "Fetch it")
        except RuntimeError as error:  # ToolNode re-raised it: the invocation failed
            print("fetch_agent failed:", error)
    else:
        raise SystemExit(f"unknown scenario {name!r}")


if __name__ == "__main__":
    for name in sys.argv[1:]:
        scenario(name)
    finish()
