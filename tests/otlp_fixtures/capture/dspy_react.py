"""Capture DSPy's ReAct agent through OpenInference or OpenTelemetry's own instrumentation
(no network).

Run: python tests/otlp_fixtures/capture/dspy_react.py [openinference|genai]
Needs: dspy opentelemetry-sdk opentelemetry-exporter-otlp-proto-common and
       openinference-instrumentation-dspy (mode openinference, the default) or
       opentelemetry-instrumentation-genai-dspy (mode genai; content capture on)
Writes dspy_<scenario>.json (OpenInference) or dspy_genai_<scenario>.json.

The agent is ``dspy.ReAct``: every iteration is one call of its ``react`` predictor
(the model picks ``next_thought``, ``next_tool_name``, ``next_tool_args``), a tool
call, and an observation; the model ends the loop by picking the built-in ``finish``
tool, and a last ``extract`` call (a ChainOfThought) writes the answer fields.

The model is a subclass of DSPy's ``DummyLM`` (answers from a list, formatted by the
ChatAdapter); OpenInference instruments ``DummyLM`` like any ``LM``. Its engine is
replaced by one that reports the fixed token counts (call *n* of the LM: input
100 + 10n, output 20 + n), though this version of the instrumentation records no
token counts. Each agent has its own LM, so *n* counts that agent's calls.

OpenTelemetry's ``opentelemetry-instrumentation-genai-dspy`` wraps ``dspy.LM`` (not
``BaseLM``, which ``DummyLM`` derives from), so in mode genai the model is a real
``dspy.LM`` whose custom ``engine`` is the same counting engine over a ``DummyLM``'s
answers (``cache=False``): every call goes through ``LM.__call__``.

Scenarios (one fixture each):
  loop        search is called three times with the same arguments, then finish
  tool_error  the tool raises RuntimeError; ReAct turns the error into the
              observation and the model finishes
  nested      the outer agent's tool runs an inner dspy.ReAct with its own tool
"""

from __future__ import annotations

import dataclasses
import os
import sys

from _otlp import Capture

INSTRUMENTATION = sys.argv[1] if len(sys.argv) > 1 else "openinference"
if INSTRUMENTATION == "openinference":
    from openinference.instrumentation.dspy import DSPyInstrumentor

    PREFIX = "dspy"
elif INSTRUMENTATION == "genai":
    # The upstream GenAI instrumentation records content only when told to.
    os.environ["OTEL_SEMCONV_STABILITY_OPT_IN"] = "gen_ai_latest_experimental"
    os.environ["OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT"] = "SPAN_ONLY"
    from opentelemetry.instrumentation.genai.dspy import DSPyInstrumentor

    PREFIX = "dspy_genai"
else:
    raise SystemExit(f"unknown instrumentation {INSTRUMENTATION!r}: openinference or genai")
cap = Capture(f"keelwave-capture-dspy-{INSTRUMENTATION}")
DSPyInstrumentor().instrument(tracer_provider=cap.provider)

import dspy  # noqa: E402
from dspy.clients.engines.dummy_engine import AsyncDummyEngine, DummyEngine  # noqa: E402
from dspy.lm15 import Usage  # noqa: E402
from dspy.utils import DummyLM  # noqa: E402


class CountingEngine(DummyEngine):
    """DummyLM's engine, but reporting the fixed token counts of call n."""

    def _complete_messages(self, messages):
        response = super()._complete_messages(messages)
        turn = self.owner.calls
        self.owner.calls += 1
        usage = Usage(input_tokens=100 + 10 * turn, output_tokens=20 + turn)
        return dataclasses.replace(response, usage=usage, model=self.owner.model)


class ScriptedLM(DummyLM):
    """A DummyLM answering from a list, with a model name and token counts."""

    def __init__(self, model: str, answers: list[dict]) -> None:
        super().__init__(answers)
        self.model = model
        self.calls = 0
        self._engine_spec = CountingEngine(self)
        self._async_engine_spec = AsyncDummyEngine(self._engine_spec)

    def __repr__(self) -> str:  # the spans show the LM's repr: no memory address in it
        return f"ScriptedLM(model={self.model!r})"


def make_lm(model: str, answers: list[dict]):
    """The agent's LM: the ScriptedLM itself, or (mode genai) a dspy.LM over its engine."""
    scripted = ScriptedLM(model, answers)
    if INSTRUMENTATION != "genai":
        return scripted
    return dspy.LM(
        model,
        engine=scripted._engine_spec,
        async_engine=scripted._async_engine_spec,
        cache=False,
    )


def step(tool: str, args: dict, thought: str) -> dict:
    """One answer of ReAct's ``react`` predictor."""
    return {"next_thought": thought, "next_tool_name": tool, "next_tool_args": args}


def finish(thought: str = "I have what I need.") -> dict:
    return step("finish", {}, thought)


# --- tools -------------------------------------------------------------------------------


def search(query: str) -> str:
    """Search the web."""
    return f"Results for {query}: 18 degrees, sunny."


def get_weather(city: str) -> str:
    """Current weather for a city."""
    raise RuntimeError(f"weather service unavailable for {city}")


def lookup(term: str) -> str:
    """Look a term up in the encyclopedia."""
    return f"{term}: the backbone of a ship."


def ask_researcher(question: str) -> str:
    """Ask the research agent a question."""
    inner_lm = make_lm(
        "fake-inner-model",
        [
            step("lookup", {"term": "keel"}, "Look the term up."),
            finish(),
            {"reasoning": "The encyclopedia says so.", "summary": "A keel is a ship's backbone."},
        ],
    )
    researcher = dspy.ReAct("question -> summary", tools=[lookup], max_iters=5)
    with dspy.context(lm=inner_lm):
        return researcher(question=question).summary


# --- scenarios -----------------------------------------------------------------------------


def main() -> None:
    loop_args = {"query": "weather paris"}
    lm = make_lm(
        "fake-loop-model",
        [step("search", loop_args, "Search for the weather.")] * 3
        + [finish(), {"reasoning": "The search says so.", "answer": "18 degrees in Paris."}],
    )
    agent = dspy.ReAct("question -> answer", tools=[search], max_iters=6)
    with dspy.context(lm=lm):
        print(agent(question="Weather in Paris?").answer)
    cap.save(f"{PREFIX}_loop")

    lm = make_lm(
        "fake-error-model",
        [
            step("get_weather", {"city": "Paris"}, "Ask the weather service."),
            finish("The service failed."),
            {"reasoning": "The tool failed.", "answer": "The weather service is unavailable."},
        ],
    )
    agent = dspy.ReAct("question -> answer", tools=[get_weather], max_iters=6)
    with dspy.context(lm=lm):
        print(agent(question="Weather in Paris?").answer)
    cap.save(f"{PREFIX}_tool_error")

    lm = make_lm(
        "fake-outer-model",
        [
            step("ask_researcher", {"question": "What is a keel?"}, "Ask the researcher."),
            finish(),
            {"reasoning": "The researcher answered.", "answer": "Researcher says: a backbone."},
        ],
    )
    agent = dspy.ReAct("question -> answer", tools=[ask_researcher], max_iters=6)
    with dspy.context(lm=lm):
        print(agent(question="What is a keel?").answer)
    cap.save(f"{PREFIX}_nested")
    cap.shutdown()


if __name__ == "__main__":
    main()
