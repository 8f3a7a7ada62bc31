"""The OpenTelemetry SDK set up the way an agent's own code sets it up: a
TracerProvider with a BatchSpanProcessor in front of an OTLP/HTTP exporter,
configured only through the standard environment variables.

- ``OTEL_EXPORTER_OTLP_TRACES_PROTOCOL`` / ``OTEL_EXPORTER_OTLP_PROTOCOL``:
  ``http/protobuf`` (the default) or ``http/json``, which pick the exporter
  package (``opentelemetry-exporter-otlp-proto-http`` or
  ``opentelemetry-exporter-otlp-json-http``);
- the exporter reads ``OTEL_EXPORTER_OTLP_[TRACES_]ENDPOINT`` and
  ``OTEL_EXPORTER_OTLP_[TRACES_]HEADERS`` (the ingest key) itself, the resource
  ``OTEL_SERVICE_NAME``, and the processor ``OTEL_BSP_MAX_EXPORT_BATCH_SIZE`` and
  ``OTEL_BSP_SCHEDULE_DELAY``.

``finish`` flushes and shuts the provider down before the process exits, so
that every span is delivered, and prints one JSON line for the test: how many
spans ended and how many exports the exporter sent (counted on the way through,
nothing else is touched).
"""

from __future__ import annotations

import json
import os
import sys

from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan, SpanProcessor, TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter, SpanExportResult


def _exporter() -> SpanExporter:
    protocol = (
        os.environ.get("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL")
        or os.environ.get("OTEL_EXPORTER_OTLP_PROTOCOL")
        or "http/protobuf"
    ).strip()
    if protocol == "http/protobuf":
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    elif protocol == "http/json":
        from opentelemetry.exporter.otlp.json.http.trace_exporter import OTLPSpanExporter
    else:
        raise SystemExit(f"unsupported OTLP protocol {protocol!r} (http/protobuf or http/json)")
    return OTLPSpanExporter()


class _Counted(SpanExporter):
    """The real exporter, with a count of its exports and of those that failed."""

    def __init__(self, inner: SpanExporter) -> None:
        self.inner, self.exports, self.failed, self.sizes = inner, 0, 0, []

    def export(self, spans) -> SpanExportResult:
        result = self.inner.export(spans)
        self.exports += 1
        self.sizes.append(len(spans))
        self.failed += result is not SpanExportResult.SUCCESS
        return result

    def shutdown(self) -> None:
        self.inner.shutdown()

    def force_flush(self, timeout_millis: int = 30_000) -> bool:
        return self.inner.force_flush(timeout_millis)


class _Ended(SpanProcessor):
    def __init__(self) -> None:
        self.count = 0

    def on_end(self, span: ReadableSpan) -> None:
        self.count += 1


exporter = _Counted(_exporter())
ended = _Ended()
provider = TracerProvider()  # the resource: OTEL_SERVICE_NAME, OTEL_RESOURCE_ATTRIBUTES
provider.add_span_processor(ended)
provider.add_span_processor(BatchSpanProcessor(exporter))  # OTEL_BSP_* from the environment
trace.set_tracer_provider(provider)


def finish() -> None:
    """Deliver every span, then say what was sent (the last line of stdout)."""
    provider.force_flush()
    provider.shutdown()
    report = {
        "spans": ended.count,
        "exports": exporter.exports,
        "failed_exports": exporter.failed,
        "largest_export": max(exporter.sizes, default=0),
    }
    print(json.dumps(report), flush=True)
    if exporter.failed:
        sys.exit(3)
