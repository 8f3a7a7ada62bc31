"""Capture MLflow Tracing's OTLP export: MLflow's autologging and ``@mlflow.trace`` (no network).

Run: python tests/otlp_fixtures/capture/mlflow_tracing.py FRAMEWORK [genai]
  FRAMEWORK  openaiagents  the OpenAI Agents SDK with ``mlflow.openai.autolog()``
                           (the SDK's real OpenAIResponsesModel over a faked HTTP API)
             handloop      a hand-written loop over the OpenAI client with
                           ``mlflow.openai.autolog()``, the loop a function decorated
                           ``@mlflow.trace(span_type="AGENT")``, each tool one decorated
                           ``@mlflow.trace(span_type="TOOL")``
             langgraph     LangGraph's ``create_react_agent`` with ``mlflow.langchain.autolog()``
                           and langchain-openai's ChatOpenAI over a faked HTTP API
  genai      MLFLOW_ENABLE_OTEL_GENAI_SEMCONV=true: MLflow rewrites each span as it ends
             into the GenAI conventions (``gen_ai.operation.name``, ``execute_tool <tool>``…)
             and drops its ``mlflow.*`` attributes
Writes mlflow_<framework>_<scenario>.json, or mlflow_genai_<framework>_<scenario>.json.
Needs: mlflow-tracing (or mlflow), openai (and openai-agents for openaiagents; langgraph,
       langchain-core and langchain-openai for langgraph), opentelemetry-sdk and
       opentelemetry-exporter-otlp-proto-common. Each FRAMEWORK (and mode) in its own
       process: MLflow sets up its tracer provider once, and autologging patches for good.

How the spans get here. MLflow traces with a tracer provider of its own (not the global
one). With OTEL_EXPORTER_OTLP_TRACES_ENDPOINT set, that provider's only span processor is
MLflow's ``OtelSpanProcessor`` (a BatchSpanProcessor that adds MLflow's trace bookkeeping),
and its exporter comes from ``mlflow.tracing.provider.get_otlp_exporter()``; the script
sets the endpoint (an unresolvable ``.invalid`` host) and replaces that factory with one
returning the capture's InMemorySpanExporter, so the spans, resource and scope are
exactly what MLflow would send to a collector, and nothing is sent. No tracking server:
with an OTLP endpoint MLflow writes no trace to a tracking store; MLFLOW_TRACKING_URI
points at an empty temporary folder only so that MLflow does not look for ./mlruns
(which needs the full mlflow package), and MLflow's usage telemetry is off.

Fake models: the model call of turn n (0-based, in its agent) reports input 100 + 10n,
output 20 + n tokens; the loop's arguments are '{"city": "Paris",  "unit": "celsius"}'.

Scenarios (one fixture each):
  loop              (all) get_weather called three times with the same arguments, one
                    call per model turn, then the model answers
  tool_error        (all) the tool raises RuntimeError. openaiagents: the SDK's default
                    failure_error_function sends the error to the model, which answers;
                    handloop: the loop catches it and sends it to the model, which
                    answers; langgraph: ToolNode's default handler re-raises, the run fails
  tool_error_fatal  (openaiagents, handloop) the tool's exception ends the run
                    (openaiagents: failure_error_function=None)
  nested            (all) the outer agent's tool runs an inner agent, which calls its own
                    tool (openaiagents: Agent.as_tool)
  handoff           (openaiagents) a triage agent hands off to a specialist, which calls
                    a tool
  max_turns         (openaiagents) the loop cut by max_turns=2: MaxTurnsExceeded
  step_limit        (langgraph) the loop with recursion_limit=4: create_react_agent stops
                    itself ("Sorry, need more steps…"), no error
"""

from __future__ import annotations

import asyncio
import atexit
import json
import os
import shutil
import sys
import tempfile

FRAMEWORK = sys.argv[1] if len(sys.argv) > 1 else "openaiagents"
GENAI = len(sys.argv) > 2 and sys.argv[2] == "genai"
if FRAMEWORK not in ("openaiagents", "handloop", "langgraph") or sys.argv[2:] not in (
    [],
    ["genai"],
):
    raise SystemExit(
        f"usage: {sys.argv[0]} openaiagents|handloop|langgraph [genai] (got {sys.argv[1:]})"
    )
PREFIX = f"mlflow_genai_{FRAMEWORK}" if GENAI else f"mlflow_{FRAMEWORK}"

# Before mlflow is imported: where MLflow would send its spans, and nothing else.
os.environ["OTEL_SERVICE_NAME"] = f"keelwave-capture-mlflow-{FRAMEWORK}" + (
    "-genai" if GENAI else ""
)
os.environ["OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"] = "http://otlp-collector.invalid:4318/v1/traces"
os.environ["OTEL_EXPORTER_OTLP_TRACES_PROTOCOL"] = "http/protobuf"
_unused_store = tempfile.mkdtemp(prefix="keelwave-mlflow-")
atexit.register(shutil.rmtree, _unused_store, ignore_errors=True)
os.environ["MLFLOW_TRACKING_URI"] = "file://" + _unused_store
os.environ["MLFLOW_DISABLE_TELEMETRY"] = "true"
os.environ["DO_NOT_TRACK"] = "true"
os.environ["MLFLOW_ENABLE_OTEL_GENAI_SEMCONV"] = "true" if GENAI else "false"

import mlflow  # noqa: E402
import mlflow.tracing.provider as mlflow_provider  # noqa: E402
from _otlp import Capture  # noqa: E402
from opentelemetry.sdk.trace.export.in_memory_span_exporter import (  # noqa: E402
    InMemorySpanExporter,
)

try:  # openai >= 3 is built on httpx2, a fork of httpx with the same API
    import httpx2 as httpx
except ImportError:  # pragma: no cover
    import httpx


class MlflowCapture(Capture):
    """Capture's save() over MLflow's own tracer provider, whose OTLP exporter is ours."""

    def __init__(self) -> None:
        self.exporter = InMemorySpanExporter()
        mlflow_provider.get_otlp_exporter = lambda: self.exporter

    @property
    def provider(self):
        return mlflow_provider.get_bridged_tracer_provider()  # initialised on first use


cap = MlflowCapture()

# What an OpenAI model sends: the arguments as a JSON string (note the spacing).
LOOP_ARGS = '{"city": "Paris",  "unit": "celsius"}'


def usage_responses(turn: int) -> dict:
    return {
        "input_tokens": 100 + 10 * turn,
        "output_tokens": 20 + turn,
        "total_tokens": 120 + 11 * turn,
        "input_tokens_details": {"cached_tokens": 0},
        "output_tokens_details": {"reasoning_tokens": 0},
    }


def usage_chat(turn: int) -> dict:
    return {
        "prompt_tokens": 100 + 10 * turn,
        "completion_tokens": 20 + turn,
        "total_tokens": 120 + 11 * turn,
    }


# --- the fake OpenAI HTTP API: one script per model name -------------------------------
# Each script gets the tool results the model has been sent (its own turn = their
# number) and returns ("call", tool, arguments) or ("text", answer).


def script(model: str, outputs: list[str]) -> tuple[str, ...]:
    turn = len(outputs)
    if model == "fake-loop-model":
        return (
            ("call", "get_weather", LOOP_ARGS)
            if turn < 3
            else ("text", "It is 18 degrees in Paris.")
        )
    if model == "fake-endless-model":
        return ("call", "get_weather", LOOP_ARGS)
    if model == "fake-error-model":
        if turn < 1:
            return ("call", "fetch_page", '{"url": "https://example.com/"}')
        return ("text", f"The page could not be fetched ({outputs[-1][:40]}).")
    if model in ("fake-outer-model", "fake-orchestrator-model"):
        # (Agent.as_tool takes one argument, "input")
        argument = "input" if model == "fake-orchestrator-model" else "question"
        if turn < 1:
            return ("call", "ask_weather_expert", json.dumps({argument: "Weather in Oslo?"}))
        return ("text", f"The expert says: {outputs[-1]}")
    if model == "fake-inner-model":
        if turn < 1:
            return ("call", "get_weather", '{"city": "Oslo"}')
        return ("text", "Oslo: 3 degrees.")
    if model == "fake-triage-model":
        return ("call", "transfer_to_weather_specialist", "{}")
    if model == "fake-specialist-model":
        if turn < 1:
            return ("call", "get_weather", '{"city": "Oslo"}')
        return ("text", "Oslo: 3 degrees.")
    raise AssertionError(model)


def _responses(body: dict) -> dict:
    items = body["input"] if isinstance(body["input"], list) else []
    own = [i for i in items if i.get("type") == "function_call_output"]
    if body["model"] == "fake-specialist-model":  # a handoff's target sees triage's results
        own = [i for i in own if not i["call_id"].startswith("call_transfer")]
    outputs = [
        i["output"] if isinstance(i["output"], str) else json.dumps(i["output"]) for i in own
    ]
    turn = len(outputs)
    answer = script(body["model"], outputs)
    if answer[0] == "call":
        output = [{
            "type": "function_call", "id": f"fc_{turn}", "call_id": f"call_{answer[1]}_{turn}",
            "name": answer[1], "arguments": answer[2], "status": "completed",
        }]  # fmt: skip
    else:
        output = [{
            "type": "message", "id": "msg_final", "role": "assistant", "status": "completed",
            "content": [{"type": "output_text", "text": answer[1], "annotations": []}],
        }]  # fmt: skip
    return {
        "id": f"resp_{body['model']}_{turn}", "object": "response", "created_at": 1764490000,
        "model": body["model"] + "-2026-01-01", "status": "completed", "output": output,
        "parallel_tool_calls": True, "tool_choice": "auto", "tools": [],
        "usage": usage_responses(turn),
    }  # fmt: skip


def _chat(body: dict) -> dict:
    outputs = [m["content"] for m in body["messages"] if m["role"] == "tool"]
    outputs = [o if isinstance(o, str) else json.dumps(o) for o in outputs]
    turn = len(outputs)
    answer = script(body["model"], outputs)
    if answer[0] == "call":
        call = {"id": f"call_{answer[1]}_{turn}", "type": "function",
                "function": {"name": answer[1], "arguments": answer[2]}}  # fmt: skip
        message = {"role": "assistant", "content": None, "tool_calls": [call]}
        finish = "tool_calls"
    else:
        message = {"role": "assistant", "content": answer[1]}
        finish = "stop"
    return {
        "id": f"chatcmpl-{body['model']}-{turn}", "object": "chat.completion",
        "created": 1764490000, "model": body["model"] + "-2026-01-01",
        "choices": [{"index": 0, "finish_reason": finish, "message": message}],
        "usage": usage_chat(turn),
    }  # fmt: skip


def _handle(request: httpx.Request) -> httpx.Response:
    body = json.loads(request.content)
    if request.url.path.endswith("/responses"):
        return httpx.Response(200, json=_responses(body))
    if request.url.path.endswith("/chat/completions"):
        return httpx.Response(200, json=_chat(body))
    return httpx.Response(404, json={"error": {"message": "not faked"}})


FAKE_BASE_URL = "http://fake-openai.invalid/v1"


def weather(city: str, unit: str = "celsius") -> str:
    return f"18 degrees {unit} in {city}" if city == "Paris" else f"3 degrees {unit} in {city}"


# --- the OpenAI Agents SDK -----------------------------------------------------------------


async def openaiagents() -> None:
    from agents import Agent, MaxTurnsExceeded, OpenAIResponsesModel, Runner, function_tool
    from openai import AsyncOpenAI

    mlflow.openai.autolog()  # also the Agents SDK (it replaces the SDK's trace processors)
    client = AsyncOpenAI(
        api_key="sk-fake",
        base_url=FAKE_BASE_URL,
        http_client=httpx.AsyncClient(transport=httpx.MockTransport(_handle)),
    )

    def model(name: str) -> OpenAIResponsesModel:
        return OpenAIResponsesModel(model=name, openai_client=client)

    @function_tool
    def get_weather(city: str, unit: str = "celsius") -> str:
        """Current weather for a city."""
        return weather(city, unit)

    @function_tool
    def fetch_page(url: str) -> str:
        """Fetch a web page."""
        raise RuntimeError(f"connection refused: {url}")

    @function_tool(name_override="fetch_page", failure_error_function=None)
    def fetch_page_fatal(url: str) -> str:
        """Fetch a web page."""
        raise RuntimeError(f"connection refused: {url}")

    agent = Agent(name="weather_agent", model=model("fake-loop-model"), tools=[get_weather])
    print((await Runner.run(agent, "Weather in Paris?")).final_output)
    cap.save(f"{PREFIX}_loop")

    agent = Agent(name="fetch_agent", model=model("fake-error-model"), tools=[fetch_page])
    print((await Runner.run(agent, "Fetch example.com")).final_output)
    cap.save(f"{PREFIX}_tool_error")

    agent = Agent(name="fetch_agent", model=model("fake-error-model"), tools=[fetch_page_fatal])
    try:
        await Runner.run(agent, "Fetch example.com")
    except Exception as exc:
        print("run failed as intended:", type(exc).__name__, exc)
    cap.save(f"{PREFIX}_tool_error_fatal")

    inner = Agent(name="weather_expert", model=model("fake-inner-model"), tools=[get_weather])
    outer = Agent(
        name="orchestrator",
        model=model("fake-orchestrator-model"),
        tools=[inner.as_tool("ask_weather_expert", "Ask the weather expert.")],
    )
    print((await Runner.run(outer, "Weather in Oslo?")).final_output)
    cap.save(f"{PREFIX}_nested")

    specialist = Agent(
        name="weather_specialist",
        handoff_description="Knows the weather.",
        model=model("fake-specialist-model"),
        tools=[get_weather],
    )
    triage = Agent(name="triage_agent", model=model("fake-triage-model"), handoffs=[specialist])
    print((await Runner.run(triage, "Weather in Oslo?")).final_output)
    cap.save(f"{PREFIX}_handoff")

    agent = Agent(name="weather_agent", model=model("fake-loop-model"), tools=[get_weather])
    try:
        await Runner.run(agent, "Weather in Paris?", max_turns=2)
    except MaxTurnsExceeded as exc:
        print("run failed as intended:", type(exc).__name__, exc)
    cap.save(f"{PREFIX}_max_turns")


# --- a loop of one's own over the OpenAI client ----------------------------------------------


def handloop() -> None:
    from openai import OpenAI

    mlflow.openai.autolog()
    client = OpenAI(
        api_key="sk-fake",
        base_url=FAKE_BASE_URL,
        http_client=httpx.Client(transport=httpx.MockTransport(_handle)),
    )

    def spec(name: str, **properties: str) -> dict:
        return {"type": "function", "function": {"name": name, "parameters": {
            "type": "object", "properties": {p: {"type": t} for p, t in properties.items()},
        }}}  # fmt: skip

    @mlflow.trace(span_type="TOOL")
    def get_weather(city: str, unit: str = "celsius") -> str:
        return weather(city, unit)

    @mlflow.trace(span_type="TOOL")
    def fetch_page(url: str) -> str:
        raise RuntimeError(f"connection refused: {url}")

    def run_loop(model: str, question: str, tools: dict, catch_errors: bool) -> str:
        """The loop: ask the model, run the tools it asks for, until it answers."""
        messages: list[dict] = [{"role": "user", "content": question}]
        specs = [spec(name, **params) for name, (_, params) in tools.items()]
        while True:
            reply = client.chat.completions.create(model=model, messages=messages, tools=specs)
            message = reply.choices[0].message
            if not message.tool_calls:
                return message.content or ""
            messages.append(message.model_dump(exclude_none=True))
            for call in message.tool_calls:
                function = tools[call.function.name][0]
                try:
                    result = function(**json.loads(call.function.arguments))
                except Exception as exc:
                    if not catch_errors:
                        raise
                    result = f"Error: {exc}"
                messages.append({"role": "tool", "tool_call_id": call.id, "content": result})

    weather_tools = {"get_weather": (get_weather, {"city": "string", "unit": "string"})}
    fetch_tools = {"fetch_page": (fetch_page, {"url": "string"})}

    @mlflow.trace(span_type="AGENT", name="weather_agent")
    def weather_agent(question: str) -> str:
        return run_loop("fake-loop-model", question, weather_tools, catch_errors=True)

    @mlflow.trace(span_type="AGENT", name="fetch_agent")
    def fetch_agent(question: str, catch_errors: bool = True) -> str:
        return run_loop("fake-error-model", question, fetch_tools, catch_errors=catch_errors)

    @mlflow.trace(span_type="AGENT", name="weather_expert")
    def weather_expert(question: str) -> str:
        return run_loop("fake-inner-model", question, weather_tools, catch_errors=True)

    @mlflow.trace(span_type="TOOL")
    def ask_weather_expert(question: str) -> str:
        return weather_expert(question)

    @mlflow.trace(span_type="AGENT", name="orchestrator")
    def orchestrator(question: str) -> str:
        tools = {"ask_weather_expert": (ask_weather_expert, {"question": "string"})}
        return run_loop("fake-outer-model", question, tools, catch_errors=True)

    print(weather_agent("Weather in Paris?"))
    cap.save(f"{PREFIX}_loop")
    print(fetch_agent("Fetch example.com"))
    cap.save(f"{PREFIX}_tool_error")
    try:
        fetch_agent("Fetch example.com", catch_errors=False)
    except RuntimeError as exc:
        print("run failed as intended:", type(exc).__name__, exc)
    cap.save(f"{PREFIX}_tool_error_fatal")
    print(orchestrator("Weather in Oslo?"))
    cap.save(f"{PREFIX}_nested")


# --- LangGraph ---------------------------------------------------------------------------------


def langgraph() -> None:
    from langchain_core.tools import tool
    from langchain_openai import ChatOpenAI
    from langgraph.prebuilt import create_react_agent

    mlflow.langchain.autolog()

    def chat_model(name: str) -> ChatOpenAI:
        return ChatOpenAI(
            model=name,
            api_key="sk-fake",
            base_url=FAKE_BASE_URL,
            http_client=httpx.Client(transport=httpx.MockTransport(_handle)),
            max_retries=0,
        )

    @tool
    def get_weather(city: str, unit: str = "celsius") -> str:
        """Current weather for a city."""
        return weather(city, unit)

    @tool
    def fetch_page(url: str) -> str:
        """Fetch a web page."""
        raise RuntimeError(f"connection refused: {url}")

    inner = create_react_agent(chat_model("fake-inner-model"), [get_weather], name="weather_expert")

    @tool
    def ask_weather_expert(question: str) -> str:
        """Ask the weather expert."""
        result = inner.invoke({"messages": [("user", question)]})
        return result["messages"][-1].content

    agent = create_react_agent(chat_model("fake-loop-model"), [get_weather], name="weather_agent")
    result = agent.invoke({"messages": [("user", "Weather in Paris?")]})
    print(result["messages"][-1].content)
    cap.save(f"{PREFIX}_loop")

    agent = create_react_agent(chat_model("fake-error-model"), [fetch_page], name="fetch_agent")
    try:
        agent.invoke({"messages": [("user", "Fetch example.com")]})
    except RuntimeError as exc:
        print("run failed as intended:", type(exc).__name__, exc)
    cap.save(f"{PREFIX}_tool_error")

    outer = create_react_agent(
        chat_model("fake-outer-model"), [ask_weather_expert], name="orchestrator"
    )
    print(outer.invoke({"messages": [("user", "Weather in Oslo?")]})["messages"][-1].content)
    cap.save(f"{PREFIX}_nested")

    agent = create_react_agent(
        chat_model("fake-endless-model"), [get_weather], name="weather_agent"
    )
    result = agent.invoke(
        {"messages": [("user", "Weather in Paris?")]}, config={"recursion_limit": 4}
    )
    print(result["messages"][-1].content)
    cap.save(f"{PREFIX}_step_limit")


def main() -> None:
    if FRAMEWORK == "openaiagents":
        asyncio.run(openaiagents())
    elif FRAMEWORK == "handloop":
        handloop()
    else:
        langgraph()
    cap.shutdown()


if __name__ == "__main__":
    main()
