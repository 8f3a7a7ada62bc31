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

Scenarios:
  loop        the tool is called three times with the same arguments, one call per
              model turn, then the model answers
  tool_error  the tool raises: ADK lets the exception end the run
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys

MODE = sys.argv[1] if len(sys.argv) > 1 else None
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
SCRIPTS = {
    "fake-loop-model": [("get_weather", LOOP_ARGS)] * 3 + [(None, "It is 18 degrees in Paris.")],
    "fake-error-model": [
        ("fetch_page", {"url": "https://example.com/"}),
        (None, "The page could not be fetched."),
    ],
}


class ScriptedModel(BaseLlm):
    """Answers turn n of its script, n being the tool results seen so far."""

    async def generate_content_async(
        self, llm_request, stream: bool = False
    ) -> AsyncGenerator[LlmResponse, None]:
        turn = sum(
            1
            for content in llm_request.contents
            for part in content.parts or []
            if part.function_response
        )
        tool, payload = SCRIPTS[self.model][turn]
        if tool is None:
            part = types.Part(text=payload)
        else:
            part = types.Part(
                function_call=types.FunctionCall(name=tool, args=payload, id=f"call_{turn}")
            )
        yield LlmResponse(
            content=types.Content(role="model", parts=[part]),
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


async def run(agent: LlmAgent, question: str) -> None:
    runner = InMemoryRunner(agent=agent, app_name="keelwave-capture")
    session = await runner.session_service.create_session(app_name="keelwave-capture", user_id="u")
    message = types.Content(role="user", parts=[types.Part(text=question)])
    try:
        async for _ in runner.run_async(user_id="u", session_id=session.id, new_message=message):
            pass
    except RuntimeError:
        pass  # the tool_error scenario: the exception ends the run


# scenario: (agent, its model, instruction, tool, question)
SCENARIOS = {
    "loop": ("weather_agent", "fake-loop-model", "Answer questions about the weather.",
             get_weather, "What is the weather in Paris?"),
    "tool_error": ("browser_agent", "fake-error-model", "Fetch pages.",
                   fetch_page, "What does example.com say?"),
}  # fmt: skip
for scenario, (name, model, instruction, tool, question) in SCENARIOS.items():
    agent = LlmAgent(
        name=name, model=ScriptedModel(model=model), instruction=instruction, tools=[tool]
    )
    asyncio.run(run(agent, question))
    cap.save(f"{PREFIX}_{scenario}")
cap.shutdown()
