"""project_duration_rollups and its daily twin: the project's run durations, whatever the agent.

Revision ID: 0024
Revises: 0023
Create Date: 2026-12-07

The summary's p50 and p95 run durations came from the agents' duration histograms
summed: a row per (hour or day, agent, duration bin), 450,000 rows for a month of 150
agents (an independently built data set of 2.5 million runs; summary took 300 ms
of which the histogram was most). These hold the same counts with the agent left
out, per (project, hour or UTC day, duration bin, shard): about 200 rows a day. They
are kept by the statement that keeps the agents' histograms (daily_rollups.merge),
in shards as agent_tool_rollups is (rollup_shards.py), since every finish of the
project adds to them.

The upgrade fills them from the agents' histograms.
"""

from __future__ import annotations

from sqlalchemy import text

from alembic import op

revision = "0024"
down_revision = "0023"
branch_labels = None
depends_on = None

TABLES = {  # table: (its time column, the agents' table it sums)
    "project_duration_rollups": ("bucket", "agent_duration_rollups"),
    "project_duration_rollups_daily": ("day", "agent_duration_rollups_daily"),
}


def on_citus() -> bool:
    found = op.get_bind().execute(text("SELECT 1 FROM pg_extension WHERE extname = 'citus'"))
    return found.first() is not None


def upgrade() -> None:
    for table, (time, _) in TABLES.items():
        op.execute(
            f"""
            CREATE TABLE {table} (
                project_id    uuid NOT NULL,
                {time}        timestamptz NOT NULL,  -- the hour (UTC day) the runs started in
                duration_bin  integer NOT NULL,      -- see keelwave/server/store/histogram.py
                shard         smallint NOT NULL DEFAULT 0,
                runs          bigint NOT NULL DEFAULT 0,
                PRIMARY KEY (project_id, {time}, duration_bin, shard)
            )
            """
        )
    if on_citus():  # beside the agents' tables, on the project's shard (0013)
        op.execute("SET LOCAL citus.multi_shard_modify_mode TO 'sequential'")
        for table in TABLES:
            op.execute(
                f"SELECT create_distributed_table('{table}', 'project_id', "
                "colocate_with => 'agent_runs')"
            )
    else:
        # As in 0014: servers of an older version are stopped for this upgrade; the lock
        # makes one still writing wait rather than slip a change past the fill.
        op.execute("LOCK TABLE agent_duration_rollups, agent_duration_rollups_daily IN SHARE MODE")
    for table, (time, agents) in TABLES.items():
        op.execute(
            f"""
            INSERT INTO {table} (project_id, {time}, duration_bin, runs)
            SELECT project_id, {time}, duration_bin, sum(runs) FROM {agents}
            GROUP BY 1, 2, 3
            """
        )
    op.execute(f"ANALYZE {', '.join(TABLES)}")


def downgrade() -> None:
    for table in reversed(TABLES):
        op.execute(f"DROP TABLE IF EXISTS {table}")
