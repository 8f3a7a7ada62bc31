"""POST /v1/traces: OTLP/HTTP trace exports, protobuf or JSON, as keelwave runs.

What an OpenTelemetry exporter pointed at keelwave gets, as the OTLP
specification says: 200 with an ExportTraceServiceResponse in the request's
encoding (``partial_success`` naming the spans refused and why), and for a
failure a ``google.rpc.Status`` in that encoding with the HTTP status the
exporters act on: 400 (do not retry), 401/403, 413, 415, and 503 or 429 with
``Retry-After`` (retry). Acknowledged means committed.

aiohttp undoes ``Content-Encoding: gzip`` and ``deflate`` as it reads the
body, counting the decompressed bytes against the body limit (413).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable

import msgspec
import psycopg
import psycopg_pool
from aiohttp import web

from keelwave.server.http import appkeys
from keelwave.server.http.auth import INGEST
from keelwave.server.http.errors import ApiError, refused, unavailable
from keelwave.server.http.operations import ApiRoutes
from keelwave.server.ingest.otlp import decode, stored
from keelwave.server.ingest.otlp.projection import projection
from keelwave.server.ingest.routes import PRICES
from keelwave.server.store import refusals, traces

log = logging.getLogger("keelwave.otlp")
routes = ApiRoutes("otlp")

PROTOBUF = "application/x-protobuf"
JSON = "application/json"
# How many exports may wait for a database connection at once before new ones are
# told to come back later (429 with Retry-After), instead of piling up in memory.
MAX_WAITING_EXPORTS = 64
# gRPC status codes, which google.rpc.Status carries, by HTTP status.
_GRPC_CODES = {400: 3, 401: 16, 403: 7, 404: 5, 413: 8, 415: 3, 422: 3, 429: 8, 503: 14}


class PartialSuccess(msgspec.Struct, rename="camel", omit_defaults=True):
    rejected_spans: str = "0"  # an int64, a string in OTLP JSON
    error_message: str = ""


class ExportTraceServiceResponse(msgspec.Struct, rename="camel", omit_defaults=True):
    """What OTLP answers an export (JSON form; protobuf carries the same fields)."""

    partial_success: PartialSuccess | None = None


class Status(msgspec.Struct):
    """google.rpc.Status, what an OTLP failure carries (protobuf, or JSON as here)."""

    code: int  # a gRPC status code: 3 invalid argument, 14 unavailable, ...
    message: str


class Accepted(msgspec.Struct, frozen=True):
    """Spans decoded and checked, ready to store; those refused, and why."""

    spans: list[tuple[bytes, bytes, bytes]]  # (trace id, span id, stored form)
    rejected: int
    message: str


def check(spans: list[decode.Span]) -> Accepted:
    """Keep the spans that can be stored; count and say why the others cannot."""
    kept: dict[tuple[bytes, bytes], tuple[bytes, bytes, bytes]] = {}
    problems: dict[str, int] = {}
    for span in spans:
        problem = _problem(span)
        if problem is None:
            try:
                kept.setdefault(
                    (span.trace_id, span.span_id),
                    (span.trace_id, span.span_id, stored.encode(span)),
                )
                continue
            except (OverflowError, TypeError, ValueError):
                problem = "an attribute value cannot be stored (an integer beyond 64 bits?)"
        problems[problem] = problems.get(problem, 0) + 1
    rejected = sum(problems.values())
    message = "; ".join(f"{count} span(s): {why}" for why, count in problems.items())
    return Accepted(list(kept.values()), rejected, message)


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


def status_body(status: int, message: str, as_json: bool) -> bytes:
    """A google.rpc.Status: {code, message}, in the request's encoding."""
    code = _GRPC_CODES.get(status, 2)  # 2: UNKNOWN
    if as_json:
        return msgspec.json.encode(Status(code, message))
    text = message.encode()
    # field 1 (code): varint; field 2 (message): length-delimited
    return b"\x08" + _varint(code) + b"\x12" + _varint(len(text)) + text


def _varint(value: int) -> bytes:
    out = bytearray()
    while True:
        byte = value & 0x7F
        value >>= 7
        if value:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def _failure(error: ApiError, as_json: bool) -> web.Response:
    return web.Response(
        status=error.status,
        body=status_body(error.status, error.message, as_json),
        content_type=JSON if as_json else PROTOBUF,
        headers=error.headers,
    )


# [count]: exports waiting for the database, per app (app.py sets it up).
WAITING = web.AppKey("otlp_waiting", list)


@routes.post(
    "/v1/traces",
    summary="Send OpenTelemetry traces (OTLP/HTTP)",
    response=ExportTraceServiceResponse,
    body_formats={
        PROTOBUF: "An ExportTraceServiceRequest (opentelemetry-proto), as OTLP/HTTP sends it",
        JSON: "The same in OTLP's JSON encoding (hex trace and span ids)",
    },
    error=Status,
)
async def export_traces(request: web.Request) -> web.Response:
    """Store an OTLP trace export and map its spans onto runs, steps and model calls
    (docs/otlp.md). A retried export is accepted again and stores nothing twice."""
    media = request.content_type.lower()
    as_json = media == JSON
    try:
        return await _export(request, media, as_json)
    except ApiError as error:
        return _failure(error, as_json)
    except web.HTTPRequestEntityTooLarge:
        limit = request.client_max_size
        message = f"request body too large after decompression (limit {limit} bytes)"
        return _failure(ApiError(413, "too_large", message), as_json)
    except web.HTTPException as error:  # a body aiohttp could not read or decompress
        if error.status < 400:
            raise
        return _failure(ApiError(error.status, "bad_request", error.reason), as_json)


async def _export(request: web.Request, media: str, as_json: bool) -> web.Response:
    if media not in (PROTOBUF, JSON):
        raise ApiError(
            415,
            "unsupported_media_type",
            f"Content-Type {media or '(none)'!r} is not OTLP: send {PROTOBUF} or {JSON}",
        )
    principal = await request.app[appkeys.KEYSTORE].authenticate(request, INGEST)
    body = await request.read()
    try:
        spans = decode.from_json(body) if as_json else decode.from_protobuf(body)
    except decode.DecodeError as error:
        raise ApiError(400, "malformed_otlp", str(error)) from None
    accepted = check(spans)
    if accepted.spans:
        project_id = principal.project_uuid
        prices = request.app[PRICES]
        await _store(
            request,
            lambda pool: traces.store_export(
                pool, project_id, accepted.spans, projection(project_id, prices)
            ),
        )
    answer = ExportTraceServiceResponse(
        PartialSuccess(str(accepted.rejected), accepted.message) if accepted.rejected else None
    )
    if as_json:
        return web.Response(body=msgspec.json.encode(answer), content_type=JSON)
    body, _ = decode.response(accepted.rejected, accepted.message, as_json=False)
    return web.Response(body=body, content_type=PROTOBUF)


async def _store(
    request: web.Request, write: Callable[[psycopg_pool.AsyncConnectionPool], Awaitable[int]]
) -> None:
    """Run ``write`` on the pool, answering what the database says as OTLP expects:
    503 with Retry-After while it is down or refuses, 429 while too many wait."""
    app = request.app
    settings = app[appkeys.SETTINGS]
    waiting = app[WAITING]
    if waiting[0] >= MAX_WAITING_EXPORTS:
        raise ApiError(
            429,
            "overloaded",
            "too many exports are waiting for the database; retry shortly",
            headers={"Retry-After": str(settings.retry_after_seconds)},
        )
    waiting[0] += 1
    try:
        # shield: an exporter that gives up must not cancel a commit half-way.
        await asyncio.shield(write(app[appkeys.POOL]))
    except psycopg.DataError as error:
        message = error.diag.message_primary or str(error).splitlines()[0]
        raise ApiError(400, "rejected", f"the database rejected this export: {message}") from None
    except psycopg.Error as error:
        if refusals.cause(error):
            raise refused(app[appkeys.REFUSALS].refused("POST /v1/traces", error)) from None
        if not isinstance(error, psycopg.OperationalError | psycopg.errors.InvalidSqlStatementName):
            raise  # a bug: the error middleware logs it and answers 500
        log.warning("OTLP export not stored, database unavailable: %s", error)
        raise unavailable(settings.retry_after_seconds) from None
    except (psycopg_pool.PoolTimeout, OSError) as error:
        log.warning("OTLP export not stored, database unavailable: %s", error)
        raise unavailable(settings.retry_after_seconds) from None
    finally:
        waiting[0] -= 1
