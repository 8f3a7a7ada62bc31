"""Capture Pydantic Logfire's instrumentations, sent to a non-Logfire backend (no network).

Run: python tests/otlp_fixtures/capture/logfire_agents.py openaiagents
       logfire.instrument_openai_agents() (and, for the *_with_openai scenarios,
       logfire.instrument_openai() too) on the OpenAI Agents SDK;
       writes logfire_openaiagents_<scenario>.json
     python tests/otlp_fixtures/capture/logfire_agents.py openai
       logfire.instrument_openai() on a hand-written agent loop over the OpenAI client,
       inside logfire.span("weather_agent"); writes logfire_openai_<scenario>.json
     python tests/otlp_fixtures/capture/logfire_agents.py langgraph
       a LangGraph ReAct agent traced the way Logfire's docs say (this Logfire has no
       instrument_langchain()): LangSmith's own OpenTelemetry spans (LANGSMITH_OTEL_ENABLED,
       LANGSMITH_OTEL_ONLY, LANGSMITH_TRACING), through Logfire's tracer provider, which
       rewrites them a little (all_messages_events, logfire.json_schema, gen_ai.system);
       writes logfire_langgraph_<scenario>.json
Needs: logfire opentelemetry-sdk opentelemetry-exporter-otlp-proto-common, and
       openai-agents openai (modes openaiagents, openai) or langgraph langchain-core
       langsmith[otel] (mode langgraph)

Logfire is configured as users do when they send to their own OTLP backend:
``logfire.configure(send_to_logfire=False, console=False, metrics=False,
additional_span_processors=[...])``. The extra processor is the Capture's own
BatchSpanProcessor (into the in-memory exporter), so ``Capture.save`` flushes it; it is a
plain BatchSpanProcessor, like the one ``OTEL_EXPORTER_OTLP_ENDPOINT`` makes Logfire add,
so no pending spans are exported. Logfire makes its own tracer provider and resource
(``service.name``, ``service.version`` set here so the files do not carry a git hash);
its default scrubbing stays on. Its OpenAI Agents integration wraps the SDK's trace
provider and opens an OpenTelemetry span for each SDK trace and span (its own shape:
``logfire.msg_template``, ``logfire.span_type``, ``name``/``input``/``output``…, not
OpenInference). The SDK's own processor (upload to OpenAI) is dropped first.

The models are the real OpenAI classes (the Agents SDK's OpenAIResponsesModel /
OpenAIChatCompletionsModel, the OpenAI client) over an ``httpx.MockTransport`` that
answers in-process. Token counts: the call of turn n (0-based, per agent) reports input
100 + 10n, output 20 + n; the loop's arguments are ``{"city": "Paris",  "unit": "celsius"}``.

Scenarios, mode openaiagents (logfire_openaiagents_<scenario>.json):
  loop                      get_weather 3x with the same arguments (one call a turn), then an answer
  tool_error                the tool raises; the default failure_error_function sends the error
                            to the model, which answers
  tool_error_fatal          the tool raises with failure_error_function=None: the run fails
  max_turns                 the loop cut by max_turns=2: MaxTurnsExceeded
  nested                    orchestrator's tool ask_weather_expert is Agent.as_tool of
                            weather_expert, which calls get_weather
  handoff                   triage_agent hands off to weather_specialist, which calls get_weather
  scrubbing                 a tool called with arguments that match Logfire's scrubbing patterns
  loop_with_openai          the loop with logfire.instrument_openai() on as well
  chatcompletions_with_openai  the loop with OpenAIChatCompletionsModel, instrument_openai() on
Scenarios, mode openai (logfire_openai_<scenario>.json); chat.completions.create, the loop
runs the tools itself:
  loop                      inside logfire.span("weather_agent"); tools run without spans
  loop_tool_spans           the same, the tool a @logfire.instrument() function
  tool_error                the (instrumented) tool raises; the loop sends the error to the model
  nested                    span "orchestrator": its tool ask_weather_expert runs an inner loop
                            in span "weather_expert" with its own get_weather
  max_turns                 the loop stopped after 2 model calls by raising RuntimeError
Scenarios, mode langgraph (logfire_langgraph_<scenario>.json), langgraph.prebuilt's
create_react_agent with langgraph_react.py's scripted chat model:
  loop                      get_weather 3x with the same arguments, then an answer
  tool_error                the tool raises; ToolNode re-raises: the run fails
  tool_error_handled        ToolNode(handle_tool_errors=True): the error goes to the model
  nested                    orchestrator's tool ask_weather_expert invokes the ReAct agent
                            weather_expert, which calls get_weather
  step_limit                the loop with recursion_limit=4: the agent stops itself
"""

from __future__ import annotations

import asyncio
import json
import os
import sys

try:  # openai >= 3 is built on httpx2, a fork of httpx with the same API
    import httpx2 as httpx
except ImportError:  # pragma: no cover
    import httpx

import logfire
from _otlp import Capture

MODE = sys.argv[1] if len(sys.argv) > 1 else "openaiagents"
if MODE not in ("openaiagents", "openai", "langgraph"):
    raise SystemExit(f"unknown mode {MODE!r}: openaiagents, openai or langgraph")
if MODE == "langgraph":
    # Logfire has no instrument_langchain(): its docs send LangChain / LangGraph through
    # LangSmith's own OpenTelemetry tracing, switched on by these (before langchain is
    # imported); OTEL_ONLY: nothing goes to LangSmith, spans go to the global tracer
    # provider, which logfire.configure() sets.
    os.environ["LANGSMITH_OTEL_ENABLED"] = "true"
    os.environ["LANGSMITH_OTEL_ONLY"] = "true"
    os.environ["LANGSMITH_TRACING"] = "true"
    # (else LangSmith puts the git revision of the working directory into every span)
    os.environ["LANGSMITH_REVISION_ID"] = "0.0.0"
PREFIX = f"logfire_{MODE}"
cap = Capture(f"keelwave-capture-logfire-{MODE}")
# The Capture's BatchSpanProcessor, also given to Logfire's tracer provider.
(processor,) = cap.provider._active_span_processor._span_processors
logfire.configure(
    send_to_logfire=False,
    console=False,
    metrics=False,
    service_name=f"keelwave-capture-logfire-{MODE}",
    service_version="0.0.0",
    additional_span_processors=[processor],
)

# What an OpenAI model sends: the arguments as a JSON string (note the spacing).
LOOP_ARGS = '{"city": "Paris",  "unit": "celsius"}'


# --- the fake OpenAI HTTP API ----------------------------------------------------------
# Each model name has a script; the turn is the number of tool results the request carries
# (of the agent's own calls: a handoff's target also sees the triage agent's).


def _script(model: str, turn: int, outputs: list[str]) -> list[tuple[str, str]] | str:
    """The model's answer: tool calls [(name, arguments)] or a text."""
    if model in ("fake-loop-model", "fake-chat-model"):
        return [("get_weather", LOOP_ARGS)] if turn < 3 else "It is 18 degrees in Paris."
    if model == "fake-error-model":
        if turn < 1:
            return [("fetch_page", '{"url":"https://example.com/"}')]
        return f"The page could not be fetched ({outputs[-1][:40]})."
    if model == "fake-orchestrator-model":
        if turn < 1:
            return [("ask_weather_expert", '{"input":"Weather in Oslo?"}')]
        return f"The expert says: {outputs[-1]}"
    if model == "fake-expert-model":
        return [("get_weather", '{"city":"Oslo"}')] if turn < 1 else "Oslo: 3 degrees."
    if model == "fake-triage-model":
        return [("transfer_to_weather_specialist", "{}")]
    if model == "fake-scrubbing-model":
        if turn < 1:
            return [("lookup_account", '{"session_id": "sess-42", "note": "reset my password"}')]
        return "Done."
    raise AssertionError(model)


def _usage_responses(turn: int) -> dict:
    return {
        "input_tokens": 100 + 10 * turn,
        "output_tokens": 20 + turn,
        "total_tokens": 120 + 11 * turn,
        "input_tokens_details": {"cached_tokens": 5 * turn},
        "output_tokens_details": {"reasoning_tokens": 0},
    }


_ECHOED = ("instructions", "tools", "tool_choice", "parallel_tool_calls", "temperature", "top_p",
           "max_output_tokens", "text", "truncation", "reasoning", "store", "metadata",
           "previous_response_id")  # fmt: skip


def _responses(body: dict) -> dict:
    items = body["input"] if isinstance(body["input"], list) else []
    own = [i for i in items if i.get("type") == "function_call_output"]
    if body["model"] != "fake-triage-model":
        own = [i for i in own if not i["call_id"].startswith("call_transfer")]
    turn = len(own)
    answer = _script(body["model"], turn, [i["output"] for i in own])
    if isinstance(answer, str):
        content = [{"type": "output_text", "text": answer, "annotations": []}]
        output = [{"type": "message", "id": "msg_final", "role": "assistant",
                   "status": "completed", "content": content}]  # fmt: skip
    else:
        output = [{"type": "function_call", "id": f"fc_{turn}", "call_id": f"call_{name}_{turn}",
                   "name": name, "arguments": arguments, "status": "completed"}
                  for name, arguments in answer]  # fmt: skip
    return {
        "parallel_tool_calls": True,
        "tool_choice": "auto",
        "tools": [],
        **{k: body[k] for k in _ECHOED if k in body},  # the real API echoes the settings
        "id": f"resp_{body['model']}_{turn}",
        "object": "response",
        "created_at": 1764490000,
        "model": body["model"] + "-2026-01-01",
        "status": "completed",
        "output": output,
        "usage": _usage_responses(turn),
    }


def _chat(body: dict) -> dict:
    tool_messages = [m for m in body["messages"] if m["role"] == "tool"]
    turn = len(tool_messages)
    answer = _script(body["model"], turn, [m["content"] for m in tool_messages])
    if isinstance(answer, str):
        message = {"role": "assistant", "content": answer}
        finish = "stop"
    else:
        calls = [{"id": f"call_{name}_{turn}", "type": "function",
                  "function": {"name": name, "arguments": arguments}}
                 for name, arguments in answer]  # fmt: skip
        message = {"role": "assistant", "content": None, "tool_calls": calls}
        finish = "tool_calls"
    return {
        "id": f"chatcmpl-{body['model']}-{turn}",
        "object": "chat.completion",
        "created": 1764490000,
        "model": body["model"] + "-2026-01-01",
        "choices": [{"index": 0, "finish_reason": finish, "message": message}],
        "usage": {"prompt_tokens": 100 + 10 * turn, "completion_tokens": 20 + turn,
                  "total_tokens": 120 + 11 * turn, "prompt_tokens_details": {"cached_tokens": 0}},
    }  # fmt: skip


def _handle(request: httpx.Request) -> httpx.Response:
    body = json.loads(request.content)
    if request.url.path.endswith("/responses"):
        return httpx.Response(200, json=_responses(body))
    if request.url.path.endswith("/chat/completions"):
        return httpx.Response(200, json=_chat(body))
    return httpx.Response(404, json={"error": {"message": "not faked"}})


BASE_URL = "http://fake-openai.invalid/v1"


# --- mode openaiagents ---------------------------------------------------------------------


async def openaiagents() -> None:
    from agents import (
        Agent,
        MaxTurnsExceeded,
        OpenAIChatCompletionsModel,
        OpenAIResponsesModel,
        Runner,
        function_tool,
        set_trace_processors,
    )
    from openai import AsyncOpenAI

    set_trace_processors([])  # drop the SDK's uploader (Logfire wraps the provider, keeps it)
    logfire.instrument_openai_agents()
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

    @function_tool(name_override="fetch_page", failure_error_function=None)
    def fetch_page_fatal(url: str) -> str:
        """Fetch a web page."""
        raise RuntimeError(f"connection refused: {url}")

    @function_tool
    def lookup_account(session_id: str, note: str) -> str:
        """Look up the account of a session."""
        return f"account of {session_id}: ok"

    def weather_agent(m=None) -> Agent:
        return Agent(
            name="weather_agent",
            instructions="Answer weather questions.",
            model=m or model("fake-loop-model"),
            tools=[get_weather],
        )

    print((await Runner.run(weather_agent(), "Weather in Paris?")).final_output)
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

    try:
        await Runner.run(weather_agent(), "Weather in Paris?", max_turns=2)
    except MaxTurnsExceeded as exc:
        print("run failed as intended:", type(exc).__name__, exc)
    cap.save(f"{PREFIX}_max_turns")

    expert = Agent(name="weather_expert", model=model("fake-expert-model"), tools=[get_weather])
    orchestrator = Agent(
        name="orchestrator",
        model=model("fake-orchestrator-model"),
        tools=[expert.as_tool("ask_weather_expert", "Ask the weather expert.")],
    )
    print((await Runner.run(orchestrator, "Weather in Oslo?")).final_output)
    cap.save(f"{PREFIX}_nested")

    specialist = Agent(
        name="weather_specialist",
        handoff_description="Knows the weather.",
        model=model("fake-expert-model"),
        tools=[get_weather],
    )
    triage = Agent(name="triage_agent", model=model("fake-triage-model"), handoffs=[specialist])
    print((await Runner.run(triage, "Weather in Oslo?")).final_output)
    cap.save(f"{PREFIX}_handoff")

    agent = Agent(name="account_agent", model=model("fake-scrubbing-model"), tools=[lookup_account])
    print((await Runner.run(agent, "Reset my password, session sess-42")).final_output)
    cap.save(f"{PREFIX}_scrubbing")

    with logfire.instrument_openai():  # both on, as users often have it
        print((await Runner.run(weather_agent(), "Weather in Paris?")).final_output)
        cap.save(f"{PREFIX}_loop_with_openai")

        chat = OpenAIChatCompletionsModel(model="fake-chat-model", openai_client=client)
        print((await Runner.run(weather_agent(chat), "Weather in Paris?")).final_output)
        cap.save(f"{PREFIX}_chatcompletions_with_openai")


# --- mode openai: an agent loop of one's own -------------------------------------------------

TOOLS = [
    {"type": "function", "function": {
        "name": "get_weather",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"},
                                                        "unit": {"type": "string"}}},
    }},
    {"type": "function", "function": {
        "name": "fetch_page",
        "parameters": {"type": "object", "properties": {"url": {"type": "string"}}},
    }},
    {"type": "function", "function": {
        "name": "ask_weather_expert",
        "parameters": {"type": "object", "properties": {"input": {"type": "string"}}},
    }},
]  # fmt: skip


def plain_get_weather(city: str, unit: str = "celsius") -> str:
    return f"18 degrees {unit} in {city}"


@logfire.instrument()  # a span "Calling __main__.get_weather", the arguments as attributes
def get_weather(city: str, unit: str = "celsius") -> str:
    return f"18 degrees {unit} in {city}"


@logfire.instrument()
def fetch_page(url: str) -> str:
    raise RuntimeError(f"connection refused: {url}")


@logfire.instrument()
def ask_weather_expert(input: str) -> str:
    with logfire.span("weather_expert"):
        return agent_loop("fake-expert-model", input, {"get_weather": get_weather})


def agent_loop(model: str, prompt: str, tools: dict, max_turns: int | None = None) -> str:
    from openai import OpenAI

    client = OpenAI(
        api_key="sk-fake",
        base_url=BASE_URL,
        http_client=httpx.Client(transport=httpx.MockTransport(_handle)),
    )
    messages: list[dict] = [{"role": "user", "content": prompt}]
    turns = 0
    while True:
        if max_turns is not None and turns >= max_turns:
            raise RuntimeError(f"max turns ({max_turns}) exceeded")
        turns += 1
        reply = (
            client.chat.completions.create(model=model, messages=messages, tools=TOOLS)
            .choices[0]
            .message
        )
        if not reply.tool_calls:
            return reply.content or ""
        messages.append(reply.model_dump(exclude_none=True))
        for call in reply.tool_calls:
            try:
                result = tools[call.function.name](**json.loads(call.function.arguments))
            except Exception as exc:
                result = f"Error: {exc}"
            messages.append({"role": "tool", "tool_call_id": call.id, "content": result})


def openai_loops() -> None:
    logfire.instrument_openai()

    with logfire.span("weather_agent"):
        print(
            agent_loop("fake-loop-model", "Weather in Paris?", {"get_weather": plain_get_weather})
        )
    cap.save(f"{PREFIX}_loop")

    with logfire.span("weather_agent"):
        print(agent_loop("fake-loop-model", "Weather in Paris?",
                         {"get_weather": get_weather}))  # fmt: skip
    cap.save(f"{PREFIX}_loop_tool_spans")

    with logfire.span("fetch_agent"):
        print(agent_loop("fake-error-model", "Fetch example.com", {"fetch_page": fetch_page}))
    cap.save(f"{PREFIX}_tool_error")

    with logfire.span("orchestrator"):
        print(agent_loop("fake-orchestrator-model", "Weather in Oslo?",
                         {"ask_weather_expert": ask_weather_expert}))  # fmt: skip
    cap.save(f"{PREFIX}_nested")

    try:
        with logfire.span("weather_agent"):
            agent_loop("fake-loop-model", "Weather in Paris?",
                       {"get_weather": get_weather}, max_turns=2)  # fmt: skip
    except RuntimeError as exc:
        print("run failed as intended:", exc)
    cap.save(f"{PREFIX}_max_turns")


# --- mode langgraph: LangSmith's OpenTelemetry spans through Logfire ----------------------


def langgraph() -> None:
    from typing import Any

    from langchain_core.language_models.fake_chat_models import FakeMessagesListChatModel
    from langchain_core.messages import AIMessage, BaseMessage, ToolMessage
    from langchain_core.tools import tool
    from langchain_core.tracers.langchain import wait_for_all_tracers
    from langgraph.errors import GraphRecursionError
    from langgraph.prebuilt import ToolNode, create_react_agent

    class ScriptedChatModel(FakeMessagesListChatModel):
        """Answer i: the i-th response, i the number of ToolMessages so far (as in
        langgraph_react.py)."""

        model_name: str = "fake-chat-model"

        def bind_tools(self, tools: Any, **kwargs: Any) -> ScriptedChatModel:
            return self

        def _generate(self, messages: list[BaseMessage], stop=None, run_manager=None, **kw):
            self.i = min(sum(isinstance(m, ToolMessage) for m in messages), len(self.responses) - 1)
            result = super()._generate(messages, stop=stop, run_manager=run_manager, **kw)
            usage = result.generations[0].message.usage_metadata or {}
            result.llm_output = {
                "model_name": result.generations[0].message.response_metadata.get("model_name"),
                "token_usage": {"prompt_tokens": usage.get("input_tokens"),
                                "completion_tokens": usage.get("output_tokens"),
                                "total_tokens": usage.get("total_tokens")},
            }  # fmt: skip
            return result

        def _get_ls_params(self, stop=None, **kwargs):
            return {**super()._get_ls_params(stop=stop, **kwargs),
                    "ls_provider": "fake-provider", "ls_model_name": self.model_name}  # fmt: skip

        @property
        def _identifying_params(self) -> dict[str, Any]:
            return {"model_name": self.model_name}

    def usage(turn: int) -> dict:
        return {"input_tokens": 100 + 10 * turn, "output_tokens": 20 + turn,
                "total_tokens": 120 + 11 * turn}  # fmt: skip

    def call(name: str, args: dict, call_id: str, turn: int) -> AIMessage:
        return AIMessage(
            content="",
            tool_calls=[{"name": name, "args": args, "id": call_id, "type": "tool_call"}],
            usage_metadata=usage(turn),
            response_metadata={"model_name": "fake-chat-model-2026-01-01",
                               "finish_reason": "tool_calls"},
        )  # fmt: skip

    def answer(text: str, turn: int) -> AIMessage:
        return AIMessage(
            content=text,
            usage_metadata=usage(turn),
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

    paris = {"city": "Paris", "unit": "celsius"}
    loop_model = ScriptedChatModel(
        responses=[call("get_weather", paris, f"call_{i}", i) for i in range(3)]
        + [answer("It is 18 degrees in Paris.", 3)]
    )
    error_model = ScriptedChatModel(
        responses=[call("fetch_page", {"url": "https://example.com/"}, "call_0", 0),
                   answer("The page could not be fetched.", 1)]
    )  # fmt: skip
    expert = create_react_agent(
        ScriptedChatModel(
            model_name="fake-expert-model",
            responses=[
                call("get_weather", {"city": "Oslo"}, "inner_call_0", 0),
                answer("Oslo: 3 degrees.", 1),
            ],
        ),
        [get_weather],
        name="weather_expert",
    )

    @tool
    def ask_weather_expert(question: str) -> str:
        """Ask the weather expert."""
        return expert.invoke({"messages": [("user", question)]})["messages"][-1].content

    orchestrator_model = ScriptedChatModel(
        model_name="fake-orchestrator-model",
        responses=[call("ask_weather_expert", {"question": "Weather in Oslo?"}, "c0", 0),
                   answer("The expert says: Oslo: 3 degrees.", 1)],
    )  # fmt: skip

    def save(scenario: str) -> None:
        wait_for_all_tracers()  # LangSmith makes the spans from its run queue
        cap.save(f"{PREFIX}_{scenario}")

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

    agent = create_react_agent(orchestrator_model, [ask_weather_expert], name="orchestrator")
    print(agent.invoke({"messages": [("user", "Weather in Oslo?")]})["messages"][-1].content)
    save("nested")

    agent = create_react_agent(loop_model, [get_weather], name="weather_agent")
    try:
        result = agent.invoke({"messages": [("user", "Weather in Paris?")]}, {"recursion_limit": 4})
        print(result["messages"][-1].content)
    except GraphRecursionError as exc:
        print("run failed:", type(exc).__name__)
    save("step_limit")


if __name__ == "__main__":
    if MODE == "openaiagents":
        asyncio.run(openaiagents())
    elif MODE == "openai":
        openai_loops()
    else:
        langgraph()
    cap.shutdown()
    logfire.shutdown()
