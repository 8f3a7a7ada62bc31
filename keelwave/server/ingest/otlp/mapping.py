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
  run is the parent run, except for the target of a handoff, whose parent is
  the agent before it that shows the handoff (a span named for it, a
  ``gen_ai.handoff.to_agent``, a model call asking for ``handoff_to_X``). A
  LangGraph graph invoked in a tool is a run (a child of the tool's run), and so
  is a GenAI workflow with model or tool calls of its own outside its agents
  (structure.workflows_with_work). A trace with no agent span is one run, from
  its root (if it has any tool or model span at all: other traces make no run).
- Spans arrive children first: a tool span whose ancestors have not all
  arrived yet belongs, for now, to a *provisional* run keyed by the nearest
  ancestor still missing, which is usually the agent span itself. The run
  therefore exists (and can stall and time out) before its agent span
  arrives, and keeps its id when it does. If the missing ancestor turns out
  not to be an agent, the provisional run disappears and its steps move to
  the run the complete trace gives them.
  Model calls alone under a missing span of their own (a turn still open while
  its tool runs) join the provisional run of the turn before them
  (_join_open_turns).
- Its steps are the tool spans (and retrievals, as ``custom`` steps) whose
  nearest run is it (not those of a nested agent), ordered by start time
  (then span id, for ties): steps 1…n. In a trace with no tool span at all,
  they are the tool calls its model calls asked for (requested.py).
- Spans that start at the same instant (JavaScript's clocks tell milliseconds: the
  Vercel AI SDK's tool calls start in the millisecond of the model call that asked
  for them, parallel ones in the same one) are ordered as the trace says they ran
  (:func:`_order`): a model call before the tool calls it asked for, those in the
  order it asked for them, a tool call before the model call whose prompt holds its
  result; else a model call before a tool call, then by span id.
- Its model calls are the inference spans whose nearest run is it. Agent
  spans that repeat their run's token totals are never counted, unless the
  trace has no inference span at all: then an agent span's totals are its
  run's one model call. A call
  belongs to the first step that started after it and before the next call:
  the tool call it produced.
- Loops: ``loop_step_index`` is the step where the first repetition of a
  fingerprint began (its first occurrence), as the SDKs report it.
- It is finished when its span has ended: ``error`` when the span failed (or,
  for a wrapper span that stays OK, when the agent inside it failed, or when the
  run ended on a failure its span does not show: its last model call, or the
  framework's last span right under it; LangGraph's interrupts are no failures),
  ``max_steps_reached`` for a framework's step limit (an exception on the
  agent's own spans, an ``exit_reason``, the Vercel AI SDK's ``stopWhen``),
  ``context_limit`` for a token-limit exception there or, in a run that did not
  fail, when its last model call ran out of tokens, else ``clean``.
"""

from __future__ import annotations

import bisect
import dataclasses
import functools
import operator
import uuid
from dataclasses import dataclass, field
from typing import Any

from keelwave.server.ingest.fingerprint import fingerprint
from keelwave.server.ingest.otlp import conventions as c
from keelwave.server.ingest.otlp import handoffs, model_calls, requested, structure
from keelwave.server.ingest.otlp.decode import Span

# Run ids are derived from trace and span ids, so every server computes the same.
RUN_NAMESPACE = uuid.UUID("6b657765-6c00-4f54-8c50-72756e730000")
MAX_DEPTH = structure.MAX_DEPTH


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
    fingerprint: bytes | None = None
    step_type: str = "tool_call"  # retrievals are "custom" steps
    error_traceback: str | None = None


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
    step_index: int | None = None  # the step it produced (see the module's docstring)
    input_messages: bytes | None = None  # JSON, as model_calls.messages reads them
    output_messages: bytes | None = None


@dataclass(slots=True)
class MappedRun:
    run_id: uuid.UUID
    span_id: bytes  # its agent span, its trace's root span, or (provisional) a missing one
    parent_run_id: uuid.UUID | None
    agent_name: str
    started_ns: int
    ended_ns: int | None
    termination_reason: str | None
    error: str | None
    steps: list[MappedStep] = field(default_factory=list)
    calls: list[MappedCall] = field(default_factory=list)
    provisional: bool = False  # its span has not arrived yet
    loop_step_index: int | None = None
    input: Any = None
    output: Any = None
    metadata: dict[str, Any] = field(default_factory=dict)
    error_traceback: str | None = None


@functools.lru_cache(maxsize=16_384)  # (a trace is mapped again with each export)
def run_id(trace_id: bytes, span_id: bytes) -> uuid.UUID:
    return uuid.uuid5(RUN_NAMESPACE, f"{trace_id.hex()}:{span_id.hex()}")


# What a tool or model span maps to is a function of that span alone, and a span is
# stored once: a caller mapping a trace again as more of it arrives can pass a memo
# (per project: ids are the client's) so that old spans are not read again.
# What a span mapped to, by span id; for a model call's span, also (by its id and b"?")
# the tool calls its answer asked for and the results its prompt carries (requested.py);
# for every span (by its id and b"r") its role; for a model call's span tied in time with
# others (by its id and b"t"), the ids of the tool calls it asked for and answered.
Memo = dict[bytes, "MappedStep | MappedCall | _Asked | _Ids | str"]


def map_trace(spans: list[Span], memo: Memo | None = None) -> list[MappedRun]:
    """The runs of one trace's spans (see the module's docstring)."""
    unique: dict[bytes, Span] = {}
    for span in sorted(spans, key=lambda s: (s.span_id, -s.end_ns, s.name)):
        unique.setdefault(span.span_id, span)  # a span sent twice counts once
    if not unique:
        return []
    roles = {span_id: _role(span, memo) for span_id, span in unique.items()}
    structure.work_beside_agents(unique, roles)
    structure.parts_of_agents(unique, roles)
    structure.graphs_in_tools(unique, roles)
    structure.workflows_with_work(unique, roles)
    structure.model_wrappers(unique, roles)
    wrapped = structure.tool_wrappers(unique, roles)
    runs, wrapped_by = _run_spans(unique, roles)
    # A trace without any tool span: its steps are the calls its models asked for.
    asked = not any(role in (c.TOOL, c.RETRIEVER) for role in roles.values())
    # One without any model span: a run's model use is what its agent span sums up.
    summed = not any(role == c.MODEL for role in roles.values())
    trace_id = next(iter(unique.values())).trace_id
    roots = sorted((s for s in unique.values() if s.parent_span_id is None), key=_start)
    # A trace without agent spans is one run, from its root.
    fallback = roots[0].span_id if roots and not runs else None

    def owner(span: Span) -> bytes | None:
        """The run a span belongs to: its nearest ancestor that is a run, or the nearest
        one that has not arrived (a provisional run), or the root's run of a trace
        without agents; None for a span outside every agent."""
        parent, depth = span.parent_span_id, 0
        while parent is not None and depth < MAX_DEPTH:
            if parent in runs or parent not in unique:
                return parent
            parent = unique[parent].parent_span_id
            depth += 1
        return fallback

    members: dict[bytes, list[Span]] = {}  # run key -> its tool and model spans
    for span_id, span in unique.items():
        if span_id in runs or roles[span_id] not in (c.TOOL, c.RETRIEVER, c.MODEL):
            continue
        home = span_id if span_id == fallback else owner(span)
        if home is not None:
            members.setdefault(home, []).append(span)
    if sum(key not in unique for key in members) > 1:  # (orphans under two missing spans)
        _join_open_turns(unique, roles, runs, members)

    said = handoffs.collect(unique, roles, runs, owner) if len(runs) > 1 else {}
    mapped: dict[bytes, MappedRun] = {}
    for key in sorted(set(runs) | set(members)):
        span = unique.get(key)  # None for a provisional run
        parent = owner(span) if key in runs and span is not None else None
        if key in runs and span is not None:
            parent = handoffs.handed_off_by(span, runs, unique, owner, said) or _enclosing(
                span, parent, unique
            )
        mapped[key] = run = _run(
            trace_id, key, span, runs.get(key), parent, members.get(key, []), fallback
        )
        if key in wrapped_by:
            wrapper = wrapped_by[key]
            run.input = run.input if run.input is not None else c.run_input(wrapper)
            run.output = run.output if run.output is not None else c.run_output(wrapper)
    ids = {run.run_id for run in mapped.values()}
    for run in mapped.values():
        if run.parent_run_id is not None and run.parent_run_id not in ids:
            # Its parent is a span not here (yet) that holds no work of its own: maybe no
            # agent at all (the OpenAI Agents SDK's workflow span, never sent when the run
            # raised). Never a parent that does not exist; mapped again if it comes.
            run.parent_run_id = None
    for key, run in mapped.items():
        spans_of_run = members.get(key, [])
        order = _order(spans_of_run, roles, memo)
        tools = sorted(
            (s for s in spans_of_run if roles[s.span_id] in (c.TOOL, c.RETRIEVER)),
            key=lambda s: order[s.span_id],
        )
        calls = sorted(
            (s for s in spans_of_run if roles[s.span_id] == c.MODEL), key=lambda s: order[s.span_id]
        )
        run.steps = (
            _asked_steps(calls, memo)
            if asked
            else [
                _wrapping_step(span, wrapped[span.span_id], n)
                if span.span_id in wrapped
                else _step(span, roles[span.span_id], n, memo)
                for n, span in enumerate(tools, start=1)
            ]
        )
        if not asked and any(step.tool_input is None for step in run.steps):
            run.steps = _arguments_asked_for(run.steps, tools, calls, memo)
        if summed:  # (no model span in the trace: only the agent span can say)
            run.calls = [] if run.provisional else _summed_call(unique[key])
        else:
            run.calls = [_call(span, memo) for span in calls]
        _link_calls(run, order=order)
        run.loop_step_index = _loop_began(run.steps)
        if not run.provisional:
            _finish(run, unique[key], unique, memo, order)
    return sorted(mapped.values(), key=lambda run: (run.started_ns, str(run.run_id)))


def _join_open_turns(
    unique: dict[bytes, Span],
    roles: dict[bytes, str],
    runs: dict[bytes, str],
    members: dict[bytes, list[Span]],
) -> None:
    """Model calls under a missing span that is not their agent's: the turn still open.

    Frameworks keep the current turn's span open while its tool runs (the OpenAI Agents
    SDK's ``turn``, Strands' ``execute_event_loop_cycle``, smolagents' ``Step N``), so
    the model call that asked for the tool arrives under a missing span of its own
    beside the agent's finished turns, which hang under the missing agent span. The
    spans under one missing span (up to any run) are its group. A group with no tool or
    retrieval span and no agent span, only model calls and plumbing, joins the
    provisional run of the other groups (those with a step or an agent) whose spans
    include the latest start before the group's first: the run of the turn before it.
    With no such run it stays a run of its own. By the set of spans alone: once the
    turn's span arrives its call is the agent's anyway (``members`` is changed in
    place)."""
    groups: dict[bytes, list[Span]] = {}  # missing span -> the spans under it
    for span in unique.values():
        parent, depth = span.parent_span_id, 0
        while parent in unique and parent not in runs and depth < MAX_DEPTH:
            parent, depth = unique[parent].parent_span_id, depth + 1
        if parent is not None and parent not in unique and depth < MAX_DEPTH:
            groups.setdefault(parent, []).append(span)
    steps = (c.TOOL, c.RETRIEVER)
    calls_only = {
        key
        for key, spans in groups.items()
        if key in members
        and not any(span.span_id in runs or roles[span.span_id] in steps for span in spans)
    }
    starts = sorted(  # (start, span id, group) of every span of the groups that stay
        (*_start(span), key)
        for key, spans in groups.items()
        if key not in calls_only and key in members
        for span in spans
    )
    for key in sorted(calls_only):
        first = min(_start(span) for span in groups[key])
        at = bisect.bisect_left(starts, first)
        if at:
            into = starts[at - 1][2]
            members[into] = sorted(members[into] + members.pop(key), key=_span_id)


def _span_id(span: Span) -> bytes:
    return span.span_id


def _role(span: Span, memo: Memo | None) -> str:
    """The span's role by the conventions, remembered (a function of the span alone)."""
    if memo is None:
        return c.role(span)
    key = span.span_id + _ROLE
    role = memo.get(key)
    if not isinstance(role, str):
        role = memo[key] = c.role(span)
    return role


_ROLE = b"r"  # a role's key in the memo: after the span id


def remember_role(memo: Memo, span_id: bytes, role: str) -> None:
    """What ``c.role`` said of the span ``span_id`` as it is stored, told by whoever
    read it first (export.check), so that mapping it need not read it again."""
    memo[span_id + _ROLE] = role


def _run(
    trace_id: bytes,
    key: bytes,
    span: Span | None,
    name: str | None,
    parent: bytes | None,
    members: list[Span],
    fallback: bytes | None = None,
) -> MappedRun:
    """A run with its identity, name and what its span says (steps come after)."""
    some = span or (members[0] if members else None)
    service = str(some.resource.get("service.name") or "") if some else ""
    if span is None:  # provisional: named once its agent span arrives
        agent_name, started = service or "agent", min(s.start_ns for s in members)
    else:
        name = name or (c.run_name(span) if key == fallback else None)
        agent_name, started = name or span.name or service or "agent", span.start_ns
    run = MappedRun(
        run_id=run_id(trace_id, key),
        span_id=key,
        parent_run_id=run_id(trace_id, parent) if parent is not None else None,
        agent_name=agent_name,
        started_ns=started,
        ended_ns=None,
        termination_reason=None,
        error=None,
        provisional=span is None,
    )
    if span is not None:
        run.input, run.output = c.run_input(span), c.run_output(span)
        run.metadata = c.run_metadata(span)
    elif some is not None:
        run.metadata = c.provisional_metadata(some, key)
    return run


def _run_spans(
    unique: dict[bytes, Span], roles: dict[bytes, str]
) -> tuple[dict[bytes, str], dict[bytes, Span]]:
    """Run span id -> agent name. A nameless agent span wrapping exactly one agent
    (and no tool or model call of its own) gives way to it; the second dict maps
    such an agent to the span that wrapped it, which may say the run's input and
    output where the agent's own span does not (the OpenAI Agents SDK's JavaScript
    instrumentation puts them on the workflow span only)."""
    agents = {span_id for span_id, role in roles.items() if role == c.AGENT}
    children: dict[bytes, list[bytes]] = {}
    for span_id, span in unique.items():
        if span.parent_span_id is not None:
            children.setdefault(span.parent_span_id, []).append(span_id)

    def inner(span_id: bytes) -> tuple[list[bytes], bool]:
        """The nearest agent spans below, and whether a tool or a model call lies
        between (work of its own: Haystack's Agent around one it runs as a tool, whose
        call has no span)."""
        found, tool, stack = [], False, list(children.get(span_id, ()))
        while stack:
            below = stack.pop()
            if below in agents:
                found.append(below)
                continue
            tool = tool or roles[below] in (c.TOOL, c.MODEL)
            stack.extend(children.get(below, ()))
        return found, tool

    runs: dict[bytes, str] = {}
    wrapped_by: dict[bytes, Span] = {}
    for span_id in agents:
        name = c.agent_name(unique[span_id])
        below, has_tool = inner(span_id)
        if below and not has_tool:
            names = {c.agent_name(unique[b]) for b in below}
            # A span that only wraps agents is not a run of its own: a nameless
            # workflow span (the OpenAI Agents SDK), or one around a single agent of
            # the same name (OpenLLMetry's invoke_agent around LangGraph's workflow).
            if name is None or (len(below) == 1 and names == {name}):
                if len(below) == 1:
                    wrapped_by[below[0]] = unique[span_id]
                continue
        runs[span_id] = name or unique[span_id].name
    return runs, wrapped_by


def _enclosing(span: Span, parent: bytes | None, unique: dict[bytes, Span]) -> bytes | None:
    """The enclosing run, unless it had ended before this agent started: then the
    context was left behind, not handed on (Agno's instrumentor leaves a team's
    context attached, so every later agent run of the thread lands under it)."""
    above = unique.get(parent) if parent is not None else None
    if above is not None and 0 < above.end_ns < span.start_ns:
        return None
    return parent


def _millis(span: Span) -> float | None:
    if span.end_ns and span.start_ns and span.end_ns >= span.start_ns:
        return (span.end_ns - span.start_ns) / 1e6
    return None


def _step(span: Span, role: str, index: int, memo: Memo | None = None) -> MappedStep:
    known = memo.get(span.span_id) if memo is not None else None
    if isinstance(known, MappedStep):
        # Steps are never changed once made: the same one serves while its place holds.
        return known if known.step_index == index else dataclasses.replace(known, step_index=index)
    step = _new_step(span, role, index)
    if memo is not None:
        memo[span.span_id] = step
    return step


def _new_step(span: Span, role: str, index: int) -> MappedStep:
    name, arguments = c.tool_name(span), c.tool_input(span)
    return MappedStep(
        span_id=span.span_id,
        step_index=index,
        tool_name=name,
        tool_input=arguments,
        tool_output=c.tool_output(span),
        started_ns=span.start_ns,
        duration_ms=_millis(span),
        error=c.step_error(span),
        error_traceback=c.stacktrace(span),
        # NULL only when the span truly carries no arguments (as a step without a tool).
        fingerprint=fingerprint(name, arguments) if arguments is not None else None,
        step_type="custom" if role == c.RETRIEVER else "tool_call",
    )


_Asked = tuple[list[requested.Call], dict[str, object]]


def _asked(span: Span, memo: Memo | None) -> _Asked:
    """The tool calls a model span's answer asked for, and the tool results its prompt
    carries: remembered, for a prompt holds the whole conversation so far, and a trace
    is mapped again each time more of it arrives."""
    key = span.span_id + b"?"
    known = memo.get(key) if memo is not None else None
    if isinstance(known, tuple):
        return known
    asked = (requested.tool_calls(span), requested.tool_results(span))
    if memo is not None:
        memo[key] = asked
    return asked


def _asked_steps(calls: list[Span], memo: Memo | None = None) -> list[MappedStep]:
    """The steps of a run in a trace without tool spans (requested.py): each tool call
    its model calls asked for, in order, as made once the model had answered. Their
    identity is the model span's and the call's place in its answer. What the tool
    returned is read from a later call's prompt, by the call's id, where the trace has
    both; how long it took and whether it failed are not in the trace."""
    asked = [_asked(span, memo) for span in calls]
    steps: list[MappedStep] = []
    for position, (span, (requests, _)) in enumerate(zip(calls, asked, strict=True)):
        for number, (name, raw, call_id) in enumerate(requests):
            arguments = c.arguments_json(raw)
            output = _result(call_id, asked[position + 1 :])
            steps.append(
                MappedStep(
                    span_id=span.span_id + number.to_bytes(4, "big"),
                    step_index=len(steps) + 1,
                    tool_name=name,
                    tool_input=arguments,
                    tool_output=c.as_json(output),
                    started_ns=(span.end_ns or span.start_ns) + number,
                    duration_ms=None,
                    error=None,
                    fingerprint=fingerprint(name, arguments) if arguments is not None else None,
                )
            )
    return steps


def _result(call_id: str | None, later: list[_Asked]) -> object:
    """What a tool returned, from the first later prompt that carries its call's id.
    Ids may repeat within a run (OpenTelemetry's Google Gen AI instrumentation names a
    call by its tool and its place in the answer: ``get_weather_0`` each time), so not
    from any prompt: the first one after the call holds its result as the last under
    that id (tool_results keeps the last), the ones after it may hold newer ones."""
    if call_id is None:
        return None
    for _, carried in later:
        if call_id in carried:
            return carried[call_id]
    return None


def _arguments_asked_for(
    steps: list[MappedStep], tools: list[Span], calls: list[Span], memo: Memo | None
) -> list[MappedStep]:
    """Steps whose tool span has no arguments take those the model asked for under the
    same call id (``gen_ai.tool.call.id``): AutoGen's own tool spans and Google ADK's
    record the id, not the arguments; the model span's answer has both. Where an id
    repeats (made up from the tool's name by some instrumentations), the model call
    that asked is the last one to start before the tool did. (Copies: a step may be
    remembered, and the model span may arrive later than the tool's.)"""
    asked: dict[str, list[tuple[int, str, object]]] = {}
    for span in calls:  # (in the order they started)
        for name, raw, call_id in _asked(span, memo)[0]:
            if call_id is not None:
                asked.setdefault(call_id, []).append((span.start_ns, name, raw))
    if not asked:
        return steps
    spans = {span.span_id: span for span in tools}
    found = []
    for step in steps:
        call_id = c.tool_call_id(spans[step.span_id]) if step.tool_input is None else None
        name, raw = None, None
        for started, *request in asked.get(call_id, []) if call_id is not None else []:
            if name is None or started <= step.started_ns:
                name, raw = request
        arguments = c.arguments_json(raw) if name == step.tool_name else None
        if arguments is not None:
            step = dataclasses.replace(
                step, tool_input=arguments, fingerprint=fingerprint(step.tool_name, arguments)
            )
        found.append(step)
    return found


def _wrapping_step(span: Span, inner: Span, index: int) -> MappedStep:
    """The step of a tool span around another of the same call (structure.tool_wrappers): the
    outer's, failed if either failed. (Not remembered: the inner may arrive later.)"""
    step = _new_step(span, c.TOOL, index)
    if step.error is None and (failure := c.step_error(inner)):
        step.error, step.error_traceback = failure, c.stacktrace(inner)
    return step


def _call(span: Span, memo: Memo | None = None) -> MappedCall:
    known = memo.get(span.span_id) if memo is not None else None
    if isinstance(known, MappedCall):
        return _copy(known)  # a copy: its step is set per mapping
    call = _new_call(span)
    if memo is not None:
        memo[span.span_id] = _copy(call)
    return call


# (Five times cheaper than dataclasses.replace, and every known call of a trace is
# copied each time the trace is mapped again.)
_CALL_FIELDS = operator.attrgetter(*(f.name for f in dataclasses.fields(MappedCall)))


def _copy(call: MappedCall) -> MappedCall:
    return MappedCall(*_CALL_FIELDS(call))


def _new_call(span: Span) -> MappedCall:
    failure = c.error(span)
    prompt, response = model_calls.messages(span)
    return MappedCall(
        span_id=span.span_id,
        **model_calls.model_call(span),  # provider, model, tokens and finish reasons
        latency_ms=_millis(span),
        status="error" if failure else "ok",
        error=failure,
        started_ns=span.start_ns,
        input_messages=prompt,
        output_messages=response,
    )


def _summed_call(span: Span) -> list[MappedCall]:
    """The model use an agent span sums up, as one model call, for a trace with no
    model span (the Claude Agent SDK's OpenInference instrumentor puts the run's
    tokens and model on its agent span only). Where model spans exist they are the
    calls, and an agent span's totals (pydantic-ai's, Strands', smolagents') are never
    counted again."""
    details = model_calls.model_call(span)
    if not details["input_tokens"] and not details["output_tokens"]:
        return []
    # (no latency: the span's length is the run's, not a model call's)
    return [MappedCall(span_id=span.span_id, **details, latency_ms=None, status="ok",
                       error=None, started_ns=span.start_ns)]  # fmt: skip


def _cut_off_after_tools(span: Span, children: list[Span], order: _Order) -> bool:
    """A Vercel AI SDK run stopped by its step limit (``stopWhen``) ends on a step whose
    tools ran, their results never shown to the model: its finish reason is still
    ``tool-calls``, and the last thing it started was a tool call. (One that paused for
    a tool the client runs itself ends on the model call that asked for it.)"""
    if span.attributes.get("ai.response.finishReason") != "tool-calls":
        return False
    last = max(children, key=functools.partial(_span_place, order), default=None)
    return last is not None and c.role(last) == c.TOOL


def _link_calls(run: MappedRun, first: int = 0, order: _Order | None = None) -> None:
    """Each call's step: the first tool call that started after the model call began
    and before the next model call did (the call that asked for it), in the run's
    ``order`` (:func:`_order`; without it, a step that started with a call is after it).
    From the call numbered ``first`` on (appends.py: the calls before keep theirs)."""
    steps, calls = run.steps, run.calls
    place = functools.partial(_place, order or {})
    position = 0
    if first and first < len(calls):  # (steps are in start order: skip to the call's)
        position = bisect.bisect_left(steps, calls[first].started_ns, key=_STEP_START)
    for number in range(first, len(calls)):
        call, began = calls[number], place(calls[number])
        until = place(calls[number + 1]) if number + 1 < len(calls) else None
        while position < len(steps) and place(steps[position]) < began:
            position += 1
        if position < len(steps) and (until is None or place(steps[position]) < until):
            call.step_index = steps[position].step_index


_STEP_START = operator.attrgetter("started_ns")


def _loop_began(steps: list[MappedStep]) -> int | None:
    """Where the first repeated fingerprint was first seen (what the SDKs report)."""
    first: dict[bytes, int] = {}
    for step in steps:
        if step.fingerprint is None:
            continue
        if step.fingerprint in first:
            return first[step.fingerprint]
        first[step.fingerprint] = step.step_index
    return None


def _start(span: Span) -> tuple[int, bytes]:
    return (span.start_ns, span.span_id)


# A span's place in its run: (start, rank among the spans that started at the same
# instant, span id). See _order.
_Order = dict[bytes, tuple[int, int, bytes]]
_Ids = tuple[list[str], set[str]]
_LATER = 1 << 30  # (the rank of a step or call _order has not placed: after its peers)


def _order(spans: list[Span], roles: dict[bytes, str], memo: Memo | None) -> _Order:
    """The order of a run's tool and model spans: by start, and, among spans that
    started at the same instant, as the trace says they ran. A model call comes before
    the tool calls it asked for (by the call's id: requested.asked_ids, the tool span's
    c.tool_call_id), which come in the order it asked for them; a tool call comes
    before a model call whose prompt holds its result (requested.answered_ids), and so
    does the model call that asked for it; where no id says, of a model call and a tool
    call the one that ended first (they take turns), then a model call before a tool
    call, then the smaller span id first. A function of the set of spans alone."""
    if len({span.start_ns for span in spans}) == len(spans):  # (most runs: no tie)
        return {span.span_id: (span.start_ns, 0, span.span_id) for span in spans}
    by_start: dict[int, list[Span]] = {}
    for span in spans:
        by_start.setdefault(span.start_ns, []).append(span)
    order: _Order = {}
    tied = [group for group in by_start.values() if len(group) > 1]
    for group in by_start.values():
        if len(group) == 1:
            order[group[0].span_id] = (group[0].start_ns, 0, group[0].span_id)
    calls = sorted((s for s in spans if roles[s.span_id] == c.MODEL), key=_start)
    ids = {call.span_id: _ids(call, memo) for call in calls}
    asking: dict[str, list[tuple[int, int]]] = {}  # call id -> (start, place) of each ask
    for call in calls:
        for place, call_id in enumerate(ids[call.span_id][0]):
            asking.setdefault(call_id, []).append((call.start_ns, place))
    for group in tied:
        for rank, span in enumerate(_tied(group, roles, ids, asking)):
            order[span.span_id] = (span.start_ns, rank, span.span_id)
    return order


def _tied(
    group: list[Span],
    roles: dict[bytes, str],
    ids: dict[bytes, _Ids],
    asking: dict[str, list[tuple[int, int]]],
) -> list[Span]:
    """Spans that started at the same instant, in the order they ran (see _order)."""
    calls = [span for span in group if roles[span.span_id] == c.MODEL]
    tools = {span.span_id: c.tool_call_id(span) for span in group if roles[span.span_id] != c.MODEL}
    before: dict[bytes, set[bytes]] = {span.span_id: set() for span in group}
    for call in calls:
        asked, answered = ids[call.span_id]
        for tool, call_id in tools.items():
            if call_id is not None and call_id in asked:
                before[tool].add(call.span_id)
            if call_id is not None and call_id in answered:
                before[call.span_id].add(tool)
        for other in calls:
            if other is not call and not ids[other.span_id][1].isdisjoint(asked):
                before[other.span_id].add(call.span_id)
    spans = {span.span_id: span for span in group}
    for call in calls:
        for tool in tools:
            if call.span_id in before[tool] or tool in before[call.span_id]:
                continue
            # No id says: the one that ended first ran first (a run's model calls and
            # tools take turns; JavaScript's clocks give starts in whole milliseconds,
            # its durations finer, so a quick tool ties with the call after it).
            ended = spans[tool].end_ns
            if 0 < ended < call.end_ns:
                before[call.span_id].add(tool)
            elif 0 < call.end_ns < ended:
                before[tool].add(call.span_id)

    def rank(span: Span) -> tuple[int, int, bytes]:
        call_id = tools.get(span.span_id)
        if span.span_id not in tools:
            return (0, 0, span.span_id)
        # its place in the answer that asked for it (the last to ask that started by then)
        places = [place for start, place in asking.get(call_id or "", ()) if start <= span.start_ns]
        return (1, places[-1] if places else 0, span.span_id)

    ordered: list[Span] = []
    left = sorted(group, key=rank)
    while left:  # (where the trace contradicts itself, the first by rank goes first)
        done = {span.span_id for span in ordered}
        ready = next((s for s in left if before[s.span_id] <= done), left[0])
        ordered.append(ready)
        left.remove(ready)
    return ordered


def _ids(span: Span, memo: Memo | None) -> _Ids:
    """The ids of the tool calls a model span asked for and of those whose results its
    prompt holds (requested.py), remembered."""
    key = span.span_id + b"t"
    known = memo.get(key) if memo is not None else None
    if isinstance(known, tuple):
        return known  # type: ignore[return-value]
    found = (requested.asked_ids(span), requested.answered_ids(span))
    if memo is not None:
        memo[key] = found
    return found


def _place(order: _Order, item: MappedStep | MappedCall) -> tuple[int, int, bytes]:
    """A step's or call's place in its run (_order); one it has not placed (a step a
    model call asked for) after those that started with it."""
    return order.get(item.span_id) or (item.started_ns, _LATER, item.span_id)


def _span_place(order: _Order, span: Span) -> tuple[int, int, bytes]:
    return order.get(span.span_id) or (span.start_ns, 0, span.span_id)


def _mastra_stopped_after_tools(run: MappedRun, span: Span, order: _Order) -> bool:
    """A Mastra agent stopped by its ``maxSteps``: its last model call asked for tools
    (finish reason ``tool-calls``), they ran, and no model call saw their results. (Its
    run span says nothing of it; Mastra otherwise always shows tools' results to the
    model. One that paused for a tool the client runs ran none.)"""
    if span.scope != c.MASTRA or not run.calls or not run.steps:
        return False
    last = run.calls[-1]
    return "tool-calls" in last.finish_reasons and _place(order, run.steps[-1]) > _place(
        order, last
    )


def _forced_to_answer(run: MappedRun) -> bool:
    """Whether the run's last model call was told to answer without tools because the
    agent had reached its step limit (CrewAI's max_iter: it records nothing else)."""
    last = run.calls[-1].input_messages if run.calls else None
    return last is not None and c.FORCED_FINAL_ANSWER in last


def _said_to_stop(run: MappedRun, span: Span, children: list[Span], order: _Order) -> bool:
    """A step limit that leaves no exception: the run's own output says so (Haystack's
    ``exit_reason``, LangChain's call-limit middleware's answer), its own finish reason
    does (OpenTelemetry's smolagents instrumentation: ``max_steps``), the model was told
    to answer now (CrewAI's ``max_iter``), or tools ran that no model call saw (Vercel's
    ``stopWhen``, Mastra's ``maxSteps``)."""
    reasons = model_calls.finish_reasons(span.attributes.get("gen_ai.response.finish_reasons"))
    return (
        c.stopped_at_limit(span)
        or any(reason in c.LIMIT_EXITS for reason in reasons)
        or (run.output is not None and any(said in run.output for said in c.LIMIT_ANSWERS))
        or _forced_to_answer(run)
        or _cut_off_after_tools(span, children, order)
        or _mastra_stopped_after_tools(run, span, order)
    )


def _finish(
    run: MappedRun,
    span: Span,
    unique: dict[bytes, Span],
    memo: Memo | None = None,
    order: _Order | None = None,
) -> None:
    """Set the run's end: only once its own span has ended."""
    if not span.end_ns:
        return
    order = order or {}
    children = [s for s in unique.values() if s.parent_span_id == span.span_id]
    # A wrapper that stays OK while the agent inside it failed (OpenAI Agents SDK,
    # smolagents): look at the spans of the agent's own machinery right under it. Not
    # at its tool calls and model calls: a failed call the agent recovered from says
    # nothing about how the run ended, whatever its message says ("max steps").
    failures = [span, *(s for s in children if _role(s, memo) in (c.AGENT, c.OTHER))]
    kinds = [kind.lower() for failed in failures for kind in c.exception_types(failed)]
    error, traceback = c.error(span), c.stacktrace(span)
    ended_on = None if error else _ended_on_failure(run, children, unique, memo, order)
    if ended_on is not None:
        error, traceback = c.error(ended_on), c.stacktrace(ended_on)
        kinds += [kind.lower() for kind in c.exception_types(ended_on)]
    # A step limit first: it says why the agent stopped, whatever else went wrong. Then
    # the model's token limit: raised (Strands fails the run when an answer is cut off),
    # or the last answer cut off in a run that did not fail. Any other failure: error.
    ran_out = any(limit in kind for kind in kinds for limit in c.CONTEXT_LIMITS)
    if any(limit in kind for kind in kinds for limit in c.STEP_LIMITS) or _said_to_stop(
        run, span, children, order
    ):
        run.termination_reason = "max_steps_reached"
    elif ran_out or (
        not error
        and run.calls
        and not model_calls.LENGTH_REASONS.isdisjoint(run.calls[-1].finish_reasons)
    ):
        run.termination_reason = "context_limit"
    elif error:
        run.termination_reason = "error"
    else:
        run.termination_reason = "clean"
    run.error = error
    run.error_traceback = traceback
    run.ended_ns = span.end_ns


def _ended_on_failure(
    run: MappedRun,
    children: list[Span],
    unique: dict[bytes, Span],
    memo: Memo | None,
    order: _Order,
) -> Span | None:
    """The failed span a run ended on while its own span stayed OK (the OpenAI Agents
    SDK raises out of Runner.run and leaves its agent span OK): the last of the
    framework's own spans right under the agent, where that failed (the SDK's turn, when
    an input guardrail tripped: v2's instrumentation); or the run's last model call,
    where it failed and nothing started after it (the SDK raising on an incomplete
    answer). A failed call or turn the agent went on from is not the run's failure."""
    last = max(children, key=functools.partial(_span_place, order), default=None)
    if last is not None and _role(last, memo) == c.OTHER and c.error(last):
        return last
    call = run.calls[-1] if run.calls else None
    if call is None or call.status != "error" or call.span_id not in unique:
        return None
    if run.steps and _place(order, run.steps[-1]) > _place(order, call):
        return None
    return unique[call.span_id]
