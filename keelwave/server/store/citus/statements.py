"""The SQL of the ingest writer on Citus: one project's batch, on that project's shard.

The plain writer (store/statements.py) moves staged rows in with chains of
data-modifying CTEs over session TEMP tables. Citus refuses a join between a
local and a distributed table, and a chain of modifying CTEs is planned
statement by statement through the coordinator. So here every statement is a
single INSERT, UPDATE or DELETE whose every table is distributed by project_id,
co-located, and filtered by one project given as a literal (a literal, not a
parameter, so that Citus prunes to the shard while it plans): Citus routes
each statement, whole, to the one shard that holds the project.

Instead of RETURNING what an INSERT skipped, staging is first cut down to
what is new: in-batch repeats (the first one wins, by seq) and rows already
stored are deleted from the staging table, and every later statement reads
the rest. The three rules of store/statements.py hold: locks first (row
locks, see :func:`lock_runs`), run rows before rollup rows, rollups merged in
key order. The run counters, rollups and tool rollups come out as the plain
writer's do, for the same rows.
"""

from __future__ import annotations

import functools
import uuid

from keelwave.server.store import daily_rollups, statements, tool_rollups
from keelwave.server.store.citus import keys
from keelwave.server.store.pgscript import quote

# Runs fall in this many lock buckets per project (a run's id modulo it): a project's
# lock rows stay few, and two runs sharing a bucket merely wait for each other.
LOCK_BUCKETS = 4096

_HOUR = "date_trunc('hour', {}, 'UTC')"


def _names(columns: tuple[tuple[str, str], ...], prefix: str = "") -> str:
    return ", ".join(prefix + name for name, _ in columns)


def lock_runs(project: uuid.UUID, run_ids: set[int]) -> str:
    """Rule 1 across every node: row locks on the project's (run bucket) rows, taken in
    bucket order by one upsert (a row another writer holds is waited for).

    pg_advisory_xact_lock is node-local, and clients may connect to any node; a
    row of kw_run_locks lives on one shard, the project's, so every writer
    touching a run waits for the same row wherever it connected.
    """
    buckets = sorted({run_id % LOCK_BUCKETS for run_id in run_ids})
    p = quote(project)
    values = ", ".join(f"({p}, {bucket})" for bucket in buckets)
    return (
        f"INSERT INTO kw_run_locks AS l (project_id, bucket) VALUES {values} "
        "ON CONFLICT (project_id, bucket) DO UPDATE SET taken = l.taken + 1"
    )


def _drop_known(
    stage: str,
    known: str,
    p: str,
    stored: str,
    repeated: tuple[str, ...],
) -> tuple[str, str]:
    """Two DELETEs that leave in ``stage`` only the project's new rows: those whose key
    is in ``known`` (a key table, keys.py; ``stored`` equates its columns with the
    staged row's) and the repeats within the batch, by ``repeated`` (the first one, by
    seq, stays).

    Joins (DELETE … USING), not OR-ed EXISTS subqueries: Citus prunes a DELETE with
    a disjunction of subqueries to no shard at all and sends it to every shard.
    """
    same = " AND ".join(f"o.{column} = s.{column}" for column in repeated)
    return (
        f"DELETE FROM {stage} s USING {known} t WHERE s.project_id = {p} "
        f"AND t.project_id = s.project_id AND {stored}",
        f"DELETE FROM {stage} s USING {stage} o WHERE s.project_id = {p} "
        f"AND o.project_id = s.project_id AND {same} AND o.seq < s.seq",
    )


def lock_run_rows(project: uuid.UUID, run_ids: set[int]) -> str:
    """Row locks on the stored runs the batch touches, in id order, after lock_runs.

    Finishes, the reaper and the verdicts serialise with each other by advisory
    locks, local to the node their server is connected to; what they all do is
    update the run's row. Waiting for that row first makes the writer see a
    finish (or have the finish see the writer's steps) whichever node each came
    through: a late step's swap of its run's tool rollups is then never missed.
    """
    ids = ", ".join(quote(uuid.UUID(int=run_id)) for run_id in sorted(run_ids))
    return (
        f"SELECT 1 FROM agent_runs WHERE project_id = {quote(project)} "
        f"AND id IN ({ids}) ORDER BY id FOR UPDATE"
    )


@functools.lru_cache(maxsize=1024)
def _run_statements(p: str) -> tuple[str, ...]:
    cols = _names(statements.RUN_COLUMNS)
    return (
        # What is left in staging is new: not stored, and the first of its id in the batch.
        *_drop_known("kw_stage_runs", "agent_runs", p, "t.id = s.id", ("id",)),
        # New runs count the steps and model calls that arrived before them: inserted
        # with none, then updated from a join (a correlated subquery in the INSERT
        # would make Citus send it to every shard), of the key tables, not the days.
        f"""INSERT INTO agent_runs ({cols}, last_activity_at)
SELECT {cols}, now() FROM kw_stage_runs WHERE project_id = {p}""",
        f"""UPDATE agent_runs r SET step_count = n.steps
FROM (SELECT t.project_id, t.run_id, count(*) AS steps
      FROM kw_stage_runs s JOIN kw_step_keys t ON t.project_id = s.project_id AND t.run_id = s.id
      WHERE s.project_id = {p} GROUP BY t.project_id, t.run_id) n
WHERE r.project_id = {p} AND r.project_id = n.project_id AND r.id = n.run_id""",
        f"""UPDATE agent_runs r SET llm_calls = n.calls, input_tokens = n.input_tokens,
    output_tokens = n.output_tokens, cost_usd = n.cost_usd
FROM (SELECT a.project_id, a.run_key AS run_id, count(*) AS calls,
             coalesce(sum(a.input_tokens), 0) AS input_tokens,
             coalesce(sum(a.output_tokens), 0) AS output_tokens,
             coalesce(sum(a.cost_usd), 0) AS cost_usd
      FROM kw_stage_runs s JOIN kw_call_keys a ON a.project_id = s.project_id AND a.run_key = s.id
      WHERE s.project_id = {p} GROUP BY a.project_id, a.run_key) n
WHERE r.project_id = {p} AND r.project_id = n.project_id AND r.id = n.run_id""",
        f"""INSERT INTO kw_stage_rollups (project_id, agent_name, bucket, runs, steps, llm_calls,
                              input_tokens, output_tokens, cost_usd)
SELECT r.project_id, r.agent_name, {_HOUR.format("r.started_at")}, 1, r.step_count, r.llm_calls,
       r.input_tokens, r.output_tokens, r.cost_usd
FROM kw_stage_runs s JOIN agent_runs r ON r.project_id = s.project_id AND r.id = s.id
WHERE s.project_id = {p}""",
    )


def _tool_share(p: str, sign: str) -> str:
    """Stage ``sign`` times what the finished runs getting steps now add to the tool
    rollups, from their stored steps (a late step swaps a run's share, tool_rollups.py)."""
    late = f"""(SELECT r.project_id, r.id, r.started_at FROM agent_runs r
        WHERE r.project_id = {p} AND r.ended_at IS NOT NULL
          AND r.id IN (SELECT run_id FROM kw_stage_steps WHERE project_id = {p}))"""
    counters = ", ".join(tool_rollups.COUNTERS)
    return (
        f"INSERT INTO kw_stage_tools (project_id, bucket, tool_name, duration_bin, {counters})"
        f"{tool_rollups.stats_of_steps(f'({tool_rollups.steps_of_runs(late, sign)})')}"
    )


@functools.lru_cache(maxsize=1024)
def _step_statements(p: str) -> tuple[str, ...]:
    cols = _names(statements.STEP_COLUMNS)
    per_run = (
        f"(SELECT project_id, run_id, count(*) AS steps FROM kw_stage_steps "
        f"WHERE project_id = {p} GROUP BY project_id, run_id)"
    )
    return (
        *_drop_known(
            "kw_stage_steps",
            keys.STEP_KEYS,
            p,
            "t.run_id = s.run_id AND t.step_index = s.step_index",
            ("run_id", "step_index"),
        ),  # fmt: skip
        f"INSERT INTO {keys.STEP_KEYS} (project_id, run_id, step_index) "
        f"SELECT project_id, run_id, step_index FROM kw_stage_steps WHERE project_id = {p}",
        _tool_share(p, "-1"),
        f"INSERT INTO agent_steps ({cols}) "
        f"SELECT {cols} FROM kw_stage_steps WHERE project_id = {p}",
        _tool_share(p, "1"),
        f"""UPDATE agent_runs r
SET step_count = r.step_count + n.steps, last_activity_at = greatest(r.last_activity_at, now())
FROM {per_run} n WHERE r.project_id = {p} AND r.project_id = n.project_id AND r.id = n.run_id""",
        f"""INSERT INTO kw_stage_rollups (project_id, agent_name, bucket, steps)
SELECT r.project_id, r.agent_name, {_HOUR.format("r.started_at")}, n.steps
FROM agent_runs r JOIN {per_run} n ON r.project_id = n.project_id AND r.id = n.run_id
WHERE r.project_id = {p}""",
    )


@functools.lru_cache(maxsize=1024)
def _trace_statements(p: str) -> tuple[str, ...]:
    cols = _names(statements.TRACE_COLUMNS)
    totals = ", ".join(keys.CALL_TOTALS)
    per_run = f"""(SELECT project_id, run_id, count(*) AS calls, sum(input_tokens) AS input_tokens,
           sum(output_tokens) AS output_tokens, coalesce(sum(cost_usd), 0) AS cost_usd
    FROM kw_stage_traces WHERE project_id = {p} AND run_id IS NOT NULL
    GROUP BY project_id, run_id)"""
    return (
        # A stored call is the same call if its run is the same, or both have none.
        *_drop_known(
            "kw_stage_traces",
            keys.CALL_KEYS,
            p,
            f"t.id = s.id AND t.run_key = coalesce(s.run_id, {keys.NIL})",
            ("id",),
        ),  # fmt: skip
        f"INSERT INTO {keys.CALL_KEYS} (project_id, run_key, id, {totals}) "
        f"SELECT project_id, coalesce(run_id, {keys.NIL}), id, {totals} "
        f"FROM kw_stage_traces WHERE project_id = {p}",
        f"INSERT INTO ai_traces ({cols}) SELECT {cols} FROM kw_stage_traces WHERE project_id = {p}",
        f"""UPDATE agent_runs r
SET llm_calls = r.llm_calls + n.calls, input_tokens = r.input_tokens + n.input_tokens,
    output_tokens = r.output_tokens + n.output_tokens, cost_usd = r.cost_usd + n.cost_usd,
    last_activity_at = greatest(r.last_activity_at, now())
FROM {per_run} n WHERE r.project_id = {p} AND r.project_id = n.project_id AND r.id = n.run_id""",
        f"""INSERT INTO kw_stage_rollups (project_id, agent_name, bucket, llm_calls, input_tokens,
                              output_tokens, cost_usd)
SELECT r.project_id, r.agent_name, {_HOUR.format("r.started_at")}, n.calls, n.input_tokens,
       n.output_tokens, n.cost_usd
FROM agent_runs r JOIN {per_run} n ON r.project_id = n.project_id AND r.id = n.run_id
WHERE r.project_id = {p}""",
    )


def _merge(p: str, table: daily_rollups.Rollup) -> tuple[str, ...]:
    """Add the project's staged rows of ``table.stage`` to its hourly rows and then to
    their days (and weeks: daily_rollups.py), each in key order: rule 3, the daily
    table straight after its hourly one, the weekly one after that. A statement each,
    where the other lanes chain them in one (daily_rollups.merge): this lane's are
    literal SQL pushed down to one worker whole. It adds to shard 0: spreading its
    rows over shards is not done yet."""
    where = f"WHERE project_id = {p}"
    statements = (
        daily_rollups.add_to_hours(table, where, shard="0"),
        daily_rollups.add_to_days(table, table.stage, shard="0").format(where=where),
    )
    if table.weekly:
        weeks = daily_rollups.add_to_weeks(table, table.stage, shard="0")
        statements += (weeks.format(where=where),)
    return statements


@functools.lru_cache(maxsize=1024)
def _tail(p: str, kinds: frozenset[str]) -> tuple[str, ...]:
    tail = list(_merge(p, daily_rollups.RUNS))
    if "kw_stage_steps" in kinds:
        tail += _merge(p, daily_rollups.TOOLS)
        tail.append(f"DELETE FROM kw_stage_tools WHERE project_id = {p}")
    # Each transaction empties what it staged: no other one ever sees it.
    tail += [f"DELETE FROM {stage} WHERE project_id = {p}" for stage in sorted(kinds)]
    tail.append(f"DELETE FROM kw_stage_rollups WHERE project_id = {p}")
    return tuple(tail)


STATEMENTS_OF_STAGE = {
    "kw_stage_runs": _run_statements,
    "kw_stage_steps": _step_statements,
    "kw_stage_traces": _trace_statements,
}


def move_in(project: uuid.UUID, stages: list[str]) -> list[str]:
    """The statements that move the project's staged rows in (``stages``: the staging
    tables filled, in the order runs, steps, model calls), merge the rollups and empty
    the staging tables."""
    p = quote(project)
    moved = [sql for stage in stages for sql in STATEMENTS_OF_STAGE[stage](p)]
    return moved + list(_tail(p, frozenset(stages)))
