"""Count a project again from the rows it has stored: ``keelwave projects recount``.

Ingest keeps every count as it goes: each run's counters (steps, model calls,
tokens, cost) in agent_runs, and the rollups that summary, health, timeseries,
terminations, findings and tools read (agent_run_rollups, the duration and tool
histograms and their daily twins), each changed by exactly what a transaction
stored. Rows that arrive another way are not counted: a bulk load with COPY, a
restore of some tables only, a row fixed by hand. Recounting derives all of it
from agent_runs, agent_steps and ai_traces again, the way ingest would have:

- each run's step_count, llm_calls, input_tokens, output_tokens and cost_usd from
  its steps and model calls, and the duration of a finished run that has none;
- the project's rollup rows, deleted and rebuilt: runs by the hour they started
  (what each run row adds is :data:`RUN_SHARES`, the sum of what its start, steps,
  calls, finish and verdict added), finished runs' durations, finished runs' tool
  calls (tool_rollups.py's own SQL), the daily twins from the hourly rows and the
  weekly ones from the daily rows.

A run whose step count changed is judged again by the servers' verdict keeper,
which picks runs whose ``verdict_steps`` differs from their ``step_count``
(store/verdicts.py); what it then changes in the rollups it adds as it always does.

All in one transaction that first locks agent_runs and the rollup tables against
writes (EXCLUSIVE: reads go on; ingest, finishes, the keeper and retention wait
for it, in statements.py's lock order, so none can deadlock with it): the
counts are of one moment, and no write is counted twice or lost. On 50 million
steps that is minutes (docs/benchmarks.md); ingest waits, and the servers answer
503 with Retry-After once their buffers fill.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import timedelta

import psycopg

from keelwave.server.store import citus, daily_rollups, pending_tools, tool_rollups
from keelwave.server.store.histogram import bin_sql
from keelwave.server.store.statements import (
    ROLLUP_COUNTERS,
    TERMINATION_COUNTERS,
    calls_of_run,
    steps_of_run,
)

# Rule 3's order (statements.py): runs first, then the rollups, each daily table
# straight after its hourly one.
LOCKED = (
    "agent_runs", "agent_run_rollups", "agent_run_rollups_daily", "agent_duration_rollups",
    "agent_duration_rollups_daily", "agent_duration_rollups_weekly", "project_duration_rollups",
    "project_duration_rollups_daily", pending_tools.PENDING, "agent_tool_rollups",
    "agent_tool_rollups_daily", "agent_tool_rollups_weekly",
)  # fmt: skip
ROLLUP_TABLES = tuple(table for table in LOCKED[1:] if table != pending_tools.PENDING)

# A run's cost is a float summed as its calls arrived, request by request; summed again
# in another order it may differ in the last bits (0.7 + (0.1 + 0.2) = 1.0, but
# (0.7 + 0.1) + 0.2 = 0.9999999999999999). That is not a wrong count.
COST_TOLERANCE = "1e-9 * greatest(1, abs(n.cost_usd))"
# Each run's counters from its rows; the duration of a finished run as a finish sets it.
RUN_COUNTERS = f"""
UPDATE agent_runs r
SET step_count = n.steps, llm_calls = n.calls, input_tokens = n.input_tokens,
    output_tokens = n.output_tokens, cost_usd = n.cost_usd,
    duration_ms = coalesce(r.duration_ms, n.duration_ms)
FROM (
    SELECT r.id, {steps_of_run("r")} AS steps, c.*,
           CASE WHEN r.ended_at IS NOT NULL
                THEN greatest(0, extract(epoch FROM r.ended_at - r.started_at) * 1000) END
               AS duration_ms
    FROM agent_runs r
    CROSS JOIN LATERAL ({calls_of_run("r")}) c
    WHERE r.project_id = %(project)s
) n
WHERE r.project_id = %(project)s AND r.id = n.id
  AND ((r.step_count, r.llm_calls, r.input_tokens, r.output_tokens)
        IS DISTINCT FROM (n.steps, n.calls, n.input_tokens, n.output_tokens)
       OR r.cost_usd IS NULL OR abs(r.cost_usd - n.cost_usd) > {COST_TOLERANCE}
       OR (r.duration_ms IS NULL AND n.duration_ms IS NOT NULL))
"""

# Every rebuilt rollup is written in time order (ORDER BY its hour or day first), as
# ingest writes it: a window's edge hours are then on a few pages, not spread over the
# whole table in the hash aggregate's order (health's histogram read of 67,000 edge
# rows over 50 million steps: 17,800 pages and 166 ms in that order, 1,000 and 118 ms
# in time order).

# What one agent_runs row adds to each counter of agent_run_rollups: how its start,
# its steps and model calls, its finish and its verdict add up (statements.py).
RUN_SHARES = {
    "runs": "count(*)",
    "finished_runs": "count(*) FILTER (WHERE termination_reason IS NOT NULL)",
    "loop_runs": "count(*) FILTER (WHERE loop_detected)",
    "error_runs": "count(*) FILTER (WHERE termination_reason = 'error')",
    "steps": "sum(step_count)",
    "llm_calls": "sum(llm_calls)",
    "input_tokens": "sum(input_tokens)",
    "output_tokens": "sum(output_tokens)",
    "cost_usd": "sum(cost_usd)",
    "duration_ms_sum": (
        "coalesce(sum(duration_ms) FILTER (WHERE termination_reason IS NOT NULL), 0)"
    ),
    **{
        f"term_{reason}": f"count(*) FILTER (WHERE termination_reason = '{reason}')"
        for reason in TERMINATION_COUNTERS
    },
    "detected_loop_runs": "count(*) FILTER (WHERE detected_loop)",
    **{
        f"{kind}_runs": f"count(*) FILTER (WHERE '{kind}' = ANY(findings))"
        for kind in ("exact_loop", "cycle", "near_duplicate", "no_progress")
    },
}
_UNKNOWN = set(ROLLUP_COUNTERS) ^ set(RUN_SHARES)
assert not _UNKNOWN, f"a rollup counter without its share of a run: {sorted(_UNKNOWN)}"

RUN_ROLLUPS = f"""
INSERT INTO agent_run_rollups (project_id, agent_name, bucket, {", ".join(ROLLUP_COUNTERS)})
SELECT project_id, agent_name, date_trunc('hour', started_at, 'UTC'),
       {", ".join(RUN_SHARES[counter] for counter in ROLLUP_COUNTERS)}
FROM agent_runs WHERE project_id = %(project)s
GROUP BY 1, 2, 3
ORDER BY 3, 2
"""
DURATION_ROLLUPS = f"""
INSERT INTO agent_duration_rollups (project_id, bucket, agent_name, duration_bin, runs)
SELECT project_id, date_trunc('hour', started_at, 'UTC'), agent_name, {bin_sql("duration_ms")},
       count(*)
FROM agent_runs
WHERE project_id = %(project)s AND termination_reason IS NOT NULL AND duration_ms IS NOT NULL
GROUP BY 1, 2, 3, 4
ORDER BY 2, 3, 4
"""
# The project's durations whatever the agent: the agents' histograms summed.
PROJECT_DURATION_ROLLUPS = """
INSERT INTO project_duration_rollups (project_id, bucket, duration_bin, runs)
SELECT project_id, bucket, duration_bin, sum(runs) FROM agent_duration_rollups
WHERE project_id = %(project)s
GROUP BY 1, 2, 3
ORDER BY 2, 3
"""
# A finished run's tool calls, by the finish path's own SQL (tool_rollups.py), for the
# runs that started in [lo, hi): whole hours, so no two slices share a row. The slice's
# runs are materialized first, and the transaction forbids sequential scans and hash
# or merge joins (PLANNER): over 50 million steps the planner otherwise turns the
# LATERAL around, reading every step of the table once per slice instead of probing
# each run's steps by index.
TOOL_ROLLUPS = f"""
WITH slice AS MATERIALIZED (
    SELECT project_id, id, started_at FROM agent_runs
    WHERE project_id = %(project)s AND ended_at IS NOT NULL
      AND started_at >= %(lo)s AND started_at < %(hi)s
)
INSERT INTO agent_tool_rollups (project_id, bucket, tool_name, duration_bin,
                                {", ".join(tool_rollups.COUNTERS)})
{tool_rollups.stats_of_steps(f"({tool_rollups.steps_of_runs('slice')})")}
"""
PLANNER = ("enable_seqscan = off", "enable_hashjoin = off", "enable_mergejoin = off")
TOOL_SLICE = timedelta(days=1)
FINISHED_RUN_STARTS = """
SELECT date_trunc('hour', min(started_at), 'UTC'), max(started_at) FROM agent_runs
WHERE project_id = %(project)s AND ended_at IS NOT NULL
"""


def _summed_by(
    table: daily_rollups.Rollup, target: str, period: str, source: str, time: str
) -> str:
    """INSERT into ``target`` the project's rows of ``source`` summed by UTC ``period``
    (shards summed), in key order."""
    keys, counters = ", ".join(table.keys), table.counters
    positions = range(1, len(table.keys) + 3)
    return f"""
INSERT INTO {target} (project_id, {period}, {keys}, {", ".join(counters)})
SELECT project_id, date_trunc('{period}', {time}, 'UTC'), {keys},
       {", ".join(f"sum({counter})" for counter in counters)}
FROM {source} WHERE project_id = %(project)s
GROUP BY {", ".join(str(n) for n in positions)}
ORDER BY {", ".join(str(n) for n in positions if n > 1)}
"""


# The daily twins (daily_rollups.py): their hourly rows by UTC day; the weekly twins:
# their daily rows by UTC week (Monday).
DAILY_ROLLUPS = tuple(
    _summed_by(table, table.daily, "day", table.hourly, "bucket") for table in daily_rollups.ROLLUPS
)
WEEKLY_ROLLUPS = tuple(
    _summed_by(table, table.weekly, "week", table.daily, "day")
    for table in daily_rollups.ROLLUPS
    if table.weekly
)


@dataclass(slots=True)
class Recounted:
    """What a recount found and made."""

    runs: int  # the project's runs
    runs_corrected: int  # runs whose counters (or duration) were not what their rows say
    rollup_rows: int  # rollup rows rebuilt, hourly, daily and weekly

    def as_dict(self) -> dict[str, int]:
        return {
            "runs": self.runs,
            "runs_corrected": self.runs_corrected,
            "rollup_rows": self.rollup_rows,
        }


def recount(conn: psycopg.Connection, project_id: uuid.UUID | str) -> Recounted:
    """Recount one project (module docstring), in one transaction of ``conn``."""
    project = {"project": uuid.UUID(str(project_id))}
    with conn.transaction(), conn.cursor() as cur:
        for setting in PLANNER:
            cur.execute(f"SET LOCAL {setting}")
        # (On Citus nothing is left pending: its writer merges tool calls at once.)
        pending = not citus.on_citus_now(conn)
        for table in LOCKED:  # one at a time, in order: LOCK takes its list in order too
            if pending or table != pending_tools.PENDING:
                cur.execute(f"LOCK TABLE {table} IN EXCLUSIVE MODE")
        cur.execute(RUN_COUNTERS, project)
        corrected = cur.rowcount
        if pending:
            cur.execute(pending_tools.FORGET_PROJECT, project)  # the rebuild counts them
        for table in ROLLUP_TABLES:
            cur.execute(f"DELETE FROM {table} WHERE project_id = %(project)s", project)
        rows = 0
        for statement in (RUN_ROLLUPS, DURATION_ROLLUPS, PROJECT_DURATION_ROLLUPS):
            cur.execute(statement, project)
            rows += cur.rowcount
        lo, last = cur.execute(FINISHED_RUN_STARTS, project).fetchone()
        while lo is not None and lo <= last:
            cur.execute(TOOL_ROLLUPS, {**project, "lo": lo, "hi": lo + TOOL_SLICE})
            rows += cur.rowcount
            lo += TOOL_SLICE
        for statement in (*DAILY_ROLLUPS, *WEEKLY_ROLLUPS):  # days first: weeks sum them
            cur.execute(statement, project)
            rows += cur.rowcount
        runs = cur.execute(
            "SELECT count(*) FROM agent_runs WHERE project_id = %(project)s", project
        ).fetchone()[0]
    if corrected or rows:
        # What the planner knew of these tables is stale now: a bulk load's durations were
        # NULL until this set them, and its rollups did not exist. Until autovacuum comes
        # by, it would plan the aggregates for a table that is not there (a 24h summary
        # took 40 s so on 2.5 million hand-loaded runs). ANALYZE samples: seconds.
        with conn.transaction(), conn.cursor() as cur:
            cur.execute(f"ANALYZE agent_runs, {', '.join(ROLLUP_TABLES)}")
    return Recounted(runs, corrected, rows)
