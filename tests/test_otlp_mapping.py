"""Traces captured from real frameworks (tests/otlp_fixtures) mapped onto runs, steps
and model calls: loops at the right step indices, nesting, errors, tokens counted
once, and a result that does not depend on the order or repetition of spans."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from keelwave.sdk import fingerprint
from keelwave.server.ingest.otlp import decode, mapping

FIXTURES = Path(__file__).resolve().parent / "otlp_fixtures"
LOOPS = [
    "pydanticai_loop", "openaiagents_loop", "openaiagents_chatcompletions",
    "openaiagents_openllmetry_loop", "langgraph_loop", "langgraph_openllmetry_loop",
    "smolagents_loop", "strands_loop", "strands_latest_loop",
]  # fmt: skip
NESTED = ["pydanticai_nested", "strands_nested", "strands_latest_nested", "smolagents_nested",
          "openaiagents_agent_as_tool"]  # fmt: skip


def runs_of(name: str, spans: list | None = None) -> list[mapping.MappedRun]:
    spans = (
        spans if spans is not None else decode.from_json((FIXTURES / f"{name}.json").read_bytes())
    )
    runs = []
    for trace in sorted({span.trace_id for span in spans}):
        runs += mapping.map_trace([span for span in spans if span.trace_id == trace])
    return runs


@pytest.mark.parametrize("name", LOOPS)
def test_a_looping_agent_is_one_run_whose_repeats_share_a_fingerprint(name: str) -> None:
    [run] = runs_of(name)
    calls = [step for step in run.steps if step.tool_name == "get_weather"]
    assert [step.step_index for step in calls] == [1, 2, 3]
    prints = {fingerprint(step.tool_name, (step.tool_input or b"").decode()) for step in calls}
    assert len(prints) == 1 and calls[0].tool_input
    assert run.agent_name == "weather_agent"
    assert run.termination_reason == "clean" and run.ended_ns
    if run.calls and any(call.input_tokens for call in run.calls):
        # 4 model calls of 100, 110, 120, 130 input tokens: the agent span's totals
        # (smolagents, Strands) are not counted again.
        assert sum(call.input_tokens for call in run.calls) == 460


@pytest.mark.parametrize("name", NESTED)
def test_a_nested_agent_is_a_child_run(name: str) -> None:
    runs = runs_of(name)
    assert len(runs) == 2
    outer, inner = sorted(runs, key=lambda run: run.started_ns)
    assert outer.parent_run_id is None and inner.parent_run_id == outer.run_id
    assert not any(step.tool_name == "lookup" for step in outer.steps)


@pytest.mark.parametrize(
    ("name", "reason", "step_failed"),
    [
        ("pydanticai_tool_error", "error", True),
        ("openaiagents_tool_error", "clean", True),  # the model was told, and answered
        ("openaiagents_tool_error_fatal", "error", True),
        ("langgraph_tool_error", "error", True),
        ("langgraph_tool_error_handled", "clean", True),
        ("strands_tool_error", "clean", True),
        ("openaiagents_max_turns", "max_steps_reached", False),
        ("openaiagents_openllmetry_max_turns", "max_steps_reached", False),
    ],
)
def test_errors_and_step_limits(name: str, reason: str, step_failed: bool) -> None:
    [run] = runs_of(name)
    assert run.termination_reason == reason
    assert any(step.error for step in run.steps) == step_failed


@pytest.mark.parametrize("name", LOOPS + NESTED + ["openaiagents_handoff", "langgraph_arg_shapes"])
def test_order_and_repetition_of_spans_change_nothing(name: str) -> None:
    spans = decode.from_json((FIXTURES / f"{name}.json").read_bytes())
    expected = runs_of(name, spans)
    rng = random.Random(7)
    for _ in range(5):
        again = spans + rng.sample(spans, k=len(spans) // 2)  # a retried export, in part
        rng.shuffle(again)
        assert runs_of(name, again) == expected


def test_wrapped_arguments_are_unwrapped_to_the_calls_own() -> None:
    """smolagents sends {"args": [], "kwargs": {...}} and OpenLLMetry's LangChain an
    envelope that differs on every call: both fingerprint as the call's arguments."""
    [smol] = runs_of("smolagents_loop")
    [langchain] = runs_of("langgraph_openllmetry_loop")
    assert smol.steps[0].tool_input == b'{"city": "Paris", "unit": "celsius"}'  # canonical
    assert langchain.steps[0].tool_input == smol.steps[0].tool_input
    [openai] = runs_of("openaiagents_loop")  # a JSON string: kept byte for byte
    assert openai.steps[0].tool_input == b'{"city": "Paris",  "unit": "celsius"}'
