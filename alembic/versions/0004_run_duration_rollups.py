"""Run durations as hourly histograms, so summary and health percentiles need no sort.

Revision ID: 0004
Revises: 0003
Create Date: 2026-11-30

agent_duration_rollups holds one row per (project, hour a run started, agent,
duration bin): how many finished runs of that agent took a duration in that
bin (keelwave/server/store/histogram.py). Finishes and the reaper keep it current
alongside agent_run_rollups; this migration fills it from the runs already
finished.
"""

from __future__ import annotations

from alembic import op
from keelwave.server.store.histogram import bin_sql

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.execute(
        """
        CREATE TABLE agent_duration_rollups (
            project_id    uuid NOT NULL,
            bucket        timestamptz NOT NULL,   -- the hour the runs started in
            agent_name    text NOT NULL,
            duration_bin  integer NOT NULL,       -- see keelwave/server/store/histogram.py
            runs          bigint NOT NULL DEFAULT 0,
            PRIMARY KEY (project_id, bucket, agent_name, duration_bin)
        )
        """
    )
    op.execute(
        f"""
        INSERT INTO agent_duration_rollups (project_id, bucket, agent_name, duration_bin, runs)
        SELECT project_id, date_trunc('hour', started_at, 'UTC'), agent_name,
               {bin_sql("duration_ms")}, count(*)
        FROM agent_runs WHERE termination_reason IS NOT NULL AND duration_ms IS NOT NULL
        GROUP BY 1, 2, 3, 4
        """
    )


def downgrade() -> None:
    op.execute("DROP TABLE IF EXISTS agent_duration_rollups")
