"""Capture BeeAI Framework's RequirementAgent through OpenInference (no network).

Run: python tests/otlp_fixtures/capture/beeai_agent.py
Needs: beeai-framework openinference-instrumentation-beeai opentelemetry-sdk
       opentelemetry-exporter-otlp-proto-common
Writes beeai_<scenario>.json.

The agent is ``beeai_framework.agents.requirement.RequirementAgent``; the model is a
hand-written ``ChatModel`` subclass answering from a script by how often it has been
called: a tool call (arguments as a JSON string, as OpenAI sends them) or, to end the
run, a call of the agent's built-in ``final_answer`` tool. Call *n* of a model reports
prompt 100 + 10n, completion 20 + n tokens; each agent has its own model.
OpenInference subscribes to BeeAI's event emitter, so every span carries the emitter
path of the object that produced it (``metadata`` ``path`` and ``class_name``).

Scenarios (one fixture each):
  loop        the tool is called three times with the same arguments, one call per
              model turn, then final_answer; tool_call_checker=False, since the
              agent's default checker refuses the repeated call
  tool_error  the tool raises; the error goes back to the model, which answers
  nested      the outer agent hands the task to a second agent through a
              HandoffTool; the second agent calls its own tool
  step_limit  the loop with max_iterations=3: the run fails with an AgentError
"""

from __future__ import annotations

import asyncio
import json

from _otlp import Capture
from openinference.instrumentation.beeai import BeeAIInstrumentor

cap = Capture("keelwave-capture-beeai-openinference")
BeeAIInstrumentor().instrument(tracer_provider=cap.provider)

from beeai_framework.agents.requirement import RequirementAgent  # noqa: E402
from beeai_framework.backend.chat import ChatModel  # noqa: E402
from beeai_framework.backend.message import AssistantMessage, MessageToolCallContent  # noqa: E402
from beeai_framework.backend.types import ChatModelOutput, ChatModelUsage  # noqa: E402
from beeai_framework.memory import UnconstrainedMemory  # noqa: E402
from beeai_framework.tools import tool  # noqa: E402
from beeai_framework.tools.handoff import HandoffTool  # noqa: E402

# What an OpenAI model sends: the arguments as a JSON string (note the spacing).
LOOP_ARGS = '{"city": "Paris",  "unit": "celsius"}'


def final_answer(text: str) -> tuple[str, str]:
    return ("final_answer", json.dumps({"response": text}))


SCRIPTS = {
    "fake-loop-model": [("get_weather", LOOP_ARGS)] * 3
    + [final_answer("It is 18 degrees in Paris.")],
    "fake-error-model": [
        ("fetch_page", '{"url": "https://example.com/"}'),
        final_answer("The page could not be fetched."),
    ],
    "fake-outer-model": [
        ("researcher", '{"task": "What is a keel?"}'),
        final_answer("Researcher says: a keel is a backbone."),
    ],
    "fake-inner-model": [("lookup", '{"term": "keel"}'), final_answer("A keel is a backbone.")],
}


class ScriptedChatModel(ChatModel):
    """A ChatModel answering SCRIPTS[model][call number]; streaming gives the same answer."""

    def __init__(self, model: str) -> None:
        super().__init__()
        self._model = model
        self.turn = 0

    @property
    def model_id(self) -> str:
        return self._model

    @property
    def provider_id(self) -> str:
        return "openai"

    async def _create(self, input, run) -> ChatModelOutput:
        turn = self.turn
        self.turn += 1
        script = SCRIPTS[self._model]
        name, args = script[min(turn, len(script) - 1)]
        call = MessageToolCallContent(id=f"call_{name}_{turn}", tool_name=name, args=args)
        return ChatModelOutput(
            output=[AssistantMessage(call)],
            usage=ChatModelUsage(
                prompt_tokens=100 + 10 * turn,
                completion_tokens=20 + turn,
                total_tokens=120 + 11 * turn,
            ),
            finish_reason="tool_calls",
        )

    async def _create_stream(self, input, run):
        yield await self._create(input, run)

    async def clone(self) -> ScriptedChatModel:
        return self  # one script per agent, even when the agent is cloned


# --- tools -------------------------------------------------------------------------------


@tool
def get_weather(city: str, unit: str = "celsius") -> str:
    """Current weather for a city."""
    return f"18 degrees {unit} in {city}"


@tool
def fetch_page(url: str) -> str:
    """Fetch a web page."""
    raise RuntimeError(f"connection refused: {url}")


@tool
def lookup(term: str) -> str:
    """Look a term up in the encyclopedia."""
    return f"{term}: the backbone of a ship."


def agent(model: str, tools, name: str = "assistant", **kwargs) -> RequirementAgent:
    return RequirementAgent(
        llm=ScriptedChatModel(model),
        tools=tools,
        memory=UnconstrainedMemory(),
        name=name,
        description=f"The {name} agent.",
        **kwargs,
    )


# --- scenarios -----------------------------------------------------------------------------


async def main() -> None:
    weather_agent = agent("fake-loop-model", [get_weather], tool_call_checker=False)
    print((await weather_agent.run("Weather in Paris?")).last_message.text)
    cap.save("beeai_loop")

    fetch_agent = agent("fake-error-model", [fetch_page])
    print((await fetch_agent.run("Fetch example.com")).last_message.text)
    cap.save("beeai_tool_error")

    researcher = agent("fake-inner-model", [lookup], name="researcher")
    manager = agent("fake-outer-model", [HandoffTool(researcher)], name="manager")
    print((await manager.run("What is a keel?")).last_message.text)
    cap.save("beeai_nested")

    weather_agent = agent("fake-loop-model", [get_weather], tool_call_checker=False)
    try:
        await weather_agent.run("Weather in Paris?", max_iterations=3)
    except Exception as exc:
        print("run failed as intended:", type(exc).__name__, str(exc)[:200])
    cap.save("beeai_step_limit")
    cap.shutdown()


if __name__ == "__main__":
    asyncio.run(main())
