"""The findings detectors (issue 19): each kind, what must not be found, and the corpus.

Pure functions, no database: each test builds steps and reads ``findings()``.
The corpus test measures precision and recall per kind over 240 labelled
trajectories (and a second seed), comparing ``(kind, began_at_step)``.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections import Counter
from typing import Any

import pytest
from findings_corpus import Trajectory, corpus

from keelwave.server.findings import KINDS, Finding, StepView, findings
from keelwave.server.findings.normalise import looks_random, near_key

NO = object()


def run(*calls: tuple[str | None, Any, Any] | tuple[str | None, Any]) -> list[StepView]:
    """Steps from ``(tool, input, output)``; tool None is a think step; inputs that are
    bytes are sent as they are, anything else as ``json.dumps``."""
    steps = []
    for index, call in enumerate(calls, start=1):
        tool, value, output = (*call, NO) if len(call) == 2 else call
        raw = value if isinstance(value, bytes) or value is None else json.dumps(value).encode()
        out = None if output is NO else json.dumps(output).encode()
        steps.append(StepView(index, tool, raw, out))
    return steps


def kinds(steps: list[StepView]) -> set[tuple[str, int]]:
    return {(f.kind, f.began_at_step) for f in findings(steps)}


def only(steps: list[StepView], kind: str) -> list[Finding]:
    return [f for f in findings(steps) if f.kind == kind]


# --- exact loops -----------------------------------------------------------------------


def test_exact_loops_are_the_loops_groups() -> None:
    steps = run(
        ("web_search", {"q": "a"}),
        (None, {"thought": "hm"}),
        ("web_search", {"q": "b"}),
        ("web_search", {"q": "a"}),
        ("fetch_url", b'{"url":"u"}'),
        ("fetch_url", b'{"url": "u"}'),  # other bytes: another fingerprint
        ("web_search", {"q": "a"}),
    )
    [loop] = findings(steps)
    assert loop == Finding(
        "exact_loop",
        1,
        (1, 4, 7),
        ("web_search",),
        3,
        "web_search called 3 times with the same input",
    )


def test_a_missing_input_is_an_empty_one_as_in_the_fingerprint() -> None:
    steps = [StepView(1, "screenshot", None), StepView(2, "screenshot", b"")]
    assert kinds(steps) == {("exact_loop", 1)}


def test_calls_whose_input_was_not_recorded_are_never_the_same_call() -> None:
    """A step stored without a fingerprint (an OpenTelemetry tool span without its
    arguments: Google ADK and others record none unless told to) has an unknown
    input, not an empty one: as /loops ignores it, no finding counts it either."""
    unknown = [
        StepView(i, "get_weather", None, b'{"sunny": true}', input_known=False)
        for i in (1, 2, 3, 4)
    ]
    assert findings(unknown) == []
    known = [
        StepView(5, "get_weather", b'{"city": "Paris"}'),
        StepView(6, "get_weather", b'{"city": "Paris"}'),
    ]
    assert kinds([*unknown, *known]) == {("exact_loop", 5)}
    # …nor do they make a near-duplicate, a cycle or a stretch without progress.
    alike = [StepView(7 + i, "search", raw) for i, raw in enumerate((b'{"q":"x"}', b'{"q": "x"}'))]
    assert kinds([*alike, StepView(9, "search", None, input_known=False)]) == set()
    # a ? a ?: "a" twice is an exact loop; with two unknown calls it is no cycle.
    pattern = [("a", b"1", True), ("b", None, False)] * 2
    steps = [
        StepView(10 + i, t, raw, input_known=known) for i, (t, raw, known) in enumerate(pattern)
    ]
    assert kinds(steps) == {("exact_loop", 10)}


def test_steps_are_read_in_step_order_and_findings_ordered_by_start() -> None:
    steps = run(("a", 1), ("b", 2), ("a", 1), ("c", 3), ("b", 2))
    shuffled = [steps[4], steps[0], steps[3], steps[2], steps[1]]
    assert [(f.kind, f.began_at_step) for f in findings(shuffled)] == [
        ("exact_loop", 1),
        ("exact_loop", 2),
    ]
    assert findings(shuffled)[0].as_dict()["step_indices"] == [1, 3]


# --- cycles ----------------------------------------------------------------------------


def test_a_cycle_of_two_is_found_with_its_exact_loops() -> None:
    steps = run(
        ("read_file", {"path": "x"}),
        ("web_search", {"q": "a"}),
        ("fetch_url", {"url": "u"}),
        ("web_search", {"q": "a"}),
        ("fetch_url", {"url": "u"}),
        ("web_search", {"q": "a"}),
        ("fetch_url", {"url": "u"}),
    )
    [cycle] = only(steps, "cycle")
    assert cycle.began_at_step == 2
    assert cycle.step_indices == (2, 3, 4, 5, 6, 7)
    assert cycle.hits == 3
    assert cycle.tool_names == ("web_search", "fetch_url")
    assert cycle.detail == "web_search → fetch_url, 3 times"
    assert {("exact_loop", 2), ("exact_loop", 3)} <= kinds(steps)


def test_think_steps_inside_a_cycle_do_not_break_it() -> None:
    a, b, c = ("plan", {"goal": "g"}), ("delegate", {"to": "writer"}), ("review", {"d": 1})
    think = (None, {"thought": "again"})
    steps = run(a, think, b, c, think, a, b, think, c, a)
    [cycle] = only(steps, "cycle")
    assert (cycle.began_at_step, cycle.hits) == (1, 2)
    assert cycle.step_indices == (1, 3, 4, 6, 7, 9)  # whole repetitions, no think steps
    assert cycle.detail == "plan → delegate → review, 2 times"


def test_one_call_repeated_or_a_period_with_a_repeat_is_not_a_cycle() -> None:
    a, b, c = ("s", {"q": 1}), ("s", {"q": 2}), ("o", {"u": 3})
    assert not only(run(a, a, a, a), "cycle")
    assert not only(run(a, b, a, c, a, b, a, c), "cycle")  # A B A C: three distinct in four
    assert only(run(a, b, a, b), "cycle")[0].tool_names == ("s",)  # one tool, two inputs


def test_the_smallest_period_and_the_maximal_region() -> None:
    a, b, c = ("x", 1), ("y", 2), ("z", 3)
    [cycle] = only(run(c, a, b, a, b, a, b, a, b), "cycle")
    assert (cycle.began_at_step, cycle.hits, cycle.detail) == (2, 4, "x → y, 4 times")


def test_a_period_longer_than_eight_is_left_to_exact_loops() -> None:
    period = [("t", {"i": i}) for i in range(9)]
    steps = run(*period, *period)
    assert not only(steps, "cycle")
    assert len(only(steps, "exact_loop")) == 9


def test_alternating_tools_with_changing_inputs_are_not_a_cycle() -> None:
    calls = []
    for i in range(6):
        calls += [("web_search", {"q": f"topic {i}"}, {"r": i}), ("fetch_url", {"url": f"u{i}"}, i)]
    assert findings(run(*calls)) == []


# --- near-duplicates -------------------------------------------------------------------


@pytest.mark.parametrize(
    "inputs",
    [
        [b'{"q": "weather in Paris"}', b'{"q":"weather  in paris "}', b'{"q": "Weather In Paris"}'],
        [b'{"q": "x", "top_k": 5}', b'{"top_k":5,"q":"x"}', b'{\n  "q": "x",\n  "top_k": 5\n}'],
        [
            json.dumps({"q": "x", "timestamp": f"2024-05-01T10:22:{s:02d}.123Z"}).encode()
            for s in (1, 9, 40)
        ],
        [json.dumps({"q": "x", "ts": 1714558953 + 7 * i}).encode() for i in range(3)],
        [json.dumps({"q": "x", "t": 1714558953123 + 7001 * i}).encode() for i in range(3)],
        [json.dumps({"q": "x", "sent": 1714558953.5 + i}).encode() for i in range(3)],
        [json.dumps({"q": "x", "request_id": r}).encode() for r in ("r-1", "r-2", "r-3")],
        [
            json.dumps({"q": "x", "rq": u}).encode()
            for u in (
                "0c6f2a52-0f0e-4c55-a6b1-8a2b9c3d4e5f",
                "7d1e9b4a-3c2f-4e8d-b7a6-1f0e2d3c4b5a",
                "e3b0c442-98fc-4c14-9afb-f4c8996fb924",
            )
        ],
        [
            json.dumps({"q": "x", "trace": h}).encode()
            for h in (
                "4bf92f3577b34da6a3ce929d0e0e4736",
                "00f067aa0ba902b7a3ce929d0e0e4736",
                "a3ce929d0e0e47364bf92f3577b34da6",
            )
        ],
        [
            json.dumps({"q": "x", "client": t}).encode()
            for t in ("req_8fK2mQ9xLp3Z", "req_Zq71LmxP0aB4", "req_m3Kd9s0QpL2w")
        ],
        [
            json.dumps({"q": f"price of BTC as of 2024-05-01T10:22:{s}Z"}).encode()
            for s in (11, 25, 39)
        ],
        [json.dumps(json.dumps({"q": "x"})).encode(), b'{"q": "x"}', b'{"q":"x"}'],
        [
            json.dumps({"url": f"https://x.com/feed?_={1714558953123 + i}"}).encode()
            for i in range(3)
        ],
        [
            json.dumps({"q": "x", "d": f"Wed, 01 May 2024 10:22:{s} GMT"}).encode()
            for s in (11, 25, 39)
        ],
    ],
)
def test_near_duplicates(inputs: list[bytes]) -> None:
    steps = [StepView(1, "read_file", b'{"path": "a"}')]
    steps += [StepView(i, "web_search", raw) for i, raw in enumerate(inputs, start=2)]
    [near] = only(steps, "near_duplicate")
    assert (near.began_at_step, near.hits, near.step_indices) == (2, 3, (2, 3, 4))


def test_near_duplicates_need_three_calls_and_two_different_bytes() -> None:
    two = [b'{"q": "x"}', b'{"q":"x"}']
    assert not only([StepView(i, "s", raw) for i, raw in enumerate(two, 1)], "near_duplicate")
    same = [b'{"q": "x"}'] * 3
    assert kinds([StepView(i, "s", raw) for i, raw in enumerate(same, 1)]) == {("exact_loop", 1)}
    mixed = [b'{"q": "x"}', b'{"q": "x"}', b'{"q":"x"}']
    steps = [StepView(i, "s", raw) for i, raw in enumerate(mixed, 1)]
    assert kinds(steps) == {("exact_loop", 1), ("near_duplicate", 1)}
    assert "whitespace, key order or case" in only(steps, "near_duplicate")[0].detail


@pytest.mark.parametrize(
    "inputs",
    [
        [{"q": "shoes", "page": p} for p in (1, 2, 3, 4)],
        [{"q": "shoes", "offset": o, "limit": 20} for o in (0, 20, 40)],
        [{"q": "shoes", "cursor": c} for c in ("eyJvIjoyMH0=", "eyJvIjo0MH0=", "eyJvIjo2MH0=")],
        [
            {"status": "open", "starting_after": f"tkt_{t}"}
            for t in ("8fK2mQ9xLp3Z", "Zq71LmxP0aB4", "m3Kd9s0QpL2w")
        ],
        [
            {"customer_id": f"cus_{t}", "expand": ["plan"]}
            for t in ("NffrFeUfNV2Hib", "Q8x2LpZ0mK3aBc", "T7yW1qVb4NcX9d")
        ],
        [
            {"doc_id": u, "format": "text"}
            for u in (
                "0c6f2a52-0f0e-4c55-a6b1-8a2b9c3d4e5f",
                "7d1e9b4a-3c2f-4e8d-b7a6-1f0e2d3c4b5a",
                "e3b0c442-98fc-4c14-9afb-f4c8996fb924",
            )
        ],
        [
            {"q": u}
            for u in (
                "0c6f2a52-0f0e-4c55-a6b1-8a2b9c3d4e5f",
                "7d1e9b4a-3c2f-4e8d-b7a6-1f0e2d3c4b5a",
                "e3b0c442-98fc-4c14-9afb-f4c8996fb924",
            )
        ],  # the id is the whole call: compared unmasked
        [
            {"url": f"https://docs.example.org/d/{h}"}
            for h in ("67edbcdb647659e6", "d25a7859a7f03431", "1b67948833483bdf")
        ],
        [{"sql": f"SELECT count(*) FROM orders WHERE day = '2024-05-{d:02d}'"} for d in (1, 2, 3)],
        [{"slot": f"2024-06-03T{h}:00", "party": 2} for h in ("09:30", "10:00", "10:30")],
        [{"since": f"2024-05-01T10:{m}:31Z", "ticket": "T-1"} for m in (17, 18, 19)],
        [{"at": 1714557600 + 3600 * i, "symbol": "AAPL"} for i in range(3)],
        [{"order_id": 1042 + i} for i in range(3)],
        [{"q": f"python 3.{v} release notes"} for v in (10, 11, 12)],
        [{"text": w} for w in ("hello", "Hallo", "hullo")],
        [
            {"q": "x", "model": m}
            for m in ("gpt-4o-mini-2024-07-18", "gpt-4o-2024-08-06", "gpt-4.1-2025-04-14")
        ],
    ],
)
def test_what_is_not_a_near_duplicate(inputs: list[Any]) -> None:
    steps = run(*[("tool", value, {"n": i}) for i, value in enumerate(inputs)])
    assert findings(steps) == [], [near_key(s.tool_input) for s in steps]


def test_looks_random() -> None:
    for token in ("8fK2mQ9xLp3Z", "req_a8k2j3l4m5", "4bf92f3577b34da6", "QxTzLmNpRaVbKwYs"):
        assert looks_random(token), token
    for word in ("report_2024_q1", "getCustomerOrderHistory", "hello", "trail-runner-2", "v2"):
        assert not looks_random(word), word


# --- no progress -----------------------------------------------------------------------


def test_no_progress_three_inputs_one_result() -> None:
    empty = {"results": [], "total": 0}
    steps = run(
        ("fetch_url", {"url": "u"}, {"page": 1}),
        ("web_search", {"q": "solid-state batteries"}, empty),
        (None, {"thought": "rephrase"}),
        ("web_search", {"q": "batteries solid state review"}, {"total": 0, "results": []}),
        ("web_search", {"q": "solid-state battery survey"}, empty),
        (
            "web_search",
            {"q": "solid-state battery survey"},
            empty,
        ),  # a retry: neither breaks nor counts
        ("fetch_url", {"url": "v"}, {"page": 2}),
    )
    [stuck] = only(steps, "no_progress")
    assert (stuck.began_at_step, stuck.step_indices, stuck.hits) == (2, (2, 4, 5, 6), 4)
    assert "3 different inputs" in stuck.detail


@pytest.mark.parametrize(
    "outputs",
    [
        [{"ok": True}] * 3,  # eighteen writes, eighteen acks
        [{"status": "saved"}] * 3,
        ["OK"] * 3,
        [None] * 3,
        [True] * 3,
        [{"content": ""}] * 3,  # empty __init__.py files
        [{"status": "running", "progress": p} for p in (10, 40, 70)],  # polling that changes
        [{"r": 1}, {"r": 1}],  # two are not three
    ],
)
def test_what_is_not_no_progress(outputs: list[Any]) -> None:
    steps = run(*[("write_file", {"path": f"f{i}.py"}, out) for i, out in enumerate(outputs)])
    assert not only(steps, "no_progress")


def test_a_mutation_answers_with_a_receipt_unless_it_fails() -> None:
    receipts = [
        ("write_file", {"path": f"f{i}", "content": "x" * 96}, {"bytes_written": 96})
        for i in range(5)
    ]
    assert findings(run(*receipts)) == []
    denied = [
        ("saveDraft", {"title": f"t{i}"}, {"error": "EROFS: read-only file system"})
        for i in range(3)
    ]
    assert kinds(run(*denied)) == {("no_progress", 1)}
    reads = [("read_file", {"path": f"f{i}"}, {"bytes": 96}) for i in range(3)]  # not a mutation
    assert kinds(run(*reads)) == {("no_progress", 1)}


def test_no_progress_needs_consecutive_calls_of_one_tool() -> None:
    same = {"error": "permission denied"}
    steps = run(
        ("q", {"s": 1}, same),
        ("d", {"t": 1}, {"c": 1}),
        ("q", {"s": 2}, same),
        ("q", {"s": 3}, same),
    )
    assert not only(steps, "no_progress")
    failures = run(*[("run_query", {"s": i}, {"ok": False, "error": "timeout"}) for i in range(3)])
    assert kinds(failures) == {("no_progress", 1)}


def test_polling_with_the_same_input_is_only_an_exact_loop() -> None:
    polls = [
        ("check_job", {"job_id": "j-1"}, {"status": s})
        for s in ("queued", "running", "running", "done")
    ]
    assert kinds(run(("submit", {"x": 1}, {"job_id": "j-1"}), *polls)) == {("exact_loop", 2)}


def test_a_batch_of_eighteen_distinct_reads_is_no_finding() -> None:
    reads = [
        ("read_file", {"path": f"src/pkg/mod_{i}.py"}, {"content": f"# module {i}\n"})
        for i in range(18)
    ]
    assert findings(run(*reads)) == []


def test_payloads_too_deep_to_walk_are_compared_as_bytes() -> None:
    deep = b"[" * 100_000 + b"]" * 100_000
    steps = [StepView(i, "t", deep + b" " * (i % 2), deep) for i in range(1, 5)]
    assert ("exact_loop", 1) in kinds(steps)  # and no RecursionError


# --- the corpus --------------------------------------------------------------------------


def score(trajectories: list[Trajectory]) -> dict[str, tuple[float, float]]:
    """Precision and recall per kind, over (trajectory, kind, began_at_step)."""
    hits, found, expected = Counter(), Counter(), Counter()
    for number, trajectory in enumerate(trajectories):
        got = {(number, f.kind, f.began_at_step) for f in findings(trajectory.steps)}
        want = {(number, kind, step) for kind, step in trajectory.labels}
        for _, kind, _ in got:
            found[kind] += 1
        for _, kind, _ in want:
            expected[kind] += 1
        for _, kind, _ in got & want:
            hits[kind] += 1
    return {k: (hits[k] / (found[k] or 1), hits[k] / (expected[k] or 1)) for k in KINDS}


@pytest.mark.parametrize("seed", [19, 2])
def test_corpus_precision_and_recall(seed: int) -> None:
    trajectories = corpus(seed)
    assert len(trajectories) >= 200
    assert sum(t.stuck for t in trajectories) == len(trajectories) // 2
    labelled = Counter(kind for t in trajectories for kind, _ in t.labels)
    assert all(labelled[kind] >= 25 for kind in KINDS), labelled
    for kind, (precision, recall) in score(trajectories).items():
        assert precision >= 0.95, (kind, precision)
        assert recall >= 0.9, (kind, recall)


def test_corpus_legitimate_half_has_nothing_but_exact_loops() -> None:
    for trajectory in corpus(19):
        if not trajectory.stuck:
            extra = [f for f in findings(trajectory.steps) if f.kind != "exact_loop"]
            assert extra == [], trajectory.name


def test_the_corpus_is_deterministic() -> None:
    assert corpus(7, size=20) == corpus(7, size=20)
    assert corpus(7, size=20) != corpus(8, size=20)


def test_the_detectors_import_only_the_standard_library() -> None:
    """They live in the server but must stay pure: no aiohttp, psycopg, nor any other
    keelwave package (the ingest/query independence rule stays kept); msgspec, which
    does no I/O, writes their canonical JSON ten times faster than json."""
    code = (
        "import json, sys; before = set(sys.modules); import keelwave.server.findings; "
        "print(json.dumps(sorted(set(sys.modules) - before)))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    imported = json.loads(out.stdout)
    ours = {"keelwave", "keelwave.server"}
    foreign = [
        m
        for m in imported
        if m.split(".")[0] not in sys.stdlib_module_names
        and m.split(".")[0] not in ("msgspec", "typing_extensions")  # msgspec imports it
        and m not in ours
        and not m.startswith("keelwave.server.findings")
    ]
    assert foreign == []
