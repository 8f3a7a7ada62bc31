"""Group commit: many ingest requests, one COPY and one commit.

A request hands its rows to :meth:`IngestWriter.write` and waits. A flusher
task (one per lane: a couple per server process) takes everything that is
waiting (up to ``flush_max_rows``), writes it in one transaction and then
answers every request in the batch. While a flush is in progress new requests
pile up and go together into the next one, so under load a commit serves
hundreds of requests, and with no load a request waits for just its own
commit. A request is answered only after its rows are committed:
acknowledged means durable.

Finishes ride along (lifecycle.finish_row): a finish is applied after every
other row of its batch, and its request learns whether its run was found.

Identity, not constraints, makes retries safe (see the initial migration for
why there is no unique index): a run (project, id), a step (project, run,
step_index) or a model call (project, id) already stored, or repeated within
the batch, is skipped; the first copy wins. How a lane writes a batch is in
lane.py; the statements, which also keep run counters and rollups current,
and how transactions avoid deadlocks, in statements.py.

Failures: if the database is unreachable, every request in the batch gets
:class:`DatabaseUnavailable` (503, retry); nothing was acknowledged, so nothing
is lost. If PostgreSQL rejects the data itself, the batch is bisected until
the offending request is alone, so only it fails (422) and its neighbours are
committed. Any other database error (a session that lost its prepared
statements) is retried once on a fresh connection, then answered 503. When
more than ``buffer_max_rows`` rows are waiting, new requests get
:class:`Overloaded` (503) instead of growing memory.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Protocol

import psycopg

from keelwave.server.store import refusals
from keelwave.server.store.lane import STAGES, Lane, Rows

log = logging.getLogger("keelwave.writer")

ANALYZE_AT_ROWS = (1_000, 10_000, 100_000)
# What PostgreSQL says about the rows themselves (a value out of range, a CHECK):
# the request that sent them gets a 422. Any other error is the server's side.
REJECTED_DATA = (psycopg.DataError, psycopg.IntegrityError)
TABLE_OF_STAGE = {
    "kw_stage_runs": "agent_runs",
    "kw_stage_steps": "agent_steps",
    "kw_stage_traces": "ai_traces",
}


class WriterEvents(Protocol):
    """What the writer reports as it works (the HTTP layer's metrics record it).

    A protocol, not the metrics class itself: the store knows nothing of HTTP.
    """

    def flushed(self, seconds: float, rows_by_table: dict[str, int]) -> None: ...

    def database_error(self, kind: str) -> None: ...


class _NoEvents:
    def flushed(self, seconds: float, rows_by_table: dict[str, int]) -> None:
        pass

    def database_error(self, kind: str) -> None:
        pass


class DatabaseUnavailable(Exception):
    """The batch could not be written because the database is unreachable."""


class Overloaded(Exception):
    """Too many rows are waiting for commit; the client should retry later."""


class DatabaseRefused(Exception):
    """The database refuses every write until an operator acts (refusals.py)."""


class RowsRejected(Exception):
    """PostgreSQL refused this request's rows; the message says why."""


class WriterClosed(Exception):
    """The server is shutting down and takes no more writes."""


@dataclass(slots=True)
class Submission:
    """The rows of one request, and the future its handler waits on."""

    rows: Rows
    future: asyncio.Future[list[bool]]  # whether each of its finishes found its run
    size: int = field(default=0)


class IngestWriter:
    def __init__(
        self,
        conninfo: str,
        flush_max_rows: int,
        buffer_max_rows: int,
        connect_timeout: int = 5,
        lanes: int = 2,
        metrics: WriterEvents | None = None,
        transaction_pooling: bool = False,
        refusal_reporter: refusals.Reporter | None = None,
        steps_committed: Callable[[], None] | None = None,
        lane_class: type = Lane,
    ) -> None:
        self._metrics = metrics or _NoEvents()
        # Told after every commit that stored steps (the verdict keeper, verdicts.py).
        self._steps_committed = steps_committed or (lambda: None)
        self._flush_max_rows = flush_max_rows
        self._buffer_max_rows = buffer_max_rows
        self._queue: deque[Submission] = deque()
        self._waiting_rows = 0
        self._wakeup = asyncio.Event()
        self._closing = False
        # Several lanes, each a connection committing batches: while one waits on
        # PostgreSQL, another fills the next batch. Run locks keep them apart.
        self._lanes = [
            lane_class(conninfo, connect_timeout, transaction_pooling) for _ in range(max(1, lanes))
        ]
        # On Citus (store/citus/lane.py) a transaction holds one project's requests,
        # so that it is routed to one shard: a batch is flushed project by project.
        self._per_project = getattr(lane_class, "PER_PROJECT", False)
        # Whether finishes go in the writer's transactions (write(finishes=...)); if
        # not, lifecycle.py's finisher commits them on the pool.
        self.finishes_runs = getattr(lane_class, "FINISHES", False)
        self._tasks: list[asyncio.Task] = []
        self._rows_written = [0, 0, 0]  # per stage: runs, steps, model calls
        # The cause while ingest cannot commit for a reason retrying will not cure.
        self.refusals = refusal_reporter or refusals.Reporter()

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
        finishes: list[tuple] | None = None,
    ) -> list[bool]:
        """Return once the rows are committed; raise if they could not be. Return, for
        each of ``finishes`` (lifecycle.finish_row, only if :attr:`finishes_runs`),
        whether its run was found (and finished)."""
        rows = (runs or [], steps or [], traces or [], finishes or [])
        size = sum(len(part) for part in rows)
        if size == 0:
            return []
        if self._closing:
            raise WriterClosed("the server is shutting down")
        if self._waiting_rows and self._waiting_rows + size > self._buffer_max_rows:
            raise Overloaded(f"{self._waiting_rows} rows are waiting for commit")
        future = asyncio.get_running_loop().create_future()
        self._queue.append(Submission(rows, future, size))
        self._waiting_rows += size
        self._wakeup.set()
        # shield: a client that disconnects must not cancel a write others share.
        return await asyncio.shield(future)

    # -- flushers -------------------------------------------------------------

    async def _run(self, lane: Lane) -> None:
        while True:
            if not self._queue:
                if self._closing:
                    return
                await self._wakeup.wait()
                self._wakeup.clear()
                continue
            batch = self._take_batch()
            for part in _by_project(batch) if self._per_project else (batch,):
                await self._flush(part, lane)

    def _take_batch(self) -> list[Submission]:
        batch = [self._queue.popleft()]
        rows = batch[0].size
        while self._queue and rows + self._queue[0].size <= self._flush_max_rows:
            submission = self._queue.popleft()
            rows += submission.size
            batch.append(submission)
        self._waiting_rows -= rows
        return batch

    async def _flush(self, batch: list[Submission], lane: Lane, retried: bool = False) -> None:
        started = time.perf_counter()
        try:
            found = await lane.commit([submission.rows for submission in batch])
        except psycopg.Error as error:
            await self._failed(batch, lane, error, retried)
        except OSError as error:
            await self._unavailable(batch, lane, str(error))
        except Exception as error:  # a bug: fail the requests, keep the writer alive
            log.exception("ingest flush failed")
            _settle(batch, error)
        else:
            _answer(batch, found or set())
            self.refusals.recovered()
            if any(submission.rows[1] for submission in batch):
                self._steps_committed()
            self._metrics.flushed(
                time.perf_counter() - started,
                {
                    TABLE_OF_STAGE[stage]: sum(len(s.rows[position]) for s in batch)
                    for position, stage, _, _ in STAGES
                },
            )
            await self._analyze_young_tables(batch, lane)

    async def _failed(
        self, batch: list[Submission], lane: Lane, error: psycopg.Error, retried: bool
    ) -> None:
        """Answer a batch PostgreSQL did not commit, by what the error means."""
        if refusals.cause(error):
            # Until an operator acts, every attempt fails alike (refusals.py).
            await lane.drop()  # the next attempt connects afresh, and sees any fix
            self._metrics.database_error("refused")
            _settle(batch, DatabaseRefused(self.refusals.refused("ingest", error)))
        elif isinstance(error, psycopg.OperationalError):
            await self._unavailable(batch, lane, str(error))
        elif isinstance(error, REJECTED_DATA):
            if len(batch) > 1:
                # Find the request(s) PostgreSQL objects to by bisection: a flush of
                # n requests with one bad costs about 2·log2(n) transactions.
                half = len(batch) // 2
                await self._flush(batch[:half], lane)
                await self._flush(batch[half:], lane)
                return
            log.info("ingest rows rejected by the database: %s", error)
            self._metrics.database_error("rejected")
            _settle(batch, RowsRejected(_describe(error)))
        else:
            # Not the data: the session lost something it relies on (prepared
            # statements after DEALLOCATE ALL or behind a pooler, a staging table).
            # A fresh connection rebuilds all of it; if that fails too, the client
            # gets a 503 to retry, never a 4xx it would treat as final.
            await lane.drop()
            if _session_lost(error) and not lane.transaction_pooling:
                log.warning(
                    "the writer's database session lost what it kept there (%s): a pooler "
                    "in transaction mode? Writing without session state from now on; set "
                    "KEELWAVE_DATABASE_POOLING=transaction to start so",
                    _describe(error),
                )
                for each in self._lanes:
                    each.transaction_pooling = True
            if not retried:
                log.info("ingest flush retried on a new connection: %s", error)
                await self._flush(batch, lane, retried=True)
                return
            log.warning("ingest flush failed twice on the database's side: %s", error)
            self._metrics.database_error("unavailable")
            _settle(batch, DatabaseUnavailable(_describe(error)))

    async def _unavailable(self, batch: list[Submission], lane: Lane, why: str) -> None:
        log.warning("ingest flush failed, database unavailable: %s", why)
        self._metrics.database_error("unavailable")
        await lane.drop()
        _settle(batch, DatabaseUnavailable(why))

    async def _analyze_young_tables(self, batch: list[Submission], lane: Lane) -> None:
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


def _by_project(batch: list[Submission]) -> list[list[Submission]]:
    """The batch's requests grouped by project (every row's first column), in order."""
    groups: dict[object, list[Submission]] = {}
    for submission in batch:
        project = next(part[0][0] for part in submission.rows if part)
        groups.setdefault(project, []).append(submission)
    return list(groups.values())


def _answer(batch: list[Submission], found: set[int]) -> None:
    """Tell each request of a committed batch which of its finishes found their run;
    ``found`` numbers the batch's finishes in order from 0."""
    first = 0
    for submission in batch:
        finishes = len(submission.rows[3])
        if not submission.future.done():
            submission.future.set_result([n in found for n in range(first, first + finishes)])
        first += finishes


def _settle(batch: list[Submission], error: BaseException) -> None:
    for submission in batch:
        if not submission.future.done():
            submission.future.set_exception(error)


def _session_lost(error: psycopg.Error) -> bool:
    """A prepared statement or a staging table of the lane's session is gone."""
    return isinstance(error, psycopg.errors.InvalidSqlStatementName) or (
        isinstance(error, psycopg.errors.UndefinedTable) and "kw_" in str(error)
    )


def _describe(error: psycopg.Error) -> str:
    diag = error.diag
    return diag.message_primary or str(error).splitlines()[0]
