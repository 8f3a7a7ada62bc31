"""Tool rollups: what ``/tools`` reads instead of every step of a window.

One row per (project, hour the run started, tool, duration bin) counts the
tool's calls, the runs that called it, the calls that repeated a fingerprint
already seen in the run, and the calls that failed. A run is added once, when
it finishes (by the SDK or the reaper): by then its steps are all there, so
"first call of this tool in the run" and "repeat of an earlier call" are
settled facts and the counters stay additive across hours. A step arriving
after its run finished swaps the run's old contribution for the new one.
Runs still going are read from agent_steps at query time; they are few.
What the ingest writer's finishes add waits in agent_tool_rollups_pending for up
to a second, and readers add it (pending_tools.py).

Durations are kept as a log-scale histogram (histogram.py).
"""

from __future__ import annotations

from keelwave.server.store.histogram import bin_sql

COUNTERS = ("calls", "runs", "repeated_calls", "error_calls")


def stats_of_steps(steps: str) -> str:
    """SELECT the rollup rows of the tool calls in ``steps``.

    ``steps`` is a FROM item with project_id, run_id, run_started_at,
    step_index, tool_name, input_fingerprint, duration_ms, error and sign,
    holding every tool step of each run it covers (the counters look across a
    run). Each step counts ``sign`` times: -1 takes a run's calls out.
    """
    return f"""
    SELECT project_id, date_trunc('hour', run_started_at, 'UTC') AS bucket, tool_name,
           {bin_sql("duration_ms")} AS duration_bin,
           sum(sign) AS calls,
           coalesce(sum(sign) FILTER (WHERE first_of_tool), 0) AS runs,
           coalesce(sum(sign) FILTER (WHERE NOT first_of_input), 0) AS repeated_calls,
           coalesce(sum(sign) FILTER (WHERE error IS NOT NULL), 0) AS error_calls
    FROM (
        SELECT project_id, run_id, run_started_at, tool_name, duration_ms, error, sign,
               row_number() OVER (PARTITION BY project_id, run_id, tool_name
                                  ORDER BY step_index) = 1 AS first_of_tool,
               row_number() OVER (PARTITION BY project_id, run_id, input_fingerprint
                                  ORDER BY step_index) = 1 AS first_of_input
        FROM {steps} AS steps WHERE tool_name IS NOT NULL
    ) calls
    GROUP BY 1, 2, 3, 4
    """


def steps_of_runs(runs: str, sign: str = "1") -> str:
    """SELECT the stored steps of the runs (project_id, id, started_at) in FROM item ``runs``.

    Each step carries ``sign`` along (a number, or a column of ``runs``). LATERAL, so
    that each run's steps are found by an index probe (of the compressed chunks'
    (project_id, run_id) index on TimescaleDB) whatever the planner thinks of the
    number of runs, never by a join that reads every step.
    """
    return f"""
        SELECT s.project_id, s.run_id, r.started_at AS run_started_at, s.step_index,
               s.tool_name, s.input_fingerprint, s.duration_ms, s.error, {sign} AS sign
        FROM {runs} AS r
        CROSS JOIN LATERAL (
            SELECT * FROM agent_steps s WHERE s.project_id = r.project_id AND s.run_id = r.id
        ) s
    """


_FINISHED_RUNS = """(
    SELECT r.project_id, r.id, r.started_at
    FROM unnest(%(project_ids)b::uuid[], %(run_ids)b::uuid[]) AS f (project_id, id)
    JOIN agent_runs r ON r.project_id = f.project_id AND r.id = f.id
)"""
# Add the runs just finished (project_ids[i], run_ids[i]) to the staged rollups.
STAGE_FINISHED = f"""
INSERT INTO kw_stage_tools (project_id, bucket, tool_name, duration_bin, {", ".join(COUNTERS)})
{stats_of_steps(f"({steps_of_runs(_FINISHED_RUNS)})")}
"""
