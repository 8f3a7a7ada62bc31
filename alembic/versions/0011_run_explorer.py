"""What the run explorer shows beyond counters: tracebacks, and a model call's messages.

Revision ID: 0011
Revises: 0010
Create Date: 2026-12-04

* ``agent_runs.error_traceback``, ``agent_steps.error_traceback``: the formatted
  traceback of the exception that ended a run or failed a step (the SDKs send
  the last 8 KiB of it; the server keeps at most 16 KiB), redacted like
  ``error``. NULL when none was sent.
* ``ai_traces.input_messages``, ``ai_traces.output_messages``: a model call's
  prompt and response (any JSON, as the adapters' opt-in content capture or an
  OTLP exporter sent them), redacted like the other payloads. NULL when none
  were sent, which is the default.

Nullable columns without a default: adding them rewrites nothing, on plain
PostgreSQL and on TimescaleDB hypertables (compressed chunks included), so the
upgrade takes a moment whatever the size of the tables. No index: the run
timeline reads a run's steps, model calls and child runs through the indexes
by run that exist already (agent_steps_run_idx, ai_traces_run_idx,
agent_runs_parent_idx).
"""

from __future__ import annotations

from alembic import op

revision = "0011"
down_revision = "0010"
branch_labels = None
depends_on = None

COLUMNS = (
    ("agent_runs", "error_traceback", "text"),
    ("agent_steps", "error_traceback", "text"),
    ("ai_traces", "input_messages", "json"),
    ("ai_traces", "output_messages", "json"),
)


def upgrade() -> None:
    for table, column, kind in COLUMNS:
        op.execute(f"ALTER TABLE {table} ADD COLUMN IF NOT EXISTS {column} {kind}")


def downgrade() -> None:
    for table, column, _ in reversed(COLUMNS):
        op.execute(f"ALTER TABLE {table} DROP COLUMN IF EXISTS {column}")
