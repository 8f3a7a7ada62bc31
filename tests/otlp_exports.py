"""OTLP exports built from the captured traces in tests/otlp_fixtures: whole, split into
several exports the way a batch exporter sends them, and in protobuf."""

from __future__ import annotations

import base64
import copy
import json
import random
from pathlib import Path

FIXTURES = Path(__file__).resolve().parent / "otlp_fixtures"
ALL = sorted(path.stem for path in FIXTURES.glob("*.json"))


def document(name: str) -> dict:
    return json.loads((FIXTURES / f"{name}.json").read_text())


def spans_of(doc: dict) -> list[tuple[int, int, dict]]:
    """(resource position, scope position, span) for every span of an export."""
    return [
        (r, s, span)
        for r, resource in enumerate(doc["resourceSpans"])
        for s, scope in enumerate(resource["scopeSpans"])
        for span in scope["spans"]
    ]


def export_of(doc: dict, chosen: list[tuple[int, int, dict]]) -> dict:
    """An export holding ``chosen`` spans, under their own resource and scope."""
    out: dict = {"resourceSpans": []}
    grouped: dict[tuple[int, int], list[dict]] = {}
    for r, s, span in chosen:
        grouped.setdefault((r, s), []).append(span)
    for (r, s), spans in sorted(grouped.items(), key=lambda item: item[0]):
        resource = doc["resourceSpans"][r]
        scope = resource["scopeSpans"][s]
        out["resourceSpans"].append(
            {
                "resource": resource.get("resource", {}),
                "scopeSpans": [{"scope": scope.get("scope", {}), "spans": spans}],
            }
        )
    return out


def split(doc: dict, seed: int, repeat: bool = True) -> list[dict]:
    """The trace as a batch exporter would send it in bad weather: spans in the order
    they ended (children first), cut into exports of random size, a few of them sent
    twice, and neighbouring exports swapped."""
    rng = random.Random(seed)
    spans = sorted(spans_of(doc), key=lambda item: int(item[2].get("endTimeUnixNano") or 0))
    exports, position = [], 0
    while position < len(spans):
        size = rng.randint(1, 4)
        exports.append(export_of(doc, spans[position : position + size]))
        position += size
        if repeat and rng.random() < 0.3:
            exports.append(copy.deepcopy(exports[-1]))  # a retry after a lost answer
    for i in range(len(exports) - 1):
        if rng.random() < 0.25:
            exports[i], exports[i + 1] = exports[i + 1], exports[i]
    return exports


def to_protobuf(doc: dict) -> bytes:
    """The same export in protobuf: OTLP JSON's hex ids become bytes."""
    from google.protobuf import json_format
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
        ExportTraceServiceRequest,
    )

    converted = copy.deepcopy(doc)
    for _, _, span in spans_of(converted):
        for key in ("traceId", "spanId", "parentSpanId"):
            if span.get(key):
                span[key] = base64.b64encode(bytes.fromhex(span[key])).decode()
    message = json_format.ParseDict(converted, ExportTraceServiceRequest())
    return message.SerializeToString()
