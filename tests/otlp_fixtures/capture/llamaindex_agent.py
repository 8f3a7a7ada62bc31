"""Capture LlamaIndex's FunctionAgent through OpenInference, OpenLLMetry or OpenTelemetry's
own GenAI instrumentation (no network).

Run: python tests/otlp_fixtures/capture/llamaindex_agent.py {openinference|openllmetry|genai}
Needs: llama-index-core opentelemetry-sdk opentelemetry-exporter-otlp-proto-common and
       openinference-instrumentation-llama-index, or opentelemetry-instrumentation-llamaindex
       (which imports llama_index.llms: llama-index-llms-openai provides it), or
       opentelemetry-instrumentation-genai-llama-index (mode genai; content capture on)

The model is a hand-written ``FunctionCallingLLM`` answering from a script by the
number of tool results in the conversation, with the README's token counts; its
chat methods carry LlamaIndex's ``llm_chat_callback``, as every real LLM class's do
(OpenInference reads the messages and the usage from the events it sends). There is
no agent span in either: OpenInference marks the agent's ``run`` a CHAIN, OpenLLMetry its
workflow a ``workflow``, so the run is the trace's root, named after it. OpenInference
gives every method of the LLM class a span of kind LLM, ``_prepare_chat_with_tools`` too,
though it only builds the request; OpenLLMetry marks every span a ``task``, the agent's
tool calls included (they carry ``tool.name`` and ``tool.arguments``), and keeps a
tool's exception only as ``is_error`` in the output.

Files: llamaindex_<scenario>.json (OpenInference), llamaindex_openllmetry_<scenario>.json,
llamaindex_genai_<scenario>.json.

Scenarios:
  loop        the tool is called three times with the same arguments, one call per
              model turn, then the model answers
  tool_error  the tool raises; the FunctionAgent hands the error to the model, which
              answers

OpenInference only (OpenLLMetry's workflow span never ends when the run raises):
  max_iter    the model asks for get_weather every turn; ``run(max_iterations=3)`` ends
              the run with WorkflowRuntimeError "Max iterations of 3 reached!"
  handoff     an AgentWorkflow of triage and expert handing off to each other with
              LlamaIndex's ``handoff`` tool (triage 3×, expert 2×, then expert answers);
              its arguments carry the injected workflow Context's repr (``ctx``)

``python llamaindex_agent.py INSTRUMENTATION SCENARIO…`` makes only those scenarios.
"""

from __future__ import annotations

import asyncio
import os
import sys

from _otlp import Capture
from llama_index.core.agent.workflow import AgentWorkflow, FunctionAgent
from llama_index.core.base.llms.types import (
    ChatMessage,
    ChatResponse,
    CompletionResponse,
    LLMMetadata,
)
from llama_index.core.llms.callbacks import llm_chat_callback
from llama_index.core.llms.function_calling import FunctionCallingLLM
from llama_index.core.llms.llm import ToolSelection
from llama_index.core.tools import FunctionTool
from workflows.errors import WorkflowRuntimeError

INSTRUMENTATION = sys.argv[1] if len(sys.argv) > 1 else "openinference"
ONLY = set(sys.argv[2:])  # scenarios to make (all if none named)
if INSTRUMENTATION == "openinference":
    from openinference.instrumentation.llama_index import LlamaIndexInstrumentor

    PREFIX = "llamaindex"
elif INSTRUMENTATION == "openllmetry":
    from opentelemetry.instrumentation.llamaindex import LlamaIndexInstrumentor

    PREFIX = "llamaindex_openllmetry"
elif INSTRUMENTATION == "genai":
    # The upstream GenAI instrumentation records content only when told to.
    os.environ["OTEL_SEMCONV_STABILITY_OPT_IN"] = "gen_ai_latest_experimental"
    os.environ["OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT"] = "SPAN_ONLY"
    from opentelemetry.instrumentation.genai.llama_index import LlamaIndexInstrumentor

    PREFIX = "llamaindex_genai"
else:
    raise SystemExit(
        f"unknown instrumentation {INSTRUMENTATION!r}: openinference, openllmetry or genai"
    )
cap = Capture(f"keelwave-capture-llamaindex-{INSTRUMENTATION}")
LlamaIndexInstrumentor().instrument(tracer_provider=cap.provider)

SCRIPTS = {
    "fake-loop-model": [("get_weather", {"city": "Paris", "unit": "celsius"})] * 3
    + [(None, "It is 18 degrees in Paris.")],
    "fake-error-model": [
        ("fetch_page", {"url": "https://example.com/"}),
        (None, "The page could not be fetched."),
    ],
    "fake-stuck-model": [("get_weather", {"city": "Paris", "unit": "celsius"})] * 10,
    "fake-triage-model": [("handoff", {"to_agent": "expert", "reason": "needs expert"})] * 3
    + [(None, "Done.")],
    "fake-expert-model": [("handoff", {"to_agent": "triage", "reason": "back"})] * 2
    + [(None, "A keel is a ship's backbone.")],
}
TURNS: dict[str, int] = {}  # model calls so far, by model: a workflow's agents count apart


class ScriptedLLM(FunctionCallingLLM):
    model: str = "fake-loop-model"

    @property
    def metadata(self) -> LLMMetadata:
        return LLMMetadata(is_function_calling_model=True, model_name=self.model)

    def _prepare_chat_with_tools(
        self,
        tools,
        user_msg=None,
        chat_history=None,
        verbose=False,
        allow_parallel_tool_calls=False,
        **kwargs,
    ):
        messages = list(chat_history or [])
        if user_msg is not None:
            messages.append(
                user_msg
                if isinstance(user_msg, ChatMessage)
                else ChatMessage(role="user", content=user_msg)
            )
        return {"messages": messages, "tools": tools}

    def get_tool_calls_from_response(self, response, error_on_no_tool_call=True, **kwargs):
        return [
            ToolSelection(tool_id=c["id"], tool_name=c["name"], tool_kwargs=c["args"])
            for c in response.message.additional_kwargs.get("tool_calls", [])
        ]

    def _answer(self, messages) -> ChatResponse:
        turn = TURNS.get(self.model, 0)
        TURNS[self.model] = turn + 1
        tool, payload = SCRIPTS[self.model][turn]
        usage = {
            "prompt_tokens": 100 + 10 * turn,
            "completion_tokens": 20 + turn,
            "total_tokens": 120 + 11 * turn,
        }
        if tool is None:
            message = ChatMessage(role="assistant", content=payload)
        else:
            message = ChatMessage(
                role="assistant",
                content="",
                additional_kwargs={
                    "tool_calls": [{"id": f"call_{turn}", "name": tool, "args": payload}]
                },
            )
        return ChatResponse(message=message, raw={"usage": usage, "model": self.model})

    @llm_chat_callback()
    def chat(self, messages, **kw):
        return self._answer(messages)

    @llm_chat_callback()
    async def achat(self, messages, **kw):
        return self._answer(messages)

    def stream_chat(self, messages, **kw):
        yield self._answer(messages)

    async def astream_chat(self, messages, **kw):
        async def gen():
            yield self._answer(messages)

        return gen()

    def complete(self, prompt, formatted=False, **kw):
        return CompletionResponse(text="")

    async def acomplete(self, prompt, formatted=False, **kw):
        return CompletionResponse(text="")

    def stream_complete(self, prompt, formatted=False, **kw):
        yield CompletionResponse(text="")

    async def astream_complete(self, prompt, formatted=False, **kw):
        async def gen():
            yield CompletionResponse(text="")

        return gen()


def get_weather(city: str, unit: str) -> dict:
    """The weather in a city."""
    return {"city": city, "temperature": 18, "unit": unit}


def fetch_page(url: str) -> str:
    """A web page's text."""
    raise RuntimeError(f"connection refused: {url}")


def agent(name: str, model: str, prompt: str, *tools, **more) -> FunctionAgent:
    return FunctionAgent(
        name=name,
        description=name,
        tools=[FunctionTool.from_defaults(tool) for tool in tools],
        llm=ScriptedLLM(model=model),
        system_prompt=prompt,
        streaming=False,
        **more,
    )


def handoffs() -> AgentWorkflow:
    triage = agent("triage", "fake-triage-model", "Triage.", can_handoff_to=["expert"])
    expert = agent("expert", "fake-expert-model", "Answer.", can_handoff_to=["triage"])
    return AgentWorkflow(agents=[triage, expert], root_agent="triage")


# scenario: (what runs, the question, the run's keyword arguments)
SCENARIOS = {
    "loop": (lambda: agent("weather_agent", "fake-loop-model", "Answer about the weather.",
                           get_weather), "What is the weather in Paris?", {}),
    "tool_error": (lambda: agent("browser_agent", "fake-error-model", "Fetch.", fetch_page),
                   "What does example.com say?", {}),
}  # fmt: skip
if INSTRUMENTATION == "openinference":
    SCENARIOS |= {
        "max_iter": (lambda: agent("stuck_agent", "fake-stuck-model", "Weather.", get_weather),
                     "What is the weather in Paris?", {"max_iterations": 3}),
        "handoff": (handoffs, "What is a keel?", {}),
    }  # fmt: skip


async def main():
    for scenario, (make, question, options) in SCENARIOS.items():
        if ONLY and scenario not in ONLY:
            continue
        TURNS.clear()
        try:  # (the agent tells the model of a tool's errors)
            print(await make().run(user_msg=question, **options))
        except WorkflowRuntimeError as error:  # max_iter
            print("stopped:", error)
        cap.save(f"{PREFIX}_{scenario}")


asyncio.run(main())
cap.shutdown()
