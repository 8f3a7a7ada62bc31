"""How a run ends when its agent finishes it: one UPDATE per run, in one transaction.

Finishing moves the run between the hourly rollup counters, and counts its
tool calls once, when it first finishes. Runs that go silent are finished by
the reaper instead (reaper.py), through the same rollup staging.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import psycopg
from psycopg_pool import AsyncConnectionPool

from keelwave.server.store import statements, tool_rollups


@dataclass(frozen=True, slots=True)
class Finish:
    termination_reason: str
    ended_at: datetime
    loop_detected: bool | None = None
    loop_step_index: int | None = None
    output: str | None = None
    error: str | None = None
    error_traceback: str | None = None


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
    async with pool.connection() as conn, statements.transaction(conn), conn.cursor() as cur:
        await statements.lock_runs(cur, {run_id.int for run_id, _ in finishes})
        for round_ in _rounds(finishes):
            await cur.execute(statements.FINISH_RUNS, _columns(project_id, round_))
            for run_id, was_unfinished in await cur.fetchall():
                found.add(run_id)
                if was_unfinished:  # a run's tool calls count once, when it first finishes
                    newly_finished.append(run_id)
        await stage_tool_calls(cur, [(project_id, run_id) for run_id in newly_finished])
        await cur.execute(statements.MERGE_ROLLUPS)
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
        "tracebacks": [finish.error_traceback for _, finish in finishes],
    }


async def stage_tool_calls(cur: psycopg.AsyncCursor, runs: list[tuple[Any, uuid.UUID]]) -> None:
    if runs:
        await cur.execute(
            tool_rollups.STAGE_FINISHED,
            {"project_ids": [project for project, _ in runs], "run_ids": [run for _, run in runs]},
        )
