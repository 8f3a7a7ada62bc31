"""agent_duration_rollups_weekly and agent_tool_rollups_weekly: the histograms by UTC week.

Revision ID: 0027
Revises: 0026
Create Date: 2026-12-07

health (each agent's p95 duration) and tools sum the duration histograms over their
window: whole days from the daily twins (0014), about 100 bins an agent or a tool a
day. On a data set of 2.5 million runs over 30 days with 150 agents and 400 tools
that is 441,000 and 1,056,000 daily rows a month, and health took 240 ms, tools
930 ms on a 2-core machine. A week holds hardly more bins than a day, so the weekly
twins, kept by the statements that keep the daily ones
(keelwave/server/store/daily_rollups.py), give the whole weeks of a month from about
a fifth of the rows.

The upgrade fills them from the daily rows (about a second per million).
"""

from __future__ import annotations

from sqlalchemy import text

from alembic import op

revision = "0027"
down_revision = "0026"
branch_labels = None
depends_on = None

# (table, its daily twin, its columns after the week, its primary key after the week)
TABLES = (
    (
        "agent_duration_rollups_weekly",
        "agent_duration_rollups_daily",
        """agent_name    text NOT NULL,
            duration_bin  integer NOT NULL,
            runs          bigint NOT NULL DEFAULT 0""",
        ("agent_name", "duration_bin"),
        ("runs",),
    ),
    (
        "agent_tool_rollups_weekly",
        "agent_tool_rollups_daily",
        """tool_name       text NOT NULL,
            duration_bin    integer NOT NULL,
            shard           smallint NOT NULL DEFAULT 0,  -- see rollup_shards.py
            calls           bigint NOT NULL DEFAULT 0,
            runs            bigint NOT NULL DEFAULT 0,
            repeated_calls  bigint NOT NULL DEFAULT 0,
            error_calls     bigint NOT NULL DEFAULT 0""",
        ("tool_name", "duration_bin", "shard"),
        ("calls", "runs", "repeated_calls", "error_calls"),
    ),
)


def on_citus() -> bool:
    found = op.get_bind().execute(text("SELECT 1 FROM pg_extension WHERE extname = 'citus'"))
    return found.first() is not None


def upgrade() -> None:
    citus = on_citus()
    if citus:
        op.execute("SET LOCAL citus.multi_shard_modify_mode TO 'sequential'")
    else:
        # Servers of an older version change the daily rows only, so they are stopped
        # for this upgrade, as for every migration that adds a rollup; the lock makes one
        # still writing wait instead of slipping a change in before the fill's snapshot.
        op.execute(
            "LOCK TABLE agent_duration_rollups_daily, agent_tool_rollups_daily IN SHARE MODE"
        )
    for table, daily, columns, keys, counters in TABLES:
        op.execute(
            f"""
            CREATE TABLE {table} (
                project_id  uuid NOT NULL,
                week        timestamptz NOT NULL,  -- the UTC week (Monday) the runs started in
                {columns},
                PRIMARY KEY (project_id, week, {", ".join(keys)})
            )
            """
        )
        if citus:  # beside its daily table, on the project's shard (0013)
            op.execute(
                f"SELECT create_distributed_table('{table}', 'project_id', "
                "colocate_with => 'agent_runs')"
            )
        names = ", ".join((*keys, *counters))
        op.execute(
            f"""
            INSERT INTO {table} (project_id, week, {names})
            SELECT project_id, date_trunc('week', day, 'UTC'), {", ".join(keys)},
                   {", ".join(f"sum({name})" for name in counters)}
            FROM {daily}
            GROUP BY project_id, 2, {", ".join(keys)}
            """
        )
        op.execute(f"ANALYZE {table}")


def downgrade() -> None:
    for table, *_ in TABLES:
        op.execute(f"DROP TABLE IF EXISTS {table}")
