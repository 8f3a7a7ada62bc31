"""Capture pydantic-ai's built-in OpenTelemetry instrumentation (no network).

Run: python tests/otlp_fixtures/capture/pydanticai.py [builtin|openinference|v2] [SCENARIO…]
Needs: pydantic-ai-slim opentelemetry-sdk opentelemetry-exporter-otlp-proto-common (and
       openinference-instrumentation-pydantic-ai for openinference; openai for reasoning)

Naming scenarios saves only those (every scenario still runs).

The model is pydantic-ai's own FunctionModel: a Python function that looks at the
conversation so far and returns the next ModelResponse, with explicit token usage
and finish reasons so the numbers in the spans are known.

Scenarios (one fixture each, pydanticai[_openinference]_<scenario>.json):
  loop        the tool is called three times with the same arguments, one call per
              model turn, then the model answers
  tool_error  the tool raises: first a ModelRetry (fed back to the model, which
              retries), then a RuntimeError that ends the run with an exception
  nested      the outer agent's tool runs an inner agent, which calls its own tool
  parallel    one model turn asks for the same tool twice (parallel tool calls)
  output_tool the agent has a structured output type: the model ends the run by
              calling the output tool ``final_result`` (no span of its own: the
              result is the run span's ``final_result`` attribute)
  reasoning   the loop agent's tool and answer with pydantic-ai's OpenAIChatModel over a
              fake OpenAI API (httpx MockTransport): its usage reports
              completion_tokens_details.reasoning_tokens 7 (part of completion_tokens, as
              OpenAI counts) and prompt_tokens_details.cached_tokens 5n (skipped without
              the openai package)
  request_limit  the loop agent with UsageLimits(request_limit=2): UsageLimitExceeded
              before its third model request ("would exceed the request_limit of 2")
  token_limit the loop agent with UsageLimits(total_tokens_limit=250): UsageLimitExceeded
              after its second model call ("Exceeded the total_tokens_limit of 250")
"""

from __future__ import annotations

import asyncio
import json
import sys

from _otlp import Capture
from pydantic import BaseModel
from pydantic_ai import Agent, ModelRetry
from pydantic_ai.exceptions import UsageLimitExceeded
from pydantic_ai.messages import (
    ModelMessage,
    ModelRequest,
    ModelResponse,
    TextPart,
    ToolCallPart,
    ToolReturnPart,
)
from pydantic_ai.models.function import AgentInfo, FunctionModel
from pydantic_ai.models.instrumented import InstrumentationSettings
from pydantic_ai.usage import RequestUsage, UsageLimits

# builtin: pydantic-ai's own spans (pydanticai_<scenario>.json); openinference: the same
# spans given OpenInference's attributes too, by its span processor, which runs before
# the exporter's (pydanticai_openinference_<scenario>.json); v2: pydantic-ai's own spans
# in its deprecated data format version 2 (pydanticai_v2_<scenario>.json: tool spans
# "running tool" with tool_arguments / tool_response).
INSTRUMENTATION = sys.argv[1] if len(sys.argv) > 1 else "builtin"
ONLY = set(sys.argv[2:])  # scenarios to save (all if none named)
PREFIX = {"builtin": "pydanticai", "openinference": "pydanticai_openinference"}.get(
    INSTRUMENTATION, f"pydanticai_{INSTRUMENTATION}"
)
cap = Capture(f"keelwave-capture-pydanticai-{INSTRUMENTATION}")
if INSTRUMENTATION == "openinference":
    from openinference.instrumentation.pydantic_ai import OpenInferenceSpanProcessor

    processors = cap.provider._active_span_processor
    processors._span_processors = (OpenInferenceSpanProcessor(), *processors._span_processors)
# This version has no Agent(instrument=...) argument any more: instrument_all (or an
# Instrumentation capability) switches the instrumentation on.
if INSTRUMENTATION == "v2":
    Agent.instrument_all(InstrumentationSettings(tracer_provider=cap.provider, version=2))
else:
    Agent.instrument_all(InstrumentationSettings(tracer_provider=cap.provider))

# What an OpenAI-style model sends: the arguments as a JSON string (note the spacing).
LOOP_ARGS = '{"city": "Paris",  "unit": "celsius"}'


def _tool_parts(messages: list[ModelMessage], kind: type) -> list:
    return [
        p for m in messages if isinstance(m, ModelRequest) for p in m.parts if isinstance(p, kind)
    ]


def _response(parts: list, turn: int, finish: str) -> ModelResponse:
    return ModelResponse(
        parts=parts,
        usage=RequestUsage(input_tokens=100 + 10 * turn, output_tokens=20 + turn),
        finish_reason=finish,
        provider_name="fake-provider",
    )


# --- loop ----------------------------------------------------------------------------


def loop_model(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
    done = len(_tool_parts(messages, ToolReturnPart))
    if done < 3:
        call = ToolCallPart("get_weather", LOOP_ARGS, tool_call_id=f"call_{done}")
        return _response([call], done, "tool_call")
    return _response([TextPart("It is 18 degrees in Paris.")], done, "stop")


loop_agent = Agent(
    FunctionModel(loop_model, model_name="fake-loop-model"),
    name="weather_agent",
    instructions="Answer weather questions.",
)


@loop_agent.tool_plain
def get_weather(city: str, unit: str = "celsius") -> str:
    """Current weather for a city."""
    return f"18 degrees {unit} in {city}"


# --- tool_error ----------------------------------------------------------------------


def error_model(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
    turn = sum(isinstance(m, ModelResponse) for m in messages)
    call = ToolCallPart("fetch_page", {"url": "https://example.com/"}, tool_call_id=f"call_{turn}")
    return _response([call], turn, "tool_call")


error_agent = Agent(
    FunctionModel(error_model, model_name="fake-error-model"),
    name="fetch_agent",
)
_fetch_attempts = 0


@error_agent.tool_plain
def fetch_page(url: str) -> str:
    """Fetch a web page."""
    global _fetch_attempts
    _fetch_attempts += 1
    if _fetch_attempts == 1:
        raise ModelRetry("timeout, try again")
    raise RuntimeError(f"connection refused: {url}")


# --- nested --------------------------------------------------------------------------


def inner_model(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
    if not _tool_parts(messages, ToolReturnPart):
        call = ToolCallPart("lookup", {"term": "keel"}, tool_call_id="inner_call_0")
        return _response([call], 0, "tool_call")
    return _response([TextPart("A keel is the backbone of a ship.")], 1, "stop")


inner_agent = Agent(
    FunctionModel(inner_model, model_name="fake-inner-model"),
    name="researcher",
)


@inner_agent.tool_plain
def lookup(term: str) -> str:
    """Look a term up in the encyclopedia."""
    return f"{term}: the structural backbone of a ship"


def outer_model(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
    returns = _tool_parts(messages, ToolReturnPart)
    if not returns:
        call = ToolCallPart("ask_researcher", {"question": "What is a keel?"}, tool_call_id="c0")
        return _response([call], 0, "tool_call")
    return _response([TextPart(f"Researcher says: {returns[0].content}")], 1, "stop")


outer_agent = Agent(
    FunctionModel(outer_model, model_name="fake-outer-model"),
    name="coordinator",
)


@outer_agent.tool_plain
async def ask_researcher(question: str) -> str:
    """Ask the research agent."""
    result = await inner_agent.run(question)
    return result.output


# --- parallel ------------------------------------------------------------------------


def parallel_model(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
    if not _tool_parts(messages, ToolReturnPart):
        calls = [
            ToolCallPart("get_weather", {"city": "Oslo"}, tool_call_id="p0"),
            ToolCallPart("get_weather", {"city": "Oslo"}, tool_call_id="p1"),
        ]
        return _response(calls, 0, "tool_call")
    return _response([TextPart("Oslo: 3 degrees.")], 1, "stop")


parallel_agent = Agent(
    FunctionModel(parallel_model, model_name="fake-parallel-model"),
    name="weather_agent",
)
parallel_agent.tool_plain(get_weather)


# --- output_tool ---------------------------------------------------------------------


class Forecast(BaseModel):
    city: str
    degrees: int


def output_model(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
    if not _tool_parts(messages, ToolReturnPart):
        call = ToolCallPart("get_weather", {"city": "Rome"}, tool_call_id="o0")
        return _response([call], 0, "tool_call")
    name = info.output_tools[0].name
    final = ToolCallPart(name, {"city": "Rome", "degrees": 24}, tool_call_id="o1")
    return _response([final], 1, "tool_call")


output_agent = Agent(
    FunctionModel(output_model, model_name="fake-output-model"),
    name="forecast_agent",
    output_type=Forecast,
)
output_agent.tool_plain(get_weather)


# --- reasoning -----------------------------------------------------------------------


def _chat_completion(body: dict) -> dict:
    """The fake OpenAI API's answer: get_weather once, then a text answer."""
    turn = sum(message.get("role") == "tool" for message in body["messages"])
    message: dict = {"role": "assistant", "content": None}
    if turn < 1:
        call = {"name": "get_weather", "arguments": LOOP_ARGS}
        message["tool_calls"] = [{"id": "call_0", "type": "function", "function": call}]
    else:
        message["content"] = "It is 18 degrees in Paris."
    return {
        "id": f"chatcmpl-{turn}", "object": "chat.completion", "created": 1,
        "model": body["model"],
        "choices": [{"index": 0, "message": message,
                     "finish_reason": "tool_calls" if turn < 1 else "stop"}],
        "usage": {
            "prompt_tokens": 100 + 10 * turn,
            "completion_tokens": 20 + turn,  # (reasoning included, as OpenAI counts)
            "total_tokens": 120 + 11 * turn,
            "prompt_tokens_details": {"cached_tokens": 5 * turn},
            "completion_tokens_details": {"reasoning_tokens": 7},
        },
    }  # fmt: skip


def reasoning_agent() -> Agent | None:
    try:
        from openai import AsyncOpenAI
        from pydantic_ai.models.openai import OpenAIChatModel
        from pydantic_ai.providers.openai import OpenAIProvider
    except ImportError:
        return None
    try:  # openai >= 3 is built on httpx2, a fork of httpx with the same API
        import httpx2 as httpx
    except ImportError:
        import httpx

    def answer(request):
        return httpx.Response(200, json=_chat_completion(json.loads(request.content)))

    client = AsyncOpenAI(
        api_key="sk-fake", base_url="http://fake.invalid/v1",
        http_client=httpx.AsyncClient(transport=httpx.MockTransport(answer)),
    )  # fmt: skip
    model = OpenAIChatModel("gpt-5-mini", provider=OpenAIProvider(openai_client=client))
    agent = Agent(model, name="weather_agent")
    agent.tool_plain(get_weather)
    return agent


def save(scenario: str) -> None:
    cap.save_scenario(PREFIX, scenario, ONLY)


async def main() -> None:
    print((await loop_agent.run("Weather in Paris?")).output)
    save("loop")

    try:
        await error_agent.run("Fetch example.com")
    except RuntimeError as exc:
        print("run failed as intended:", exc)
    save("tool_error")

    print((await outer_agent.run("What is a keel?")).output)
    save("nested")

    print((await parallel_agent.run("Weather in Oslo?")).output)
    save("parallel")

    print((await output_agent.run("Forecast for Rome?")).output)
    save("output_tool")

    agent = reasoning_agent()
    if agent is None:
        print("reasoning: skipped (no openai package)")
    else:
        print((await agent.run("Weather in Paris?")).output)
        save("reasoning")

    for scenario, limits in (
        ("request_limit", UsageLimits(request_limit=2)),
        ("token_limit", UsageLimits(total_tokens_limit=250)),
    ):
        try:
            await loop_agent.run("Weather in Paris?", usage_limits=limits)
        except UsageLimitExceeded as exc:
            print(f"{scenario}: stopped as intended:", exc)
        save(scenario)
    cap.shutdown()


if __name__ == "__main__":
    asyncio.run(main())
