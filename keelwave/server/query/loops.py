"""Who am I, and where does a run repeat itself.

``/loops`` is computed from the stored steps at query time, so it is right
whatever the SDK reported at finish: group the run's steps by fingerprint,
ignore steps without one, keep groups of two or more. ``/findings`` reads the
same steps with the server's detectors (keelwave.server.findings): the exact
loops again, and cycles, near-duplicates and calls that make no progress.
"""

from __future__ import annotations

import asyncio
import base64
import uuid

from aiohttp import web

from keelwave.server.findings import findings
from keelwave.server.http import appkeys
from keelwave.server.http.auth import ANY, READ
from keelwave.server.http.errors import not_found, unavailable
from keelwave.server.http.operations import ApiRoutes
from keelwave.server.http.params import project_of, run_id_of
from keelwave.server.http.responses import respond
from keelwave.server.query.plans import run_queries
from keelwave.server.query.schemas import FindingsResponse, LoopGroup, LoopsResponse, MeResponse
from keelwave.server.store.run_calls import read_calls

routes = ApiRoutes("query")

LOOPS_SQL = """
SELECT input_fingerprint,
       count(*) AS hits,
       array_agg(step_index ORDER BY step_index) AS step_indices,
       min(tool_name) AS tool_name
FROM agent_steps
WHERE project_id = %s AND run_id = %s AND input_fingerprint IS NOT NULL
GROUP BY input_fingerprint
HAVING count(*) >= 2
ORDER BY hits DESC, min(step_index)
"""

RUN_EXISTS_SQL = """
SELECT EXISTS (SELECT 1 FROM agent_runs WHERE project_id = %(p)s AND id = %(r)s)
    OR EXISTS (SELECT 1 FROM agent_steps WHERE project_id = %(p)s AND run_id = %(r)s)
"""


@routes.get("/v1/me", summary="Describe the calling key", response=MeResponse)
async def me(request: web.Request) -> web.Response:
    """The project and scope of the key in the Authorization header (any scope)."""
    principal = await request.app[appkeys.KEYSTORE].authenticate(request, ANY)
    return respond(
        MeResponse,
        {
            "data": {
                "project_id": principal.project_id,
                "project": principal.project,
                "scope": principal.scope,
                "key_id": principal.key_id,
            }
        },
    )


@routes.get(
    "/v1/projects/{project_id}/agent/runs/{run_id}/loops",
    summary="Get a run's loops",
    response=LoopsResponse,
)
async def run_loops(request: web.Request) -> web.Response:
    """The run's stored steps grouped by fingerprint, groups of two or more, most hits
    first; computed now, whatever the SDK reported."""
    principal = await request.app[appkeys.KEYSTORE].authenticate(request, READ)
    project_id = project_of(request, principal)
    run_id = run_id_of(request)
    async with run_queries(request) as queries:
        rows = await queries.rows(LOOPS_SQL, (project_id, run_id))
        if not rows and not (await queries.row(RUN_EXISTS_SQL, {"p": project_id, "r": run_id}))[0]:
            raise not_found(f"run {run_id}")
    return respond(LoopsResponse, {"data": [loop_group(row) for row in rows]})


def loop_group(row: tuple) -> LoopGroup:
    fingerprint, hits, step_indices, tool_name = row
    return LoopGroup(base64.b64encode(fingerprint).decode("ascii"), hits, step_indices, tool_name)


@routes.get(
    "/v1/projects/{project_id}/agent/runs/{run_id}/findings",
    summary="Get a run's findings",
    response=FindingsResponse,
)
async def run_findings(request: web.Request) -> web.Response:
    """How the run repeats itself, found by the server from its stored steps: exact
    loops (as /loops), cycles, near-duplicates and no progress, by where they began."""
    principal = await request.app[appkeys.KEYSTORE].authenticate(request, READ)
    project_id = project_of(request, principal)
    run_id = run_id_of(request)
    key = (uuid.UUID(project_id), run_id)
    async with run_queries(request) as queries:
        # The calls as the server's verdicts read them (store/run_calls.py), so the two
        # agree. A run renumbered between the read's two statements is read again.
        for _ in range(3):
            read = await read_calls(queries.rows, [key], offload=asyncio.to_thread)
            if key not in read.changed:
                break
        else:
            raise unavailable(1, f"run {run_id} is being renumbered by arriving spans; retry")
        calls = read.calls.get(key, [])
        if not calls and not (await queries.row(RUN_EXISTS_SQL, {"p": project_id, "r": run_id}))[0]:
            raise not_found(f"run {run_id}")
    # (in a thread: a run of 10,000 steps takes a few tenths of a second to judge, which
    # the event loop spends answering ingest instead)
    found = await asyncio.to_thread(findings, calls)
    return respond(FindingsResponse, {"data": [f.as_dict() for f in found]})
