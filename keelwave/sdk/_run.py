"""A run: one execution of an agent, with its steps, model calls and loop state.

Step indices start at 1 and are handed out in call order, from any thread.
A run remembers the first step index of every tool fingerprint it has seen,
so the first repeat flags the run as looping at the step where the
repetition *began*, not where it was caught.

A run knows nothing of the client that made it: it is given a send function
(a callable that queues an event) and a report function (that logs a problem
once) instead. So the dependencies go one way: the client and the provider
adapters import this module (the adapters for ``model_call_event``), and it
imports neither of them.

Every event is checked as it is made (see ``_validate``): a bad value drops
its own event, or leaves out its own field, and is reported; it never reaches
the server to get a whole batch refused.

Everything that can hold the agent's data is redacted (see ``_redact``) with
the run's ``redaction`` (the client's; the built-in rules for a run made by
hand): a step's input at once, in the agent's thread, because its fingerprint
is taken over the redacted text (the text the server receives and fingerprints
too); a step's output, thought and error in the sender thread, as the step's
JSON is put together; a run's input, metadata, tags, output and error, and a
model call's error, where their events are made (once a run, or a call).
"""

from __future__ import annotations

import functools
import itertools
import json
import time
import traceback
import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

from keelwave.protocol import (
    AMOUNT_MAX,
    DEFAULT_STEP_TYPE,
    STEP_INDEX_MAX,
    STEP_TYPES,
    TERMINATION_REASONS,
    TRACEBACK_SENT_MAX,
    bound_traceback,
)
from keelwave.sdk import _validate as check
from keelwave.sdk._canonical import canonical_json, fingerprint
from keelwave.sdk._delivery import Event, Send, dumps
from keelwave.sdk._errors import LoopDetected, MaxStepsExceeded
from keelwave.sdk._redact import DEFAULT as DEFAULT_REDACTION
from keelwave.sdk._redact import Redaction
from keelwave.sdk._validate import Report


def _now() -> str:
    return datetime.now(UTC).isoformat()


class Run:
    """A run in progress. Get the current one with :func:`keelwave.get_current_run`.

    Made by ``client.run`` / ``@client.agent``, which pass their own queueing
    function as ``send``; every event of the run goes through it. A run whose
    name or id the server would refuse is not recorded at all (``recorded``
    is False, and the log says why): its steps alone would mean nothing.
    """

    def __init__(
        self,
        send: Send,
        name: str,
        *,
        parent: Run | None = None,
        input: Any = None,
        metadata: dict[str, Any] | None = None,
        tags: list[str] | None = None,
        max_steps: int | None = None,
        stop_on_loop: bool = False,
        run_id: str | None = None,
        report: Report | None = None,
        redaction: Redaction | None = DEFAULT_REDACTION,
    ) -> None:
        self._report = report or check.default_report
        self._redaction = redaction
        self.recorded = True
        canonical = str(uuid.uuid4()) if run_id is None else check.as_uuid(run_id)
        self.id = canonical or str(run_id)
        problem = "is not a UUID" if canonical is None else check.name_problem(name)
        if problem is not None:
            self.recorded = False
            field, value = ("run_id", run_id) if canonical is None else ("agent_name", name)
            check.refuse(self._report, field, value, problem, "the run is not recorded")
        self.name = name
        self.parent = parent
        self.max_steps = max_steps
        self.stop_on_loop = stop_on_loop
        self.loop_detected = False
        self.loop_step_index: int | None = None
        self.termination_reason: str | None = None
        self._send = send
        self._indices = itertools.count(1)
        self._last_index = 0
        self._first_seen: dict[bytes, int] = {}
        if not self.recorded:
            return
        body: dict[str, Any] = {"id": self.id, "agent_name": name, "started_at": _now()}
        if parent is not None and parent.recorded:
            body["parent_run_id"] = parent.id
        if tags and redaction is not None:
            tags = [redaction.redact_text(tag) if isinstance(tag, str) else tag for tag in tags]
        tags = check.clean_tags(tags, self._report)
        if tags:
            body["tags"] = tags
        text = dumps(body)[:-1]
        if metadata:  # as canonical JSON: NaN or a set in metadata must not break the request
            text += f',"metadata":{self._payload(metadata)}'
        if input is not None:
            text += f',"input":{self._payload(input)}'
        send(Event("run", text + "}"))

    def __repr__(self) -> str:
        return f"<Run {self.name} {self.id}>"

    def _payload(self, value: Any) -> str:
        """``value`` as the JSON text to send (and fingerprint): canonical, redacted."""
        text = canonical_json(value)
        return text if self._redaction is None else self._redaction.redact_json(text)

    @property
    def finished(self) -> bool:
        return self.termination_reason is not None

    @property
    def step_count(self) -> int:
        return self._last_index

    # -- steps -------------------------------------------------------------

    def next_step_index(self) -> int:
        """Take the next step index; raises MaxStepsExceeded past ``max_steps``."""
        index = next(self._indices)
        if index > self._last_index:
            self._last_index = index
        if self.max_steps is not None and index > self.max_steps:
            raise MaxStepsExceeded(self.max_steps)
        return index

    def tool_call(
        self,
        name: str,
        input: Any = None,
        output: Any = None,
        *,
        error: str | BaseException | None = None,
        duration_ms: float | None = None,
        step_type: str = DEFAULT_STEP_TYPE,
    ) -> int:
        """Record a tool call and return its step index. It does not fingerprint:
        pair it with :meth:`check_fingerprint` to have repeats flag the run.

        A ``step_type`` outside the protocol raises ValueError; a ``name`` the
        server would refuse drops this step (the index is still taken)."""
        check.vocabulary(step_type, STEP_TYPES, "step_type")
        index = self.next_step_index()
        problem = check.name_problem(name)
        if problem is not None:
            check.refuse(self._report, "tool_name", name, problem, "the step is dropped")
            return index
        self._send_step(index, step_type, name, self._payload(input),
                        None if output is None else canonical_json(output),
                        None, duration_ms, error)  # fmt: skip
        return index

    def think(self, content: str) -> int:
        """Record a reasoning step (never part of a loop)."""
        index = self.next_step_index()
        self._send_step(index, "think", None, None, None, str(content), None, None)
        return index

    def replan(self, content: str) -> int:
        """Record a change of plan (never part of a loop)."""
        index = self.next_step_index()
        self._send_step(index, "replan", None, None, None, str(content), None, None)
        return index

    def _send_step(
        self,
        index: int,
        step_type: str,
        tool_name: str | None,
        input_json: str | None,  # redacted already (it was fingerprinted)
        output_json: str | None,  # canonical, not yet redacted
        content: str | None,
        duration_ms: float | None,
        error: str | BaseException | None,
        started_at: float | None = None,
    ) -> None:
        if not self.recorded:
            return
        if index > STEP_INDEX_MAX:
            check.refuse(self._report, "step_index", index, f"is beyond {STEP_INDEX_MAX}",
                         "the step is dropped")  # fmt: skip
            return
        if duration_ms is not None and (
            type(duration_ms) is not float or not 0.0 <= duration_ms <= AMOUNT_MAX
        ):  # the fast path is for the observed tools' own timings, always fine
            duration_ms = check.optional_amount(duration_ms, "duration_ms", "step", self._report)
        # The JSON text is put together (and the output redacted) by the sender thread.
        if error is not None:
            error, error_traceback = _error_text(error), _traceback_text(error)
        else:
            error_traceback = None
        self._send(Event("step", functools.partial(
            _render_step, self.id, index, step_type, tool_name, input_json, output_json,
            content, duration_ms, error, started_at or time.time(), self._redaction,
            error_traceback,
        )))  # fmt: skip

    # -- loops -------------------------------------------------------------

    def check_fingerprint(self, name: str, input: Any) -> bool:
        """Fingerprint ``name`` + ``input`` as the latest step; True if it repeats an earlier one.

        The first repeat in the run calls :meth:`mark_loop` with the step index
        where that input was first seen. The input is fingerprinted redacted, as it
        is sent: two inputs that differ only in a secret are the same call.
        """
        return self._check(fingerprint(name, self._payload(input)), self._last_index)

    def _check(self, digest: bytes, index: int) -> bool:
        # dict.setdefault is atomic: threads sharing a run agree on the first index.
        first = self._first_seen.setdefault(digest, index)
        if first == index:
            return False
        self.mark_loop(step_index=first)  # only the first repeat counts
        if self.stop_on_loop:
            raise LoopDetected(first, index)
        return True

    def mark_loop(self, step_index: int) -> None:
        """Flag the run as looping, starting at ``step_index`` (the first repeated step)."""
        if not self.loop_detected:
            self.loop_detected = True
            self.loop_step_index = step_index

    # -- model calls -------------------------------------------------------

    def llm_call(
        self,
        provider: str,
        model: str,
        *,
        input_tokens: int = 0,
        output_tokens: int = 0,
        cache_read_tokens: int = 0,
        reasoning_tokens: int = 0,
        cost_usd: float | None = None,
        latency_ms: float | None = None,
        error: str | BaseException | None = None,
        step_index: int | None = None,
    ) -> str:
        """Record a model call; returns its id. Without ``cost_usd`` the server prices it.

        Call it once the model has answered: with ``latency_ms``, the call is stamped as
        started that long before now.

        A provider, model or token count the server would refuse drops the call;
        a cost or latency it would refuse is left out (so the server prices it)."""
        event, call_id = model_call_event(
            self.id if self.recorded else None, provider, model, input_tokens=input_tokens,
            output_tokens=output_tokens, cache_read_tokens=cache_read_tokens,
            reasoning_tokens=reasoning_tokens, cost_usd=cost_usd, latency_ms=latency_ms,
            error=error, step_index=step_index if self.recorded else None, report=self._report,
            redaction=self._redaction,
        )  # fmt: skip
        if event is not None:
            self._send(event)
        return call_id

    # -- the end -----------------------------------------------------------

    def finish(
        self,
        termination_reason: str = "clean",
        output: Any = None,
        error: str | BaseException | None = None,
    ) -> None:
        """Finish the run. Later calls are ignored: the first finish wins."""
        if self.finished:
            return
        check.vocabulary(termination_reason, TERMINATION_REASONS, "termination_reason")
        self.termination_reason = termination_reason
        if not self.recorded:
            return
        body: dict[str, Any] = {
            "id": self.id,  # for the batch endpoint, which finishes many runs at once
            "termination_reason": termination_reason,
            "loop_detected": self.loop_detected,
            "ended_at": _now(),
        }
        if self.loop_step_index is not None:
            problem = check.step_index_problem(self.loop_step_index)
            if problem is None:
                body["loop_step_index"] = self.loop_step_index
            else:
                check.refuse(self._report, "loop_step_index", self.loop_step_index, problem,
                             "the run is finished without it")  # fmt: skip
        if error is not None:
            body["error"] = _redacted_text(_error_text(error), self._redaction)
            if (trace := _traceback_text(error)) is not None:
                body["error_traceback"] = _redacted_text(trace, self._redaction)
        text = dumps(body)
        if output is not None:
            text = f'{text[:-1]},"output":{self._payload(output)}}}'
        self._send(Event("finish", text))


def _render_step(
    run_id: str,
    index: int,
    step_type: str,
    tool_name: str | None,
    input_json: str | None,
    output_json: str | None,
    content: str | None,
    duration_ms: float | None,
    error: str | None,
    started_at: float,
    redaction: Redaction | None = None,
    error_traceback: str | None = None,
) -> str:
    """A step as JSON text, built by hand so tool_input is exactly the text that was hashed.

    ``input_json`` comes redacted (it was fingerprinted so); the output, the
    thought, the error and its traceback are redacted here, in the sender thread."""
    if redaction is not None:
        if output_json is not None:
            output_json = redaction.redact_json(output_json)
        if content is not None:
            content = redaction.redact_text(content)
        if error is not None:
            error = check.free_text(redaction.redact_text(error))
        if error_traceback is not None:
            error_traceback = check.free_text(redaction.redact_text(error_traceback))
    parts = [f'{{"run_id":"{run_id}","step_index":{index},"step_type":"{step_type}"',
             f',"started_at":"{_utc_text(started_at)}"']  # fmt: skip
    if tool_name is not None:
        parts.append(f',"tool_name":{_name_json(tool_name)}')
    if input_json is not None:
        parts.append(f',"tool_input":{input_json}')
    if output_json is not None:
        parts.append(f',"tool_output":{output_json}')
    if content is not None:
        parts.append(f',"content":{json.dumps(check.free_text(content))}')
    if duration_ms is not None:
        parts.append(f',"duration_ms":{duration_ms:.3f}')
    if error is not None:
        parts.append(f',"error":{json.dumps(error)}')
    if error_traceback is not None:
        parts.append(f',"error_traceback":{json.dumps(check.free_text(error_traceback))}')
    parts.append("}")
    return "".join(parts)


def model_call_event(
    run_id: str | None,
    provider: str,
    model: str,
    *,
    input_tokens: int = 0,
    output_tokens: int = 0,
    cache_read_tokens: int = 0,
    reasoning_tokens: int = 0,
    cost_usd: float | None = None,
    latency_ms: float | None = None,
    error: str | BaseException | None = None,
    step_index: int | None = None,
    report: Report = check.default_report,
    redaction: Redaction | None = DEFAULT_REDACTION,
    input_messages: Any = None,
    output_messages: Any = None,
) -> tuple[Event | None, str]:
    """The event for one model call (with a fresh id, so a resend is stored once).

    None instead of the event when the call cannot be stored: a provider or
    model that is not a valid name, a token count that is not a whole number
    from 0 to TOKEN_COUNT_MAX (sent as 0 it would be priced wrong, silently).
    ``input_messages`` and ``output_messages`` (the prompt and the response, when
    content is captured) go as canonical JSON, redacted.
    """
    call_id = str(uuid.uuid4())
    for field, value in (("provider", provider), ("model", model)):
        problem = check.name_problem(value)
        if problem is not None:
            check.refuse(report, field, value, problem, "the model call is dropped")
            return None, call_id
    tokens = {"input_tokens": input_tokens or 0, "output_tokens": output_tokens or 0,
              "cache_read_tokens": cache_read_tokens or 0,
              "reasoning_tokens": reasoning_tokens or 0}  # fmt: skip
    for field, value in tokens.items():
        problem = check.token_problem(value)
        if problem is not None:
            check.refuse(report, field, value, problem, "the model call is dropped")
            return None, call_id
        tokens[field] = int(value)
    body: dict[str, Any] = {
        "id": call_id,
        "provider": provider,
        "model": model,
        **tokens,
        "status": "error" if error is not None else "ok",
        "started_at": _now(),
    }
    if run_id is not None:
        body["run_id"] = run_id
    if step_index is not None:
        problem = check.step_index_problem(step_index)
        if problem is None:
            body["step_index"] = step_index
        else:
            check.refuse(report, "step_index", step_index, problem, "the call is sent without it")
    cost = check.optional_amount(cost_usd, "cost_usd", "model call", report)
    if cost is not None:
        body["cost_usd"] = cost
    latency = check.optional_amount(latency_ms, "latency_ms", "model call", report)
    if latency is not None:
        body["latency_ms"] = latency
        # Recorded once the model answered (the adapters, and most callers): it began
        # that long ago, which is where a timeline draws it.
        started = datetime.now(UTC) - timedelta(milliseconds=latency)
        body["started_at"] = started.isoformat()
    if error is not None:
        body["error"] = _redacted_text(_error_text(error), redaction)
    text = dumps(body)
    for name, value in (("input_messages", input_messages), ("output_messages", output_messages)):
        if value is not None:
            content = canonical_json(value)
            if redaction is not None:
                content = redaction.redact_json(content)
            text = f'{text[:-1]},"{name}":{content}}}'
    return Event("ai", text), call_id


def _redacted_text(text: str, redaction: Redaction | None) -> str:
    return text if redaction is None else check.free_text(redaction.redact_text(text))


def _error_text(error: str | BaseException) -> str:
    if isinstance(error, BaseException):
        return check.free_text(f"{type(error).__name__}: {error}")
    return check.free_text(str(error))


# The second a step started in, and that second as ISO 8601 text: steps come in time
# order, so most of them share the second of the one before (replaced whole, as one
# tuple: the sender's threads may render steps at once).
_last_second: tuple[int, str] = (0, "1970-01-01T00:00:00")


def _utc_text(timestamp: float) -> str:
    """``datetime.fromtimestamp(timestamp, UTC).isoformat()`` with microseconds always
    written, for a fifth of its cost: the sender renders every step with it."""
    global _last_second
    second, micro = divmod(round(timestamp * 1_000_000), 1_000_000)
    last = _last_second
    if last[0] != second:
        text = datetime.fromtimestamp(second, UTC).strftime("%Y-%m-%dT%H:%M:%S")
        last = _last_second = (second, text)
    return f"{last[1]}.{micro:06d}+00:00"


@functools.lru_cache(maxsize=1024)  # an agent has a few tools, each named at every call
def _name_json(name: str) -> str:
    return json.dumps(name)


def _traceback_text(error: str | BaseException | None) -> str | None:
    """The formatted traceback of an exception that was raised (one made and passed
    without raising has none), its last TRACEBACK_SENT_MAX characters."""
    if not isinstance(error, BaseException) or error.__traceback__ is None:
        return None
    try:
        text = "".join(traceback.format_exception(error))
    except Exception:  # an exception whose str() fails must not fail the agent's run
        return None
    return check.free_text(bound_traceback(text, TRACEBACK_SENT_MAX))
