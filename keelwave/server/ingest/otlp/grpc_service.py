"""OTLP/gRPC trace exports (``TraceService/Export``), on a port of their own.

The same store and the same guarantees as OTLP/HTTP (routes.py), answered in
gRPC's words, as the OTLP specification maps them: an
``ExportTraceServiceResponse`` once committed (``partial_success`` naming the
spans refused and why), UNAUTHENTICATED / PERMISSION_DENIED for the key,
INVALID_ARGUMENT for a message that is not an export or data the database
rejects (exporters do not retry), and UNAVAILABLE or RESOURCE_EXHAUSTED with a
``google.rpc.RetryInfo`` (exporters retry after its delay). grpc itself
refuses a message larger than ``otlp_max_body_bytes`` (RESOURCE_EXHAUSTED) and
undoes gzip, counting the decompressed bytes against that limit, as aiohttp
does for OTLP/HTTP.

grpcio is an optional extra: this module is imported only when the gRPC port
is on (app.py).
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import logging
import os
from collections.abc import AsyncIterator

import grpc
import psycopg
import psycopg_pool
from google.protobuf import any_pb2, duration_pb2
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2

from keelwave.server.http.auth import INGEST, KeyStore, Principal
from keelwave.server.http.errors import ApiError
from keelwave.server.ingest.otlp import decode, export

log = logging.getLogger("keelwave.otlp")

SERVICE = trace_service_pb2.DESCRIPTOR.services_by_name["TraceService"].full_name
EXPORT = f"/{SERVICE}/Export"
# How long a stopping server lets exports in flight commit (as aiohttp's shutdown_timeout).
GRACE_SECONDS = 30.0


class TraceService:
    """``Export``: authenticate, decode, check, store, answer; as POST /v1/traces does.

    Registered as opentelemetry-proto's generated ``add_TraceServiceServicer_to_server``
    would, but for one thing (:func:`_register`): the request arrives as bytes and is
    parsed here, after the key is checked. The generated handler parses first, and
    answers a malformed message with UNKNOWN and an error traceback in the log, for
    anyone, key or not; here it is INVALID_ARGUMENT, as OTLP/HTTP's 400.
    """

    def __init__(self, keystore: KeyStore, ingest: export.TraceIngest, retry_after: int) -> None:
        self._keystore = keystore
        self._ingest = ingest
        self._retry_after = retry_after

    async def export_traces(
        self, body: bytes, context: grpc.aio.ServicerContext
    ) -> trace_service_pb2.ExportTraceServiceResponse:
        try:
            return await self._export(body, context)
        except _Refused as refused:
            await context.abort(refused.code, refused.message, refused.trailers)
        except Exception:
            # A bug: logged, answered, and the server goes on serving.
            log.exception("unhandled error in OTLP/gRPC %s", EXPORT)
            await context.abort(grpc.StatusCode.INTERNAL, "internal server error")
        raise AssertionError("context.abort always raises")

    async def _export(
        self, body: bytes, context: grpc.aio.ServicerContext
    ) -> trace_service_pb2.ExportTraceServiceResponse:
        principal = await self._principal(context)
        try:
            spans = decode.from_protobuf(body)
        except decode.DecodeError as error:
            raise _Refused(grpc.StatusCode.INVALID_ARGUMENT, str(error)) from None
        accepted = export.check(spans, principal.redaction)
        try:
            # Returns once committed: acknowledged means stored.
            await self._ingest.store(principal.project_uuid, accepted, EXPORT)
        except export.Overloaded as error:
            raise _retry_later(grpc.StatusCode.RESOURCE_EXHAUSTED, error) from None
        except export.Unavailable as error:
            raise _retry_later(grpc.StatusCode.UNAVAILABLE, error) from None
        except export.Rejected as error:
            raise _Refused(grpc.StatusCode.INVALID_ARGUMENT, str(error)) from None
        answer = trace_service_pb2.ExportTraceServiceResponse()
        if accepted.rejected:
            answer.partial_success.rejected_spans = accepted.rejected
            answer.partial_success.error_message = accepted.message
        return answer

    async def _principal(self, context: grpc.aio.ServicerContext) -> Principal:
        # gRPC metadata keys are lowercase: what OTEL_EXPORTER_OTLP_HEADERS=authorization=…
        # (or Authorization=…, which the exporters lowercase) sends.
        authorization = next(
            (value for key, value in context.invocation_metadata() or () if key == "authorization"),
            None,
        )
        try:
            return await self._keystore.authenticate(_KeyRequest(authorization), INGEST)
        except ApiError as error:
            code = grpc.StatusCode.PERMISSION_DENIED
            if error.status != 403:
                code = grpc.StatusCode.UNAUTHENTICATED
            raise _Refused(code, error.message) from None
        except (
            psycopg.OperationalError,
            psycopg.errors.InvalidSqlStatementName,  # a pooler's session lost it: an outage
            psycopg_pool.PoolTimeout,
        ) as error:
            log.warning("database unavailable during OTLP/gRPC %s: %s", EXPORT, error)
            outage = export.Unavailable(
                "the database is unavailable; retry shortly", self._retry_after
            )
            raise _retry_later(grpc.StatusCode.UNAVAILABLE, outage) from None


class _KeyRequest:
    """What KeyStore.authenticate reads of an HTTP request, its Authorization header, made
    from gRPC metadata: both transports check keys alike and share the key cache."""

    def __init__(self, authorization: str | None) -> None:
        self.headers = {"Authorization": authorization} if authorization else {}


class _Refused(Exception):
    """An export answered with a gRPC status instead of a response."""

    def __init__(
        self, code: grpc.StatusCode, message: str, trailers: tuple[tuple[str, bytes], ...] = ()
    ) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.trailers = trailers


def _retry_later(code: grpc.StatusCode, error: export.Unavailable) -> _Refused:
    return _Refused(code, str(error), _retry_info(code, str(error), error.retry_after))


def _retry_info(code: grpc.StatusCode, message: str, seconds: int) -> tuple[tuple[str, bytes], ...]:
    """A ``google.rpc.RetryInfo`` with the delay, in the two places exporters look for it:
    its own trailer (the Python exporter) and a detail of the ``google.rpc.Status`` in
    ``grpc-status-details-bin`` (the Collector's exporters, the Go SDK's).

    Encoded here: google.rpc's messages are not in protobuf itself, and a package
    for two messages of two fields each is not worth a dependency.
    """
    delay = duration_pb2.Duration(seconds=seconds).SerializeToString()
    retry_info = _bytes_field(1, delay)  # RetryInfo.retry_delay = 1
    detail = any_pb2.Any(type_url="type.googleapis.com/google.rpc.RetryInfo", value=retry_info)
    status = (  # Status: code = 1, message = 2, repeated Any details = 3
        _varint(1 << 3) + _varint(code.value[0])
        + _bytes_field(2, message.encode())
        + _bytes_field(3, detail.SerializeToString())
    )  # fmt: skip
    return (("google.rpc.retryinfo-bin", retry_info), ("grpc-status-details-bin", status))


def _bytes_field(number: int, payload: bytes) -> bytes:
    return _varint(number << 3 | 2) + _varint(len(payload)) + payload  # 2: length-delimited


def _varint(value: int) -> bytes:
    out = bytearray()
    while value > 0x7F:
        out.append(value & 0x7F | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def _register(service: TraceService, server: grpc.aio.Server) -> None:
    """What add_TraceServiceServicer_to_server does, without a request deserializer:
    grpc hands ``service.export_traces`` the message's bytes."""
    method = grpc.unary_unary_rpc_method_handler(
        service.export_traces,
        response_serializer=trace_service_pb2.ExportTraceServiceResponse.SerializeToString,
    )
    server.add_generic_rpc_handlers(
        (grpc.method_handlers_generic_handler(SERVICE, {"Export": method}),)
    )


@contextlib.asynccontextmanager
async def serving(
    service: TraceService, host: str, port: int, max_message_bytes: int
) -> AsyncIterator[int]:
    """Serve ``service`` on ``host:port`` until the block ends, then stop gracefully.

    Yields the port bound. SO_REUSEPORT lets every ``serve`` worker bind the same
    port, as their HTTP sites do, and the kernel spreads connections over them.
    """
    server = grpc.aio.server(
        options=[
            ("grpc.max_receive_message_length", max_message_bytes),
            ("grpc.so_reuseport", 1),  # (grpc's default on Linux; said, since workers need it)
        ]
    )
    _register(service, server)
    address = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
    try:
        bound = server.add_insecure_port(address)
    except RuntimeError:  # grpc says only "Failed to bind"
        await server.stop(None)
        raise OSError(errno.EADDRINUSE, f"cannot listen for OTLP/gRPC on {address}") from None
    await server.start()
    log.info("OTLP/gRPC listening on %s (process %d)", address, os.getpid())
    try:
        yield bound
    finally:
        # Stop taking exports, and let those in flight commit and be answered. Bounded:
        # grpc.aio's stop has been seen never to finish in a process that ran gRPC
        # servers on several event loops one after the other (the tests do), and a
        # shutdown must not hang on it.
        # (Not asyncio.wait_for: on its timeout it cancels the stop and then waits for
        # that to finish, which a stop that never finishes does not either.)
        stopping = asyncio.ensure_future(server.stop(GRACE_SECONDS))
        done, _ = await asyncio.wait({stopping}, timeout=GRACE_SECONDS + 5)
        if not done:
            stopping.cancel()  # (not awaited, for the same reason)
            log.warning("OTLP/gRPC did not stop within %s s; leaving it", GRACE_SECONDS + 5)
