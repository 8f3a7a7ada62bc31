"""OTLP traces: the spans kept as they came, and the runs projected from them.

One export (or several that waited for each other: ingest/otlp/export.py commits
them together) is one transaction (:func:`store_export`):

1. Lock the export's traces (advisory locks in their own namespace, in key
   order), so two exports of one trace run one after the other.
2. Read the ids of the traces' stored spans, and COPY the export's other spans
   straight into otlp_spans: a span already stored (a retried export) is not
   sent again. Under the trace locks nobody else adds spans to these traces; if
   somebody did all the same (servers on different Citus nodes, whose advisory
   locks are each node's own), the COPY fails on the primary key and the export
   goes again the staged way: COPY into a temporary table, then INSERT … ON
   CONFLICT DO NOTHING. If nothing is new, commit: the projection stands.
3. For every trace that got a new span, read all of its spans and let the
   caller project them into runs (``project``: ingest/otlp, a pure function
   of the span set), then compare each run with the digests of what was
   written last time (otlp_runs). Unchanged runs are left alone.
4. For runs that changed or vanished, take their run locks (statements.py's
   rule 1, after the trace locks: no other writer takes trace locks, so no
   cycle), take what they added to the rollups out, rewrite what changed
   (steps from the first one that differs; model calls likewise; the run's
   row), and put what they add now back in. A run's share of every rollup
   is read from its stored rows both times, so the rollups stay exact
   whatever changed: a new step, a renumbering when an earlier tool span
   arrives late, a finish, a rename once the agent span arrives.

Acknowledged means committed, as for native ingest.
"""

from __future__ import annotations

import hashlib
import uuid
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Protocol

import msgspec
import psycopg
from psycopg.adapt import PyFormat
from psycopg_pool import AsyncConnectionPool

from keelwave.server.store import pending_tools, statements, tool_rollups
from keelwave.server.store.citus import keys as citus_keys
from keelwave.server.store.citus import partitions as citus_partitions
from keelwave.server.store.histogram import bin_sql
from keelwave.server.store.pgscript import copy_data

TRACE_LOCKS = 0x6B79  # pg_advisory_xact_lock(int, int) namespace of OTLP traces
DIGEST_BYTES = 16
CALL_BYTES = 16 + DIGEST_BYTES  # a model call's id, then its row's digest


_pack = msgspec.msgpack.Encoder().encode  # UUIDs, datetimes, bytes: all in C


def digest(*values: Any) -> bytes:
    """A short digest of a row's values, to tell whether it changed."""
    return hashlib.blake2b(_pack(values), digest_size=DIGEST_BYTES).digest()


@dataclass(slots=True)
class RunRow:
    """What the store writes for one run projected from a trace."""

    id: uuid.UUID
    agent_name: str
    parent_run_id: uuid.UUID | None
    started_at: datetime
    ended_at: datetime | None
    termination_reason: str | None
    loop_detected: bool
    loop_step_index: int | None
    input: str | None  # JSON text
    output: str | None
    metadata: str | None
    error: str | None
    error_traceback: str | None
    llm_calls: int
    input_tokens: int
    output_tokens: int
    cost_usd: float
    steps: list[tuple] = field(default_factory=list)  # statements.STEP_COLUMNS rows
    calls: list[tuple] = field(default_factory=list)  # statements.TRACE_COLUMNS rows
    step_digests: list[bytes] | None = None  # digest(*row) of each step, if known already
    # …and each model call's id and digest(*row), CALL_BYTES (_Stored.calls), if known
    call_entries: list[bytes] | None = None

    def row_digest(self) -> bytes:
        return digest(
            self.agent_name, self.parent_run_id, self.started_at, self.ended_at,
            self.termination_reason, self.loop_detected, self.loop_step_index, self.input,
            self.output, self.metadata, self.error, self.llm_calls, self.input_tokens,
            self.output_tokens, self.cost_usd, len(self.steps), self.error_traceback,
        )  # fmt: skip


class Projection(Protocol):
    """The caller's projection of a trace's spans into runs (ingest/otlp/projection.py)."""

    def inserted(self, spans: list[tuple[bytes, bytes]]) -> None:
        """The (trace id, span id) of the export's spans that it stored (not a retry's)."""
        ...

    def known(self, trace_id: bytes) -> list[bytes]:
        """The ids of the trace's spans it still holds (from mapping it before)."""
        ...

    def holds(self, trace_id: bytes) -> int:
        """How many of the trace's spans it holds: all of them when the database has as
        many (it holds none the database does not: :meth:`rolled_back`)."""
        ...

    def rolled_back(self) -> None:
        """The transaction that it was told of spans in did not commit: forget them."""
        ...

    def project(
        self, trace_id: bytes, spans: list[tuple[bytes, bytes | None]] | None
    ) -> list[RunRow]:
        """The runs of every stored span of the trace: (span id, span as stored), the
        stored form left out (None) for the spans it said it knows; ``spans`` None when
        it holds every one of them."""
        ...


@dataclass(slots=True)
class _Stored:
    """What otlp_runs says was written for a run last time, as it keeps it: compared
    as bytes (a long run's are compared and extended export after export)."""

    digest: bytes
    steps: bytes  # each step's digest, DIGEST_BYTES each
    calls: bytes  # each model call's id and digest, CALL_BYTES each

    def call_ids(self, first: int = 0) -> list[uuid.UUID]:
        """The ids of its calls from the one numbered ``first`` on."""
        calls, starts = self.calls, range(first * CALL_BYTES, len(self.calls), CALL_BYTES)
        return [uuid.UUID(bytes=calls[i : i + 16]) for i in starts]


@dataclass(slots=True)
class _Plan:
    """What one export changes: per run, how many of its stored steps and calls stay."""

    retract: list[uuid.UUID] = field(default_factory=list)  # runs whose rollup share changes
    vanished: list[uuid.UUID] = field(default_factory=list)
    keep_steps: dict[uuid.UUID, int] = field(default_factory=dict)
    stale_calls: list[tuple[uuid.UUID, uuid.UUID]] = field(default_factory=list)
    rows: list[tuple[bytes, RunRow]] = field(default_factory=list)  # (trace, run) to write
    digests: list[tuple[bytes, bytes, bytes]] = field(default_factory=list)  # row, steps, calls
    rejudge: list[bool] = field(default_factory=list)  # steps renumbered or removed
    steps: list[tuple] = field(default_factory=list)
    calls: list[tuple] = field(default_factory=list)


def _span_stored_already(error: psycopg.Error) -> bool:
    """Whether the COPY of new spans failed on otlp_spans's primary key. Citus reports
    a worker's unique violation during a COPY as an internal error (XX000) with the
    shard's constraint in the message (``otlp_spans_pkey_102225``), not as 23505."""
    if isinstance(error, psycopg.errors.UniqueViolation):
        return True
    message = error.diag.message_primary or ""
    return message.startswith('duplicate key value violates unique constraint "otlp_spans_pkey')


def trace_lock_key(project_id: uuid.UUID, trace_id: bytes) -> int:
    value = int.from_bytes(hashlib.blake2b(project_id.bytes + trace_id, digest_size=4).digest())
    return value - 0x80000000


async def store_export(
    pool: AsyncConnectionPool,
    project_id: uuid.UUID,
    spans: Sequence[tuple[bytes, bytes, bytes]],
    project: Projection,
    leave_tools_pending: bool = False,
) -> int:
    """Store an export's spans, (trace id, span id, span as stored), and re-project the
    traces that got new ones, in one transaction; return how many spans were new.

    ``leave_tools_pending``: leave the finished runs' tool calls pending, as the ingest writer
    does, for the server's fold to add to the tool rollups (pending_tools.py); only
    where a fold runs (not on Citus). Otherwise they are merged at once.

    On Citus, a late span of a run whose rows are in a columnar day (which takes no
    DELETE) brings those days back to heap and the export goes again."""

    merge = pending_tools.MERGE_ROLLUPS if leave_tools_pending else statements.MERGE_ROLLUPS

    async def runs() -> list[uuid.UUID]:
        traces = sorted({trace for trace, _, _ in spans})
        async with pool.connection() as conn:
            cursor = await conn.execute(RUNS_OF_TRACES, (traces, project_id))
            return [run_id for (run_id,) in await cursor.fetchall()]

    async def store() -> int:
        try:
            try:
                return await _store_export(pool, project_id, spans, project, False, merge)
            except (psycopg.errors.UniqueViolation, psycopg.errors.InternalError) as error:
                if not _span_stored_already(error):
                    raise
                # another node added some of these spans
                return await _store_export(pool, project_id, spans, project, True, merge)
        except BaseException:
            project.rolled_back()
            raise

    return await citus_partitions.decompressing(pool, project_id, store, runs)


async def _store_export(
    pool: AsyncConnectionPool,
    project_id: uuid.UUID,
    spans: Sequence[tuple[bytes, bytes, bytes]],
    project: Projection,
    staged: bool,
    merge: str,
) -> int:
    traces = sorted({bytes(trace) for trace, _, _ in spans})
    async with pool.connection() as conn, statements.transaction(conn), conn.cursor() as cur:
        keys = sorted({trace_lock_key(project_id, trace) for trace in traces})
        await cur.execute(
            "SELECT pg_advisory_xact_lock(%s, key) FROM unnest(%b::int[]) AS key",
            (TRACE_LOCKS, keys),
        )
        complete: set[bytes] = set()  # traces whose stored spans the projection holds all of
        if staged:
            await _stage_spans(cur, project_id, spans)
            await cur.execute(INSERT_SPANS)
            inserted = [(bytes(trace), bytes(span)) for trace, span in await cur.fetchall()]
        else:
            already, counts = await _spans_stored(cur, project_id, spans, traces)
            inserted = await _copy_new_spans(cur, project_id, spans, already)
            # (asked before it is told of the new spans; only of traces that got some)
            complete = {trace for trace in {trace for trace, _ in inserted}
                        if counts.get(trace, 0) == project.holds(trace)}  # fmt: skip
        if not inserted:
            return 0
        project.inserted(inserted)
        grown = sorted({trace for trace, _ in inserted})
        new_spans = len(inserted)
        partial = [trace for trace in grown if trace not in complete]
        stored_ids = await _stored_span_ids(cur, project_id, partial) if partial else {}
        stored: dict[bytes, list[tuple[bytes, bytes | None]] | None] = dict(
            await _stored_spans(cur, project_id, stored_ids, project)
        )
        stored.update((trace, None) for trace in grown if trace in complete)
        previous = await _stored_runs(cur, project_id, grown)
        plan = _Plan()
        for trace in grown:
            runs = project.project(trace, stored[trace])
            _compare(plan, trace, runs, previous.get(trace, {}))
        if plan.retract:
            await _apply(cur, project_id, plan, merge)
        return new_spans


async def _stored_span_ids(
    cur: psycopg.AsyncCursor, project_id: uuid.UUID, traces: list[bytes]
) -> dict[bytes, list[bytes]]:
    """The ids of every stored span of ``traces`` (an empty list for a new trace)."""
    await cur.execute(READ_SPAN_IDS, (traces, project_id))
    found: dict[bytes, list[bytes]] = {trace: [] for trace in traces}
    for trace, span_ids in await cur.fetchall():
        found[bytes(trace)] = [bytes(span_id) for span_id in span_ids]
    return found


async def _spans_stored(
    cur: psycopg.AsyncCursor,
    project_id: uuid.UUID,
    spans: Sequence[tuple[bytes, bytes, bytes]],
    traces: list[bytes],
) -> tuple[set[tuple[bytes, bytes]], dict[bytes, int]]:
    """Which of the export's spans are stored already (a retry's), and how many spans
    each of its traces has stored: the projection holds them all when it holds as many.
    (Not every id of a long run's trace, export after export.)"""
    await cur.execute(
        READ_STORED_OF_EXPORT,
        ([bytes(trace) for trace, _, _ in spans], [bytes(span) for _, span, _ in spans],
         project_id),
    )  # fmt: skip
    already = {(bytes(trace), bytes(span)) for trace, span in await cur.fetchall()}
    await cur.execute(COUNT_SPANS, (traces, project_id))
    return already, {bytes(trace): count for trace, count in await cur.fetchall()}


async def _copy_new_spans(
    cur: psycopg.AsyncCursor,
    project_id: uuid.UUID,
    spans: Sequence[tuple[bytes, bytes, bytes]],
    stored: set[tuple[bytes, bytes]],
) -> list[tuple[bytes, bytes]]:
    """COPY the spans not in ``stored`` yet (the first of any sent twice) into
    otlp_spans; return their (trace, span) ids."""
    stored = set(stored)
    new: list[tuple[bytes, bytes, bytes]] = []
    for trace, span_id, span in spans:
        key = (bytes(trace), bytes(span_id))
        if key not in stored:
            stored.add(key)
            new.append((key[0], key[1], span))
    if new:
        await _copy_spans(cur, "otlp_spans", project_id, new)
    return [(trace, span_id) for trace, span_id, _ in new]


async def _copy_spans(
    cur: psycopg.AsyncCursor,
    table: str,
    project_id: uuid.UUID,
    spans: Sequence[tuple[bytes, bytes, bytes]],
) -> None:
    """(trace, span id, stored form) rows into ``table`` by binary COPY: as query
    parameters they would be hex-encoded (in Python) and parsed back, twice their size
    each way."""
    # The C dumper of bytes for bytea (psycopg picks a Python one by type): lane.py.
    cur.connection.adapters.register_dumper(bytes, psycopg.adapters.get_dumper(bytes, _BINARY))
    rows = ((project_id, trace, span_id, span) for trace, span_id, span in spans)
    await _copy_rows(
        cur,
        f"COPY {table} (project_id, trace_id, span_id, span) FROM STDIN (FORMAT BINARY)",
        ("uuid", "bytea", "bytea", "bytea"),
        rows,
    )


async def _copy_rows(
    cur: psycopg.AsyncCursor, sql: str, types: Sequence[str], rows: Iterable[Sequence]
) -> None:
    """Binary COPY of ``rows``, formatted in one go (pgscript.copy_data) and sent in
    chunks of about 32 kB: no coroutine per row."""
    chunks = copy_data(cur.connection, types, rows)
    async with cur.copy(sql) as copy:
        for chunk in chunks:
            await copy.write(chunk)


async def _stored_spans(
    cur: psycopg.AsyncCursor,
    project_id: uuid.UUID,
    span_ids: dict[bytes, list[bytes]],
    project: Projection,
) -> dict[bytes, list[tuple[bytes, bytes | None]]]:
    """Every stored span of the traces in ``span_ids`` (their ids), the stored form only
    of those the projection does not hold already: the bodies of the others are read,
    if any (one process sees most exports of a trace, and holds the export's own new
    spans)."""
    found: dict[bytes, list[tuple[bytes, bytes | None]]] = {
        trace: [(span_id, None) for span_id in ids] for trace, ids in span_ids.items()
    }
    missing: set[tuple[bytes, bytes]] = set()
    for trace, spans in found.items():
        known = set(project.known(trace))
        missing.update((trace, span_id) for span_id, _ in spans if span_id not in known)
    if missing:
        pairs = sorted(missing)
        await cur.execute(
            READ_SPANS, ([trace for trace, _ in pairs], [span for _, span in pairs], project_id)
        )
        bodies = {(bytes(t), bytes(s)): bytes(span) for t, s, span in await cur.fetchall()}
        for trace, spans in found.items():
            # A span gone between the two reads (retention) is left out, as if not read.
            spans[:] = [
                (span_id, bodies.get((trace, span_id)))
                for span_id, _ in spans
                if (trace, span_id) not in missing or (trace, span_id) in bodies
            ]
    return found


async def _stored_runs(
    cur: psycopg.AsyncCursor, project_id: uuid.UUID, traces: list[bytes]
) -> dict[bytes, dict[uuid.UUID, _Stored]]:
    await cur.execute(READ_DIGESTS, (traces, project_id))
    found: dict[bytes, dict[uuid.UUID, _Stored]] = {}
    for trace, run, run_digest, steps, calls in await cur.fetchall():
        found.setdefault(bytes(trace), {})[run] = _Stored(
            bytes(run_digest), bytes(steps), bytes(calls)
        )
    return found


def _compare(
    plan: _Plan, trace: bytes, runs: list[RunRow], previous: dict[uuid.UUID, _Stored]
) -> None:
    """Add to ``plan`` what differs between a trace's projected runs and what was written."""
    for run in runs:
        before = previous.get(run.id)
        step_digests = (
            run.step_digests
            if run.step_digests is not None
            else [digest(*step) for step in run.steps]
        )
        steps = b"".join(step_digests)
        calls = b"".join(
            run.call_entries
            if run.call_entries is not None
            else (call[1].bytes + digest(*call) for call in run.calls)
        )
        row_digest = run.row_digest()
        if before is not None and (
            before.digest == row_digest and before.steps == steps and before.calls == calls
        ):
            continue
        plan.retract.append(run.id)
        plan.rows.append((trace, run))
        kept_steps = _common_prefix(before.steps if before else b"", steps, DIGEST_BYTES)
        plan.keep_steps[run.id] = kept_steps
        plan.digests.append((row_digest, steps, calls))
        # Appended steps make the run's verdict due by themselves (verdicts.py); steps
        # renumbered or taken away must make it so.
        plan.rejudge.append(before is not None and kept_steps < len(before.steps) // DIGEST_BYTES)
        plan.steps += run.steps[kept_steps:]
        kept_calls = _common_prefix(before.calls if before else b"", calls, CALL_BYTES)
        if before is not None:
            plan.stale_calls += [(run.id, call) for call in before.call_ids(kept_calls)]
        plan.calls += run.calls[kept_calls:]
    projected = {run.id for run in runs}
    for run_id, before in previous.items():
        if run_id not in projected:  # a provisional run whose spans found their real run
            plan.retract.append(run_id)
            plan.vanished.append(run_id)
            plan.keep_steps[run_id] = 0
            plan.stale_calls += [(run_id, call) for call in before.call_ids()]


def _common_prefix(before: bytes, after: bytes, size: int) -> int:
    """How many ``size``-byte entries the two begin with alike."""
    if after.startswith(before):  # (the common case: entries added at the end)
        return len(before) // size
    count, end = 0, min(len(before), len(after))
    while (
        count * size < end
        and before[count * size : (count + 1) * size] == after[count * size : (count + 1) * size]
    ):
        count += 1
    return count


async def _apply(cur: psycopg.AsyncCursor, project_id: uuid.UUID, plan: _Plan, merge: str) -> None:
    """Rewrite the runs of ``plan``, keeping counters and rollups exact (rules 1-3);
    ``merge``: what moves the staged rollup rows on (statements.MERGE_ROLLUPS, or
    pending_tools.MERGE_ROLLUPS)."""
    await statements.lock_runs(cur, {run_id.int for run_id in plan.retract})
    ids = {"project_id": project_id, "ids": plan.retract}
    await cur.execute(STAGE_SHARES, {**ids, "sign": -1})
    kept = list(plan.keep_steps.items())
    await cur.execute(
        DELETE_STEPS,
        {"project_id": project_id, "runs": [r for r, _ in kept], "keep": [k for _, k in kept]},
    )
    if plan.stale_calls:
        await cur.execute(
            DELETE_CALLS,
            {
                "project_id": project_id,
                "runs": [run for run, _ in plan.stale_calls],
                "ids": [call for _, call in plan.stale_calls],
            },
        )
    if plan.vanished:
        await cur.execute(DELETE_RUNS, {"project_id": project_id, "ids": plan.vanished})
    await _copy(cur, "agent_steps", statements.STEP_COLUMNS, plan.steps)
    await _copy(cur, "ai_traces", statements.TRACE_COLUMNS, plan.calls)
    if plan.rows:
        columns = _run_columns(project_id, [run for _, run in plan.rows])
        await cur.execute(UPSERT_RUNS, {**columns, "rejudge": plan.rejudge})
    if await citus_keys.in_use(cur.connection):
        for sql in citus_keys.RESYNC:
            await cur.execute(sql, ids)
    await cur.execute(STAGE_SHARES, {**ids, "sign": 1})
    if plan.rows:
        await cur.execute(SAVE_DIGESTS, _digest_columns(project_id, plan))
    await cur.execute(merge)


async def _copy(
    cur: psycopg.AsyncCursor, table: str, columns: tuple[tuple[str, str], ...], rows: list[tuple]
) -> None:
    if not rows:
        return
    sql = statements.copy_sql(table, columns, seq=False)
    await _copy_rows(cur, sql, statements.copy_types(columns, seq=False), rows)


async def _stage_spans(
    cur: psycopg.AsyncCursor, project_id: uuid.UUID, spans: Sequence[tuple[bytes, bytes, bytes]]
) -> None:
    """The export's spans into kw_stage_spans (the staged way, step 2 of the module
    docstring)."""
    await cur.execute(STAGE_SPANS_DDL)
    await _copy_spans(cur, "kw_stage_spans", project_id, spans)


def _run_columns(project_id: uuid.UUID, runs: list[RunRow]) -> dict[str, Any]:
    return {
        "project_id": project_id,
        "ids": [r.id for r in runs],
        "names": [r.agent_name for r in runs],
        "parents": [r.parent_run_id for r in runs],
        "started": [r.started_at for r in runs],
        "ended": [r.ended_at for r in runs],
        "reasons": [r.termination_reason for r in runs],
        "loops": [r.loop_detected for r in runs],
        "loop_steps": [r.loop_step_index for r in runs],
        "inputs": [r.input for r in runs],
        "outputs": [r.output for r in runs],
        "metadata": [r.metadata for r in runs],
        "errors": [r.error for r in runs],
        "tracebacks": [r.error_traceback for r in runs],
        "steps": [len(r.steps) for r in runs],
        "calls": [r.llm_calls for r in runs],
        "input_tokens": [r.input_tokens for r in runs],
        "output_tokens": [r.output_tokens for r in runs],
        "costs": [float(r.cost_usd) for r in runs],
    }


def _digest_columns(project_id: uuid.UUID, plan: _Plan) -> dict[str, Any]:
    return {
        "project_id": project_id,
        "traces": [trace for trace, _ in plan.rows],
        "runs": [run.id for _, run in plan.rows],
        "digests": [row for row, _, _ in plan.digests],
        "steps": [steps for _, steps, _ in plan.digests],
        "calls": [calls for _, _, calls in plan.digests],
    }


_BINARY = PyFormat.BINARY
# Made where the transaction runs (behind a transaction pooler, any session), and
# emptied of what the session staged last time (its notice is silenced by
# statements.transaction). Not ON COMMIT DELETE ROWS, which would truncate it at every
# later commit of the session that used a temporary table (statements.rollup_staging).
STAGE_SPANS_DDL = (
    "CREATE TEMP TABLE IF NOT EXISTS kw_stage_spans (LIKE otlp_spans INCLUDING DEFAULTS);\n"
    "TRUNCATE kw_stage_spans"
)
# Rows of the export's traces and runs are looked up one key at a time: as a join (or
# ``= ANY``), the planner, taking one project's rows for few on a table not analysed
# yet (autovacuum off, or a project new since the last ANALYZE), read every row of the
# project for each export, ever more as the project grows (13 ms an export at 130,000
# spans; tests/test_otlp_lookups.py). ``OFFSET 0`` keeps a LATERAL subquery from being
# flattened into a join, so it runs once per key, in the index. (Citus routes these
# whole to the project's shard: one project, given as a parameter.)
READ_STORED_OF_EXPORT = """
SELECT k.trace_id, k.span_id
FROM unnest(%b::bytea[], %b::bytea[]) AS k (trace_id, span_id)
CROSS JOIN LATERAL (
    SELECT FROM otlp_spans s
    WHERE s.project_id = %s AND s.trace_id = k.trace_id AND s.span_id = k.span_id OFFSET 0
) s
"""
READ_SPAN_IDS = """
SELECT k.trace_id, s.ids
FROM unnest(%b::bytea[]) AS k (trace_id)
CROSS JOIN LATERAL (
    SELECT array_agg(span_id) AS ids FROM otlp_spans s
    WHERE s.project_id = %s AND s.trace_id = k.trace_id
) s
WHERE s.ids IS NOT NULL
"""
COUNT_SPANS = """
SELECT k.trace_id, c.spans
FROM unnest(%b::bytea[]) AS k (trace_id)
CROSS JOIN LATERAL (
    SELECT count(*) AS spans FROM otlp_spans s WHERE s.project_id = %s AND s.trace_id = k.trace_id
) c
WHERE c.spans > 0
"""
READ_SPANS = """
SELECT k.trace_id, k.span_id, s.span
FROM unnest(%b::bytea[], %b::bytea[]) AS k (trace_id, span_id)
CROSS JOIN LATERAL (
    SELECT s.span FROM otlp_spans s
    WHERE s.project_id = %s AND s.trace_id = k.trace_id AND s.span_id = k.span_id OFFSET 0
) s
"""
INSERT_SPANS = """
INSERT INTO otlp_spans (project_id, trace_id, span_id, span)
SELECT project_id, trace_id, span_id, span FROM kw_stage_spans
ON CONFLICT DO NOTHING
RETURNING trace_id, span_id
"""

# A run's share of the rollups, read from its stored rows, staged ``sign`` times:
# -1 before a run is rewritten, +1 after. What it adds is what native ingest adds
# for the same rows: a run, its counters and its loop flag (aggregates.py's
# _FROM_RUN counts loop_detected whether or not the run has ended); its finish
# (reason, duration, histogram bin) and its tool calls once it has ended.
_RUNS_OF = """(
    SELECT r.* FROM unnest(%(ids)b::uuid[]) AS k (id) CROSS JOIN LATERAL (
        SELECT * FROM agent_runs r WHERE r.project_id = %(project_id)s AND r.id = k.id OFFSET 0
    ) r
)"""
_TERMS = ",\n           ".join(
    f"%(sign)s * (r.termination_reason IS NOT DISTINCT FROM '{reason}')::int"
    for reason in statements.TERMINATION_COUNTERS
)
_STEPS_OF_ENDED_RUNS = tool_rollups.steps_of_runs(
    "(SELECT * FROM runs WHERE ended_at IS NOT NULL)", "%(sign)s"
)
STAGE_SHARES = f"""
WITH runs AS {_RUNS_OF}, staged AS (
    INSERT INTO kw_stage_rollups (project_id, agent_name, bucket, runs, finished_runs,
        loop_runs, error_runs, steps, llm_calls, input_tokens, output_tokens, cost_usd,
        duration_ms_sum, {", ".join(f"term_{r}" for r in statements.TERMINATION_COUNTERS)},
        {", ".join(statements.VERDICT_COUNTERS)})
    SELECT r.project_id, r.agent_name, date_trunc('hour', r.started_at, 'UTC'), %(sign)s,
           %(sign)s * (r.termination_reason IS NOT NULL)::int,
           %(sign)s * r.loop_detected::int,
           %(sign)s * (r.termination_reason IS NOT DISTINCT FROM 'error')::int,
           %(sign)s * r.step_count, %(sign)s * r.llm_calls, %(sign)s * r.input_tokens,
           %(sign)s * r.output_tokens, %(sign)s * r.cost_usd,
           %(sign)s * CASE WHEN r.termination_reason IS NOT NULL
                           THEN coalesce(r.duration_ms, 0) ELSE 0 END,
           {_TERMS},
           {statements.VERDICT_SHARES}
    FROM runs r
), durations AS (
    INSERT INTO kw_stage_durations (project_id, bucket, agent_name, duration_bin, runs)
    SELECT project_id, date_trunc('hour', started_at, 'UTC'), agent_name,
           {bin_sql("duration_ms")}, %(sign)s
    FROM runs WHERE termination_reason IS NOT NULL AND duration_ms IS NOT NULL
)
INSERT INTO kw_stage_tools (project_id, bucket, tool_name, duration_bin,
                            {", ".join(tool_rollups.COUNTERS)})
{tool_rollups.stats_of_steps(f"({_STEPS_OF_ENDED_RUNS})")}
"""

RUNS_OF_TRACES = """
SELECT o.run_id FROM unnest(%b::bytea[]) AS k (trace_id) CROSS JOIN LATERAL (
    SELECT o.run_id FROM otlp_runs o WHERE o.project_id = %s AND o.trace_id = k.trace_id OFFSET 0
) o
"""
READ_DIGESTS = """
SELECT k.trace_id, o.run_id, o.digest, o.step_digests, o.calls
FROM unnest(%b::bytea[]) AS k (trace_id) CROSS JOIN LATERAL (
    SELECT o.run_id, o.digest, o.step_digests, o.calls FROM otlp_runs o
    WHERE o.project_id = %s AND o.trace_id = k.trace_id OFFSET 0
) o
"""
DELETE_STEPS = """
DELETE FROM agent_steps s
USING unnest(%(runs)b::uuid[], %(keep)b::int[]) AS k (run_id, keep)
WHERE s.project_id = %(project_id)s AND s.run_id = k.run_id AND s.step_index > k.keep
"""
DELETE_CALLS = """
DELETE FROM ai_traces a
USING unnest(%(runs)b::uuid[], %(ids)b::uuid[]) AS k (run_id, id)
WHERE a.project_id = %(project_id)s AND a.run_id = k.run_id AND a.id = k.id
"""
DELETE_RUNS = """
WITH gone AS (
    DELETE FROM agent_runs WHERE project_id = %(project_id)s AND id = ANY(%(ids)b)
)
DELETE FROM otlp_runs WHERE project_id = %(project_id)s AND run_id = ANY(%(ids)b)
"""

# Update the runs stored already, insert the others (their run locks are held, so no
# one else inserts them meanwhile). A run the reaper timed out while its agent span
# had not arrived stays timed out until that span says how it ended.
_KEEP_TIMEOUT = "i.reason IS NULL AND r.termination_reason = 'timeout'"
# A run's length once it has ended; NULL while it is going (greatest() skips a NULL: it
# would say 0 for a run without an end).
_DURATION = (
    "CASE WHEN i.ended_at IS NOT NULL"
    " THEN greatest(0, extract(epoch FROM i.ended_at - i.started_at) * 1000) END"
)
UPSERT_RUNS = f"""
WITH input AS (
    SELECT * FROM unnest(
        %(ids)b::uuid[], %(names)b::text[], %(parents)b::uuid[], %(started)b::timestamptz[],
        %(ended)b::timestamptz[], %(reasons)b::text[], %(loops)b::boolean[],
        %(loop_steps)b::int[], %(inputs)b::text[], %(outputs)b::text[], %(metadata)b::text[],
        %(errors)b::text[], %(steps)b::int[], %(calls)b::int[], %(input_tokens)b::int8[],
        %(output_tokens)b::int8[], %(costs)b::float8[], %(rejudge)b::boolean[],
        %(tracebacks)b::text[]
    ) AS i (id, agent_name, parent_run_id, started_at, ended_at, reason, loop_detected,
            loop_step_index, input, output, metadata, error, steps, calls, input_tokens,
            output_tokens, cost_usd, rejudge, error_traceback)
), updated AS (
    UPDATE agent_runs r SET
        agent_name = i.agent_name, parent_run_id = i.parent_run_id, started_at = i.started_at,
        ended_at = CASE WHEN {_KEEP_TIMEOUT} THEN r.ended_at ELSE i.ended_at END,
        termination_reason = CASE WHEN {_KEEP_TIMEOUT} THEN r.termination_reason
                                  ELSE i.reason END,
        duration_ms = CASE WHEN {_KEEP_TIMEOUT} THEN r.duration_ms ELSE {_DURATION} END,
        loop_detected = i.loop_detected, loop_step_index = i.loop_step_index,
        input = i.input::json, output = i.output::json, metadata = i.metadata::json,
        error = i.error, error_traceback = i.error_traceback, step_count = i.steps,
        llm_calls = i.calls,
        input_tokens = i.input_tokens, output_tokens = i.output_tokens, cost_usd = i.cost_usd,
        last_activity_at = now(),
        verdict_steps = CASE WHEN i.rejudge THEN -1 ELSE r.verdict_steps END
    FROM input i WHERE r.project_id = %(project_id)s AND r.id = i.id
    RETURNING r.id
)
INSERT INTO agent_runs (project_id, id, agent_name, parent_run_id, started_at, ended_at,
                        termination_reason, duration_ms, loop_detected, loop_step_index, input,
                        output, metadata, error, step_count, llm_calls, input_tokens,
                        output_tokens, cost_usd, last_activity_at, error_traceback)
SELECT %(project_id)s, i.id, i.agent_name, i.parent_run_id, i.started_at, i.ended_at, i.reason,
       {_DURATION}, i.loop_detected,
       i.loop_step_index, i.input::json, i.output::json, i.metadata::json, i.error, i.steps,
       i.calls, i.input_tokens, i.output_tokens, i.cost_usd, now(), i.error_traceback
FROM input i WHERE i.id NOT IN (SELECT id FROM updated)
"""

SAVE_DIGESTS = """
INSERT INTO otlp_runs AS o (project_id, trace_id, run_id, digest, step_digests, calls)
SELECT %(project_id)s, * FROM unnest(%(traces)b::bytea[], %(runs)b::uuid[],
                                     %(digests)b::bytea[], %(steps)b::bytea[], %(calls)b::bytea[])
ON CONFLICT (project_id, trace_id, run_id) DO UPDATE SET
    digest = excluded.digest, step_digests = excluded.step_digests, calls = excluded.calls
"""
