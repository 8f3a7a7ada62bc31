"""Capture Microsoft Agent Framework's built-in OpenTelemetry tracing (no network).

Run: python tests/otlp_fixtures/capture/agent_framework.py
Needs: agent-framework-core agent-framework-orchestrations opentelemetry-sdk
       opentelemetry-exporter-otlp-proto-common

Agent Framework traces itself (no instrumentor) with the *global* tracer provider, so
this script sets it, and switches sensitive data on (message contents, tool arguments
and results) with ``enable_instrumentation(enable_sensitive_data=True)``. Its default
attribute dialect is the latest GenAI conventions (``gen_ai.input.messages`` /
``gen_ai.output.messages`` on the spans); the v1.36 message *events* it also emits are
log records, not span events, so they are not in these files.

The model is a hand-written chat client with the framework's function-invocation,
middleware and telemetry layers (what its real clients are made of), answering from a
script: one step per call, a text answer or tool calls with the arguments as a JSON
string. ``gen_ai.provider.name`` is ``fake-provider``.

``python agent_framework.py openinference`` (in an environment with
openinference-instrumentation-agent-framework) makes the loop, tool_error, nested and
handoff scenarios as agentframework_openinference_<scenario>.json: the same spans given
OpenInference's attributes by ``AgentFrameworkToOpenInferenceProcessor``, which runs
before the exporter's processor.

Scenarios (one fixture each, agentframework_<scenario>.json):
  loop          the tool is called three times with the same arguments, one call per
                model turn, then the model answers
  tool_error    the tool raises; the framework sends the error to the model as the
                tool result, and the model answers (the run succeeds)
  tool_error_says_max_steps
                the same with an error message that talks about "max steps" (the
                crawler's, not the agent's), to tell a tool's words from a step limit
  length        one tool call, then the answer is cut: finish reason ``length``
  nested        the outer agent's tool is another agent (``Agent.as_tool()``), which
                calls its own tool
  handoff       a HandoffBuilder workflow: triage_agent hands off to refund_agent
                (a ``handoff_to_refund_agent`` tool call), which calls a tool and answers
  model_error   one tool call, then the model call raises: the run fails
"""

from __future__ import annotations

import asyncio
import os
import sys

os.environ["ENABLE_INSTRUMENTATION"] = "true"
os.environ["ENABLE_SENSITIVE_DATA"] = "true"

from _otlp import Capture  # noqa: E402
from opentelemetry import trace  # noqa: E402

# This file is named like the package it drives: take its folder off the import path
# (after importing _otlp from it) so that "agent_framework" is the package, not this file.
sys.path = [
    p for p in sys.path if os.path.abspath(p or ".") != os.path.dirname(os.path.abspath(__file__))
]

MODE = sys.argv[1] if len(sys.argv) > 1 else "builtin"
PREFIX = "agentframework" if MODE == "builtin" else f"agentframework_{MODE}"
cap = Capture("keelwave-capture-agentframework" + ("" if MODE == "builtin" else f"-{MODE}"))
if MODE == "openinference":
    # The processor rewrites spans as they end: it must run before the exporter's.
    from openinference.instrumentation.agent_framework import (
        AgentFrameworkToOpenInferenceProcessor,
    )

    processors = cap.provider._active_span_processor
    processors._span_processors = (
        AgentFrameworkToOpenInferenceProcessor(),
        *processors._span_processors,
    )
trace.set_tracer_provider(cap.provider)

from agent_framework import (  # noqa: E402
    Agent,
    BaseChatClient,
    ChatMiddlewareLayer,
    ChatResponse,
    ChatResponseUpdate,
    Content,
    FunctionInvocationLayer,
    Message,
    ResponseStream,
    tool,
)
from agent_framework.observability import ChatTelemetryLayer, enable_instrumentation  # noqa: E402
from agent_framework.orchestrations import HandoffBuilder  # noqa: E402

enable_instrumentation(enable_sensitive_data=True)

# What an OpenAI-style model sends: the arguments as a JSON string (note the spacing).
LOOP_ARGS = '{"city": "Paris",  "unit": "celsius"}'


class ScriptedClient(
    FunctionInvocationLayer, ChatMiddlewareLayer, ChatTelemetryLayer, BaseChatClient
):
    """Answers call n (0-based) with script[n]: a str is the text answer, a list of
    (tool name, JSON arguments) pairs are tool calls; the string ``RAISE`` raises.
    A (text, finish reason) tuple answers with that finish reason."""

    OTEL_PROVIDER_NAME = "fake-provider"

    def __init__(self, model: str, script: list, **kwargs) -> None:
        super().__init__(**kwargs)
        self.model = model
        self.script = list(script)
        self.turn = 0

    def _respond(self) -> ChatResponse:
        n = self.turn
        self.turn += 1
        step = self.script[min(n, len(self.script) - 1)]
        if step == "RAISE":
            raise RuntimeError("model backend 500")
        usage = {
            "input_token_count": 100 + 10 * n,
            "output_token_count": 20 + n,
            "total_token_count": 120 + 11 * n,
        }
        if isinstance(step, list):
            contents = [
                Content.from_function_call(call_id=f"call_{n}_{k}", name=name, arguments=args)
                for k, (name, args) in enumerate(step)
            ]
            finish = "tool_calls"
        else:
            text, finish = step if isinstance(step, tuple) else (step, "stop")
            contents = [Content.from_text(text)]
        return ChatResponse(
            messages=[Message(role="assistant", contents=contents)],
            model=self.model,
            finish_reason=finish,
            usage_details=usage,
            response_id=f"resp_{self.model}_{n}",
        )

    def _inner_get_response(self, *, messages, stream, options, **kwargs):
        async def respond() -> ChatResponse:
            return self._respond()

        if not stream:
            return respond()

        async def updates():
            response = await respond()
            message = response.messages[0]
            yield ChatResponseUpdate(
                role="assistant",
                contents=[
                    *message.contents,
                    Content.from_usage(usage_details=response.usage_details),
                ],
                model=response.model,
                finish_reason=response.finish_reason,
                response_id=response.response_id,
                message_id=f"msg_{response.response_id}",
            )

        return ResponseStream(updates(), finalizer=ChatResponse.from_updates)


@tool
def get_weather(city: str, unit: str = "celsius") -> str:
    """Current weather for a city."""
    return f"18 degrees {unit} in {city}"


@tool
def fetch_page(url: str) -> str:
    """Fetch a web page."""
    raise RuntimeError(f"connection refused: {url}")


@tool
def crawl(url: str) -> str:
    """Crawl a web site."""
    raise RuntimeError(f"crawler stopped: max steps (50) reached for {url}")


@tool
def issue_refund(order_id: str) -> str:
    """Refund an order."""
    return f"refund issued for order {order_id}"


async def loop() -> None:
    agent = Agent(
        client=ScriptedClient(
            "fake-loop-model",
            [[("get_weather", LOOP_ARGS)]] * 3 + ["It is 18 degrees in Paris."],
        ),
        name="weather_agent",
        instructions="Answer weather questions.",
        tools=[get_weather],
    )
    print((await agent.run("Weather in Paris?")).text)


async def tool_error() -> None:
    agent = Agent(
        client=ScriptedClient(
            "fake-error-model",
            [[("fetch_page", '{"url": "https://example.com/"}')], "The page could not be fetched."],
        ),
        name="fetch_agent",
        tools=[fetch_page],
    )
    print((await agent.run("Fetch example.com")).text)


async def tool_error_says_max_steps() -> None:
    agent = Agent(
        client=ScriptedClient(
            "fake-crawl-model",
            [
                [("crawl", '{"url": "http://a.test"}')],
                "Could not crawl a.test; answering from memory.",
            ],
        ),
        name="crawler_agent",
        tools=[crawl],
    )
    print((await agent.run("Crawl a.test")).text)


async def length() -> None:
    agent = Agent(
        client=ScriptedClient(
            "fake-length-model",
            [[("get_weather", '{"city": "Paris"}')], ("It is 18 degrees in Par", "length")],
        ),
        name="weather_agent",
        tools=[get_weather],
    )
    print((await agent.run("Weather in Paris?")).text)


async def nested() -> None:
    inner = Agent(
        client=ScriptedClient(
            "fake-inner-model",
            [[("get_weather", '{"city": "Oslo"}')], "Oslo: 3 degrees and sunny."],
        ),
        name="weather_expert",
        description="Knows the weather.",
        tools=[get_weather],
    )
    outer = Agent(
        client=ScriptedClient(
            "fake-outer-model",
            [
                [("weather_expert", '{"task": "weather in Oslo"}')],
                "Pack a coat: Oslo is 3 degrees.",
            ],
        ),
        name="travel_planner",
        instructions="Plan trips.",
        tools=[inner.as_tool()],
    )
    print((await outer.run("Plan a trip to Oslo")).text)


async def handoff() -> None:
    triage = Agent(
        client=ScriptedClient("fake-triage-model", [[("handoff_to_refund_agent", "{}")]]),
        name="triage_agent",
        description="Routes requests.",
        require_per_service_call_history_persistence=True,
    )
    refund = Agent(
        client=ScriptedClient(
            "fake-refund-model",
            [[("issue_refund", '{"order_id": "A-42"}')], "Refund issued for order A-42."],
        ),
        name="refund_agent",
        description="Handles refunds.",
        tools=[issue_refund],
        require_per_service_call_history_persistence=True,
    )
    workflow = (
        HandoffBuilder(
            participants=[triage, refund],
            termination_condition=lambda conv: any(
                m.author_name == "refund_agent" and m.text for m in conv
            ),
        )
        .with_start_agent(triage)
        .with_autonomous_mode()
        .build()
    )
    result = await workflow.run("I want a refund for order A-42")
    print([str(o)[:60] for o in result.get_outputs()])


async def model_error() -> None:
    agent = Agent(
        client=ScriptedClient(
            "fake-failing-model", [[("get_weather", '{"city": "Paris"}')], "RAISE"]
        ),
        name="weather_agent",
        tools=[get_weather],
    )
    try:
        await agent.run("Weather in Paris?")
    except Exception as exc:  # the run fails with the model's exception
        print(f"{type(exc).__name__}: {exc}")


async def main() -> None:
    scenarios = (
        (loop, tool_error, tool_error_says_max_steps, length, nested, handoff, model_error)
        if MODE == "builtin"
        else (loop, tool_error, nested, handoff)
    )
    for scenario in scenarios:
        await scenario()
        cap.save(f"{PREFIX}_{scenario.__name__}")
    cap.shutdown()


if __name__ == "__main__":
    asyncio.run(main())
