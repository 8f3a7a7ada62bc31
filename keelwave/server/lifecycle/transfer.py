"""Export a project's runs as JSON lines, and import such lines into a project.

``GET /v1/projects/{p}/export`` streams (records.py says what a line holds): the
runs are read with a server-side cursor in one REPEATABLE READ snapshot, a batch
at a time, and so are each batch's steps and model calls, so memory stays bounded
whatever the project holds, and the export is consistent while ingest goes on.

``POST /v1/projects/{p}/import`` takes such lines (the CLI sends a file in
requests of a few thousand lines) and stores them through the ingest writer, so
the rollups, the tool statistics and the server's verdicts follow as for any
ingest, and a line sent twice is stored once: a failed import can be run again.
Acknowledged means committed, here too.
"""

from __future__ import annotations

from datetime import datetime
from typing import Annotated

from aiohttp import web
from msgspec import Meta, Struct

from keelwave.server.http import appkeys, params
from keelwave.server.http.auth import ALL, READ
from keelwave.server.http.errors import ApiError
from keelwave.server.http.operations import ApiRoutes, Param
from keelwave.server.http.responses import respond
from keelwave.server.ingest.routes import write_rows
from keelwave.server.lifecycle import records
from keelwave.server.store.lifecycle import finish_runs

routes = ApiRoutes("lifecycle")
PROJECT = "/v1/projects/{project_id}"
RUN_BATCH = 500  # runs per batch of an export
FETCH = 5000  # rows per round trip of a server-side cursor
NDJSON = "application/x-ndjson"

Count = Annotated[int, Meta(ge=0)]


class ImportCounts(Struct, kw_only=True):
    """What this request stored (lines already stored count too: they change nothing)."""

    runs: Count
    steps: Count
    model_calls: Count
    finished: Annotated[int, Meta(ge=0, description="Runs whose finish was imported")]
    complete: Annotated[
        bool, Meta(description="The export's last line (kind end) was in this request")
    ]


class ImportResponse(Struct):
    data: ImportCounts


@routes.get(
    f"{PROJECT}/export",
    summary="Export runs",
    query=(
        Param("since", datetime, "Only runs that started at or after this time."),
        Param("until", datetime, "Only runs that started before this time."),
        Param("agent_name", str, "Only this agent's runs."),
    ),
    response=None,
    response_format=(NDJSON, "JSON lines: a header, runs, steps, model calls, a trailer"),
)
async def export(request: web.Request) -> web.StreamResponse:
    """The project's runs with their steps and model calls, one JSON object a line
    (application/x-ndjson), streamed: a header, runs by start time each batch followed
    by its steps and model calls, and a last line with the counts (docs/data.md)."""
    principal = await request.app[appkeys.KEYSTORE].authenticate(request, READ)
    project_id = params.project_of(request, principal)
    since = _time(request, "since")
    until = _time(request, "until")
    where = ["project_id = %(project)s"]
    args: dict[str, object] = {"project": project_id}
    if since is not None:
        where.append("started_at >= %(since)s")
        args["since"] = since
    if until is not None:
        where.append("started_at < %(until)s")
        args["until"] = until
    if agent := params.text(request, "agent_name"):
        where.append("agent_name = %(agent)s")
        args["agent"] = agent

    response = web.StreamResponse(headers={"Content-Type": NDJSON})
    response.enable_compression()
    counts = dict.fromkeys(records.KINDS, 0)
    async with request.app[appkeys.POOL].connection() as conn, conn.transaction():
        # One snapshot for the whole export. Set on the transaction, not the connection:
        # the pool hands the connection to ingest next.
        await conn.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY")
        await response.prepare(request)
        await response.write(records.header(project_id, principal.project, since, until))
        runs = conn.cursor(name="kw_export_runs")
        await runs.execute(records.select_sql("run", " AND ".join(where)), args)
        while batch := await runs.fetchmany(RUN_BATCH):
            await _write(response, counts, "run", batch)
            ids = [row[0] for row in batch]
            for kind in ("step", "model_call"):
                await _stream(conn, response, counts, kind, project_id, ids)
        await runs.close()
        if agent is None:  # model calls sent without a run belong to no agent
            await _stream_unattached(conn, response, counts, where, args)
        await response.write(records.trailer(counts))
    await response.write_eof()
    return response


async def _stream(conn, response, counts, kind: str, project_id: str, run_ids: list) -> None:
    cursor = conn.cursor(name=f"kw_export_{kind}")
    await cursor.execute(
        records.select_sql(kind, "project_id = %(project)s AND run_id = ANY(%(runs)s)"),
        {"project": project_id, "runs": run_ids},
    )
    while rows := await cursor.fetchmany(FETCH):
        await _write(response, counts, kind, rows)
    await cursor.close()


async def _stream_unattached(conn, response, counts, where: list[str], args: dict) -> None:
    cursor = conn.cursor(name="kw_export_unattached")
    await cursor.execute(
        records.select_sql("model_call", " AND ".join([*where, "run_id IS NULL"])), args
    )
    while rows := await cursor.fetchmany(FETCH):
        await _write(response, counts, "model_call", rows)
    await cursor.close()


async def _write(response: web.StreamResponse, counts: dict, kind: str, rows: list) -> None:
    await response.write(b"".join(records.encode(kind, row) for row in rows))
    counts[kind] += len(rows)


def _time(request: web.Request, name: str) -> datetime | None:
    text = request.query.get(name)
    return params.timestamp(text, name) if text is not None else None


@routes.post(
    f"{PROJECT}/import",
    summary="Import runs",
    response=ImportResponse,
    query=(Param("first_line", int, "Where these lines start in the file (for errors)."),),
    body_formats={NDJSON: "Lines of an export (GET …/export), any part of one"},
)
async def import_(request: web.Request) -> web.Response:
    """Lines of an export (any part of one, in any order) stored in this project;
    answered once they are committed. A line already stored changes nothing, so an
    interrupted import may be sent again. Needs a key of scope all."""
    principal = await request.app[appkeys.KEYSTORE].authenticate(request, ALL)
    params.project_of(request, principal)
    body = await request.read()  # the body limit applies: the CLI sends a file in parts
    first_line = _first_line(request)
    try:
        batch = records.decode_lines(
            body.split(b"\n"), first_line, principal.project_uuid, principal.redaction
        )
    except records.BadRecord as error:
        raise ApiError(422, "validation_error", str(error)) from None
    await write_rows(request, runs=batch.runs, steps=batch.steps, traces=batch.traces)
    unknown = []
    if batch.finishes:
        unknown = await finish_runs(request.app[appkeys.POOL], principal.project_id, batch.finishes)
    return respond(
        ImportResponse,
        {
            "data": {
                "runs": len(batch.runs),
                "steps": len(batch.steps),
                "model_calls": len(batch.traces),
                "finished": len(batch.finishes) - len(unknown),
                "complete": batch.ended is not None,
            }
        },
    )


def _first_line(request: web.Request) -> int:
    """Line numbers in errors count from ``first_line`` (the CLI sends where its part
    starts in the file), so an error names the line of the file."""
    return params.integer(request, "first_line", 1, 1, 2**53)
