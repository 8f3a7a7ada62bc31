"""Retention: ``serve`` deletes, per project, what is older than its ``retention_days``.

One enforcer at a time across every worker and server: a round first claims
the lease in ``retention_enforcement`` (a row, renewed after every batch, so a
server that dies mid-round hands over after LEASE_SECONDS), and skips if
another server finished a round within the last half interval. A round reads
each retained project's cutoff (now minus its period, by run start) and:

1. On TimescaleDB, when no project keeps forever, drops the chunks of
   agent_steps and ai_traces that lie wholly before the *longest* period's
   cutoff: whole files, no row deletes, nothing to vacuum. The chunks are
   locked first, with a timeout that makes this, not ingest, give up in a
   deadlock (see _drop_chunks_of).
2. Deletes the project's runs that started before its cutoff, with their
   steps, model calls, OTLP rows and alert events, through erasure.py (short
   batches under per-run locks, pausing between them as long as each took:
   retention is never urgent). The runs of the cutoff's own hour are taken
   out of the rollups exactly; the rollups of the hours wholly before it are
   deleted afterwards (their data is gone; the daily histograms lose the days
   before the cutoff's day, and that day what its deleted hours counted), so
   an aggregate over a window that lies wholly inside the retained period is
   unchanged.
3. Sweeps rows older than the cutoff that belong to no run (model calls sent
   without one, steps whose run never came, OTLP spans that made no run) and
   alert events fired before it. The sweep reads from where the last round
   stopped (retention_sweeps), a day at a time.
4. After a round that deleted more than VACUUM_FRACTION of a table, runs VACUUM
   (ANALYZE) on it, rather than wait for autovacuum: the space is reused by new
   rows at once and the table does not grow. VACUUM (not FULL) takes no lock
   that blocks reads or writes.

Migration 0009 and docs/deployment.md ("Retention") give the measurements
behind these choices.
"""

from __future__ import annotations

import asyncio
import logging
import random
import time
import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

import msgspec
import psycopg
from psycopg_pool import AsyncConnectionPool

from keelwave.server.store import daily_rollups, erasure, pending_tools, statements, traces
from keelwave.server.store.citus import keys as citus_keys
from keelwave.server.store.citus import partitions as citus_partitions
from keelwave.server.store.periodic import Periodic
from keelwave.server.store.timescale import TABLES as HYPERTABLES
from keelwave.server.store.timescale import has_timescaledb

log = logging.getLogger("keelwave.retention")

EVERY_SECONDS = 600.0
FIRST_AFTER_SECONDS = 5.0  # the first round, after start
LEASE_SECONDS = 300
VACUUM_FRACTION = 0.05
SWEEP_WINDOW = timedelta(days=1)
# Rows that arrive late for the time they say they are from: the sweep goes back this
# far before the last round's cutoff.
SWEEP_SLACK = timedelta(hours=1)
CHUNK_DROP_SLACK = timedelta(days=1)  # see _enforce
DROP_LOCK_TIMEOUT_MS = 200  # and at most half of deadlock_timeout (1 s by default)
DEADLOCK_TIMEOUT_MS = (
    "SELECT extract(epoch FROM current_setting('deadlock_timeout')::interval) * 1000"
)
DROP_ATTEMPTS = 20
ROWS_PER_STATEMENT = 5_000  # sweeps and rollup deletes
PAUSE_RATIO = 1.0  # see _Round.between_batches; bench/retention.py --pause measures it

CLAIM = """
UPDATE retention_enforcement
SET holder = %(me)s, expires_at = now() + make_interval(secs => %(lease)s), started_at = now()
WHERE id = 1 AND (holder IS NULL OR expires_at < now() OR holder = %(me)s)
  AND (finished_at IS NULL OR finished_at < now() - make_interval(secs => %(gap)s))
RETURNING started_at
"""
RENEW = """
UPDATE retention_enforcement SET expires_at = now() + make_interval(secs => %(lease)s)
WHERE id = 1 AND holder = %(me)s
"""
RELEASE = """
UPDATE retention_enforcement SET holder = NULL, expires_at = NULL, finished_at = now(),
       summary = coalesce(%(summary)s::jsonb, summary)
WHERE id = 1 AND holder = %(me)s
"""
PROJECTS = """
SELECT p.id, p.name, p.retention_days, now() - make_interval(days => p.retention_days) AS cutoff,
       s.swept_before
FROM projects p LEFT JOIN retention_sweeps s ON s.project_id = p.id
WHERE p.retention_days IS NOT NULL
ORDER BY p.retention_days DESC, p.name
"""
KEEPS_FOREVER = "SELECT EXISTS (SELECT 1 FROM projects WHERE retention_days IS NULL)"
SWEPT = """
INSERT INTO retention_sweeps (project_id, swept_before, enforced_at, runs_deleted)
VALUES (%s, %s, now(), %s)
ON CONFLICT (project_id) DO UPDATE SET swept_before = excluded.swept_before,
    enforced_at = excluded.enforced_at, runs_deleted = excluded.runs_deleted
"""

# Steps and model calls of a run id that has no run (any more), in a time range.
ORPHAN_RUNS = """
SELECT s.run_id FROM agent_steps s
WHERE s.started_at >= %(lo)s AND s.started_at < %(hi)s AND s.project_id = %(project)s
  AND NOT EXISTS (SELECT 1 FROM agent_runs r WHERE r.project_id = s.project_id AND r.id = s.run_id)
UNION
SELECT a.run_id FROM ai_traces a
WHERE a.started_at >= %(lo)s AND a.started_at < %(hi)s AND a.project_id = %(project)s
  AND a.run_id IS NOT NULL
  AND NOT EXISTS (SELECT 1 FROM agent_runs r WHERE r.project_id = a.project_id AND r.id = a.run_id)
LIMIT %(limit)s
"""
_NO_RUN = (
    "NOT EXISTS (SELECT 1 FROM agent_runs r WHERE r.project_id = {t}.project_id "
    "AND r.id = {t}.run_id)"
)
DELETE_ORPHAN_STEPS = f"""
DELETE FROM agent_steps s WHERE s.project_id = %(project)s AND s.run_id = ANY(%(ids)s)
  AND s.started_at < %(cutoff)s AND {_NO_RUN.format(t="s")}
"""
DELETE_ORPHAN_CALLS = f"""
DELETE FROM ai_traces a WHERE a.project_id = %(project)s AND a.run_id = ANY(%(ids)s)
  AND a.started_at < %(cutoff)s AND {_NO_RUN.format(t="a")}
"""
# Model calls sent without a run count in no counter: no lock is needed.
DELETE_LONE_CALLS = """
DELETE FROM ai_traces WHERE project_id = %(project)s AND run_id IS NULL
  AND started_at >= %(lo)s AND started_at < %(hi)s
  AND id = ANY(ARRAY(SELECT id FROM ai_traces WHERE project_id = %(project)s AND run_id IS NULL
                     AND started_at >= %(lo)s AND started_at < %(hi)s LIMIT %(limit)s))
"""
LONE_TRACES = """
SELECT DISTINCT s.trace_id FROM otlp_spans s
WHERE s.received_at >= %(lo)s AND s.received_at < %(hi)s AND s.project_id = %(project)s
  AND NOT EXISTS (SELECT 1 FROM otlp_runs o WHERE o.project_id = s.project_id
                  AND o.trace_id = s.trace_id)
LIMIT %(limit)s
"""
DELETE_LONE_SPANS = """
DELETE FROM otlp_spans s WHERE s.project_id = %(project)s AND s.trace_id = ANY(%(traces)s)
  AND s.received_at < %(cutoff)s
  AND NOT EXISTS (SELECT 1 FROM otlp_runs o WHERE o.project_id = s.project_id
                  AND o.trace_id = s.trace_id)
"""
DELETE_ALERT_EVENTS = """
DELETE FROM alert_events WHERE id = ANY(ARRAY(
    SELECT id FROM alert_events WHERE project_id = %(project)s AND fired_at < %(cutoff)s
    LIMIT %(limit)s))
"""
# Rollup rows of the hours wholly before the cutoff, in rule 3's table order and in
# key order within each table (the primary key's index is read in order).
ROLLUP_KEYS = (
    ("agent_run_rollups", "project_id, bucket, agent_name"),
    ("agent_duration_rollups", "project_id, bucket, agent_name, duration_bin"),
    ("project_duration_rollups", "project_id, bucket, duration_bin"),
    ("agent_tool_rollups", "project_id, bucket, tool_name, duration_bin"),
)
DELETE_ROLLUPS = """
DELETE FROM {table} WHERE ({keys}) IN (
    SELECT {keys} FROM {table} WHERE project_id = %(project)s AND bucket < %(before)s
    ORDER BY {keys} LIMIT %(limit)s)
"""
# Live tuples of a table, as the statistics collector last heard (a backend reports
# within seconds of its transactions).
LIVE_TUPLES = """
SELECT coalesce(sum(n_live_tup), 0) FROM pg_stat_user_tables
WHERE schemaname = 'public' AND relname = %(table)s
"""
# The chunks drop_chunks will drop, and their compressed chunks, as quoted names.
DROPPABLE = """
SELECT s.chunk::text, quote_ident(z.schema_name) || '.' || quote_ident(z.table_name)
FROM show_chunks(%(table)s::regclass, older_than => %(before)s::timestamptz) AS s (chunk)
JOIN pg_class r ON r.oid = s.chunk
JOIN pg_namespace n ON n.oid = r.relnamespace
JOIN _timescaledb_catalog.chunk c ON c.schema_name = n.nspname AND c.table_name = r.relname
LEFT JOIN _timescaledb_catalog.chunk z ON z.id = c.compressed_chunk_id
"""
DELETED_FROM = ("agent_runs", "agent_steps", "ai_traces", "alert_events", "otlp_spans")


def floor_hour(moment: datetime) -> datetime:
    """The start of the rollup hour (UTC) that ``moment`` falls in."""
    return moment.astimezone(UTC).replace(minute=0, second=0, microsecond=0)


class _Round:
    """One round's lease and tally."""

    def __init__(self, pool: AsyncConnectionPool, me: uuid.UUID) -> None:
        self.pool = pool
        self.me = me
        self.deleted = dict.fromkeys(DELETED_FROM, 0)
        self.timescale = False
        self.partitions = False  # steps and model calls in Citus time partitions
        self._resumed = time.perf_counter()
        self.summary: dict[str, Any] = {"projects": [], "chunks_dropped": {}, "vacuumed": []}

    async def renew(self) -> None:
        async with self.pool.connection() as conn:
            await conn.execute(RENEW, {"me": self.me, "lease": LEASE_SECONDS})

    async def between_batches(self) -> None:
        """Renew the lease, and leave the database to ingest for PAUSE_RATIO times as
        long as the last batch took: retention is never urgent, ingest always is."""
        worked = time.perf_counter() - self._resumed
        await self.renew()
        if PAUSE_RATIO:
            await asyncio.sleep(min(PAUSE_RATIO * worked, 1.0))
        self._resumed = time.perf_counter()

    async def execute(self, sql: str, args: Any) -> int:
        async with self.pool.connection() as conn:
            return (await conn.execute(sql, args)).rowcount

    async def rows(self, sql: str, args: Any = None) -> list[tuple]:
        async with self.pool.connection() as conn:
            return await (await conn.execute(sql, args)).fetchall()


async def enforce(
    pool: AsyncConnectionPool, me: uuid.UUID | None = None, gap_seconds: float = 0
) -> dict[str, Any] | None:
    """One round of enforcement, if no other enforcer is at work and none finished one
    within ``gap_seconds``; its summary, or None when it was not this one's turn."""
    me = me or uuid.uuid4()
    async with pool.connection() as conn:
        claimed = await (
            await conn.execute(CLAIM, {"me": me, "lease": LEASE_SECONDS, "gap": gap_seconds})
        ).fetchone()
    if claimed is None:
        return None
    work = _Round(pool, me)
    started = time.perf_counter()
    summary = None
    try:
        await _enforce(work)
        work.summary["seconds"] = round(time.perf_counter() - started, 3)
        summary = msgspec.json.encode(work.summary).decode()
    finally:
        async with pool.connection() as conn:
            await conn.execute(RELEASE, {"me": me, "summary": summary})
    if any(p["runs"] for p in work.summary["projects"]) or work.summary["chunks_dropped"]:
        log.info("retention: %s", summary)
    return work.summary


async def _enforce(work: _Round) -> None:
    projects = await work.rows(PROJECTS)
    if not projects:
        return
    async with work.pool.connection() as conn:
        work.timescale = await has_timescaledb(conn)
        work.partitions = await citus_partitions.is_partitioned(conn)
        keeps_forever = (await (await conn.execute(KEEPS_FOREVER)).fetchone())[0]
    if work.timescale and not keeps_forever:
        # PROJECTS is ordered longest period first: its cutoff is the earliest. A chunk
        # goes whole only a day after that: a chunk drop does not adjust the counters
        # of the runs its steps belong to, and a step stamped before its run started
        # (an agent's clock against the server's) would leave a kept run counting a
        # step that is gone. What lies between goes by the batched deletes, with runs.
        await _drop_chunks(work, projects[0][3] - CHUNK_DROP_SLACK)
    if work.partitions and not keeps_forever:
        # On Citus, the days of steps and model calls (migration 0015), by the same rule:
        # received wholly before that cutoff less a day (store/citus/partitions.py).
        started = time.perf_counter()
        older_than = projects[0][3] - citus_partitions.CLOCK_SLACK
        dropped = await citus_partitions.drop_before(work.pool, older_than)
        work.summary["chunks_dropped"].update(dropped)
        if dropped:
            for sql in citus_keys.DROP_BEFORE:
                await work.execute(sql, (older_than,))
        work.summary["drop_seconds"] = round(time.perf_counter() - started, 3)
    for project_id, name, days, cutoff, swept_before in projects:
        tally = {"project": name, "retention_days": days, "cutoff": cutoff}
        erased, tally["swept"] = await _expire(work, project_id, cutoff, swept_before)
        work.deleted["agent_runs"] += erased.runs
        work.deleted["agent_steps"] += erased.steps
        work.deleted["ai_traces"] += erased.model_calls
        tally.update(erased.as_dict())
        tally["rollup_rows"] = await _delete_rollups(work, project_id, floor_hour(cutoff))
        await work.execute(SWEPT, (project_id, cutoff, erased.runs))
        work.summary["projects"].append(tally)
    await _vacuum(work)


async def _expire(
    work: _Round, project_id: uuid.UUID, cutoff: datetime, swept_before: datetime | None
) -> tuple[erasure.Erased, int]:
    """Delete the project's runs that started before ``cutoff`` with their rows, then sweep
    its rows of no run; (what was erased, how many rows were swept)."""

    async def expire() -> tuple[erasure.Erased, int]:
        erased = await erasure.erase_where(
            work.pool, str(project_id), "r.started_at < %(cutoff)s", {"cutoff": cutoff},
            rollups_before=floor_hour(cutoff), after_batch=work.between_batches,
        )  # fmt: skip
        return erased, await _sweep(work, project_id, cutoff, swept_before)

    try:
        return await expire()
    except psycopg.errors.InternalError_ as error:
        if not (work.partitions and citus_partitions.is_compressed_delete(error)):
            raise
    # On Citus, a period set (or shortened) after days holding the project's rows were
    # made columnar, which takes no DELETE: those days go back to heap (the keeper
    # compresses them again once retention is done there) and the rest goes. (The
    # batches deleted before the refusal are not counted in the tally.)
    converted = await citus_partitions.decompress_days_of(work.pool, project_id)
    work.summary.setdefault("decompressed", {}).update(converted)
    return await expire()


async def _drop_chunks(work: _Round, older_than: datetime) -> None:
    started = time.perf_counter()
    for table in HYPERTABLES:
        for attempt in range(DROP_ATTEMPTS):
            try:
                dropped = await _drop_chunks_of(work, table, older_than)
            except (psycopg.errors.LockNotAvailable, psycopg.errors.DeadlockDetected):
                await asyncio.sleep(random.uniform(0.05, 0.25) * (1 + attempt // 5))
                continue
            if dropped:
                work.summary["chunks_dropped"][table] = dropped
            break
        else:
            log.info("retention: %s chunks stayed busy; they go next round", table)
    work.summary["drop_seconds"] = round(time.perf_counter() - started, 3)


async def _drop_chunks_of(work: _Round, table: str, older_than: datetime) -> int:
    """Drop ``table``'s chunks wholly before ``older_than``, in a transaction that gives
    up rather than ever make ingest fail.

    drop_chunks locks each chunk and its compressed chunk in turn, while an ingest
    transaction (whose duplicate checks, with no time bound, read every chunk) may
    hold one and want the other: a deadlock. PostgreSQL settles it in whichever
    waited deadlock_timeout first, and measured, that was the ingest (a 503 to an
    agent). So every relation to drop is locked first, in one statement, with a
    lock timeout well under deadlock_timeout: this transaction waits for the
    ingest transactions in flight (milliseconds), and in a deadlock it is the one
    that gives up, releases everything and tries again in a moment. (NOWAIT never
    got the locks under load: some ingest transaction always holds them.)
    """
    async with work.pool.connection() as conn, conn.transaction():
        [(deadlock_ms,)] = await (await conn.execute(DEADLOCK_TIMEOUT_MS)).fetchall()
        timeout_ms = max(10, min(DROP_LOCK_TIMEOUT_MS, int(deadlock_ms) // 2))
        await conn.execute(f"SET LOCAL lock_timeout = '{timeout_ms}ms'")
        relations = [
            name
            for chunk, compressed in await (
                await conn.execute(DROPPABLE, {"table": table, "before": older_than})
            ).fetchall()
            for name in (chunk, compressed)
            if name is not None
        ]
        if not relations:
            return 0
        await conn.execute(f"LOCK TABLE {', '.join(relations)} IN ACCESS EXCLUSIVE MODE")
        dropped = await (
            await conn.execute(
                "SELECT drop_chunks(%s::regclass, older_than => %s::timestamptz)",
                (table, older_than),
            )
        ).fetchall()
    return len(dropped)


async def _sweep(
    work: _Round, project_id: uuid.UUID, cutoff: datetime, swept_before: datetime | None
) -> int:
    """Delete the project's rows before ``cutoff`` that belong to no run, from where the
    last round stopped; return how many went."""
    if swept_before is not None:
        lo = swept_before - SWEEP_SLACK
    else:  # the first round: from the oldest row of any project
        oldest = await work.rows(
            "SELECT least((SELECT min(started_at) FROM agent_steps), "
            "(SELECT min(started_at) FROM ai_traces), (SELECT min(received_at) FROM otlp_spans))"
        )
        if oldest[0][0] is None:
            return 0
        lo = oldest[0][0]
    swept = 0
    while lo < cutoff:
        hi = min(lo + SWEEP_WINDOW, cutoff)
        swept += await _sweep_window(work, project_id, lo, hi, cutoff)
        lo = hi
    limit = {"project": project_id, "cutoff": cutoff, "limit": ROWS_PER_STATEMENT}
    while (count := await work.execute(DELETE_ALERT_EVENTS, limit)) > 0:
        work.deleted["alert_events"] += count
    return swept


async def _sweep_window(
    work: _Round, project_id: uuid.UUID, lo: datetime, hi: datetime, cutoff: datetime
) -> int:
    window = {"project": project_id, "lo": lo, "hi": hi, "cutoff": cutoff}
    swept = 0
    find = {**window, "limit": erasure.MAX_RUNS}
    while ids := [run_id for (run_id,) in await work.rows(ORPHAN_RUNS, find)]:
        async with (
            work.pool.connection() as conn,
            statements.transaction(conn),
            conn.cursor() as cur,
        ):
            # Rule 1: a run start counts the steps stored before it.
            await statements.lock_runs(cur, {run_id.int for run_id in ids})
            await cur.execute(DELETE_ORPHAN_STEPS, {**window, "ids": ids})
            steps = cur.rowcount
            await cur.execute(DELETE_ORPHAN_CALLS, {**window, "ids": ids})
            calls = cur.rowcount
            if work.partitions:  # and so key tables (store/citus/keys.py)
                for sql in citus_keys.RESYNC:
                    await cur.execute(sql, {"project_id": project_id, "ids": ids})
        work.deleted["agent_steps"] += steps
        work.deleted["ai_traces"] += calls
        swept += steps + calls
        if steps + calls == 0:
            break  # each was found again by a run start meanwhile
    args = {**window, "limit": ROWS_PER_STATEMENT}
    while (count := await _delete_lone_calls(work, project_id, args)) > 0:
        work.deleted["ai_traces"] += count
        swept += count
    while lone := [bytes(t) for (t,) in await work.rows(LONE_TRACES, args)]:
        project = uuid.UUID(str(project_id))
        async with work.pool.connection() as conn, conn.transaction():
            keys = sorted({traces.trace_lock_key(project, trace) for trace in lone})
            await conn.execute(erasure.LOCK_TRACES, (traces.TRACE_LOCKS, keys))
            count = (await conn.execute(DELETE_LONE_SPANS, {**window, "traces": lone})).rowcount
        work.deleted["otlp_spans"] += count
        swept += count
        if count == 0:
            break
    await work.renew()
    return swept


async def _delete_lone_calls(work: _Round, project_id: uuid.UUID, args: dict[str, Any]) -> int:
    """One statement's worth of the window's model calls sent without a run, deleted;
    on Citus with their keys, in the same transaction."""
    if not work.partitions:
        return await work.execute(DELETE_LONE_CALLS, args)
    async with work.pool.connection() as conn, conn.transaction():
        cursor = await conn.execute(DELETE_LONE_CALLS + " RETURNING id", args)
        ids = [call_id for (call_id,) in await cursor.fetchall()]
        if ids:
            await conn.execute(citus_keys.DELETE_LONE, (project_id, ids))
    return len(ids)


async def _delete_rollups(work: _Round, project_id: uuid.UUID, before: datetime) -> int:
    """Delete the project's rollup rows of the hours before ``before`` (the cutoff's hour).

    The daily twins (daily_rollups.py) lose their days wholly before the
    cutoff's day, and that day loses what its hours before ``before`` counted,
    taken out as those hourly rows go, so it stays the sum of its hours. Weekly
    twins likewise: the cutoff's week loses those hours and its days before the
    cutoff's day, and the weeks before it go whole.
    """
    deleted = 0
    day = daily_rollups.floor_day(before)
    args = {"project": project_id, "before": before, "day": day, "limit": ROWS_PER_STATEMENT}
    # Tool rollups of those hours still pending (pending_tools.py) go first: folded in
    # later, they would bring deleted hours back.
    deleted += await work.execute(pending_tools.FORGET_HOURS, args)
    twins = {table.hourly: table for table in daily_rollups.ROLLUPS}
    for table, keys in ROLLUP_KEYS:
        twin = twins.get(table)
        retire = []
        if twin:
            retire.append(daily_rollups.retire_hours(twin))
            if twin.weekly:  # the cutoff's week loses its days before the cutoff's day too
                retire.append(daily_rollups.retire_days(twin))
        for sql in retire:
            while (count := (await work.rows(sql, args))[0][0]) > 0:
                deleted += count
        if twin:
            for sql in daily_rollups.drop_emptied_day(twin):
                await work.execute(sql, args)
        delete = [DELETE_ROLLUPS.format(table=table, keys=keys)]
        if twin:
            delete.append(daily_rollups.delete_days(twin))
            if twin.weekly:
                delete.append(daily_rollups.delete_weeks(twin))
        for sql in delete:
            while (count := await work.execute(sql, args)) > 0:
                deleted += count
    return deleted


async def _vacuum(work: _Round) -> None:
    """VACUUM (ANALYZE) each table this round deleted more than VACUUM_FRACTION of.

    A big round (the first one on an old database, a period made shorter) would
    otherwise leave its dead rows until autovacuum comes round, and the table
    would grow with new rows meanwhile. The ten-minute rounds of a steady state
    delete a sliver each; autovacuum (at 20% dead rows, by default) keeps up with
    those, and the space it frees is what the next days' rows fill.
    """
    for table, deleted in work.deleted.items():
        if not deleted:
            continue
        if work.timescale and table in HYPERTABLES:  # compressed rows included
            [(live,)] = await work.rows("SELECT approximate_row_count(%s::regclass)", (table,))
        else:
            [(live,)] = await work.rows(LIVE_TUPLES, {"table": table})
        # The estimates may or may not count this round's deletes yet: at worst the
        # fraction comes out a little low.
        if deleted <= VACUUM_FRACTION * (int(live) + deleted):
            continue
        started = time.perf_counter()
        async with work.pool.connection() as conn:
            await conn.execute(f"VACUUM (ANALYZE) {table}")
        seconds = round(time.perf_counter() - started, 3)
        work.summary["vacuumed"].append({"table": table, "deleted": deleted, "seconds": seconds})


class Enforcer(Periodic):
    """Runs :func:`enforce` every ``every`` seconds inside ``serve`` (and soon after start);
    every process has one, and the lease lets one of them work at a time."""

    def __init__(self, pool: AsyncConnectionPool, every: float = EVERY_SECONDS) -> None:
        first = min(FIRST_AFTER_SECONDS, every)
        super().__init__("retention", self.run_once, every, log, first_after=first)
        self._pool = pool
        self._me = uuid.uuid4()
        self._gap = every / 2  # servers that come round later skip the round

    async def run_once(self) -> dict[str, Any] | None:
        return await enforce(self._pool, self._me, self._gap)
