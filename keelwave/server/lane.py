"""One ingest writer connection, and how it turns a batch into one transaction.

The writer (writer.py) decides what goes together; a lane writes it. Rows are
staged in session-local temp tables and moved in by the statements of
writes.py, except large batches of steps, which are COPYed straight into
agent_steps after a probe for the ones already stored. Round trips are few:
a small batch is one pipeline; a large one COPYs between two.
"""

from __future__ import annotations

import logging

import msgspec
import psycopg
from psycopg import pq
from psycopg.adapt import PyFormat

from keelwave.server import writes

log = logging.getLogger("keelwave.writer")

BINARY = PyFormat.BINARY

Rows = tuple[list[tuple], list[tuple], list[tuple]]  # runs, steps, model calls of a request

# (position in Rows, staging table, columns, statement moving them in)
STAGES = (
    (0, "kw_stage_runs", writes.RUN_COLUMNS, writes.INSERT_RUNS),
    (1, "kw_stage_steps", writes.STEP_COLUMNS, writes.INSERT_STEPS),
    (2, "kw_stage_traces", writes.TRACE_COLUMNS, writes.INSERT_TRACES),
)


# Up to this many rows of a kind, a flush stages them with a multi-row INSERT in
# its single pipeline; more go by COPY (see Lane.commit).
PIPELINED_ROWS = 64
# A lane empties its staging tables with DELETE at the end of each transaction
# (cheap) and TRUNCATEs them once this many rows have gone through since the
# last time (a few hundred microseconds a table), so the dead rows DELETE
# leaves behind, which every flush scans past, stay few.
TRUNCATE_STAGES_AFTER_ROWS = 2_000
# The staging tables the writer fills (run-duration histograms change only when
# runs finish, in lifecycle.py, so the writer never stages them).
WRITER_STAGES = (*writes.ROW_STAGES, *writes.ROLLUP_STAGES[:1], *writes.ROLLUP_STAGES[2:])


class Lane:
    """One writer connection and the transaction it commits a batch in."""

    def __init__(self, conninfo: str, connect_timeout: int) -> None:
        self._conninfo = conninfo
        self._connect_timeout = connect_timeout
        self._conn: psycopg.AsyncConnection | None = None
        self._staged_since_truncate = 0  # rows through the staging tables since TRUNCATE

    async def commit(self, batch: list[Rows]) -> None:
        """Write the batch in one transaction, in as few round trips as it can.

        A flush of a few rows is one round trip: BEGIN, the locks, the rows
        (a multi-row INSERT into staging), the statements moving them in,
        the rollup merges and COMMIT go together in one pipeline. Larger
        flushes COPY their rows between a pipeline that begins and locks and
        one that does the rest: COPY costs two round trips, but far less
        CPU per row on both sides. Many steps skip staging altogether
        (:func:`_new_steps`): PostgreSQL then writes each step once.
        """
        conn = await self._connection()
        parts = [
            (stage, columns, statement, [row for rows in batch for row in rows[position]])
            for position, stage, columns, statement in STAGES
        ]
        parts = [part for part in parts if part[3]]
        copied = {stage for stage, _, _, rows in parts if len(rows) > PIPELINED_ROWS}
        steps = next((rows for stage, *_, rows in parts if stage == "kw_stage_steps"), [])
        ranges = _step_ranges(steps) if "kw_stage_steps" in copied else None
        try:
            async with conn.cursor() as cur, conn.cursor() as stored, conn.cursor() as finished:
                async with conn.pipeline():
                    await cur.execute("BEGIN")
                    await writes.lock_runs(cur, _runs_touched(batch))
                    if ranges:
                        await stored.execute(writes.STORED_STEPS, ranges)
                        await finished.execute(writes.ANY_RUN_FINISHED, ranges)
                    if not copied:
                        await _move_in(cur, parts, copied, self._truncate_now(parts))
                if not copied:
                    return
                direct = None
                if ranges and not (await finished.fetchone())[0]:
                    direct = _new_steps(steps, await stored.fetchall())
                    parts = [part for part in parts if part[0] != "kw_stage_steps"]
                    types = writes.copy_types(writes.STEP_COLUMNS, seq=False)
                    await _copy(cur, writes.COPY_INTO_STEPS, types, direct[0])
                for stage, columns, _, rows in parts:
                    if stage in copied:
                        sql, types = writes.copy_sql(stage, columns), writes.copy_types(columns)
                        numbered = [(seq, *row) for seq, row in enumerate(rows)]
                        await _copy(cur, sql, types, numbered)
                async with conn.pipeline():
                    if direct is not None:
                        await cur.execute(writes.STEPS_COPIED, direct[1])
                    await _move_in(cur, parts, copied, self._truncate_now(parts))
        except BaseException:
            await self._roll_back()
            raise

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
                await conn.execute("ROLLBACK")
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
                self._conninfo, autocommit=True, connect_timeout=self._connect_timeout
            )
            # Every lookup this connection makes is a handful of index probes per
            # staged row (duplicate checks, run counters). The planner cannot know
            # that: staging tables are never analysed, and a young agent_steps looks
            # empty until autovacuum analyses it, so it may pick hash joins or
            # sequential scans that read a whole table on every flush.
            # (Switching plans off inflates their cost estimates; jit must go too, or
            # those inflated costs make every statement pay for JIT compilation.)
            for setting in ("enable_hashjoin", "enable_mergejoin", "enable_seqscan", "jit"):
                await conn.execute(f"SET {setting} = off")
            for statement in writes.staging_ddl(WRITER_STAGES, emptied_at_commit=False):
                await conn.execute(statement)
            # Binary COPY picks each column's dumper by type OID, and for bytea that is
            # psycopg's DB-API `Binary` dumper, written in Python. Registering the
            # (C) dumper of bytes again makes it the one for bytea: COPY formatting
            # takes half the time. JSON payloads arrive as msgspec.Raw views of the
            # request body; the same dumper sends them as they are.
            bytes_dumper = psycopg.adapters.get_dumper(bytes, BINARY)
            conn.adapters.register_dumper(bytes, bytes_dumper)
            conn.adapters.register_dumper(msgspec.Raw, bytes_dumper)
            self._conn = conn
            self._staged_since_truncate = 0
        return self._conn

    async def drop(self) -> None:
        if self._conn is not None:
            try:
                await self._conn.close()
            except Exception:  # already broken; nothing to save
                pass
            self._conn = None


async def _copy(
    cur: psycopg.AsyncCursor, sql: str, types: tuple[str, ...], rows: list[tuple]
) -> None:
    """COPY ``rows``, formatting them without a coroutine per row (the formatter
    hands back a buffer's worth at a time; only those writes wait)."""
    async with cur.copy(sql) as copy:
        copy.set_types(types)
        formatter = copy.formatter
        for row in rows:
            if data := formatter.write_row(row):
                await copy.write(data)


async def _move_in(
    cur: psycopg.AsyncCursor, parts: list[tuple], copied: set[str], truncate: bool
) -> None:
    """Stage the rows not COPYed, move every stage into its table, merge the rollups,
    empty the staging tables (see TRUNCATE_STAGES_AFTER_ROWS), commit."""
    raw = psycopg.AsyncRawCursor(cur.connection)
    for stage, columns, statement, rows in parts:
        if stage not in copied:
            values = [value for seq, row in enumerate(rows) for value in (seq, *row)]
            await raw.execute(writes.values_sql(stage, columns, len(rows)), values)
        await cur.execute(statement)
    # The writer stages run rollups, and tool rollups for late steps; run-duration
    # histograms change only when runs finish (lifecycle.py).
    has_steps = any(stage == "kw_stage_steps" for stage, *_ in parts)
    await cur.execute(writes.MERGE_RUN_ROLLUPS)
    if has_steps:
        await cur.execute(writes.MERGE_TOOL_ROLLUPS)
    if truncate:
        await cur.execute(f"TRUNCATE {', '.join(name for name, *_ in WRITER_STAGES)}")
    else:
        for stage, *_ in parts:
            await cur.execute(f"DELETE FROM {stage}")
        await cur.execute("DELETE FROM kw_stage_rollups")
        if has_steps:
            await cur.execute("DELETE FROM kw_stage_tools")
    await cur.execute("COMMIT")


def _step_ranges(steps: list[tuple]) -> dict[str, list]:
    """Per (project, run), the lowest and highest step_index in ``steps``: what to probe.

    (Keys are UUID.int: a UUID's own hash is computed in Python, for every row.)
    """
    ranges: dict[tuple[int, int], list] = {}
    for row in steps:
        index = row[2]
        bounds = ranges.get((row[0].int, row[1].int))
        if bounds is None:
            ranges[(row[0].int, row[1].int)] = [row[0], row[1], index, index]
        elif index < bounds[2]:
            bounds[2] = index
        elif index > bounds[3]:
            bounds[3] = index
    columns = list(zip(*ranges.values(), strict=True))
    return dict(zip(("projects", "runs", "low", "high"), map(list, columns), strict=True))


def _new_steps(steps: list[tuple], stored: list[tuple]) -> tuple[list[tuple], dict[str, list]]:
    """The steps not stored yet, each (project, run, step_index) once, first one wins
    (as INSERT_STEPS decides); and how many each run gets, for STEPS_COPIED."""
    seen = {(project.int, run.int, index) for project, run, index in stored}
    fresh = []
    counts: dict[tuple[int, int], list] = {}
    for row in steps:
        project, run = row[0].int, row[1].int
        key = (project, run, row[2])
        if key in seen:
            continue
        seen.add(key)
        fresh.append(row)
        count = counts.get((project, run))
        if count is None:
            counts[(project, run)] = [row[0], row[1], 1]
        else:
            count[2] += 1
    columns = list(zip(*counts.values(), strict=True)) or [(), (), ()]
    return fresh, dict(zip(("projects", "runs", "counts"), map(list, columns), strict=True))


def _runs_touched(batch: list[Rows]) -> set[int]:
    """Every run the batch touches, as UUID.int; a model call without a run stands for
    its own id."""
    ids: set[int] = set()
    for runs, steps, traces in batch:
        ids.update(row[1].int for row in runs)  # run id
        ids.update(row[1].int for row in steps)  # the step's run id
        ids.update((row[2] or row[1]).int for row in traces)  # the call's run id, else its id
    return ids
