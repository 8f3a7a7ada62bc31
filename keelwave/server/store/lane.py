"""One ingest writer connection, and how it turns a batch into one transaction.

The writer (writer.py) decides what goes together; a lane writes it, as one
script (pgscript.py): the rows go by binary COPY, or as VALUES in the script
when they are few; the SQL of statements.py moves them in and keep
counters and rollups current; and the whole transaction costs a round trip
per COPY, plus one. Steps go straight into agent_steps when that is safe,
other rows (finishes too) into session-local staging tables first.
"""

from __future__ import annotations

import functools
import logging

import msgspec
import psycopg
from psycopg import pq
from psycopg.adapt import PyFormat

from keelwave.server.store import pending_tools, pgscript, statements, timescale
from keelwave.server.store.pgscript import Script, Unquotable, copy_data, prepare

log = logging.getLogger("keelwave.writer")

BINARY = PyFormat.BINARY

# A request's runs, steps, model calls and finishes (lifecycle.finish_row).
Rows = tuple[list[tuple], list[tuple], list[tuple], list[tuple]]

# (position in Rows, staging table, columns, statement moving them in)
STAGES = (
    (0, "kw_stage_runs", statements.RUN_COLUMNS, statements.INSERT_RUNS),
    (1, "kw_stage_steps", statements.STEP_COLUMNS, statements.INSERT_STEPS),
    (2, "kw_stage_traces", statements.TRACE_COLUMNS, statements.INSERT_TRACES),
)

# Up to this many rows of a kind go inside the script's text (about 3 µs a row to
# write); more go by COPY (about 1 µs a row, but a round trip of its own).
INLINE_ROWS = 32
# A lane empties its staging tables with DELETE at the end of each transaction
# (cheap) and TRUNCATEs them once this many rows have gone through since the
# last time (a few hundred microseconds a table), so the dead rows DELETE
# leaves behind, which every flush scans past, stay few.
TRUNCATE_STAGES_AFTER_ROWS = 2_000
# The staging tables the writer fills, besides statements.FINISH_STAGE.
WRITER_STAGES = (*statements.ROW_STAGES, *statements.ROLLUP_STAGES)
# How the writer's sessions plan. Every lookup they make is a handful of index
# probes per staged row (duplicate checks, run counters), which the planner
# cannot know: staging tables are never analysed, and a young agent_steps looks
# empty until autovacuum analyses it, so it may pick hash joins or sequential
# scans that read a whole table on every flush. (Switching plans off inflates
# their cost estimates; jit must go too, or those inflated costs make every
# statement pay for JIT compilation.) With those plans off, the generic plan of
# each prepared statement is the one it needs; PostgreSQL would otherwise plan
# it afresh for the values of every flush, since they come as literals.
# Measured with a month of history (bench/history.py, docs/benchmarks.md): on
# plain PostgreSQL they make ingest about 27% faster; on TimescaleDB with that
# history compressed, ingest was about 10% faster without them (twice), so
# there the writer plans as PostgreSQL would.
PLANNER_SETTINGS = (
    "enable_hashjoin = off",
    "enable_mergejoin = off",
    "enable_seqscan = off",
    "jit = off",
    "plan_cache_mode = force_generic_plan",
)
TIMESCALEDB_PLANNER_SETTINGS: tuple[str, ...] = ()
# Emptying a staging table at the end of a flush: a statement PostgreSQL would
# otherwise parse and plan again on every flush, prepared like the rest.
_STAGES_EMPTIED = (*(name for name, *_ in WRITER_STAGES), statements.FINISH_STAGE)
EMPTY = {name: f"DELETE FROM {name}" for name in _STAGES_EMPTIED}
# What scripts run on every flush, prepared once per connection.
PREPARED = {
    **{f"kw_empty_{name.removeprefix('kw_stage_')}": sql for name, sql in EMPTY.items()},
    "kw_lock_groups": statements.LOCK_GROUPS_SQL,
    "kw_lock_runs": statements.LOCK_RUNS_SQL,
    "kw_check_direct_copy": statements.CHECK_DIRECT_COPY,
    "kw_steps_copied": statements.STEPS_COPIED,
    "kw_insert_runs": statements.INSERT_RUNS,
    "kw_insert_steps": statements.INSERT_STEPS,
    "kw_insert_traces": statements.INSERT_TRACES,
    "kw_merge_run_rollups": statements.MERGE_RUN_ROLLUPS,
    "kw_merge_duration_rollups": statements.MERGE_DURATION_ROLLUPS,
    "kw_append_tool_rollups": pending_tools.APPEND,
    "kw_finish_staged": statements.FINISH_STAGED,
}


class Lane:
    """One writer connection and the transaction it commits a batch in."""

    # The writer may hand this lane finishes (writer.py; the Citus lane takes none).
    FINISHES = True

    def __init__(
        self, conninfo: str, connect_timeout: int, transaction_pooling: bool = False
    ) -> None:
        self._conninfo = conninfo
        self._connect_timeout = connect_timeout
        # Behind a pooler in transaction mode (pooling.py) the session keeps nothing:
        # every script then sets, creates and plans for itself.
        self.transaction_pooling = transaction_pooling
        self._conn: psycopg.AsyncConnection | None = None
        self._staged_since_truncate = 0  # rows through the staging tables since TRUNCATE
        self._prepared: dict[str, str] = {}  # SQL -> name of the statement prepared for it

    async def commit(self, batch: list[Rows]) -> set[int]:
        """Write the batch in one transaction: one script, a round trip per kind of row
        that is COPYed (more than INLINE_ROWS of it) and one for the rest. Return
        which of the batch's finishes, numbered in order from 0, found their run.

        Steps go straight into agent_steps, so PostgreSQL writes each of them
        once, unless the script finds that unsafe (statements.CHECK_DIRECT_COPY:
        a step may be stored already, or its run has finished). The same
        batch is then written again with every row staged.

        Finishes come after every other row of the batch (a run started and
        finished in one batch is found), a run finished twice in the batch is
        finished twice in order, and with them the run-duration and tool
        rollups move, as a finish on its own does (lifecycle.py).
        """
        conn = await self._connection()
        if not self.transaction_pooling and not pgscript.literals_are_safe(conn):
            # Someone changed the session (a SET from a pooler's reset, an operator):
            # literals written now could be read with other escapes or encoding.
            log.warning("writer session lost standard_conforming_strings/UTF-8; restoring")
            for setting in pgscript.SESSION:
                await conn.execute(setting)
        parts = [
            (stage, columns, statement, [row for rows in batch for row in rows[position]])
            for position, stage, columns, statement in STAGES
        ]
        finishes = _in_rounds([row for rows in batch for row in rows[3]])
        if finishes:
            parts.append((statements.FINISH_STAGE, statements.FINISH_COLUMNS, None, finishes))
        parts = [part for part in parts if part[3]]
        locks = statements.lock_statement(_runs_touched(batch))
        steps = next((rows for stage, *_, rows in parts if stage == "kw_stage_steps"), None)
        try:
            if steps is None:
                return _found(await self._script(conn, locks, parts).run(conn, FOUND))
            staged = [part for part in parts if part[0] != "kw_stage_steps"]
            try:
                script = self._script(conn, locks, staged, _direct_steps(steps))
                return _found(await script.run(conn, FOUND))
            except psycopg.errors.CheckViolation as error:
                if error.diag.constraint_name != statements.DIRECT_COPY_GUARD:
                    raise
                script = self._script(conn, locks, parts, rollback_first=True)
                return _found(await script.run(conn, FOUND))
        except BaseException:
            await self._roll_back()
            raise

    def _script(
        self,
        conn: psycopg.AsyncConnection,
        locks: tuple[str, tuple],
        parts: list[tuple],
        direct: tuple[list[tuple], dict[str, list]] | None = None,
        rollback_first: bool = False,
    ) -> Script:
        """The transaction as a script: write ``parts`` into staging and move them in;
        with ``direct`` (fresh steps, and their runs' ranges and counts), write those
        steps straight into agent_steps once CHECK_DIRECT_COPY passes."""
        script = Script(self._prepared)
        if rollback_first:
            script.add("ROLLBACK")
        script.add(statements.BEGIN)
        if self.transaction_pooling:
            for statement in _TRANSACTION_SETUP:
                script.add(statement)
        script.add(*locks)
        if direct is not None:
            steps, runs = direct
            script.add(statements.CHECK_DIRECT_COPY, runs)
            insert = statements.insert_sql("agent_steps", statements.STEP_COLUMNS, seq=False)
            if not _as_values(script, insert, _kinds(statements.STEP_COLUMNS, seq=False), steps):
                types = statements.copy_types(statements.STEP_COLUMNS, seq=False)
                sql = statements.copy_sql("agent_steps", statements.STEP_COLUMNS, seq=False)
                script.copy(sql, copy_data(conn, types, steps))
            script.add(statements.STEPS_COPIED, runs)
        for stage, columns, _, rows in parts:
            numbered = [(seq, *row) for seq, row in enumerate(rows)]
            insert = statements.insert_sql(stage, columns)
            if not _as_values(script, insert, _kinds(columns, seq=True), numbered):
                data = copy_data(conn, statements.copy_types(columns), numbered)
                script.copy(statements.copy_sql(stage, columns), data)
        for stage, _, statement, rows in parts:
            if stage != statements.FINISH_STAGE:
                script.add(statement)
                continue
            for round_ in range(1, max(row[0] for row in rows) + 1):
                script.add(statements.FINISH_STAGED, {"round": round_})
        for statement in self._finish(parts):
            script.add(statement)
        return script

    def _finish(self, parts: list[tuple]) -> list[str]:
        """After the rows are in: merge the rollups, empty the staging tables (see
        TRUNCATE_STAGES_AFTER_ROWS), commit."""
        # The writer stages run rollups, tool rollups for late steps and finished runs,
        # and run-duration histograms for finished runs.
        stages = {stage for stage, *_ in parts}
        has_finishes = statements.FINISH_STAGE in stages
        has_tools = has_finishes or "kw_stage_steps" in stages
        tail = [statements.MERGE_RUN_ROLLUPS]
        if has_finishes:
            tail.append(statements.MERGE_DURATION_ROLLUPS)
        if has_tools:  # folded into the tool rollups in the background (pending_tools.py)
            tail.append(pending_tools.APPEND)
        if self._truncate_now(parts):
            tail.append(f"TRUNCATE {', '.join(_STAGES_EMPTIED)}")
        else:
            tail += [EMPTY[stage] for stage, *_ in parts]
            tail.append(EMPTY["kw_stage_rollups"])
            if has_finishes:
                tail.append(EMPTY["kw_stage_durations"])
            if has_tools:
                tail.append(EMPTY["kw_stage_tools"])
        tail.append("COMMIT")
        return tail

    def _truncate_now(self, parts: list[tuple]) -> bool:
        """Whether this transaction should TRUNCATE the staging tables it fills with ``parts``."""
        self._staged_since_truncate += sum(len(rows) for *_, rows in parts)
        if self._staged_since_truncate <= TRUNCATE_STAGES_AFTER_ROWS:
            return False
        self._staged_since_truncate = 0  # (if the transaction fails, a little early)
        return True

    async def _roll_back(self) -> None:
        """End a failed transaction; a connection that cannot is dropped."""
        conn = self._conn
        if conn is None or conn.closed:
            return
        try:
            if conn.info.transaction_status != pq.TransactionStatus.IDLE:
                await Script.rollback(conn)
        except Exception:  # broken, or mid-protocol after a cancellation
            await self.drop()

    async def analyze(self, tables: list[str]) -> None:
        try:
            conn = await self._connection()
            await conn.execute(f"ANALYZE {', '.join(tables)}")
        except psycopg.Error as error:
            log.debug("analyze skipped: %s", error)

    async def _connection(self) -> psycopg.AsyncConnection:
        if self._conn is None or self._conn.closed:
            conn = await psycopg.AsyncConnection.connect(
                self._conninfo,
                autocommit=True,
                connect_timeout=self._connect_timeout,
                prepare_threshold=None,  # psycopg's own prepared statements: see PREPARED
                client_encoding="UTF8",  # what literals and JSON bytes are written in
            )
            self._register_dumpers(conn)
            if self.transaction_pooling:
                self._prepared = {}
                self._conn = conn
                self._staged_since_truncate = 0
                return conn
            on_timescaledb = await timescale.has_timescaledb(conn)
            for setting in TIMESCALEDB_PLANNER_SETTINGS if on_timescaledb else PLANNER_SETTINGS:
                await conn.execute(f"SET {setting}")
            for setting in pgscript.SESSION:  # what writing rows as SQL text relies on
                await conn.execute(setting)
            for statement in statements.staging_ddl(WRITER_STAGES):
                await conn.execute(statement)
            await conn.execute(statements.FINISH_STAGING_DDL)
            await conn.execute(statements.GUARD_DDL)
            # Scripts EXECUTE these instead of planning them on every flush.
            self._prepared = await prepare(conn, PREPARED)
            self._conn = conn
            self._staged_since_truncate = 0
        return self._conn

    @staticmethod
    def _register_dumpers(conn: psycopg.AsyncConnection) -> None:
        """Binary COPY picks each column's dumper by type OID, and for bytea that is
        psycopg's DB-API `Binary` dumper, written in Python. Registering the (C)
        dumper of bytes again makes it the one for bytea: COPY formatting takes half
        the time. JSON payloads arrive as msgspec.Raw views of the request body; the
        same dumper sends them as they are."""
        bytes_dumper = psycopg.adapters.get_dumper(bytes, BINARY)
        conn.adapters.register_dumper(bytes, bytes_dumper)
        conn.adapters.register_dumper(msgspec.Raw, bytes_dumper)

    async def drop(self) -> None:
        if self._conn is not None:
            try:
                await self._conn.close()
            except Exception:  # already broken; nothing to save
                pass
            self._conn = None


# What the session setup of _connection does, done inside each transaction instead
# when sessions are pooled: SET LOCAL lasts until the commit, and the staging
# tables are created where the transaction happens to run (once per server
# session: IF NOT EXISTS, its notice silenced). Nothing is prepared.
_TRANSACTION_SETUP = (
    "SET LOCAL client_min_messages = warning",
    *(f"SET LOCAL {setting}" for setting in PLANNER_SETTINGS),
    "SET LOCAL standard_conforming_strings = on",
    *statements.staging_ddl(WRITER_STAGES),
    statements.FINISH_STAGING_DDL,
    statements.GUARD_DDL,
)


def _as_values(script: Script, insert: str, kinds: tuple[str, ...], rows: list[tuple]) -> bool:
    """Add ``rows`` to the script as the VALUES of ``insert`` if they are few (and can
    be written as text); whether it did."""
    if len(rows) > INLINE_ROWS:
        return False
    try:
        script.values(insert, kinds, rows)
    except Unquotable:
        return False
    return True


@functools.cache
def _kinds(columns: tuple[tuple[str, str], ...], seq: bool) -> tuple[str, ...]:
    """The column types of rows written as VALUES (seq first, if ``seq``)."""
    return (("int4",) if seq else ()) + tuple(kind for _, kind in columns)


def _direct_steps(steps: list[tuple]) -> tuple[list[tuple], dict[str, list]]:
    """The steps to COPY, each (project, run, step_index) once, the first one winning
    (as INSERT_STEPS decides); and per run the lowest and highest step_index (for
    CHECK_DIRECT_COPY) and how many steps it gets (for STEPS_COPIED).

    (Keys are UUID.int: a UUID's own hash is computed in Python, for every row.)
    """
    seen: set[tuple[int, int, int]] = set()
    fresh = []
    runs: dict[tuple[int, int], list] = {}
    for row in steps:
        key = (row[0].int, row[1].int, row[2])
        if key in seen:
            continue
        seen.add(key)
        index = row[2]
        fresh.append(row)
        entry = runs.get(key[:2])
        if entry is None:
            runs[key[:2]] = [row[0], row[1], index, index, 1]
            continue
        entry[4] += 1
        if index < entry[2]:
            entry[2] = index
        elif index > entry[3]:
            entry[3] = index
    columns = list(zip(*runs.values(), strict=True))
    return fresh, dict(zip(("projects", "runs", "low", "high", "counts"), columns, strict=True))


def _runs_touched(batch: list[Rows]) -> set[int]:
    """Every run the batch touches, as UUID.int; a model call without a run stands for
    its own id."""
    ids: set[int] = set()
    for runs, steps, traces, finishes in batch:
        ids.update(row[1].int for row in runs)  # run id
        ids.update(row[1].int for row in steps)  # the step's run id
        ids.update((row[2] or row[1]).int for row in traces)  # the call's run id, else its id
        ids.update(row[1].int for row in finishes)  # the finished run's id
    return ids


# The column the script's finish statements return the seq of each finish found in.
FOUND = b"kw_finished"


def _in_rounds(finishes: list[tuple]) -> list[tuple]:
    """Each finish with its round first: the k-th finish of a run in the batch is in round k."""
    seen: dict[tuple[int, int], int] = {}
    rounds = []
    for row in finishes:
        key = (row[0].int, row[1].int)
        round_ = seen[key] = seen.get(key, 0) + 1
        rounds.append((round_, *row))
    return rounds


def _found(values: list[bytes]) -> set[int]:
    return {int(value) for value in values}
