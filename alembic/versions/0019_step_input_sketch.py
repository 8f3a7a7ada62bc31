"""Each step keeps its input's sketch, so the verdict keeper groups calls without their inputs.

Revision ID: 0019
Revises: 0018
Create Date: 2026-12-02

The near-duplicate detector groups a run's calls by the *sketch* of their inputs
(the sorted plain words, keelwave/server/findings/sketch.py) before it normalises
any. The keeper used to read every input of every tool called three times or more
back from the database to sketch it, on every judgment: under a load of long runs
that read and the sketches were most of what verdicts cost (docs/benchmarks.md).

``input_sketch`` is that sketch as a 64-bit number, computed once when the step is
stored (the native route, OTLP, import). The keeper now reads only the inputs of
calls whose sketch three or more share. Steps stored before this revision have
none (NULL); the keeper reads a run that has any such step as it did before and
sketches their inputs itself, so their verdicts do not change.

Adding a nullable column without a default rewrites nothing, on plain PostgreSQL,
on TimescaleDB (compressed chunks included) and on Citus (its shards and daily
partitions get it too).
"""

from __future__ import annotations

from alembic import op

revision = "0019"
down_revision = "0018"
branch_labels = None
depends_on = None


# On Citus the writer's staging table of steps is a distributed table that mirrors
# agent_steps (migration 0013); elsewhere each writer session makes its own.
TABLES = ("agent_steps", "kw_stage_steps")


def upgrade() -> None:
    for table in TABLES:
        op.execute(f"ALTER TABLE IF EXISTS {table} ADD COLUMN input_sketch bigint")


def downgrade() -> None:
    for table in TABLES:
        op.execute(f"ALTER TABLE IF EXISTS {table} DROP COLUMN input_sketch")
