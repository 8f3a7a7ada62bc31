"""``GET /runs/{run_id}/timeline``: a run's steps, model calls and child runs on one time axis.

The waterfall of the run explorer (dashboard, TUI, ``runs show``) reads the
three kinds interleaved by start time, a page at a time. The order is total:
(started_at, kind: step < model_call < child_run, step_index or id), and the
cursor is the last item's place in it, so pages neither repeat nor skip an
item while the run is still going.

Each kind is read with one range scan of its index by run (agent_steps_run_idx,
ai_traces_run_idx, agent_runs_parent_idx): at most limit + 1 rows after the
cursor, of which the merge keeps limit. Steps also need their fingerprint's
count over the whole run (``loop_hits``), for the fingerprints of the page only.
"""

from __future__ import annotations

import uuid
from datetime import datetime, timedelta
from typing import Annotated, Any

from aiohttp import web
from msgspec import Meta

from keelwave.server.http import params
from keelwave.server.http.errors import not_found
from keelwave.server.http.operations import ApiRoutes, Param
from keelwave.server.http.responses import respond
from keelwave.server.query.explorer_schemas import TimelineResponse
from keelwave.server.query.fields import (
    FROM_SPANS,
    MODEL_CALL_FIELDS,
    RUN_FIELDS,
    STEP_FIELDS,
    step_json,
)
from keelwave.server.query.loops import RUN_EXISTS_SQL
from keelwave.server.query.plans import run_queries

routes = ApiRoutes("query")

KINDS = ("step", "model_call", "child_run")  # their order at one moment
DEFAULT_LIMIT, MAX_LIMIT = 500, 5000

# After the cursor (c_started, c_rank, c_key), in the order above: an item of a
# kind ranked before the cursor's must start later; of the cursor's own kind,
# later or at the same moment with a greater key; of a kind ranked after it, at
# the same moment or later.
_AFTER = {
    "before": "started_at > %(c_started)s::timestamptz",
    "same": "(started_at, {key}) > (%(c_started)s::timestamptz, %(c_key)s::{key_type})",
    "after": "started_at >= %(c_started)s::timestamptz",
}

# The run's steps are found by agent_steps_run_idx alone: by its start, the planner
# would rather walk agent_steps_recent_idx, every project's steps of the time, and
# keep the run's. One range scan reads the run's (step_index, started_at,
# fingerprint) into a narrow materialised set; the page's keys and the fingerprints'
# counts come from it, and the page's rows are then fetched by (run, step_index).
_QUALIFIED_STEP_FIELDS = ", ".join(f"s.{name.strip()}" for name in STEP_FIELDS.split(","))
_STEPS = f"""
WITH run_steps AS MATERIALIZED (
    SELECT step_index, started_at, input_fingerprint FROM agent_steps
    WHERE project_id = %(project)s AND run_id = %(run)s
), page AS (
    SELECT step_index FROM run_steps WHERE {{after}}
    ORDER BY started_at, step_index
    LIMIT %(limit)s
), hits AS (
    SELECT input_fingerprint, count(*) AS hits FROM run_steps
    WHERE input_fingerprint IS NOT NULL
    GROUP BY input_fingerprint
)
SELECT {_QUALIFIED_STEP_FIELDS}, coalesce(hits.hits, 1) AS fingerprint_hits
FROM page
JOIN agent_steps s ON s.project_id = %(project)s AND s.run_id = %(run)s
                  AND s.step_index = page.step_index
LEFT JOIN hits ON hits.input_fingerprint = s.input_fingerprint
ORDER BY s.started_at, s.step_index
"""

# The same for model calls, whose rows are narrower: the run's calls (OFFSET 0 keeps
# the planner from reading them by time through ai_traces_recent_idx), sorted.
_MODEL_CALLS = f"""
SELECT * FROM (
    SELECT {MODEL_CALL_FIELDS} FROM ai_traces
    WHERE project_id = %(project)s AND run_id = %(run)s
    OFFSET 0
) calls
WHERE {{after}}
ORDER BY started_at, id
LIMIT %(limit)s
"""

_CHILD_RUNS = f"""
SELECT {RUN_FIELDS}, {FROM_SPANS} FROM agent_runs
WHERE project_id = %(project)s AND parent_run_id = %(run)s AND {{after}}
ORDER BY started_at, id
LIMIT %(limit)s
"""

# kind -> (SQL, key column, its type)
_QUERIES = {
    "step": (_STEPS, "step_index", "int"),
    "model_call": (_MODEL_CALLS, "id", "uuid"),
    "child_run": (_CHILD_RUNS, "id", "uuid"),
}


def _after(kind: str, cursor: tuple[datetime, int, str] | None) -> str:
    if cursor is None:
        return "true"
    rank, cursor_rank = KINDS.index(kind), cursor[1]
    _, key, key_type = _QUERIES[kind]
    relation = "before" if rank < cursor_rank else "same" if rank == cursor_rank else "after"
    return _AFTER[relation].format(key=key, key_type=key_type)


def _cursor(request: web.Request) -> tuple[datetime, int, str] | None:
    values = params.decode_cursor(request, 3)
    if values is None:
        return None
    started, kind, key = values
    try:
        key = str(int(key)) if kind == "step" else str(uuid.UUID(key))
        return datetime.fromisoformat(started), KINDS.index(kind), key
    except ValueError:  # kind not in KINDS, or a value not of its type
        raise params.invalid(
            "cursor", "not a cursor from this API (use next_cursor as given)"
        ) from None


def _ended(started: datetime, duration_ms: float | None) -> datetime | None:
    if duration_ms is None:
        return None
    try:
        return started + timedelta(milliseconds=duration_ms)
    except OverflowError:  # (a step that would end after the year 9999)
        return datetime.max.replace(tzinfo=started.tzinfo)


def _step(row: dict[str, Any]) -> dict[str, Any]:
    item = step_json(row)
    item["kind"] = "step"
    item["ended_at"] = _ended(row["started_at"], row["duration_ms"])
    return item


def _model_call(row: dict[str, Any]) -> dict[str, Any]:
    row["kind"] = "model_call"
    row["duration_ms"] = row["latency_ms"]
    row["ended_at"] = _ended(row["started_at"], row["latency_ms"])
    return row


def _child_run(row: dict[str, Any]) -> dict[str, Any]:
    row["kind"] = "child_run"
    row["run_id"] = row.pop("id")
    return row


_SHAPE = {"step": _step, "model_call": _model_call, "child_run": _child_run}


def _place(item: dict[str, Any]) -> tuple:
    """An item's place in the timeline's order."""
    kind = item["kind"]
    key = (
        item["step_index"]
        if kind == "step"
        else (item["id"] if kind == "model_call" else item["run_id"])
    )
    return (item["started_at"], KINDS.index(kind), key)


@routes.get(
    "/v1/projects/{project_id}/agent/runs/{run_id}/timeline",
    summary="Get a run's timeline",
    response=TimelineResponse,
    query=(
        Param(
            "limit",
            Annotated[int, Meta(ge=1, le=MAX_LIMIT)],
            f"Page size (default {DEFAULT_LIMIT}).",
        ),
        params.CURSOR_QUERY,
    ),
)
async def run_timeline(request: web.Request) -> web.Response:
    """The run's steps, model calls and child runs interleaved by start time, a page
    at a time: the waterfall of the run."""
    project_id = await params.read_project(request)
    run_id = params.run_id_of(request)
    limit = params.integer(request, "limit", DEFAULT_LIMIT, 1, MAX_LIMIT)
    cursor = _cursor(request)
    args: dict[str, Any] = {
        "project": project_id,
        "run": run_id,
        "limit": limit + 1,
        "stall": params.stall_after(request),
    }
    if cursor is not None:
        args.update(c_started=cursor[0], c_key=cursor[2])
    items: list[dict[str, Any]] = []
    async with run_queries(request) as queries:
        for kind, (sql, _, _) in _QUERIES.items():
            rows = await queries.rows(sql.format(after=_after(kind, cursor)), args, as_dicts=True)
            items.extend(_SHAPE[kind](row) for row in rows)
        if not items and cursor is None:
            exists = {"p": project_id, "r": run_id}
            if not (await queries.row(RUN_EXISTS_SQL, exists))[0]:
                raise not_found(f"run {run_id}")
    items.sort(key=_place)
    next_cursor = None
    if len(items) > limit:
        items = items[:limit]
        started, rank, key = _place(items[-1])
        next_cursor = params.encode_cursor(started.isoformat(), KINDS[rank], key)
    return respond(TimelineResponse, {"data": items, "next_cursor": next_cursor})
