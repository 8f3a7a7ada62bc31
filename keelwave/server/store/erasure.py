"""Deleting runs with everything that is about them, keeping counters and rollups exact.

What goes with a run: its steps, its model calls, the alert events about it,
its OTLP projection (otlp_runs) and, once no run of its trace is left, the
trace's stored spans. Deletion by request (lifecycle routes) and retention
(retention.py) both come through :func:`erase`.

Runs go in batches, each one short transaction that follows statements.py's
rules: it takes the trace locks of the batch's OTLP traces (before run locks,
as traces.py does), then the runs' locks, stages -1 times each run's share of
every rollup (traces.STAGE_SHARES: the run, duration, tool and verdict
counters, read from the stored rows), deletes the rows, and merges the
rollups, dropping the rollup rows it emptied (an agent or tool name is data
too). A batch holds at most FINE_LOCKS_UP_TO runs, so it locks run by run
and ingest of other runs never waits for it, and at most MAX_ROWS steps and
model calls, so a transaction stays short and, on TimescaleDB, within the
rows one transaction may decompress (100,000 by default).

A step or model call that arrives for a run after it was deleted is stored
as ingest stores any step ahead of its run; retention's sweep removes such
rows once they are past the period.
"""

from __future__ import annotations

import uuid
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from psycopg_pool import AsyncConnectionPool

from keelwave.server.store import daily_rollups, pending_tools, rollup_shards, statements, traces
from keelwave.server.store.citus import keys as citus_keys
from keelwave.server.store.citus import partitions as citus_partitions

MAX_RUNS = statements.FINE_LOCKS_UP_TO  # per transaction: locked one by one
MAX_ROWS = 50_000  # steps and model calls per transaction
PAGE = 5_000  # runs read per query when deleting by a selector


@dataclass(slots=True)
class Erased:
    """How much was deleted."""

    runs: int = 0
    steps: int = 0
    model_calls: int = 0

    def add(self, other: Erased) -> None:
        self.runs += other.runs
        self.steps += other.steps
        self.model_calls += other.model_calls

    def as_dict(self) -> dict[str, int]:
        return {"runs": self.runs, "steps": self.steps, "model_calls": self.model_calls}


# (id, started_at or None when only steps of it are stored, its steps + model calls)
RunRef = tuple[uuid.UUID, datetime | None, int]
# Called after each batch (retention renews its lease and pauses there).
AfterBatch = Callable[[], Awaitable[object]]

_RUN_REFS = "r.id, r.started_at, r.step_count + r.llm_calls"

# A run and, with children, every run under it (UNION: a cycle of parents ends).
TREE = f"""
WITH RECURSIVE tree AS (
    SELECT id FROM agent_runs WHERE project_id = %(project)s AND id = %(run)s
    UNION
    SELECT r.id FROM agent_runs r JOIN tree t
      ON r.project_id = %(project)s AND r.parent_run_id = t.id AND %(children)s
)
SELECT {_RUN_REFS} FROM agent_runs r
WHERE r.project_id = %(project)s AND r.id IN (SELECT id FROM tree)
ORDER BY r.started_at, r.id
"""
# A run id with steps or model calls stored but no run row (they came first).
RUN_ROWS_EXIST = """
SELECT EXISTS (SELECT 1 FROM agent_steps WHERE project_id = %(p)s AND run_id = %(r)s)
    OR EXISTS (SELECT 1 FROM ai_traces WHERE project_id = %(p)s AND run_id = %(r)s)
"""

TRACES_OF = "SELECT DISTINCT trace_id FROM otlp_runs WHERE project_id = %s AND run_id = ANY(%s)"
LOCK_TRACES = "SELECT pg_advisory_xact_lock(%s, key) FROM unnest(%s::int[]) AS key"
# Plain conditions on (project_id, run_id): on TimescaleDB these are the compressed
# chunks' segment-by columns, so only the runs' own segments are touched.
DELETE_STEPS = "DELETE FROM agent_steps WHERE project_id = %s AND run_id = ANY(%s)"
DELETE_CALLS = "DELETE FROM ai_traces WHERE project_id = %s AND run_id = ANY(%s)"
DELETE_ALERT_EVENTS = "DELETE FROM alert_events WHERE project_id = %s AND run_id = ANY(%s)"
# The statement sees otlp_runs as it was before the CTE's delete: a trace keeps its
# spans while a run that is not being deleted still comes from it.
DELETE_OTLP = """
WITH gone AS (
    DELETE FROM otlp_runs WHERE project_id = %(project)s AND run_id = ANY(%(ids)s)
    RETURNING trace_id
)
DELETE FROM otlp_spans s
WHERE s.project_id = %(project)s AND s.trace_id IN (SELECT trace_id FROM gone)
  AND NOT EXISTS (SELECT 1 FROM otlp_runs o WHERE o.project_id = %(project)s
                  AND o.trace_id = s.trace_id AND o.run_id <> ALL(%(ids)s))
"""
DELETE_RUNS = "DELETE FROM agent_runs WHERE project_id = %s AND id = ANY(%s)"
# On Citus (docs/scale-out.md): alert_events is a reference table with a foreign key,
# and Citus modifies one only over the one connection per node that the transaction's
# reads of the distributed tables used, which it then must not spread over several.
# Elsewhere an unknown dotted setting is a placeholder that changes nothing.
SEQUENTIAL_ON_CITUS = "SET LOCAL citus.multi_shard_modify_mode TO 'sequential'"


# agent_run_rollups and agent_tool_rollups are in shards (rollup_shards.py): a run's
# share is spread over them and only a key's sum over its shards means something. So
# the erasure takes the runs' share out of its own shard, as every writer adds to its
# own, and then deletes all of a key's rows once their sum counts nothing (a shard
# left below zero beside another above it is harmless: readers sum). Its DELETE
# waits for other shards' writers, who hold one shard's rows each and never wait for
# it; two erasures of one project could wait for each other's shards, so they take
# turns (ERASURE_TURNS), which costs nothing: erasures are rare and short.
ERASURE_TURNS = 0x6B7A  # pg_advisory_xact_lock(int, int) namespace: one project's erasures
TAKE_TURN = "SELECT pg_advisory_xact_lock(%s, hashtext(%s::text))"


def _drop_emptied(table: str, stage: str, keys: tuple[str, ...], empty: str, sharded: bool) -> str:
    """Delete the rows of ``table`` this transaction staged changes for and emptied."""
    staged = f"SELECT DISTINCT {', '.join(keys)} FROM {stage}"
    return rollup_shards.delete_emptied(table, keys, staged, empty, sharded)


# statements.MERGE_ROLLUPS, and then the emptied rows go. A row whose runs (or calls)
# are 0 counts nothing else: a rollup counts nothing but runs and their contents (its
# cost may be a float residue of the subtraction, not exactly 0).
MERGE_ROLLUPS = ";\n".join(
    (
        statements.MERGE_RUN_ROLLUPS,
        statements.MERGE_DURATION_ROLLUPS,
        statements.MERGE_TOOL_ROLLUPS,
        _drop_emptied(
            "agent_run_rollups",
            "kw_stage_rollups",
            ("project_id", "bucket", "agent_name"),
            "runs",
            sharded=True,
        ),
        _drop_emptied(
            "agent_duration_rollups",
            "kw_stage_durations",
            ("project_id", "bucket", "agent_name", "duration_bin"),
            "runs",
            sharded=False,
        ),
        _drop_emptied(
            "project_duration_rollups",
            "kw_stage_durations",
            ("project_id", "bucket", "duration_bin"),
            "runs",
            sharded=True,
        ),
        _drop_emptied(
            "agent_tool_rollups",
            "kw_stage_tools",
            ("project_id", "bucket", "tool_name", "duration_bin"),
            "calls",
            sharded=True,
        ),
        *(daily_rollups.drop_emptied(table) for table in daily_rollups.ROLLUPS),
        *statements.EMPTY_ROLLUP_STAGES,
    )
)


def batches(runs: list[RunRef], max_runs: int, max_rows: int) -> Iterator[list[RunRef]]:
    """Split ``runs`` into batches of at most ``max_runs`` runs and ``max_rows`` rows
    (a run with more rows than that is a batch of its own)."""
    batch: list[RunRef] = []
    rows = 0
    for run in runs:
        if batch and (len(batch) >= max_runs or rows + run[2] > max_rows):
            yield batch
            batch, rows = [], 0
        batch.append(run)
        rows += run[2]
    if batch:
        yield batch


async def erase(
    pool: AsyncConnectionPool,
    project_id: str,
    runs: list[RunRef],
    rollups_before: datetime | None = None,
    after_batch: AfterBatch | None = None,
) -> Erased:
    """Delete ``runs`` of a project with everything about them, batch by batch.

    Runs that started before ``rollups_before`` are not taken out of the rollups:
    retention deletes those rollup rows whole (their hours are past the period).
    """
    erased = Erased()
    for batch in batches(runs, MAX_RUNS, MAX_ROWS):
        erased.add(await _erase_batch(pool, project_id, batch, rollups_before))
        if after_batch is not None:
            await after_batch()
    return erased


async def erase_where(
    pool: AsyncConnectionPool,
    project_id: str,
    where: str,
    args: dict[str, Any],
    rollups_before: datetime | None = None,
    after_batch: AfterBatch | None = None,
) -> Erased:
    """Delete the project's runs that match ``where`` (SQL over agent_runs r), a page
    at a time in start order, so memory stays bounded however many match."""
    select = f"SELECT {_RUN_REFS} FROM agent_runs r WHERE r.project_id = %(project)s AND ({where})"
    order = " ORDER BY r.started_at, r.id LIMIT %(page)s"
    erased = Erased()
    after = ""
    args = {**args, "project": project_id, "page": PAGE}
    while True:
        async with pool.connection() as conn:
            page = await (await conn.execute(select + after + order, args)).fetchall()
        if not page:
            return erased
        erased.add(await erase(pool, project_id, page, rollups_before, after_batch))
        # Keyset pagination: the next page starts after the last run of this one.
        after = " AND (r.started_at, r.id) > (%(after_at)s, %(after_id)s)"
        args.update(after_at=page[-1][1], after_id=page[-1][0])
        if len(page) < PAGE:
            return erased


async def erase_run(
    pool: AsyncConnectionPool, project_id: str, run_id: uuid.UUID, children: bool
) -> Erased | None:
    """Delete one run (and, with ``children``, every run under it); None if the
    project has no such run."""
    async with pool.connection() as conn:
        args = {"project": project_id, "run": run_id, "children": children}
        runs: list[RunRef] = await (await conn.execute(TREE, args)).fetchall()
        if not runs:
            # Steps or model calls of a run whose start never came: they go too.
            cursor = await conn.execute(RUN_ROWS_EXIST, {"p": project_id, "r": run_id})
            if not (await cursor.fetchone())[0]:
                return None
            runs = [(run_id, None, 0)]
    return await erase(pool, project_id, runs)


async def _erase_batch(
    pool: AsyncConnectionPool,
    project_id: str,
    batch: list[RunRef],
    rollups_before: datetime | None,
) -> Erased:
    """Delete one batch; on Citus, a batch with rows in a columnar day (which takes no
    DELETE) brings those days back to heap and goes again (its transaction rolled back
    whole the first time)."""

    async def runs() -> list[uuid.UUID]:
        return [run_id for run_id, _, _ in batch]

    return await citus_partitions.decompressing(
        pool,
        uuid.UUID(str(project_id)),
        lambda: _erase_batch_once(pool, project_id, batch, rollups_before),
        runs,
    )


async def _erase_batch_once(
    pool: AsyncConnectionPool,
    project_id: str,
    batch: list[RunRef],
    rollups_before: datetime | None,
) -> Erased:
    ids = [run_id for run_id, _, _ in batch]
    staged = [
        run_id
        for run_id, started_at, _ in batch
        if started_at is not None and (rollups_before is None or started_at >= rollups_before)
    ]
    project = uuid.UUID(str(project_id))
    async with pool.connection() as conn, statements.transaction(conn), conn.cursor() as cur:
        await cur.execute(SEQUENTIAL_ON_CITUS)
        await cur.execute(TAKE_TURN, (ERASURE_TURNS, project))
        await cur.execute(TRACES_OF, (project, ids))
        trace_ids = [bytes(trace) for (trace,) in await cur.fetchall()]
        if trace_ids:  # an export of one of them waits, and then sees the runs gone
            keys = sorted({traces.trace_lock_key(project, trace) for trace in trace_ids})
            await cur.execute(LOCK_TRACES, (traces.TRACE_LOCKS, keys))
        await statements.lock_runs(cur, {run_id.int for run_id in ids})
        if staged:
            await cur.execute(
                traces.STAGE_SHARES, {"project_id": project, "ids": staged, "sign": -1}
            )
        erased = Erased()
        await cur.execute(DELETE_STEPS, (project, ids))
        erased.steps = cur.rowcount
        await cur.execute(DELETE_CALLS, (project, ids))
        erased.model_calls = cur.rowcount
        if await citus_keys.in_use(conn):
            for sql in citus_keys.DELETE_OF_RUNS:
                await cur.execute(sql, (project, ids))
        await cur.execute(DELETE_ALERT_EVENTS, (project, ids))
        if trace_ids:
            await cur.execute(DELETE_OTLP, {"project": project, "ids": ids})
        await cur.execute(DELETE_RUNS, (project, ids))
        erased.runs = cur.rowcount
        if not await citus_keys.in_use(conn):
            # Tool calls of these runs may still be pending (pending_tools.py): taken in
            # with the runs' share out, the keys they leave empty are deleted.
            await cur.execute(pending_tools.TAKE)
        await cur.execute(MERGE_ROLLUPS)
    return erased
