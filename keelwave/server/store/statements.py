"""The SQL of every write: moving staged rows in, keeping run counters and rollups.

Three rules hold for every transaction that writes, whether it is the ingest
writer's group commit, a finish, or the reaper timing runs out:

1. It first takes the advisory locks of the runs it touches
   (:func:`lock_runs`). Two transactions touching one run
   therefore run one after the other, across server processes, and the
   duplicate checks and counter updates see each other's rows.
2. It updates run rows before rollup rows.
3. It changes rollup rows in key order, table after table: run rollups, then
   the agents' and then the project's duration rollups, then tool rollups
   (each table's daily twin straight after it, and its weekly one after that:
   daily_rollups.py), so two
   transactions can never wait on each other's rollup rows.

Counters on a run (steps, model calls, tokens, cost, last activity) are kept
current as rows arrive. Rollups add up runs by (project, agent, hour the run
started): what a new run, a step, a model call or a finish adds is collected
in the session-local table ``kw_stage_rollups`` and merged at the end.
Run-duration histograms (agent_duration_rollups, changed by finishes) and tool
rollups (tool_rollups.py) are staged in ``kw_stage_durations`` and
``kw_stage_tools`` and merged the same way; the ingest writer appends its
staged tool rows to agent_tool_rollups_pending instead, folded in every second
(pending_tools.py), whose rows come before agent_tool_rollups in rule 3's order.
"""

from __future__ import annotations

import contextlib
import functools
import random
from collections.abc import AsyncIterator

import psycopg

from keelwave.server.store import daily_rollups, run_rollups, tool_rollups
from keelwave.server.store.histogram import bin_sql

# How every writing transaction begins. The duplicate checks and counter updates
# rely on READ COMMITTED: after waiting for a run's lock, a statement must see
# what the transaction that held it committed. Under REPEATABLE READ (a database
# default some teams set) the snapshot is taken before the wait and two writers
# store the same fresh steps twice, so the level is pinned, never inherited.
BEGIN = "BEGIN ISOLATION LEVEL READ COMMITTED"


@contextlib.asynccontextmanager
async def transaction(conn: psycopg.AsyncConnection) -> AsyncIterator[None]:
    """``conn.transaction()`` for a finish or the reaper: begun as :data:`BEGIN` does,
    whatever the database default, with the rollup staging tables at hand.

    The tables are made inside the transaction (one round trip; a no-op on a
    session that has them) rather than when the pooled connection opens: behind
    a pooler in transaction mode the transaction may run on any server session.
    """
    if conn.isolation_level != psycopg.IsolationLevel.READ_COMMITTED:
        await conn.set_isolation_level(psycopg.IsolationLevel.READ_COMMITTED)  # no round trip
    async with conn.transaction():
        await conn.execute(rollup_staging())
        yield


def one_round_trip(*body: str) -> str:
    """A transaction of statements without parameters as one script, for an autocommit
    connection: begun as :data:`BEGIN` does, with the rollup staging tables at hand,
    and committed by PostgreSQL as it reaches the end. A background job's transaction
    then holds no lock while it waits for its process's event loop to send the next
    statement (a busy process would keep everyone waiting for those locks). Made
    afresh for each transaction (:func:`rollup_staging`)."""
    return ";\n".join((BEGIN, rollup_staging(), *body, "COMMIT"))


def rollup_staging() -> str:
    """What a pooled transaction runs first: the rollup staging tables made if the
    session lacks them, and emptied.

    Every transaction that stages rows merges them and deletes them before it commits
    (MERGE_ROLLUPS), so they are empty already; emptying them here as well means that
    a transaction never merges rows another one left. They are not ON COMMIT DELETE
    ROWS: PostgreSQL then truncates them at every commit that touched a temporary
    table, staged rows or not, which cost 0.7 ms of the backend's CPU a transaction
    with the three tables (ext4), more than the rest of a small one. DELETE leaves
    dead rows that nothing vacuums, so one transaction in TRUNCATE_ONE_IN truncates
    them instead (a few hundred microseconds)."""
    if random.random() < 1 / TRUNCATE_ONE_IN:
        return _ROLLUP_STAGING_TRUNCATED
    return _ROLLUP_STAGING_EMPTIED


GROUP_LOCKS = 0x6B77  # 'kw': pg_advisory_xact_lock(int, int) namespace of run groups
RUN_LOCKS = 0x6B78  # namespace of single runs
LOCK_GROUPS = 256  # runs fall in this many groups (run id modulo it)
# Transactions touching more runs lock whole groups instead. Why a limit: every
# advisory lock held takes a slot in PostgreSQL's shared lock table, which has
# max_locks_per_transaction × max_connections slots (6,400 by default) for all
# sessions together. A 5,000-run flush taking a lock per run could fill it and
# fail every session's next lock with "out of shared memory"; with the limit a
# transaction holds at most FINE_LOCKS_UP_TO + LOCK_GROUPS locks. Large flushes
# lock coarsely and wait a little more for unrelated runs in the same groups.
FINE_LOCKS_UP_TO = 256

# The columns the writer stages, with their types: rows are COPYed in PostgreSQL's
# binary format (about half the CPU of text on both sides), which needs them.
RUN_COLUMNS = (
    ("project_id", "uuid"), ("id", "uuid"), ("agent_name", "text"), ("parent_run_id", "uuid"),
    ("started_at", "timestamptz"), ("input", "json"), ("metadata", "json"), ("tags", "text[]"),
)  # fmt: skip
STEP_COLUMNS = (
    ("project_id", "uuid"), ("run_id", "uuid"), ("step_index", "int4"), ("step_type", "text"),
    ("tool_name", "text"), ("tool_input", "json"), ("tool_output", "json"), ("content", "text"),
    ("input_fingerprint", "bytea"), ("started_at", "timestamptz"), ("duration_ms", "float8"),
    ("error", "text"), ("error_traceback", "text"),
    # the stored input's sketch (findings/sketch.py), which the verdict keeper groups by
    ("input_sketch", "int8"),
)  # fmt: skip
TRACE_COLUMNS = (
    ("project_id", "uuid"), ("id", "uuid"), ("run_id", "uuid"), ("step_index", "int4"),
    ("provider", "text"), ("model", "text"), ("input_tokens", "int8"), ("output_tokens", "int8"),
    ("cache_read_tokens", "int8"), ("reasoning_tokens", "int8"), ("cost_usd", "float8"),
    ("latency_ms", "float8"), ("status", "text"), ("error", "text"), ("started_at", "timestamptz"),
    ("input_messages", "json"), ("output_messages", "json"),
)  # fmt: skip

# What the rollups count, per (project, agent, hour).
ROLLUP_COUNTERS = run_rollups.COUNTERS
VERDICT_COUNTERS = ROLLUP_COUNTERS[-5:]
# What a run row ``r`` adds to each of VERDICT_COUNTERS, times %(sign)s.
VERDICT_SHARES = ", ".join(
    ("%(sign)s * r.detected_loop::int", *(
        f"%(sign)s * ('{counter.removesuffix('_runs')}' = ANY(r.findings))::int"
        for counter in VERDICT_COUNTERS[1:]
    ))
)  # fmt: skip

TERMINATION_COUNTERS = tuple(c[5:] for c in ROLLUP_COUNTERS if c.startswith("term_"))

# Session-local staging tables (name, the table they mirror, whether rows carry a
# seq number giving their order in the batch). Temp tables never touch the WAL.
ROW_STAGES = (
    ("kw_stage_runs", "agent_runs", True),
    ("kw_stage_steps", "agent_steps", True),
    ("kw_stage_traces", "ai_traces", True),
)
# What finishes and the reaper need on every pooled connection, and the writer too.
ROLLUP_STAGES = (
    ("kw_stage_rollups", "agent_run_rollups", False),
    ("kw_stage_durations", "agent_duration_rollups", False),
    ("kw_stage_tools", "agent_tool_rollups", False),
)
# Each rollup staging table emptied: how every transaction that staged rows ends
# (behind a transaction pooler the next one on the session may be the writer's).
EMPTY_ROLLUP_STAGES = tuple(f"DELETE FROM {name}" for name, _, _ in ROLLUP_STAGES)


def staging_ddl(stages: tuple) -> list[str]:
    """CREATE statements for ``stages``. Not ON COMMIT DELETE ROWS: that truncation
    costs a few hundred microseconds per table at every commit that used temp tables,
    so whoever fills them empties them (lane.py, :func:`rollup_staging`)."""
    return [
        f"CREATE TEMP TABLE IF NOT EXISTS {name} "
        f"({'seq integer, ' if seq else ''}LIKE {like} INCLUDING DEFAULTS)"
        for name, like, seq in stages
    ]


async def lock_runs(cur: psycopg.AsyncCursor, run_ids: set[int]) -> None:
    """Take the locks of rule 1 for these runs (given as UUID.int)."""
    await cur.execute(*lock_statement(run_ids))


def lock_statement(run_ids: set[int]) -> tuple[str, tuple]:
    """The statement taking the locks of rule 1 for these runs (UUID.int), and its parameters.

    Two levels, so that small transactions only wait for transactions that
    touch the same runs, and a large one holds a bounded number of locks: a
    transaction touching up to FINE_LOCKS_UP_TO runs takes its runs' groups
    shared and then each run exclusively; a larger one takes its runs' groups
    exclusively. Every transaction takes group locks before run locks, each
    in ascending order, so no two of them can wait on each other in a cycle.
    """
    groups = sorted({run_id % LOCK_GROUPS for run_id in run_ids})
    if len(run_ids) > FINE_LOCKS_UP_TO:
        return LOCK_GROUPS_SQL, (GROUP_LOCKS, groups)
    # Signed 32-bit keys; two runs sharing a key only wait for each other needlessly.
    keys = sorted({(run_id & 0xFFFFFFFF) - 0x80000000 for run_id in run_ids})
    return LOCK_RUNS_SQL, (RUN_LOCKS, keys, GROUP_LOCKS, groups)


async def try_lock_runs(cur: psycopg.AsyncCursor, run_ids: list[int]) -> set[int]:
    """Take rule 1's locks (group shared, run exclusive) of those of these runs (UUID.int)
    that no one holds now, without waiting; return the runs locked. For work that can
    wait for the next round (the verdict keeper): a transaction that waits for some
    runs while it holds others makes the writers behind it wait too."""
    await cur.execute(
        TRY_LOCK_RUNS_SQL,
        (
            [run_id % LOCK_GROUPS for run_id in run_ids],
            [(run_id & 0xFFFFFFFF) - 0x80000000 for run_id in run_ids],
            [str(run_id) for run_id in run_ids],
            GROUP_LOCKS, RUN_LOCKS,
        ),
    )  # fmt: skip
    return {int(run_id) for (run_id,) in await cur.fetchall()}


# Try-locks never wait, so their order does not matter; a row counts only when both
# of its locks were taken.
TRY_LOCK_RUNS_SQL = """
SELECT t.run_id FROM unnest(%s::int[], %s::int[], %s::text[]) AS t (grp, key, run_id)
WHERE pg_try_advisory_xact_lock_shared(%s, t.grp) AND pg_try_advisory_xact_lock(%s, t.key)
"""
# unnest returns the keys in array order, so they are locked in that order.
LOCK_GROUPS_SQL = "SELECT pg_advisory_xact_lock(%s, key) FROM unnest(%s::int[]) AS key"
# Both levels in one round trip: the uncorrelated subquery is a one-time filter,
# evaluated (every group lock taken) before the first run lock.
LOCK_RUNS_SQL = """
SELECT pg_advisory_xact_lock(%s, key) FROM unnest(%s::int[]) AS key
WHERE (SELECT count(pg_advisory_xact_lock_shared(%s, g)) FROM unnest(%s::int[]) AS g) >= 0
"""


def _names(columns: tuple[tuple[str, str], ...]) -> tuple[str, ...]:
    return tuple(name for name, _ in columns)


@functools.cache
def copy_sql(table: str, columns: tuple[tuple[str, str], ...], seq: bool = True) -> str:
    """COPY into ``table`` in binary; rows are (seq, *columns) if ``seq``, typed by
    :func:`copy_types`."""
    names = ("seq, " if seq else "") + ", ".join(_names(columns))
    return f"COPY {table} ({names}) FROM STDIN (FORMAT BINARY)"


@functools.cache
def copy_types(columns: tuple[tuple[str, str], ...], seq: bool = True) -> tuple[str, ...]:
    """The types to tell psycopg for a binary COPY of ``columns`` (after seq, if ``seq``).

    JSON payloads arrive as the bytes the client sent, and json's binary form
    is its UTF-8 text: they go as they are, declared bytea (PostgreSQL's json
    input still parses and checks them).
    """
    kinds = tuple("bytea" if kind == "json" else kind for _, kind in columns)
    return ("int4", *kinds) if seq else kinds


@functools.cache
def insert_sql(table: str, columns: tuple[tuple[str, str], ...], seq: bool = True) -> str:
    """The head of an INSERT of ``columns`` (after seq, if ``seq``) into ``table``;
    a script adds the VALUES of a few rows (lane.py)."""
    return f"INSERT INTO {table} ({'seq, ' if seq else ''}{', '.join(_names(columns))})"


def _cols(columns: tuple[str, ...], prefix: str = "") -> str:
    return ", ".join(prefix + column for column in columns)


_HOUR = "date_trunc('hour', {}, 'UTC')"

# Duplicate checks against agent_steps and ai_traces are written as scalar
# subqueries, NOT (SELECT EXISTS (...)), rather than NOT EXISTS: PostgreSQL turns a
# NOT EXISTS into an anti-join, which TimescaleDB runs by decompressing every
# compressed chunk (1.3 s for 50 staged steps over 2 million compressed ones,
# 13 s with the lane's planner settings), while a subquery is probed per staged
# row through the compressed chunks' (project_id, run_id) index (about 0.1 ms a
# row). On plain PostgreSQL both are an index probe per row. Model calls are
# looked up within their run for the same reason: a run's calls are one segment.


def steps_of_run(run: str) -> str:
    """How many steps are stored for the run ``run`` (an alias with project_id, id)."""
    return (
        f"(SELECT count(*) FROM agent_steps t WHERE t.project_id = {run}.project_id "
        f"AND t.run_id = {run}.id)"
    )


def calls_of_run(run: str) -> str:
    """The model calls stored for the run ``run``, as its counters count them: calls,
    input_tokens, output_tokens, cost_usd (a LATERAL subquery)."""
    return f"""
        SELECT count(*) AS calls, coalesce(sum(a.input_tokens), 0) AS input_tokens,
               coalesce(sum(a.output_tokens), 0) AS output_tokens,
               coalesce(sum(a.cost_usd), 0) AS cost_usd
        FROM ai_traces a WHERE a.project_id = {run}.project_id AND a.run_id = {run}.id"""


# New runs: skip ids already stored (or repeated in the batch: first wins); count
# steps and model calls that arrived before their run; add the run to its rollup.
INSERT_RUNS = f"""
WITH inserted AS (
    INSERT INTO agent_runs ({_cols(_names(RUN_COLUMNS))}, step_count, llm_calls, input_tokens,
                            output_tokens, cost_usd, last_activity_at)
    SELECT DISTINCT ON (s.project_id, s.id) {_cols(_names(RUN_COLUMNS), "s.")},
           {steps_of_run("s")}, c.calls, c.input_tokens, c.output_tokens, c.cost_usd, now()
    FROM kw_stage_runs s
    CROSS JOIN LATERAL ({calls_of_run("s")}) c
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
# activity, and its rollup's step total. Steps of a run that has finished already
# change what the run adds to the tool rollups: take its old share out (the
# statement's snapshot does not see the new rows) and put the new one in.
_TOOL_COUNTERS = _cols(
    ("project_id", "bucket", "tool_name", "duration_bin", *tool_rollups.COUNTERS)
)
_LATE_STEPS_NOW = f"""(
    {tool_rollups.steps_of_runs("late")}
    UNION ALL
    SELECT i.project_id, i.run_id, late.started_at, i.step_index, i.tool_name,
           i.input_fingerprint, i.duration_ms, i.error, 1
    FROM inserted i JOIN late ON late.project_id = i.project_id AND late.id = i.run_id
)"""
# Given ``per_run`` (project_id, run_id, steps): bump each run's step count and
# activity (``updated``), and, as the statement's last part, its rollup's steps.
_RUNS_GOT_STEPS = """updated AS (
    UPDATE agent_runs r
    SET step_count = r.step_count + p.steps, last_activity_at = greatest(r.last_activity_at, now())
    FROM per_run p WHERE r.project_id = p.project_id AND r.id = p.run_id
    RETURNING r.project_id, r.id, r.agent_name, r.started_at, p.steps,
              r.ended_at IS NOT NULL AS done
)"""
_STAGE_STEP_ROLLUPS = f"""
INSERT INTO kw_stage_rollups (project_id, agent_name, bucket, steps)
SELECT project_id, agent_name, {_HOUR.format("started_at")}, steps FROM updated
"""
INSERT_STEPS = f"""
WITH inserted AS (
    INSERT INTO agent_steps ({_cols(_names(STEP_COLUMNS))})
    SELECT DISTINCT ON (s.project_id, s.run_id, s.step_index) {_cols(_names(STEP_COLUMNS), "s.")}
    FROM kw_stage_steps s
    WHERE NOT (SELECT EXISTS (SELECT 1 FROM agent_steps t WHERE t.project_id = s.project_id
                              AND t.run_id = s.run_id AND t.step_index = s.step_index))
    ORDER BY s.project_id, s.run_id, s.step_index, s.seq
    RETURNING project_id, run_id, step_index, tool_name, input_fingerprint, duration_ms, error
), per_run AS (
    SELECT project_id, run_id, count(*) AS steps FROM inserted GROUP BY project_id, run_id
), {_RUNS_GOT_STEPS}, late AS (
    SELECT project_id, id, started_at FROM updated WHERE done
), late_out AS (
    INSERT INTO kw_stage_tools ({_TOOL_COUNTERS})
    {tool_rollups.stats_of_steps(f"({tool_rollups.steps_of_runs('late', '-1')})")}
), late_in AS (
    INSERT INTO kw_stage_tools ({_TOOL_COUNTERS})
    {tool_rollups.stats_of_steps(_LATE_STEPS_NOW)}
){_STAGE_STEP_ROLLUPS}"""

# Steps skip staging (lane.py): they are written straight into agent_steps, in a
# transaction that first makes sure that is safe. It is not when a step of the
# batch may be stored already (a retry: some stored step of its run falls in the
# batch's range of step_index), or when a run of the batch has finished (its
# late steps change the tool rollups, which staging handles). Then this fails,
# on the CHECK of the lane's temp table kw_copy_guard, and the lane writes the
# batch again the staged way.
DIRECT_COPY_GUARD = "kw_direct_copy_unsafe"
GUARD_DDL = (
    "CREATE TEMP TABLE IF NOT EXISTS kw_copy_guard "
    f"(unsafe boolean CONSTRAINT {DIRECT_COPY_GUARD} CHECK (NOT unsafe))"
)
CHECK_DIRECT_COPY = """
INSERT INTO kw_copy_guard (unsafe)
SELECT true WHERE EXISTS (
    SELECT 1
    FROM unnest(%(projects)s::uuid[], %(runs)s::uuid[], %(low)s::int[], %(high)s::int[])
        AS k (project_id, run_id, low, high)
    JOIN agent_steps s ON s.project_id = k.project_id AND s.run_id = k.run_id
                      AND s.step_index >= k.low AND s.step_index <= k.high
) OR EXISTS (
    SELECT 1 FROM unnest(%(projects)s::uuid[], %(runs)s::uuid[]) AS k (project_id, run_id)
    JOIN agent_runs r ON r.project_id = k.project_id AND r.id = k.run_id
    WHERE r.ended_at IS NOT NULL
)
"""
# Once they are in, what INSERT_STEPS would have done with them: bump each
# run's step count and activity, and its rollup. Runs in the same batch are
# inserted after this, counting their stored steps.
STEPS_COPIED = f"""
WITH per_run AS (
    SELECT * FROM unnest(%(projects)s::uuid[], %(runs)s::uuid[], %(counts)s::int[])
        AS p (project_id, run_id, steps)
), {_RUNS_GOT_STEPS}{_STAGE_STEP_ROLLUPS}"""
# New model calls: skip ids already stored; add calls, tokens and cost to their run.
INSERT_TRACES = f"""
WITH inserted AS (
    INSERT INTO ai_traces ({_cols(_names(TRACE_COLUMNS))})
    SELECT DISTINCT ON (s.project_id, s.id) {_cols(_names(TRACE_COLUMNS), "s.")}
    FROM kw_stage_traces s
    WHERE NOT (SELECT EXISTS (SELECT 1 FROM ai_traces t WHERE t.project_id = s.project_id
                              AND t.run_id = s.run_id AND t.id = s.id)
                      OR (s.run_id IS NULL AND EXISTS (SELECT 1 FROM ai_traces t
                          WHERE t.project_id = s.project_id AND t.run_id IS NULL AND t.id = s.id)))
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


# agent_run_rollups has one row an agent an hour, which every transaction of that
# agent adds to, and agent_tool_rollups a few dozen a project an hour, which every
# finish adds to: both in shards (rollup_shards.py), each connection adding to its own.
# Each merges into its daily twin too, in the same statement (daily_rollups.py):
# every caller keeps the daily rows without knowing of them.
MERGE_RUN_ROLLUPS = daily_rollups.merge(daily_rollups.RUNS)
MERGE_DURATION_ROLLUPS = daily_rollups.merge(
    daily_rollups.DURATIONS, daily_rollups.PROJECT_DURATIONS
)
MERGE_TOOL_ROLLUPS = daily_rollups.merge(daily_rollups.TOOLS)
# Every rollup table, in the order rule 3 fixes; no parameters, so one round trip.
# How finishes and the reaper end: merge what they staged, and leave the staging
# tables empty (rollup_staging).
MERGE_ROLLUPS = ";\n".join(
    (
        MERGE_RUN_ROLLUPS,
        MERGE_DURATION_ROLLUPS,
        MERGE_TOOL_ROLLUPS,
        *EMPTY_ROLLUP_STAGES,
    )
)


# Finishing a run moves it between rollup counters: what it counted before (if it
# was finished already) is taken away, what it counts now is added, in the run
# rollups and in the duration histograms. ``deltas`` is a SELECT of
# (project_id, agent_name, started_at, sign, reason, loop, duration); the result
# is CTEs that stage those changes.
def _stage_finish_deltas(deltas: str) -> str:
    terms = ",\n       ".join(
        f"sign * (reason IS NOT DISTINCT FROM '{reason}')::int" for reason in TERMINATION_COUNTERS
    )
    return f"""deltas AS ({deltas}
), staged AS (
    INSERT INTO kw_stage_rollups (project_id, agent_name, bucket, finished_runs, loop_runs,
        error_runs, duration_ms_sum, {_cols(tuple(f"term_{r}" for r in TERMINATION_COUNTERS))})
    SELECT project_id, agent_name, {_HOUR.format("started_at")},
           sign * (reason IS NOT NULL)::int, sign * loop::int,
           sign * (reason IS NOT DISTINCT FROM 'error')::int, sign * coalesce(duration, 0),
           {terms}
    FROM deltas
), staged_durations AS (
    INSERT INTO kw_stage_durations (project_id, bucket, agent_name, duration_bin, runs)
    SELECT project_id, {_HOUR.format("started_at")}, agent_name, {bin_sql("duration")}, sign
    FROM deltas WHERE duration IS NOT NULL
)"""


_FINISH_DELTAS = """
    SELECT o.project_id, o.agent_name, o.started_at, v.*
    FROM old o JOIN new n ON n.id = o.id
    CROSS JOIN LATERAL (VALUES (-1, o.reason, o.loop, o.duration),
                               (1, n.reason, n.loop, n.duration))
        AS v (sign, reason, loop, duration)"""
_TIME_OUT_DELTAS = """
    SELECT n.project_id, n.agent_name, n.started_at, v.*
    FROM new n
    CROSS JOIN LATERAL (VALUES (-1, NULL::text, n.loop, NULL::float8),
                               (1, 'timeout', n.loop, n.duration))
        AS v (sign, reason, loop, duration)"""

# What finishing sets on a run ``r`` from a finish ``i``.
_FINISH_SET = """
        ended_at = i.ended_at,
        termination_reason = i.reason,
        loop_detected = coalesce(i.loop_detected, r.loop_detected),
        loop_step_index = coalesce(i.loop_step_index, r.loop_step_index),
        output = coalesce(i.output::json, r.output),
        error = coalesce(i.error, r.error),
        error_traceback = coalesce(i.traceback, r.error_traceback),
        duration_ms = greatest(0, extract(epoch FROM i.ended_at - r.started_at) * 1000)"""

# Finish runs of one project, each id at most once (the caller splits repeats
# into rounds). Returns each stored run's id and whether it was unfinished before.
# (The pooled path: lifecycle.py. The writer finishes runs with FINISH_STAGED.)
FINISH_RUNS = f"""
WITH input AS (
    SELECT * FROM unnest(%(ids)b::uuid[], %(ended_at)b::timestamptz[], %(reasons)b::text[],
                         %(loops)b::boolean[], %(loop_steps)b::integer[], %(outputs)b::text[],
                         %(errors)b::text[], %(tracebacks)b::text[])
        AS i (id, ended_at, reason, loop_detected, loop_step_index, output, error, traceback)
), old AS (
    SELECT r.project_id, r.id, r.agent_name, r.started_at, r.termination_reason AS reason,
           r.loop_detected AS loop,
           CASE WHEN r.termination_reason IS NOT NULL THEN r.duration_ms END AS duration
    FROM agent_runs r JOIN input i ON r.project_id = %(project_id)s AND r.id = i.id
), new AS (
    UPDATE agent_runs r SET{_FINISH_SET}
    FROM input i WHERE r.project_id = %(project_id)s AND r.id = i.id
    RETURNING r.id, r.termination_reason AS reason, r.loop_detected AS loop,
              r.duration_ms AS duration
), {_stage_finish_deltas(_FINISH_DELTAS)}
SELECT id, reason IS NULL FROM old
"""

# The finishes a writer's batch carries (lane.py), staged as its rows are. Round k
# holds the k-th finish of each run in the batch: an UPDATE changes a row once.
FINISH_STAGE = "kw_stage_finishes"
FINISH_COLUMNS = (
    ("round", "int4"), ("project_id", "uuid"), ("id", "uuid"), ("ended_at", "timestamptz"),
    ("reason", "text"), ("loop_detected", "bool"), ("loop_step_index", "int4"),
    ("output", "json"), ("error", "text"), ("traceback", "text"),
)  # fmt: skip
FINISH_STAGING_DDL = (
    f"CREATE TEMP TABLE IF NOT EXISTS {FINISH_STAGE} "
    f"(seq integer, {', '.join(f'{name} {kind}' for name, kind in FINISH_COLUMNS)})"
)
# Finish the staged runs of round %(round)s, move them between rollup counters, and
# stage the tool calls of those finishing for the first time (tool_rollups.py).
# ``o``, the run as the statement found it, gives what it counted before, so no
# join of old and new rows is needed (the writer plans without hash joins).
# ``input`` is MATERIALIZED so that the plan starts from the few staged rows and
# probes agent_runs by index, whatever the planner thinks of the staging table.
# Returns the seq of each finish whose run exists, as ``kw_finished``.
_FIRST_FINISHED = "(SELECT project_id, id, started_at FROM changed WHERE old_reason IS NULL)"
_STAGED_DELTAS = """
    SELECT project_id, agent_name, started_at, v.*
    FROM changed
    CROSS JOIN LATERAL (VALUES (-1, old_reason, old_loop, old_duration),
                               (1, new_reason, new_loop, new_duration))
        AS v (sign, reason, loop, duration)"""
FINISH_STAGED = f"""
WITH input AS MATERIALIZED (
    SELECT * FROM {FINISH_STAGE} WHERE round = %(round)s
), changed AS (
    UPDATE agent_runs r SET{_FINISH_SET}
    FROM input i
    JOIN agent_runs o ON o.project_id = i.project_id AND o.id = i.id
    WHERE r.project_id = i.project_id AND r.id = i.id
    RETURNING i.seq, r.project_id, r.id, r.agent_name, r.started_at,
              o.termination_reason AS old_reason, o.loop_detected AS old_loop,
              CASE WHEN o.termination_reason IS NOT NULL THEN o.duration_ms END AS old_duration,
              r.termination_reason AS new_reason, r.loop_detected AS new_loop,
              r.duration_ms AS new_duration
), {_stage_finish_deltas(_STAGED_DELTAS)}, staged_tools AS (
    INSERT INTO kw_stage_tools (project_id, bucket, tool_name, duration_bin,
                                {_cols(tool_rollups.COUNTERS)})
    {tool_rollups.stats_of_steps(f"({tool_rollups.steps_of_runs(_FIRST_FINISHED)})")}
)
SELECT seq AS kw_finished FROM changed
"""

# Time out runs (project_id, id) still silent for %(timeout)s seconds: they end at
# their last activity. Returns the (project_id, id) of those it finished.
TIME_OUT_RUNS = f"""
WITH input AS (
    SELECT * FROM unnest(%(project_ids)s::uuid[], %(ids)s::uuid[]) AS i (project_id, id)
), new AS (
    UPDATE agent_runs r SET
        ended_at = r.last_activity_at,
        termination_reason = 'timeout',
        duration_ms = greatest(0, extract(epoch FROM r.last_activity_at - r.started_at) * 1000)
    FROM input i
    WHERE r.project_id = i.project_id AND r.id = i.id AND r.ended_at IS NULL
      AND r.last_activity_at < now() - make_interval(secs => %(timeout)s)
    RETURNING r.project_id, r.id, r.agent_name, r.started_at, r.loop_detected AS loop,
              r.duration_ms AS duration
), {_stage_finish_deltas(_TIME_OUT_DELTAS)}
SELECT project_id, id FROM new
"""


# One query string (no parameters: psycopg sends it in one round trip) that makes
# sure the session has the rollup staging tables, empty (rollup_staging); their
# notices are silenced.
_ROLLUP_STAGING = ";\n".join(
    ("SET LOCAL client_min_messages = warning", *staging_ddl(ROLLUP_STAGES))
)
_ROLLUP_STAGING_EMPTIED = ";\n".join((_ROLLUP_STAGING, *EMPTY_ROLLUP_STAGES))
_ROLLUP_STAGING_TRUNCATED = (
    f"{_ROLLUP_STAGING};\nTRUNCATE {', '.join(name for name, _, _ in ROLLUP_STAGES)}"
)
TRUNCATE_ONE_IN = 64
