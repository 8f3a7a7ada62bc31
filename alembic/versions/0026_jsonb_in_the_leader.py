"""keelwave_jsonb is not run in parallel mode.

Revision ID: 0026
Revises: 0025
Create Date: 2026-12-07

``keelwave_jsonb(json)`` (migration 0009) reads a run's metadata as jsonb for the
runs list's ``metadata`` filter and erasure by metadata, falling back to a cleaned
copy where jsonb refuses the text (an escaped NUL). Its fallback is an EXCEPTION
block, which opens a subtransaction each call, and it was declared PARALLEL SAFE:
when PostgreSQL ran such a query in parallel workers, as it chooses to on a big
project's tables, every worker failed with "cannot start subtransactions during a
parallel operation" and the API answered 500 (``/runs?metadata=…&tag=…`` on 2.5
million runs). The leader is in parallel mode too while its workers run, so the
function is PARALLEL UNSAFE: a query that calls it is planned without workers. The
runs list no longer calls it for its rows (it tells OpenTelemetry runs from their
metadata in Python), so only the metadata filters and erasure by metadata go
without workers, and they read the GIN index on the expression (migration 0012),
which is unaffected: its values are the same.
"""

from __future__ import annotations

from alembic import op

revision = "0026"
down_revision = "0025"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.execute("ALTER FUNCTION keelwave_jsonb(json) PARALLEL UNSAFE")


def downgrade() -> None:
    op.execute("ALTER FUNCTION keelwave_jsonb(json) PARALLEL SAFE")
