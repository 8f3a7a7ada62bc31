"""Capture CrewAI crews through an instrumentor (no network).

Run: python tests/otlp_fixtures/capture/crewai_crew.py openinference
       needs crewai openinference-instrumentation-crewai openinference-instrumentation-openai
       (CrewAIInstrumentor's method wrappers, OpenInference's OpenAI instrumentor for the
       model calls) writes crewai_<scenario>.json
     python tests/otlp_fixtures/capture/crewai_crew.py events
       needs crewai openinference-instrumentation-crewai
       (CrewAIInstrumentor(use_event_listener=True): spans built from CrewAI's event bus,
       LLM spans included) writes crewai_events_<scenario>.json
     python tests/otlp_fixtures/capture/crewai_crew.py openllmetry
       needs crewai opentelemetry-instrumentation-crewai opentelemetry-instrumentation-openai
       (traceloop) writes crewai_openllmetry_<scenario>.json
All need opentelemetry-sdk opentelemetry-exporter-otlp-proto-common.

The model is CrewAI's own native OpenAI provider (``OpenAICompletion``, what
``LLM(model="openai/...")`` builds) whose ``openai`` clients go over an
``httpx.MockTransport`` answering in-process: the Chat Completions API from a script
chosen by the request's model name, by the number of tool results in the conversation,
with the README's token counts; the arguments of the loop are the model's string
``{"city": "Paris",  "unit": "celsius"}`` (two spaces). CrewAI also asks the Responses
API's ``POST /responses/input_tokens`` for a token count before each model call and
after each tool result (context-window checks); the fake answers one byte in four.

CrewAI's anonymous telemetry (``CREWAI_DISABLE_TELEMETRY``) and its trace upload
(``CREWAI_TRACING_ENABLED=false``) are switched off before it is imported
(``OTEL_SDK_DISABLED`` would switch off this script's tracer provider too). An audit
hook records any socket connection or name lookup, and the script fails if there was
one.

Scenarios (one fixture each):
  loop          weather_agent: get_weather is called three times with the same arguments,
                one call per model turn, then the model answers
  tool_error    fetch_agent: fetch_page raises; CrewAI sends "Error executing tool: ..." to
                the model as the tool result, and the model answers
  nested        a crew of coordinator (allow_delegation=True) and weather_agent; the
                coordinator's task is delegated through CrewAI's "Delegate work to
                coworker" tool to weather_agent, which calls get_weather
  hierarchical  Process.hierarchical: CrewAI's own "Crew Manager" agent (manager_llm)
                delegates the task to weather_agent, which calls get_weather
  max_iter      the model asks for get_weather forever; the agent has max_iter=2: after two
                tool calls CrewAI asks for a final answer (a model call without tools)
"""

from __future__ import annotations

import json
import os
import sys

os.environ["CREWAI_DISABLE_TELEMETRY"] = "true"
os.environ["CREWAI_DISABLE_TRACKING"] = "true"
os.environ["CREWAI_TRACING_ENABLED"] = "false"
os.environ.setdefault("OPENAI_API_KEY", "sk-fake")

NETWORK: list[tuple] = []


def _audit(event: str, args: tuple) -> None:
    if event in ("socket.connect", "socket.getaddrinfo"):
        NETWORK.append((event, args[1] if event == "socket.connect" else args[:2]))


sys.addaudithook(_audit)

from _otlp import Capture  # noqa: E402

INSTRUMENTATION = sys.argv[1] if len(sys.argv) > 1 else "openinference"
cap = Capture(f"keelwave-capture-crewai-{INSTRUMENTATION}")
if INSTRUMENTATION == "openinference":
    from openinference.instrumentation.crewai import CrewAIInstrumentor
    from openinference.instrumentation.openai import OpenAIInstrumentor

    CrewAIInstrumentor().instrument(tracer_provider=cap.provider)
    OpenAIInstrumentor().instrument(tracer_provider=cap.provider)
    PREFIX = "crewai"
elif INSTRUMENTATION == "events":
    from openinference.instrumentation.crewai import CrewAIInstrumentor

    CrewAIInstrumentor().instrument(tracer_provider=cap.provider, use_event_listener=True)
    PREFIX = "crewai_events"
elif INSTRUMENTATION == "openllmetry":
    from opentelemetry.instrumentation.crewai import CrewAIInstrumentor
    from opentelemetry.instrumentation.openai import OpenAIInstrumentor

    CrewAIInstrumentor().instrument(tracer_provider=cap.provider)
    OpenAIInstrumentor().instrument(tracer_provider=cap.provider)
    PREFIX = "crewai_openllmetry"
else:
    raise SystemExit(
        f"unknown instrumentation {INSTRUMENTATION!r}: openinference, events or openllmetry"
    )

import httpx  # noqa: E402
from crewai import Agent, Crew, Process, Task  # noqa: E402
from crewai.events.event_bus import crewai_event_bus  # noqa: E402
from crewai.llms.providers.openai.completion import OpenAICompletion  # noqa: E402
from crewai.tools import tool  # noqa: E402
from openai import AsyncOpenAI, OpenAI  # noqa: E402

LOOP_ARGS = '{"city": "Paris",  "unit": "celsius"}'  # the model's string (two spaces)
BASE_URL = "http://fake-openai.invalid/v1"


# --- the fake OpenAI HTTP API ----------------------------------------------------------


def _script(model: str, turn: int, has_tools: bool, results: list[str]):
    """(tool name, arguments) or (None, answer), given how many tool results it has seen."""
    if not has_tools:  # CrewAI's forced final answer (max_iter): a call without tools
        return None, "It is 18 degrees in Paris (forced final answer)."
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
    if model in ("fake-coordinator-model", "fake-manager-model"):
        if turn < 1:
            arguments = {"task": "Find the weather in Oslo.", "context": "The user asks.",
                         "coworker": "weather_agent"}  # fmt: skip
            return "delegate_work_to_coworker", json.dumps(arguments)
        return None, f"The weather agent says: {results[-1]}"
    raise AssertionError(model)


def _chat(body: dict) -> dict:
    results = [m["content"] for m in body["messages"] if m["role"] == "tool"]
    turn = len(results)
    name, payload = _script(body["model"], turn, bool(body.get("tools")), results)
    if name is None:
        message, finish = {"role": "assistant", "content": payload}, "stop"
    else:
        call = {"id": f"call_{name}_{turn}", "type": "function",
                "function": {"name": name, "arguments": payload}}  # fmt: skip
        message, finish = {"role": "assistant", "content": None, "tool_calls": [call]}, "tool_calls"
    return {
        "id": f"chatcmpl-{body['model']}-{turn}",
        "object": "chat.completion",
        "created": 1764490000,
        "model": body["model"] + "-2026-01-01",
        "choices": [{"index": 0, "finish_reason": finish, "message": message}],
        "usage": {
            "prompt_tokens": 100 + 10 * turn,
            "completion_tokens": 20 + turn,
            "total_tokens": 120 + 11 * turn,
        },
    }


def _handle(request: httpx.Request) -> httpx.Response:
    if request.url.path.endswith("/chat/completions"):
        return httpx.Response(200, json=_chat(json.loads(request.content)))
    if request.url.path.endswith("/responses/input_tokens"):
        count = len(request.content) // 4
        return httpx.Response(200, json={"object": "response.input_tokens", "input_tokens": count})
    return httpx.Response(404, json={"error": {"message": "not faked"}})


async def _ahandle(request: httpx.Request) -> httpx.Response:
    return _handle(request)


class FakeServedOpenAI(OpenAICompletion):
    """CrewAI's native OpenAI provider, its clients over the in-process fake."""

    def _build_sync_client(self) -> OpenAI:
        transport = httpx.MockTransport(_handle)
        return OpenAI(api_key="sk-fake", base_url=BASE_URL,
                      http_client=httpx.Client(transport=transport))  # fmt: skip

    def _build_async_client(self) -> AsyncOpenAI:
        transport = httpx.MockTransport(_ahandle)
        return AsyncOpenAI(api_key="sk-fake", base_url=BASE_URL,
                           http_client=httpx.AsyncClient(transport=transport))  # fmt: skip


def llm(model: str) -> FakeServedOpenAI:
    return FakeServedOpenAI(model=model)


# --- tools -------------------------------------------------------------------------------


@tool("get_weather")
def get_weather(city: str, unit: str = "celsius") -> str:
    """Current weather for a city."""
    return f"18 degrees {unit} in {city}"


@tool("fetch_page")
def fetch_page(url: str) -> str:
    """Fetch a web page."""
    raise RuntimeError(f"connection refused: {url}")


def agent(role: str, model: str, tools: list, **kwargs) -> Agent:
    return Agent(role=role, goal=f"Answer as {role}.", backstory="A test agent.",
                 llm=llm(model), tools=tools, verbose=False, **kwargs)  # fmt: skip


def run(crew: Crew, name: str) -> None:
    try:
        print(repr(str(crew.kickoff())))
    except Exception as exc:
        print("run failed:", type(exc).__name__, exc)
    # CrewAI's event handlers (the event-listener mode's spans) run on the bus's own
    # threads: let them finish, as a long-lived process would, before saving.
    crewai_event_bus.flush(timeout=30.0)
    cap.save(f"{PREFIX}_{name}")


def main() -> None:
    weather = agent("weather_agent", "fake-loop-model", [get_weather])
    task = Task(description="Weather in Paris?", expected_output="The weather.", agent=weather)
    run(Crew(agents=[weather], tasks=[task]), "loop")

    fetcher = agent("fetch_agent", "fake-error-model", [fetch_page])
    task = Task(description="Fetch example.com", expected_output="The page.", agent=fetcher)
    run(Crew(agents=[fetcher], tasks=[task]), "tool_error")

    coordinator = agent("coordinator", "fake-coordinator-model", [], allow_delegation=True)
    weather = agent("weather_agent", "fake-specialist-model", [get_weather])
    task = Task(description="Weather in Oslo?", expected_output="The weather.", agent=coordinator)
    run(Crew(agents=[coordinator, weather], tasks=[task]), "nested")

    weather = agent("weather_agent", "fake-specialist-model", [get_weather])
    task = Task(description="Weather in Oslo?", expected_output="The weather.")
    crew = Crew(agents=[weather], tasks=[task], process=Process.hierarchical,
                manager_llm=llm("fake-manager-model"))  # fmt: skip
    run(crew, "hierarchical")

    weather = agent("weather_agent", "fake-forever-model", [get_weather], max_iter=2)
    task = Task(description="Weather in Paris?", expected_output="The weather.", agent=weather)
    run(Crew(agents=[weather], tasks=[task]), "max_iter")
    cap.shutdown()

    if NETWORK:
        raise SystemExit(f"network attempted: {NETWORK}")


if __name__ == "__main__":
    main()
