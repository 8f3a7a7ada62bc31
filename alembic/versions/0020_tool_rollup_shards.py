"""agent_tool_rollups and its daily twin in shards, as agent_run_rollups is (0016).

Revision ID: 0020
Revises: 0019
Create Date: 2026-12-06

Every run that finishes adds its tool calls to agent_tool_rollups and
agent_tool_rollups_daily: one row per (hour or day, tool, duration bin), so the
finishes of one project in one hour add to the same few dozen rows, and their
transactions wait for each other's commits there, more so the more server
processes write to one database. Under the agent-shaped load of
bench/workloads.py that merge is the costliest statement (0.6-0.9 ms a call for
about 13 rows and their days, pg_stat_statements; docs/benchmarks.md, sessions
19 and 20); with shards, about a tenth less on this 2-core machine.

A ``shard`` column joins both keys, as in 0016: each transaction adds to the shard
of its backend (daily_rollups.SHARD), readers already sum rows, a shard's counters
may go below zero and only their sum over shards means something; erasure and
retention delete a key's rows once their sum counts nothing (daily_rollups.py,
store/erasure.py). The existing rows become shard 0; the downgrade folds the
shards back into one row per key.
"""

from __future__ import annotations

from alembic import op

revision = "0020"
down_revision = "0019"
branch_labels = None
depends_on = None

COUNTERS = ("calls", "runs", "repeated_calls", "error_calls")
KEYS = {
    "agent_tool_rollups": ("project_id", "bucket", "tool_name", "duration_bin"),
    "agent_tool_rollups_daily": ("project_id", "day", "tool_name", "duration_bin"),
}


def upgrade() -> None:
    for table, keys in KEYS.items():
        op.execute(f"ALTER TABLE {table} ADD COLUMN shard smallint NOT NULL DEFAULT 0")
        op.execute(f"ALTER TABLE {table} DROP CONSTRAINT {table}_pkey")
        op.execute(f"ALTER TABLE {table} ADD PRIMARY KEY ({', '.join(keys)}, shard)")


def downgrade() -> None:
    sums = ", ".join(f"sum({counter}) AS {counter}" for counter in COUNTERS)
    for table, keys in KEYS.items():
        key_list = ", ".join(keys)
        op.execute(
            f"CREATE TEMP TABLE kw_folded ON COMMIT DROP AS "
            f"SELECT {key_list}, {sums} FROM {table} GROUP BY {key_list}"
        )
        op.execute(f"DELETE FROM {table}")
        op.execute(f"ALTER TABLE {table} DROP CONSTRAINT {table}_pkey")
        op.execute(f"ALTER TABLE {table} DROP COLUMN shard")
        op.execute(
            f"INSERT INTO {table} ({key_list}, {', '.join(COUNTERS)}) SELECT * FROM kw_folded"
        )
        op.execute(f"ALTER TABLE {table} ADD PRIMARY KEY ({key_list})")
        op.execute("DROP TABLE kw_folded")
