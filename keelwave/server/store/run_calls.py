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
from datetime import datetime
from itertools import groupby
from operator import attrgetter

from keelwave.server.findings import StepView
from keelwave.server.findings.detectors import NEAR_DUPLICATE_MIN_CALLS, NO_PROGRESS_MIN_CALLS

Key = tuple[uuid.UUID, uuid.UUID]  # (project, run)
Fetch = Callable[[str, dict], Awaitable[list[tuple]]]  # runs a statement, returns its rows

# (The lateral subqueries keep Citus and the planner to one index lookup per run, and
# per payload: joined plainly, an estimate off by a little can turn them into a scan
# of the table. OFFSET 0 keeps the subquery from being merged into the join.)
_KEYS = """
WITH k AS (
    SELECT * FROM unnest(%(projects)s::uuid[], %(ids)s::uuid[]) AS k (project_id, run_id)
)"""
CALLS = f"""{_KEYS}
SELECT r.project_id, r.id, r.step_count, NULL::int, NULL, NULL::bytea, NULL::bigint,
       NULL::timestamptz
FROM agent_runs r JOIN k ON r.project_id = k.project_id AND r.id = k.run_id
UNION ALL
SELECT k.project_id, k.run_id, NULL, c.*
FROM k CROSS JOIN LATERAL (
    SELECT t.step_index, t.tool_name, t.input_fingerprint, t.input_sketch, t.started_at
    FROM agent_steps t
    WHERE t.project_id = k.project_id AND t.run_id = k.run_id AND t.tool_name IS NOT NULL
) c
"""
PAYLOADS = """
WITH k AS (
    SELECT * FROM unnest(%(projects)s::uuid[], %(ids)s::uuid[], %(indices)s::int[],
                         %(starts)s::timestamptz[], %(inputs)s::boolean[],
                         %(outputs)s::boolean[])
        AS k (project_id, run_id, step_index, started_at, want_input, want_output)
)
SELECT k.project_id, k.run_id, k.step_index, p.*
FROM k CROSS JOIN LATERAL (
    SELECT p.input_fingerprint,
           CASE WHEN k.want_input THEN p.tool_input::text END AS tool_input,
           CASE WHEN k.want_output THEN p.tool_output::text END AS tool_output
    FROM agent_steps p
    WHERE p.project_id = k.project_id AND p.run_id = k.run_id
      AND p.step_index = k.step_index AND p.started_at = k.started_at
) p
"""


@dataclass
class RunCalls:
    """What one read found: each run's step count, and its calls in step order with
    the payloads the detectors need; ``changed``: runs left out (see the module)."""

    counts: dict[Key, int]
    calls: dict[Key, list[StepView]]
    changed: set[Key]


@dataclass(slots=True)
class _Wanted:
    key: Key
    view: StepView
    started_at: datetime
    want_input: bool
    want_output: bool


def wanted(views: list[StepView]) -> list[tuple[StepView, bool, bool]]:
    """The calls of one run (in step order) whose payloads the detectors need, each with
    whether its input and whether its output is needed (the module's rules)."""
    tools = Counter(view.tool_name for view in views)
    unsketched = any(view.sketch is None for view in views)
    alike = Counter((view.tool_name, view.sketch) for view in views) if not unsketched else None
    in_block: set[int] = set()  # positions of calls in 3+ consecutive calls of one tool
    position = 0
    for _, same in groupby(views, attrgetter("tool_name")):
        length = sum(1 for _ in same)
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


def _calls(rows: list[tuple]) -> tuple[RunCalls, list[_Wanted]]:
    """CALLS's rows as each run's count and calls, and the payloads to read. (A run's
    calls come together: each is filed under its run's key only when the run changes,
    since hashing a UUID is Python code and a round reads tens of thousands of calls.)"""
    counts: dict[Key, int] = {}
    calls: dict[Key, list[StepView]] = {}
    starts: dict[int, datetime] = {}  # id(view) -> its step's start time
    views: list[StepView] = []
    last = None
    for project, run, count, index, tool, fingerprint, sketch, started_at in rows:
        if count is not None:
            counts[(project, run)] = count
            continue
        ident = (project.int, run.int)
        if ident != last:
            last = ident
            views = calls.setdefault((project, run), [])
        view = StepView(index, tool, None, None, fingerprint, fingerprint is not None, sketch)
        views.append(view)
        starts[id(view)] = started_at
    needed = []
    for key, views in calls.items():
        views.sort(key=attrgetter("step_index"))
        for view, want_input, want_output in wanted(views):
            needed.append(_Wanted(key, view, starts[id(view)], want_input, want_output))
    return RunCalls(counts, calls, set()), needed


def _fill(found: RunCalls, needed: list[_Wanted], rows: list[tuple]) -> RunCalls:
    """Put the payloads read into the calls; leave out a run whose steps changed."""
    by_step = {(project.int, run.int, index): rest for project, run, index, *rest in rows}
    for want in needed:
        project, run = want.key
        row = by_step.get((project.int, run.int, want.view.step_index))
        if row is None or row[0] != want.view.fingerprint:
            found.changed.add(want.key)
            continue
        _, tool_input, tool_output = row
        if tool_input is not None:
            want.view.tool_input = tool_input.encode("utf-8", "surrogatepass")
        if tool_output is not None:
            want.view.tool_output = tool_output.encode("utf-8", "surrogatepass")
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

    params = {"projects": [p for p, _ in keys], "ids": [r for _, r in keys]}
    found, needed = await run(_calls, await fetch(CALLS, params))
    if not needed:
        return found
    payloads = await fetch(
        PAYLOADS,
        {
            "projects": [want.key[0] for want in needed],
            "ids": [want.key[1] for want in needed],
            "indices": [want.view.step_index for want in needed],
            "starts": [want.started_at for want in needed],
            "inputs": [want.want_input for want in needed],
            "outputs": [want.want_output for want in needed],
        },
    )
    return await run(_fill, found, needed, payloads)
