"""smolagents ToolCallingAgents traced by OpenInference's instrumentor, exported by OTLP.

Run: python tests/otlp_agents/smolagents_agent.py SCENARIO...
with OTEL_EXPORTER_OTLP_* set (see _otel.py). OpenInference wraps the model
classes smolagents exports, so the agents use smolagents' real OpenAIModel over an
``openai.OpenAI`` client whose HTTP transport fakes the Chat Completions API
in-process (no network). Usage on step n is 100 + 10n in, 20 + n out, and the model
is "gpt-4o-mini". A ToolCallingAgent ends its run by calling ``final_answer``.

Scenarios, each one agent.run (its own trace):
  loop        weather_agent calls get_weather three times with the same arguments,
              then final_answer
  nested      the manager coordinator calls its managed agent researcher, which
              calls its own tool lookup
  tool_error  fetch_agent's tool raises; smolagents records the error in the step
              and tells the model, which calls final_answer
"""

from __future__ import annotations

import json
import re
import sys

from _otel import finish, provider
from openinference.instrumentation.smolagents import SmolagentsInstrumentor
from smolagents import OpenAIModel, ToolCallingAgent, tool

try:  # openai >= 3 is built on httpx2, a fork of httpx with the same API
    import httpx2 as httpx
except ImportError:
    import httpx

SmolagentsInstrumentor().instrument(tracer_provider=provider)
LOOP_ARGS = '{"city": "Paris", "unit": "celsius"}'


def final(text: str) -> tuple[str, str]:
    return ("final_answer", json.dumps({"answer": text}))


# The tool calls of each agent, by step; agents are told apart by their tools.
SCRIPTS = {
    "get_weather": [("get_weather", LOOP_ARGS)] * 3 + [final("It is 18 degrees in Paris.")],
    "fetch_page": [("fetch_page", '{"url": "https://example.com/"}'), final("Not fetched.")],
    "lookup": [("lookup", '{"term": "keel"}'), final("A keel is the backbone of a ship.")],
    "researcher": [("researcher", '{"task": "What is a keel?"}'), final("A keel: a backbone.")],
}


def _steps_done(messages: list) -> int:
    """How many tool steps the conversation reports back ("Observation: …" or "Error: …")."""
    done = 0
    for message in messages:
        content = message["content"]
        parts = content if isinstance(content, list) else [{"text": content or ""}]
        text = "".join(p.get("text", "") for p in parts if isinstance(p, dict))
        done += len(re.findall(r"(?:^|\n)(?:Observation|Error):\n", text))
    return done


def _chat(body: dict) -> dict:
    turn = _steps_done(body["messages"])
    tools = {t["function"]["name"] for t in body.get("tools", [])}
    script = SCRIPTS[next(name for name in SCRIPTS if name in tools)]
    name, arguments = script[min(turn, len(script) - 1)]
    function = {"name": name, "arguments": arguments}
    call = {"id": f"call_{turn}", "type": "function", "function": function}
    return {
        "id": f"chatcmpl-{turn}",
        "object": "chat.completion",
        "created": 1764490000,
        "model": body["model"] + "-2024-07-18",
        "choices": [
            {
                "index": 0,
                "finish_reason": "tool_calls",
                "message": {"role": "assistant", "content": None, "tool_calls": [call]},
            }
        ],
        "usage": {
            "prompt_tokens": 100 + 10 * turn,
            "completion_tokens": 20 + turn,
            "total_tokens": 120 + 11 * turn,
        },
    }


def _handle(request: httpx.Request) -> httpx.Response:
    if request.url.path.endswith("/chat/completions"):
        return httpx.Response(200, json=_chat(json.loads(request.content)))
    return httpx.Response(404, json={"error": {"message": "not faked"}})


def model() -> OpenAIModel:
    return OpenAIModel(
        "gpt-4o-mini",
        api_base="http://fake-openai.invalid/v1",
        api_key="sk-fake",
        client_kwargs={"http_client": httpx.Client(transport=httpx.MockTransport(_handle))},
    )


@tool
def get_weather(city: str, unit: str = "celsius") -> str:
    """Current weather for a city.

    Args:
        city: The city.
        unit: celsius or fahrenheit.
    """
    return f"18 degrees {unit} in {city}"


@tool
def fetch_page(url: str) -> str:
    """Fetch a web page.

    Args:
        url: The address.
    """
    raise RuntimeError(f"connection refused: {url}")


@tool
def lookup(term: str) -> str:
    """Look a term up in the encyclopedia.

    Args:
        term: The term.
    """
    return f"{term}: the structural backbone of a ship"


def agent(name: str, tools: list, **options) -> ToolCallingAgent:
    return ToolCallingAgent(tools=tools, model=model(), name=name, verbosity_level=0, **options)


def scenario(name: str) -> None:
    if name == "loop":
        print(agent("weather_agent", [get_weather]).run("Weather in Paris?"))
    elif name == "nested":
        researcher = agent("researcher", [lookup], description="Answers from the encyclopedia.")
        print(agent("coordinator", [], managed_agents=[researcher]).run("What is a keel?"))
    elif name == "tool_error":
        print(agent("fetch_agent", [fetch_page]).run("Fetch example.com"))
    else:
        raise SystemExit(f"unknown scenario {name!r}")


if __name__ == "__main__":
    for name in sys.argv[1:]:
        scenario(name)
    finish()
