"""The SQL of every write: moving staged rows in, keeping run counters and rollups.

Three rules hold for every transaction that writes, whether it is the ingest
writer's group commit, a finish, or the reaper timing runs out:

1. It first takes the advisory locks of the runs it touches
   (:func:`lock_keys`), in ascending order. Two transactions touching one run
   therefore run one after the other, across server processes, and the
   duplicate checks and counter updates see each other's rows.
2. It updates run rows before rollup rows.
3. It changes rollup rows in one statement, in key order, so two transactions
   can never wait on each other's rollup rows.

Counters on a run (steps, model calls, tokens, cost, last activity) are kept
current as rows arrive. Rollups add up runs by (project, agent, hour the run
started): what a new run, a step, a model call or a finish adds is collected
in the session-local table ``kw_stage_rollups`` and merged at the end.
"""

from __future__ import annotations

import uuid

LOCK_NAMESPACE = 0x6B77  # 'kw': first key of pg_advisory_xact_lock(int, int)
LOCK_BUCKETS = 256  # lock keys are run ids modulo this: bounds the locks one transaction holds

RUN_COLUMNS = (
    "project_id", "id", "agent_name", "parent_run_id", "started_at",
    "input", "metadata", "tags",
)  # fmt: skip
STEP_COLUMNS = (
    "project_id", "run_id", "step_index", "step_type", "tool_name", "tool_input",
    "tool_output", "content", "input_fingerprint", "started_at", "duration_ms", "error",
)  # fmt: skip
TRACE_COLUMNS = (
    "project_id", "id", "run_id", "step_index", "provider", "model", "input_tokens",
    "output_tokens", "cache_read_tokens", "reasoning_tokens", "cost_usd", "latency_ms",
    "status", "error", "started_at",
)  # fmt: skip

# What the rollups count, per (project, agent, hour).
ROLLUP_COUNTERS = (
    "runs", "finished_runs", "loop_runs", "error_runs", "steps", "llm_calls",
    "input_tokens", "output_tokens", "cost_usd", "duration_ms_sum",
    "term_clean", "term_max_steps_reached", "term_context_limit", "term_error",
    "term_loop_detected", "term_timeout",
)  # fmt: skip

STAGING_DDL = (
    "CREATE TEMP TABLE IF NOT EXISTS kw_stage_runs "
    "(seq integer, LIKE agent_runs INCLUDING DEFAULTS) ON COMMIT DELETE ROWS",
    "CREATE TEMP TABLE IF NOT EXISTS kw_stage_steps "
    "(seq integer, LIKE agent_steps INCLUDING DEFAULTS) ON COMMIT DELETE ROWS",
    "CREATE TEMP TABLE IF NOT EXISTS kw_stage_traces "
    "(seq integer, LIKE ai_traces INCLUDING DEFAULTS) ON COMMIT DELETE ROWS",
    "CREATE TEMP TABLE IF NOT EXISTS kw_stage_rollups "
    "(LIKE agent_run_rollups INCLUDING DEFAULTS) ON COMMIT DELETE ROWS",
)


def lock_keys(run_ids: set[uuid.UUID]) -> list[int]:
    """The advisory lock keys for these runs, sorted so that no two writers deadlock."""
    return sorted({run_id.int % LOCK_BUCKETS for run_id in run_ids})


LOCK_SQL = "SELECT pg_advisory_xact_lock(%s, key) FROM unnest(%s::int[]) AS key"


def copy_sql(stage: str, columns: tuple[str, ...]) -> str:
    return f"COPY {stage} (seq, {', '.join(columns)}) FROM STDIN"


def _cols(columns: tuple[str, ...], prefix: str = "") -> str:
    return ", ".join(prefix + column for column in columns)


_HOUR = "date_trunc('hour', {}, 'UTC')"

# New runs: skip ids already stored (or repeated in the batch: first wins); count
# steps and model calls that arrived before their run; add the run to its rollup.
INSERT_RUNS = f"""
WITH inserted AS (
    INSERT INTO agent_runs ({_cols(RUN_COLUMNS)}, step_count, llm_calls, input_tokens,
                            output_tokens, cost_usd, last_activity_at)
    SELECT DISTINCT ON (s.project_id, s.id) {_cols(RUN_COLUMNS, "s.")},
           (SELECT count(*) FROM agent_steps t
            WHERE t.project_id = s.project_id AND t.run_id = s.id),
           c.calls, c.input_tokens, c.output_tokens, c.cost_usd, now()
    FROM kw_stage_runs s
    CROSS JOIN LATERAL (
        SELECT count(*) AS calls, coalesce(sum(a.input_tokens), 0) AS input_tokens,
               coalesce(sum(a.output_tokens), 0) AS output_tokens,
               coalesce(sum(a.cost_usd), 0) AS cost_usd
        FROM ai_traces a WHERE a.project_id = s.project_id AND a.run_id = s.id
    ) c
    WHERE NOT EXISTS (SELECT 1 FROM agent_runs r WHERE r.project_id = s.project_id AND r.id = s.id)
    ORDER BY s.project_id, s.id, s.seq
    RETURNING project_id, agent_name, started_at, step_count, llm_calls, input_tokens,
              output_tokens, cost_usd
)
INSERT INTO kw_stage_rollups (project_id, agent_name, bucket, runs, steps, llm_calls,
                              input_tokens, output_tokens, cost_usd)
SELECT project_id, agent_name, {_HOUR.format("started_at")}, 1, step_count, llm_calls,
       input_tokens, output_tokens, cost_usd
FROM inserted
"""

# New steps: skip (run, step_index) already stored; bump the run's step count and
# activity, and its rollup's step total.
INSERT_STEPS = f"""
WITH inserted AS (
    INSERT INTO agent_steps ({_cols(STEP_COLUMNS)})
    SELECT DISTINCT ON (s.project_id, s.run_id, s.step_index) {_cols(STEP_COLUMNS, "s.")}
    FROM kw_stage_steps s
    WHERE NOT EXISTS (SELECT 1 FROM agent_steps t WHERE t.project_id = s.project_id
                      AND t.run_id = s.run_id AND t.step_index = s.step_index)
    ORDER BY s.project_id, s.run_id, s.step_index, s.seq
    RETURNING project_id, run_id
), per_run AS (
    SELECT project_id, run_id, count(*) AS steps FROM inserted GROUP BY project_id, run_id
), updated AS (
    UPDATE agent_runs r
    SET step_count = r.step_count + p.steps, last_activity_at = greatest(r.last_activity_at, now())
    FROM per_run p WHERE r.project_id = p.project_id AND r.id = p.run_id
    RETURNING r.project_id, r.agent_name, r.started_at, p.steps
)
INSERT INTO kw_stage_rollups (project_id, agent_name, bucket, steps)
SELECT project_id, agent_name, {_HOUR.format("started_at")}, steps FROM updated
"""

# New model calls: skip ids already stored; add calls, tokens and cost to their run.
INSERT_TRACES = f"""
WITH inserted AS (
    INSERT INTO ai_traces ({_cols(TRACE_COLUMNS)})
    SELECT DISTINCT ON (s.project_id, s.id) {_cols(TRACE_COLUMNS, "s.")}
    FROM kw_stage_traces s
    WHERE NOT EXISTS (SELECT 1 FROM ai_traces t WHERE t.project_id = s.project_id AND t.id = s.id)
    ORDER BY s.project_id, s.id, s.seq
    RETURNING project_id, run_id, input_tokens, output_tokens, cost_usd
), per_run AS (
    SELECT project_id, run_id, count(*) AS calls, sum(input_tokens) AS input_tokens,
           sum(output_tokens) AS output_tokens, coalesce(sum(cost_usd), 0) AS cost_usd
    FROM inserted WHERE run_id IS NOT NULL GROUP BY project_id, run_id
), updated AS (
    UPDATE agent_runs r
    SET llm_calls = r.llm_calls + p.calls, input_tokens = r.input_tokens + p.input_tokens,
        output_tokens = r.output_tokens + p.output_tokens, cost_usd = r.cost_usd + p.cost_usd,
        last_activity_at = greatest(r.last_activity_at, now())
    FROM per_run p WHERE r.project_id = p.project_id AND r.id = p.run_id
    RETURNING r.project_id, r.agent_name, r.started_at, p.calls, p.input_tokens,
              p.output_tokens, p.cost_usd
)
INSERT INTO kw_stage_rollups (project_id, agent_name, bucket, llm_calls, input_tokens,
                              output_tokens, cost_usd)
SELECT project_id, agent_name, {_HOUR.format("started_at")}, calls, input_tokens,
       output_tokens, cost_usd
FROM updated
"""

MERGE_ROLLUPS = f"""
INSERT INTO agent_run_rollups AS r (project_id, bucket, agent_name, {_cols(ROLLUP_COUNTERS)})
SELECT project_id, bucket, agent_name, {", ".join(f"sum({c})" for c in ROLLUP_COUNTERS)}
FROM kw_stage_rollups
GROUP BY project_id, bucket, agent_name
ORDER BY project_id, bucket, agent_name
ON CONFLICT (project_id, bucket, agent_name) DO UPDATE SET
{", ".join(f"{c} = r.{c} + excluded.{c}" for c in ROLLUP_COUNTERS)}
"""

# Finishing a run moves it between rollup counters: what it counted before (if it
# was finished already) is taken away, what it counts now is added.
FINISH_DELTA = """
INSERT INTO kw_stage_rollups (project_id, agent_name, bucket, finished_runs, loop_runs,
    error_runs, duration_ms_sum, term_clean, term_max_steps_reached, term_context_limit,
    term_error, term_loop_detected, term_timeout)
SELECT %(project_id)s, %(agent_name)s, date_trunc('hour', %(started_at)s::timestamptz, 'UTC'),
       sign * (reason IS NOT NULL)::int, sign * loop::int,
       sign * (reason IS NOT DISTINCT FROM 'error')::int, sign * coalesce(duration, 0),
       sign * (reason IS NOT DISTINCT FROM 'clean')::int,
       sign * (reason IS NOT DISTINCT FROM 'max_steps_reached')::int,
       sign * (reason IS NOT DISTINCT FROM 'context_limit')::int,
       sign * (reason IS NOT DISTINCT FROM 'error')::int,
       sign * (reason IS NOT DISTINCT FROM 'loop_detected')::int,
       sign * (reason IS NOT DISTINCT FROM 'timeout')::int
FROM (VALUES (-1, %(old_reason)s::text, %(old_loop)s::boolean, %(old_duration)s::float8),
             (1, %(new_reason)s::text, %(new_loop)s::boolean, %(new_duration)s::float8))
     AS v (sign, reason, loop, duration)
"""
