"""Exports whose text is not Unicode, read as the OpenTelemetry Collector reads them.

An exporter can send a string that is not Unicode text: JavaScript's strings may hold
half of a surrogate pair (a value cut to a length in UTF-16 units, as span attribute
limits do), which protobuf.js writes as bytes that are not UTF-8 and ``JSON.stringify``
as an escape like ``\\ud800``; Go's strings may hold any bytes. protobuf refuses an
export holding one such string, and OTLP exporters drop an export answered 400: one bad
character would lose every span sent with it. The Collector keeps them instead, each
bad sequence replaced by U+FFFD, and so does keelwave, here, on the error path only:
an export that decodes as it is never comes here.
"""

from __future__ import annotations

import functools
import re
from typing import Any

_REPLACEMENT = b"\\ufffd"
# A \u escape of a surrogate (D800-DFFF), with the backslashes before it: the escape is
# one only when their number is odd (an even number are escaped backslashes).
_SURROGATE_ESCAPE = re.compile(rb"(\\+)u([dD][89a-fA-F][0-9a-fA-F]{2})")
_LOW_SURROGATE_ESCAPE = re.compile(rb"\\u[dD][c-fC-F][0-9a-fA-F]{2}")


def json_text(body: bytes) -> bytes | None:
    """``body`` (OTLP/JSON) with bytes that are not UTF-8 and lone surrogate escapes
    replaced by U+FFFD; None when there was nothing to replace."""
    text = body.decode("utf-8", "replace").encode("utf-8")
    pieces: list[bytes] = []
    done = paired = 0
    for match in _SURROGATE_ESCAPE.finditer(text):
        if match.start() < paired or len(match.group(1)) % 2 == 0:
            continue  # the low half of a pair kept below, or an escaped backslash
        escape_at = match.start(2) - 2
        high = match.group(2)[1:2].lower() in b"89ab"
        end = match.end()
        if high and _LOW_SURROGATE_ESCAPE.match(text, end):
            paired = end + 6  # a pair: one character, kept as it is
            continue
        pieces += (text[done:escape_at], _REPLACEMENT)
        done = end
    if not pieces and text == body:
        return None
    pieces.append(text[done:])
    return b"".join(pieces)


def protobuf_text(body: bytes) -> bytes | None:
    """``body`` (an OTLP protobuf trace export) with every string field that is not
    UTF-8 made valid (bad bytes replaced by U+FFFD); None when ``body`` is no export
    even with its strings read as bytes, or none of them needed it."""
    from google.protobuf.message import DecodeError

    request = _as_bytes().ExportTraceServiceRequest()
    try:
        request.ParseFromString(body)
    except DecodeError:
        return None
    if not _repair(request, _strings()):
        return None
    return request.SerializeToString()


def _repair(message: Any, strings: frozenset[str]) -> bool:
    changed = False
    for field, value in message.ListFields():
        if field.message_type is not None:
            for item in value if _repeated(field) else (value,):
                changed |= _repair(item, strings)
        elif field.full_name in strings:
            if _repeated(field):
                fixed = [_utf8(item) for item in value]
                if fixed != list(value):
                    del value[:]
                    value.extend(fixed)
                    changed = True
            elif (fixed := _utf8(value)) != value:
                setattr(message, field.name, fixed)
                changed = True
    return changed


def _repeated(field: Any) -> bool:
    repeated = getattr(field, "is_repeated", None)  # protobuf 6 and later; before, label
    return field.label == field.LABEL_REPEATED if repeated is None else repeated


def _utf8(value: bytes) -> bytes:
    return value.decode("utf-8", "replace").encode("utf-8")


class _Messages:
    def __init__(self, pool: Any) -> None:
        from google.protobuf import message_factory

        name = "opentelemetry.proto.collector.trace.v1.ExportTraceServiceRequest"
        self.ExportTraceServiceRequest = message_factory.GetMessageClass(
            pool.FindMessageTypeByName(name)
        )


@functools.cache
def _as_bytes() -> _Messages:
    """The export's messages with every ``string`` field declared ``bytes``: the same
    wire format, without protobuf's UTF-8 check, in a pool of their own."""
    from google.protobuf import descriptor_pb2, descriptor_pool

    pool = descriptor_pool.DescriptorPool()
    for file in _files():
        proto = descriptor_pb2.FileDescriptorProto()
        file.CopyToProto(proto)
        for message in _all_messages(proto.message_type):
            for field in message.field:
                if field.type == field.TYPE_STRING:
                    field.type = field.TYPE_BYTES
        pool.Add(proto)
    return _Messages(pool)


@functools.cache
def _strings() -> frozenset[str]:
    """The full names of the export's string fields (the same in both pools)."""
    names = set()
    for file in _files():
        proto_messages = list(file.message_types_by_name.values())
        while proto_messages:
            message = proto_messages.pop()
            proto_messages.extend(message.nested_types)
            names.update(f.full_name for f in message.fields if f.type == f.TYPE_STRING)
    return frozenset(names)


def _files() -> list[Any]:
    """The export's .proto files, each after those it imports."""
    from opentelemetry.proto.collector.trace.v1 import trace_service_pb2

    ordered: list[Any] = []

    def visit(file: Any) -> None:
        if file not in ordered:
            for dependency in file.dependencies:
                visit(dependency)
            ordered.append(file)

    visit(trace_service_pb2.DESCRIPTOR)
    return ordered


def _all_messages(messages: Any) -> list[Any]:
    found = []
    for message in messages:
        found.append(message)
        found.extend(_all_messages(message.nested_type))
    return found
