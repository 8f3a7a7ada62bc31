"""Capture a LangGraph ReAct agent through a LangChain instrumentor (no network).

Run: python tests/otlp_fixtures/capture/langgraph_react.py openinference
       needs langgraph langchain-core openinference-instrumentation-langchain
       writes langgraph_<scenario>.json
     python tests/otlp_fixtures/capture/langgraph_react.py openllmetry
       needs langgraph langchain-core opentelemetry-instrumentation-langchain (traceloop)
       writes langgraph_openllmetry_<scenario>.json
     python tests/otlp_fixtures/capture/langgraph_react.py genai
       needs langgraph langchain-core opentelemetry-instrumentation-genai-langchain
       (OpenTelemetry's own, GenAI conventions) writes langgraph_genai_<scenario>.json
All need opentelemetry-sdk opentelemetry-exporter-otlp-proto-common. The
instrumentors each hook LangChain's callbacks: install and run one at a time (the
README's re-run commands use a virtual environment per instrumentation).

The model is langchain-core's FakeMessagesListChatModel, which answers with the next
message of a list; the subclass here adds ``bind_tools`` (create_react_agent needs it)
and picks the answer from the number of tool results in the conversation, so one model
serves any number of runs. Its AIMessages carry ``usage_metadata`` and
``response_metadata`` (model name, finish reason), and the result an ``llm_output``
(model name, token usage), as ChatOpenAI's do; its LangSmith provider is "fake-provider".

Scenarios (one fixture each), all with
``langgraph.prebuilt.create_react_agent``:
  loop              the tool is called three times with the same arguments, one call per
                    model turn, then the model answers
  tool_error        the tool raises; ToolNode's default handler re-raises: the run fails
  tool_error_handled  the same with ToolNode(handle_tool_errors=True): the error goes
                    back to the model as a ToolMessage, and the model answers
  nested            the outer agent's tool invokes an inner ReAct agent
  parallel          one model turn asks for the same tool twice (parallel tool calls)
  step_limit        the loop scenario with recursion_limit=4: create_react_agent stops
                    gracefully ("Sorry, need more steps…"), no exception
  arg_shapes        one turn calls five tools whose arguments take the shapes that
                    OpenInference renders differently in input.value (one string
                    argument, one integer argument, an argument named "input", several
                    arguments, non-ASCII text)
  supervisor        a StateGraph named "supervisor": a plain node, then a ReAct agent
                    "researcher" as a subgraph node (it calls lookup once)
  supervisor_llm    the same, its first node a router that calls the model itself
  interrupt         the tool calls langgraph.types.interrupt() (human in the loop, with a
                    checkpointer): the graph pauses and invoke returns

``python langgraph_react.py INSTRUMENTATION SCENARIO…`` saves only the scenarios named
(every scenario still runs).
"""

from __future__ import annotations

import os
import sys
from typing import Any

from _otlp import Capture
from langchain_core.language_models.fake_chat_models import FakeMessagesListChatModel
from langchain_core.messages import AIMessage, BaseMessage, ToolMessage
from langchain_core.tools import tool
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.errors import GraphRecursionError
from langgraph.graph import END, START, MessagesState, StateGraph
from langgraph.prebuilt import ToolNode, create_react_agent
from langgraph.types import interrupt

INSTRUMENTATION = sys.argv[1] if len(sys.argv) > 1 else "openinference"
ONLY = set(sys.argv[2:])  # scenarios to save (all if none named)
cap = Capture(f"keelwave-capture-langgraph-{INSTRUMENTATION}")
if INSTRUMENTATION == "openinference":
    from openinference.instrumentation.langchain import LangChainInstrumentor

    LangChainInstrumentor().instrument(tracer_provider=cap.provider)
    PREFIX = "langgraph"
elif INSTRUMENTATION == "openllmetry":
    from opentelemetry.instrumentation.langchain import LangchainInstrumentor

    LangchainInstrumentor().instrument(tracer_provider=cap.provider)
    PREFIX = "langgraph_openllmetry"
elif INSTRUMENTATION == "genai":
    # The upstream GenAI instrumentation records content only when told to, and only
    # in the latest GenAI conventions.
    os.environ["OTEL_SEMCONV_STABILITY_OPT_IN"] = "gen_ai_latest_experimental"
    os.environ["OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT"] = "SPAN_ONLY"
    from opentelemetry.instrumentation.genai.langchain import LangChainInstrumentor

    # (It declares a dependency on the langchain package, which LangGraph does not need.)
    LangChainInstrumentor().instrument(tracer_provider=cap.provider, skip_dep_check=True)
    PREFIX = "langgraph_genai"
else:
    raise SystemExit(
        f"unknown instrumentation {INSTRUMENTATION!r}: openinference, openllmetry or genai"
    )


class ScriptedChatModel(FakeMessagesListChatModel):
    """Answer i: the i-th response, where i is the number of ToolMessages so far."""

    model_name: str = "fake-chat-model"

    def bind_tools(self, tools: Any, **kwargs: Any) -> ScriptedChatModel:
        return self

    def _generate(self, messages: list[BaseMessage], stop=None, run_manager=None, **kwargs):
        self.i = min(sum(isinstance(m, ToolMessage) for m in messages), len(self.responses) - 1)
        result = super()._generate(messages, stop=stop, run_manager=run_manager, **kwargs)
        # What ChatOpenAI puts in llm_output (some instrumentations read it, not the message).
        usage = result.generations[0].message.usage_metadata or {}
        result.llm_output = {
            "model_name": result.generations[0].message.response_metadata.get("model_name"),
            "token_usage": {
                "prompt_tokens": usage.get("input_tokens"),
                "completion_tokens": usage.get("output_tokens"),
                "total_tokens": usage.get("total_tokens"),
            },
        }
        return result

    def _get_ls_params(self, stop=None, **kwargs):
        # LangSmith's provider and model fields, which instrumentations read as the provider.
        return {
            **super()._get_ls_params(stop=stop, **kwargs),
            "ls_provider": "fake-provider",
            "ls_model_name": self.model_name,
        }

    @property
    def _identifying_params(self) -> dict[str, Any]:
        return {"model_name": self.model_name}


def call(name: str, args: dict, call_id: str, turn: int) -> AIMessage:
    return AIMessage(
        content="",
        tool_calls=[{"name": name, "args": args, "id": call_id, "type": "tool_call"}],
        usage_metadata={
            "input_tokens": 100 + 10 * turn,
            "output_tokens": 20 + turn,
            "total_tokens": 120 + 11 * turn,
        },
        response_metadata={
            "model_name": "fake-chat-model-2026-01-01",
            "finish_reason": "tool_calls",
        },
    )


def answer(text: str, turn: int) -> AIMessage:
    return AIMessage(
        content=text,
        usage_metadata={
            "input_tokens": 100 + 10 * turn,
            "output_tokens": 20 + turn,
            "total_tokens": 120 + 11 * turn,
        },
        response_metadata={"model_name": "fake-chat-model-2026-01-01", "finish_reason": "stop"},
    )


@tool
def get_weather(city: str, unit: str = "celsius") -> str:
    """Current weather for a city."""
    return f"18 degrees {unit} in {city}"


@tool
def fetch_page(url: str) -> str:
    """Fetch a web page."""
    raise RuntimeError(f"connection refused: {url}")


PARIS = {"city": "Paris", "unit": "celsius"}
loop_model = ScriptedChatModel(
    responses=[call("get_weather", PARIS, f"call_{i}", i) for i in range(3)]
    + [answer("It is 18 degrees in Paris.", 3)]
)
error_model = ScriptedChatModel(
    responses=[
        call("fetch_page", {"url": "https://example.com/"}, "call_0", 0),
        answer("The page could not be fetched.", 1),
    ]
)
inner_model = ScriptedChatModel(
    model_name="fake-inner-model",
    responses=[
        call("lookup", {"term": "keel"}, "inner_call_0", 0),
        answer("A keel is the backbone of a ship.", 1),
    ],
)
outer_model = ScriptedChatModel(
    model_name="fake-outer-model",
    responses=[
        call("ask_researcher", {"question": "What is a keel?"}, "c0", 0),
        answer("Researcher says: a keel is the backbone of a ship.", 1),
    ],
)
parallel_first = AIMessage(
    content="",
    tool_calls=[
        {"name": "get_weather", "args": {"city": "Oslo"}, "id": "p0", "type": "tool_call"},
        {"name": "get_weather", "args": {"city": "Oslo"}, "id": "p1", "type": "tool_call"},
    ],
    usage_metadata={"input_tokens": 100, "output_tokens": 20, "total_tokens": 120},
    response_metadata={"model_name": "fake-chat-model-2026-01-01", "finish_reason": "tool_calls"},
)
parallel_model = ScriptedChatModel(
    responses=[parallel_first, parallel_first, answer("Oslo: 3 degrees.", 2)]
)


@tool
def lookup(term: str) -> str:
    """Look a term up in the encyclopedia."""
    return f"{term}: the structural backbone of a ship"


researcher = create_react_agent(inner_model, [lookup], name="researcher")


@tool
def ask_researcher(question: str) -> str:
    """Ask the research agent."""
    result = researcher.invoke({"messages": [("user", question)]})
    return result["messages"][-1].content


@tool
def search(query: str) -> str:
    """Search the web."""
    return f"results for {query}"


@tool
def square(n: int) -> int:
    """Square a number."""
    return n * n


@tool
def echo(input: dict) -> str:
    """Echo a structured value."""
    return str(input)


def _shapes_call(name: str, args: dict, call_id: str) -> dict:
    return {"name": name, "args": args, "id": call_id, "type": "tool_call"}


shapes_first = AIMessage(
    content="",
    tool_calls=[
        _shapes_call("search", {"query": "keel"}, "s0"),
        _shapes_call("square", {"n": 7}, "s1"),
        _shapes_call("echo", {"input": {"b": [1, 2], "a": None}}, "s2"),
        _shapes_call("get_weather", {"unit": "kelvin", "city": "Zürich"}, "s3"),
        _shapes_call("search", {"query": '{"looks": "like json"}'}, "s4"),
    ],
    usage_metadata={"input_tokens": 100, "output_tokens": 20, "total_tokens": 120},
    response_metadata={"model_name": "fake-chat-model-2026-01-01", "finish_reason": "tool_calls"},
)
shapes_model = ScriptedChatModel(responses=[shapes_first] * 5 + [answer("Done.", 5)])


router_model = ScriptedChatModel(
    model_name="fake-router-model", responses=[answer("Send it to the researcher.", 0)]
)
hitl_model = ScriptedChatModel(
    responses=[call("approve", {"action": "deploy"}, "call_0", 0), answer("Deployed.", 1)]
)


@tool
def approve(action: str) -> str:
    """Ask a human to approve an action."""
    return interrupt({"action": action})


def supervisor_graph(router: bool):
    """A supervisor StateGraph: its first node (plain, or a router calling the model),
    then a ReAct agent as a subgraph node."""
    sub = create_react_agent(inner_model, [lookup], name="researcher")

    def supervise(state: MessagesState) -> dict:
        if router:
            return {"messages": [router_model.invoke([("user", "Who should answer?")])]}
        return {"messages": [("ai", "delegating")]}

    graph = StateGraph(MessagesState)
    graph.add_node("supervise", supervise)
    graph.add_node("researcher", sub)
    graph.add_edge(START, "supervise")
    graph.add_edge("supervise", "researcher")
    graph.add_edge("researcher", END)
    return graph.compile(name="supervisor")


def save(scenario: str) -> None:
    cap.save_scenario(PREFIX, scenario, ONLY)


def main() -> None:
    agent = create_react_agent(
        loop_model, [get_weather], name="weather_agent", prompt="Answer weather questions."
    )
    print(agent.invoke({"messages": [("user", "Weather in Paris?")]})["messages"][-1].content)
    save("loop")

    agent = create_react_agent(error_model, [fetch_page], name="fetch_agent")
    try:
        agent.invoke({"messages": [("user", "Fetch example.com")]})
    except RuntimeError as exc:
        print("run failed as intended:", exc)
    save("tool_error")

    agent = create_react_agent(
        error_model, ToolNode([fetch_page], handle_tool_errors=True), name="fetch_agent"
    )
    print(agent.invoke({"messages": [("user", "Fetch example.com")]})["messages"][-1].content)
    save("tool_error_handled")

    agent = create_react_agent(outer_model, [ask_researcher], name="coordinator")
    print(agent.invoke({"messages": [("user", "What is a keel?")]})["messages"][-1].content)
    save("nested")

    agent = create_react_agent(parallel_model, [get_weather], name="weather_agent")
    print(agent.invoke({"messages": [("user", "Weather in Oslo?")]})["messages"][-1].content)
    save("parallel")

    agent = create_react_agent(loop_model, [get_weather], name="weather_agent")
    try:
        result = agent.invoke({"messages": [("user", "Weather in Paris?")]}, {"recursion_limit": 4})
        print(result["messages"][-1].content)
    except GraphRecursionError as exc:
        print("run failed:", type(exc).__name__)
    save("step_limit")

    agent = create_react_agent(
        shapes_model, [search, square, echo, get_weather], name="shapes_agent"
    )
    print(agent.invoke({"messages": [("user", "Try every tool.")]})["messages"][-1].content)
    save("arg_shapes")

    for router in (False, True):
        result = supervisor_graph(router).invoke({"messages": [("user", "What is a keel?")]})
        print(result["messages"][-1].content)
        save("supervisor_llm" if router else "supervisor")

    agent = create_react_agent(
        hitl_model, [approve], name="hitl_agent", checkpointer=InMemorySaver()
    )
    config = {"configurable": {"thread_id": "t1"}}
    result = agent.invoke({"messages": [("user", "Deploy it.")]}, config)
    print("paused for a human:", result.get("__interrupt__"))
    save("interrupt")
    cap.shutdown()


if __name__ == "__main__":
    main()
