"""What the detectors (keelwave.server.findings) read of runs' tool calls, read in two
statements: the verdict keeper's rounds (store/verdicts.py) and ``/findings``.

The detectors need every call's index, tool, fingerprint (which calls are the same
call) and input sketch (which may be near-duplicates: findings/sketch.py). They need
a call's *input* only where a near-duplicate is possible: its tool was called 3+ times
in the run and 3 of those calls share its sketch, or the run has steps stored before
sketches were (no sketch: the detectors sketch those inputs themselves, so every input
of a tool called 3+ times is read). They need a call's *output* only where a stretch
without progress is possible: 3+ consecutive calls of one tool. Payloads are the bulk
of a step and most need not leave the database, so:

1. ``CALLS`` reads the narrow columns of every call of the runs, and the runs' step
   counts, in one statement (one snapshot: the calls are those counted);
2. :func:`wanted` picks, in Python, the calls whose payloads are needed;
3. ``PAYLOADS`` reads those payloads, each step by its index and start time (which
   lets a partitioned table look in one partition).

This used to be one statement whose window functions chose the payloads in the
database: sorting and counting there took PostgreSQL 159 ms for 100 runs of 500 steps,
these two statements 33 ms (docs/benchmarks.md, session 15).

Between the two statements a run may change: an OpenTelemetry span that arrives late
can renumber a run's steps (ingest/otlp/mapping.py). A payload read for a step is
checked against the fingerprint the first statement saw; a run whose payloads no
longer match is left out of this read (``changed``) and read again another time.
"""

from __future__ import annotations

import uuid
from collections import Counter
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from itertools import groupby
from operator import attrgetter

from keelwave.server.findings import StepView
from keelwave.server.findings.detectors import NEAR_DUPLICATE_MIN_CALLS, NO_PROGRESS_MIN_CALLS

Key = tuple[uuid.UUID, uuid.UUID]  # (project, run)
Fetch = Callable[[str, dict], Awaitable[list[tuple]]]  # runs a statement, returns its rows

# Runs are named in the rows by their place in the request (``n``, from 1), and start
# times travel as microseconds since the epoch: a round reads tens of thousands of
# calls, and two UUIDs and a timestamp a row, parsed and sent back, cost more Python
# than the rest of the read. (``μs * interval '1 microsecond'`` is exact: the factor
# is a float8, exact below 2^53 µs, about 285 years.) The lateral subqueries keep
# Citus and the planner to one index lookup per run, and per payload.
_RUNS = """
    SELECT * FROM unnest(%(projects)b::uuid[], %(ids)b::uuid[]) WITH ORDINALITY
        AS k (project_id, run_id, n)"""
CALLS = f"""
WITH k AS ({_RUNS}
)
SELECT k.n, r.step_count, NULL::int, NULL, NULL::bytea, NULL::bigint, NULL::bigint
FROM agent_runs r JOIN k ON r.project_id = k.project_id AND r.id = k.run_id
UNION ALL
SELECT k.n, NULL, c.*
FROM k CROSS JOIN LATERAL (
    SELECT t.step_index, t.tool_name, t.input_fingerprint, t.input_sketch,
           (extract(epoch FROM t.started_at) * 1000000)::bigint
    FROM agent_steps t
    WHERE t.project_id = k.project_id AND t.run_id = k.run_id AND t.tool_name IS NOT NULL
) c
"""
# (wants: 1 the input, 2 the output, 3 both.) Each payload names its own run, not
# the run's place in CALLS: looked up by a relation of one row each, the step is found
# by its whole index key. Joined to a relation of the runs instead, the planner (sure
# that a run has a few dozen steps) matched every payload against all of its run's
# steps: 92 million rows for a 10,000-step run (tests/test_run_calls.py).
PAYLOADS = """
WITH k AS (
    SELECT s.project_id, s.run_id, s.n, s.step_index, s.wants,
           timestamptz 'epoch' + s.started * interval '1 microsecond' AS started_at
    FROM unnest(%(projects)b::uuid[], %(ids)b::uuid[], %(runs)b::bigint[],
                %(indices)b::int[], %(starts)b::bigint[], %(wants)b::int[])
        AS s (project_id, run_id, n, step_index, started, wants)
)
SELECT k.n, k.step_index, p.*
FROM k CROSS JOIN LATERAL (
    SELECT p.input_fingerprint,
           CASE WHEN k.wants & 1 = 1 THEN p.tool_input::text END AS tool_input,
           CASE WHEN k.wants & 2 = 2 THEN p.tool_output::text END AS tool_output
    FROM agent_steps p
    WHERE p.project_id = k.project_id AND p.run_id = k.run_id
      AND p.step_index = k.step_index AND p.started_at = k.started_at
) p
"""


def payload_parameters(keys: list[Key], needed: list[tuple]) -> dict[str, list]:
    """PAYLOADS's parameters for the payloads ``needed`` (as _calls gives them)."""
    return {
        "projects": [keys[n - 1][0] for n, _, _, _ in needed],
        "ids": [keys[n - 1][1] for n, _, _, _ in needed],
        "runs": [n for n, _, _, _ in needed],
        "indices": [view.step_index for _, view, _, _ in needed],
        "starts": [started for _, _, started, _ in needed],
        "wants": [wants for _, _, _, wants in needed],
    }


@dataclass
class RunCalls:
    """What one read found: each run's step count, and its calls in step order with
    the payloads the detectors need; ``changed``: runs left out (see the module)."""

    counts: dict[Key, int]
    calls: dict[Key, list[StepView]]
    changed: set[Key]


def wanted(views: list[StepView]) -> list[tuple[StepView, bool, bool]]:
    """The calls of one run (in step order) whose payloads the detectors need, each with
    whether its input and whether its output is needed (the module's rules)."""
    tools = Counter(view.tool_name for view in views)
    unsketched = any(view.sketch is None for view in views)
    alike = Counter((view.tool_name, view.sketch) for view in views) if not unsketched else None
    in_block: set[int] = set()  # positions of calls in 3+ consecutive calls of one tool
    position = 0
    for _, same in groupby(views, attrgetter("tool_name")):
        length = len(list(same))
        if length >= NO_PROGRESS_MIN_CALLS:
            in_block.update(range(position, position + length))
        position += length
    found = []
    for position, view in enumerate(views):
        want_input = tools[view.tool_name] >= NEAR_DUPLICATE_MIN_CALLS and (
            unsketched or alike[(view.tool_name, view.sketch)] >= NEAR_DUPLICATE_MIN_CALLS
        )
        if want_input or position in in_block:
            found.append((view, want_input, position in in_block))
    return found


def _calls(keys: list[Key], rows: list[tuple]) -> tuple[RunCalls, list[tuple]]:
    """CALLS's rows as each run's count and calls, and the payloads to read: (run's
    place, view, start time in µs, wants)."""
    counts: dict[Key, int] = {}
    calls: dict[Key, list[StepView]] = {}
    starts: dict[tuple[int, int], int] = {}  # (run's place, step index) -> start time
    by_place: list[list[StepView]] = [[] for _ in keys]
    for n, count, index, tool, fingerprint, sketch, started in rows:
        if count is not None:
            counts[keys[n - 1]] = count
            continue
        view = StepView(index, tool, None, None, fingerprint, fingerprint is not None, sketch)
        by_place[n - 1].append(view)
        starts[(n, index)] = started
    needed = []
    for n, views in enumerate(by_place, start=1):
        if not views:
            continue
        calls[keys[n - 1]] = views
        views.sort(key=attrgetter("step_index"))
        for view, want_input, want_output in wanted(views):
            wants = want_input | want_output << 1
            needed.append((n, view, starts[(n, view.step_index)], wants))
    return RunCalls(counts, calls, set()), needed


def _fill(keys: list[Key], found: RunCalls, needed: list[tuple], rows: list[tuple]) -> RunCalls:
    """Put the payloads read into the calls; leave out a run whose steps changed."""
    by_step = {(n, index): rest for n, index, *rest in rows}
    for n, view, _, _ in needed:
        row = by_step.get((n, view.step_index))
        if row is None or row[0] != view.fingerprint:
            found.changed.add(keys[n - 1])
            continue
        _, tool_input, tool_output = row
        if tool_input is not None:
            view.tool_input = tool_input.encode("utf-8", "surrogatepass")
        if tool_output is not None:
            view.tool_output = tool_output.encode("utf-8", "surrogatepass")
    for key in found.changed:
        found.calls.pop(key, None)
        found.counts.pop(key, None)
    return found


async def read_calls(
    fetch: Fetch,
    keys: list[Key],
    offload: Callable[..., Awaitable] | None = None,
) -> RunCalls:
    """The calls of the runs ``keys`` as the detectors read them, and the runs' step
    counts. ``offload(fn, *args)`` runs the Python between the statements (e.g.
    ``asyncio.to_thread``, for a round of tens of thousands of calls); by default here."""

    async def run(fn, *args):
        return await offload(fn, *args) if offload is not None else fn(*args)

    keys = list(dict.fromkeys(keys))  # (each run once: its place names it)
    runs = {"projects": [p for p, _ in keys], "ids": [r for _, r in keys]}
    found, needed = await run(_calls, keys, await fetch(CALLS, runs))
    if not needed:
        return found
    payloads = await fetch(PAYLOADS, payload_parameters(keys, needed))
    return await run(_fill, keys, found, needed, payloads)
