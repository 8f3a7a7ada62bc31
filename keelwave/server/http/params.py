"""Path and query parameters of the read API, checked with the same errors as bodies.

A bad parameter is a 422 naming it (``"field": "window"``); another
project's id in the path is a 404, like an id that does not exist.
"""

from __future__ import annotations

import base64
import json
import re
import uuid
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Annotated

from aiohttp import web
from msgspec import Meta

from keelwave.server.http import appkeys
from keelwave.server.http.auth import READ, Principal
from keelwave.server.http.errors import ApiError, not_found
from keelwave.server.http.operations import Param

WINDOWS = ("15m", "1h", "6h", "24h", "7d", "30d")
_DURATION = re.compile(r"^(\d{1,4})(m|h|d)$")
_UNITS = {"m": 60, "h": 3600, "d": 86400}
MAX_SPAN = timedelta(days=400)

# How the parameters parsed here are documented (operations.py, openapi.py).
Duration = Annotated[str, Meta(pattern=r"^\d{1,4}(m|h|d)$", description="1-9999 m, h or d")]
Moment = Annotated[str, Meta(extra_json_schema={"format": "date-time"})]
WINDOW_QUERY = (
    Param("window", Duration, f"{', '.join(WINDOWS)}…, ending now (default 24h); at most 400d."),
    Param("since", Moment, "Start of the range, ISO 8601 (instead of window)."),
    Param("until", Moment, "End of the range (default now)."),
)
CURSOR_QUERY = Param("cursor", str, "next_cursor of the previous page.")


def invalid(field: str, message: str) -> ApiError:
    return ApiError(422, "validation_error", f"{field}: {message}", field)


def project_of(request: web.Request, principal: Principal) -> str:
    """The project in the path must be the key's own (by id or name); anything else is 404."""
    wanted = request.match_info["project_id"]
    if wanted not in (principal.project_id, principal.project):
        raise not_found(f"project {wanted!r}")
    return principal.project_id


def run_id_of(request: web.Request) -> uuid.UUID:
    text = request.match_info["run_id"]
    try:
        return uuid.UUID(text)
    except ValueError:
        raise not_found(f"run {text!r}") from None


async def read_project(request: web.Request) -> str:
    """Check the key (scope read or all) and return the project in the path."""
    return await project_for(request, READ)


async def project_for(request: web.Request, scopes: frozenset[str]) -> str:
    """Check the key (one of ``scopes``) and return the project in the path."""
    principal = await request.app[appkeys.KEYSTORE].authenticate(request, scopes)
    return project_of(request, principal)


def stall_after(request: web.Request) -> timedelta:
    return timedelta(seconds=request.app[appkeys.SETTINGS].stall_after_seconds)


def duration(text: str, field: str) -> timedelta:
    """``15m``, ``1h``, ``24h``, ``7d``…"""
    match = _DURATION.match(text.strip())
    if not match or int(match.group(1)) == 0:
        raise invalid(field, f"expected a duration such as {', '.join(WINDOWS)}; got {text!r}")
    span = timedelta(seconds=int(match.group(1)) * _UNITS[match.group(2)])
    if span > MAX_SPAN:
        raise invalid(field, f"at most {MAX_SPAN.days} days")
    return span


def timestamp(text: str, field: str) -> datetime:
    try:
        value = datetime.fromisoformat(text.strip().replace("Z", "+00:00"))
    except ValueError:
        example = "2026-11-30T09:00:00Z"
        raise invalid(field, f"expected an ISO 8601 time such as {example}; got {text!r}") from None
    return value if value.tzinfo else value.replace(tzinfo=UTC)


@dataclass(frozen=True, slots=True)
class Window:
    """A half-open time range [since, until)."""

    since: datetime
    until: datetime

    @property
    def span(self) -> timedelta:
        return self.until - self.since

    def previous(self) -> Window:
        return Window(self.since - self.span, self.since)

    def bounds(self) -> dict[str, datetime]:
        return {"since": self.since, "until": self.until}


def window(request: web.Request, default: str | None = "24h") -> Window | None:
    """``window`` (ending now) or ``since``/``until``; None if neither is given and no default."""
    query = request.query
    now = datetime.now(UTC)
    if "window" in query and ("since" in query or "until" in query):
        raise invalid("window", "give either window or since/until, not both")
    if "since" in query or "until" in query:
        since = timestamp(query["since"], "since") if "since" in query else None
        until = timestamp(query["until"], "until") if "until" in query else now
        if since is None:
            since = until - duration(default or "24h", "window")
        if since >= until:
            raise invalid("since", "must be before until")
        if until - since > MAX_SPAN:
            raise invalid("since", f"the range may span at most {MAX_SPAN.days} days")
        return Window(since, until)
    text = query.get("window", default)
    if text is None:
        return None
    return Window(now - duration(text, "window"), now)


def integer(request: web.Request, name: str, default: int, low: int, high: int) -> int:
    text = request.query.get(name)
    if text is None:
        return default
    try:
        value = int(text)
    except ValueError:
        raise invalid(name, f"expected an integer; got {text!r}") from None
    if not low <= value <= high:
        raise invalid(name, f"must be between {low} and {high}")
    return value


def boolean(request: web.Request, name: str) -> bool | None:
    text = request.query.get(name)
    if text is None:
        return None
    lowered = text.strip().lower()
    if lowered in ("true", "1", "yes"):
        return True
    if lowered in ("false", "0", "no"):
        return False
    raise invalid(name, f"expected true or false; got {text!r}")


def choice(request: web.Request, name: str, accepted: tuple[str, ...]) -> str | None:
    text = request.query.get(name)
    if text is None:
        return None
    if text not in accepted:
        raise invalid(name, f"got {text!r}; accepted values: {', '.join(accepted)}")
    return text


def text(request: web.Request, name: str, max_length: int = 256) -> str | None:
    value = request.query.get(name)
    if value is None or value == "":
        return None
    if len(value) > max_length or "\x00" in value:
        raise invalid(name, f"must be at most {max_length} characters, without NUL")
    return value


def encode_cursor(*values: object) -> str:
    raw = json.dumps([str(value) for value in values]).encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def decode_cursor(request: web.Request, count: int) -> list[str] | None:
    token = request.query.get("cursor")
    if not token:
        return None
    try:
        values = json.loads(base64.urlsafe_b64decode(token + "=" * (-len(token) % 4)))
        if (
            isinstance(values, list)
            and len(values) == count
            and all(isinstance(value, str) for value in values)
        ):
            return values
    except ValueError:
        pass
    raise invalid("cursor", "not a cursor from this API (use next_cursor as given)")
