"""Request and response bodies of the ingest API, decoded and validated by msgspec.

msgspec is used for the hot path because it validates while it parses, in C,
and because :class:`msgspec.Raw` hands us the exact bytes of a field: the
fingerprint of ``tool_input`` must be computed over what the client sent, not
over a re-serialisation of it.

Unknown fields are ignored, so an SDK newer than the server keeps working.
Payload fields (``input``, ``output``, ``metadata``, ``tool_input``,
``tool_output``, ``input_messages``, ``output_messages``) may hold any JSON
value and are stored as sent (redacted).

These types are also the API document's (docs/openapi.json is generated from
them): their docstrings and field descriptions are what its readers see.
"""

from __future__ import annotations

import json
import re
import uuid
from datetime import UTC, datetime
from typing import Annotated, Any, Literal

import msgspec
from msgspec import UNSET, Meta, Raw, Struct, UnsetType

from keelwave.protocol import (
    AMOUNT_MAX,
    CALL_STATUSES,
    DEFAULT_STEP_TYPE,
    MAX_TAGS,
    NAME_MAX_LENGTH,
    STEP_INDEX_MAX,
    STEP_TYPES,
    TERMINATION_REASONS,
    TOKEN_COUNT_MAX,
    TRACEBACK_SENT_MAX,
    TRACEBACK_STORED_MAX,
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

# A payload field: any JSON value, kept as the exact bytes sent. UNSET when the
# field was not sent at all (as opposed to JSON null).
Payload = Annotated[Raw | UnsetType, Meta(description="Any JSON value, stored as sent")]
# A formatted traceback: longer ones are cut (their end is kept), not refused.
Traceback = Annotated[
    str | None,
    Meta(
        description="The exception's formatted traceback; the server keeps its last "
        f"{TRACEBACK_STORED_MAX // 1024} KiB (the SDKs send the last "
        f"{TRACEBACK_SENT_MAX // 1024} KiB), cut at a line"
    ),
]
# A moment in ISO 8601 / RFC 3339; without an offset it is taken as UTC.
When = Annotated[
    datetime | None, Meta(description="ISO 8601 time; without an offset, UTC. Default: now")
]


class RunStart(Struct, kw_only=True):
    """Open a run. Sending the same id again changes nothing: the first start wins."""

    agent_name: Name
    id: Annotated[uuid.UUID | None, Meta(description="Chosen by the client; default: new")] = None
    started_at: When = None
    parent_run_id: Annotated[
        uuid.UUID | None, Meta(description="The run that started this one (a sub-agent)")
    ] = None
    input: Payload = UNSET
    metadata: Payload = UNSET
    tags: Annotated[list[Tag], Meta(max_length=MAX_TAGS)] = []


class RunFinish(Struct, kw_only=True):
    """End a run, with why it ended and, if the SDK saw one, where its loop began."""

    termination_reason: TerminationReason
    loop_detected: bool | None = None
    loop_step_index: Annotated[
        StepIndex | None, Meta(description="The step where the repetition began")
    ] = None
    output: Payload = UNSET
    error: str | None = None
    error_traceback: Traceback = None
    ended_at: When = None


class RunFinishItem(RunFinish, kw_only=True):
    """One element of a batch finish: the finish, and which run it is for."""

    id: uuid.UUID


class Step(Struct, kw_only=True):
    """One step of a run. A run's step_index identifies it: a retry is stored once.
    Steps with a tool_name are fingerprinted over tool_input exactly as sent."""

    run_id: uuid.UUID
    step_index: StepIndex
    step_type: StepType = DEFAULT_STEP_TYPE
    tool_name: Name | None = None
    tool_input: Payload = UNSET
    tool_output: Payload = UNSET
    content: str | None = None
    started_at: When = None
    duration_ms: Amount | None = None
    error: str | None = None
    error_traceback: Traceback = None


class ModelCall(Struct, kw_only=True):
    """One call to a model. Without cost_usd it is priced from its tokens (if the model
    is known)."""

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
    started_at: When = None
    input_messages: Annotated[
        Raw | UnsetType, Meta(description="The prompt (any JSON), when content is captured")
    ] = UNSET
    output_messages: Annotated[
        Raw | UnsetType, Meta(description="The response (any JSON), when content is captured")
    ] = UNSET


# Answers. Each is the whole body, envelope included.


class RunStarted(Struct):
    id: uuid.UUID


class RunStartedResponse(Struct):
    """The answer to one run."""

    data: RunStarted


class RunsStarted(Struct):
    accepted: int
    ids: Annotated[list[uuid.UUID], Meta(description="In the order the runs were sent")]


class RunsStartedResponse(Struct):
    """The answer to an array of runs."""

    data: RunsStarted


class RunFinished(Struct):
    id: uuid.UUID
    termination_reason: TerminationReason


class RunFinishedResponse(Struct):
    data: RunFinished


class RunsFinished(Struct):
    finished: int
    unknown: Annotated[list[uuid.UUID], Meta(description="Ids that are not runs of this project")]


class RunsFinishedResponse(Struct):
    data: RunsFinished


class StepsAccepted(Struct):
    accepted: int


class StepsAcceptedResponse(Struct):
    data: StepsAccepted


class CallsAccepted(Struct):
    accepted: int
    ids: Annotated[list[uuid.UUID], Meta(description="In the order the calls were sent")]


class CallsAcceptedResponse(Struct):
    data: CallsAccepted


# Fields with a fixed set of values: errors about them list the accepted ones.
ENUM_FIELDS = {
    "termination_reason": TERMINATION_REASONS,
    "step_type": STEP_TYPES,
    "status": CALL_STATUSES,
}

_decoders: dict[Any, msgspec.json.Decoder] = {}
_AT = re.compile(r"^(?P<message>.*?)(?: - at `\$(?P<path>[^`]*)`)?$", re.S)


async def decode_request(request: Any, kind: Any) -> Any:
    """A request's JSON body (an aiohttp request) as ``kind``; an empty body is a 400."""
    body = await request.read()
    if not body.strip():
        raise ApiError(400, "malformed_json", "request body is empty; send a JSON object")
    return decode(body, kind)


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
        lone = _lone_surrogate(body)
        if lone is not None:
            raise lone from None
        raise ApiError(400, "malformed_json", f"request body is not valid JSON: {error}") from None
    except RecursionError:
        raise ApiError(
            400, "malformed_json", "request body is nested too deeply (limit about 1000 levels)"
        ) from None


_SURROGATE_ESCAPE = re.compile(rb"\\u[dD][89a-fA-F]")
_SURROGATE = re.compile("[\ud800-\udfff]")


def _lone_surrogate(body: bytes) -> ApiError | None:
    """A 422 naming the field that holds an escape like ``\\ud800`` without its other
    half, which JSON's grammar allows but is no Unicode text (msgspec's own message
    says only that the JSON is malformed, at a byte offset); None if there is none.
    Python's json module reads such escapes, so it can find the field."""
    if not _SURROGATE_ESCAPE.search(body):
        return None
    try:
        path = _surrogate_at(json.loads(body), "")
    except (ValueError, RecursionError):
        return None
    if path is None:
        return None
    field = path.lstrip(".") or None
    message = (
        "holds a lone UTF-16 surrogate escape (like \\ud800 without its pair), which is "
        "not Unicode text; send the character itself, or U+FFFD in its place"
    )
    return ApiError(422, "validation_error", f"{field}: {message}" if field else message, field)


def _surrogate_at(value: Any, path: str) -> str | None:
    """The path of the first string or key in ``value`` holding a lone surrogate."""
    if isinstance(value, str):
        return path if _SURROGATE.search(value) else None
    if isinstance(value, dict):
        for key, item in value.items():
            if _SURROGATE.search(key):
                return f"{path}.{_SURROGATE.sub(chr(0xFFFD), key)}"
            if (found := _surrogate_at(item, f"{path}.{key}")) is not None:
                return found
    elif isinstance(value, list):
        for position, item in enumerate(value):
            if (found := _surrogate_at(item, f"{path}[{position}]")) is not None:
                return found
    return None


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


def payload(raw: Raw | UnsetType) -> str | None:
    """A payload field as JSON text for a ``json`` column; None when it was not sent."""
    if not raw:
        return None
    return bytes(raw).decode("utf-8")


def payload_as_sent(raw: Raw | UnsetType) -> Raw | None:
    """A payload field as the bytes the client sent (UTF-8 JSON, a view into the
    request body), for the ingest writer; None when it was not sent. The writer
    hands them to PostgreSQL without decoding or copying them."""
    return raw if raw else None


class TimestampOutOfRange(Exception):
    """A timestamp that UTC takes out of the years 1 to 9999 (see :func:`timestamp`)."""

    def __init__(self, value: datetime) -> None:
        super().__init__(value)
        self.value = value

    def at(self, field: str) -> ApiError:
        """The 422 naming the field it came in."""
        message = f"{field}: {self.value.isoformat()} is outside the years 1 to 9999 in UTC"
        return ApiError(422, "validation_error", message, field)


def timestamp(value: datetime | None, default: datetime) -> datetime:
    """Timestamps without a zone are taken as UTC; the others are converted to it.

    (ISO 8601 allows offsets up to ±24 hours, PostgreSQL only up to ±16.) One that the
    conversion takes out of the years 1 to 9999 raises TimestampOutOfRange: PostgreSQL
    would store it (as 1 BC, or year 10000), and every read of it would then fail.
    """
    if value is None:
        return default
    if value.tzinfo is None:
        return value.replace(tzinfo=UTC)
    try:
        return value.astimezone(UTC)
    except OverflowError:
        raise TimestampOutOfRange(value) from None
