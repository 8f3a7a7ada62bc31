"""The runs resource: one run, its steps and its model calls; the list, comparisons and
the timeline are in modules of their own (run_list.py, comparison.py, timeline.py)
and served from this module's route table.
"""

from __future__ import annotations

from typing import Annotated

from aiohttp import web
from msgspec import Meta

from keelwave.server.http import params
from keelwave.server.http.errors import not_found
from keelwave.server.http.operations import ApiRoutes, Param
from keelwave.server.http.responses import respond
from keelwave.server.query import comparison, cost, run_list, timeline
from keelwave.server.query.fields import (
    FROM_SPANS,
    MODEL_CALL_FIELDS,
    RUN_FIELDS,
    STEP_FIELDS,
    step_json,
)
from keelwave.server.query.loops import LOOPS_SQL, RUN_EXISTS_SQL, loop_group
from keelwave.server.query.plans import run_queries
from keelwave.server.query.schemas import (
    ModelCallListResponse,
    RunDetailResponse,
    StepListResponse,
)

routes = ApiRoutes("query")


def include(table: ApiRoutes, other: ApiRoutes) -> None:
    """Add the routes of ``other`` to ``table``, documented as they are: the run resource
    is one table (app.py registers it), written in several modules."""
    for route in other:
        table.route(route.method, route.path, **route.kwargs)(route.handler)
    table.operations.extend(other.operations)


include(routes, run_list.routes)
# Before /runs/{run_id}, which would take "compare" for a run id.
include(routes, comparison.routes)
include(routes, timeline.routes)
include(routes, cost.routes)  # the agents' cost, over the runs' model calls


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
            f"SELECT {RUN_FIELDS}, {FROM_SPANS}, error_traceback, input, output, metadata "
            "FROM agent_runs "
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


STEPS_SQL = f"""
SELECT * FROM (
    SELECT {STEP_FIELDS},
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
        StepListResponse, {"data": [step_json(row) for row in rows], "next_cursor": next_cursor}
    )


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
            f"SELECT {MODEL_CALL_FIELDS} FROM ai_traces WHERE project_id = %s AND run_id = %s "
            "ORDER BY started_at, id",
            (project_id, run_id),
            as_dicts=True,
        )
        exists = {"p": project_id, "r": run_id}
        if not rows and not (await queries.row(RUN_EXISTS_SQL, exists))[0]:
            raise not_found(f"run {run_id}")
    return respond(ModelCallListResponse, {"data": rows})
