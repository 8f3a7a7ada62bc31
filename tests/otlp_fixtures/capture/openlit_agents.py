"""Capture OpenLIT's auto-instrumentation of agent frameworks (no network).

Run: python tests/otlp_fixtures/capture/openlit_agents.py openaiagents
       needs openlit openai-agents; writes openlit_openaiagents_<scenario>.json
     python tests/otlp_fixtures/capture/openlit_agents.py langgraph
       needs openlit langgraph langchain-openai; writes openlit_langgraph_<scenario>.json
     python tests/otlp_fixtures/capture/openlit_agents.py crewai
       needs openlit crewai (in an environment of its own: it pins other versions);
       writes openlit_crewai_<scenario>.json
All need opentelemetry-sdk opentelemetry-exporter-otlp-proto-common. Each framework
runs in its own process: ``openlit.init()`` instruments every supported package it
finds installed, once per process.

OpenLIT is one package with instrumentations for ~60 libraries, turned on together by
``openlit.init()``. It reuses an SDK TracerProvider that is already the global one, so
the script makes the capture provider global first; it takes ``trace.get_tracer(...)``
from it when it instruments. ``init`` is called with its defaults except: no metrics
(``disable_metrics``), no log-record events (``disable_events``; they are not traces),
and a local empty pricing table (``pricing_json``: by default it downloads one from
GitHub). Content capture (``capture_message_content``) is on by default: tool arguments
and results, messages. Models are the real OpenAI client classes over an
``httpx.MockTransport`` answering from a script, so OpenLIT's OpenAI instrumentation
(which it enables along with the framework's) sees real calls; the token counts follow
the README's convention (turn n: input 100 + 10n, output 20 + n).

openaiagents: OpenLIT replaces the SDK's trace processors with its own
(``set_trace_processors``), which turns the SDK's agent / function / handoff spans into
OTel spans but skips its ``response`` / ``generation`` spans: model calls are the spans
of OpenLIT's OpenAI instrumentation. It also wraps ``Agent.__init__``: every Agent
constructed emits a ``create_agent <name>`` span, a trace of its own. Model:
OpenAIResponsesModel over the faked Responses API.

crewai: OpenLIT wraps Crew.__init__ (create_agent spans), Crew.kickoff (invoke_workflow),
Task._execute_core (invoke_agent <role>), BaseTool.run (execute_tool) and Flow methods;
CrewAI 1.x runs an agent as a Flow (AgentExecutor) whose every step method becomes an
``invoke_agent <method>`` span, and calls native tools without BaseTool.run, so there
are no tool spans. Model: CrewAI's native OpenAI provider (``LLM("openai/...")``) with its
client replaced by one over the fake Chat Completions API. CrewAI's telemetry and trace
upload are turned off (CREWAI_DISABLE_TELEMETRY, CREWAI_DISABLE_TRACKING,
CREWAI_TRACING_ENABLED=false).

langgraph: OpenLIT's LangGraph instrumentation wraps ``Pregel.invoke`` / ``stream`` and
``StateGraph.add_node`` (node functions added *after* ``init`` get spans, so ``init``
comes before any graph is built) and ``compile``; its LangChain instrumentation adds a
callback handler (tools, chat models). Agent: ``langgraph.prebuilt.create_react_agent``
with langchain-openai's ``ChatOpenAI`` over the faked Chat Completions API.

Scenarios (one fixture each):
  loop        agent weather_agent calls get_weather three times with the same arguments
              (the model's string '{"city": "Paris",  "unit": "celsius"}'), one call per
              turn, then answers
  tool_error  the tool raises. Agents SDK and CrewAI: the error goes to the model, which
              answers (run OK). LangGraph: ToolNode's default handler re-raises, the
              run fails
  nested      an outer agent's tool runs an inner agent, which calls its own tool
              (Agents SDK: Agent.as_tool; LangGraph: the tool invokes an inner ReAct agent;
              CrewAI: the tool kicks off an inner crew)
  nested_agent_names  (LangGraph only) the nested scenario with the graphs named
              coordinator_agent / research_agent: OpenLIT's LangChain callback handler
              makes an invoke_agent span for a graph only if its name contains "agent"
  max_turns   the loop cut short. Agents SDK: max_turns=2, MaxTurnsExceeded. LangGraph:
              recursion_limit=4: create_react_agent stops itself ("Sorry, need more
              steps…"), no exception. CrewAI: max_iter=2: after two tool calls CrewAI
              asks the model for a final answer (without tools), run OK
The fake model answers with text whenever a request carries no tools.
"""

from __future__ import annotations

import asyncio
import atexit
import json
import os
import shutil
import sys
import tempfile
from pathlib import Path

import httpx  # openai < 3 (which openlit requires) is built on httpx
import openlit
from _otlp import Capture
from opentelemetry import trace

FRAMEWORK = sys.argv[1] if len(sys.argv) > 1 else "openaiagents"
if FRAMEWORK not in ("openaiagents", "langgraph", "crewai"):
    raise SystemExit(f"unknown framework {FRAMEWORK!r}: openaiagents, langgraph or crewai")
if FRAMEWORK == "crewai":  # CrewAI's own telemetry and trace upload: off
    os.environ["CREWAI_DISABLE_TELEMETRY"] = "true"
    os.environ["CREWAI_DISABLE_TRACKING"] = "true"
    os.environ["CREWAI_TRACING_ENABLED"] = "false"
    _storage = tempfile.mkdtemp(prefix="crewai-")  # its local databases, removed at exit
    os.environ["CREWAI_STORAGE_DIR"] = _storage
    atexit.register(shutil.rmtree, _storage, ignore_errors=True)
PREFIX = f"openlit_{FRAMEWORK}"
cap = Capture(f"keelwave-capture-{FRAMEWORK}-openlit")
trace.set_tracer_provider(cap.provider)  # openlit.init reuses a global SDK provider

# An empty price list of its own: otherwise openlit downloads one.
_pricing_dir = tempfile.mkdtemp(prefix="openlit-")
atexit.register(shutil.rmtree, _pricing_dir, ignore_errors=True)
_pricing = Path(_pricing_dir) / "pricing.json"
_pricing.write_text("{}")
openlit.init(
    service_name=f"keelwave-capture-{FRAMEWORK}-openlit",
    disable_metrics=True,
    disable_events=True,
    pricing_json=str(_pricing),
    capture_message_content=True,
)

# What an OpenAI model sends: the arguments as a JSON string (note the spacing).
LOOP_ARGS = '{"city": "Paris",  "unit": "celsius"}'
BASE_URL = "http://fake-openai.invalid/v1"


def _usage_responses(turn: int) -> dict:
    return {
        "input_tokens": 100 + 10 * turn,
        "output_tokens": 20 + turn,
        "total_tokens": 120 + 11 * turn,
        "input_tokens_details": {"cached_tokens": 0},
        "output_tokens_details": {"reasoning_tokens": 0},
    }


def _usage_chat(turn: int) -> dict:
    return {
        "prompt_tokens": 100 + 10 * turn,
        "completion_tokens": 20 + turn,
        "total_tokens": 120 + 11 * turn,
        "prompt_tokens_details": {"cached_tokens": 0},
    }


# The model scripts: model name -> turn -> ("call", tool, arguments) or ("text", answer),
# where turn is the number of tool results the model has been sent.
def _script(model: str, turn: int) -> tuple[str, str, str]:
    if model == "fake-loop-model":  # asks for the tool forever after 3 in max_turns
        if turn < 3:
            return ("call", "get_weather", LOOP_ARGS)
        return ("text", "It is 18 degrees in Paris.", "")
    if model == "fake-error-model":
        if turn < 1:
            return ("call", "fetch_page", '{"url": "https://example.com/"}')
        return ("text", "The page could not be fetched.", "")
    if model == "fake-outer-model":
        if turn < 1:
            return ("call", "ask_researcher", '{"question": "What is a keel?"}')
        return ("text", "Researcher says: a keel is the backbone of a ship.", "")
    if model == "fake-inner-model":
        if turn < 1:
            return ("call", "lookup", '{"term": "keel"}')
        return ("text", "A keel is the backbone of a ship.", "")
    raise AssertionError(model)


def _responses(body: dict) -> dict:
    items = body["input"] if isinstance(body["input"], list) else []
    turn = sum(i.get("type") == "function_call_output" for i in items)
    kind, a, b = _script(body["model"], turn)
    if kind == "call":
        output = [
            {
                "type": "function_call",
                "id": f"fc_{turn}",
                "call_id": f"call_{a}_{turn}",
                "name": a,
                "arguments": b,
                "status": "completed",
            }
        ]
    else:
        output = [
            {
                "type": "message",
                "id": "msg_final",
                "role": "assistant",
                "status": "completed",
                "content": [{"type": "output_text", "text": a, "annotations": []}],
            }
        ]
    return {
        "id": f"resp_{body['model']}_{turn}",
        "object": "response",
        "created_at": 1764490000,
        "model": body["model"] + "-2026-01-01",
        "status": "completed",
        "parallel_tool_calls": True,
        "tool_choice": "auto",
        "tools": body.get("tools", []),
        "output": output,
        "usage": _usage_responses(turn),
    }


def _chat(body: dict) -> dict:
    turn = sum(m["role"] == "tool" for m in body["messages"])
    kind, a, b = _script(body["model"], turn)
    if kind == "call" and not body.get("tools"):  # asked without tools: it must answer
        kind, a = "text", "I could not finish: no more tool calls allowed."
    if kind == "call":
        message = {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": f"call_{a}_{turn}",
                    "type": "function",
                    "function": {"name": a, "arguments": b},
                }
            ],
        }
        finish = "tool_calls"
    else:
        message = {"role": "assistant", "content": a}
        finish = "stop"
    return {
        "id": f"chatcmpl-{body['model']}-{turn}",
        "object": "chat.completion",
        "created": 1764490000,
        "model": body["model"] + "-2026-01-01",
        "choices": [{"index": 0, "finish_reason": finish, "message": message}],
        "usage": _usage_chat(turn),
    }


def _handle(request: httpx.Request) -> httpx.Response:
    body = json.loads(request.content)
    if request.url.path.endswith("/responses"):
        return httpx.Response(200, json=_responses(body))
    if request.url.path.endswith("/chat/completions"):
        return httpx.Response(200, json=_chat(body))
    return httpx.Response(404, json={"error": {"message": "not faked"}})


# --- OpenAI Agents SDK ---------------------------------------------------------------------


async def openaiagents() -> None:
    from agents import Agent, MaxTurnsExceeded, OpenAIResponsesModel, Runner, function_tool
    from openai import AsyncOpenAI

    client = AsyncOpenAI(
        api_key="sk-fake",
        base_url=BASE_URL,
        http_client=httpx.AsyncClient(transport=httpx.MockTransport(_handle)),
    )

    def model(name: str) -> OpenAIResponsesModel:
        return OpenAIResponsesModel(model=name, openai_client=client)

    @function_tool
    def get_weather(city: str, unit: str = "celsius") -> str:
        """Current weather for a city."""
        return f"18 degrees {unit} in {city}"

    @function_tool
    def fetch_page(url: str) -> str:
        """Fetch a web page."""
        raise RuntimeError(f"connection refused: {url}")

    @function_tool
    def lookup(term: str) -> str:
        """Look a term up in the encyclopedia."""
        return f"{term}: the structural backbone of a ship"

    agent = Agent(name="weather_agent", model=model("fake-loop-model"), tools=[get_weather])
    print((await Runner.run(agent, "Weather in Paris?")).final_output)
    cap.save(f"{PREFIX}_loop")

    agent = Agent(name="fetch_agent", model=model("fake-error-model"), tools=[fetch_page])
    print((await Runner.run(agent, "Fetch example.com")).final_output)
    cap.save(f"{PREFIX}_tool_error")

    researcher = Agent(name="researcher", model=model("fake-inner-model"), tools=[lookup])
    # as_tool's input schema is {"input": str}; the outer model sends "question", so give
    # the tool a parameters model of its own.
    from pydantic import BaseModel

    class Question(BaseModel):
        question: str

    coordinator = Agent(
        name="coordinator",
        model=model("fake-outer-model"),
        tools=[
            researcher.as_tool(
                "ask_researcher",
                "Ask the research agent.",
                parameters=Question,
                input_builder=lambda options: options["params"]["question"],
            )
        ],
    )
    print((await Runner.run(coordinator, "What is a keel?")).final_output)
    cap.save(f"{PREFIX}_nested")

    agent = Agent(name="weather_agent", model=model("fake-loop-model"), tools=[get_weather])
    try:
        await Runner.run(agent, "Weather in Paris?", max_turns=2)
    except MaxTurnsExceeded as exc:
        print("run failed as intended:", type(exc).__name__, exc)
    cap.save(f"{PREFIX}_max_turns")


# --- LangGraph -----------------------------------------------------------------------------


def langgraph() -> None:
    from langchain_core.tools import tool
    from langchain_openai import ChatOpenAI
    from langgraph.errors import GraphRecursionError
    from langgraph.prebuilt import create_react_agent

    http_client = httpx.Client(transport=httpx.MockTransport(_handle))

    def model(name: str) -> ChatOpenAI:
        return ChatOpenAI(model=name, api_key="sk-fake", base_url=BASE_URL, http_client=http_client)

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

    agent = create_react_agent(
        model("fake-loop-model"),
        [get_weather],
        name="weather_agent",
        prompt="Answer weather questions.",
    )
    print(agent.invoke({"messages": [("user", "Weather in Paris?")]})["messages"][-1].content)
    cap.save(f"{PREFIX}_loop")

    agent = create_react_agent(model("fake-error-model"), [fetch_page], name="fetch_agent")
    try:
        agent.invoke({"messages": [("user", "Fetch example.com")]})
    except RuntimeError as exc:
        print("run failed as intended:", exc)
    cap.save(f"{PREFIX}_tool_error")

    researcher = create_react_agent(model("fake-inner-model"), [lookup], name="researcher")

    @tool
    def ask_researcher(question: str) -> str:
        """Ask the research agent."""
        result = researcher.invoke({"messages": [("user", question)]})
        return result["messages"][-1].content

    agent = create_react_agent(model("fake-outer-model"), [ask_researcher], name="coordinator")
    print(agent.invoke({"messages": [("user", "What is a keel?")]})["messages"][-1].content)
    cap.save(f"{PREFIX}_nested")

    # The same with graph names that contain "agent": OpenLIT's LangChain handler makes an
    # invoke_agent span for a graph only then (otherwise the graph is "plumbing", no span).
    research_agent = create_react_agent(model("fake-inner-model"), [lookup], name="research_agent")

    @tool("ask_researcher")
    def ask_research_agent(question: str) -> str:
        """Ask the research agent."""
        result = research_agent.invoke({"messages": [("user", question)]})
        return result["messages"][-1].content

    agent = create_react_agent(
        model("fake-outer-model"), [ask_research_agent], name="coordinator_agent"
    )
    print(agent.invoke({"messages": [("user", "What is a keel?")]})["messages"][-1].content)
    cap.save(f"{PREFIX}_nested_agent_names")

    agent = create_react_agent(model("fake-loop-model"), [get_weather], name="weather_agent")
    try:
        result = agent.invoke({"messages": [("user", "Weather in Paris?")]}, {"recursion_limit": 4})
        print(result["messages"][-1].content)
    except GraphRecursionError as exc:
        print("run failed:", type(exc).__name__)
    cap.save(f"{PREFIX}_max_turns")


# --- CrewAI --------------------------------------------------------------------------------


def crewai() -> None:
    from crewai import LLM, Agent, Crew, Task
    from crewai.tools import tool
    from openai import OpenAI

    def model(name: str) -> LLM:
        llm = LLM(model=f"openai/{name}", api_key="sk-fake", base_url=BASE_URL)
        # CrewAI's native OpenAI provider builds its own client; swap in the faked one.
        llm._client = OpenAI(
            api_key="sk-fake",
            base_url=BASE_URL,
            http_client=httpx.Client(transport=httpx.MockTransport(_handle)),
        )
        return llm

    @tool("get_weather")
    def get_weather(city: str, unit: str = "celsius") -> str:
        """Current weather for a city."""
        return f"18 degrees {unit} in {city}"

    @tool("fetch_page")
    def fetch_page(url: str) -> str:
        """Fetch a web page."""
        raise RuntimeError(f"connection refused: {url}")

    @tool("lookup")
    def lookup(term: str) -> str:
        """Look a term up in the encyclopedia."""
        return f"{term}: the structural backbone of a ship"

    def crew(name: str, llm: LLM, tools: list, question: str, **agent_kw) -> Crew:
        agent = Agent(
            role=name,
            goal="Answer the question.",
            backstory="A helpful agent.",
            llm=llm,
            tools=tools,
            verbose=False,
            **agent_kw,
        )
        task = Task(description=question, expected_output="A short answer.", agent=agent)
        return Crew(agents=[agent], tasks=[task], verbose=False)

    print(
        crew(
            "weather_agent", model("fake-loop-model"), [get_weather], "Weather in Paris?"
        ).kickoff()
    )
    cap.save(f"{PREFIX}_loop")

    try:
        print(
            crew(
                "fetch_agent", model("fake-error-model"), [fetch_page], "Fetch example.com"
            ).kickoff()
        )
    except Exception as exc:
        print("run failed:", type(exc).__name__, exc)
    cap.save(f"{PREFIX}_tool_error")

    @tool("ask_researcher")
    def ask_researcher(question: str) -> str:
        """Ask the research agent."""
        inner = crew("researcher", model("fake-inner-model"), [lookup], question)
        return str(inner.kickoff())

    print(
        crew(
            "coordinator", model("fake-outer-model"), [ask_researcher], "What is a keel?"
        ).kickoff()
    )
    cap.save(f"{PREFIX}_nested")

    try:
        print(
            crew(
                "weather_agent",
                model("fake-loop-model"),
                [get_weather],
                "Weather in Paris?",
                max_iter=2,
            ).kickoff()
        )
    except Exception as exc:
        print("run failed:", type(exc).__name__, exc)
    cap.save(f"{PREFIX}_max_turns")


if __name__ == "__main__":
    if FRAMEWORK == "openaiagents":
        asyncio.run(openaiagents())
    elif FRAMEWORK == "langgraph":
        langgraph()
    else:
        crewai()
    cap.shutdown()
