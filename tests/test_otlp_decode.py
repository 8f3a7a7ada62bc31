"""OTLP exports from the real OpenTelemetry SDK decode the same from protobuf and from
OTLP JSON (hex ids, integers as strings)."""

from __future__ import annotations

import base64
import json

import pytest
from google.protobuf.json_format import MessageToDict
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import Status, StatusCode

from keelwave.server.ingest.otlp import decode
from keelwave.server.ingest.otlp.export import check


def export() -> bytes:
    """A small agent trace, as the SDK's OTLP/HTTP protobuf exporter would send it."""
    memory = InMemorySpanExporter()
    provider = TracerProvider(resource=Resource.create({"service.name": "research-agent"}))
    provider.add_span_processor(SimpleSpanProcessor(memory))
    tracer = provider.get_tracer("test")
    with tracer.start_as_current_span("invoke_agent research") as agent:
        agent.set_attribute("gen_ai.operation.name", "invoke_agent")
        agent.set_attribute("gen_ai.agent.name", "research")
        with tracer.start_as_current_span("execute_tool web_search") as tool:
            tool.set_attribute("gen_ai.tool.name", "web_search")
            tool.set_attribute("gen_ai.tool.call.arguments", '{"q": "keelwave"}')
            tool.set_attribute("count", 3)
            tool.set_attribute("ratio", 0.5)
            tool.set_attribute("tags", ["a", "b"])
            tool.add_event("note", {"big": 2**62})
            tool.set_status(Status(StatusCode.ERROR, "boom"))
    return encode_spans(memory.get_finished_spans()).SerializeToString()


def as_otlp_json(body: bytes) -> bytes:
    """The same export as OTLP JSON: protobuf's JSON mapping, with ids in hex."""
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
        ExportTraceServiceRequest,
    )

    request = ExportTraceServiceRequest()
    request.ParseFromString(body)
    document = MessageToDict(request)
    for resource_spans in document["resourceSpans"]:
        for scope_spans in resource_spans["scopeSpans"]:
            for span in scope_spans["spans"]:
                for key in ("traceId", "spanId", "parentSpanId"):
                    if key in span:
                        span[key] = base64.b64decode(span[key]).hex()
    return json.dumps(document).encode()


def test_protobufs_own_json_mapping_with_base64_ids_decodes_alike() -> None:
    """``MessageToJson`` writes ids as base64 (protobuf's JSON mapping), not hex as
    OTLP/JSON does; some senders use it. Both are read; the lengths tell them apart."""
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
        ExportTraceServiceRequest,
    )

    body = export()
    request = ExportTraceServiceRequest()
    request.ParseFromString(body)
    assert decode.from_json(json.dumps(MessageToDict(request)).encode()) == decode.from_protobuf(
        body
    )


def test_protobuf_and_json_decode_alike() -> None:
    body = export()
    from_protobuf = decode.from_protobuf(body)
    from_json = decode.from_json(as_otlp_json(body))
    assert from_protobuf == from_json
    tool = next(span for span in from_protobuf if span.name.startswith("execute_tool"))
    agent = next(span for span in from_protobuf if span.name.startswith("invoke_agent"))
    assert tool.parent_span_id == agent.span_id and agent.parent_span_id is None
    assert tool.attributes == {
        "gen_ai.tool.name": "web_search",
        "gen_ai.tool.call.arguments": '{"q": "keelwave"}',
        "count": 3,
        "ratio": 0.5,
        "tags": ["a", "b"],
    }
    assert tool.events[0].attributes == {"big": 2**62}
    assert (tool.status_code, tool.status_message) == (2, "boom")
    assert tool.resource["service.name"] == "research-agent"
    assert len(tool.trace_id) == 16 and len(tool.span_id) == 8
    assert tool.end_ns >= tool.start_ns > 0


def test_snake_case_json_and_numbers_for_integers() -> None:
    document = {
        "resource_spans": [{"scope_spans": [{"spans": [{
            "trace_id": "5b8efff798038103d269b633813fc60c", "span_id": "eee19b7ec3c1b174",
            "name": "tool", "kind": 1, "start_time_unix_nano": 1700000000000000000,
            "end_time_unix_nano": "1700000000500000000",
            "attributes": [{"key": "n", "value": {"int_value": "7"}}],
            "futureField": {"ignored": True},
        }]}]}]
    }  # fmt: skip
    [span] = decode.from_json(json.dumps(document).encode())
    assert span.attributes == {"n": 7}
    assert span.end_ns - span.start_ns == 500_000_000


@pytest.mark.parametrize(
    "body",
    [b"not json", b"[1, 2]", b'{"resourceSpans": 5}',
     b'{"resourceSpans": [{"scopeSpans": 7}]}'],
)  # fmt: skip
def test_what_is_not_an_export_is_a_decode_error(body: bytes) -> None:
    with pytest.raises(decode.DecodeError):
        decode.from_json(body)


def test_a_json_span_that_cannot_be_read_is_refused_alone() -> None:
    good = {"traceId": "5b8efff798038103d269b633813fc60c", "spanId": "eee19b7ec3c1b174",
            "name": "tool", "startTimeUnixNano": "1700000000000000000"}  # fmt: skip
    odd = [{**good, "traceId": "xyz"}, {**good, "spanId": "abcd"}, 5,
           {**good, "attributes": [{"key": "b", "value": {"intValue": 1.5}}]},
           {**good, "attributes": [{"key": "b", "value": {"boolValue": "maybe"}}]}]  # fmt: skip
    body = {"resourceSpans": [{"scopeSpans": [{"spans": [good, *odd]}]}]}
    spans = decode.from_json(json.dumps(body).encode())
    accepted = check(spans)
    assert (len(accepted.spans), accepted.rejected) == (1, len(odd))
    for what in ("traceId", "spanId", "intValue", "boolValue"):
        assert what in accepted.message


def test_json_booleans_written_as_strings_mean_what_they_say() -> None:
    pairs = [{"key": k, "value": {"boolValue": v}} for k, v in
             (("a", "false"), ("b", "TRUE"), ("c", False), ("d", True))]  # fmt: skip
    assert decode._json_attributes(pairs) == {"a": False, "b": True, "c": False, "d": True}


def test_garbage_protobuf_is_a_decode_error() -> None:
    with pytest.raises(decode.DecodeError):
        decode.from_protobuf(b"\xff\xff\xff\xff garbage")


def test_answers_in_the_requests_encoding() -> None:
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
        ExportTraceServiceResponse,
    )

    body, kind = decode.response(0, "", as_json=True)
    assert (json.loads(body), kind) == ({}, "application/json")
    body, kind = decode.response(2, "2 spans refused", as_json=True)
    assert json.loads(body) == {
        "partialSuccess": {"rejectedSpans": "2", "errorMessage": "2 spans refused"}
    }
    body, kind = decode.response(2, "2 spans refused", as_json=False)
    answer = ExportTraceServiceResponse()
    answer.ParseFromString(body)
    assert (answer.partial_success.rejected_spans, kind) == (2, "application/x-protobuf")


@pytest.mark.parametrize(
    ("sent", "read"),
    [
        (b'"cut \\ud83d"', "cut \ufffd"),  # the high half alone
        (b'"\\udc00 tail"', "\ufffd tail"),  # the low half alone
        (b'"\\ud83d\\ude00 \\uD83D"', "\U0001f600 \ufffd"),  # a pair is one character
        (b'"\\\\ud800 \\ud800"', "\\ud800 \ufffd"),  # an escaped backslash is no escape
        (b'"bytes \xed\xa0\x80 \xff"', "bytes \ufffd\ufffd\ufffd \ufffd"),  # not UTF-8
    ],
)
def test_json_text_that_is_not_unicode_becomes_replacement_characters(
    sent: bytes, read: str
) -> None:
    body = (
        b'{"resourceSpans": [{"scopeSpans": [{"spans": [{"traceId": "' + b"1" * 32
        + b'", "spanId": "' + b"2" * 16 + b'", "name": "n", "attributes": [{"key": "k", '
        b'"value": {"stringValue": ' + sent + b"}}]}]}]}]}"
    )  # fmt: skip
    (span,) = decode.from_json(body)
    assert span.attributes == {"k": read}


def test_protobuf_strings_that_are_not_utf8_become_replacement_characters() -> None:
    body = export()
    assert body.count(b"research-agent") == 1
    broken = body.replace(b"research-agent", b"research\xed\xa0\x80ent")  # the same length
    spans = decode.from_protobuf(broken)
    assert {span.resource["service.name"] for span in spans} == {"research\ufffd\ufffd\ufffdent"}
    assert [span.name for span in spans] == [span.name for span in decode.from_protobuf(body)]
    with pytest.raises(decode.DecodeError):  # what is no export stays refused
        decode.from_protobuf(broken[:-7] + b"\xff" * 7)
