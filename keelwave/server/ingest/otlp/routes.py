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

import msgspec
from aiohttp import web

from keelwave.server.http import appkeys
from keelwave.server.http.auth import INGEST
from keelwave.server.http.errors import ApiError, unreadable_body
from keelwave.server.http.operations import ApiRoutes
from keelwave.server.ingest.otlp import decode, export

routes = ApiRoutes("otlp")
# Each server process's TraceIngest (app.py makes it once the pool is open).
INGEST_KEY = web.AppKey("otlp_ingest", export.TraceIngest)

PROTOBUF = "application/x-protobuf"
JSON = "application/json"
# What aiohttp undoes as it reads a body (OTLP exporters send gzip or nothing).
_ENCODINGS = ("", "identity", "gzip", "deflate")
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
    except web.RequestPayloadError as error:
        answer = _failure(unreadable_body(error), as_json)
        answer.force_close()  # (where the unread body ends is unknown: no keep-alive)
        return answer
    except web.HTTPRequestEntityTooLarge:
        limit = request.app[appkeys.SETTINGS].otlp_max_body_bytes
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
    encoding = request.headers.get("Content-Encoding", "").strip().lower()
    if encoding not in _ENCODINGS:  # (aiohttp would hand the bytes on still encoded)
        raise ApiError(
            415,
            "unsupported_media_type",
            f"Content-Encoding {encoding!r} is not supported: send gzip, deflate or none",
        )
    principal = await request.app[appkeys.KEYSTORE].authenticate(request, INGEST)
    # (exports have a limit of their own: settings.otlp_max_body_bytes says why)
    limit = request.app[appkeys.SETTINGS].otlp_max_body_bytes
    body = await request.clone(client_max_size=limit).read()
    try:
        spans = decode.from_json(body) if as_json else decode.from_protobuf(body)
    except decode.DecodeError as error:
        raise ApiError(400, "malformed_otlp", str(error)) from None
    accepted = export.check(spans, principal.redaction)
    try:
        await request.app[INGEST_KEY].store(principal.project_uuid, accepted, "POST /v1/traces")
    except export.Overloaded as error:
        raise ApiError(429, "overloaded", str(error), headers=_retry(error)) from None
    except export.Unavailable as error:
        raise ApiError(503, "database_unavailable", str(error), headers=_retry(error)) from None
    except export.Rejected as error:
        raise ApiError(400, "rejected", str(error)) from None
    answer = ExportTraceServiceResponse(
        PartialSuccess(str(accepted.rejected), accepted.message) if accepted.rejected else None
    )
    if as_json:
        return web.Response(body=msgspec.json.encode(answer), content_type=JSON)
    body, _ = decode.response(accepted.rejected, accepted.message, as_json=False)
    return web.Response(body=body, content_type=PROTOBUF)


def _retry(error: export.Unavailable) -> dict[str, str]:
    return {"Retry-After": str(error.retry_after)}
