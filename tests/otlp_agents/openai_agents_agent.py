"""OpenAI Agents SDK agents traced by OpenInference's instrumentor, exported by OTLP.

Run: python tests/otlp_agents/openai_agents_agent.py SCENARIO...
with OTEL_EXPORTER_OTLP_* set (see _otel.py). In this SDK the model opens the span
of a model call, so the agents use the SDK's real OpenAIResponsesModel over an
AsyncOpenAI client whose HTTP transport answers in-process (no network): the
model classes, their parsing and their spans are the real ones. Usage on turn n
(counted per agent) is 100 + 10n in, 20 + n out, and the model is "gpt-4o-mini".

Scenarios, each one Runner.run (its own trace):
  loop               weather_agent calls get_weather three times with the same
                     arguments, then answers
  nested             orchestrator calls the agent researcher through Agent.as_tool
  handoff            triage_agent hands off to weather_specialist, which calls a tool
  tool_error         fetch_agent's tool raises with failure_error_function=None: the
                     run fails
  tool_error_handled lenient_fetch_agent's tool raises; the SDK's default
                     failure_error_function tells the model, which answers
"""

from __future__ import annotations

import asyncio
import json
import sys

from _otel import finish, provider
from agents import Agent, OpenAIResponsesModel, Runner, function_tool
from openai import AsyncOpenAI
from openinference.instrumentation.openai_agents import OpenAIAgentsInstrumentor

try:  # openai >= 3 is built on httpx2, a fork of httpx with the same API
    import httpx2 as httpx
except ImportError:
    import httpx

# Exclusive by default: the SDK's own processor (an upload to OpenAI) is replaced.
OpenAIAgentsInstrumentor().instrument(tracer_provider=provider)
LOOP_ARGS = '{"city": "Paris", "unit": "celsius"}'


def _call(name: str, arguments: str, turn: int) -> dict:
    return {
        "type": "function_call",
        "id": f"fc_{name}_{turn}",
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


def _script(agent: str, turn: int, outputs: list[str]) -> list[dict]:
    """The model's output items for an agent (named in its instructions) on a turn."""
    if agent == "weather_agent":
        if turn < 3:
            return [_call("get_weather", LOOP_ARGS, turn)]
        return [_text("It is 18 degrees in Paris.")]
    if agent in ("fetch_agent", "lenient_fetch_agent"):
        if turn < 1:
            return [_call("fetch_page", '{"url": "https://example.com/"}', turn)]
        return [_text("The page could not be fetched.")]
    if agent == "triage_agent":
        return [_call("transfer_to_weather_specialist", "{}", turn)]
    if agent == "weather_specialist":
        if turn < 1:
            return [_call("get_weather", '{"city": "Oslo"}', turn)]
        return [_text("Oslo: 3 degrees.")]
    if agent == "orchestrator":
        if turn < 1:
            return [_call("ask_researcher", '{"input": "What is a keel?"}', turn)]
        return [_text(f"Researcher says: {outputs[-1]}")]
    if agent == "researcher":
        return [_text("A keel is the backbone of a ship.")]
    raise AssertionError(agent)


def _responses(body: dict) -> dict:
    agent = body["instructions"].removeprefix("You are ").split(".")[0]
    items = body["input"] if isinstance(body["input"], list) else []
    results = [i for i in items if i.get("type") == "function_call_output"]
    # After a handoff the specialist sees the triage agent's items too: count its own.
    own = [i for i in results if not i["call_id"].startswith("call_transfer")]
    turn = len(own) if agent == "weather_specialist" else len(results)
    return {
        "id": f"resp_{agent}_{turn}",
        "object": "response",
        "created_at": 1764490000,
        "model": body["model"] + "-2024-07-18",
        "status": "completed",
        "parallel_tool_calls": True,
        "tool_choice": "auto",
        "tools": [],
        "instructions": body["instructions"],
        "output": _script(agent, turn, [str(i["output"]) for i in results]),
        "usage": {
            "input_tokens": 100 + 10 * turn,
            "output_tokens": 20 + turn,
            "total_tokens": 120 + 11 * turn,
            "input_tokens_details": {"cached_tokens": 0},
            "output_tokens_details": {"reasoning_tokens": 0},
        },
    }


def _handle(request: httpx.Request) -> httpx.Response:
    if request.url.path.endswith("/responses"):
        return httpx.Response(200, json=_responses(json.loads(request.content)))
    return httpx.Response(404, json={"error": {"message": "not faked"}})


client = AsyncOpenAI(
    api_key="sk-fake",
    base_url="http://fake-openai.invalid/v1",
    http_client=httpx.AsyncClient(transport=httpx.MockTransport(_handle)),
)


def agent(name: str, **options) -> Agent:
    return Agent(
        name=name,
        instructions=f"You are {name}.",
        model=OpenAIResponsesModel(model="gpt-4o-mini", openai_client=client),
        **options,
    )


@function_tool
def get_weather(city: str, unit: str = "celsius") -> str:
    """Current weather for a city."""
    return f"18 degrees {unit} in {city}"


@function_tool(failure_error_function=None)
def fetch_page(url: str) -> str:
    """Fetch a web page."""
    raise RuntimeError(f"connection refused: {url}")


@function_tool(name_override="fetch_page")
def lenient_fetch_page(url: str) -> str:
    """Fetch a web page."""
    raise RuntimeError(f"connection refused: {url}")


async def scenario(name: str) -> None:
    if name == "loop":
        result = await Runner.run(agent("weather_agent", tools=[get_weather]), "Weather?")
        print(result.final_output)
    elif name == "nested":
        researcher = agent("researcher")
        tool = researcher.as_tool("ask_researcher", "Ask the research agent.")
        result = await Runner.run(agent("orchestrator", tools=[tool]), "What is a keel?")
        print(result.final_output)
    elif name == "handoff":
        specialist = agent(
            "weather_specialist", handoff_description="Knows the weather.", tools=[get_weather]
        )
        result = await Runner.run(agent("triage_agent", handoffs=[specialist]), "Oslo?")
        print(result.final_output)
    elif name == "tool_error":
        try:
            await Runner.run(agent("fetch_agent", tools=[fetch_page]), "Fetch example.com")
        except Exception as error:  # the SDK's UserError: the run failed
            print("fetch_agent failed:", type(error).__name__, error)
    elif name == "tool_error_handled":
        lenient = agent("lenient_fetch_agent", tools=[lenient_fetch_page])
        print((await Runner.run(lenient, "Fetch example.com")).final_output)
    else:
        raise SystemExit(f"unknown scenario {name!r}")


async def main(names: list[str]) -> None:
    for name in names:
        await scenario(name)


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1:]))
    finish()
