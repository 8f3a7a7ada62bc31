"""Capture AutoGen AgentChat (no network).

Run: python tests/otlp_fixtures/capture/autogen_agents.py native
       autogen-core's own GenAI spans (create_agent / invoke_agent / execute_tool) and the
       agent runtime's messaging spans, through the global tracer provider alone
       writes autogen_native_<scenario>.json
     python tests/otlp_fixtures/capture/autogen_agents.py openinference
       the same plus openinference-instrumentation-autogen-agentchat
       writes autogen_<scenario>.json
Needs: autogen-agentchat autogen-ext[openai] opentelemetry-sdk
       opentelemetry-exporter-otlp-proto-common (openinference:
       openinference-instrumentation-autogen-agentchat)

autogen-core traces through the global tracer provider (``trace.get_tracer("autogen-core")``
and the runtime's ``TraceHelper``), so the script sets it; OpenInference's instrumentor is
given the same provider. The model is autogen-ext's real ``OpenAIChatCompletionClient``
(which OpenInference wraps) with an ``http_client`` whose transport is an in-process
``httpx.MockTransport``: the Chat Completions API answers from a script chosen by the
request's model name, by the number of the agent's own tool results in the conversation,
with the README's token counts; the loop's arguments are the model's string
``{"city": "Paris",  "unit": "celsius"}`` (two spaces). An audit hook records any socket
connection or name lookup, and the script fails if there was one.

Each scenario runs in its own ``asyncio.run()`` and is saved after it returns: AgentChat's
``run()`` leaves the agent's message stream open, and its span ends only when the event
loop shuts the generator down.

Scenarios (one fixture each):
  loop           AssistantAgent weather_agent (max_tool_iterations=10): get_weather three
                 times with the same arguments, one call per model turn, then an answer
  tool_error     fetch_agent: fetch_page raises; AutoGen sends the error to the model as
                 the tool result (is_error), and the model answers
  max_turns      the model asks for get_weather forever; max_tool_iterations=2: after two
                 tool rounds the agent returns a ToolCallSummaryMessage (no error)
  nested         an orchestrator agent uses weather_agent as a tool (AgentTool), which
                 calls get_weather
  handoff        a Swarm: triage_agent hands off to weather_agent (transfer_to_weather_agent),
                 which calls get_weather and answers; TextMessageTermination ends the team
  round_robin    a RoundRobinGroupChat of weather_agent and reviewer, max_turns=2: each
                 speaks once (weather_agent calls get_weather), then the team stops
"""

from __future__ import annotations

import asyncio
import json
import sys

NETWORK: list[tuple] = []


def _audit(event: str, args: tuple) -> None:
    if event in ("socket.connect", "socket.getaddrinfo"):
        NETWORK.append((event, args[1] if event == "socket.connect" else args[:2]))


sys.addaudithook(_audit)

from _otlp import Capture  # noqa: E402
from opentelemetry import trace  # noqa: E402

INSTRUMENTATION = sys.argv[1] if len(sys.argv) > 1 else "openinference"
cap = Capture(f"keelwave-capture-autogen-{INSTRUMENTATION}")
trace.set_tracer_provider(cap.provider)  # autogen-core's own spans go here
if INSTRUMENTATION == "openinference":
    from openinference.instrumentation.autogen_agentchat import AutogenAgentChatInstrumentor

    AutogenAgentChatInstrumentor().instrument(tracer_provider=cap.provider)
    PREFIX = "autogen"
elif INSTRUMENTATION == "native":
    PREFIX = "autogen_native"
else:
    raise SystemExit(f"unknown instrumentation {INSTRUMENTATION!r}: native or openinference")

from autogen_agentchat.agents import AssistantAgent  # noqa: E402
from autogen_agentchat.conditions import TextMessageTermination  # noqa: E402
from autogen_agentchat.teams import RoundRobinGroupChat, Swarm  # noqa: E402
from autogen_agentchat.tools import AgentTool  # noqa: E402
from autogen_ext.models.openai import OpenAIChatCompletionClient  # noqa: E402

try:  # openai >= 3 is built on httpx2, a fork of httpx with the same API
    import httpx2 as httpx
except ImportError:
    import httpx

LOOP_ARGS = '{"city": "Paris",  "unit": "celsius"}'  # the model's string (two spaces)


# --- the fake OpenAI HTTP API ----------------------------------------------------------


def _script(model: str, turn: int, results: list[str]):
    """(tool name, arguments) or (None, answer), given the agent's own tool results."""
    if model == "fake-loop-model":
        return ("get_weather", LOOP_ARGS) if turn < 3 else (None, "It is 18 degrees in Paris.")
    if model == "fake-forever-model":
        return "get_weather", LOOP_ARGS
    if model == "fake-error-model":
        if turn < 1:
            return "fetch_page", '{"url": "https://example.com/"}'
        return None, f"The page could not be fetched ({results[-1][:40]})."
    if model == "fake-specialist-model":
        return ("get_weather", '{"city": "Oslo"}') if turn < 1 else (None, "Oslo: 3 degrees.")
    if model == "fake-orchestrator-model":
        if turn < 1:
            return "weather_agent", '{"task": "Weather in Oslo?"}'
        return None, f"The weather agent says: {results[-1][-40:]}"
    if model == "fake-triage-model":
        return "transfer_to_weather_agent", "{}"
    if model == "fake-reviewer-model":
        return None, "Looks right."
    raise AssertionError(model)


def _chat(body: dict) -> dict:
    model = body["model"]
    own = {c["id"] for m in body["messages"] if m["role"] == "assistant"
           for c in m.get("tool_calls") or [] if c["id"].startswith(f"call_{model}_")}  # fmt: skip
    results = [m["content"] for m in body["messages"]
               if m["role"] == "tool" and m["tool_call_id"] in own]  # fmt: skip
    turn = len(results)
    name, payload = _script(model, turn, results)
    if name is None:
        message, finish = {"role": "assistant", "content": payload}, "stop"
    else:
        call = {"id": f"call_{model}_{turn}", "type": "function",
                "function": {"name": name, "arguments": payload}}  # fmt: skip
        message, finish = {"role": "assistant", "content": None, "tool_calls": [call]}, "tool_calls"
    return {
        "id": f"chatcmpl-{model}-{turn}",
        "object": "chat.completion",
        "created": 1764490000,
        "model": model,  # as the request (AutoGen warns when they differ)
        "choices": [{"index": 0, "finish_reason": finish, "message": message}],
        "usage": {
            "prompt_tokens": 100 + 10 * turn,
            "completion_tokens": 20 + turn,
            "total_tokens": 120 + 11 * turn,
        },
    }


async def _handle(request: httpx.Request) -> httpx.Response:
    if request.url.path.endswith("/chat/completions"):
        return httpx.Response(200, json=_chat(json.loads(request.content)))
    return httpx.Response(404, json={"error": {"message": "not faked"}})


MODEL_INFO = {"vision": False, "function_calling": True, "json_output": False,
              "structured_output": False, "family": "unknown"}  # fmt: skip


def client(model: str) -> OpenAIChatCompletionClient:
    return OpenAIChatCompletionClient(
        model=model,
        api_key="sk-fake",
        base_url="http://fake-openai.invalid/v1",
        model_info=MODEL_INFO,
        http_client=httpx.AsyncClient(transport=httpx.MockTransport(_handle)),
    )


# --- tools -------------------------------------------------------------------------------


async def get_weather(city: str, unit: str = "celsius") -> str:
    """Current weather for a city."""
    return f"18 degrees {unit} in {city}"


async def fetch_page(url: str) -> str:
    """Fetch a web page."""
    raise RuntimeError(f"connection refused: {url}")


def weather_agent(model: str = "fake-loop-model", **kwargs) -> AssistantAgent:
    return AssistantAgent("weather_agent", model_client=client(model), tools=[get_weather],
                          description="Knows the weather.", **kwargs)  # fmt: skip


# --- scenarios ---------------------------------------------------------------------------


async def loop() -> None:
    result = await weather_agent(max_tool_iterations=10).run(task="Weather in Paris?")
    print(repr(result.messages[-1].content))


async def tool_error() -> None:
    agent = AssistantAgent("fetch_agent", model_client=client("fake-error-model"),
                           tools=[fetch_page], max_tool_iterations=10)  # fmt: skip
    result = await agent.run(task="Fetch example.com")
    print(repr(result.messages[-1].content))


async def max_turns() -> None:
    result = await weather_agent("fake-forever-model", max_tool_iterations=2).run(
        task="Weather in Paris?"
    )
    print(type(result.messages[-1]).__name__, repr(result.messages[-1].content))


async def nested() -> None:
    inner = weather_agent("fake-specialist-model", max_tool_iterations=10)
    orchestrator = AssistantAgent("orchestrator", model_client=client("fake-orchestrator-model"),
                                  tools=[AgentTool(inner)], max_tool_iterations=10)  # fmt: skip
    result = await orchestrator.run(task="Weather in Oslo?")
    print(repr(result.messages[-1].content))


async def handoff() -> None:
    triage = AssistantAgent("triage_agent", model_client=client("fake-triage-model"),
                            handoffs=["weather_agent"])  # fmt: skip
    specialist = weather_agent("fake-specialist-model", max_tool_iterations=10)
    done = TextMessageTermination("weather_agent")
    team = Swarm([triage, specialist], termination_condition=done)
    result = await team.run(task="Weather in Oslo?")
    print(result.stop_reason, repr(result.messages[-1].content))


async def round_robin() -> None:
    specialist = weather_agent("fake-specialist-model", max_tool_iterations=10)
    reviewer = AssistantAgent("reviewer", model_client=client("fake-reviewer-model"))
    team = RoundRobinGroupChat([specialist, reviewer], max_turns=2)
    result = await team.run(task="Weather in Oslo?")
    print(result.stop_reason, repr(result.messages[-1].content))


def main() -> None:
    for scenario in (loop, tool_error, max_turns, nested, handoff, round_robin):
        asyncio.run(scenario())
        cap.save(f"{PREFIX}_{scenario.__name__}")
    cap.shutdown()
    if NETWORK:
        raise SystemExit(f"network attempted: {NETWORK}")


if __name__ == "__main__":
    main()
