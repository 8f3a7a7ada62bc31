"""Capture Semantic Kernel's built-in OpenTelemetry tracing (no network).

Run: python tests/otlp_fixtures/capture/semantic_kernel.py
Needs: semantic-kernel opentelemetry-sdk opentelemetry-exporter-otlp-proto-common

Semantic Kernel traces itself (no instrumentor) with the *global* tracer provider, once
its experimental GenAI diagnostics are switched on by environment variables, read when
it is imported; this script sets them, the sensitive variant included (tool arguments
and results on the tool spans; message contents go to log records, not spans, so they
are not in these files).

Agents are ``ChatCompletionAgent``s with a hand-written chat completion service whose
``_inner_get_chat_message_contents`` carries SK's own ``trace_chat_completion``
decorator (as SK's real connectors do), answering from a script: one step per call, a
text answer or tool calls with the arguments as a JSON string. The model provider is
``fake-provider``. SK names a tool ``<plugin>-<function>``.

Scenarios (one fixture each, semantickernel_<scenario>.json):
  loop        the tool is called three times with the same arguments, one call per
              model turn, then the model answers
  tool_error  the tool raises; SK sends the error to the model as the tool result,
              and the model answers (the run succeeds)
  length      one tool call, then the answer is cut: finish reason ``length``
  nested      the outer agent has the inner agent as a plugin (an agent is a kernel
              plugin with one function named after it); the inner agent calls its
              own tool
  model_error one tool call, then the model call raises: the run fails
"""

from __future__ import annotations

import asyncio
import os
import sys
from typing import Annotated

os.environ["SEMANTICKERNEL_EXPERIMENTAL_GENAI_ENABLE_OTEL_DIAGNOSTICS"] = "true"
os.environ["SEMANTICKERNEL_EXPERIMENTAL_GENAI_ENABLE_OTEL_DIAGNOSTICS_SENSITIVE"] = "true"

from _otlp import Capture  # noqa: E402
from opentelemetry import trace  # noqa: E402

# This file is named like the package it drives: take its folder off the import path
# (after importing _otlp from it) so that "semantic_kernel" is the package, not this file.
sys.path = [
    p for p in sys.path if os.path.abspath(p or ".") != os.path.dirname(os.path.abspath(__file__))
]

cap = Capture("keelwave-capture-semantickernel")
trace.set_tracer_provider(cap.provider)

from semantic_kernel.agents import ChatCompletionAgent  # noqa: E402
from semantic_kernel.connectors.ai.chat_completion_client_base import ChatCompletionClientBase  # noqa: E402
from semantic_kernel.connectors.ai.completion_usage import CompletionUsage  # noqa: E402
from semantic_kernel.contents import AuthorRole, ChatMessageContent, FunctionCallContent  # noqa: E402
from semantic_kernel.contents.utils.finish_reason import FinishReason  # noqa: E402
from semantic_kernel.functions import kernel_function  # noqa: E402
from semantic_kernel.utils.telemetry.model_diagnostics.decorators import trace_chat_completion  # noqa: E402

# What an OpenAI-style model sends: the arguments as a JSON string (note the spacing).
LOOP_ARGS = '{"city": "Paris",  "unit": "celsius"}'


class ScriptedService(ChatCompletionClientBase):
    """Answers call n (0-based) with script[n]: a str is the text answer, a list of
    (tool name, JSON arguments) pairs are tool calls; the string ``RAISE`` raises.
    A (text, finish reason) tuple answers with that finish reason."""

    SUPPORTS_FUNCTION_CALLING = True
    script: list = []
    turn: int = 0

    @trace_chat_completion("fake-provider")
    async def _inner_get_chat_message_contents(self, chat_history, settings):
        n = self.turn
        self.turn += 1
        step = self.script[min(n, len(self.script) - 1)]
        if step == "RAISE":
            raise RuntimeError("model backend 500")
        metadata = {
            "usage": CompletionUsage(prompt_tokens=100 + 10 * n, completion_tokens=20 + n),
            "id": f"resp_{self.ai_model_id}_{n}",
        }
        if isinstance(step, list):
            items = [
                FunctionCallContent(id=f"call_{n}_{k}", name=name, arguments=args)
                for k, (name, args) in enumerate(step)
            ]
            return [
                ChatMessageContent(
                    role=AuthorRole.ASSISTANT,
                    items=items,
                    ai_model_id=self.ai_model_id,
                    metadata=metadata,
                    finish_reason=FinishReason.TOOL_CALLS,
                )
            ]
        text, finish = step if isinstance(step, tuple) else (step, FinishReason.STOP)
        return [
            ChatMessageContent(
                role=AuthorRole.ASSISTANT,
                content=text,
                ai_model_id=self.ai_model_id,
                metadata=metadata,
                finish_reason=finish,
            )
        ]


def service(model: str, script: list) -> ScriptedService:
    svc = ScriptedService(ai_model_id=model, service_id=model)
    svc.script = list(script)
    return svc


class WeatherPlugin:
    @kernel_function(description="Current weather for a city.")
    def get_weather(
        self,
        city: Annotated[str, "The city."],
        unit: Annotated[str, "celsius or fahrenheit."] = "celsius",
    ) -> str:
        return f"18 degrees {unit} in {city}"


class WebPlugin:
    @kernel_function(description="Fetch a web page.")
    def fetch_page(self, url: Annotated[str, "The address."]) -> str:
        raise RuntimeError(f"connection refused: {url}")


async def loop() -> None:
    agent = ChatCompletionAgent(
        service=service(
            "fake-loop-model",
            [[("WeatherPlugin-get_weather", LOOP_ARGS)]] * 3 + ["It is 18 degrees in Paris."],
        ),
        name="weather_agent",
        instructions="Answer weather questions.",
        plugins=[WeatherPlugin()],
    )
    print((await agent.get_response(messages="Weather in Paris?")).content)


async def tool_error() -> None:
    agent = ChatCompletionAgent(
        service=service(
            "fake-error-model",
            [
                [("WebPlugin-fetch_page", '{"url": "https://example.com/"}')],
                "The page could not be fetched.",
            ],
        ),
        name="fetch_agent",
        plugins=[WebPlugin()],
    )
    print((await agent.get_response(messages="Fetch example.com")).content)


async def length() -> None:
    agent = ChatCompletionAgent(
        service=service(
            "fake-length-model",
            [
                [("WeatherPlugin-get_weather", '{"city": "Paris"}')],
                ("It is 18 degrees in Par", FinishReason.LENGTH),
            ],
        ),
        name="weather_agent",
        plugins=[WeatherPlugin()],
    )
    print((await agent.get_response(messages="Weather in Paris?")).content)


async def nested() -> None:
    inner = ChatCompletionAgent(
        service=service(
            "fake-inner-model",
            [[("WeatherPlugin-get_weather", '{"city": "Oslo"}')], "Oslo: 3 degrees and sunny."],
        ),
        name="weather_expert",
        description="Knows the weather.",
        plugins=[WeatherPlugin()],
    )
    outer = ChatCompletionAgent(
        service=service(
            "fake-outer-model",
            [
                [("weather_expert-weather_expert", '{"messages": "weather in Oslo"}')],
                "Pack a coat: Oslo is 3 degrees.",
            ],
        ),
        name="travel_planner",
        instructions="Plan trips.",
        plugins=[inner],
    )
    print((await outer.get_response(messages="Plan a trip to Oslo")).content)


async def model_error() -> None:
    agent = ChatCompletionAgent(
        service=service(
            "fake-failing-model", [[("WeatherPlugin-get_weather", '{"city": "Paris"}')], "RAISE"]
        ),
        name="weather_agent",
        plugins=[WeatherPlugin()],
    )
    try:
        await agent.get_response(messages="Weather in Paris?")
    except Exception as exc:  # the run fails with the model's exception
        print(f"{type(exc).__name__}: {exc}")


async def main() -> None:
    for scenario in (loop, tool_error, length, nested, model_error):
        await scenario()
        cap.save(f"semantickernel_{scenario.__name__}")
    cap.shutdown()


if __name__ == "__main__":
    asyncio.run(main())
