"""Daily copies of the duration and tool histograms, so a month is read in days.

Revision ID: 0014
Revises: 0013
Create Date: 2026-12-05

agent_duration_rollups_daily and agent_tool_rollups_daily hold, per UTC day a run
started, what agent_duration_rollups and agent_tool_rollups hold per hour: always
the sum of that day's hourly rows, kept by the same statements
(keelwave/server/store/daily_rollups.py). summary, health and tools read the whole
days of a window from them and only the hours of its first and last day from the
hourly tables. On 50 million steps over 30 days (bench/scale.py) the duration
histogram of 30 days is 752,130 hourly rows against 53,866 daily ones, and the tool
histogram 508,000 against 22,320 (docs/benchmarks.md, "Ten times the data").

The upgrade fills them from the hourly rows; that reads each hourly table once
(about a second per million rows).
"""

from __future__ import annotations

from sqlalchemy import text

from alembic import op

revision = "0014"
down_revision = "0013"
branch_labels = None
depends_on = None

DAILY_TABLES = ("agent_duration_rollups_daily", "agent_tool_rollups_daily")


def on_citus() -> bool:
    found = op.get_bind().execute(text("SELECT 1 FROM pg_extension WHERE extname = 'citus'"))
    return found.first() is not None


def upgrade() -> None:
    op.execute(
        """
        CREATE TABLE agent_duration_rollups_daily (
            project_id    uuid NOT NULL,
            day           timestamptz NOT NULL,   -- the UTC day the runs started in
            agent_name    text NOT NULL,
            duration_bin  integer NOT NULL,       -- see keelwave/server/store/histogram.py
            runs          bigint NOT NULL DEFAULT 0,
            PRIMARY KEY (project_id, day, agent_name, duration_bin)
        )
        """
    )
    op.execute(
        """
        CREATE TABLE agent_tool_rollups_daily (
            project_id      uuid NOT NULL,
            day             timestamptz NOT NULL,   -- the UTC day the runs started in
            tool_name       text NOT NULL,
            duration_bin    integer NOT NULL,
            calls           bigint NOT NULL DEFAULT 0,
            runs            bigint NOT NULL DEFAULT 0,
            repeated_calls  bigint NOT NULL DEFAULT 0,
            error_calls     bigint NOT NULL DEFAULT 0,
            PRIMARY KEY (project_id, day, tool_name, duration_bin)
        )
        """
    )
    if on_citus():  # beside their hourly tables, on the project's shard (0013)
        op.execute("SET LOCAL citus.multi_shard_modify_mode TO 'sequential'")
        for table in DAILY_TABLES:
            op.execute(
                f"SELECT create_distributed_table('{table}', 'project_id', "
                "colocate_with => 'agent_runs')"
            )
    else:
        # Servers of an older version change the hourly rows only, so they are stopped
        # for this upgrade, as for every migration that adds a rollup. The lock makes
        # one still writing wait for the commit instead of slipping a change in
        # between the fill's snapshot and it.
        op.execute("LOCK TABLE agent_duration_rollups, agent_tool_rollups IN SHARE MODE")
    op.execute(
        """
        INSERT INTO agent_duration_rollups_daily (project_id, day, agent_name, duration_bin, runs)
        SELECT project_id, date_trunc('day', bucket, 'UTC'), agent_name, duration_bin, sum(runs)
        FROM agent_duration_rollups
        GROUP BY 1, 2, 3, 4
        """
    )
    op.execute(
        """
        INSERT INTO agent_tool_rollups_daily (project_id, day, tool_name, duration_bin,
                                              calls, runs, repeated_calls, error_calls)
        SELECT project_id, date_trunc('day', bucket, 'UTC'), tool_name, duration_bin,
               sum(calls), sum(runs), sum(repeated_calls), sum(error_calls)
        FROM agent_tool_rollups
        GROUP BY 1, 2, 3, 4
        """
    )
    op.execute("ANALYZE agent_duration_rollups_daily, agent_tool_rollups_daily")


def downgrade() -> None:
    for table in reversed(DAILY_TABLES):
        op.execute(f"DROP TABLE IF EXISTS {table}")
