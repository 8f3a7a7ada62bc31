"""Storing an OTLP trace export, whatever carried it (HTTP or gRPC).

:func:`check` keeps the spans that can be stored and says why the others
cannot (OTLP's ``partial_success``); :class:`TraceIngest` stores them in one
transaction (store/traces.py) and turns what the database says into the few
outcomes an exporter acts on: done, retry later (:class:`Unavailable`,
:class:`Overloaded`), or do not retry (:class:`Rejected`). Each transport
answers those in its own words.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import Callable

import msgspec
import psycopg
import psycopg_pool

from keelwave.server.http.errors import REFUSED_RETRY_AFTER, refused
from keelwave.server.ingest.otlp import decode, stored
from keelwave.server.ingest.otlp.projection import projection
from keelwave.server.ingest.pricing import PriceTable
from keelwave.server.redaction import BUILTIN, ServerRedaction
from keelwave.server.store import refusals, traces

log = logging.getLogger("keelwave.otlp")

# How many exports may wait for a database connection at once before new ones are
# told to come back later, instead of piling up in memory.
MAX_WAITING_EXPORTS = 64


class Accepted(msgspec.Struct, frozen=True):
    """Spans decoded and checked, ready to store; those refused, and why."""

    spans: list[tuple[bytes, bytes, bytes]]  # (trace id, span id, stored form)
    rejected: int
    message: str
    # The stored forms decoded, by (trace id, span id): what the projection would get
    # from decoding them (stored.kept), so the spans that are new need no decoding.
    kept: dict[tuple[bytes, bytes], decode.Span] = msgspec.field(default_factory=dict)


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
    problems: dict[str, int] = {}
    resources: dict[int, dict] = {}  # redacted once per resource (stored.kept)
    for span in spans:
        problem = _problem(span)
        if problem is None:
            key = (span.trace_id, span.span_id)
            if key in rows:  # the same span twice in one export: the first one counts
                continue
            try:
                form = stored.kept(span, rules, resources)
                rows[key] = (span.trace_id, span.span_id, stored.encode_kept(form))
                kept[key] = form
                continue
            except (OverflowError, TypeError, ValueError):
                problem = "an attribute value cannot be stored (an integer beyond 64 bits?)"
        problems[problem] = problems.get(problem, 0) + 1
    rejected = sum(problems.values())
    message = "; ".join(f"{count} span(s): {why}" for why, count in problems.items())
    return Accepted(list(rows.values()), rejected, message, kept)


def _problem(span: decode.Span) -> str | None:
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


class TraceIngest:
    """Stores checked exports for every transport of one server process."""

    def __init__(
        self,
        pool: psycopg_pool.AsyncConnectionPool,
        prices: PriceTable,
        reporter: refusals.Reporter,
        retry_after: int,
        stored: Callable[[], None] = lambda: None,
    ) -> None:
        self._pool = pool
        self._stored = stored  # told after each commit (the verdict keeper)
        self._prices = prices
        self._reporter = reporter
        self._retry_after = retry_after
        self._waiting = 0

    async def store(self, project_id: uuid.UUID, accepted: Accepted, where: str) -> None:
        """Commit the accepted spans and their runs; raise what an exporter must act on."""
        if not accepted.spans:
            return
        if self._waiting >= MAX_WAITING_EXPORTS:
            raise Overloaded(
                "too many exports are waiting for the database; retry shortly", self._retry_after
            )
        self._waiting += 1
        write = traces.store_export(
            self._pool,
            project_id,
            accepted.spans,
            projection(project_id, self._prices, accepted.kept),
        )
        try:
            # shield: an exporter that gives up must not cancel a commit half-way.
            await asyncio.shield(write)
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
        finally:
            self._waiting -= 1
