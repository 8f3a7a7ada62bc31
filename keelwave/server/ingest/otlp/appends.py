"""A run still going, mapped again in the time its new spans take, not its whole trace.

Ingest maps a trace again each time an export brings more of it (projection.py),
and :func:`mapping.map_trace` reads every span it has: a run of n steps sent in
exports of a few steps each costs n²/2 span readings in all. A 4,004-step run in
exports of ten spans took 27.7 s of store time (bench/otlp.py, stage ``long``), 10.3
of it mapping again what had not changed; 8.1 s since.

The common shape of such a run is simple. Its agent span ends last, so until the
run finishes, its trace is tool and model spans straight under an agent span that
has not arrived: one provisional run (mapping.py's module docstring), whose steps
and calls are those spans in start order. A span that starts after all of them
then only adds a step or a call at the end. :func:`appendable` recognises such a
trace after it has been mapped whole; :func:`map_more` adds the next export's spans
to it when they keep that shape, and says None otherwise (the agent span, a nested
agent, a span under a tool, an earlier start, a step without arguments…): the
caller then maps the trace whole again, as before.

What it adds is exactly what mapping the whole trace would give. Only the last
call before the new spans can belong to a new step (the calls before it keep
theirs: the new steps start after the next call did), the loop can only begin at a
repetition among or of the new steps, and the run's name and resource come from
its member with the smallest span id, as mapping.py's ``_run`` reads them. With
``VERIFY`` set (the test suite sets it), every result is checked against the whole
mapping.
"""

from __future__ import annotations

import bisect
import operator
from dataclasses import dataclass

from keelwave.server.ingest.otlp import conventions as c
from keelwave.server.ingest.otlp import mapping
from keelwave.server.ingest.otlp.decode import Span

VERIFY = False  # check map_more against map_trace (tests/conftest.py sets it)

_STEPS = (c.TOOL, c.RETRIEVER)
_MEMBERS = (c.TOOL, c.RETRIEVER, c.MODEL)


@dataclass(slots=True)
class Appendable:
    """A trace mapped to one provisional run of tool and model spans, all straight
    under its missing agent span: what :func:`map_more` needs to add to it."""

    run: mapping.MappedRun
    span_ids: set[bytes]  # every span of the trace mapped so far
    last: tuple[int, bytes]  # the (start, span id) of the latest of them
    first_id: bytes  # the smallest span id: its resource names the run
    has_model: bool  # (a trace without model spans has no calls while provisional)
    seen: dict[bytes, int]  # each fingerprint's first step, until the loop is found
    # What the last map_more left as it was: the steps before and the calls before
    # (projection.py reuses their rows).
    unchanged: tuple[int, int] = (0, 0)


class MismatchError(AssertionError):
    """map_more gave what map_trace does not (VERIFY)."""


def appendable(
    spans: list[Span], runs: list[mapping.MappedRun], memo: mapping.Memo
) -> Appendable | None:
    """The state :func:`map_more` starts from, if ``runs`` (map_trace of ``spans``) is
    one provisional run of tool and model spans under its missing agent span."""
    if len(runs) != 1 or not runs[0].provisional or not spans:
        return None
    run = runs[0]
    roles = [mapping._role(span, memo) for span in spans]
    if any(span.parent_span_id != run.span_id for span in spans) or any(
        role not in _MEMBERS for role in roles
    ):
        return None
    if not any(role in _STEPS for role in roles):
        return None  # its steps are the calls its model asked for (requested.py)
    if any(step.tool_input is None for step in run.steps):
        return None  # (arguments read from what a model asked for)
    seen: dict[bytes, int] = {}
    if run.loop_step_index is None:
        for step in run.steps:
            if step.fingerprint is not None:
                seen.setdefault(step.fingerprint, step.step_index)
    return Appendable(
        run=run,
        span_ids={span.span_id for span in spans},
        last=max(mapping._start(span) for span in spans),
        first_id=min(span.span_id for span in spans),
        has_model=c.MODEL in roles,
        seen=seen,
    )


def map_more(
    state: Appendable, new: list[Span], memo: mapping.Memo
) -> list[mapping.MappedRun] | None:
    """The runs of the trace with ``new`` spans added (spans not in ``state.span_ids``),
    made from ``state`` and brought up to date in it; None when they do not keep the
    trace's shape (the caller maps it whole)."""
    run = state.run
    new = sorted(new, key=mapping._start)
    roles = [mapping._role(span, memo) for span in new]
    if any(span.parent_span_id != run.span_id for span in new) or any(
        role not in _MEMBERS for role in roles
    ):
        return None
    if new[0].start_ns <= state.last[0]:
        return None  # before a step or call it has, or with one: their order changes
    if any(one.start_ns == two.start_ns for one, two in zip(new, new[1:], strict=False)):
        return None  # started at the same instant: mapping._order places them
    if run.calls and _tied_with_a_step(run.calls[-1].started_ns, run.steps):
        return None  # (its last call may get a new step: mapping._order placed it)
    has_model = state.has_model or c.MODEL in roles
    if has_model and not state.has_model:
        return None  # its first model span: calls are no longer what its agent sums up
    index = len(run.steps)
    steps = []
    for span, role in zip(new, roles, strict=True):
        if role in _STEPS:
            index += 1
            steps.append(mapping._step(span, role, index, memo))
    if any(step.tool_input is None for step in steps):
        return None
    calls = [mapping._call(span, memo) for span, role in zip(new, roles, strict=True)
             if role == c.MODEL] if has_model else []  # fmt: skip

    # From here on the state changes: nothing below declines.
    first_call = max(0, len(run.calls) - 1)  # the last call so far may get a new step
    state.unchanged = (len(run.steps), first_call)
    run.steps += steps
    run.calls += calls
    for call in run.calls[first_call:]:
        call.step_index = None
    mapping._link_calls(run, first_call)
    if run.loop_step_index is None:
        for step in steps:
            if step.fingerprint is None:
                continue
            began = state.seen.setdefault(step.fingerprint, step.step_index)
            if began != step.step_index:
                run.loop_step_index = began
                state.seen.clear()
                break
    smallest = min(new, key=lambda span: span.span_id)
    if smallest.span_id < state.first_id:  # (as mapping._run names a provisional run)
        state.first_id = smallest.span_id
        run.agent_name = str(smallest.resource.get("service.name") or "") or "agent"
        run.metadata = c.provisional_metadata(smallest, run.span_id)
    state.span_ids.update(span.span_id for span in new)
    state.last = mapping._start(new[-1])
    return [run]


def _tied_with_a_step(started: int, steps: list[mapping.MappedStep]) -> bool:
    at = bisect.bisect_left(steps, started, key=_STARTED)
    return at < len(steps) and steps[at].started_ns == started


_STARTED = operator.attrgetter("started_ns")


def verify(runs: list[mapping.MappedRun], spans: list[Span], memo: mapping.Memo) -> None:
    """Raise MismatchError if ``runs`` (from map_more) is not map_trace of ``spans``."""
    whole = mapping.map_trace(spans, memo)
    if whole != runs:
        raise MismatchError(f"map_more gave {runs!r}, map_trace gives {whole!r}")
