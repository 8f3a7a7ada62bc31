"""On TimescaleDB: make sure compression happens, whether or not its background jobs run.

Migrations give agent_steps and ai_traces a compression policy (chunks older
than seven days), which TimescaleDB's background workers carry out. Those
workers can fail for reasons outside keelwave: on some PostgreSQL and
TimescaleDB builds every background job fails with "cannot drop portal"
while the same job run in the foreground works; ``max_background_workers``
may be 0; a job may have been paused. Compression would then silently never
happen, and the history would stay uncompressed on disk.

So every ``serve`` process checks now and then (one at a time, by an advisory
lock) for chunks that the policy should have compressed well before now. If
there are any, it says so once, with the job's last error, and runs the
policy's job itself (``CALL run_job``), in the foreground. On plain PostgreSQL
this does nothing.
"""

from __future__ import annotations

import logging

import psycopg
from psycopg_pool import AsyncConnectionPool

from keelwave.server.store.periodic import Periodic

log = logging.getLogger("keelwave.timescaledb")

MAINTENANCE_LOCK = (0x6B77, -1)  # (namespace, key) of pg_try_advisory_lock: one runner
TABLES = ("agent_steps", "ai_traces")
CHECK_EVERY_SECONDS = 600.0

# Compression jobs with chunks overdue: older than the policy's compress_after by
# more than one schedule interval and an hour, so a job that merely has not come
# round yet is left to do its work.
OVERDUE = """
SELECT j.job_id, j.hypertable_name, count(c.chunk_name) AS overdue,
       s.last_run_status,
       (SELECT e.err_message FROM timescaledb_information.job_errors e
        WHERE e.job_id = j.job_id ORDER BY e.finish_time DESC NULLS LAST LIMIT 1) AS last_error
FROM timescaledb_information.jobs j
JOIN timescaledb_information.chunks c
  ON c.hypertable_schema = j.hypertable_schema AND c.hypertable_name = j.hypertable_name
 AND NOT c.is_compressed
 AND c.range_end < now() - (j.config ->> 'compress_after')::interval
                         - j.schedule_interval - interval '1 hour'
LEFT JOIN timescaledb_information.job_stats s ON s.job_id = j.job_id
WHERE j.proc_name = 'policy_compression' AND j.hypertable_schema = current_schema()
  AND j.hypertable_name = ANY(%s)
GROUP BY j.job_id, j.hypertable_name, s.last_run_status
"""


async def has_timescaledb(conn: psycopg.AsyncConnection) -> bool:
    cursor = await conn.execute("SELECT 1 FROM pg_extension WHERE extname = 'timescaledb'")
    return await cursor.fetchone() is not None


async def compress_overdue(conn: psycopg.AsyncConnection, said: set[int] | None = None) -> int:
    """Run, in the foreground, every compression job of keelwave's tables that is behind;
    return how many ran. ``conn`` must be in autocommit mode (jobs commit as they go)."""
    if not await has_timescaledb(conn):
        return 0
    said = set() if said is None else said
    cursor = await conn.execute(OVERDUE, (list(TABLES),))
    ran = 0
    for job_id, table, overdue, status, error in await cursor.fetchall():
        if job_id not in said:
            said.add(job_id)
            log.warning(
                "TimescaleDB has not compressed %d chunk(s) of %s that its policy should have "
                "(job %d, last run: %s%s); keelwave runs the job itself from now on",
                overdue, table, job_id, status or "never",
                f", error: {error}" if error else "",
            )  # fmt: skip
        await conn.execute(f"CALL run_job({int(job_id)})")
        ran += 1
    return ran


class Maintenance(Periodic):
    """Runs :func:`compress_overdue` every CHECK_EVERY_SECONDS inside ``serve``."""

    def __init__(self, pool: AsyncConnectionPool, every: float = CHECK_EVERY_SECONDS) -> None:
        super().__init__("TimescaleDB maintenance", self.run_once, every, log, min(60.0, every))
        self._pool = pool
        self._said: set[int] = set()

    async def run_once(self) -> int:
        async with self._pool.connection() as conn:
            cursor = await conn.execute("SELECT pg_try_advisory_lock(%s, %s)", MAINTENANCE_LOCK)
            if not (await cursor.fetchone())[0]:
                return 0  # another server is at it
            try:
                return await compress_overdue(conn, self._said)
            finally:
                await conn.execute("SELECT pg_advisory_unlock(%s, %s)", MAINTENANCE_LOCK)
