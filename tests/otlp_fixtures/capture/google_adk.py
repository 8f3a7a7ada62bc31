"""Capture Google ADK's built-in OpenTelemetry tracing (no network).

Run: python tests/otlp_fixtures/capture/google_adk.py
Needs: google-adk opentelemetry-sdk opentelemetry-exporter-otlp-proto-common

ADK traces itself with the *global* tracer provider, so this script sets it. The
model is a hand-written ``google.adk.models.BaseLlm`` that answers from a script by
the number of tool results in the conversation, with the README's token counts.

ADK has two telemetry schemas, and what a tool span carries depends on them and on
content capture:

- ``v2`` (the default since ADK 2): OpenTelemetry GenAI conventions; a tool span's
  arguments and result (``gen_ai.tool.call.arguments`` / ``.result``) only when
  ``OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT`` is ``SPAN_ONLY`` or
  ``SPAN_AND_EVENT``: googleadk_<scenario>.json;
- ``nocontent``: the same schema with content capture left off (ADK's default): tool
  spans name the tool and nothing of its input: googleadk_nocontent_<scenario>.json;
- ``legacy`` (``ADK_TELEMETRY_SCHEMA_VERSION_OPT_IN=1``): arguments and result in
  ``gcp.vertex.agent.tool_call_args`` / ``gcp.vertex.agent.tool_response``, on by
  default: googleadk_legacy_<scenario>.json.

``python google_adk.py openinference`` (run on its own, in an environment with
openinference-instrumentation-google-adk) makes googleadk_openinference_<scenario>.json:
``GoogleADKInstrumentor`` wraps the runner, agents, model calls and tool calls with its
own spans and turns ADK's own tracers into pass-throughs (schema 2, ADK's defaults).

Scenarios (``python google_adk.py MODE SCENARIO…`` makes only those):
  loop        the tool is called three times with the same arguments, one call per
              model turn, then the model answers
  tool_error  the tool raises: ADK lets the exception end the run
  parallel    two turns of two different calls at once (get_weather and lookup), then
              an answer: ADK adds an ``execute_tool (merged)`` span per turn
  max_calls   the model asks for get_weather every turn; ``RunConfig(max_llm_calls=3)``
              ends the run with ADK's LlmCallsLimitExceededError
  transfer    a coordinator hands off with ``transfer_to_agent(agent_name=…)`` to its
              sub-agent weather_expert, which calls get_weather and answers
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys

MODE = sys.argv[1] if len(sys.argv) > 1 else None
ONLY = set(sys.argv[2:])  # scenarios to make (all if none named)
if MODE is None:  # each mode in a fresh process (ADK reads its environment once)
    for mode in ("v2", "nocontent", "legacy"):
        subprocess.run([sys.executable, __file__, mode], check=True)
    raise SystemExit(0)
if MODE == "v2":
    os.environ["OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT"] = "SPAN_ONLY"
if MODE == "legacy":
    os.environ["ADK_TELEMETRY_SCHEMA_VERSION_OPT_IN"] = "1"

from collections.abc import AsyncGenerator  # noqa: E402

from _otlp import Capture  # noqa: E402
from google.adk.agents import LlmAgent  # noqa: E402
from google.adk.agents.invocation_context import LlmCallsLimitExceededError  # noqa: E402
from google.adk.agents.run_config import RunConfig  # noqa: E402
from google.adk.models.base_llm import BaseLlm  # noqa: E402
from google.adk.models.llm_response import LlmResponse  # noqa: E402
from google.adk.runners import InMemoryRunner  # noqa: E402
from google.genai import types  # noqa: E402
from opentelemetry import trace  # noqa: E402

cap = Capture(f"keelwave-capture-googleadk-{MODE}")
trace.set_tracer_provider(cap.provider)
if MODE == "openinference":
    from openinference.instrumentation.google_adk import GoogleADKInstrumentor

    GoogleADKInstrumentor().instrument(tracer_provider=cap.provider)
PREFIX = {
    "v2": "googleadk",
    "nocontent": "googleadk_nocontent",
    "legacy": "googleadk_legacy",
    "openinference": "googleadk_openinference",
}[MODE]

LOOP_ARGS = {"city": "Paris", "unit": "celsius"}
# A turn: one (tool, arguments), a list of them (called at once), or (None, an answer).
SCRIPTS = {
    "fake-loop-model": [("get_weather", LOOP_ARGS)] * 3 + [(None, "It is 18 degrees in Paris.")],
    "fake-error-model": [
        ("fetch_page", {"url": "https://example.com/"}),
        (None, "The page could not be fetched."),
    ],
    "fake-parallel-model": [
        [("get_weather", LOOP_ARGS), ("lookup", {"topic": "a"})],
        [("get_weather", {"city": "Rome", "unit": "celsius"}), ("lookup", {"topic": "b"})],
        (None, "Done."),
    ],
    "fake-stuck-model": [("get_weather", LOOP_ARGS)] * 10,  # (the limit stops it at 3)
    "fake-coordinator-model": [
        ("transfer_to_agent", {"agent_name": "weather_expert"}),
        (None, "Handed over."),
    ],
    "fake-expert-model": [("get_weather", LOOP_ARGS), (None, "It is 18 degrees in Paris.")],
}
TURNS: dict[str, int] = {}  # model calls so far, by model: a scenario's agents count apart


class ScriptedModel(BaseLlm):
    """Answers turn n of its script, n being its model calls so far in the scenario."""

    async def generate_content_async(
        self, llm_request, stream: bool = False
    ) -> AsyncGenerator[LlmResponse, None]:
        turn = TURNS.get(self.model, 0)
        TURNS[self.model] = turn + 1
        step = SCRIPTS[self.model][turn]
        calls = step if isinstance(step, list) else [step]
        if calls[0][0] is None:
            parts = [types.Part(text=calls[0][1])]
        else:
            parts = [
                types.Part(
                    function_call=types.FunctionCall(
                        name=tool, args=args, id=f"call_{turn}" + (f"_{n}" if n else "")
                    )
                )
                for n, (tool, args) in enumerate(calls)
            ]
        yield LlmResponse(
            content=types.Content(role="model", parts=parts),
            usage_metadata=types.GenerateContentResponseUsageMetadata(
                prompt_token_count=100 + 10 * turn,
                candidates_token_count=20 + turn,
                total_token_count=120 + 11 * turn,
            ),
        )


def get_weather(city: str, unit: str) -> dict:
    """The weather in a city."""
    return {"city": city, "temperature": 18, "unit": unit}


def fetch_page(url: str) -> str:
    """A web page's text."""
    raise RuntimeError(f"connection refused: {url}")


def lookup(topic: str) -> str:
    """Facts about a topic."""
    return f"facts about {topic}"


async def run(agent: LlmAgent, question: str, config: RunConfig | None = None) -> None:
    runner = InMemoryRunner(agent=agent, app_name="keelwave-capture")
    session = await runner.session_service.create_session(app_name="keelwave-capture", user_id="u")
    message = types.Content(role="user", parts=[types.Part(text=question)])
    try:
        async for _ in runner.run_async(
            user_id="u", session_id=session.id, new_message=message, run_config=config
        ):
            pass
    except (RuntimeError, LlmCallsLimitExceededError):
        pass  # tool_error: the exception ends the run; max_calls: so does the limit's


def agent(name: str, model: str, instruction: str, *tools, **more) -> LlmAgent:
    return LlmAgent(
        name=name, model=ScriptedModel(model=model), instruction=instruction, tools=list(tools),
        **more,
    )  # fmt: skip


# scenario: (its agent, the question, the run's config)
SCENARIOS = {
    "loop": lambda: (agent("weather_agent", "fake-loop-model",
                           "Answer questions about the weather.", get_weather),
                     "What is the weather in Paris?", None),
    "tool_error": lambda: (agent("browser_agent", "fake-error-model", "Fetch pages.",
                                 fetch_page), "What does example.com say?", None),
    "parallel": lambda: (agent("parallel_agent", "fake-parallel-model",
                               "Answer about weather and topics.", get_weather, lookup),
                         "Weather and facts?", None),
    "max_calls": lambda: (agent("stuck_agent", "fake-stuck-model", "Weather.", get_weather),
                          "What is the weather in Paris?", RunConfig(max_llm_calls=3)),
    "transfer": lambda: (agent("coordinator", "fake-coordinator-model", "Route questions.",
                               sub_agents=[agent("weather_expert", "fake-expert-model",
                                                 "Answer about the weather.", get_weather,
                                                 description="Knows the weather.")]),
                         "What is the weather in Paris?", None),
}  # fmt: skip
for scenario, make in SCENARIOS.items():
    if ONLY and scenario not in ONLY:
        continue
    TURNS.clear()
    root, question, config = make()
    asyncio.run(run(root, question, config))
    cap.save(f"{PREFIX}_{scenario}")
cap.shutdown()
