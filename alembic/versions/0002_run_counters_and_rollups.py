"""Run counters, hourly rollups and the spec's views, for a fast read side.

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-30

* agent_runs carries what a run list shows without touching its steps:
  step_count, llm_calls, tokens, cost, duration_ms, last_activity_at. The
  ingest writer keeps them current in the same transaction as the rows.
* agent_run_rollups holds one row per (project, agent, hour of start) with
  additive counters, so summary, health, timeseries and terminations over a
  week read a few thousand rollup rows instead of every run. The hours at the
  edges of a window are read from agent_runs, so the answers stay exact.
* Views named in the product documents (tool stats, run health, loops) for
  people who query the database directly.
"""

from __future__ import annotations

from alembic import op

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None

COUNTERS = (
    "runs", "finished_runs", "loop_runs", "error_runs", "steps", "llm_calls",
    "input_tokens", "output_tokens", "cost_usd", "duration_ms_sum",
    "term_clean", "term_max_steps_reached", "term_context_limit", "term_error",
    "term_loop_detected", "term_timeout",
)  # fmt: skip


def upgrade() -> None:
    op.execute(
        """
        ALTER TABLE agent_runs
            ADD COLUMN duration_ms       double precision,
            ADD COLUMN step_count        integer NOT NULL DEFAULT 0,
            ADD COLUMN llm_calls         integer NOT NULL DEFAULT 0,
            ADD COLUMN input_tokens      bigint NOT NULL DEFAULT 0,
            ADD COLUMN output_tokens     bigint NOT NULL DEFAULT 0,
            ADD COLUMN cost_usd          double precision NOT NULL DEFAULT 0,
            ADD COLUMN last_activity_at  timestamptz
        """
    )
    # Backfill what earlier versions stored.
    op.execute(
        """
        UPDATE agent_runs r SET
            duration_ms = CASE WHEN r.ended_at IS NOT NULL
                          THEN extract(epoch FROM r.ended_at - r.started_at) * 1000 END,
            step_count = (SELECT count(*) FROM agent_steps s
                          WHERE s.project_id = r.project_id AND s.run_id = r.id),
            (llm_calls, input_tokens, output_tokens, cost_usd) = (
                SELECT count(*), coalesce(sum(a.input_tokens), 0),
                       coalesce(sum(a.output_tokens), 0), coalesce(sum(a.cost_usd), 0)
                FROM ai_traces a WHERE a.project_id = r.project_id AND a.run_id = r.id),
            last_activity_at = greatest(r.received_at, (
                SELECT max(s.received_at) FROM agent_steps s
                WHERE s.project_id = r.project_id AND s.run_id = r.id))
        """
    )
    op.execute(
        "UPDATE agent_runs SET last_activity_at = received_at WHERE last_activity_at IS NULL"
    )
    op.execute("ALTER TABLE agent_runs ALTER COLUMN last_activity_at SET NOT NULL")
    op.execute("ALTER TABLE agent_runs ALTER COLUMN last_activity_at SET DEFAULT now()")

    # Newest-first listing with a stable (started_at, id) cursor, per agent or not.
    op.execute("DROP INDEX agent_runs_recent_idx")
    op.execute(
        "CREATE INDEX agent_runs_recent_idx ON agent_runs (project_id, started_at DESC, id DESC)"
    )
    op.execute(
        "CREATE INDEX agent_runs_agent_idx "
        "ON agent_runs (project_id, agent_name, started_at DESC, id DESC)"
    )
    # Duration percentiles per window (and per agent) read only this index, not the runs.
    op.execute(
        "CREATE INDEX agent_runs_durations_idx ON agent_runs (project_id, agent_name, started_at) "
        "INCLUDE (duration_ms) WHERE duration_ms IS NOT NULL"
    )
    # Unfinished runs are few (the reaper times them out): stalls and the reaper read this.
    op.execute(
        "CREATE INDEX agent_runs_unfinished_idx ON agent_runs (project_id, last_activity_at) "
        "WHERE ended_at IS NULL"
    )

    counters = ",\n".join(
        f"    {name} {'double precision' if name in ('cost_usd', 'duration_ms_sum') else 'bigint'}"
        " NOT NULL DEFAULT 0"
        for name in COUNTERS
    )
    op.execute(
        f"""
        CREATE TABLE agent_run_rollups (
            project_id  uuid NOT NULL,
            agent_name  text NOT NULL,
            bucket      timestamptz NOT NULL,   -- the hour the runs started in
        {counters},
            PRIMARY KEY (project_id, bucket, agent_name)
        )
        """
    )
    op.execute(
        f"""
        INSERT INTO agent_run_rollups (project_id, agent_name, bucket, {", ".join(COUNTERS)})
        SELECT project_id, agent_name, date_trunc('hour', started_at, 'UTC'),
               count(*), count(ended_at), count(*) FILTER (WHERE loop_detected),
               count(*) FILTER (WHERE termination_reason = 'error'),
               sum(step_count), sum(llm_calls), sum(input_tokens), sum(output_tokens),
               sum(cost_usd), coalesce(sum(duration_ms), 0),
               count(*) FILTER (WHERE termination_reason = 'clean'),
               count(*) FILTER (WHERE termination_reason = 'max_steps_reached'),
               count(*) FILTER (WHERE termination_reason = 'context_limit'),
               count(*) FILTER (WHERE termination_reason = 'error'),
               count(*) FILTER (WHERE termination_reason = 'loop_detected'),
               count(*) FILTER (WHERE termination_reason = 'timeout')
        FROM agent_runs GROUP BY 1, 2, 3
        """
    )

    op.execute(
        """
        CREATE VIEW agent_run_health AS
        SELECT project_id, agent_name,
               count(*) AS runs,
               count(*) FILTER (WHERE loop_detected) AS loop_runs,
               round(count(*) FILTER (WHERE loop_detected)::numeric / count(*), 4) AS loop_rate,
               count(*) FILTER (WHERE termination_reason = 'error') AS error_runs,
               percentile_cont(0.95) WITHIN GROUP (ORDER BY duration_ms) AS p95_duration_ms,
               avg(step_count) AS avg_steps,
               sum(cost_usd) AS cost_usd,
               max(started_at) AS last_run_at
        FROM agent_runs GROUP BY project_id, agent_name
        """
    )
    op.execute(
        """
        CREATE VIEW agent_tool_stats AS
        SELECT project_id, tool_name,
               count(*) AS calls,
               count(DISTINCT run_id) AS runs,
               count(*) - count(DISTINCT (run_id, input_fingerprint)) AS repeated_calls,
               count(*) FILTER (WHERE error IS NOT NULL) AS error_calls,
               percentile_cont(0.5) WITHIN GROUP (ORDER BY duration_ms) AS p50_duration_ms,
               percentile_cont(0.95) WITHIN GROUP (ORDER BY duration_ms) AS p95_duration_ms
        FROM agent_steps WHERE tool_name IS NOT NULL
        GROUP BY project_id, tool_name
        """
    )
    op.execute(
        """
        CREATE VIEW agent_run_loops AS
        SELECT project_id, run_id, input_fingerprint AS fingerprint, min(tool_name) AS tool_name,
               count(*) AS hits, array_agg(step_index ORDER BY step_index) AS step_indices
        FROM agent_steps WHERE input_fingerprint IS NOT NULL
        GROUP BY project_id, run_id, input_fingerprint HAVING count(*) >= 2
        """
    )


def downgrade() -> None:
    for view in ("agent_run_loops", "agent_tool_stats", "agent_run_health"):
        op.execute(f"DROP VIEW IF EXISTS {view}")
    op.execute("DROP TABLE IF EXISTS agent_run_rollups")
    op.execute("DROP INDEX IF EXISTS agent_runs_unfinished_idx")
    op.execute("DROP INDEX IF EXISTS agent_runs_durations_idx")
    op.execute("DROP INDEX IF EXISTS agent_runs_agent_idx")
    op.execute("DROP INDEX IF EXISTS agent_runs_recent_idx")
    op.execute("CREATE INDEX agent_runs_recent_idx ON agent_runs (project_id, started_at DESC)")
    op.execute(
        """
        ALTER TABLE agent_runs
            DROP COLUMN duration_ms, DROP COLUMN step_count, DROP COLUMN llm_calls,
            DROP COLUMN input_tokens, DROP COLUMN output_tokens, DROP COLUMN cost_usd,
            DROP COLUMN last_activity_at
        """
    )
