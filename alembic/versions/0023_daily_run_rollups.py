"""agent_run_rollups_daily: the run counters by UTC day, beside their hourly rows.

Revision ID: 0023
Revises: 0022
Create Date: 2026-12-07

summary, health, terminations and the daily time series sum agent_run_rollups over
their window: a row an agent an hour (and shard). With 12 agents a month is 9,000
rows; on a data set of 2.5 million runs built independently with 150 agents it is
108,000 for each window, and summary (which reads the window before too) took
470 ms, health 1.2 s. The daily twin holds, per (project, UTC day, agent, shard),
the sum of that day's hourly rows, kept by the same statements
(keelwave/server/store/daily_rollups.py, as 0014 did for the histograms): a month
is then 30 rows an agent, and the hours of its first and last day.

The upgrade fills it from the hourly rows (about a second per million).
"""

from __future__ import annotations

from sqlalchemy import text

from alembic import op

revision = "0023"
down_revision = "0022"
branch_labels = None
depends_on = None

# (the counters when this was written; one added later is added here by its migration)
COUNTERS = (
    "runs", "finished_runs", "loop_runs", "error_runs", "steps", "llm_calls",
    "input_tokens", "output_tokens", "cost_usd", "duration_ms_sum",
    "term_clean", "term_max_steps_reached", "term_context_limit", "term_error",
    "term_loop_detected", "term_timeout",
    "detected_loop_runs", "exact_loop_runs", "cycle_runs", "near_duplicate_runs",
    "no_progress_runs",
)  # fmt: skip
MONEY = ("cost_usd", "duration_ms_sum")


def on_citus() -> bool:
    found = op.get_bind().execute(text("SELECT 1 FROM pg_extension WHERE extname = 'citus'"))
    return found.first() is not None


def upgrade() -> None:
    columns = ",\n".join(
        f"    {name} {'double precision' if name in MONEY else 'bigint'} NOT NULL DEFAULT 0"
        for name in COUNTERS
    )
    op.execute(
        f"""
        CREATE TABLE agent_run_rollups_daily (
            project_id  uuid NOT NULL,
            day         timestamptz NOT NULL,   -- the UTC day the runs started in
            agent_name  text NOT NULL,
            shard       smallint NOT NULL DEFAULT 0,  -- see rollup_shards.py
        {columns},
            PRIMARY KEY (project_id, day, agent_name, shard)
        )
        """
    )
    if on_citus():  # beside its hourly table, on the project's shard (0013)
        op.execute("SET LOCAL citus.multi_shard_modify_mode TO 'sequential'")
        op.execute(
            "SELECT create_distributed_table('agent_run_rollups_daily', 'project_id', "
            "colocate_with => 'agent_runs')"
        )
    else:
        # Servers of an older version change the hourly rows only, so they are stopped
        # for this upgrade, as for every migration that adds a rollup; the lock makes one
        # still writing wait instead of slipping a change in before the fill's snapshot.
        op.execute("LOCK TABLE agent_run_rollups IN SHARE MODE")
    names = ", ".join(COUNTERS)
    op.execute(
        f"""
        INSERT INTO agent_run_rollups_daily (project_id, day, agent_name, shard, {names})
        SELECT project_id, date_trunc('day', bucket, 'UTC'), agent_name, shard,
               {", ".join(f"sum({name})" for name in COUNTERS)}
        FROM agent_run_rollups
        GROUP BY 1, 2, 3, 4
        """
    )
    op.execute("ANALYZE agent_run_rollups_daily")


def downgrade() -> None:
    op.execute("DROP TABLE IF EXISTS agent_run_rollups_daily")
