"""``GET /runs/compare?a=&b=``: two runs of a project, their steps aligned and their totals.

The runs may be of different agents (a prompt change often renames one). The
alignment is compare.py's; this reads both runs and their steps and answers.
Registered before ``/runs/{run_id}`` (app.py), which would otherwise take
``compare`` for a run id.
"""

from __future__ import annotations

import uuid
from typing import Any

from aiohttp import web

from keelwave.server.http import params
from keelwave.server.http.errors import not_found
from keelwave.server.http.operations import ApiRoutes, Param
from keelwave.server.http.responses import respond
from keelwave.server.query import compare
from keelwave.server.query.explorer_schemas import ComparisonResponse
from keelwave.server.query.fields import STEP_FIELDS, step_json
from keelwave.server.query.plans import run_queries

routes = ApiRoutes("query")

TOTALS = ("step_count", "input_tokens", "output_tokens", "cost_usd", "duration_ms", "llm_calls")

_RUN = """
SELECT id, agent_name, started_at, duration_ms, termination_reason, step_count,
       input_tokens, output_tokens, cost_usd, llm_calls,
       CASE WHEN ended_at IS NOT NULL THEN 'finished'
            WHEN last_activity_at < now() - %(stall)s THEN 'stalled'
            ELSE 'running' END AS status
FROM agent_runs WHERE project_id = %(project)s AND id = %(run)s
"""

_STEPS = f"""
SELECT {STEP_FIELDS},
       CASE WHEN input_fingerprint IS NULL THEN 1
            ELSE count(*) OVER (PARTITION BY input_fingerprint) END AS fingerprint_hits
FROM agent_steps WHERE project_id = %(project)s AND run_id = %(run)s
ORDER BY step_index
"""


def _run_param(request: web.Request, name: str) -> uuid.UUID:
    text = request.query.get(name, "").strip()
    if not text:
        raise params.invalid(name, "this parameter is required: the id of a run to compare")
    try:
        return uuid.UUID(text)
    except ValueError:
        raise params.invalid(name, f"expected a run id (a UUID); got {text!r}") from None


def _difference(a: float | None, b: float | None) -> dict[str, float | None]:
    delta = b - a if a is not None and b is not None else None
    if isinstance(delta, float):
        delta = round(delta, 9)  # cost sums: no 1e-17 noise between equal runs
    return {"a": a, "b": b, "delta": delta}


@routes.get(
    "/v1/projects/{project_id}/agent/runs/compare",
    summary="Compare two runs",
    response=ComparisonResponse,
    query=(
        Param("a", uuid.UUID, "The first run's id.", required=True),
        Param("b", uuid.UUID, "The second run's id.", required=True),
    ),
)
async def compare_runs(request: web.Request) -> web.Response:
    """Two runs side by side: their steps aligned by (step_type, tool_name), each pair
    same or changed in input or output, steps only in one, and the totals' differences."""
    project_id = await params.read_project(request)
    ids = {"a": _run_param(request, "a"), "b": _run_param(request, "b")}
    runs: dict[str, Any] = {}
    steps: dict[str, list[dict[str, Any]]] = {}
    async with run_queries(request) as queries:
        for side, run_id in ids.items():
            args = {"project": project_id, "run": run_id, "stall": params.stall_after(request)}
            run = await queries.row(_RUN, args, as_dicts=True)
            if run is None:
                raise not_found(f"run {run_id} ({side})")
            runs[side] = run
            steps[side] = [step_json(row) for row in await queries.rows(_STEPS, args, True)]
    method, aligned = compare.align(steps["a"], steps["b"])
    totals = {name: _difference(runs["a"][name], runs["b"][name]) for name in TOTALS}
    body = {"a": runs["a"], "b": runs["b"], "aligned": method, "steps": aligned, "totals": totals}
    return respond(ComparisonResponse, {"data": body})
