"""A trace's stored spans as the rows keelwave stores for its runs.

mapping.py decides what the runs are; this turns each into the store's
:class:`~keelwave.server.store.traces.RunRow`: names cleaned for PostgreSQL,
timestamps, fingerprints, prices, the server's own loop flag (for OTLP runs
nobody else reports one), and deterministic ids for model calls, so that the
same spans always give the same rows.
"""

from __future__ import annotations

import functools
import operator
import uuid
from collections import OrderedDict
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from keelwave.protocol import (
    NAME_MAX_LENGTH,
    TOKEN_COUNT_MAX,
    TRACEBACK_STORED_MAX,
    bound_traceback,
)
from keelwave.sdk import canonical_json
from keelwave.server.findings.sketch import stored_sketch
from keelwave.server.ingest.otlp import appends, mapping, stored
from keelwave.server.ingest.otlp.decode import Span
from keelwave.server.ingest.pricing import PriceTable
from keelwave.server.store.traces import RunRow, digest

EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


# A trace is mapped again each time an export brings more of it: each process keeps,
# for the traces it saw most recently, their decoded spans and what their tool and
# model spans mapped to (mapping.Memo), per project (span ids are the client's).
MEMO_TRACES = 512  # traces in flight at once; a trace holds a few KB a step
# …and at most this many spans in all (decoded, with their attributes: a few KB
# each): a few very long runs (one of 10,000 steps is 20,000 spans or more) must not
# hold a server's memory. A trace dropped from the memo is read back from otlp_spans
# by the next export that brings more of it.
MEMO_SPANS = 50_000


@dataclass(slots=True)
class _TraceMemo:
    spans: dict[bytes, Span] = field(default_factory=dict)
    mapped: mapping.Memo = field(default_factory=dict)
    # By span id: the step it mapped to, its run, its row and the row's digest, so a
    # step whose place and run hold is neither rebuilt nor digested again.
    rows: dict[bytes, tuple[mapping.MappedStep, uuid.UUID, tuple, bytes]] = field(
        default_factory=dict
    )
    # By span id: a model call's run and step, its row, and its id and the row's digest
    # (RunRow.call_entries). (A call is mapped afresh each time, but from the same span:
    # only its run and step can differ.)
    calls: dict[bytes, tuple[uuid.UUID, int | None, tuple, bytes]] = field(default_factory=dict)
    # A run still going, which the next export's spans may just add to (appends.py),
    # and the rows it gave last time, which rows that did not change are taken from.
    appendable: appends.Appendable | None = None
    last_row: RunRow | None = None
    counted: int = 0  # its spans, as _Memos.spans last counted them


class _Memos:
    """The traces' memos, the least recently used first, bounded by traces and spans."""

    def __init__(self) -> None:
        self._memos: OrderedDict[tuple[uuid.UUID, bytes], _TraceMemo] = OrderedDict()
        self.spans = 0  # the spans the memos held when last counted

    def get(self, project_id: uuid.UUID, trace_id: bytes) -> _TraceMemo:
        key = (project_id, trace_id)
        memo = self._memos.get(key)
        if memo is not None:
            self._memos.move_to_end(key)
        else:
            memo = self._memos[key] = _TraceMemo()
            if len(self._memos) > MEMO_TRACES:
                self._drop_oldest()
        return memo

    def grown(self, project_id: uuid.UUID, trace_id: bytes, memo: _TraceMemo) -> None:
        """Count the spans ``memo`` holds now; drop the least recently used traces
        while there are more than MEMO_SPANS (never the one just used)."""
        key = (project_id, trace_id)
        if self._memos.get(key) is not memo:
            return  # dropped meanwhile: it goes when its export is done with it
        self._memos.move_to_end(key)
        self.spans += len(memo.spans) - memo.counted
        memo.counted = len(memo.spans)
        while self.spans > MEMO_SPANS and len(self._memos) > 1:
            self._drop_oldest()

    def _drop_oldest(self) -> None:
        _, memo = self._memos.popitem(last=False)
        self.spans -= memo.counted

    def drop(self, project_id: uuid.UUID, trace_id: bytes) -> None:
        memo = self._memos.pop((project_id, trace_id), None)
        if memo is not None:
            self.spans -= memo.counted

    def clear(self) -> None:
        self._memos.clear()
        self.spans = 0

    def values(self) -> list[_TraceMemo]:
        return list(self._memos.values())


_memos = _Memos()


class TraceProjection:
    """What the store calls with a trace's stored spans, for one project
    (store.traces.Projection)."""

    def __init__(
        self,
        project_id: uuid.UUID,
        prices: PriceTable,
        fresh: dict[tuple[bytes, bytes], Span] | None = None,
        roles: dict[tuple[bytes, bytes], str] | None = None,
    ) -> None:
        self._project_id = project_id
        self._prices = prices
        self._fresh = fresh or {}  # the export's spans as stored (export.Accepted.kept)
        self._roles = roles or {}  # …and the roles check read of them
        # The memos this export was told about, held even if the shared cache drops
        # them meanwhile: the spans it said it knows must still be there.
        self._held: dict[bytes, _TraceMemo] = {}
        self._touched: set[bytes] = set()  # every trace whose memo it got
        self._inserted: dict[bytes, list[bytes]] = {}  # the spans it stored, by trace

    def inserted(self, spans: list[tuple[bytes, bytes]]) -> None:
        """These (trace id, span id) of the export were stored by it: they are known as
        they are, with no need to read them back. (Only those: a span already stored,
        a retried export's, stays as it was first stored.)"""
        fresh, roles = self._fresh, self._roles
        for trace_id, span_id in spans:
            span = fresh.get((trace_id, span_id))
            if span is not None:
                memo = self._hold(trace_id)
                memo.spans[span_id] = span  # stored just now: this is it
                self._inserted.setdefault(trace_id, []).append(span_id)
                role = roles.get((trace_id, span_id))
                if role is not None:
                    mapping.remember_role(memo.mapped, span_id, role)

    def known(self, trace_id: bytes) -> list[bytes]:
        return list(self._hold(trace_id).spans)

    def holds(self, trace_id: bytes) -> int:
        return len(self._hold(trace_id).spans)

    def rolled_back(self) -> None:
        """Forget the traces it touched: their memos may hold spans of a transaction
        that did not commit, which the next export of the trace would take for stored
        (traces.Projection.holds counts on every span held being stored)."""
        for trace_id in self._touched:
            _memos.drop(self._project_id, trace_id)
        self._held.clear()
        self._touched.clear()
        self._inserted.clear()

    def _hold(self, trace_id: bytes) -> _TraceMemo:
        memo = self._held.get(trace_id)
        if memo is None:
            memo = self._held[trace_id] = _memos.get(self._project_id, trace_id)
            self._touched.add(trace_id)
        return memo

    def project(
        self, trace_id: bytes, spans: list[tuple[bytes, bytes | None]] | None
    ) -> list[RunRow]:
        memo = self._held.pop(trace_id, None) or _memos.get(self._project_id, trace_id)
        self._touched.add(trace_id)
        held = memo.spans
        if spans is None:  # it holds every stored span of the trace
            decoded = list(held.values())
            inserted = self._inserted.get(trace_id)
        else:
            decoded, inserted = [], None
            for span_id, blob in spans:
                if blob is None:
                    decoded.append(held[span_id])  # it said it knows it
                else:
                    decoded.append(held.setdefault(span_id, stored.decode(blob)))
        _memos.grown(self._project_id, trace_id, memo)
        previous = memo.last_row
        runs = _mapped(decoded, memo, inserted)
        if memo.appendable is None or previous is None or previous.id != runs[0].run_id:
            previous = None  # (mapped whole: every row is looked at)
        unchanged = memo.appendable.unchanged if previous is not None else (0, 0)
        rows = [
            _row(self._project_id, trace_id, run, self._prices, memo.rows, memo.calls,
                 previous, unchanged)
            for run in runs
        ]  # fmt: skip
        if appends.VERIFY and previous is not None:
            whole = [_row(self._project_id, trace_id, run, self._prices) for run in runs]
            if whole != rows:
                raise appends.MismatchError(f"rows taken as they were: {rows!r}, not {whole!r}")
        memo.last_row = rows[0] if memo.appendable is not None else None
        return rows


def _mapped(
    spans: list[Span], memo: _TraceMemo, inserted: list[bytes] | None = None
) -> list[mapping.MappedRun]:
    """map_trace of the trace's ``spans``, by adding the new ones to what the last
    mapping gave where they keep its shape (appends.py). ``inserted``: the ids of the
    spans stored since, if known (else every span is looked at)."""
    state, memo.appendable = memo.appendable, None
    if state is not None:
        if inserted is not None and len(spans) == len(state.span_ids) + len(inserted):
            new = [memo.spans[span_id] for span_id in inserted]  # (not yet mapped: stored now)
        else:
            new = [span for span in spans if span.span_id not in state.span_ids]
        # Every span it mapped must still be there: one of a transaction rolled back
        # (this process mapped it, the database never kept it) is not.
        whole = not new or len(spans) - len(new) != len(state.span_ids)
        runs = None if whole else appends.map_more(state, new, memo.mapped)
        if runs is not None:
            if appends.VERIFY:
                appends.verify(runs, spans, memo.mapped)
            memo.appendable = state
            return runs
    runs = mapping.map_trace(spans, memo.mapped)
    memo.appendable = appends.appendable(spans, runs, memo.mapped)
    if memo.appendable is not None:
        memo.appendable.unchanged = (0, 0)  # (mapped whole: nothing to take as it was)
    return runs


def projection(
    project_id: uuid.UUID,
    prices: PriceTable,
    fresh: dict[tuple[bytes, bytes], Span] | None = None,
    roles: dict[tuple[bytes, bytes], str] | None = None,
) -> TraceProjection:
    return TraceProjection(project_id, prices, fresh, roles)


def when(ns: int) -> datetime:
    return EPOCH + timedelta(microseconds=ns // 1000)


def name(value: str) -> str:
    """An identifier PostgreSQL can store and the API accepts: no NUL, at most 256 chars."""
    return (value.replace("\x00", "\ufffd") or "unnamed")[:NAME_MAX_LENGTH]


def text(value: str | None) -> str | None:
    return value.replace("\x00", "\ufffd") if value is not None else None


def run_metadata(values: dict[str, Any]) -> str | None:
    """A run's metadata as the store keeps it: canonical JSON, with NUL (which an
    attribute may hold, and PostgreSQL's text cannot) as U+FFFD, in keys and values."""
    if not values:
        return None
    encoded = canonical_json(values)
    return canonical_json(_without_nul(values)) if "\\u0000" in encoded else encoded


def _without_nul(value: Any) -> Any:
    if isinstance(value, str):
        return value.replace("\x00", "\ufffd")
    if isinstance(value, dict):
        return {_without_nul(key): _without_nul(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_without_nul(item) for item in value]
    return value


def traceback(value: str | None) -> str | None:
    """An exception event's stack trace as it is kept (redacted already, with the span):
    NUL-free, its last TRACEBACK_STORED_MAX characters, as native ingest keeps one."""
    return bound_traceback(text(value), TRACEBACK_STORED_MAX) if value is not None else None


@functools.lru_cache(maxsize=65_536)
def call_id(trace_id: bytes, span_id: bytes) -> uuid.UUID:
    return uuid.uuid5(mapping.RUN_NAMESPACE, f"call:{trace_id.hex()}:{span_id.hex()}")


def _tokens(value: int) -> int:
    return min(value, TOKEN_COUNT_MAX)


def _row(
    project_id: uuid.UUID,
    trace_id: bytes,
    run: mapping.MappedRun,
    prices: PriceTable,
    rows: dict[bytes, tuple[mapping.MappedStep, uuid.UUID, tuple, bytes]] | None = None,
    call_rows: dict[bytes, tuple[uuid.UUID, int | None, tuple, bytes]] | None = None,
    previous: RunRow | None = None,
    unchanged: tuple[int, int] = (0, 0),
) -> RunRow:
    """The run as the store writes it. ``previous``: its row from the last mapping,
    whose first ``unchanged`` (steps, calls) are taken as they are (appends.py says
    which did not change); the others are made, or found in ``rows`` and
    ``call_rows`` by span id."""
    rows = {} if rows is None else rows
    call_rows = {} if call_rows is None else call_rows
    kept_steps, kept_calls = unchanged if previous is not None else (0, 0)
    steps, digests = [], []
    if kept_steps:
        steps, digests = previous.steps[:kept_steps], previous.step_digests[:kept_steps]
    run_id = run.run_id
    for step in run.steps[kept_steps:]:
        known = rows.get(step.span_id)
        if known is not None and known[0] is step and (known[1] is run_id or known[1] == run_id):
            row, row_digest = known[2], known[3]
        else:
            row = (
                project_id,
                run_id,
                step.step_index,
                "tool_call",
                name(step.tool_name),
                step.tool_input,
                step.tool_output,
                None,
                step.fingerprint,
                when(step.started_ns),
                step.duration_ms,
                text(step.error),
                traceback(step.error_traceback),
                stored_sketch(step.tool_name, step.tool_input),
            )  # fmt: skip
            row_digest = digest(*row)
            rows[step.span_id] = (step, run_id, row, row_digest)
        steps.append(row)
        digests.append(row_digest)
    calls, entries = [], []
    if kept_calls:
        calls, entries = previous.calls[:kept_calls], previous.call_entries[:kept_calls]
    for call in run.calls[kept_calls:]:
        known_call = call_rows.get(call.span_id)
        if (
            known_call is not None
            and (known_call[0] is run_id or known_call[0] == run_id)
            and known_call[1] == call.step_index
        ):
            row, entry = known_call[2], known_call[3]
        else:
            row = _call_row(project_id, trace_id, run_id, call, prices)
            entry = row[1].bytes + digest(*row)
            call_rows[call.span_id] = (run_id, call.step_index, row, entry)
        calls.append(row)
        entries.append(entry)
    return RunRow(
        id=run_id,
        agent_name=name(run.agent_name),
        parent_run_id=run.parent_run_id,
        started_at=when(run.started_ns),
        ended_at=when(run.ended_ns) if run.ended_ns else None,
        termination_reason=run.termination_reason,
        loop_detected=run.loop_step_index is not None,
        loop_step_index=run.loop_step_index,
        input=run.input.decode() if run.input is not None else None,
        output=run.output.decode() if run.output is not None else None,
        metadata=run_metadata(run.metadata),
        error=text(run.error),
        error_traceback=traceback(run.error_traceback),
        llm_calls=len(calls),
        input_tokens=sum(map(_INPUT_TOKENS, calls)),
        output_tokens=sum(map(_OUTPUT_TOKENS, calls)),
        cost_usd=sum(cost or 0.0 for cost in map(_COST, calls)),
        steps=steps,
        calls=calls,
        step_digests=digests,
        call_entries=entries,
    )


# (positions in a call's row: statements.TRACE_COLUMNS)
_INPUT_TOKENS, _OUTPUT_TOKENS, _COST = (operator.itemgetter(n) for n in (6, 7, 10))


def _call_row(
    project_id: uuid.UUID,
    trace_id: bytes,
    run_id: uuid.UUID,
    call: mapping.MappedCall,
    prices: PriceTable,
) -> tuple:
    """A model call as ai_traces stores it (statements.TRACE_COLUMNS)."""
    input_tokens, output_tokens = _tokens(call.input_tokens), _tokens(call.output_tokens)
    cache_read, reasoning = _tokens(call.cache_read_tokens), _tokens(call.reasoning_tokens)
    model = name(call.model)
    return (
        project_id,
        call_id(trace_id, call.span_id),
        run_id,
        call.step_index,
        name(call.provider),
        model,
        input_tokens,
        output_tokens,
        cache_read,
        reasoning,
        prices.cost(model, input_tokens, output_tokens, cache_read, reasoning),
        call.latency_ms,
        call.status,
        text(call.error),
        when(call.started_ns),
        call.input_messages,
        call.output_messages,
    )  # fmt: skip
