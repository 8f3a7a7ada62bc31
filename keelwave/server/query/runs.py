"""Runs as a list, one run, its steps and its model calls.

Lists are newest first with keyset pagination: ``next_cursor`` encodes the
last row's (started_at, id), so pages stay stable while new runs arrive.
A run's status is computed when it is read: ``finished`` once it has ended,
``stalled`` when it has been silent for ``stall_after_seconds``, else
``running``.
"""

from __future__ import annotations

import base64
from typing import Annotated, Any

from aiohttp import web
from msgspec import Meta
from psycopg.rows import dict_row

from keelwave.protocol import TERMINATION_REASONS
from keelwave.server.findings import KINDS as FINDING_KINDS
from keelwave.server.http import appkeys, params
from keelwave.server.http.errors import not_found
from keelwave.server.http.operations import ApiRoutes, Param
from keelwave.server.http.responses import respond
from keelwave.server.query.loops import LOOPS_SQL, RUN_EXISTS_SQL, loop_group
from keelwave.server.query.plans import run_queries
from keelwave.server.query.schemas import (
    RUN_STATUSES,
    FindingKind,
    ModelCallListResponse,
    RunDetailResponse,
    RunListResponse,
    RunStatus,
    StepListResponse,
    TerminationReason,
)

routes = ApiRoutes("query")

LIST_QUERY = (
    Param("agent_name", str, "Only this agent."),
    Param("status", RunStatus, "Only runs in this status."),
    Param("termination_reason", TerminationReason, "Only runs that ended for this reason."),
    Param("loop_detected", bool, "Only runs the SDK reported looping (true) or not (false)."),
    Param("detected_loop", bool, "Only runs the server found looping (true) or not (false)."),
    Param("finding", FindingKind, "Only runs with a finding of this kind."),
    Param("loop", bool, "Only runs that loop by either account (true), or by neither (false)."),
    Param("q", str, "A run id prefix or part of the agent name."),
    Param("limit", Annotated[int, Meta(ge=1, le=500)], "Page size (default 50)."),
    params.CURSOR_QUERY,
    *params.WINDOW_QUERY,
)

RUN_FIELDS = """
    id, agent_name, parent_run_id, started_at, ended_at, duration_ms, termination_reason,
    loop_detected, loop_step_index, detected_loop, detected_loop_step_index, findings,
    step_count, input_tokens, output_tokens, cost_usd,
    llm_calls, error, tags, last_activity_at,
    CASE WHEN ended_at IS NOT NULL THEN 'finished'
         WHEN last_activity_at < now() - %(stall)s THEN 'stalled'
         ELSE 'running' END AS status
"""


@routes.get(
    "/v1/projects/{project_id}/agent/runs",
    summary="List runs",
    response=RunListResponse,
    query=LIST_QUERY,
)
async def list_runs(request: web.Request) -> web.Response:
    """Runs newest first, filtered, a page at a time (keyset pagination)."""
    project_id = await params.read_project(request)
    limit = params.integer(request, "limit", 50, 1, 500)
    where = ["project_id = %(project)s"]
    args: dict[str, Any] = {
        "project": project_id,
        "stall": params.stall_after(request),
        "limit": limit + 1,
    }

    if agent := params.text(request, "agent_name"):
        where.append("agent_name = %(agent)s")
        args["agent"] = agent
    status = params.choice(request, "status", RUN_STATUSES)
    if status == "finished":
        where.append("ended_at IS NOT NULL")
    elif status == "stalled":
        where.append("ended_at IS NULL AND last_activity_at < now() - %(stall)s")
    elif status == "running":
        where.append("ended_at IS NULL AND last_activity_at >= now() - %(stall)s")
    if reason := params.choice(request, "termination_reason", TERMINATION_REASONS):
        where.append("termination_reason = %(reason)s")
        args["reason"] = reason
    if (looping := params.boolean(request, "loop_detected")) is not None:
        where.append("loop_detected = %(looping)s")
        args["looping"] = looping
    if (detected := params.boolean(request, "detected_loop")) is not None:
        where.append("detected_loop = %(detected)s")
        args["detected"] = detected
    if (either := params.boolean(request, "loop")) is not None:
        where.append("(loop_detected OR detected_loop) = %(either)s")
        args["either"] = either
    if kind := params.choice(request, "finding", FINDING_KINDS):
        where.append("%(kind)s = ANY(findings)")
        args["kind"] = kind
    if (window := params.window(request, default=None)) is not None:
        where.append("started_at >= %(since)s AND started_at < %(until)s")
        args.update(since=window.since, until=window.until)
    if q := params.text(request, "q"):
        where.append("(id::text LIKE %(q_prefix)s OR agent_name ILIKE %(q_name)s)")
        escaped = q.lower().replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
        args.update(q_prefix=escaped + "%", q_name="%" + escaped + "%")
    if (cursor := params.decode_cursor(request, 2)) is not None:
        where.append("(started_at, id) < (%(c_started)s::timestamptz, %(c_id)s::uuid)")
        args.update(c_started=cursor[0], c_id=cursor[1])

    sql = (
        f"SELECT {RUN_FIELDS} FROM agent_runs WHERE {' AND '.join(where)} "
        "ORDER BY started_at DESC, id DESC LIMIT %(limit)s"
    )
    async with (
        request.app[appkeys.POOL].connection() as conn,
        conn.cursor(row_factory=dict_row) as cur,
    ):
        rows = await (await cur.execute(sql, args)).fetchall()
    next_cursor = None
    if len(rows) > limit:
        rows = rows[:limit]
        next_cursor = params.encode_cursor(rows[-1]["started_at"].isoformat(), rows[-1]["id"])
    return respond(RunListResponse, {"data": rows, "next_cursor": next_cursor})


@routes.get(
    "/v1/projects/{project_id}/agent/runs/{run_id}",
    summary="Get a run",
    response=RunDetailResponse,
)
async def get_run(request: web.Request) -> web.Response:
    """One run with its input, output, metadata, loops and child runs."""
    project_id = await params.read_project(request)
    run_id = params.run_id_of(request)
    args = {"project": project_id, "run": run_id, "stall": params.stall_after(request)}
    async with run_queries(request) as queries:
        row = await queries.row(
            f"SELECT {RUN_FIELDS}, input, output, metadata FROM agent_runs "
            "WHERE project_id = %(project)s AND id = %(run)s",
            args,
            as_dicts=True,
        )
        if row is None:
            raise not_found(f"run {run_id}")
        loops = await queries.rows(LOOPS_SQL, (project_id, run_id))
        children = await queries.rows(
            "SELECT id FROM agent_runs WHERE project_id = %s AND parent_run_id = %s "
            "ORDER BY started_at, id",
            (project_id, run_id),
        )
    run = row
    run["loop_groups"] = [loop_group(group) for group in loops]
    run["child_runs"] = [child for (child,) in children]
    return respond(RunDetailResponse, {"data": run})


STEPS_SQL = """
SELECT * FROM (
    SELECT step_index, step_type, tool_name, tool_input, tool_output, content,
           input_fingerprint, started_at, duration_ms, error,
           CASE WHEN input_fingerprint IS NULL THEN 1
                ELSE count(*) OVER (PARTITION BY input_fingerprint) END AS fingerprint_hits
    FROM agent_steps WHERE project_id = %(project)s AND run_id = %(run)s
) steps
WHERE step_index > %(after)s
ORDER BY step_index
LIMIT %(limit)s
"""


@routes.get(
    "/v1/projects/{project_id}/agent/runs/{run_id}/steps",
    summary="List a run's steps",
    response=StepListResponse,
    query=(
        Param("limit", Annotated[int, Meta(ge=1, le=5000)], "Page size (default 500)."),
        params.CURSOR_QUERY,
    ),
)
async def run_steps(request: web.Request) -> web.Response:
    """The run's steps by step_index, each marked when it belongs to a loop."""
    project_id = await params.read_project(request)
    run_id = params.run_id_of(request)
    limit = params.integer(request, "limit", 500, 1, 5000)
    cursor = params.decode_cursor(request, 1)
    after = int(cursor[0]) if cursor else -1
    args = {"project": project_id, "run": run_id, "after": after, "limit": limit + 1}
    async with run_queries(request) as queries:
        rows = await queries.rows(STEPS_SQL, args, as_dicts=True)
        exists = {"p": project_id, "r": run_id}
        if not rows and cursor is None and not (await queries.row(RUN_EXISTS_SQL, exists))[0]:
            raise not_found(f"run {run_id}")
    next_cursor = None
    if len(rows) > limit:
        rows = rows[:limit]
        next_cursor = params.encode_cursor(rows[-1]["step_index"])
    return respond(
        StepListResponse, {"data": [_step_json(row) for row in rows], "next_cursor": next_cursor}
    )


def _step_json(row: dict[str, Any]) -> dict[str, Any]:
    fingerprint = row.pop("input_fingerprint")
    hits = row.pop("fingerprint_hits")
    row["fingerprint"] = base64.b64encode(fingerprint).decode() if fingerprint else None
    row["loop_hits"] = hits if hits > 1 else 0
    row["in_loop"] = hits > 1
    return row


@routes.get(
    "/v1/projects/{project_id}/agent/runs/{run_id}/llm",
    summary="List a run's model calls",
    response=ModelCallListResponse,
)
async def run_model_calls(request: web.Request) -> web.Response:
    """The run's model calls in the order they started."""
    project_id = await params.read_project(request)
    run_id = params.run_id_of(request)
    async with run_queries(request) as queries:
        rows = await queries.rows(
            "SELECT id, step_index, provider, model, input_tokens, output_tokens, "
            "cache_read_tokens, reasoning_tokens, cost_usd, latency_ms, status, error, "
            "started_at FROM ai_traces WHERE project_id = %s AND run_id = %s "
            "ORDER BY started_at, id",
            (project_id, run_id),
            as_dicts=True,
        )
        exists = {"p": project_id, "r": run_id}
        if not rows and not (await queries.row(RUN_EXISTS_SQL, exists))[0]:
            raise not_found(f"run {run_id}")
    return respond(ModelCallListResponse, {"data": rows})
