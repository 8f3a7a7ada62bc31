"""How the queries of one run (its steps, loops, findings, model calls) are planned.

The query pool plans every statement for its parameters (plan_cache_mode =
force_custom_plan in app.py): a window of a week and an empty one need
different plans. A run's own rows are found the same way for every run, by
(project_id, run_id), and on TimescaleDB planning such a query means
planning it over every chunk of the table: about 30 ms for /loops of a
1,000-step run, whose execution takes 4 to 6. There these queries are
prepared and run with a generic plan, planned once per connection. On plain
PostgreSQL, planning costs a fraction of a millisecond and nothing changes;
behind a transaction pooler nothing is prepared.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Sequence
from typing import Any

from aiohttp import web
from psycopg import AsyncConnection
from psycopg.rows import dict_row

from keelwave.server.http import appkeys


class RunQueries:
    """One connection's queries of a run, prepared or not as :func:`run_queries` says."""

    def __init__(self, conn: AsyncConnection, prepare: bool | None) -> None:
        self.conn = conn
        self._prepare = prepare

    async def rows(self, sql: str, params: Sequence | dict, as_dicts: bool = False) -> list:
        async with (
            self.conn.cursor(row_factory=dict_row) if as_dicts else self.conn.cursor() as cur
        ):
            await cur.execute(sql, params, prepare=self._prepare)
            return await cur.fetchall()

    async def row(self, sql: str, params: Sequence | dict, as_dicts: bool = False) -> Any:
        rows = await self.rows(sql, params, as_dicts)
        return rows[0] if rows else None


@contextlib.asynccontextmanager
async def run_queries(request: web.Request) -> AsyncIterator[RunQueries]:
    async with request.app[appkeys.POOL].connection() as conn:
        if not request.app[appkeys.GENERIC_RUN_PLANS]:
            yield RunQueries(conn, prepare=None)
            return
        async with conn.transaction():
            await conn.execute("SET LOCAL plan_cache_mode = force_generic_plan")
            yield RunQueries(conn, prepare=True)
