"""pydantic-ai agents traced by pydantic-ai's own instrumentation, exported by OTLP.

Run: python tests/otlp_agents/pydantic_ai_agent.py SCENARIO...
with OTEL_EXPORTER_OTLP_* set (see _otel.py). The models are pydantic-ai's
FunctionModel: a Python function that answers from the conversation so far, with
token usage 100 + 10n in, 20 + n out on turn n, under a model name keelwave prices.

Scenarios, each one top-level run (its own trace):
  loop        weather_agent calls get_weather three times with the same arguments,
              then answers
  nested      coordinator's tool ask_researcher runs the agent researcher, which
              calls its own tool lookup
  tool_error  fetch_agent's tool raises RuntimeError, which ends the run
"""

from __future__ import annotations

import asyncio
import sys

from _otel import finish, provider
from pydantic_ai import Agent
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
from pydantic_ai.usage import RequestUsage

Agent.instrument_all(InstrumentationSettings(tracer_provider=provider))
MODEL = "gpt-4o-mini"
# What an OpenAI-style model sends: the arguments as a JSON string.
LOOP_ARGS = '{"city": "Paris", "unit": "celsius"}'


def _returns(messages: list[ModelMessage]) -> list[ToolReturnPart]:
    return [
        part
        for message in messages
        if isinstance(message, ModelRequest)
        for part in message.parts
        if isinstance(part, ToolReturnPart)
    ]


def _turn(messages: list[ModelMessage]) -> int:
    return sum(isinstance(message, ModelResponse) for message in messages)


def _response(parts: list, messages: list[ModelMessage]) -> ModelResponse:
    turn = _turn(messages)
    return ModelResponse(
        parts=parts,
        usage=RequestUsage(input_tokens=100 + 10 * turn, output_tokens=20 + turn),
        model_name=MODEL,
        provider_name="openai",
    )


def loop_model(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
    done = len(_returns(messages))
    if done < 3:
        return _response([ToolCallPart("get_weather", LOOP_ARGS, f"call_{done}")], messages)
    return _response([TextPart("It is 18 degrees in Paris.")], messages)


weather_agent = Agent(FunctionModel(loop_model, model_name=MODEL), name="weather_agent")


@weather_agent.tool_plain
def get_weather(city: str, unit: str = "celsius") -> str:
    """Current weather for a city."""
    return f"18 degrees {unit} in {city}"


def inner_model(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
    if not _returns(messages):
        return _response([ToolCallPart("lookup", {"term": "keel"}, "inner_0")], messages)
    return _response([TextPart("A keel is the backbone of a ship.")], messages)


researcher = Agent(FunctionModel(inner_model, model_name=MODEL), name="researcher")


@researcher.tool_plain
def lookup(term: str) -> str:
    """Look a term up in the encyclopedia."""
    return f"{term}: the structural backbone of a ship"


def outer_model(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
    returns = _returns(messages)
    if not returns:
        call = ToolCallPart("ask_researcher", {"question": "What is a keel?"}, "outer_0")
        return _response([call], messages)
    return _response([TextPart(f"Researcher says: {returns[0].content}")], messages)


coordinator = Agent(FunctionModel(outer_model, model_name=MODEL), name="coordinator")


@coordinator.tool_plain
async def ask_researcher(question: str) -> str:
    """Ask the research agent."""
    return (await researcher.run(question)).output


def error_model(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
    call = ToolCallPart("fetch_page", {"url": "https://example.com/"}, "fetch_0")
    return _response([call], messages)


fetch_agent = Agent(FunctionModel(error_model, model_name=MODEL), name="fetch_agent")


@fetch_agent.tool_plain
def fetch_page(url: str) -> str:
    """Fetch a web page."""
    raise RuntimeError(f"connection refused: {url}")


async def scenario(name: str) -> None:
    if name == "loop":
        print((await weather_agent.run("Weather in Paris?")).output)
    elif name == "nested":
        print((await coordinator.run("What is a keel?")).output)
    elif name == "tool_error":
        try:
            await fetch_agent.run("Fetch example.com")
        except RuntimeError as error:  # the exception escapes the run, as the user sees it
            print("fetch_agent failed:", error)
    else:
        raise SystemExit(f"unknown scenario {name!r}")


async def main(names: list[str]) -> None:
    for name in names:
        await scenario(name)


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1:]))
    finish()
