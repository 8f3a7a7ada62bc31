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

from keelwave.server import tool_rollups, writes

log = logging.getLogger("keelwave.lifecycle")


@dataclass(frozen=True, slots=True)
class Finish:
    termination_reason: str
    ended_at: datetime
    loop_detected: bool | None = None
    loop_step_index: int | None = None
    output: str | None = None
    error: str | None = None


async def finish_run(
    pool: AsyncConnectionPool, project_id: str, run_id: uuid.UUID, finish: Finish
) -> bool:
    """Finish (or re-finish) a run and move it between rollup counters; False if unknown."""
    return not await finish_runs(pool, project_id, [(run_id, finish)])


async def finish_runs(
    pool: AsyncConnectionPool, project_id: str, finishes: list[tuple[uuid.UUID, Finish]]
) -> list[uuid.UUID]:
    """Finish several runs in one transaction; return the ids that are not this project's runs.

    A run finished twice in one call is finished twice, in order, as if by two calls.
    """
    found: set[uuid.UUID] = set()
    newly_finished: list[uuid.UUID] = []
    async with pool.connection() as conn, conn.transaction(), conn.cursor() as cur:
        await writes.lock_runs(cur, {run_id.int for run_id, _ in finishes})
        for round_ in _rounds(finishes):
            await cur.execute(writes.FINISH_RUNS, _columns(project_id, round_))
            for run_id, was_unfinished in await cur.fetchall():
                found.add(run_id)
                if was_unfinished:  # a run's tool calls count once, when it first finishes
                    newly_finished.append(run_id)
        await _stage_tool_calls(cur, [(project_id, run_id) for run_id in newly_finished])
        await cur.execute(writes.MERGE_ROLLUPS)
    return list(dict.fromkeys(run_id for run_id, _ in finishes if run_id not in found))


def _rounds(finishes: list[tuple[uuid.UUID, Finish]]) -> list[list[tuple[uuid.UUID, Finish]]]:
    """Split finishes so that no round holds a run twice; the k-th finish of a run is in round k."""
    rounds: list[list[tuple[uuid.UUID, Finish]]] = []
    seen: dict[uuid.UUID, int] = {}
    for run_id, finish in finishes:
        position = seen.get(run_id, 0)
        seen[run_id] = position + 1
        if position == len(rounds):
            rounds.append([])
        rounds[position].append((run_id, finish))
    return rounds


def _columns(project_id: str, finishes: list[tuple[uuid.UUID, Finish]]) -> dict[str, Any]:
    return {
        "project_id": project_id,
        "ids": [run_id for run_id, _ in finishes],
        "ended_at": [finish.ended_at for _, finish in finishes],
        "reasons": [finish.termination_reason for _, finish in finishes],
        "loops": [finish.loop_detected for _, finish in finishes],
        "loop_steps": [finish.loop_step_index for _, finish in finishes],
        "outputs": [finish.output for _, finish in finishes],
        "errors": [finish.error for _, finish in finishes],
    }


async def _stage_tool_calls(cur: psycopg.AsyncCursor, runs: list[tuple[Any, uuid.UUID]]) -> None:
    if runs:
        await cur.execute(
            tool_rollups.STAGE_FINISHED,
            {"project_ids": [project for project, _ in runs], "run_ids": [run for _, run in runs]},
        )


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
        async with conn.transaction(), conn.cursor() as cur:
            await writes.lock_runs(cur, {run_id.int for _, run_id in idle})
            # Runs that woke up meanwhile, or that another server timed out, are skipped.
            await cur.execute(
                writes.TIME_OUT_RUNS,
                {
                    "project_ids": [project for project, _ in idle],
                    "ids": [run_id for _, run_id in idle],
                    "timeout": timeout_after,
                },
            )
            timed_out = await cur.fetchall()
            await _stage_tool_calls(cur, timed_out)
            await cur.execute(writes.MERGE_ROLLUPS)
    if timed_out:
        log.info("timed out %d idle runs", len(timed_out))
    return len(timed_out)


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
