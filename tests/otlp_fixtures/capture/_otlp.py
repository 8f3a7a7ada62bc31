"""Shared capture plumbing: an SDK tracer provider whose spans go through a
BatchSpanProcessor into an InMemorySpanExporter, and a writer that encodes the
finished spans exactly as the OTLP exporters do (``encode_spans``) and saves
them as OTLP/JSON.

OTLP/JSON differs from protobuf's canonical JSON mapping in two ways, and the
files follow OTLP/JSON (what the JavaScript exporter and the Collector's
otlphttp exporter send with ``application/json``):

* ``traceId``, ``spanId`` and ``parentSpanId`` are hex strings, not base64;
* enums (``kind``, ``status.code``) are integers.

Everything else is ``MessageToDict`` of the ``ExportTraceServiceRequest``:
lowerCamelCase keys, 64-bit integers (timestamps, ``intValue``) as strings,
fields at their default value omitted. ``load_as_protobuf`` turns a file back
into the request message (what the Python OTLP/HTTP exporter sends, with
``application/x-protobuf``).

Only this folder's scripts import it; it needs ``opentelemetry-sdk`` and
``opentelemetry-exporter-otlp-proto-common``.
"""

from __future__ import annotations

import base64
import json
from pathlib import Path

from google.protobuf import json_format
from opentelemetry.exporter.otlp.proto.common._internal.trace_encoder import encode_spans
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

FIXTURES = Path(__file__).resolve().parent.parent
_ID_KEYS = ("traceId", "spanId", "parentSpanId")


class Capture:
    """One tracer provider for a whole script; ``save`` writes and clears per scenario."""

    def __init__(self, service_name: str) -> None:
        self.exporter = InMemorySpanExporter()
        self.provider = TracerProvider(resource=Resource.create({"service.name": service_name}))
        # The processor real deployments use: spans are queued as they *end*, so a
        # batch lists children before their parents and the root span last.
        self.provider.add_span_processor(BatchSpanProcessor(self.exporter))

    def save(self, name: str) -> Path:
        self.provider.force_flush()
        spans = self.exporter.get_finished_spans()
        self.exporter.clear()
        path = FIXTURES / f"{name}.json"
        body = to_otlp_json(encode_spans(spans))
        path.write_text(json.dumps(body, indent=2, ensure_ascii=False) + "\n")
        print(f"{path.name}: {len(spans)} spans")
        return path

    def save_scenario(self, prefix: str, scenario: str, only: set[str]) -> None:
        """Write ``<prefix>_<scenario>`` if ``only`` names it (or names nothing, as a
        script run without scenario names does); drop the scenario's spans either way."""
        if not only or scenario in only:
            self.save(f"{prefix}_{scenario}")
        else:
            self.provider.force_flush()
            self.exporter.clear()

    def shutdown(self) -> None:
        self.provider.shutdown()

    def agent_span(self, name: str):
        """The span a hand-written agent opens around its loop, marked as an agent
        (``invoke_agent <name>``, ``gen_ai.agent.name``), as docs/otlp.md advises."""
        attributes = {"gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": name}
        tracer = self.provider.get_tracer("hand-written-agent")
        return tracer.start_as_current_span(f"invoke_agent {name}", attributes=attributes)


class ScriptedTurns:
    """A fake model API for a hand-written loop (an ``httpx.MockTransport`` handler):
    turns 0-2 ask for get_weather, turn 3 answers; ``answer(turn)`` writes the
    provider's response for a turn, its tokens 100 + 10n in and 20 + n out."""

    TOOL_TURNS = 3

    def __init__(self) -> None:
        self.turn = 0

    def __call__(self, request):  # (httpx or httpx2, whichever the client sends through)
        turn, self.turn = self.turn, self.turn + 1
        return self.answer(turn)

    def answer(self, turn: int):
        raise NotImplementedError


def to_otlp_json(request: ExportTraceServiceRequest) -> dict:
    body = json_format.MessageToDict(request, use_integers_for_enums=True)
    for resource_spans in body.get("resourceSpans", []):
        for scope_spans in resource_spans.get("scopeSpans", []):
            for span in scope_spans.get("spans", []):
                _ids_to_hex(span)
                for link in span.get("links", []):
                    _ids_to_hex(link)
    return body


def load_as_protobuf(path: Path) -> ExportTraceServiceRequest:
    """The fixture as the request message (for a protobuf ingest test)."""
    body = json.loads(Path(path).read_text())
    for resource_spans in body.get("resourceSpans", []):
        for scope_spans in resource_spans.get("scopeSpans", []):
            for span in scope_spans.get("spans", []):
                for objs in [span, *span.get("links", [])]:
                    for key in _ID_KEYS:
                        if objs.get(key):
                            objs[key] = base64.b64encode(bytes.fromhex(objs[key])).decode()
    return json_format.ParseDict(body, ExportTraceServiceRequest())


def _ids_to_hex(obj: dict) -> None:
    for key in _ID_KEYS:
        if obj.get(key):
            obj[key] = base64.b64decode(obj[key]).hex()
