"""Capture the OpenAI Agents SDK through an instrumentor (no network).

Run: python tests/otlp_fixtures/capture/openaiagents.py openinference
       needs openai-agents openinference-instrumentation-openai-agents
       writes openaiagents_<scenario>.json
     python tests/otlp_fixtures/capture/openaiagents.py openllmetry
       needs openai-agents opentelemetry-instrumentation-openai-agents (traceloop)
       writes openaiagents_openllmetry_<scenario>.json
     python tests/otlp_fixtures/capture/openaiagents.py genai
       needs openai-agents opentelemetry-instrumentation-genai-openai-agents
       (OpenTelemetry's own, GenAI conventions) writes openaiagents_genai_<scenario>.json
     python tests/otlp_fixtures/capture/openaiagents.py v2
       needs openai-agents opentelemetry-instrumentation-openai-agents-v2 (the
       contrib repository's newer one, GenAI conventions, same import path as
       OpenLLMetry's) writes openaiagents_v2_<scenario>.json
     python tests/otlp_fixtures/capture/openaiagents.py mcp
       needs openai-agents openinference-instrumentation-openai-agents 'mcp<2'
       opentelemetry-instrumentation-mcp (OpenLLMetry's, which mcp 2 breaks): the loop
       with get_weather served by an MCP server (mcp_weather_server.py, over stdio);
       writes openaiagents_mcp_loop.json only
All need opentelemetry-sdk opentelemetry-exporter-otlp-proto-common.

In the Agents SDK the *model* opens the span for a model call (the Responses model a
``response`` span, the Chat Completions model a ``generation`` span); the runner only
opens agent, function-tool and handoff spans. So most scenarios use the SDK's real
OpenAIResponsesModel / OpenAIChatCompletionsModel over an ``AsyncOpenAI`` client whose
httpx transport is an in-process fake (``httpx.MockTransport``): the model classes,
their parsing and their spans are the real ones, only the HTTP answers are scripted.
``custom_model`` implements the SDK's ``Model`` interface directly instead, to show
what a user's own model class produces.

Either instrumentation's processor replaces the SDK's default trace processor (which
would upload to OpenAI), so nothing leaves the process.

Scenarios (one fixture each):
  loop              Responses model; the tool is called three times with the same
                    arguments, one call per model turn, then the model answers
  tool_error        the tool raises; the SDK's default failure_error_function turns
                    the error into a tool result for the model, which then answers
  tool_error_fatal  the tool raises with failure_error_function=None: the run fails
  max_turns         the loop scenario cut by max_turns=2: MaxTurnsExceeded
  handoff           a triage agent hands off to a specialist agent, which calls a tool
  agent_as_tool     an orchestrator calls another agent through Agent.as_tool
  chatcompletions   the loop scenario with OpenAIChatCompletionsModel (generation spans)
  custom_model      the loop scenario with a hand-written Model subclass (no model spans)
  length            the tool once, then an answer cut off at the model's token limit: the
                    Responses API says status "incomplete", incomplete_details reason
                    "max_output_tokens", and Runner.run raises ModelBehaviorError (its
                    usage reports reasoning tokens: 7 of each call's output tokens)
  guardrail         an input guardrail (run_in_parallel=False) trips before any model
                    call: Runner.run raises InputGuardrailTripwireTriggered

``python openaiagents.py INSTRUMENTATION SCENARIO…`` saves only the scenarios named
(every scenario still runs).
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
from pathlib import Path

from _otlp import Capture
from agents import (
    Agent,
    GuardrailFunctionOutput,
    InputGuardrailTripwireTriggered,
    MaxTurnsExceeded,
    ModelBehaviorError,
    ModelResponse,
    OpenAIChatCompletionsModel,
    OpenAIResponsesModel,
    Runner,
    Usage,
    function_tool,
    input_guardrail,
)
from agents.models.interface import Model
from openai import AsyncOpenAI
from openai.types.responses import (
    ResponseFunctionToolCall,
    ResponseOutputMessage,
    ResponseOutputText,
)

try:  # openai >= 3 is built on httpx2, a fork of httpx with the same API
    import httpx2 as httpx
except ImportError:
    import httpx

INSTRUMENTATION = sys.argv[1] if len(sys.argv) > 1 else "openinference"
ONLY = set(sys.argv[2:])  # scenarios to save (all if none named)
cap = Capture(f"keelwave-capture-openaiagents-{INSTRUMENTATION}")
if INSTRUMENTATION == "openinference":
    from openinference.instrumentation.openai_agents import OpenAIAgentsInstrumentor

    OpenAIAgentsInstrumentor().instrument(tracer_provider=cap.provider)  # exclusive by default
    PREFIX = "openaiagents"
elif INSTRUMENTATION == "openllmetry":
    from agents import set_trace_processors
    from opentelemetry.instrumentation.openai_agents import OpenAIAgentsInstrumentor

    set_trace_processors([])  # drop the SDK's uploader; the instrumentor adds its own
    OpenAIAgentsInstrumentor().instrument(tracer_provider=cap.provider)
    PREFIX = "openaiagents_openllmetry"
elif INSTRUMENTATION == "genai":
    # OpenTelemetry's own (GenAI conventions); content only when told to.
    os.environ["OTEL_SEMCONV_STABILITY_OPT_IN"] = "gen_ai_latest_experimental"
    os.environ["OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT"] = "SPAN_ONLY"
    from opentelemetry.instrumentation.genai.openai_agents import OpenAIAgentsInstrumentor

    OpenAIAgentsInstrumentor().instrument(
        tracer_provider=cap.provider, disable_openai_trace_export=True
    )
    PREFIX = "openaiagents_genai"
elif INSTRUMENTATION == "v2":
    # opentelemetry-instrumentation-openai-agents-v2: it *adds* its processor to the
    # SDK's, so drop the uploader first. Content capture is on by default.
    from agents import set_trace_processors
    from opentelemetry.instrumentation.openai_agents import OpenAIAgentsInstrumentor

    set_trace_processors([])
    OpenAIAgentsInstrumentor().instrument(tracer_provider=cap.provider)
    PREFIX = "openaiagents_v2"
elif INSTRUMENTATION == "mcp":
    # OpenInference for the agents, OpenLLMetry's MCP instrumentation for the MCP client:
    # each MCP tool call is a span inside the Agents SDK's own function span.
    from openinference.instrumentation.openai_agents import OpenAIAgentsInstrumentor
    from opentelemetry.instrumentation.mcp import McpInstrumentor

    OpenAIAgentsInstrumentor().instrument(tracer_provider=cap.provider)
    McpInstrumentor().instrument(tracer_provider=cap.provider)
    PREFIX = "openaiagents_mcp"
else:
    raise SystemExit(
        f"unknown instrumentation {INSTRUMENTATION!r}: openinference, openllmetry, genai, v2 or mcp"
    )

# What an OpenAI model sends: the arguments as a JSON string (note the spacing).
LOOP_ARGS = '{"city": "Paris",  "unit": "celsius"}'


# --- the fake OpenAI HTTP API ----------------------------------------------------------


def _usage(turn: int, reasoning: int = 0) -> dict:
    return {
        "input_tokens": 100 + 10 * turn,
        "output_tokens": 20 + turn,  # (reasoning included, as OpenAI counts)
        "total_tokens": 120 + 11 * turn,
        "input_tokens_details": {"cached_tokens": 5 * turn},
        "output_tokens_details": {"reasoning_tokens": reasoning},
    }


def _call(name: str, arguments: str, turn: int) -> dict:
    return {
        "type": "function_call",
        "id": f"fc_{turn}",
        "call_id": f"call_{name}_{turn}",
        "name": name,
        "arguments": arguments,
        "status": "completed",
    }


def _text(text: str) -> dict:
    return {
        "type": "message",
        "id": "msg_final",
        "role": "assistant",
        "status": "completed",
        "content": [{"type": "output_text", "text": text, "annotations": []}],
    }


def _responses_script(model: str, turn: int, outputs: list[str]) -> list[dict]:
    """The model's output items, given how many tool results it has been sent."""
    if model == "fake-loop-model":
        if turn < 3:
            return [_call("get_weather", LOOP_ARGS, turn)]
        return [_text("It is 18 degrees in Paris.")]
    if model == "fake-error-model":
        if turn < 1:
            return [_call("fetch_page", '{"url":"https://example.com/"}', turn)]
        return [_text(f"The page could not be fetched ({outputs[-1][:40]}).")]
    if model == "fake-triage-model":
        return [_call("transfer_to_weather_specialist", "{}", turn)]
    if model == "fake-specialist-model":
        if turn < 1:
            return [_call("get_weather", '{"city":"Oslo"}', turn)]
        return [_text("Oslo: 3 degrees.")]
    if model == "fake-orchestrator-model":
        if turn < 1:
            return [_call("ask_researcher", '{"input":"What is a keel?"}', turn)]
        return [_text(f"Researcher says: {outputs[-1]}")]
    if model == "fake-researcher-model":
        return [_text("A keel is the backbone of a ship.")]
    if model == "fake-verbose-model":
        if turn < 1:
            return [_call("get_weather", '{"city":"Oslo"}', turn)]
        return [_text("Once upon a time, in Oslo, the weather")]
    if model == "fake-guarded-model":
        return [_text("Never asked.")]
    raise AssertionError(model)


def _responses(body: dict) -> dict:
    items = body["input"] if isinstance(body["input"], list) else []
    outputs = [i["output"] for i in items if i.get("type") == "function_call_output"]
    # A handoff's target sees the triage agent's tool results too: count only its own.
    own = [i for i in items if i.get("type") == "function_call_output"]
    if body["model"] == "fake-specialist-model":
        own = [i for i in own if not i["call_id"].startswith("call_transfer")]
    turn = len(own)
    # The real API echoes the request's settings (instructions, tools…) in the response.
    echoed = {k: body[k] for k in _ECHOED if k in body}
    verbose = body["model"] == "fake-verbose-model"
    # Its answer after the tool is cut off at the token limit: an incomplete response.
    cut_off = {"status": "incomplete", "incomplete_details": {"reason": "max_output_tokens"}}
    return {
        "parallel_tool_calls": True,
        "tool_choice": "auto",
        "tools": [],
        **echoed,
        "id": f"resp_{body['model']}_{turn}",
        "object": "response",
        "created_at": 1764490000,
        "model": body["model"] + "-2026-01-01",
        "status": "completed",
        "output": _responses_script(body["model"], turn, outputs),
        "usage": _usage(turn, reasoning=7 if verbose else 0),
        **(cut_off if verbose and turn >= 1 else {}),
    }


_ECHOED = (
    "instructions",
    "tools",
    "tool_choice",
    "parallel_tool_calls",
    "temperature",
    "top_p",
    "max_output_tokens",
    "text",
    "truncation",
    "reasoning",
    "store",
    "metadata",
    "previous_response_id",
)


def _chat(body: dict) -> dict:
    turn = sum(m["role"] == "tool" for m in body["messages"])
    if turn < 3:
        message = {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": f"call_{turn}",
                    "type": "function",
                    "function": {"name": "get_weather", "arguments": LOOP_ARGS},
                }
            ],
        }
        finish = "tool_calls"
    else:
        message = {"role": "assistant", "content": "It is 18 degrees in Paris."}
        finish = "stop"
    return {
        "id": f"chatcmpl-{turn}",
        "object": "chat.completion",
        "created": 1764490000,
        "model": body["model"] + "-2026-01-01",
        "choices": [{"index": 0, "finish_reason": finish, "message": message}],
        "usage": {
            "prompt_tokens": 100 + 10 * turn,
            "completion_tokens": 20 + turn,
            "total_tokens": 120 + 11 * turn,
            "prompt_tokens_details": {"cached_tokens": 0},
        },
    }


def _handle(request: httpx.Request) -> httpx.Response:
    body = json.loads(request.content)
    if request.url.path.endswith("/responses"):
        return httpx.Response(200, json=_responses(body))
    if request.url.path.endswith("/chat/completions"):
        return httpx.Response(200, json=_chat(body))
    return httpx.Response(404, json={"error": {"message": "not faked"}})


client = AsyncOpenAI(
    api_key="sk-fake",
    base_url="http://fake-openai.invalid/v1",
    http_client=httpx.AsyncClient(transport=httpx.MockTransport(_handle)),
)


def responses_model(name: str) -> OpenAIResponsesModel:
    return OpenAIResponsesModel(model=name, openai_client=client)


# --- tools -------------------------------------------------------------------------------


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


@input_guardrail(run_in_parallel=False)  # (before the model is called: no model span)
async def block_everything(ctx, agent, user_input) -> GuardrailFunctionOutput:
    return GuardrailFunctionOutput(output_info="blocked", tripwire_triggered=True)


# --- a hand-written Model ------------------------------------------------------------------


class ScriptedModel(Model):
    """The SDK's Model interface, answering from a script: three tool calls, then text."""

    async def get_response(
        self,
        system_instructions,
        input,
        model_settings,
        tools,
        output_schema,
        handoffs,
        tracing,
        **kwargs,
    ) -> ModelResponse:
        items = input if isinstance(input, list) else []
        turn = sum(
            (i.get("type") if isinstance(i, dict) else getattr(i, "type", None))
            == "function_call_output"
            for i in items
        )
        if turn < 3:
            output = [
                ResponseFunctionToolCall(
                    type="function_call",
                    id=f"fc_{turn}",
                    call_id=f"call_{turn}",
                    name="get_weather",
                    arguments=LOOP_ARGS,
                    status="completed",
                )
            ]
        else:
            output = [
                ResponseOutputMessage(
                    type="message",
                    id="msg_final",
                    role="assistant",
                    status="completed",
                    content=[
                        ResponseOutputText(
                            type="output_text", text="It is 18 degrees.", annotations=[]
                        )
                    ],
                )
            ]
        usage = Usage(
            requests=1,
            input_tokens=100 + 10 * turn,
            output_tokens=20 + turn,
            total_tokens=120 + 11 * turn,
        )
        return ModelResponse(output=output, usage=usage, response_id=f"scripted_{turn}")

    def stream_response(self, *args, **kwargs):
        raise NotImplementedError


def save(scenario: str) -> None:
    cap.save_scenario(PREFIX, scenario, ONLY)


async def mcp_loop() -> None:
    from agents.mcp import MCPServerStdio

    server = Path(__file__).with_name("mcp_weather_server.py")
    params = {"command": sys.executable, "args": [str(server)]}
    async with MCPServerStdio(params=params, name="weather") as weather:
        agent = Agent(
            name="weather_agent",
            instructions="Answer weather questions.",
            model=responses_model("fake-loop-model"),
            mcp_servers=[weather],
        )
        print((await Runner.run(agent, "Weather in Paris?")).final_output)
    save("loop")
    cap.shutdown()


async def main() -> None:
    if INSTRUMENTATION == "mcp":
        return await mcp_loop()
    agent = Agent(
        name="weather_agent",
        instructions="Answer weather questions.",
        model=responses_model("fake-loop-model"),
        tools=[get_weather],
    )
    print((await Runner.run(agent, "Weather in Paris?")).final_output)
    save("loop")

    agent = Agent(name="fetch_agent", model=responses_model("fake-error-model"), tools=[fetch_page])
    print((await Runner.run(agent, "Fetch example.com")).final_output)
    save("tool_error")

    agent = Agent(
        name="fetch_agent", model=responses_model("fake-error-model"), tools=[fetch_page_fatal]
    )
    try:
        await Runner.run(agent, "Fetch example.com")
    except Exception as exc:
        print("run failed as intended:", type(exc).__name__, exc)
    save("tool_error_fatal")

    agent = Agent(
        name="weather_agent", model=responses_model("fake-loop-model"), tools=[get_weather]
    )
    try:
        await Runner.run(agent, "Weather in Paris?", max_turns=2)
    except MaxTurnsExceeded as exc:
        print("run failed as intended:", type(exc).__name__, exc)
    save("max_turns")

    specialist = Agent(
        name="weather_specialist",
        handoff_description="Knows the weather.",
        model=responses_model("fake-specialist-model"),
        tools=[get_weather],
    )
    triage = Agent(
        name="triage_agent", model=responses_model("fake-triage-model"), handoffs=[specialist]
    )
    print((await Runner.run(triage, "Weather in Oslo?")).final_output)
    save("handoff")

    researcher = Agent(name="researcher", model=responses_model("fake-researcher-model"))
    orchestrator = Agent(
        name="orchestrator",
        model=responses_model("fake-orchestrator-model"),
        tools=[researcher.as_tool("ask_researcher", "Ask the research agent.")],
    )
    print((await Runner.run(orchestrator, "What is a keel?")).final_output)
    save("agent_as_tool")

    agent = Agent(
        name="weather_agent",
        model=OpenAIChatCompletionsModel(model="fake-chat-model", openai_client=client),
        tools=[get_weather],
    )
    print((await Runner.run(agent, "Weather in Paris?")).final_output)
    save("chatcompletions")

    agent = Agent(name="weather_agent", model=ScriptedModel(), tools=[get_weather])
    print((await Runner.run(agent, "Weather in Paris?")).final_output)
    save("custom_model")

    agent = Agent(
        name="verbose_agent", model=responses_model("fake-verbose-model"), tools=[get_weather]
    )
    try:
        await Runner.run(agent, "Tell me a story about Oslo's weather.")
    except ModelBehaviorError as exc:
        print("run failed as intended:", type(exc).__name__, exc)
    save("length")

    agent = Agent(
        name="guarded_agent",
        model=responses_model("fake-guarded-model"),
        tools=[get_weather],
        input_guardrails=[block_everything],
    )
    try:
        await Runner.run(agent, "Weather in Paris?")
    except InputGuardrailTripwireTriggered as exc:
        print("run failed as intended:", type(exc).__name__)
    save("guardrail")
    cap.shutdown()


if __name__ == "__main__":
    asyncio.run(main())
