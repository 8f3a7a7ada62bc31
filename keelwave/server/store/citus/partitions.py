"""The daily partitions of agent_steps and ai_traces on Citus (migration 0015).

Three things keep them, all through Citus's own procedures, which act on every
shard of the table at once:

* **Days ahead.** A row's partition is the UTC day the server received it, so
  rows always fall in today's partition, and there is no default partition to
  fall back on: :class:`PartitionKeeper`, in every ``serve`` process, makes sure
  the next AHEAD days exist (``create_time_partitions``) at start and every
  hour. Creating a day that exists already is a no-op, so servers need no lease
  for it; two racing through different nodes make one of them skip a round.
* **Retention** drops the days received wholly before the longest period's
  cutoff less a day (``drop_old_time_partitions``), from the retention round
  (retention.py, one leased enforcer across servers), in place of TimescaleDB's
  drop_chunks and under the same rule: only when no project keeps forever.
* **Compression** converts closed days to the columnar access method
  (``alter_old_partitions_set_access_method``), once they are older than
  COMPRESS_AFTER *and* retention has deleted every row a project with a period
  could still need deleted there (:func:`compression_boundary`): columnar takes
  no DELETE, so a columnar day must hold only rows that are never deleted by
  retention. Late steps are still accepted: they are received today, into a
  heap partition. An erasure that meets a row in a columnar day (a run deleted
  by request, or by retention under a period set after the days were
  compressed) converts the days holding the rows back to heap
  (:func:`decompress_days_of`) and deletes again; the keeper compresses those
  days again on a later round.

Every DDL statement here runs with a short lock timeout, propagated to the
workers, and is retried: creating or dropping a partition locks its shard's
parent, and waiting behind a long query there would hold every ingest
transaction of that shard behind it.
"""

from __future__ import annotations

import asyncio
import logging
import random
import uuid
from collections.abc import Awaitable, Callable
from datetime import datetime, timedelta
from typing import Any, TypeVar

import psycopg
from psycopg_pool import AsyncConnectionPool

from keelwave.server.store.periodic import Periodic

log = logging.getLogger("keelwave.citus")

TABLES = ("agent_steps", "ai_traces")
INTERVAL = timedelta(days=1)
# Few days ahead: a statement that finds steps by run (the writer's duplicate checks)
# cannot prune days and is planned over every one, empty ones included (about 0.6 ms
# of a worker's planning per day measured, docs/scale-out.md). Made hourly, two days
# leave 47 hours for a server to come round.
AHEAD = timedelta(days=2)
EVERY_SECONDS = 3600.0
FIRST_AFTER_SECONDS = 5.0
# Closed days become columnar after this long (TimescaleDB's policy compresses at 7 days too).
COMPRESS_AFTER = timedelta(days=7)
# Rows arrive after their run started, give or take the agent's clock: a day received
# before a cutoff less this holds rows of runs that started before the cutoff only.
CLOCK_SLACK = timedelta(days=1)
LOCK_TIMEOUT_MS = 200
# The cluster's compression lock: a row of kw_run_locks that no project has (the nil
# project, bucket -1), on one shard; held FOR UPDATE by the server compressing.
COMPRESSION_ROW_MADE = (
    "INSERT INTO kw_run_locks (project_id, bucket) "
    "VALUES ('00000000-0000-0000-0000-000000000000', -1) ON CONFLICT DO NOTHING"
)
COMPRESSION_ROW_TAKEN = (
    "SELECT 1 FROM kw_run_locks WHERE project_id = '00000000-0000-0000-0000-000000000000' "
    "AND bucket = -1 FOR UPDATE SKIP LOCKED"
)
ATTEMPTS = 20

# What PostgreSQL says when a DELETE reaches a row stored in a columnar partition.
COLUMNAR_DELETE = "columnar_tuple_delete not implemented"
COMPRESSED_ROWS = (
    "some of these runs' steps or model calls are stored in a compressed (columnar) day, "
    "which takes no DELETE, and it was compressed again each time it was brought back; "
    "the runs before them are deleted. Send the request again"
)


def is_compressed_delete(error: psycopg.Error) -> bool:
    """Whether ``error`` is a DELETE refused by a row in a columnar day."""
    return COLUMNAR_DELETE in (error.diag.message_primary or str(error))


# Tries of a transaction that meets rows in columnar days: the keeper may compress a
# day again between bringing it back and the delete (it runs hourly), hardly twice.
COMPRESSED_ATTEMPTS = 3
T = TypeVar("T")


async def decompressing(
    pool: AsyncConnectionPool,
    project_id: uuid.UUID,
    transaction: Callable[[], Awaitable[T]],
    runs: Callable[[], Awaitable[list[Any]]],
) -> T:
    """``transaction()``, which deletes rows of the project's ``runs()``; when a DELETE
    meets one in a columnar day (and the transaction rolls back whole), the days
    holding those runs' rows go back to heap and it runs again. Elsewhere it runs once:
    only Citus raises that error."""
    for attempt in range(COMPRESSED_ATTEMPTS):
        try:
            return await transaction()
        except psycopg.errors.InternalError_ as error:
            if attempt == COMPRESSED_ATTEMPTS - 1 or not is_compressed_delete(error):
                raise
            await decompress_days_of(pool, project_id, await runs())
    raise AssertionError("unreachable")


IS_PARTITIONED = """
SELECT count(*) FROM pg_partitioned_table
WHERE partrelid = ANY(ARRAY[{}]::regclass[])
  AND EXISTS (SELECT 1 FROM pg_extension WHERE extname = 'citus')
""".format(", ".join(f"to_regclass('{table}')" for table in TABLES))
DAYS = """
SELECT count(*) FILTER (WHERE to_value::timestamptz > now()),
       count(*) FILTER (WHERE to_value::timestamptz <= %(before)s),
       count(*) FILTER (WHERE to_value::timestamptz <= %(before)s AND access_method <> 'columnar')
FROM time_partitions WHERE parent_table = %(table)s::regclass
"""
# The retained projects' periods and how far retention has deleted for each.
RETENTION = """
SELECT count(*), count(s.swept_before), min(s.swept_before)
FROM projects p LEFT JOIN retention_sweeps s ON s.project_id = p.id
WHERE p.retention_days IS NOT NULL
"""


async def is_partitioned(conn: psycopg.AsyncConnection) -> bool:
    """Whether migration 0015 partitioned this database's steps and model calls."""
    [(count,)] = await (await conn.execute(IS_PARTITIONED)).fetchall()
    return count == len(TABLES)


async def _retried(attempt: Callable[[], Awaitable[None]]) -> None:
    """``attempt()`` again, up to ATTEMPTS times, while it times out on a lock or the
    deadlock detector (of PostgreSQL or of Citus, across nodes) ends it."""
    for number in range(ATTEMPTS):
        try:
            return await attempt()
        except (psycopg.errors.LockNotAvailable, psycopg.errors.DeadlockDetected):
            if number == ATTEMPTS - 1:
                raise
            await asyncio.sleep(random.uniform(0.05, 0.25) * (1 + number // 5))


async def _ddl(pool: AsyncConnectionPool, sql: str, args: Any = None) -> None:
    """Run ``sql`` in a transaction whose locks, on the coordinator and on the workers,
    are waited for LOCK_TIMEOUT_MS at most; retried ATTEMPTS times."""

    async def attempt() -> None:
        async with pool.connection() as conn, conn.transaction():
            # SET LOCAL reaches the workers' side of the transaction only so.
            await conn.execute("SET LOCAL citus.propagate_set_commands TO 'local'")
            await conn.execute(f"SET LOCAL lock_timeout = '{LOCK_TIMEOUT_MS}ms'")
            await conn.execute("SET LOCAL timezone TO 'UTC'")  # the days are UTC days
            await conn.execute(sql, args)

    await _retried(attempt)


async def _days(pool: AsyncConnectionPool, table: str, before: datetime) -> tuple[int, int, int]:
    """(days ahead of now, days ending by ``before``, of those the ones not columnar)."""
    async with pool.connection() as conn:
        [row] = await (await conn.execute(DAYS, {"table": table, "before": before})).fetchall()
    return row


async def create_ahead(pool: AsyncConnectionPool, ahead: timedelta = AHEAD) -> int:
    """Make sure every day up to ``ahead`` from now has its partition; how many were made."""
    made = 0
    for table in TABLES:
        [(before,)] = await _rows(pool, "SELECT now() + %s", (ahead,))
        already, _, _ = await _days(pool, table, before)
        await _ddl(
            pool,
            "SELECT create_time_partitions(%s::regclass, %s, now() + %s, now())",
            (table, INTERVAL, ahead),
        )
        made += (await _days(pool, table, before))[0] - already
    return made


async def drop_before(pool: AsyncConnectionPool, older_than: datetime) -> dict[str, int]:
    """Drop the days of each table received wholly before ``older_than``; how many went."""
    dropped = {}
    for table in TABLES:
        _, old, _ = await _days(pool, table, older_than)
        if not old:
            continue
        await _ddl(pool, "CALL drop_old_time_partitions(%s::regclass, %s)", (table, older_than))
        dropped[table] = old - (await _days(pool, table, older_than))[1]
    return dropped


async def compress_before(pool: AsyncConnectionPool, older_than: datetime) -> dict[str, int]:
    """Convert the days of each table received wholly before ``older_than`` to columnar;
    how many were converted.

    The procedure commits after each day, so it runs outside a transaction; each
    day's rewrite locks that day of every shard while it copies (reads and the
    writer's duplicate checks of that shard wait for it).
    """
    converted = {}
    for table in TABLES:
        _, _, heap = await _days(pool, table, older_than)
        if not heap:
            continue

        async def convert(table: str = table) -> None:
            async with pool.connection() as conn:
                await conn.execute("SET timezone TO 'UTC'")
                await conn.execute(
                    "CALL alter_old_partitions_set_access_method(%s::regclass, %s, 'columnar')",
                    (table, older_than),
                )

        # A day's rewrite locks it on the coordinator, then shard by shard on the
        # workers; a read of many days (the verdict keeper's) locks them in another
        # order, and Citus's detector may end the rewrite. The days done are
        # committed: going again converts the rest.
        await _retried(convert)
        converted[table] = heap - (await _days(pool, table, older_than))[2]
    return converted


async def decompress_days_of(
    pool: AsyncConnectionPool, project_id: object, run_ids: list[Any] | None = None
) -> dict[str, int]:
    """Convert the columnar days holding rows of the project (of ``run_ids`` only, when
    given) back to heap, where a DELETE must reach them after all: retention under a
    period set after they were compressed, or the erasure of a run; how many. The
    keeper compresses them again on a later round."""
    runs = "" if run_ids is None else " AND run_id = ANY(%s)"
    converted: dict[str, int] = {}
    for table in TABLES:
        days = await _rows(
            pool,
            "SELECT partition::text, from_value::timestamptz, to_value::timestamptz "
            "FROM time_partitions WHERE parent_table = %s::regclass AND access_method = 'columnar' "
            "ORDER BY from_value::timestamptz",
            (table,),
        )
        for partition, start, end in days:
            [(holds,)] = await _rows(
                pool,
                f"SELECT EXISTS (SELECT 1 FROM {table} WHERE project_id = %s "
                f"AND received_at >= %s AND received_at < %s{runs})",
                (project_id, start, end) + (() if run_ids is None else (run_ids,)),
            )
            if holds:
                log.warning("Citus partitions: %s goes back to heap for a deletion", partition)
                await _rows(pool, "SELECT alter_table_set_access_method(%s, 'heap')", (partition,))
                converted[table] = converted.get(table, 0) + 1
    return converted


async def compression_boundary(
    pool: AsyncConnectionPool, compress_after: timedelta = COMPRESS_AFTER
) -> datetime | None:
    """Before when days may be made columnar now; None while none may.

    Never before retention has deleted what it will delete there: a project with a
    period deletes its runs as they pass its cutoff, which for the longest period
    is the oldest cutoff (retention_sweeps keeps each project's last one). Days
    received a CLOCK_SLACK before every retained project's last cutoff hold rows of
    deleted runs of those projects no more, only rows of projects that keep
    forever, which retention never deletes. A project that retention has not swept
    yet holds compression back altogether.
    """
    [(now,)] = await _rows(pool, "SELECT now()")
    boundary = now - compress_after
    [(retained, swept, oldest_cutoff)] = await _rows(pool, RETENTION)
    if retained:
        if swept < retained:
            return None
        boundary = min(boundary, oldest_cutoff - CLOCK_SLACK)
    return boundary


async def _rows(pool: AsyncConnectionPool, sql: str, args: Any = None) -> list[tuple]:
    async with pool.connection() as conn:
        return await (await conn.execute(sql, args)).fetchall()


class PartitionKeeper(Periodic):
    """Creates the days ahead and compresses closed ones, at start and every hour, in
    every ``serve`` on Citus. Compression is off with ``compress_after=None``."""

    def __init__(
        self,
        pool: AsyncConnectionPool,
        every: float = EVERY_SECONDS,
        compress_after: timedelta | None = COMPRESS_AFTER,
    ) -> None:
        first = min(FIRST_AFTER_SECONDS, every)
        super().__init__("Citus partitions", self.run_once, every, log, first_after=first)
        self._pool = pool
        self._compress_after = compress_after

    async def run_once(self) -> dict[str, Any]:
        async with self._pool.connection() as conn:
            if not await is_partitioned(conn):  # a schema before migration 0015
                return {}
        done: dict[str, Any] = {"created": await create_ahead(self._pool)}
        if self._compress_after is not None:
            done["compressed"] = await self._compress()
        if done["created"] or done.get("compressed"):
            log.info("Citus partitions: %s", done)
        return done

    async def _compress(self) -> dict[str, int]:
        """Compress what may be, one server of the cluster at a time: the one holding
        the row lock of COMPRESSION_ROW, whichever node it is connected to (an
        advisory lock would be the node's own). The lock is a transaction held open
        beside the conversion, which commits day by day on another connection; a
        server that dies lets go of it with its connection."""
        async with self._pool.connection() as conn:
            await conn.execute(COMPRESSION_ROW_MADE)
            async with conn.transaction():
                if await (await conn.execute(COMPRESSION_ROW_TAKEN)).fetchone() is None:
                    return {}  # another server is compressing
                boundary = await compression_boundary(self._pool, self._compress_after)
                return {} if boundary is None else await compress_before(self._pool, boundary)
