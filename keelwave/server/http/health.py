"""Liveness and readiness, for load balancers and `docker compose` health checks."""

from __future__ import annotations

from typing import Literal

import msgspec
import psycopg
from aiohttp import web

from keelwave.server.http import appkeys
from keelwave.server.http.operations import ApiRoutes
from keelwave.server.http.responses import json_response

routes = ApiRoutes("health")


class HealthCheck(msgspec.Struct, omit_defaults=True):
    status: Literal["ok", "ready", "unavailable"]
    reason: str | msgspec.UnsetType = msgspec.UNSET


@routes.get("/healthz", summary="Liveness", response=HealthCheck, secured=False)
async def healthz(request: web.Request) -> web.Response:
    """The process is up and answering."""
    return json_response(HealthCheck("ok"))


@routes.get("/readyz", summary="Readiness", response=HealthCheck, secured=False, also=(503,))
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
            HealthCheck("unavailable", f"database unreachable: {type(error).__name__}"),
            status=503,
            headers={"Retry-After": str(request.app[appkeys.SETTINGS].retry_after_seconds)},
        )
    refusal = request.app[appkeys.REFUSALS].current
    if refusal is not None:  # the database answers, but ingest cannot commit
        return json_response(
            HealthCheck("unavailable", refusal),
            status=503,
            headers={"Retry-After": str(request.app[appkeys.SETTINGS].retry_after_seconds)},
        )
    return json_response(HealthCheck("ready"))
