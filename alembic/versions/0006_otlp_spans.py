"""OTLP ingest: the spans as received, and what runs they were last projected into.

Revision ID: 0006
Revises: 0005
Create Date: 2026-12-01

Why the spans are kept (the decision, docs/otlp.md): a trace's spans arrive in
several exports, children first, sometimes twice. The runs, steps and model
calls keelwave shows are a pure function of the *set* of a trace's spans
(ingest/otlp/mapping.py), so every export that brings new spans recomputes
its traces from all of their stored spans. The primary key makes a retried
export a no-op; otlp_runs remembers, per derived run, digests of its row, its
steps and its model calls, so that recomputing rewrites only what changed
(usually: appends the new steps).

Both are plain tables on TimescaleDB too: they are keyed by trace, written
once per span, and read by trace.
"""

from __future__ import annotations

from alembic import op

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.execute(
        """
        CREATE TABLE otlp_spans (
            project_id   uuid NOT NULL,
            trace_id     bytea NOT NULL,
            span_id      bytea NOT NULL,
            span         bytea NOT NULL,  -- the decoded span, msgpack (ingest/otlp/spans.py)
            received_at  timestamptz NOT NULL DEFAULT now(),
            PRIMARY KEY (project_id, trace_id, span_id)
        )
        """
    )
    op.execute("CREATE INDEX otlp_spans_received_idx ON otlp_spans (received_at)")
    # Stored spans are large (a tool's arguments and result, an agent's messages) and
    # written once: lz4 compresses them in about a fifth of the CPU of the default
    # pglz (measured: 3.6 against 17 µs a span), where the server was built with it.
    op.execute(
        """
        DO $$
        BEGIN
            ALTER TABLE otlp_spans ALTER COLUMN span SET COMPRESSION lz4;
        EXCEPTION WHEN feature_not_supported OR invalid_parameter_value THEN
            NULL;  -- a PostgreSQL built without lz4: pglz, as every other column
        END $$
        """
    )
    op.execute(
        """
        CREATE TABLE otlp_runs (
            project_id    uuid NOT NULL,
            trace_id      bytea NOT NULL,
            run_id        uuid NOT NULL,
            digest        bytea NOT NULL,  -- of the run's own row
            step_digests  bytea NOT NULL,  -- 16 bytes per step, in step_index order
            calls         bytea NOT NULL,  -- per model call: its id (16 bytes), its digest (16)
            PRIMARY KEY (project_id, trace_id, run_id)
        )
        """
    )


def downgrade() -> None:
    op.execute("DROP TABLE IF EXISTS otlp_runs")
    op.execute("DROP TABLE IF EXISTS otlp_spans")
