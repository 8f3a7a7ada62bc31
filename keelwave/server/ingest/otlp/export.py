"""Storing an OTLP trace export, whatever carried it (HTTP or gRPC).

:func:`check` keeps the spans that can be stored and says why the others
cannot (OTLP's ``partial_success``); :class:`TraceIngest` stores them in one
transaction (store/traces.py) and turns what the database says into the few
outcomes an exporter acts on: done, retry later (:class:`Unavailable`,
:class:`Overloaded`), or do not retry (:class:`Rejected`). Each transport
answers those in its own words.

Exports of one project are committed together when they wait for each other (group
commit, as native ingest's writer does): while WRITES_PER_PROJECT transactions of a
project are under way, the exports that arrive queue, and the next transaction takes
all of them (up to GROUP_SPANS spans). A transaction costs about twenty statements and
a flush of the WAL whatever it holds; a fleet of exporters sending at once shares
them instead of each paying them. An export alone waits for nothing. Every export is
answered after the commit that holds it; one the database refuses (a DataError) is
refused alone: its group is written again export by export.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import Callable
from dataclasses import dataclass

import msgspec
import psycopg
import psycopg_pool

from keelwave.server.http.errors import REFUSED_RETRY_AFTER, refused
from keelwave.server.ingest.otlp import conventions, decode, stored
from keelwave.server.ingest.otlp.projection import projection
from keelwave.server.ingest.pricing import PriceTable
from keelwave.server.redaction import BUILTIN, ServerRedaction
from keelwave.server.store import refusals, traces

log = logging.getLogger("keelwave.otlp")

# How many exports may wait for a database connection at once before new ones are
# told to come back later, instead of piling up in memory.
MAX_WAITING_EXPORTS = 64
# Transactions of one project under way at once in a server process; the exports that
# arrive meanwhile are written together by the next one, up to GROUP_SPANS spans.
WRITES_PER_PROJECT = 2
GROUP_SPANS = 4096


class Accepted(msgspec.Struct, frozen=True):
    """Spans decoded and checked, ready to store; those refused, and why."""

    spans: list[tuple[bytes, bytes, bytes]]  # (trace id, span id, stored form)
    rejected: int
    message: str
    # The stored forms decoded, by (trace id, span id): what the projection would get
    # from decoding them (stored.kept), so the spans that are new need no decoding.
    kept: dict[tuple[bytes, bytes], decode.Span] = msgspec.field(default_factory=dict)
    # Their roles (conventions.role), where check read them: the mapping need not again.
    roles: dict[tuple[bytes, bytes], str] = msgspec.field(default_factory=dict)


class Unavailable(Exception):
    """The database is down or refuses writes: retry after ``retry_after`` seconds."""

    def __init__(self, message: str, retry_after: int) -> None:
        super().__init__(message)
        self.retry_after = retry_after


class Overloaded(Unavailable):
    """Too many exports are waiting for the database."""


class Rejected(Exception):
    """The database rejected the data itself: retrying the same export will not help."""


def check(spans: list[decode.Span], rules: ServerRedaction = BUILTIN) -> Accepted:
    """Keep the spans that can be stored; count and say why the others cannot."""
    rows: dict[tuple[bytes, bytes], tuple[bytes, bytes, bytes]] = {}
    kept: dict[tuple[bytes, bytes], decode.Span] = {}
    roles: dict[tuple[bytes, bytes], str] = {}
    problems: dict[str, int] = {}
    resources: dict[int, dict] = {}  # redacted once per resource (stored.kept)
    for span in spans:
        problem = _problem(span)
        if problem is None:
            key = (span.trace_id, span.span_id)
            if key in rows:  # the same span twice in one export: the first one counts
                continue
            try:
                # (a root span keeps all it has, whatever its role: read when mapped)
                role = None if span.parent_span_id is None else conventions.role(span)
                form = stored.kept(span, rules, resources, role)
                rows[key] = (span.trace_id, span.span_id, stored.encode_kept(form))
                kept[key] = form
                if role is not None and form is span:  # (a leaner form is mapped anew)
                    roles[key] = role
                continue
            except (OverflowError, TypeError, ValueError):
                problem = "an attribute value cannot be stored (an integer beyond 64 bits?)"
        problems[problem] = problems.get(problem, 0) + 1
    rejected = sum(problems.values())
    message = "; ".join(f"{count} span(s): {why}" for why, count in problems.items())
    return Accepted(list(rows.values()), rejected, message, kept, roles)


def _problem(span: decode.Span) -> str | None:
    if type(span) is decode.UnreadableSpan:
        return span.problem
    if len(span.trace_id) != 16 or not any(span.trace_id):
        return "traceId must be 16 bytes, not all zero"
    if len(span.span_id) != 8 or not any(span.span_id):
        return "spanId must be 8 bytes, not all zero"
    if span.parent_span_id is not None and len(span.parent_span_id) != 8:
        return "parentSpanId must be 8 bytes"
    if span.start_ns <= 0:
        return "startTimeUnixNano is missing"
    if span.end_ns and span.end_ns < span.start_ns:
        return "endTimeUnixNano is before startTimeUnixNano"
    return None


@dataclass(slots=True)
class _Queued:
    """An export waiting for the transaction that will hold it."""

    accepted: Accepted
    where: str
    done: asyncio.Future[None]


class TraceIngest:
    """Stores checked exports for every transport of one server process."""

    def __init__(
        self,
        pool: psycopg_pool.AsyncConnectionPool,
        prices: PriceTable,
        reporter: refusals.Reporter,
        retry_after: int,
        stored: Callable[[], None] = lambda: None,
        pending_tools: bool = False,
    ) -> None:
        self._pool = pool
        self._stored = stored  # told after each commit (the verdict keeper)
        # Finished runs' tool calls left for the server's fold (store/pending_tools.py)
        self._pending_tools = pending_tools
        self._prices = prices
        self._reporter = reporter
        self._retry_after = retry_after
        self._waiting = 0
        self._queued: dict[uuid.UUID, list[_Queued]] = {}
        self._writing: dict[uuid.UUID, int] = {}
        self._tasks: set[asyncio.Task] = set()

    async def store(self, project_id: uuid.UUID, accepted: Accepted, where: str) -> None:
        """Commit the accepted spans and their runs; raise what an exporter must act on."""
        if not accepted.spans:
            return
        if self._waiting >= MAX_WAITING_EXPORTS:
            raise Overloaded(
                "too many exports are waiting for the database; retry shortly", self._retry_after
            )
        self._waiting += 1
        try:
            done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
            # (an exporter that gave up leaves its outcome unread: read it here)
            done.add_done_callback(lambda future: future.cancelled() or future.exception())
            self._queued.setdefault(project_id, []).append(_Queued(accepted, where, done))
            self._start(project_id)
            # shield: an exporter that gives up must not cancel a commit half-way.
            await asyncio.shield(done)
        finally:
            self._waiting -= 1

    def _start(self, project_id: uuid.UUID) -> None:
        """Begin transactions for the project's queued exports, as far as its share allows."""
        queue = self._queued.get(project_id)
        while queue and self._writing.get(project_id, 0) < WRITES_PER_PROJECT:
            group, spans = [], 0
            while queue and (not group or spans + len(queue[0].accepted.spans) <= GROUP_SPANS):
                spans += len(queue[0].accepted.spans)
                group.append(queue.pop(0))
            self._writing[project_id] = self._writing.get(project_id, 0) + 1
            task = asyncio.create_task(self._write(project_id, group))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)
        if not queue:
            self._queued.pop(project_id, None)

    async def _write(self, project_id: uuid.UUID, group: list[_Queued]) -> None:
        stopping = False
        try:
            try:
                await self._commit(project_id, group)
            except Rejected:
                if len(group) == 1:
                    raise
                for queued in group:  # which export did the database refuse? each alone
                    try:
                        await self._commit(project_id, [queued])
                    except Exception as error:
                        queued.done.set_exception(error)
                    else:
                        queued.done.set_result(None)
            else:
                for queued in group:
                    queued.done.set_result(None)
        except Exception as error:  # told to every export of the group
            for queued in group:
                if not queued.done.done():
                    queued.done.set_exception(error)
        except BaseException:  # (cancelled: the server is stopping)
            stopping = True
            for queued in group:
                queued.done.cancel()
            raise
        finally:
            self._writing[project_id] -= 1
            if not self._writing[project_id]:
                del self._writing[project_id]
            if not stopping:
                self._start(project_id)

    async def _commit(self, project_id: uuid.UUID, group: list[_Queued]) -> None:
        """One transaction for the group's exports; what the database said, translated."""
        spans, fresh, roles = [], {}, {}
        for queued in group:
            spans += queued.accepted.spans
            for key, span in queued.accepted.kept.items():
                if key not in fresh:  # (a span in two exports: the first one counts)
                    fresh[key] = span
                    if key in queued.accepted.roles:
                        roles[key] = queued.accepted.roles[key]
        where = group[0].where
        write = traces.store_export(
            self._pool,
            project_id,
            spans,
            projection(project_id, self._prices, fresh, roles),
            self._pending_tools,
        )
        try:
            await write
        except psycopg.DataError as error:
            message = error.diag.message_primary or str(error).splitlines()[0]
            raise Rejected(f"the database rejected this export: {message}") from None
        except psycopg.Error as error:
            if refusals.cause(error):
                cause = self._reporter.refused(where, error)
                raise Unavailable(refused(cause).message, REFUSED_RETRY_AFTER) from None
            if not isinstance(
                error, psycopg.OperationalError | psycopg.errors.InvalidSqlStatementName
            ):
                raise  # a bug: the transport logs it and answers an internal error
            log.warning("OTLP export not stored, database unavailable: %s", error)
            raise Unavailable(
                "the database is unavailable; retry shortly", self._retry_after
            ) from None
        except (psycopg_pool.PoolTimeout, OSError) as error:
            log.warning("OTLP export not stored, database unavailable: %s", error)
            raise Unavailable(
                "the database is unavailable; retry shortly", self._retry_after
            ) from None
        else:
            self._reporter.recovered()
            self._stored()
