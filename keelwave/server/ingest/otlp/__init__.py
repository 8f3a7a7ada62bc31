"""OTLP trace ingest: OpenTelemetry exports from agent frameworks, decoded and mapped
onto runs, steps and model calls (not yet served: storage comes with the mapping)."""
