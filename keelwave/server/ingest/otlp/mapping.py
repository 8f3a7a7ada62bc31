"""A trace's spans as keelwave runs, with their steps and model calls.

:func:`map_trace` takes every span of one trace that has arrived (in any
order, repeated or not) and returns the runs they make. It is a pure
function of the *set* of spans: the same spans give the same runs, the same
step indices and the same fingerprints whatever order and however many
exports they came in, which is what lets ingest recompute a trace when more
of it arrives.

- A run is an agent span (conventions.role). A workflow span without a name
  of its own that wraps exactly one agent (the OpenAI Agents SDK's "Agent
  workflow") is that agent's run, not a run around it. The nearest enclosing
  run is the parent run. A trace with no agent span is one run, from its root.
- Its steps are the tool spans whose nearest run is it (not those of a nested
  agent), ordered by start time (then span id, for ties): steps 1…n.
- Its model calls are the inference spans whose nearest run is it. Agent
  spans that repeat their run's token totals are never counted.
- It is finished when its span has ended: ``error`` when the span failed (or,
  for a wrapper span that stays OK, when the agent inside it failed),
  ``max_steps_reached`` for a framework's step-limit exception, else ``clean``.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field

from keelwave.server.ingest.otlp import conventions as c
from keelwave.server.ingest.otlp.decode import Span

# Run ids are derived from trace and span ids, so every server computes the same.
RUN_NAMESPACE = uuid.UUID("6b657765-6c00-4f54-8c50-72756e730000")


@dataclass(slots=True)
class MappedStep:
    span_id: bytes
    step_index: int
    tool_name: str
    tool_input: bytes | None
    tool_output: bytes | None
    started_ns: int
    duration_ms: float | None
    error: str | None


@dataclass(slots=True)
class MappedCall:
    span_id: bytes
    provider: str
    model: str
    input_tokens: int
    output_tokens: int
    cache_read_tokens: int
    reasoning_tokens: int
    latency_ms: float | None
    status: str
    error: str | None
    started_ns: int
    finish_reasons: list[str]


@dataclass(slots=True)
class MappedRun:
    run_id: uuid.UUID
    span_id: bytes | None  # None: a run made from a trace without agent spans
    parent_run_id: uuid.UUID | None
    agent_name: str
    started_ns: int
    ended_ns: int | None
    termination_reason: str | None
    error: str | None
    steps: list[MappedStep] = field(default_factory=list)
    calls: list[MappedCall] = field(default_factory=list)


def run_id(trace_id: bytes, span_id: bytes | None) -> uuid.UUID:
    key = trace_id.hex() + (":" + span_id.hex() if span_id else "")
    return uuid.uuid5(RUN_NAMESPACE, key)


def map_trace(spans: list[Span]) -> list[MappedRun]:
    """The runs of one trace's spans (see the module's docstring)."""
    unique: dict[bytes, Span] = {}
    for span in sorted(spans, key=lambda s: (s.span_id, -s.end_ns, s.name)):
        unique.setdefault(span.span_id, span)  # a span sent twice counts once
    if not unique:
        return []
    roles = {span_id: c.role(span) for span_id, span in unique.items()}
    runs = _run_spans(unique, roles)
    trace_id = next(iter(unique.values())).trace_id

    def owner(span: Span) -> bytes | None:
        """The run span a span belongs to: its nearest ancestor that is a run."""
        parent = span.parent_span_id
        seen = 0
        while parent is not None and parent in unique and seen < 10_000:
            if parent in runs:
                return parent
            parent = unique[parent].parent_span_id
            seen += 1
        return None

    mapped: dict[bytes | None, MappedRun] = {}
    for span_id in sorted(runs, key=lambda s: (unique[s].start_ns, s)):
        span = unique[span_id]
        parent = owner(span)
        mapped[span_id] = MappedRun(
            run_id=run_id(trace_id, span_id),
            span_id=span_id,
            parent_run_id=run_id(trace_id, parent) if parent is not None else None,
            agent_name=runs[span_id],
            started_ns=span.start_ns,
            ended_ns=span.end_ns or None,
            termination_reason=None,
            error=None,
        )
    tools: dict[bytes | None, list[Span]] = {}
    for span_id, span in unique.items():
        if span_id in runs:
            continue
        home = owner(span)
        if home is None and not runs:
            home = None  # the trace's own run (below)
        elif home is None:
            continue  # its run has not arrived yet, or it lies outside every agent
        if roles[span_id] == c.TOOL:
            tools.setdefault(home, []).append(span)
        elif roles[span_id] == c.MODEL:
            run = mapped.get(home) or _trace_run(mapped, unique, trace_id)
            run.calls.append(_call(span))
    if not runs and (tools or any(r == c.MODEL for r in roles.values())):
        _trace_run(mapped, unique, trace_id)
    for home, spans_of_run in tools.items():
        run = mapped[home] if home in mapped else _trace_run(mapped, unique, trace_id)
        ordered = sorted(spans_of_run, key=lambda s: (s.start_ns, s.span_id))
        run.steps = [_step(span, index) for index, span in enumerate(ordered, start=1)]
    roots = sorted((s for s in unique.values() if s.parent_span_id is None), key=_start)
    for key, run in mapped.items():
        run.calls.sort(key=lambda call: (call.started_ns, call.span_id))
        span = unique.get(key) if key is not None else (roots[0] if roots else None)
        _finish(run, span, unique)
    return sorted(mapped.values(), key=lambda run: (run.started_ns, str(run.run_id)))


def _run_spans(unique: dict[bytes, Span], roles: dict[bytes, str]) -> dict[bytes, str]:
    """Run span id -> agent name. A nameless agent span wrapping exactly one agent
    (and no tool of its own) gives way to it."""
    agents = {span_id for span_id, role in roles.items() if role == c.AGENT}
    children: dict[bytes, list[bytes]] = {}
    for span_id, span in unique.items():
        if span.parent_span_id is not None:
            children.setdefault(span.parent_span_id, []).append(span_id)

    def inner(span_id: bytes) -> tuple[list[bytes], bool]:
        """The nearest agent spans below, and whether a tool lies between."""
        found, tool, stack = [], False, list(children.get(span_id, ()))
        while stack:
            below = stack.pop()
            if below in agents:
                found.append(below)
                continue
            tool = tool or roles[below] == c.TOOL
            stack.extend(children.get(below, ()))
        return found, tool

    runs: dict[bytes, str] = {}
    for span_id in agents:
        name = c.agent_name(unique[span_id])
        below, has_tool = inner(span_id)
        if below and not has_tool:
            names = {c.agent_name(unique[b]) for b in below}
            # A span that only wraps agents is not a run of its own: a nameless
            # workflow span (the OpenAI Agents SDK), or one around a single agent of
            # the same name (OpenLLMetry's invoke_agent around LangGraph's workflow).
            if name is None or (len(below) == 1 and names == {name}):
                continue
        runs[span_id] = name or unique[span_id].name
    return runs


def _trace_run(
    mapped: dict[bytes | None, MappedRun], unique: dict[bytes, Span], trace_id: bytes
) -> MappedRun:
    """The one run of a trace without agent spans, named after its root (or service)."""
    if None in mapped:
        return mapped[None]
    roots = [s for s in unique.values() if s.parent_span_id is None]
    root = min(roots, key=lambda s: s.start_ns) if roots else None
    start = min(s.start_ns for s in unique.values())
    name = (root.name if root else None) or next(
        (str(s.resource.get("service.name")) for s in unique.values() if s.resource), "agent"
    )
    run = MappedRun(
        run_id=run_id(trace_id, None),
        span_id=None,
        parent_run_id=None,
        agent_name=name,
        started_ns=root.start_ns if root else start,
        ended_ns=(root.end_ns or None) if root else None,
        termination_reason=None,
        error=None,
    )
    mapped[None] = run
    return run


def _millis(span: Span) -> float | None:
    if span.end_ns and span.start_ns and span.end_ns >= span.start_ns:
        return (span.end_ns - span.start_ns) / 1e6
    return None


def _step(span: Span, index: int) -> MappedStep:
    return MappedStep(
        span_id=span.span_id,
        step_index=index,
        tool_name=c.tool_name(span),
        tool_input=c.tool_input(span),
        tool_output=c.tool_output(span),
        started_ns=span.start_ns,
        duration_ms=_millis(span),
        error=c.error(span),
    )


def _call(span: Span) -> MappedCall:
    details = c.model_call(span)
    failure = c.error(span)
    return MappedCall(
        span_id=span.span_id,
        provider=details["provider"],
        model=details["model"],
        input_tokens=details["input_tokens"],
        output_tokens=details["output_tokens"],
        cache_read_tokens=details["cache_read_tokens"],
        reasoning_tokens=details["reasoning_tokens"],
        latency_ms=_millis(span),
        status="error" if failure else "ok",
        error=failure,
        started_ns=span.start_ns,
        finish_reasons=details["finish_reasons"],
    )


def _start(span: Span) -> tuple[int, bytes]:
    return (span.start_ns, span.span_id)


def _finish(run: MappedRun, span: Span | None, unique: dict[bytes, Span]) -> None:
    """Set the run's end: only once its own span has ended."""
    if span is None or not span.end_ns:
        return
    failures = [span]
    # A wrapper that stays OK while the agent inside it failed (OpenAI Agents SDK,
    # smolagents): look at the agent spans of the same run, direct children first.
    failures += [s for s in unique.values() if s.parent_span_id == span.span_id]
    kinds = [kind.lower() for failed in failures for kind in c.exception_types(failed)]
    if any(limit in kind for kind in kinds for limit in c.STEP_LIMITS):
        run.termination_reason = "max_steps_reached"
    elif c.error(span):
        run.termination_reason = "error"
    elif run.calls and "length" in run.calls[-1].finish_reasons:
        run.termination_reason = "context_limit"
    else:
        run.termination_reason = "clean"
    run.error = c.error(span)
    run.ended_ns = span.end_ns
