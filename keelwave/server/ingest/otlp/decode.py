"""OTLP trace exports, protobuf (HTTP and gRPC) or JSON, decoded into one plain form.

The two encodings differ in more than syntax: JSON carries trace and span ids
as hex strings (not base64, as protobuf's own JSON mapping would), enums as
integers, 64-bit integers as strings or numbers, and field names in
lowerCamelCase or snake_case. Both become :class:`Span` here, so the mapping
onto runs, steps and model calls (mapping.py) never looks at the wire.

protobuf messages come from ``opentelemetry-proto`` and are parsed by
protobuf's C implementation (upb); JSON is parsed by msgspec and walked.
Unknown fields are ignored in both, as OTLP requires. The few instrumentations with
attribute names of their own are rewritten into the common ones here (dialects.py).
"""

from __future__ import annotations

import base64
from dataclasses import dataclass, field
from typing import Any

import msgspec

from keelwave.server.ingest.otlp import dialects, text_repair

MAX_NESTING = 64  # attribute values nested deeper than this are cut (arrays, kvlists)


class DecodeError(ValueError):
    """The body is not an OTLP trace export; the message says what is wrong."""


@dataclass(frozen=True, slots=True)
class Event:
    name: str
    time_ns: int
    attributes: dict[str, Any]


@dataclass(slots=True)
class Span:
    trace_id: bytes
    span_id: bytes
    parent_span_id: bytes | None
    name: str
    kind: int
    start_ns: int
    end_ns: int
    status_code: int  # 0 unset, 1 ok, 2 error
    status_message: str
    attributes: dict[str, Any]
    events: list[Event] = field(default_factory=list)
    resource: dict[str, Any] = field(default_factory=dict)
    scope: str = ""


@dataclass(slots=True)
class UnreadableSpan(Span):
    """A JSON span that could not be read (an id of the wrong size…): refused alone, as
    a protobuf span with a bad id is (export.check counts it). Never stored."""

    problem: str = ""


# -- protobuf ---------------------------------------------------------------------


def from_protobuf(body: bytes) -> list[Span]:
    from google.protobuf.message import DecodeError as ProtobufError
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
        ExportTraceServiceRequest,
    )

    request = ExportTraceServiceRequest()
    try:
        request.ParseFromString(body)
    except ProtobufError as error:
        repaired = text_repair.protobuf_text(body)  # a string that is not UTF-8?
        if repaired is None:
            raise DecodeError(f"the body is not an OTLP protobuf trace export: {error}") from None
        request.ParseFromString(repaired)
    spans = []
    for resource_spans in request.resource_spans:
        resource = _pb_attributes(resource_spans.resource.attributes)
        for scope_spans in resource_spans.scope_spans:
            scope = scope_spans.scope.name
            for span in scope_spans.spans:
                # (each field read once: every read of a message field makes an object)
                status, events = span.status, span.events
                spans.append(
                    Span(
                        trace_id=span.trace_id,
                        span_id=span.span_id,
                        parent_span_id=span.parent_span_id or None,
                        name=span.name,
                        kind=span.kind,
                        start_ns=span.start_time_unix_nano,
                        end_ns=span.end_time_unix_nano,
                        status_code=status.code,
                        status_message=status.message,
                        attributes=_pb_attributes(span.attributes),
                        events=[
                            Event(e.name, e.time_unix_nano, _pb_attributes(e.attributes))
                            for e in events
                        ]
                        if events
                        else [],
                        resource=resource,
                        scope=scope,
                    )
                )
    return dialects.rewrite(spans)


def _pb_attributes(pairs: Any) -> dict[str, Any]:
    attributes = {}
    for pair in pairs:
        value = pair.value
        which = value.WhichOneof("value")
        # (the scalars here, without a call each: most attributes are strings and ints)
        if which == "string_value":
            attributes[pair.key] = value.string_value
        elif which == "int_value":
            attributes[pair.key] = value.int_value
        else:
            attributes[pair.key] = _pb_value(value, 0)
    return attributes


def _pb_value(value: Any, depth: int) -> Any:
    which = value.WhichOneof("value")
    if which is None:
        return None
    if which == "array_value":
        if depth >= MAX_NESTING:
            return None
        return [_pb_value(item, depth + 1) for item in value.array_value.values]
    if which == "kvlist_value":
        if depth >= MAX_NESTING:
            return None
        return {kv.key: _pb_value(kv.value, depth + 1) for kv in value.kvlist_value.values}
    if which == "bytes_value":
        return base64.b64encode(value.bytes_value).decode()
    return getattr(value, which)


# -- JSON -------------------------------------------------------------------------

_json = msgspec.json.Decoder()


def from_json(body: bytes) -> list[Span]:
    document = _parsed_json(body)
    if not isinstance(document, dict):
        raise DecodeError("an OTLP JSON export is an object with resourceSpans")
    spans = []
    try:
        for resource_spans in _list(document, "resourceSpans", "resource_spans"):
            resource = _json_attributes(_get(resource_spans.get("resource") or {}, "attributes"))
            for scope_spans in _list(resource_spans, "scopeSpans", "scope_spans"):
                scope = str((scope_spans.get("scope") or {}).get("name") or "")
                for span in _list(scope_spans, "spans"):
                    try:
                        spans.append(_json_span(span, resource, scope))
                    except (AttributeError, TypeError, ValueError) as error:
                        spans.append(_unreadable(str(error), resource, scope))
    except (AttributeError, TypeError, ValueError) as error:
        raise DecodeError(f"the body is not an OTLP JSON trace export: {error}") from None
    return dialects.rewrite(spans)


def _parsed_json(body: bytes) -> Any:
    try:
        return _json.decode(body)
    except RecursionError as error:
        raise DecodeError(f"the body is not valid JSON: {error}") from None
    except msgspec.DecodeError as error:
        repaired = text_repair.json_text(body)  # not UTF-8, or a lone surrogate escape?
        if repaired is None:  # (as a repaired body always gives: nothing left to repair)
            raise DecodeError(f"the body is not valid JSON: {error}") from None
    return _parsed_json(repaired)


def _unreadable(problem: str, resource: dict[str, Any], scope: str) -> Span:
    return UnreadableSpan(b"", b"", None, "", 0, 0, 0, 0, "", {}, [], resource, scope, problem)


def _json_span(span: dict, resource: dict[str, Any], scope: str) -> Span:
    status = span.get("status") or {}
    parent = _hex(_get(span, "parentSpanId", "parent_span_id"), "parentSpanId", 8)
    return Span(
        trace_id=_hex(_get(span, "traceId", "trace_id"), "traceId", 16) or b"",
        span_id=_hex(_get(span, "spanId", "span_id"), "spanId", 8) or b"",
        parent_span_id=parent,
        name=str(span.get("name") or ""),
        kind=_enum(span.get("kind"), _SPAN_KINDS),
        start_ns=int(_get(span, "startTimeUnixNano", "start_time_unix_nano") or 0),
        end_ns=int(_get(span, "endTimeUnixNano", "end_time_unix_nano") or 0),
        status_code=_enum(status.get("code"), _STATUS_CODES),
        status_message=str(status.get("message") or ""),
        attributes=_json_attributes(span.get("attributes")),
        events=[
            Event(
                str(event.get("name") or ""),
                int(_get(event, "timeUnixNano", "time_unix_nano") or 0),
                _json_attributes(event.get("attributes")),
            )
            for event in span.get("events") or []
        ],
        resource=resource,
        scope=scope,
    )


# OTLP JSON sends enums as integers; protobuf's JSON mapping (and some exporters)
# as their names. Both are accepted.
_SPAN_KINDS = {
    "SPAN_KIND_UNSPECIFIED": 0, "SPAN_KIND_INTERNAL": 1, "SPAN_KIND_SERVER": 2,
    "SPAN_KIND_CLIENT": 3, "SPAN_KIND_PRODUCER": 4, "SPAN_KIND_CONSUMER": 5,
}  # fmt: skip
_STATUS_CODES = {"STATUS_CODE_UNSET": 0, "STATUS_CODE_OK": 1, "STATUS_CODE_ERROR": 2}


def _enum(value: Any, names: dict[str, int]) -> int:
    if isinstance(value, str) and value in names:
        return names[value]
    return int(value or 0)


def _get(item: dict, *names: str) -> Any:
    for name in names:
        if name in item:
            return item[name]
    return None


def _list(item: dict, *names: str) -> list:
    value = _get(item, *names)
    if value is None:
        return []
    if not isinstance(value, list):
        raise TypeError(f"{names[0]} must be an array")
    return value


def _hex(text: Any, name: str, size: int) -> bytes | None:
    """An id as OTLP/JSON writes it: hex. Base64 is taken too, as protobuf's own JSON
    mapping writes bytes (``MessageToJson``), which some senders use by mistake: an id
    of the right size is one or the other (32 or 16 hex digits, 24 or 12 base64)."""
    if not text:
        return None
    try:
        raw = bytes.fromhex(text)
    except (TypeError, ValueError):
        raw = None
    if raw is None or len(raw) != size:
        raw = _base64(text)
    if raw is None or len(raw) != size:
        raise ValueError(f"{name} must be {2 * size} hex digits, got {text!r}")
    return raw


def _base64(text: Any) -> bytes | None:
    if not isinstance(text, str):
        return None
    try:
        return base64.b64decode(text, validate=True)
    except ValueError:  # (binascii.Error is one)
        return None


def _json_attributes(pairs: Any) -> dict[str, Any]:
    if not pairs:
        return {}
    # (a key left out is the empty key, as protobuf reads a missing string field)
    return {str(pair.get("key") or ""): _json_value(pair.get("value") or {}, 0) for pair in pairs}


def _json_value(value: dict, depth: int) -> Any:
    for key, convert in _SCALARS:
        if key in value:
            return convert(value[key])
    if depth >= MAX_NESTING:
        return None
    if "arrayValue" in value or "array_value" in value:
        items = (_get(value, "arrayValue", "array_value") or {}).get("values") or []
        return [_json_value(item or {}, depth + 1) for item in items]
    if "kvlistValue" in value or "kvlist_value" in value:
        pairs = (_get(value, "kvlistValue", "kvlist_value") or {}).get("values") or []
        return {
            str(p.get("key") or ""): _json_value(p.get("value") or {}, depth + 1) for p in pairs
        }
    return None


def _bool(value: Any) -> bool:
    """A JSON boolean (``"true"``/``"false"`` in a string are taken too; not ``bool()``,
    for which the string "false" is true)."""
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.lower() in ("true", "false"):
        return value.lower() == "true"
    raise ValueError(f"boolValue must be true or false, got {value!r}")


def _int(value: Any) -> int:
    """An int64 as OTLP JSON writes it: a number or a string of digits, not 1.5."""
    if isinstance(value, float) and not value.is_integer():
        raise ValueError(f"intValue must be an integer, got {value!r}")
    return int(value)


_SCALARS = (
    ("stringValue", str), ("string_value", str),
    ("boolValue", _bool), ("bool_value", _bool),
    ("intValue", _int), ("int_value", _int),  # a string or a number in OTLP JSON
    ("doubleValue", float), ("double_value", float),
    ("bytesValue", str), ("bytes_value", str),  # base64, kept as text
)  # fmt: skip


# -- answers ----------------------------------------------------------------------


def response(rejected: int, message: str, as_json: bool) -> tuple[bytes, str]:
    """An ExportTraceServiceResponse in the request's encoding, and its content type."""
    if as_json:
        body: dict[str, Any] = {}
        if rejected:
            body["partialSuccess"] = {"rejectedSpans": str(rejected), "errorMessage": message}
        return msgspec.json.encode(body), "application/json"
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
        ExportTracePartialSuccess,
        ExportTraceServiceResponse,
    )

    answer = ExportTraceServiceResponse()
    if rejected:
        answer.partial_success.CopyFrom(
            ExportTracePartialSuccess(rejected_spans=rejected, error_message=message)
        )
    return answer.SerializeToString(), "application/x-protobuf"
