"""Tool rollups, so /tools reads hours of counters instead of every step.

Revision ID: 0003
Revises: 0002
Create Date: 2026-11-30

agent_tool_rollups holds one row per (project, hour a run started, tool,
duration bin): the calls, runs, repeated calls and failed calls of finished
runs, with durations as a log-scale histogram for percentiles. The ingest
writer, finishes and the reaper keep it current (keelwave/server/store/tool_rollups.py
explains how); this migration fills it from the runs already finished.
"""

from __future__ import annotations

from alembic import op
from keelwave.server.store import tool_rollups

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.execute(
        """
        CREATE TABLE agent_tool_rollups (
            project_id      uuid NOT NULL,
            bucket          timestamptz NOT NULL,   -- the hour the runs started in
            tool_name       text NOT NULL,
            duration_bin    integer NOT NULL,       -- see keelwave/server/store/histogram.py
            calls           bigint NOT NULL DEFAULT 0,
            runs            bigint NOT NULL DEFAULT 0,
            repeated_calls  bigint NOT NULL DEFAULT 0,
            error_calls     bigint NOT NULL DEFAULT 0,
            PRIMARY KEY (project_id, bucket, tool_name, duration_bin)
        )
        """
    )
    finished = "(SELECT project_id, id, started_at FROM agent_runs WHERE ended_at IS NOT NULL)"
    op.execute(
        f"""
        INSERT INTO agent_tool_rollups (project_id, bucket, tool_name, duration_bin,
                                        {", ".join(tool_rollups.COUNTERS)})
        {tool_rollups.stats_of_steps(f"({tool_rollups.steps_of_runs(finished)})")}
        """
    )


def downgrade() -> None:
    op.execute("DROP TABLE IF EXISTS agent_tool_rollups")
