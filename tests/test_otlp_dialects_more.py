"""Frameworks with attribute names of their own (dialects.py) mapped onto runs, steps
and model calls: Firebase Genkit (JavaScript and Python), VoltAgent and Langfuse's
JavaScript SDK, each captured against a fake OpenAI model whose agent calls
``search`` with the same arguments three times, then answers; its model call of turn
n reports 100 + 10n input and 20 + n output tokens (tests/otlp_fixtures/capture/js2)."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest

from keelwave.sdk import fingerprint
from keelwave.server.ingest.otlp import decode, dialects, mapping

FIXTURES = Path(__file__).resolve().parent / "otlp_fixtures"
ARGUMENTS = b'{"q":"keelwave","n":3}'


def runs_of(name: str) -> list[mapping.MappedRun]:
    spans = decode.from_json((FIXTURES / f"{name}.json").read_bytes())
    runs = []
    for trace in sorted({span.trace_id for span in spans}):
        runs += mapping.map_trace([span for span in spans if span.trace_id == trace])
    return runs


# (fixture, its model calls' input and output tokens): Genkit and Langfuse send a span
# for each of the four requests; VoltAgent one for the whole generateText, with the last
# request's usage, and the run's totals on its agent span, which are the model use.
LOOPS = [
    ("genkitjs_loop", [(100, 20), (110, 21), (120, 22), (130, 23)]),
    ("genkitpy_loop", [(100, 20), (110, 21), (120, 22), (130, 23)]),
    ("langfusejs_loop", [(100, 20), (110, 21), (120, 22), (130, 23)]),
    ("voltagent_loop", [(460, 86)]),
]


@pytest.mark.parametrize(("name", "tokens"), LOOPS)
def test_a_looping_agent_is_one_run_whose_repeats_share_a_fingerprint(
    name: str, tokens: list[tuple[int, int]]
) -> None:
    [run] = runs_of(name)
    assert run.agent_name == "researcher"
    assert [(step.tool_name, step.step_index) for step in run.steps] == [
        ("search", 1), ("search", 2), ("search", 3),
    ]  # fmt: skip
    assert [step.tool_input for step in run.steps] == [ARGUMENTS] * 3
    prints = {fingerprint(step.tool_name, (step.tool_input or b"").decode()) for step in run.steps}
    assert len(prints) == 1
    assert all(step.tool_output == b'"results for keelwave"' for step in run.steps)
    assert run.loop_step_index == 1
    assert run.termination_reason == "clean" and run.error is None
    assert run.input == b'"what is keelwave?"' and run.output == b'"final: keelwave is a tool"'
    assert [(call.input_tokens, call.output_tokens) for call in run.calls] == tokens
    assert sum(call.input_tokens for call in run.calls) == 460
    assert {(call.provider, call.model) for call in run.calls} == {("openai", "gpt-4o-mini")}


@pytest.mark.parametrize(
    ("name", "error"),
    [
        ("genkitjs_tool_error", "Error: boom failed on 7"),
        ("genkitpy_tool_error", "RuntimeError: boom failed on 7"),
        ("voltagent_tool_error", "VoltAgentError: boom failed on 7"),
        ("langfusejs_tool_error", "boom failed on 7"),
    ],
)
def test_a_failed_tool_is_a_step_with_its_error(name: str, error: str) -> None:
    [run] = runs_of(name)
    assert run.agent_name == "failer"
    assert [step.tool_name for step in run.steps] == ["search", "boom"]
    search, boom = run.steps
    assert search.error is None and search.tool_input == b'{"q":"a"}'
    assert boom.error == error and boom.tool_input == b'{"x":7}' and boom.tool_output is None
    if name.startswith("voltagent"):
        # (VoltAgent hands the error to the model, which answers: the run goes on)
        assert run.termination_reason == "clean" and run.output == b'"never"'
        assert [(call.input_tokens, call.output_tokens) for call in run.calls] == [(330, 63)]
    else:
        # (the others raise out of the run; Genkit for Python says so only in its output)
        assert run.termination_reason == "error" and run.error
        assert [call.input_tokens for call in run.calls] == [100, 110]


@pytest.mark.parametrize(
    ("name", "searches", "inputs"),
    [
        ("genkitjs_max_turns", 2, [100, 110, 120]),
        ("genkitpy_max_turns", 2, [100, 110, 120]),
        ("voltagent_max_steps", 3, [330]),
        ("langfusejs_max_steps", 3, [100, 110, 120]),
    ],
)
def test_a_run_stopped_by_its_step_limit(name: str, searches: int, inputs: list[int]) -> None:
    [run] = runs_of(name)
    assert run.agent_name == "limited" and run.termination_reason == "max_steps_reached"
    assert [step.tool_name for step in run.steps] == ["search"] * searches
    assert run.loop_step_index == 1
    assert [call.input_tokens for call in run.calls] == inputs


@pytest.mark.parametrize(
    ("name", "outer", "tool", "inner"),
    [
        ("genkitjs_nested", "coordinator", "helperAgent", "helper"),
        ("langfusejs_nested", "coordinator", "helper", "helper"),
        ("voltagent_nested", "supervisor", "delegate_task", "helper"),
    ],
)
def test_an_agent_run_by_a_tool_is_a_child_run(
    name: str, outer: str, tool: str, inner: str
) -> None:
    runs = runs_of(name)
    assert sorted(run.agent_name for run in runs) == sorted([outer, inner])
    parent = next(run for run in runs if run.agent_name == outer)
    child = next(run for run in runs if run.parent_run_id is not None)
    assert child.agent_name == inner and child.parent_run_id == parent.run_id
    assert [step.tool_name for step in parent.steps] == [tool]
    assert [step.tool_name for step in child.steps] == ["search"]
    assert child.steps[0].tool_input == b'{"q":"sub"}'
    # Each run's own model calls, none counted twice (VoltAgent: each agent's totals).
    expected = [210] if name.startswith("voltagent") else [100, 110]
    assert [call.input_tokens for call in parent.calls] == expected
    assert [call.input_tokens for call in child.calls] == expected


def test_an_answer_cut_off_by_the_token_limit_ends_the_run_at_the_context_limit() -> None:
    [run] = runs_of("voltagent_length")
    assert run.agent_name == "cutoff" and run.termination_reason == "context_limit"
    [call] = run.calls
    assert (call.input_tokens, call.output_tokens, call.finish_reasons) == (100, 20, ["length"])


@pytest.mark.parametrize(
    "name",
    [name for name, _ in LOOPS]
    + ["genkitpy_tool_error", "genkitjs_max_turns", "genkitpy_max_turns", "langfusejs_tool_error"],
)
def test_rewriting_twice_changes_nothing(name: str) -> None:
    spans = decode.from_json((FIXTURES / f"{name}.json").read_bytes())
    once = copy.deepcopy(spans)
    assert dialects.rewrite(spans) == once
    tools = [s for s in spans if s.attributes.get("openinference.span.kind") == "TOOL"]
    assert tools and all("input.value" in tool.attributes for tool in tools)


def test_langfuse_usage_details_get_back_what_its_openai_wrapper_took_out() -> None:
    """Langfuse's OpenAI wrapper writes ``input`` without the cached tokens and
    ``output`` without the reasoning ones, each as a usage type of its own."""
    [span] = decode.from_json(_one_span(
        "langfuse-sdk", "chat",
        {"langfuse.observation.type": "generation",
         "langfuse.observation.model.name": "gpt-4o",
         "langfuse.observation.usage_details":
             '{"input":60,"input_cached_tokens":40,"output":5,"output_reasoning_tokens":15,'
             '"total":120}'},
    ))  # fmt: skip
    [run] = mapping.map_trace([span])
    [call] = run.calls
    assert (call.input_tokens, call.cache_read_tokens) == (100, 40)
    assert (call.output_tokens, call.reasoning_tokens) == (20, 15)


def _one_span(scope: str, name: str, attributes: dict[str, str]) -> bytes:
    return json.dumps({"resourceSpans": [{"scopeSpans": [{
        "scope": {"name": scope},
        "spans": [{
            "traceId": "0" * 31 + "1", "spanId": "0" * 15 + "1", "name": name, "kind": 1,
            "startTimeUnixNano": "1000000", "endTimeUnixNano": "2000000",
            "attributes": [{"key": k, "value": {"stringValue": v}} for k, v in attributes.items()],
        }],
    }]}]}).encode()  # fmt: skip
