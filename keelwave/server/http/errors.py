"""One error format for every endpoint, and the middleware that enforces it.

Every failure a client can cause is answered as
``{"error": {"code", "message", "field"?}}`` with a 4xx status; a database
that cannot be reached is a 503 with Retry-After. A 500 means a bug in
keelwave, is logged with its traceback, and never carries internals.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable

import msgspec
import psycopg
import psycopg_pool
from aiohttp import web
from aiohttp.http_exceptions import HttpProcessingError

from keelwave.server.http.responses import json_response
from keelwave.server.store import refusals

log = logging.getLogger("keelwave.server")

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]

# Status codes aiohttp raises itself, mapped to our error codes.
_HTTP_CODES = {
    400: "bad_request",
    404: "not_found",
    405: "method_not_allowed",
    413: "payload_too_large",
    415: "unsupported_media_type",
}


class ErrorDetail(msgspec.Struct, omit_defaults=True):
    code: str
    message: str
    field: str | msgspec.UnsetType = msgspec.UNSET


class Error(msgspec.Struct):
    """Every failure a client can cause: 4xx, or 503 with Retry-After."""

    error: ErrorDetail


class ApiError(Exception):
    """An error answered to the client as-is."""

    def __init__(
        self,
        status: int,
        code: str,
        message: str,
        field: str | None = None,
        headers: dict[str, str] | None = None,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.code = code
        self.message = message
        self.field = field
        self.headers = headers or {}

    def response(self) -> web.Response:
        field = msgspec.UNSET if self.field is None else self.field
        body = Error(ErrorDetail(self.code, self.message, field))
        return json_response(body, status=self.status, headers=self.headers)


def not_found(what: str) -> ApiError:
    return ApiError(404, "not_found", f"{what} not found")


def unavailable(retry_after: int, message: str = "the database is unavailable; retry shortly"):
    return ApiError(503, "database_unavailable", message, headers={"Retry-After": str(retry_after)})


# How long a client should wait before retrying a write the database refuses for
# a reason retrying will not cure (refusals.py): long enough not to hammer it.
REFUSED_RETRY_AFTER = 30


def refused(cause: str) -> ApiError:
    return ApiError(
        503,
        "database_refused",
        f"the database refuses to store this: {cause}. Retrying will not help until the "
        "server's operator fixes the database (the server log says the same)",
        headers={"Retry-After": str(REFUSED_RETRY_AFTER)},
    )


def client_faults_in_one_line(record: logging.LogRecord) -> bool:
    """A filter for aiohttp's server log: a request aiohttp refused before any handler
    saw it (a body in an encoding it cannot read: brotli, zstd) is the client's fault,
    answered 400 already; it was logged as an error with a traceback. One line now."""
    error = record.exc_info[1] if record.exc_info else None
    if isinstance(error, HttpProcessingError) and 400 <= (error.code or 0) < 500:
        reason = " ".join(str(error.message).split())
        record.msg, record.args = "refused a request (%s): %s", (error.code, reason)
        record.exc_info = record.exc_text = None
        record.levelno, record.levelname = logging.WARNING, "WARNING"
    return True


def unreadable_body(error: web.RequestPayloadError) -> ApiError:
    """A body aiohttp could not read: one that says gzip and is not, cut short…"""
    reason = " ".join(str(getattr(error, "message", "") or error).split())
    return ApiError(400, "malformed_body", f"the request body could not be read: {reason}")


def error_middleware(
    retry_after: int,
    on_database_error: Callable[[], None] = lambda: None,
    reporter: refusals.Reporter | None = None,
) -> Callable:
    reporter = reporter or refusals.Reporter()

    def _unavailable(where: str, error: Exception) -> web.Response:
        log.warning("database unavailable during %s: %s", where, error)
        on_database_error()
        return unavailable(retry_after).response()

    @web.middleware
    async def middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
        try:
            return await handler(request)
        except ApiError as error:
            return error.response()
        except web.RequestPayloadError as error:
            answer = unreadable_body(error).response()
            answer.force_close()  # (where the unread body ends is unknown: no keep-alive)
            return answer
        except web.HTTPException as error:
            if error.status < 400:
                raise
            code = _HTTP_CODES.get(error.status, "http_error")
            message = error.reason
            if error.status == 413:
                message = f"request body too large (limit {request.client_max_size} bytes)"
            elif error.status == 404:
                message = f"no such endpoint: {request.method} {request.path}"
            elif error.status == 405:
                message = f"{request.method} is not allowed on {request.path}"
            return ApiError(error.status, code, message, headers=_allow(error)).response()
        except psycopg.DataError as error:
            # Values that passed validation but not PostgreSQL's own types: the
            # client's data, so a 422 naming the problem, never a 500.
            message = error.diag.message_primary or str(error).splitlines()[0]
            rejected = ApiError(422, "rejected", f"the database rejected this data: {message}")
            return rejected.response()
        except ConnectionResetError:
            raise  # the client went away mid-answer: nothing to answer, nothing to log
        except psycopg.Error as error:
            where = f"{request.method} {request.path}"
            if refusals.cause(error):
                return refused(reporter.refused(where, error)).response()
            # A session that lost a prepared statement (a pooler in transaction
            # mode) passes like an outage; other database errors are bugs.
            if not isinstance(
                error, psycopg.OperationalError | psycopg.errors.InvalidSqlStatementName
            ):
                log.exception("unhandled database error in %s", where)
                return ApiError(500, "internal_error", "internal server error").response()
            return _unavailable(where, error)
        except psycopg_pool.PoolTimeout as error:
            # (psycopg reports a database it cannot reach as OperationalError; any
            # other OSError is this server's own problem, a 500 below.)
            return _unavailable(f"{request.method} {request.path}", error)
        except Exception:
            log.exception("unhandled error in %s %s", request.method, request.path)
            return ApiError(500, "internal_error", "internal server error").response()

    return middleware


def _allow(error: web.HTTPException) -> dict[str, str]:
    allow = error.headers.get("Allow")
    return {"Allow": allow} if allow else {}
