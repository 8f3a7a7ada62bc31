"""How runs end: finished by the SDK, or timed out by the reaper when they go silent.

A run that has neither finished nor shown activity (a step or a model call)
for ``stall_after_seconds`` is *stalled*: that is computed when it is read.
One silent for ``timeout_after_seconds`` is finished by the reaper with
``termination_reason = timeout`` and ``ended_at`` at its last activity, so its
duration is how long it really worked. Every ``keelwave serve`` process runs a
reaper; they share the work safely through the run locks of writes.py.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import psycopg
from psycopg_pool import AsyncConnectionPool, PoolTimeout

from keelwave.server import writes

log = logging.getLogger("keelwave.lifecycle")


@dataclass(frozen=True, slots=True)
class Finish:
    termination_reason: str
    ended_at: datetime
    loop_detected: bool | None = None
    loop_step_index: int | None = None
    output: str | None = None
    error: str | None = None


_OLD = """
SELECT agent_name, started_at, termination_reason, loop_detected, duration_ms
FROM agent_runs WHERE project_id = %s AND id = %s FOR UPDATE
"""

_FINISH = """
UPDATE agent_runs SET
    ended_at = %(ended_at)s,
    termination_reason = %(reason)s,
    loop_detected = coalesce(%(loop_detected)s, loop_detected),
    loop_step_index = coalesce(%(loop_step_index)s, loop_step_index),
    output = coalesce(%(output)s::json, output),
    error = coalesce(%(error)s, error),
    duration_ms = greatest(0, extract(epoch FROM %(ended_at)s - started_at) * 1000)
WHERE project_id = %(project_id)s AND id = %(run_id)s
RETURNING termination_reason, loop_detected, duration_ms
"""


async def finish_run(
    pool: AsyncConnectionPool, project_id: str, run_id: uuid.UUID, finish: Finish
) -> bool:
    """Finish (or re-finish) a run and move it between rollup counters; False if unknown."""
    return not await finish_runs(pool, project_id, [(run_id, finish)])


async def finish_runs(
    pool: AsyncConnectionPool, project_id: str, finishes: list[tuple[uuid.UUID, Finish]]
) -> list[uuid.UUID]:
    """Finish several runs in one transaction; return the ids that are not this project's runs."""
    unknown = []
    async with pool.connection() as conn, conn.transaction(), conn.cursor() as cur:
        keys = writes.lock_keys({run_id for run_id, _ in finishes})
        await cur.execute(writes.LOCK_SQL, (writes.LOCK_NAMESPACE, keys))
        for run_id, finish in finishes:
            old = await (await cur.execute(_OLD, (project_id, run_id))).fetchone()
            if old is None:
                unknown.append(run_id)
                continue
            new = await (
                await cur.execute(
                    _FINISH,
                    {
                        "ended_at": finish.ended_at,
                        "reason": finish.termination_reason,
                        "loop_detected": finish.loop_detected,
                        "loop_step_index": finish.loop_step_index,
                        "output": finish.output,
                        "error": finish.error,
                        "project_id": project_id,
                        "run_id": run_id,
                    },
                )
            ).fetchone()
            await cur.execute(writes.FINISH_DELTA, _delta(project_id, old, new))
        await cur.execute(writes.MERGE_ROLLUPS)
    return unknown


def _delta(project_id: Any, old: tuple, new: tuple) -> dict:
    agent_name, started_at, old_reason, old_loop, old_duration = old
    new_reason, new_loop, new_duration = new
    return {
        "project_id": project_id,
        "agent_name": agent_name,
        "started_at": started_at,
        "old_reason": old_reason,
        "old_loop": old_loop,
        "old_duration": old_duration if old_reason is not None else None,
        "new_reason": new_reason,
        "new_loop": new_loop,
        "new_duration": new_duration,
    }


_IDLE = """
SELECT project_id, id FROM agent_runs
WHERE ended_at IS NULL AND last_activity_at < now() - make_interval(secs => %s)
ORDER BY last_activity_at LIMIT %s
"""

_TIME_OUT = """
UPDATE agent_runs SET
    ended_at = last_activity_at,
    termination_reason = 'timeout',
    duration_ms = greatest(0, extract(epoch FROM last_activity_at - started_at) * 1000)
WHERE project_id = %s AND id = %s AND ended_at IS NULL
  AND last_activity_at < now() - make_interval(secs => %s)
RETURNING agent_name, started_at, loop_detected, duration_ms
"""


async def time_out_idle_runs(
    pool: AsyncConnectionPool, timeout_after: float, limit: int = 500
) -> int:
    """Finish runs silent for longer than ``timeout_after`` seconds; return how many."""
    async with pool.connection() as conn:
        idle = await (await conn.execute(_IDLE, (timeout_after, limit))).fetchall()
        if not idle:
            return 0
        async with conn.transaction(), conn.cursor() as cur:
            keys = writes.lock_keys({run_id for _, run_id in idle})
            await cur.execute(writes.LOCK_SQL, (writes.LOCK_NAMESPACE, keys))
            timed_out = 0
            for project_id, run_id in idle:
                row = await (
                    await cur.execute(_TIME_OUT, (project_id, run_id, timeout_after))
                ).fetchone()
                if row is None:
                    continue  # it woke up, or another server got to it first
                agent_name, started_at, loop, duration = row
                old = (agent_name, started_at, None, loop, None)
                await cur.execute(
                    writes.FINISH_DELTA, _delta(project_id, old, ("timeout", loop, duration))
                )
                timed_out += 1
            await cur.execute(writes.MERGE_ROLLUPS)
    if timed_out:
        log.info("timed out %d idle runs", timed_out)
    return timed_out


class Reaper:
    """Runs :func:`time_out_idle_runs` every few seconds inside ``serve``."""

    def __init__(self, pool: AsyncConnectionPool, timeout_after: float, stall_after: float):
        self._pool = pool
        self._timeout_after = timeout_after
        self._interval = min(60.0, max(0.5, min(timeout_after, stall_after) / 4))
        self._task: asyncio.Task | None = None

    def start(self) -> None:
        self._task = asyncio.create_task(self._run(), name="keelwave-reaper")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            try:
                await self._task
            except asyncio.CancelledError:
                pass

    async def _run(self) -> None:
        while True:
            await asyncio.sleep(self._interval)
            try:
                await time_out_idle_runs(self._pool, self._timeout_after)
            except (psycopg.Error, PoolTimeout, OSError) as error:
                log.debug("reaper skipped a round: %s", error)
            except Exception:  # never let a bug stop the reaper for good
                log.exception("reaper failed")
