"""Group commit: many ingest requests, one COPY and one commit.

A request hands its rows to :meth:`IngestWriter.write` and waits. A flusher
task (one per lane: a couple per server process) takes everything that is
waiting (up to ``flush_max_rows``), writes it in one transaction and then
answers every request in the batch. While a flush is in progress new requests pile up and go
together into the next one, so under load a commit serves hundreds of
requests, and with no load a request waits for just its own commit. A request
is answered only after its rows are committed: acknowledged means durable.

Identity, not constraints, makes retries safe (see the initial migration for
why there is no unique index): rows are COPYed into session-local staging
tables and moved with ``INSERT … SELECT DISTINCT ON … WHERE NOT EXISTS``, so a
run (project, id), a step (project, run, step_index) or a model call
(project, id) already stored, or repeated within the batch, is skipped; the
first copy wins. The same statements keep run counters and rollups current
(see writes.py, which also says how transactions avoid deadlocks).

Failures: if the database is unreachable, every request in the batch gets
:class:`DatabaseUnavailable` (503, retry); nothing was acknowledged, so nothing
is lost. If PostgreSQL rejects the data itself, the batch is retried one
request at a time, so only the offending request fails (422) and its
neighbours are unaffected. When more than ``buffer_max_rows`` rows are
waiting, new requests get :class:`Overloaded` (503) instead of growing memory.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import deque
from dataclasses import dataclass, field

import psycopg
from psycopg import pq

from keelwave.server import writes
from keelwave.server.metrics import Metrics

log = logging.getLogger("keelwave.writer")

# (position in Submission.rows, staging table, columns, statement moving them in)
STAGES = (
    (0, "kw_stage_runs", writes.RUN_COLUMNS, writes.INSERT_RUNS),
    (1, "kw_stage_steps", writes.STEP_COLUMNS, writes.INSERT_STEPS),
    (2, "kw_stage_traces", writes.TRACE_COLUMNS, writes.INSERT_TRACES),
)


# Up to this many rows of a kind, a flush stages them with a multi-row INSERT in
# its single pipeline; more go by COPY (see _Lane.commit).
PIPELINED_ROWS = 64
# A lane empties its staging tables with DELETE at the end of each transaction
# (cheap) and TRUNCATEs them once this many rows have gone through since the
# last time (a few hundred microseconds a table), so the dead rows DELETE
# leaves behind, which every flush scans past, stay few.
TRUNCATE_STAGES_AFTER_ROWS = 2_000
# The staging tables the writer fills (run-duration histograms change only when
# runs finish, in lifecycle.py, so the writer never stages them).
WRITER_STAGES = (*writes.ROW_STAGES, *writes.ROLLUP_STAGES[:1], *writes.ROLLUP_STAGES[2:])

ANALYZE_AT_ROWS = (1_000, 10_000, 100_000)
TABLE_OF_STAGE = {
    "kw_stage_runs": "agent_runs",
    "kw_stage_steps": "agent_steps",
    "kw_stage_traces": "ai_traces",
}


class DatabaseUnavailable(Exception):
    """The batch could not be written because the database is unreachable."""


class Overloaded(Exception):
    """Too many rows are waiting for commit; the client should retry later."""


class RowsRejected(Exception):
    """PostgreSQL refused this request's rows; the message says why."""


class WriterClosed(Exception):
    """The server is shutting down and takes no more writes."""


@dataclass(slots=True)
class Submission:
    """The rows of one request, and the future its handler waits on."""

    rows: tuple[list[tuple], list[tuple], list[tuple]]  # runs, steps, traces
    future: asyncio.Future[None]
    size: int = field(default=0)


class IngestWriter:
    def __init__(
        self,
        conninfo: str,
        flush_max_rows: int,
        buffer_max_rows: int,
        connect_timeout: int = 5,
        lanes: int = 2,
        metrics: Metrics | None = None,
    ) -> None:
        self._metrics = metrics or Metrics()
        self._flush_max_rows = flush_max_rows
        self._buffer_max_rows = buffer_max_rows
        self._queue: deque[Submission] = deque()
        self._waiting_rows = 0
        self._wakeup = asyncio.Event()
        self._closing = False
        # Several lanes, each a connection committing batches: while one waits on
        # PostgreSQL, another fills the next batch. Run locks keep them apart.
        self._lanes = [_Lane(conninfo, connect_timeout) for _ in range(max(1, lanes))]
        self._tasks: list[asyncio.Task] = []
        self._rows_written = [0, 0, 0]  # per stage: runs, steps, model calls

    @property
    def waiting_rows(self) -> int:
        return self._waiting_rows

    def start(self) -> None:
        self._tasks = [
            asyncio.create_task(self._run(lane), name=f"keelwave-ingest-writer-{number}")
            for number, lane in enumerate(self._lanes)
        ]

    async def close(self) -> None:
        """Commit everything already submitted, then stop."""
        self._closing = True
        self._wakeup.set()
        await asyncio.gather(*self._tasks)
        for lane in self._lanes:
            await lane.drop()

    async def write(
        self,
        runs: list[tuple] | None = None,
        steps: list[tuple] | None = None,
        traces: list[tuple] | None = None,
    ) -> None:
        """Return once the rows are committed; raise if they could not be."""
        rows = (runs or [], steps or [], traces or [])
        size = sum(len(part) for part in rows)
        if size == 0:
            return
        if self._closing:
            raise WriterClosed("the server is shutting down")
        if self._waiting_rows and self._waiting_rows + size > self._buffer_max_rows:
            raise Overloaded(f"{self._waiting_rows} rows are waiting for commit")
        future = asyncio.get_running_loop().create_future()
        self._queue.append(Submission(rows, future, size))
        self._waiting_rows += size
        self._wakeup.set()
        # shield: a client that disconnects must not cancel a write others share.
        await asyncio.shield(future)

    # -- flushers -------------------------------------------------------------

    async def _run(self, lane: _Lane) -> None:
        while True:
            if not self._queue:
                if self._closing:
                    return
                await self._wakeup.wait()
                self._wakeup.clear()
                continue
            await self._flush(self._take_batch(), lane)

    def _take_batch(self) -> list[Submission]:
        batch = [self._queue.popleft()]
        rows = batch[0].size
        while self._queue and rows + self._queue[0].size <= self._flush_max_rows:
            submission = self._queue.popleft()
            rows += submission.size
            batch.append(submission)
        self._waiting_rows -= rows
        return batch

    async def _flush(self, batch: list[Submission], lane: _Lane) -> None:
        started = time.perf_counter()
        try:
            await lane.commit(batch)
        except (psycopg.OperationalError, OSError) as error:
            log.warning("ingest flush failed, database unavailable: %s", error)
            self._metrics.database_error("unavailable")
            await lane.drop()
            _settle(batch, DatabaseUnavailable(str(error)))
        except psycopg.Error as error:
            if len(batch) > 1:
                # Find the request PostgreSQL objects to; commit the others.
                for submission in batch:
                    await self._flush([submission], lane)
                return
            log.info("ingest rows rejected by the database: %s", error)
            self._metrics.database_error("rejected")
            _settle(batch, RowsRejected(_describe(error)))
        except Exception as error:  # a bug: fail the requests, keep the writer alive
            log.exception("ingest flush failed")
            _settle(batch, error)
        else:
            _settle(batch, None)
            self._metrics.flushed(
                time.perf_counter() - started,
                {
                    TABLE_OF_STAGE[stage]: sum(len(s.rows[position]) for s in batch)
                    for position, stage, _, _ in STAGES
                },
            )
            await self._analyze_young_tables(batch, lane)

    async def _analyze_young_tables(self, batch: list[Submission], lane: _Lane) -> None:
        """Give the planner statistics early in a table's life.

        Until autovacuum first analyses it (a minute or more), a young table
        has no statistics, and the planner may probe the wrong index for the
        duplicate checks: one that filters by project only, reading every row
        of the project per staged row. An explicit ANALYZE of a table when
        this process has written 1k, 10k and 100k rows to it closes that gap.
        """
        young = []
        for position, stage, _, _ in STAGES:
            before = self._rows_written[position]
            after = before + sum(len(submission.rows[position]) for submission in batch)
            self._rows_written[position] = after
            if any(before < mark <= after for mark in ANALYZE_AT_ROWS):
                young.append(TABLE_OF_STAGE[stage])
        if young:
            await lane.analyze(young)


class _Lane:
    """One writer connection and the transaction it commits a batch in."""

    def __init__(self, conninfo: str, connect_timeout: int) -> None:
        self._conninfo = conninfo
        self._connect_timeout = connect_timeout
        self._conn: psycopg.AsyncConnection | None = None
        self._staged_since_truncate = 0  # rows through the staging tables since TRUNCATE

    async def commit(self, batch: list[Submission]) -> None:
        """Write the batch in one transaction, in as few round trips as it can.

        A flush of a few rows is one round trip: BEGIN, the locks, the rows
        (a multi-row INSERT into staging), the statements moving them in,
        the rollup merges and COMMIT go together in one pipeline. Larger
        flushes COPY their rows between a pipeline that begins and locks and
        one that does the rest: COPY costs two round trips, but far less
        CPU per row on both sides. Many steps skip staging altogether
        (:meth:`_new_steps`): PostgreSQL then writes each step once.
        """
        conn = await self._connection()
        parts = [
            (stage, columns, statement, [row for s in batch for row in s.rows[position]])
            for position, stage, columns, statement in STAGES
        ]
        parts = [part for part in parts if part[3]]
        copied = {stage for stage, _, _, rows in parts if len(rows) > PIPELINED_ROWS}
        steps = next((rows for stage, *_, rows in parts if stage == "kw_stage_steps"), [])
        ranges = _step_ranges(steps) if "kw_stage_steps" in copied else None
        try:
            async with conn.cursor() as cur, conn.cursor() as stored, conn.cursor() as finished:
                async with conn.pipeline():
                    await cur.execute("BEGIN")
                    await writes.lock_runs(cur, _runs_touched(batch))
                    if ranges:
                        await stored.execute(writes.STORED_STEPS, ranges)
                        await finished.execute(writes.ANY_RUN_FINISHED, ranges)
                    if not copied:
                        await _move_in(cur, parts, copied, self._truncate_now(parts))
                if not copied:
                    return
                direct = None
                if ranges and not (await finished.fetchone())[0]:
                    direct = _new_steps(steps, await stored.fetchall())
                    parts = [part for part in parts if part[0] != "kw_stage_steps"]
                    types = writes.copy_types(writes.STEP_COLUMNS, seq=False)
                    await _copy(cur, writes.copy_into_steps_sql(), types, direct[0])
                for stage, columns, _, rows in parts:
                    if stage in copied:
                        sql, types = writes.copy_sql(stage, columns), writes.copy_types(columns)
                        numbered = [(seq, *row) for seq, row in enumerate(rows)]
                        await _copy(cur, sql, types, numbered)
                async with conn.pipeline():
                    if direct is not None:
                        await cur.execute(writes.STEPS_COPIED, direct[1])
                    await _move_in(cur, parts, copied, self._truncate_now(parts))
        except BaseException:
            await self._roll_back()
            raise

    def _truncate_now(self, parts: list[tuple]) -> bool:
        """Whether this transaction should TRUNCATE the staging tables it fills with ``parts``."""
        self._staged_since_truncate += sum(len(rows) for *_, rows in parts)
        if self._staged_since_truncate <= TRUNCATE_STAGES_AFTER_ROWS:
            return False
        self._staged_since_truncate = 0  # (if the transaction fails, a little early)
        return True

    async def _roll_back(self) -> None:
        """End a failed transaction; a connection that cannot is dropped."""
        conn = self._conn
        if conn is None or conn.closed:
            return
        try:
            if conn.info.transaction_status != pq.TransactionStatus.IDLE:
                await conn.execute("ROLLBACK")
        except Exception:  # broken, or mid-protocol after a cancellation
            await self.drop()

    async def analyze(self, tables: list[str]) -> None:
        try:
            conn = await self._connection()
            await conn.execute(f"ANALYZE {', '.join(tables)}")
        except psycopg.Error as error:
            log.debug("analyze skipped: %s", error)

    async def _connection(self) -> psycopg.AsyncConnection:
        if self._conn is None or self._conn.closed:
            conn = await psycopg.AsyncConnection.connect(
                self._conninfo, autocommit=True, connect_timeout=self._connect_timeout
            )
            # Every lookup this connection makes is a handful of index probes per
            # staged row (duplicate checks, run counters). The planner cannot know
            # that: staging tables are never analysed, and a young agent_steps looks
            # empty until autovacuum analyses it, so it may pick hash joins or
            # sequential scans that read a whole table on every flush.
            # (Switching plans off inflates their cost estimates; jit must go too, or
            # those inflated costs make every statement pay for JIT compilation.)
            for setting in ("enable_hashjoin", "enable_mergejoin", "enable_seqscan", "jit"):
                await conn.execute(f"SET {setting} = off")
            for statement in writes.staging_ddl(WRITER_STAGES, emptied_at_commit=False):
                await conn.execute(statement)
            self._conn = conn
            self._staged_since_truncate = 0
        return self._conn

    async def drop(self) -> None:
        if self._conn is not None:
            try:
                await self._conn.close()
            except Exception:  # already broken; nothing to save
                pass
            self._conn = None


async def _copy(cur: psycopg.AsyncCursor, sql: str, types: list[str], rows: list[tuple]) -> None:
    """COPY ``rows``, formatting them without a coroutine per row (the formatter
    hands back a buffer's worth at a time; only those writes wait)."""
    async with cur.copy(sql) as copy:
        copy.set_types(types)
        formatter = copy.formatter
        for row in rows:
            if data := formatter.write_row(row):
                await copy.write(data)


async def _move_in(
    cur: psycopg.AsyncCursor, parts: list[tuple], copied: set[str], truncate: bool
) -> None:
    """Stage the rows not COPYed, move every stage into its table, merge the rollups,
    empty the staging tables (see TRUNCATE_STAGES_AFTER_ROWS), commit."""
    raw = psycopg.AsyncRawCursor(cur.connection)
    for stage, columns, statement, rows in parts:
        if stage not in copied:
            values = [value for seq, row in enumerate(rows) for value in (seq, *row)]
            await raw.execute(writes.values_sql(stage, columns, len(rows)), values)
        await cur.execute(statement)
    # The writer stages run rollups, and tool rollups for late steps; run-duration
    # histograms change only when runs finish (lifecycle.py).
    has_steps = any(stage == "kw_stage_steps" for stage, *_ in parts)
    await cur.execute(writes.MERGE_RUN_ROLLUPS)
    if has_steps:
        await cur.execute(writes.MERGE_TOOL_ROLLUPS)
    if truncate:
        await cur.execute(f"TRUNCATE {', '.join(name for name, *_ in WRITER_STAGES)}")
    else:
        for stage, *_ in parts:
            await cur.execute(f"DELETE FROM {stage}")
        await cur.execute("DELETE FROM kw_stage_rollups")
        if has_steps:
            await cur.execute("DELETE FROM kw_stage_tools")
    await cur.execute("COMMIT")


def _step_ranges(steps: list[tuple]) -> dict[str, list]:
    """Per (project, run), the lowest and highest step_index in ``steps``: what to probe.

    (Keys are UUID.int: a UUID's own hash is computed in Python, for every row.)
    """
    ranges: dict[tuple[int, int], list] = {}
    for row in steps:
        index = row[2]
        bounds = ranges.get((row[0].int, row[1].int))
        if bounds is None:
            ranges[(row[0].int, row[1].int)] = [row[0], row[1], index, index]
        elif index < bounds[2]:
            bounds[2] = index
        elif index > bounds[3]:
            bounds[3] = index
    columns = list(zip(*ranges.values(), strict=True))
    return dict(zip(("projects", "runs", "low", "high"), map(list, columns), strict=True))


def _new_steps(steps: list[tuple], stored: list[tuple]) -> tuple[list[tuple], dict[str, list]]:
    """The steps not stored yet, each (project, run, step_index) once, first one wins
    (as INSERT_STEPS decides); and how many each run gets, for STEPS_COPIED."""
    seen = {(project.int, run.int, index) for project, run, index in stored}
    fresh = []
    counts: dict[tuple[int, int], list] = {}
    for row in steps:
        project, run = row[0].int, row[1].int
        key = (project, run, row[2])
        if key in seen:
            continue
        seen.add(key)
        fresh.append(row)
        count = counts.get((project, run))
        if count is None:
            counts[(project, run)] = [row[0], row[1], 1]
        else:
            count[2] += 1
    columns = list(zip(*counts.values(), strict=True)) or [(), (), ()]
    return fresh, dict(zip(("projects", "runs", "counts"), map(list, columns), strict=True))


def _runs_touched(batch: list[Submission]) -> set[int]:
    """Every run the batch touches, as UUID.int; a model call without a run stands for
    its own id."""
    ids: set[int] = set()
    for submission in batch:
        runs, steps, traces = submission.rows
        ids.update(row[1].int for row in runs)  # run id
        ids.update(row[1].int for row in steps)  # the step's run id
        ids.update((row[2] or row[1]).int for row in traces)  # the call's run id, else its id
    return ids


def _settle(batch: list[Submission], error: BaseException | None) -> None:
    for submission in batch:
        if submission.future.done():
            continue
        if error is None:
            submission.future.set_result(None)
        else:
            submission.future.set_exception(error)


def _describe(error: psycopg.Error) -> str:
    diag = error.diag
    return diag.message_primary or str(error).splitlines()[0]
