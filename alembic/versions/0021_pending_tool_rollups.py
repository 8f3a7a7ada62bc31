"""agent_tool_rollups_pending: the tool calls of finished runs, before they are folded in.

Revision ID: 0021
Revises: 0020
Create Date: 2026-12-06

A finish added its run's tool calls to agent_tool_rollups and its daily twin in
its own transaction: about one hourly and one daily row a step (a step's tool
and duration bin are rarely another's in the same transaction), half of what
PostgreSQL spends on a 20-step run's finish (bench/flush_cost.py,
docs/benchmarks.md session 22). The ingest writer now appends what a batch adds
to this table instead, as plain rows; a background job folds them in every
second (store/pending_tools.py), for every run finished meanwhile at once, so a
key shared by many runs is upserted once. Readers add the rows still pending.

No index: the table holds about a second of finishes, and every reader of it
reads it whole or one project's rows.
"""

from __future__ import annotations

from alembic import op

revision = "0021"
down_revision = "0020"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.execute(
        """
        CREATE TABLE agent_tool_rollups_pending (
            project_id uuid NOT NULL,
            bucket timestamptz NOT NULL,
            tool_name text NOT NULL,
            duration_bin integer NOT NULL,
            calls bigint NOT NULL DEFAULT 0,
            runs bigint NOT NULL DEFAULT 0,
            repeated_calls bigint NOT NULL DEFAULT 0,
            error_calls bigint NOT NULL DEFAULT 0
        )
        """
    )


def downgrade() -> None:
    # What is still pending goes in first, into shard 0, as if folded.
    op.execute(
        """
        WITH taken AS (DELETE FROM agent_tool_rollups_pending RETURNING *),
        hourly AS (
            INSERT INTO agent_tool_rollups AS r (project_id, bucket, tool_name, duration_bin,
                                                 shard, calls, runs, repeated_calls, error_calls)
            SELECT project_id, bucket, tool_name, duration_bin, 0, sum(calls), sum(runs),
                   sum(repeated_calls), sum(error_calls)
            FROM taken GROUP BY 1, 2, 3, 4
            ON CONFLICT (project_id, bucket, tool_name, duration_bin, shard) DO UPDATE SET
                calls = r.calls + excluded.calls, runs = r.runs + excluded.runs,
                repeated_calls = r.repeated_calls + excluded.repeated_calls,
                error_calls = r.error_calls + excluded.error_calls
        )
        INSERT INTO agent_tool_rollups_daily AS r (project_id, day, tool_name, duration_bin,
                                                   shard, calls, runs, repeated_calls, error_calls)
        SELECT project_id, date_trunc('day', bucket, 'UTC'), tool_name, duration_bin, 0,
               sum(calls), sum(runs), sum(repeated_calls), sum(error_calls)
        FROM taken GROUP BY 1, 2, 3, 4
        ON CONFLICT (project_id, day, tool_name, duration_bin, shard) DO UPDATE SET
            calls = r.calls + excluded.calls, runs = r.runs + excluded.runs,
            repeated_calls = r.repeated_calls + excluded.repeated_calls,
            error_calls = r.error_calls + excluded.error_calls
        """
    )
    op.execute("DROP TABLE agent_tool_rollups_pending")
