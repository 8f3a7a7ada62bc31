"""Group commit: many ingest requests, one COPY and one commit.

A request hands its rows to :meth:`IngestWriter.write` and waits. One flusher
task per server process takes everything that is waiting (up to
``flush_max_rows``), writes it in one transaction and then answers every
request in the batch. While a flush is in progress new requests pile up and go
together into the next one, so under load a commit serves hundreds of
requests, and with no load a request waits for just its own commit. A request
is answered only after its rows are committed: acknowledged means durable.

Identity, not constraints, makes retries safe (see the initial migration for
why there is no unique index): rows are COPYed into session-local staging
tables and moved with ``INSERT … SELECT DISTINCT ON … WHERE NOT EXISTS``, so a
run (project, id), a step (project, run, step_index) or a model call
(project, id) already stored, or repeated within the batch, is skipped; the
first copy wins. Transaction-level advisory locks on hash buckets of the ids
serialise the check-and-insert between server processes sharing a database.

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
from collections import deque
from dataclasses import dataclass, field

import psycopg

log = logging.getLogger("keelwave.writer")

RUN_COLUMNS = (
    "project_id", "id", "agent_name", "parent_run_id", "started_at",
    "input", "metadata", "tags",
)  # fmt: skip
STEP_COLUMNS = (
    "project_id", "run_id", "step_index", "step_type", "tool_name", "tool_input",
    "tool_output", "content", "input_fingerprint", "started_at", "duration_ms", "error",
)  # fmt: skip
TRACE_COLUMNS = (
    "project_id", "id", "run_id", "step_index", "provider", "model", "input_tokens",
    "output_tokens", "cache_read_tokens", "reasoning_tokens", "cost_usd", "latency_ms",
    "status", "error", "started_at",
)  # fmt: skip

# (table, staging table, columns, identity columns)
TABLES = (
    ("agent_runs", "kw_stage_runs", RUN_COLUMNS, ("project_id", "id")),
    ("agent_steps", "kw_stage_steps", STEP_COLUMNS, ("project_id", "run_id", "step_index")),
    ("ai_traces", "kw_stage_traces", TRACE_COLUMNS, ("project_id", "id")),
)

LOCK_NAMESPACE = 0x6B77  # 'kw': first key of pg_advisory_xact_lock(int, int)
LOCK_BUCKETS = 64  # per table; bounds the locks one transaction takes


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
        self, conninfo: str, flush_max_rows: int, buffer_max_rows: int, connect_timeout: int = 5
    ) -> None:
        self._conninfo = conninfo
        self._connect_timeout = connect_timeout
        self._flush_max_rows = flush_max_rows
        self._buffer_max_rows = buffer_max_rows
        self._queue: deque[Submission] = deque()
        self._waiting_rows = 0
        self._wakeup = asyncio.Event()
        self._closing = False
        self._task: asyncio.Task | None = None
        self._conn: psycopg.AsyncConnection | None = None

    @property
    def waiting_rows(self) -> int:
        return self._waiting_rows

    def start(self) -> None:
        self._task = asyncio.create_task(self._run(), name="keelwave-ingest-writer")

    async def close(self) -> None:
        """Commit everything already submitted, then stop."""
        self._closing = True
        self._wakeup.set()
        if self._task is not None:
            await self._task
        if self._conn is not None:
            await self._conn.close()
            self._conn = None

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

    # -- flusher --------------------------------------------------------------

    async def _run(self) -> None:
        while True:
            await self._wakeup.wait()
            self._wakeup.clear()
            while self._queue:
                await self._flush(self._take_batch())
            if self._closing and not self._queue:
                return

    def _take_batch(self) -> list[Submission]:
        batch = [self._queue.popleft()]
        rows = batch[0].size
        while self._queue and rows + self._queue[0].size <= self._flush_max_rows:
            submission = self._queue.popleft()
            rows += submission.size
            batch.append(submission)
        self._waiting_rows -= rows
        return batch

    async def _flush(self, batch: list[Submission]) -> None:
        try:
            await self._commit(batch)
        except (psycopg.OperationalError, OSError) as error:
            log.warning("ingest flush failed, database unavailable: %s", error)
            await self._drop_connection()
            _settle(batch, DatabaseUnavailable(str(error)))
        except psycopg.Error as error:
            if len(batch) > 1:
                # Find the request PostgreSQL objects to; commit the others.
                for submission in batch:
                    await self._flush([submission])
                return
            log.info("ingest rows rejected by the database: %s", error)
            _settle(batch, RowsRejected(_describe(error)))
        except Exception as error:  # a bug: fail the requests, keep the writer alive
            log.exception("ingest flush failed")
            _settle(batch, error)
        else:
            _settle(batch, None)

    async def _commit(self, batch: list[Submission]) -> None:
        conn = await self._connection()
        async with conn.transaction(), conn.cursor() as cur:
            await cur.execute(
                "SELECT pg_advisory_xact_lock(%s, bucket) FROM unnest(%s::int[]) AS bucket",
                (LOCK_NAMESPACE, _lock_buckets(batch)),
            )
            for position, (table, stage, columns, identity) in enumerate(TABLES):
                rows = [row for submission in batch for row in submission.rows[position]]
                if not rows:
                    continue
                async with cur.copy(f"COPY {stage} (seq, {', '.join(columns)}) FROM STDIN") as copy:
                    for seq, row in enumerate(rows):
                        await copy.write_row((seq, *row))
                await cur.execute(_move_sql(table, stage, columns, identity))

    async def _connection(self) -> psycopg.AsyncConnection:
        if self._conn is None or self._conn.closed:
            conn = await psycopg.AsyncConnection.connect(
                self._conninfo, autocommit=True, connect_timeout=self._connect_timeout
            )
            # The staging tables are never analysed, so the planner guesses their
            # size and may pick a hash anti-join that reads the whole target
            # table on every flush. The duplicate check must be index probes.
            await conn.execute("SET enable_hashjoin = off")
            await conn.execute("SET enable_mergejoin = off")
            for table, stage, _, _ in TABLES:
                # Session-local, emptied at every commit; never touches the WAL.
                await conn.execute(
                    f"CREATE TEMP TABLE IF NOT EXISTS {stage} "
                    f"(seq integer, LIKE {table} INCLUDING DEFAULTS) ON COMMIT DELETE ROWS"
                )
            self._conn = conn
        return self._conn

    async def _drop_connection(self) -> None:
        if self._conn is not None:
            try:
                await self._conn.close()
            except Exception:  # already broken; nothing to save
                pass
            self._conn = None


def _move_sql(table: str, stage: str, columns: tuple[str, ...], identity: tuple[str, ...]) -> str:
    cols = ", ".join(columns)
    key = ", ".join(identity)
    same = " AND ".join(f"t.{column} = s.{column}" for column in identity)
    return (
        f"INSERT INTO {table} ({cols}) "
        f"SELECT DISTINCT ON ({key}) {cols} FROM {stage} s "
        f"WHERE NOT EXISTS (SELECT 1 FROM {table} t WHERE {same}) "
        f"ORDER BY {key}, seq"
    )


def _lock_buckets(batch: list[Submission]) -> list[int]:
    """Sorted lock keys for the ids in the batch; sorted so two writers never deadlock."""
    buckets: set[int] = set()
    for submission in batch:
        runs, steps, traces = submission.rows
        for row in runs:
            buckets.add(row[1].int % LOCK_BUCKETS)  # run id
        for row in steps:
            buckets.add(LOCK_BUCKETS + row[1].int % LOCK_BUCKETS)  # run id of the step
        for row in traces:
            buckets.add(2 * LOCK_BUCKETS + row[1].int % LOCK_BUCKETS)  # call id
    return sorted(buckets)


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
