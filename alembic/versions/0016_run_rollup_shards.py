"""agent_run_rollups in shards: one hot row an agent an hour becomes up to eight.

Revision ID: 0016
Revises: 0015
Create Date: 2026-12-01

agent_run_rollups holds one row per (project, hour a run started, agent), and
every transaction that changes a run adds to its row: the writer's batches of
steps, each run start, finish and model call, the verdict keeper, OTLP exports.
All of them in one project and one hour meet on the same few rows and wait for
each other's commit, one at a time: with 16 agents running, the writer's merge
of those rows spent 6-8 ms per call waiting (pg_stat_statements, bench/
workloads.py's agent-shaped load), most of what its transactions took.

A ``shard`` column joins the key. Each transaction adds to the shard of its
backend (``mod(pg_backend_pid(), 8)``, keelwave/server/store/statements.py), so
transactions on different connections rarely meet. Readers already sum rows
(query/aggregates.py, query/cost.py), so their answers do not change; a shard's
counters may go below zero (a run counted in one shard and finished in
another), only their sum means something. Erasure deletes a key's rows once
their sum counts nothing (store/erasure.py).

The existing rows become shard 0. The downgrade folds the shards back into one
row per key first.
"""

from __future__ import annotations

from alembic import op

revision = "0016"
down_revision = "0015"
branch_labels = None
depends_on = None

COUNTERS = (
    "runs", "finished_runs", "loop_runs", "error_runs", "steps", "llm_calls",
    "input_tokens", "output_tokens", "cost_usd", "duration_ms_sum", "term_clean",
    "term_max_steps_reached", "term_context_limit", "term_error", "term_loop_detected",
    "term_timeout", "detected_loop_runs", "exact_loop_runs", "cycle_runs",
    "near_duplicate_runs", "no_progress_runs",
)  # fmt: skip


def upgrade() -> None:
    op.execute("ALTER TABLE agent_run_rollups ADD COLUMN shard smallint NOT NULL DEFAULT 0")
    op.execute("ALTER TABLE agent_run_rollups DROP CONSTRAINT agent_run_rollups_pkey")
    op.execute(
        "ALTER TABLE agent_run_rollups ADD PRIMARY KEY (project_id, bucket, agent_name, shard)"
    )


def downgrade() -> None:
    sums = ", ".join(f"sum({counter}) AS {counter}" for counter in COUNTERS)
    op.execute(
        f"""
        CREATE TEMP TABLE kw_folded ON COMMIT DROP AS
        SELECT project_id, bucket, agent_name, {sums}
        FROM agent_run_rollups GROUP BY project_id, bucket, agent_name
        """
    )
    op.execute("DELETE FROM agent_run_rollups")
    op.execute("ALTER TABLE agent_run_rollups DROP CONSTRAINT agent_run_rollups_pkey")
    op.execute("ALTER TABLE agent_run_rollups DROP COLUMN shard")
    op.execute(
        f"INSERT INTO agent_run_rollups (project_id, bucket, agent_name, {', '.join(COUNTERS)}) "
        "SELECT * FROM kw_folded"
    )
    op.execute("ALTER TABLE agent_run_rollups ADD PRIMARY KEY (project_id, bucket, agent_name)")
