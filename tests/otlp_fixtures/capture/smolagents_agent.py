"""Capture smolagents' ToolCallingAgent through an instrumentation (no network).

Run: python tests/otlp_fixtures/capture/smolagents_agent.py [openinference|genai]
Needs: smolagents openai opentelemetry-sdk opentelemetry-exporter-otlp-proto-common, and
       openinference-instrumentation-smolagents (mode openinference, the default:
       smolagents_<scenario>.json) or opentelemetry-instrumentation-genai-smolagents with
       opentelemetry-instrumentation-genai-openai (mode genai: OpenTelemetry's own,
       content capture on; smolagents_genai_<scenario>.json)

OpenTelemetry's smolagents instrumentation makes the agent's ``invoke_agent`` span and
``chat`` spans of the in-process model classes only, and no tool spans: an agent on an
API model gets its model spans from that client's instrumentation (here the OpenAI
client's), whose answers name the tool calls the model asked for.

OpenInference wraps ``generate`` of the model classes that ``smolagents.models``
exports, so a model span needs one of them: the scenarios use smolagents' real
OpenAIModel over an ``openai.OpenAI`` client whose httpx transport is an in-process
fake of the Chat Completions API (``httpx.MockTransport``). ``custom_model`` uses a
hand-written ``Model`` subclass instead, which OpenInference does not wrap: no model
spans. A ToolCallingAgent ends its run when the model calls the ``final_answer`` tool.

Scenarios (one fixture each, smolagents_<scenario>.json):
  loop          the tool is called three times with the same arguments, one call per
                step, then final_answer
  tool_error    the tool raises; smolagents records the error in the step and tells
                the model, which then calls final_answer
  nested        a manager agent calls a managed agent (smolagents' nested agents)
  max_steps     the loop scenario with max_steps=2: the agent stops and asks the model
                for an answer without tools
  custom_model  the loop scenario with a hand-written Model subclass
"""

from __future__ import annotations

import json
import os
import re
import sys

from _otlp import Capture
from smolagents import OpenAIModel, ToolCallingAgent, tool
from smolagents.models import (
    ChatMessage,
    ChatMessageToolCall,
    ChatMessageToolCallFunction,
    MessageRole,
    Model,
)
from smolagents.monitoring import TokenUsage

try:  # openai >= 3 is built on httpx2, a fork of httpx with the same API
    import httpx2 as httpx
except ImportError:
    import httpx

INSTRUMENTATION = sys.argv[1] if len(sys.argv) > 1 else "openinference"
if INSTRUMENTATION == "openinference":
    from openinference.instrumentation.smolagents import SmolagentsInstrumentor

    cap = Capture("keelwave-capture-smolagents")
    SmolagentsInstrumentor().instrument(tracer_provider=cap.provider)
    PREFIX = "smolagents"
elif INSTRUMENTATION == "genai":
    # The upstream GenAI instrumentations record content only when told to.
    os.environ["OTEL_SEMCONV_STABILITY_OPT_IN"] = "gen_ai_latest_experimental"
    os.environ["OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT"] = "SPAN_ONLY"
    from opentelemetry.instrumentation.genai.openai import OpenAIInstrumentor
    from opentelemetry.instrumentation.genai.smolagents import SmolagentsInstrumentor

    cap = Capture("keelwave-capture-smolagents-genai")
    SmolagentsInstrumentor().instrument(tracer_provider=cap.provider)
    OpenAIInstrumentor().instrument(tracer_provider=cap.provider)
    PREFIX = "smolagents_genai"
else:
    raise SystemExit(f"unknown instrumentation {INSTRUMENTATION!r}: openinference or genai")

# What an OpenAI model sends: the arguments as a JSON string (note the spacing).
LOOP_ARGS = '{"city": "Paris",  "unit": "celsius"}'


def final(text: str) -> tuple[str, str]:
    return ("final_answer", json.dumps({"answer": text}))


SCRIPTS = {
    "fake-loop-model": [("get_weather", LOOP_ARGS)] * 3 + [final("It is 18 degrees in Paris.")],
    "fake-error-model": [
        ("fetch_page", '{"url": "https://example.com/"}'),
        final("The page could not be fetched."),
    ],
    "fake-inner-model": [
        ("lookup", '{"term": "keel"}'),
        final("A keel is the backbone of a ship."),
    ],
    "fake-outer-model": [
        ("researcher", '{"task": "What is a keel?"}'),
        final("Researcher says: a keel is a backbone."),
    ],
}


# --- the fake Chat Completions API ------------------------------------------------------


def _steps_done(messages: list) -> int:
    """How many tool steps the conversation reports back ("Observation: …" or "Error: …")."""
    done = 0
    for m in messages:
        content = m["content"] if isinstance(m, dict) else m.content
        parts = content if isinstance(content, list) else [{"text": content or ""}]
        text = "".join(p.get("text", "") for p in parts if isinstance(p, dict))
        # smolagents merges consecutive user messages, so count markers, not messages.
        done += len(re.findall(r"(?:^|\n)(?:Observation|Error):\n", text))
    return done


def _chat(body: dict) -> dict:
    turn = _steps_done(body["messages"])
    usage = {
        "prompt_tokens": 100 + 10 * turn,
        "completion_tokens": 20 + turn,
        "total_tokens": 120 + 11 * turn,
    }
    if not body.get("tools"):  # asked for a plain answer (after max_steps)
        message = {"role": "assistant", "content": "It is probably 18 degrees."}
        finish = "stop"
    else:
        script = SCRIPTS[body["model"]]
        name, arguments = script[min(turn, len(script) - 1)]
        message = {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": f"call_{turn}",
                    "type": "function",
                    "function": {"name": name, "arguments": arguments},
                }
            ],
        }
        finish = "tool_calls"
    return {
        "id": f"chatcmpl-{body['model']}-{turn}",
        "object": "chat.completion",
        "created": 1764490000,
        "model": body["model"] + "-2026-01-01",
        "choices": [{"index": 0, "finish_reason": finish, "message": message}],
        "usage": usage,
    }


def _handle(request: httpx.Request) -> httpx.Response:
    if request.url.path.endswith("/chat/completions"):
        return httpx.Response(200, json=_chat(json.loads(request.content)))
    return httpx.Response(404, json={"error": {"message": "not faked"}})


def openai_model(model_id: str) -> OpenAIModel:
    client = httpx.Client(transport=httpx.MockTransport(_handle))
    return OpenAIModel(
        model_id,
        api_base="http://fake-openai.invalid/v1",
        api_key="sk-fake",
        client_kwargs={"http_client": client},
    )


# --- a hand-written Model ------------------------------------------------------------------


class ScriptedModel(Model):
    """smolagents' Model interface, answering from SCRIPTS like the fake API."""

    def generate(
        self, messages, stop_sequences=None, response_format=None, tools_to_call_from=None, **kwargs
    ) -> ChatMessage:
        turn = _steps_done(messages)
        script = SCRIPTS[self.model_id]
        name, arguments = script[min(turn, len(script) - 1)]
        call = ChatMessageToolCall(
            id=f"call_{turn}",
            type="function",
            function=ChatMessageToolCallFunction(name=name, arguments=arguments),
        )
        usage = TokenUsage(input_tokens=100 + 10 * turn, output_tokens=20 + turn)
        return ChatMessage(
            role=MessageRole.ASSISTANT, content=None, tool_calls=[call], token_usage=usage
        )


# --- tools ---------------------------------------------------------------------------------


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


def main() -> None:
    agent = ToolCallingAgent(
        tools=[get_weather],
        model=openai_model("fake-loop-model"),
        name="weather_agent",
        verbosity_level=0,
    )
    print(agent.run("Weather in Paris?"))
    cap.save(f"{PREFIX}_loop")

    agent = ToolCallingAgent(
        tools=[fetch_page],
        model=openai_model("fake-error-model"),
        name="fetch_agent",
        verbosity_level=0,
    )
    print(agent.run("Fetch example.com"))
    cap.save(f"{PREFIX}_tool_error")

    inner = ToolCallingAgent(
        tools=[lookup],
        model=openai_model("fake-inner-model"),
        name="researcher",
        verbosity_level=0,
        description="Answers questions from the encyclopedia.",
    )
    outer = ToolCallingAgent(
        tools=[],
        managed_agents=[inner],
        model=openai_model("fake-outer-model"),
        name="coordinator",
        verbosity_level=0,
    )
    print(outer.run("What is a keel?"))
    cap.save(f"{PREFIX}_nested")

    agent = ToolCallingAgent(
        tools=[get_weather],
        model=openai_model("fake-loop-model"),
        name="weather_agent",
        max_steps=2,
        verbosity_level=0,
    )
    print(agent.run("Weather in Paris?"))
    cap.save(f"{PREFIX}_max_steps")

    agent = ToolCallingAgent(
        tools=[get_weather],
        model=ScriptedModel(model_id="fake-loop-model"),
        name="weather_agent",
        verbosity_level=0,
    )
    print(agent.run("Weather in Paris?"))
    cap.save(f"{PREFIX}_custom_model")
    cap.shutdown()


if __name__ == "__main__":
    main()
