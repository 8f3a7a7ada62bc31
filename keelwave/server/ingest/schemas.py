"""Request bodies of the ingest API, decoded and validated by msgspec.

msgspec is used for the hot path because it validates while it parses, in C,
and because :class:`msgspec.Raw` hands us the exact bytes of a field: the
fingerprint of ``tool_input`` must be computed over what the client sent, not
over a re-serialisation of it.

Unknown fields are ignored, so an SDK newer than the server keeps working.
Payload fields (``input``, ``output``, ``metadata``, ``tool_input``,
``tool_output``) may hold any JSON value and are stored as sent.
"""

from __future__ import annotations

import re
import uuid
from datetime import UTC, datetime
from typing import Annotated, Any, Literal

import msgspec
from msgspec import Meta, Raw, Struct

from keelwave.protocol import (
    AMOUNT_MAX,
    CALL_STATUSES,
    MAX_TAGS,
    NAME_MAX_LENGTH,
    STEP_INDEX_MAX,
    STEP_TYPES,
    TERMINATION_REASONS,
    TOKEN_COUNT_MAX,
)
from keelwave.server.http.errors import ApiError

TerminationReason = Literal[TERMINATION_REASONS]  # type: ignore[valid-type]
StepType = Literal[STEP_TYPES]  # type: ignore[valid-type]
CallStatus = Literal[CALL_STATUSES]  # type: ignore[valid-type]

# Names that identify something (agents, tools, models): short, no NUL.
Name = Annotated[str, Meta(min_length=1, max_length=NAME_MAX_LENGTH)]
Tag = Annotated[str, Meta(min_length=1, max_length=NAME_MAX_LENGTH)]
StepIndex = Annotated[int, Meta(ge=0, le=STEP_INDEX_MAX)]
TokenCount = Annotated[int, Meta(ge=0, le=TOKEN_COUNT_MAX)]
# Finite and non-negative; msgspec turns 1e999 into an "out of range" error.
Amount = Annotated[float, Meta(ge=0, le=AMOUNT_MAX)]

ABSENT = Raw()  # a payload field that was not sent (as opposed to JSON null)


class RunStart(Struct, kw_only=True):
    agent_name: Name
    id: uuid.UUID | None = None
    started_at: datetime | None = None
    parent_run_id: uuid.UUID | None = None
    input: Raw = ABSENT
    metadata: Raw = ABSENT
    tags: Annotated[list[Tag], Meta(max_length=MAX_TAGS)] = []


class RunFinish(Struct, kw_only=True):
    termination_reason: TerminationReason
    loop_detected: bool | None = None
    loop_step_index: StepIndex | None = None
    output: Raw = ABSENT
    error: str | None = None
    ended_at: datetime | None = None


class RunFinishItem(RunFinish, kw_only=True):
    """One element of a batch finish: the finish, and which run it is for."""

    id: uuid.UUID


class Step(Struct, kw_only=True):
    run_id: uuid.UUID
    step_index: StepIndex
    step_type: StepType = "tool_call"
    tool_name: Name | None = None
    tool_input: Raw = ABSENT
    tool_output: Raw = ABSENT
    content: str | None = None
    started_at: datetime | None = None
    duration_ms: Amount | None = None
    error: str | None = None


class ModelCall(Struct, kw_only=True):
    provider: Name
    model: Name
    id: uuid.UUID | None = None
    run_id: uuid.UUID | None = None
    step_index: StepIndex | None = None
    input_tokens: TokenCount = 0
    output_tokens: TokenCount = 0
    cache_read_tokens: TokenCount = 0
    reasoning_tokens: TokenCount = 0
    cost_usd: Amount | None = None
    latency_ms: Amount | None = None
    status: CallStatus = "ok"
    error: str | None = None
    started_at: datetime | None = None


# Fields with a fixed set of values: errors about them list the accepted ones.
ENUM_FIELDS = {
    "termination_reason": TERMINATION_REASONS,
    "step_type": STEP_TYPES,
    "status": CALL_STATUSES,
}

_decoders: dict[Any, msgspec.json.Decoder] = {}
_AT = re.compile(r"^(?P<message>.*?)(?: - at `\$(?P<path>[^`]*)`)?$", re.S)


def decode(body: bytes, kind: Any) -> Any:
    """Decode ``body`` as ``kind``; raise a 400 for broken JSON and a 422 naming the field."""
    try:
        # msgspec does not check the bytes inside Raw fields. ASCII (what the SDKs
        # send) is valid UTF-8 and checked without copying the body.
        if not body.isascii():
            body.decode("utf-8")
    except UnicodeDecodeError as error:
        raise ApiError(400, "malformed_json", f"request body is not valid UTF-8: {error}") from None
    decoder = _decoders.get(kind)
    if decoder is None:
        decoder = _decoders[kind] = msgspec.json.Decoder(kind)
    try:
        return decoder.decode(body)
    except msgspec.ValidationError as error:
        raise _validation_error(str(error)) from None
    except msgspec.DecodeError as error:
        raise ApiError(400, "malformed_json", f"request body is not valid JSON: {error}") from None
    except RecursionError:
        raise ApiError(
            400, "malformed_json", "request body is nested too deeply (limit about 1000 levels)"
        ) from None


def _validation_error(text: str) -> ApiError:
    match = _AT.match(text)
    message = match.group("message") if match else text
    path = (match.group("path") or "") if match else ""
    missing = re.match(r"Object missing required field `(\w+)`", message)
    if missing:
        path = f"{path}.{missing.group(1)}"
        message = "this field is required"
    field = path.lstrip(".") or None
    leaf = field.rsplit(".", 1)[-1] if field else None
    if leaf in ENUM_FIELDS and message.startswith(("Invalid enum value", "Expected `str`")):
        accepted = ", ".join(ENUM_FIELDS[leaf])
        message = f"{message}; accepted values: {accepted}"
    if message == "Expected `object`, got `array`" and not field:
        message = "expected a JSON object"
    return ApiError(422, "validation_error", f"{field}: {message}" if field else message, field)


def check_name(value: str | None, field: str, position: int | None = None) -> None:
    """Identifiers must not contain NUL: PostgreSQL text cannot hold it, and a
    tool name with a zero byte would blur the fingerprint's name/input boundary.

    ``position`` is the element's index when the body was an array; the field's
    path is only put together for the error (this runs for every element).
    """
    if value is not None and "\x00" in value:
        path = field if position is None else f"[{position}].{field}"
        raise ApiError(422, "validation_error", f"{path}: must not contain NUL characters", path)


def clean_text(value: str | None) -> str | None:
    """Free text (errors, thoughts) is kept; NUL, which PostgreSQL cannot store, becomes U+FFFD."""
    if value is not None and "\x00" in value:
        return value.replace("\x00", "\ufffd")
    return value


def payload(raw: Raw) -> str | None:
    """A payload field as JSON text for a ``json`` column; None when it was not sent."""
    if not raw:
        return None
    return bytes(raw).decode("utf-8")


def payload_as_sent(raw: Raw) -> Raw | None:
    """A payload field as the bytes the client sent (UTF-8 JSON, a view into the
    request body), for the ingest writer; None when it was not sent. The writer
    hands them to PostgreSQL without decoding or copying them."""
    return raw if raw else None


def timestamp(value: datetime | None, default: datetime) -> datetime:
    """Timestamps without a zone are taken as UTC; the others are converted to it.

    (ISO 8601 allows offsets up to ±24 hours, PostgreSQL only up to ±16.)
    """
    if value is None:
        return default
    if value.tzinfo is None:
        return value.replace(tzinfo=UTC)
    try:
        return value.astimezone(UTC)
    except OverflowError:  # within hours of year 1 or 9999: let the database say
        return value
