"""The reaper: runs that went silent are finished with ``timeout``.

A run that has neither finished nor shown activity (a step or a model call)
for ``stall_after_seconds`` is *stalled*: that is computed when it is read.
One silent for ``timeout_after_seconds`` is finished by the reaper with
``termination_reason = timeout`` and ``ended_at`` at its last activity, so its
duration is how long it really worked. Every ``keelwave serve`` process runs a
reaper; they share the work safely through the run locks of statements.py.
"""

from __future__ import annotations

import logging

from psycopg_pool import AsyncConnectionPool

from keelwave.server.store import statements
from keelwave.server.store.lifecycle import stage_tool_calls
from keelwave.server.store.periodic import Periodic

log = logging.getLogger("keelwave.lifecycle")


_IDLE = """
SELECT project_id, id FROM agent_runs
WHERE ended_at IS NULL AND last_activity_at < now() - make_interval(secs => %s)
ORDER BY last_activity_at LIMIT %s
"""


async def time_out_idle_runs(
    pool: AsyncConnectionPool, timeout_after: float, limit: int = 500
) -> int:
    """Finish runs silent for longer than ``timeout_after`` seconds; return how many."""
    async with pool.connection() as conn:
        idle = await (await conn.execute(_IDLE, (timeout_after, limit))).fetchall()
        if not idle:
            return 0
        async with statements.transaction(conn), conn.cursor() as cur:
            await statements.lock_runs(cur, {run_id.int for _, run_id in idle})
            # Runs that woke up meanwhile, or that another server timed out, are skipped.
            await cur.execute(
                statements.TIME_OUT_RUNS,
                {
                    "project_ids": [project for project, _ in idle],
                    "ids": [run_id for _, run_id in idle],
                    "timeout": timeout_after,
                },
            )
            timed_out = await cur.fetchall()
            await stage_tool_calls(cur, timed_out)
            await cur.execute(statements.MERGE_ROLLUPS)
    if timed_out:
        log.info("timed out %d idle runs", len(timed_out))
    return len(timed_out)


class Reaper(Periodic):
    """Runs :func:`time_out_idle_runs` every few seconds inside ``serve``."""

    def __init__(self, pool: AsyncConnectionPool, timeout_after: float, stall_after: float):
        every = min(60.0, max(0.5, min(timeout_after, stall_after) / 4))
        super().__init__("reaper", lambda: time_out_idle_runs(pool, timeout_after), every, log)
