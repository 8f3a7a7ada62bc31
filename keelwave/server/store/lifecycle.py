"""How a run ends when its agent finishes it: one UPDATE per run, in one transaction.

Finishing moves the run between the hourly rollup counters, and counts its
tool calls once, when it first finishes. Runs that go silent are finished by
the reaper instead (reaper.py), through the same rollup staging.

The finish routes hand finishes to the ingest writer (writer.py), whose
transactions carry them with other requests' runs, steps and model calls
(:func:`finish_row`, statements.FINISH_STAGED): an agent-shaped load finishes
a run every few requests, and a transaction of their own cost each finish a
commit, rollup merges on rows every finish touches, and pool round trips.
Where the writer's lanes take no finishes (Citus), and for imports, the
finisher here commits them on the pool, group-committed in the same way: the
finishes that arrive while one transaction commits wait for it and then go
together in the next, answered when it commits.
"""

from __future__ import annotations

import asyncio
import uuid
import weakref
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


def finish_row(project_uuid: uuid.UUID, run_id: uuid.UUID, finish: Finish) -> tuple:
    """A finish as the ingest writer takes it (statements.FINISH_COLUMNS, after round)."""
    output = None if finish.output is None else finish.output.encode()  # json as bytes
    return (
        project_uuid, run_id, finish.ended_at, finish.termination_reason,
        finish.loop_detected, finish.loop_step_index, output, finish.error,
        finish.error_traceback,
    )  # fmt: skip


async def finish_runs(
    pool: AsyncConnectionPool, project_id: str, finishes: list[tuple[uuid.UUID, Finish]]
) -> list[uuid.UUID]:
    """Finish several runs, committed before this returns; return the ids that are not
    this project's runs.

    A run finished twice in one call is finished twice, in order, as if by two calls;
    so are calls that go in one transaction.
    """
    finisher = _FINISHERS.get(pool)
    if finisher is None:
        finisher = _FINISHERS[pool] = _Finisher(pool)
    return await finisher.finish(project_id, finishes)


Submission = tuple[str, list[tuple[uuid.UUID, Finish]], asyncio.Future]


class _Finisher:
    """The group commit of finishes for one pool: one transaction in flight, and
    what arrives meanwhile goes in the next."""

    def __init__(self, pool: AsyncConnectionPool) -> None:
        self._pool = pool
        self._waiting: list[Submission] = []
        self._committing: asyncio.Task | None = None

    async def finish(
        self, project_id: str, finishes: list[tuple[uuid.UUID, Finish]]
    ) -> list[uuid.UUID]:
        done = asyncio.get_running_loop().create_future()
        self._waiting.append((project_id, finishes, done))
        if self._committing is None or self._committing.done():
            # A task of its own: a caller that goes away (a client hanging up) must
            # not take the others' transaction with it.
            self._committing = asyncio.create_task(self._commit_all(), name="keelwave-finishes")
        return await asyncio.shield(done)

    async def _commit_all(self) -> None:
        while self._waiting:
            batch, self._waiting = self._waiting, []
            try:
                await self._commit(batch)
            except (psycopg.DataError, psycopg.IntegrityError, psycopg.ProgrammingError) as error:
                if len(batch) == 1:
                    _settle(batch, error)
                    continue
                # Something in one submission was refused: each alone, so that the
                # error is that submission's only.
                for submission in batch:
                    await self._commit_alone(submission)
            except Exception as error:  # the database is down, the pool timed out…
                _settle(batch, error)
            except BaseException as error:  # cancelled: the server is stopping
                _settle(batch + self._waiting, error)
                raise

    async def _commit_alone(self, submission: Submission) -> None:
        try:
            await self._commit([submission])
        except Exception as error:
            _settle([submission], error)

    async def _commit(self, batch: list[Submission]) -> None:
        by_project: dict[str, list[tuple[uuid.UUID, Finish]]] = {}
        for project_id, finishes, _ in batch:
            by_project.setdefault(project_id, []).extend(finishes)
        found: dict[str, set[uuid.UUID]] = {}
        async with (
            self._pool.connection() as conn,
            statements.transaction(conn),
            conn.cursor() as cur,
        ):
            run_ids = {run_id.int for finishes in by_project.values() for run_id, _ in finishes}
            await statements.lock_runs(cur, run_ids)
            newly_finished: list[tuple[str, uuid.UUID]] = []
            for project_id, finishes in by_project.items():
                found[project_id] = set()
                for round_ in _rounds(finishes):
                    await cur.execute(statements.FINISH_RUNS, _columns(project_id, round_))
                    for run_id, was_unfinished in await cur.fetchall():
                        found[project_id].add(run_id)
                        if was_unfinished:  # its tool calls count once, when it first finishes
                            newly_finished.append((project_id, run_id))
            await stage_tool_calls(cur, newly_finished)
            await cur.execute(statements.MERGE_ROLLUPS)
        for project_id, finishes, done in batch:
            unknown = (run_id for run_id, _ in finishes if run_id not in found[project_id])
            if not done.done():
                done.set_result(list(dict.fromkeys(unknown)))


def _settle(batch: list[Submission], error: BaseException) -> None:
    for *_, done in batch:
        if not done.done():
            done.set_exception(error)


# One finisher per pool, gone with it.
_FINISHERS: weakref.WeakKeyDictionary[AsyncConnectionPool, _Finisher] = weakref.WeakKeyDictionary()


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
