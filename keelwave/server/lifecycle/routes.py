"""Deleting runs (one, with its children, or by selector), a project's retention and
its redaction patterns.

Deleting and changing need a key of scope ``all``; a ``read`` key may look at the
project. The work is in keelwave.server.store: erasure.py deletes (the same path
retention takes), retention.py enforces the periods set here.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC

import msgspec
import psycopg
from aiohttp import web
from psycopg.rows import dict_row

from keelwave.db.keys import KEYS_CHANNEL
from keelwave.server import redaction
from keelwave.server.http import appkeys, params
from keelwave.server.http.auth import ALL, READ
from keelwave.server.http.errors import ApiError, not_found
from keelwave.server.http.operations import ApiRoutes, Param
from keelwave.server.http.responses import respond
from keelwave.server.ingest.schemas import check_name, decode_request
from keelwave.server.lifecycle.schemas import (
    DeletedResponse,
    ProjectChange,
    ProjectResponse,
    RunSelector,
)
from keelwave.server.store import erasure
from keelwave.server.store.citus import partitions as citus_partitions

routes = ApiRoutes("lifecycle")
RUNS = "/v1/projects/{project_id}/agent/runs"


@contextmanager
def _refusing_compressed() -> Iterator[None]:
    """On Citus, rows in a columnar day cannot be deleted (store/citus/partitions.py):
    a 409 that says so, not a 500. The batches before it stay deleted, each whole."""
    try:
        yield
    except psycopg.errors.InternalError_ as error:
        if not citus_partitions.is_compressed_delete(error):
            raise
        raise ApiError(409, "compressed", citus_partitions.COMPRESSED_ROWS) from None


@routes.delete(
    f"{RUNS}/{{run_id}}",
    summary="Delete a run",
    response=DeletedResponse,
    query=(Param("children", bool, "Also delete its child runs, and theirs (default false)."),),
)
async def delete_run(request: web.Request) -> web.Response:
    """The run with its steps, model calls, alert events and OTLP spans; its child runs
    too with children=true. The rollups behind the aggregates are adjusted at once."""
    project_id = await params.project_for(request, ALL)
    run_id = params.run_id_of(request)
    children = params.boolean(request, "children") or False
    with _refusing_compressed():
        erased = await erasure.erase_run(request.app[appkeys.POOL], project_id, run_id, children)
    if erased is None:
        raise not_found(f"run {run_id}")
    return respond(DeletedResponse, {"data": erased.as_dict()})


@routes.post(
    f"{RUNS}/delete",
    summary="Delete runs by selector",
    body=RunSelector,
    response=DeletedResponse,
)
async def delete_runs(request: web.Request) -> web.Response:
    """Every run that matches all the criteria given: an agent, metadata (an erasure
    request about one end user: {"metadata": {"user_id": "…"}}), a start before a time.
    In short batches, so ingest goes on meanwhile; the answer comes once all are gone."""
    project_id = await params.project_for(request, ALL)
    selector: RunSelector = await decode_request(request, RunSelector)  # type: ignore[assignment]
    where: list[str] = []
    args: dict[str, object] = {}
    if selector.agent_name is not None:
        check_name(selector.agent_name, "agent_name")
        where.append("r.agent_name = %(agent)s")
        args["agent"] = selector.agent_name
    if selector.metadata is not None:
        # Both sides through keelwave_jsonb (migration 0009): metadata is stored as json,
        # which may hold what jsonb cannot (\u0000), and a NUL sent here is made alike.
        where.append("keelwave_jsonb(r.metadata) @> keelwave_jsonb(%(metadata)s::json)")
        args["metadata"] = msgspec.json.encode(selector.metadata).decode()
    if selector.before is not None:
        before = selector.before
        where.append("r.started_at < %(before)s")
        args["before"] = before if before.tzinfo else before.replace(tzinfo=UTC)
    if not where:
        raise ApiError(
            422, "validation_error", "give at least one of agent_name, metadata and before"
        )
    with _refusing_compressed():
        erased = await erasure.erase_where(
            request.app[appkeys.POOL], project_id, " AND ".join(where), args
        )
    return respond(DeletedResponse, {"data": erased.as_dict()})


PROJECT = """
SELECT p.id, p.name, p.created_at, p.retention_days, s.enforced_at AS retention_enforced_at,
       p.redaction_patterns
FROM projects p LEFT JOIN retention_sweeps s ON s.project_id = p.id
WHERE p.id = %s
"""


@routes.get("/v1/projects/{project_id}", summary="Get the project", response=ProjectResponse)
async def get_project(request: web.Request) -> web.Response:
    """The key's project: its name and its retention period."""
    project_id = await params.project_for(request, READ)
    return respond(ProjectResponse, {"data": await _settings(request, project_id)})


@routes.patch(
    "/v1/projects/{project_id}",
    summary="Change the project's retention or redaction",
    body=ProjectChange,
    response=ProjectResponse,
)
async def change_project(request: web.Request) -> web.Response:
    """Set retention_days (null: keep forever): the server deletes what is past the
    period within its next enforcement round (every ten minutes). Set
    redaction_patterns: they apply to the next request, on every server."""
    project_id = await params.project_for(request, ALL)
    change: ProjectChange = await decode_request(request, ProjectChange)  # type: ignore[assignment]
    async with request.app[appkeys.POOL].connection() as conn, conn.transaction():
        if change.retention_days is not msgspec.UNSET:
            await conn.execute(
                "UPDATE projects SET retention_days = %s WHERE id = %s",
                (change.retention_days, project_id),
            )
        if change.redaction_patterns is not msgspec.UNSET:
            try:
                patterns = redaction.check_patterns(change.redaction_patterns)
            except redaction.InvalidPattern as error:
                raise ApiError(422, "validation_error", str(error), "redaction_patterns") from None
            await conn.execute(
                "UPDATE projects SET redaction_patterns = %s WHERE id = %s",
                (patterns, project_id),
            )
        if change != ProjectChange():
            # Rules and retention travel with each key's cached Principal: every server
            # forgets them, and reads them again at the next request.
            await conn.execute(f"NOTIFY {KEYS_CHANNEL}")
    # Committed: this server's next request uses the new rules, whenever the notice
    # comes round to its own listener.
    request.app[appkeys.KEYSTORE].forget()
    return respond(ProjectResponse, {"data": await _settings(request, project_id)})


async def _settings(request: web.Request, project_id: str) -> dict:
    async with (
        request.app[appkeys.POOL].connection() as conn,
        conn.cursor(row_factory=dict_row) as cur,
    ):
        row = await (await cur.execute(PROJECT, (project_id,))).fetchone()
    if row is None:  # deleted since the key was checked
        raise not_found(f"project {project_id!r}")
    return row
