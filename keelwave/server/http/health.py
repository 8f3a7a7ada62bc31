"""Liveness and readiness, for load balancers and `docker compose` health checks."""

from __future__ import annotations

import psycopg
from aiohttp import web

from keelwave.server.http import appkeys
from keelwave.server.http.responses import json_response

routes = web.RouteTableDef()


@routes.get("/healthz")
async def healthz(request: web.Request) -> web.Response:
    """The process is up and answering."""
    return json_response({"status": "ok"})


@routes.get("/readyz")
async def readyz(request: web.Request) -> web.Response:
    """The database answers: ingest and queries can work.

    A fresh connection rather than one from the pool: the answer must be about
    the database now, not about the pool's reconnection schedule.
    """
    try:
        async with await psycopg.AsyncConnection.connect(
            request.app[appkeys.CONNINFO], connect_timeout=2
        ) as conn:
            await conn.execute("SELECT 1")
    except Exception as error:  # any failure to reach the database means "not ready"
        return json_response(
            {"status": "unavailable", "reason": f"database unreachable: {type(error).__name__}"},
            status=503,
            headers={"Retry-After": str(request.app[appkeys.SETTINGS].retry_after_seconds)},
        )
    return json_response({"status": "ready"})
