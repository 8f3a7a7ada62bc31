"""On Citus: key tables for the duplicate checks of steps and model calls.

Revision ID: 0017
Revises: 0016
Create Date: 2026-12-02

On plain PostgreSQL and TimescaleDB this migration changes nothing; it acts where
0013 distributed the schema.

Since 0015, steps and model calls are daily partitions without a unique key, so the
writer's duplicate check of a batch probed, and was planned over, every day kept:
ingest slowed as days accumulated (to about half with 13 days, five of them
columnar, docs/scale-out.md). kw_step_keys and kw_call_keys hold the key of every
stored step and model call under a primary key, distributed by project_id and
co-located with agent_runs: the check is one index probe again, whatever the days.
keelwave/server/store/citus/keys.py says who keeps them.

The upgrade fills them from the stored rows (one routed INSERT … SELECT per shard)
in the migration's transaction; servers are stopped for it as for every migration.
"""

from __future__ import annotations

from sqlalchemy import text

from alembic import op

revision = "0017"
down_revision = "0016"
branch_labels = None
depends_on = None

NIL = "'00000000-0000-0000-0000-000000000000'::uuid"


def on_citus_schema() -> bool:
    """Whether 0013 distributed this database (the extension alone does not say so)."""
    found = op.get_bind().execute(
        text(
            "SELECT 1 FROM pg_extension WHERE extname = 'citus' "
            "AND to_regclass('kw_run_locks') IS NOT NULL"
        )
    )
    return found.first() is not None


def upgrade() -> None:
    if not on_citus_schema():
        return
    op.execute("SET LOCAL citus.multi_shard_modify_mode TO 'sequential'")
    op.execute(
        """
        CREATE TABLE kw_step_keys (
            project_id uuid NOT NULL,
            run_id uuid NOT NULL,
            step_index int NOT NULL,
            received_at timestamptz NOT NULL DEFAULT now(),
            PRIMARY KEY (project_id, run_id, step_index)
        )
        """
    )
    # run_key: the call's run, or the nil UUID for a call without one (a primary key
    # takes no NULL); the totals are what a run that starts after its calls counts.
    # received_at: when its row was, so that retention's drop of a day takes its keys.
    op.execute(
        """
        CREATE TABLE kw_call_keys (
            project_id uuid NOT NULL,
            run_key uuid NOT NULL,
            id uuid NOT NULL,
            input_tokens bigint,
            output_tokens bigint,
            cost_usd double precision,
            received_at timestamptz NOT NULL DEFAULT now(),
            PRIMARY KEY (project_id, run_key, id)
        )
        """
    )
    for table in ("kw_step_keys", "kw_call_keys"):
        op.execute(
            f"SELECT create_distributed_table('{table}', 'project_id', colocate_with => 'agent_runs')"
        )
    op.execute(
        "INSERT INTO kw_step_keys (project_id, run_id, step_index, received_at) "
        "SELECT project_id, run_id, step_index, received_at FROM agent_steps "
        "ON CONFLICT DO NOTHING"
    )
    op.execute(
        f"""
        INSERT INTO kw_call_keys (project_id, run_key, id, input_tokens, output_tokens,
                                  cost_usd, received_at)
        SELECT project_id, coalesce(run_id, {NIL}), id, input_tokens, output_tokens, cost_usd,
               received_at
        FROM ai_traces ON CONFLICT DO NOTHING
        """
    )


def downgrade() -> None:
    if not on_citus_schema():
        return
    op.execute("DROP TABLE IF EXISTS kw_call_keys")
    op.execute("DROP TABLE IF EXISTS kw_step_keys")
