"""A trace mapped by adding an export's spans to what was mapped before (appends.py)
is exactly what mapping the whole trace gives: every captured framework trace, sent
in exports of several sizes and orders, and a long run sent a few spans at a time."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from keelwave.server.ingest.otlp import appends, decode, mapping, projection

FIXTURES = sorted((Path(__file__).resolve().parent / "otlp_fixtures").glob("*.json"))
TRACE = b"\x07" * 16
AGENT = (1).to_bytes(8, "big")


@pytest.fixture
def added(monkeypatch) -> list[int]:
    """How many exports were mapped by adding their spans (map_more did, not None)."""
    count = [0]
    real = appends.map_more

    def counted(*args, **kwargs):
        runs = real(*args, **kwargs)
        count[0] += runs is not None
        return runs

    monkeypatch.setattr(appends, "map_more", counted)
    return count


def replay(spans: list[decode.Span], size: int) -> list[mapping.MappedRun]:
    """Map one trace export by export, as a server does, each time checking the result
    against the whole mapping of what has arrived; the last result."""
    memo = projection._TraceMemo()
    arrived: list[decode.Span] = []
    runs: list[mapping.MappedRun] = []
    for start in range(0, len(spans), size):
        arrived += spans[start : start + size]
        runs = projection._mapped(list(arrived), memo)
        assert runs == mapping.map_trace(list(arrived)), f"after {len(arrived)} spans"
    return runs


def orders(spans: list[decode.Span]) -> dict[str, list[decode.Span]]:
    return {
        "as they ended": sorted(spans, key=lambda s: (s.end_ns, s.span_id)),
        "as they started": sorted(spans, key=lambda s: (s.start_ns, s.span_id)),
        "as captured": spans,
    }


@pytest.mark.parametrize("path", FIXTURES, ids=lambda path: path.stem)
def test_every_captured_trace_maps_the_same_sent_a_few_spans_at_a_time(path: Path) -> None:
    spans = decode.from_json(path.read_bytes())
    for trace in sorted({span.trace_id for span in spans}):
        of_trace = [span for span in spans if span.trace_id == trace]
        for order in orders(of_trace).values():
            for size in (1, 2, 5):
                assert replay(order, size) == mapping.map_trace(of_trace)


def test_the_captured_traces_of_runs_still_going_are_mapped_by_adding(added) -> None:
    """Not a shape of the test's own: flat traces of real frameworks, arriving children
    first, take the short way for most of their exports."""
    for name in ("pydanticai_loop", "strands_loop", "openaiagents_genai_loop"):
        spans = decode.from_json((FIXTURES[0].parent / f"{name}.json").read_bytes())
        replay(sorted(spans, key=lambda s: (s.end_ns, s.span_id)), 1)
    assert added[0] > 0


def tool(number: int, start: int, query: str, parent: bytes = AGENT) -> decode.Span:
    return decode.Span(
        trace_id=TRACE, span_id=(1000 + number).to_bytes(8, "big"), parent_span_id=parent,
        name="execute_tool search", kind=1, start_ns=start, end_ns=start + 40,
        status_code=0, status_message="",
        attributes={"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": "search",
                    "gen_ai.tool.call.arguments": json.dumps({"q": query}),
                    "gen_ai.tool.call.result": json.dumps({"hits": number})},
        resource={"service.name": "researcher"},
    )  # fmt: skip


def chat(number: int, start: int) -> decode.Span:
    return decode.Span(
        trace_id=TRACE, span_id=(5000 + number).to_bytes(8, "big"), parent_span_id=AGENT,
        name="chat gpt-4o", kind=3, start_ns=start, end_ns=start + 30, status_code=0,
        status_message="",
        attributes={"gen_ai.operation.name": "chat", "gen_ai.provider.name": "openai",
                    "gen_ai.request.model": "gpt-4o", "gen_ai.usage.input_tokens": 100,
                    "gen_ai.usage.output_tokens": 10},
        resource={"service.name": "researcher"},
    )  # fmt: skip


def agent(end: int) -> decode.Span:
    return decode.Span(
        trace_id=TRACE, span_id=AGENT, parent_span_id=None, name="invoke_agent researcher",
        kind=1, start_ns=1, end_ns=end, status_code=0, status_message="",
        attributes={"gen_ai.operation.name": "invoke_agent",
                    "gen_ai.agent.name": "researcher"},
        resource={"service.name": "researcher"},
    )  # fmt: skip


def long_run(steps: int) -> list[decode.Span]:
    """A model call, then its tool call, ``steps`` times; the tenth query from the end
    asked again at the end (a loop), and a model call starting with the step before
    it (a tie broken by span id)."""
    spans = []
    for n in range(1, steps + 1):
        spans.append(chat(n, 100 * n))
        query = f"query {n}" if n < steps else f"query {steps - 10}"
        spans.append(tool(n, 100 * n + (0 if n == steps // 2 else 50), query))
    return spans


def test_a_long_run_sent_a_few_spans_at_a_time_is_mapped_by_adding(added) -> None:
    spans = long_run(300)
    runs = replay(spans, 4)
    # all but the first export or so, and those at the tie (mapped whole: mapping._order)
    assert added[0] >= len(spans) // 4 - 3
    [run] = runs
    assert run.provisional and len(run.steps) == 300 and len(run.calls) == 300
    assert run.loop_step_index == 290
    # The agent span, last: the run is finished, mapped whole.
    [run] = replay([*spans, agent(100 * 301)], len(spans))
    assert (run.provisional, run.termination_reason, run.loop_step_index) == (False, "clean", 290)


def test_spans_that_break_the_shape_are_mapped_whole_and_right(added) -> None:
    """A step that started before the last one (it renumbers the steps after it), a
    step under another span, the agent span: each export maps the trace whole."""
    spans = long_run(20)
    late = tool(99, 150, "late")  # between steps 1 and 2
    under_tool = tool(98, 3000, "nested", parent=spans[-1].span_id)
    for extra in (late, under_tool, agent(5000)):
        runs = replay([*spans, extra], len(spans))
        assert runs == mapping.map_trace([*spans, extra])
    [run] = replay([*spans, late], len(spans))
    assert [step.step_index for step in run.steps if step.span_id == late.span_id] == [2]


def test_a_span_mapped_before_but_never_stored_is_not_kept(added) -> None:
    """A transaction rolled back after its trace was mapped (the database refused, the
    connection broke): the next export's spans are added to what the database has,
    not to what this process mapped then."""
    spans = long_run(12)
    memo = projection._TraceMemo()
    projection._mapped(spans[:10], memo)
    projection._mapped(spans[:14], memo)  # spans 10-13: mapped, then rolled back
    again = spans[:10] + spans[14:18]
    assert projection._mapped(again, memo) == mapping.map_trace(again)


def random_span(rng, number: int, parent: bytes | None, kind: str, start: int) -> decode.Span:
    attributes: dict = {}
    if kind == "agent":
        attributes = {"gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": "a"}
    elif kind == "tool":
        attributes = {"gen_ai.operation.name": "execute_tool",
                      "gen_ai.tool.name": rng.choice(["search", "fetch"])}  # fmt: skip
        query = rng.choice(["x", "y", "z", None])  # (None: a span without arguments)
        if query is not None:
            attributes["gen_ai.tool.call.arguments"] = json.dumps({"q": query})
    elif kind == "chat":
        attributes = {"gen_ai.operation.name": "chat", "gen_ai.provider.name": "openai",
                      "gen_ai.request.model": "gpt-4o",
                      "gen_ai.usage.input_tokens": rng.randint(1, 9),
                      "gen_ai.usage.output_tokens": 1,
                      "gen_ai.response.finish_reasons": [rng.choice(["stop", "tool_calls",
                                                                     "length"])]}  # fmt: skip
    return decode.Span(
        trace_id=TRACE, span_id=number.to_bytes(8, "big"), parent_span_id=parent,
        name=f"{kind} span", kind=1, start_ns=start, end_ns=start + rng.randint(1, 50),
        status_code=rng.choice([0, 0, 0, 2]), status_message="", attributes=attributes,
        resource={"service.name": rng.choice(["svc", "svc2"])},
    )  # fmt: skip


@pytest.mark.parametrize("seed", range(0, 600, 100))
def test_random_runs_map_the_same_however_their_spans_arrive(seed: int, added) -> None:
    """Runs of random tool and model spans, now and then a span under another, a
    nested agent, the agent span, ties in start times, failed spans and spans without
    arguments, sent in random exports: every mapping equals the whole trace's."""
    import random

    for number in range(seed, seed + 100):
        rng = random.Random(number)
        spans = [random_span(rng, 1, None, "agent", 0)] if rng.random() < 0.1 else []
        ids, start = [AGENT], 10
        for position in range(rng.randint(1, 60)):
            start += rng.choice([0, 1, 5, 10])
            parent = AGENT if rng.random() < 0.97 else rng.choice(ids)
            kind = rng.choice(["tool", "tool", "chat", "chat"] + ["agent"] * (rng.random() < 0.05))
            spans.append(random_span(rng, 100 + position, parent, kind, start))
            ids.append(spans[-1].span_id)
        if rng.random() < 0.6:
            order = sorted(spans, key=lambda s: (s.end_ns, s.span_id))
        else:
            order = rng.sample(spans, len(spans))
        replay(order, rng.choice([1, 2, 3]))
    assert added[0] > 0
