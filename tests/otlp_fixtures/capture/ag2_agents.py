"""Capture AG2 (formerly AutoGen classic) agents through OpenInference (no network).

Run: python tests/otlp_fixtures/capture/ag2_agents.py
Needs: ag2 (0.x: the ``autogen`` API; AG2 1.0 has a new API this instrumentation does not
       trace) openinference-instrumentation-ag2 opentelemetry-sdk
       opentelemetry-exporter-otlp-proto-common
Writes ag2_<scenario>.json.

Two agents talk: an ``AssistantAgent`` whose model asks for a tool, and a
``UserProxyAgent`` (no human input, no code execution) that executes it
(``register_function(..., caller=assistant, executor=user)``); the user proxy starts the
chat with ``initiate_chat`` and stops it when the assistant answers without a tool call.

The model is AG2's supported custom model client mechanism: the config entry names
``model_client_cls`` and the assistant's ``register_model_client`` supplies a
hand-written class answering from a script, by the number of tool results in the
conversation, with OpenAI-style tool calls (arguments a JSON string: the loop's is
``{"city": "Paris",  "unit": "celsius"}``, two spaces) and the README's token counts in
``get_usage``. ``cache_seed=None``: no disk cache.

OpenInference's instrumentor wraps ``ConversableAgent.initiate_chat`` (an AGENT span
``<sender>.initiate_chat``), ``generate_reply`` (an AGENT span ``<agent>.generate_reply``
per reply, of either agent) and ``execute_function`` (a TOOL span named after the tool).
It traces no model call: AG2's own OpenAI client would need the OpenAI instrumentation;
a custom model client has none.

Scenarios (one fixture each):
  loop        get_weather is called three times with the same arguments, one call per
              model turn, then the model answers
  tool_error  the tool raises; AG2 sends the error to the model as the tool result, and
              the model answers
"""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

from _otlp import Capture
from openinference.instrumentation.ag2 import AG2Instrumentor

cap = Capture("keelwave-capture-ag2-openinference")
AG2Instrumentor().instrument(tracer_provider=cap.provider)

from autogen import AssistantAgent, LLMConfig, UserProxyAgent, register_function  # noqa: E402

LOOP_ARGUMENTS = '{"city": "Paris",  "unit": "celsius"}'  # the model's string (two spaces)
SCRIPTS = {
    "fake-loop-model": [("get_weather", LOOP_ARGUMENTS)] * 3
    + [(None, "It is 18 degrees in Paris.")],
    "fake-error-model": [
        ("fetch_page", '{"url": "https://example.com/"}'),
        (None, "The page could not be fetched."),
    ],
}


class ScriptedModelClient:
    """An AG2 ``ModelClient`` answering from SCRIPTS[model], one answer per turn."""

    def __init__(self, config: dict[str, Any], **kwargs: Any) -> None:
        self.model = config["model"]

    def create(self, params: dict[str, Any]) -> SimpleNamespace:
        turn = sum(1 for m in params.get("messages", []) if m.get("role") == "tool")
        tool, payload = SCRIPTS[self.model][turn]
        if tool is None:
            message = {"role": "assistant", "content": payload}
        else:
            call = {"id": f"call_{turn}", "type": "function",
                    "function": {"name": tool, "arguments": payload}}  # fmt: skip
            message = {"role": "assistant", "content": None, "tool_calls": [call]}
        usage = SimpleNamespace(
            prompt_tokens=100 + 10 * turn, completion_tokens=20 + turn, total_tokens=120 + 11 * turn
        )
        choice = SimpleNamespace(message=SimpleNamespace(**message), finish_reason="stop")
        return SimpleNamespace(
            id=f"fake-{turn}", model=self.model, choices=[choice], usage=usage, message=message
        )

    def message_retrieval(self, response: SimpleNamespace) -> list[dict[str, Any]]:
        return [dict(response.message)]

    def cost(self, response: SimpleNamespace) -> float:
        return 0.0

    @staticmethod
    def get_usage(response: SimpleNamespace) -> dict[str, Any]:
        return {
            "prompt_tokens": response.usage.prompt_tokens,
            "completion_tokens": response.usage.completion_tokens,
            "total_tokens": response.usage.total_tokens,
            "cost": 0.0,
            "model": response.model,
        }


# --- tools -------------------------------------------------------------------------------


def get_weather(city: str, unit: str) -> str:
    """Current weather for a city."""
    return f"18 degrees {unit} in {city}"


def fetch_page(url: str) -> str:
    """Fetch a web page."""
    raise RuntimeError(f"connection refused: {url}")


# scenario: (assistant's name, its model, tool, question)
SCENARIOS = {
    "loop": ("weather_agent", "fake-loop-model", get_weather, "Weather in Paris?"),
    "tool_error": ("browser_agent", "fake-error-model", fetch_page, "Fetch example.com"),
}


def main() -> None:
    for scenario, (name, model, tool, question) in SCENARIOS.items():
        llm_config = LLMConfig(
            {"model": model, "model_client_cls": "ScriptedModelClient"}, cache_seed=None
        )
        assistant = AssistantAgent(name, llm_config=llm_config, system_message="Use the tools.")
        user = UserProxyAgent(
            "user",
            human_input_mode="NEVER",
            code_execution_config=False,
            max_consecutive_auto_reply=10,
            is_termination_msg=lambda m: not m.get("tool_calls") and bool(m.get("content")),
        )
        register_function(tool, caller=assistant, executor=user, description=tool.__doc__)
        # (after register_function, which rebuilds the assistant's client from its config)
        assistant.register_model_client(model_client_cls=ScriptedModelClient)
        result = user.initiate_chat(assistant, message=question)
        print(repr(result.summary))
        cap.save(f"ag2_{scenario}")
    cap.shutdown()


if __name__ == "__main__":
    main()
