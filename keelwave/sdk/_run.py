"""A run: one execution of an agent, with its steps, model calls and loop state.

Step indices start at 1 and are handed out in call order, from any thread.
A run remembers the first step index of every tool fingerprint it has seen,
so the first repeat flags the run as looping at the step where the
repetition *began*, not where it was caught.

A run knows nothing of the client that made it: it is given a send function
(a callable that queues an event) instead. So the dependencies go one way:
the client and the provider adapters import this module (the adapters for
``model_call_event``), and it imports neither of them.
"""

from __future__ import annotations

import functools
import itertools
import json
import time
import uuid
from datetime import UTC, datetime
from typing import Any

from keelwave.protocol import DEFAULT_STEP_TYPE, TERMINATION_REASONS
from keelwave.sdk._canonical import canonical_json, fingerprint
from keelwave.sdk._errors import LoopDetected, MaxStepsExceeded
from keelwave.sdk._transport import Event, Send, dumps


def _now() -> str:
    return datetime.now(UTC).isoformat()


class Run:
    """A run in progress. Get the current one with :func:`keelwave.get_current_run`.

    Made by ``client.run`` / ``@client.agent``, which pass their own queueing
    function as ``send``; every event of the run goes through it.
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
    ) -> None:
        self.id = run_id or str(uuid.uuid4())
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
        body: dict[str, Any] = {"id": self.id, "agent_name": name, "started_at": _now()}
        if parent is not None:
            body["parent_run_id"] = parent.id
        if metadata:
            body["metadata"] = metadata
        if tags:
            body["tags"] = list(tags)
        text = dumps(body)
        if input is not None:
            text = f'{text[:-1]},"input":{canonical_json(input)}}}'
        send(Event("run", text))

    def __repr__(self) -> str:
        return f"<Run {self.name} {self.id}>"

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
        pair it with :meth:`check_fingerprint` to have repeats flag the run."""
        index = self.next_step_index()
        self._send_step(index, step_type, name, canonical_json(input),
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
        input_json: str | None,
        output_json: str | None,
        content: str | None,
        duration_ms: float | None,
        error: str | BaseException | None,
        started_at: float | None = None,
    ) -> None:
        # The JSON text is put together by the sender thread, not the agent's.
        self._send(Event("step", functools.partial(
            _render_step, self.id, index, step_type, tool_name, input_json, output_json,
            content, duration_ms, None if error is None else _error_text(error),
            started_at or time.time(),
        )))  # fmt: skip

    # -- loops -------------------------------------------------------------

    def check_fingerprint(self, name: str, input: Any) -> bool:
        """Fingerprint ``name`` + ``input`` as the latest step; True if it repeats an earlier one.

        The first repeat in the run calls :meth:`mark_loop` with the step index
        where that input was first seen.
        """
        return self._check(fingerprint(name, canonical_json(input)), self._last_index)

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
        """Record a model call; returns its id. Without ``cost_usd`` the server prices it."""
        event, call_id = model_call_event(
            self.id, provider, model, input_tokens=input_tokens, output_tokens=output_tokens,
            cache_read_tokens=cache_read_tokens, reasoning_tokens=reasoning_tokens,
            cost_usd=cost_usd, latency_ms=latency_ms, error=error, step_index=step_index,
        )  # fmt: skip
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
        if termination_reason not in TERMINATION_REASONS:
            raise ValueError(
                f"termination_reason must be one of {', '.join(TERMINATION_REASONS)}, "
                f"not {termination_reason!r}"
            )
        self.termination_reason = termination_reason
        body: dict[str, Any] = {
            "id": self.id,  # for the batch endpoint, which finishes many runs at once
            "termination_reason": termination_reason,
            "loop_detected": self.loop_detected,
            "ended_at": _now(),
        }
        if self.loop_step_index is not None:
            body["loop_step_index"] = self.loop_step_index
        if error is not None:
            body["error"] = _error_text(error)
        text = dumps(body)
        if output is not None:
            text = f'{text[:-1]},"output":{canonical_json(output)}}}'
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
) -> str:
    """A step as JSON text, built by hand so tool_input is exactly the text that was hashed."""
    when = datetime.fromtimestamp(started_at, UTC).isoformat()
    parts = [f'{{"run_id":"{run_id}","step_index":{index},"step_type":"{step_type}"',
             f',"started_at":"{when}"']  # fmt: skip
    if tool_name is not None:
        parts.append(f',"tool_name":{json.dumps(tool_name)}')
    if input_json is not None:
        parts.append(f',"tool_input":{input_json}')
    if output_json is not None:
        parts.append(f',"tool_output":{output_json}')
    if content is not None:
        parts.append(f',"content":{json.dumps(content)}')
    if duration_ms is not None:
        parts.append(f',"duration_ms":{max(0.0, float(duration_ms)):.3f}')
    if error is not None:
        parts.append(f',"error":{json.dumps(error)}')
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
) -> tuple[Event, str]:
    """The event for one model call (with a fresh id, so a resend is stored once)."""
    call_id = str(uuid.uuid4())
    body: dict[str, Any] = {
        "id": call_id,
        "provider": provider,
        "model": model,
        "input_tokens": int(input_tokens or 0),
        "output_tokens": int(output_tokens or 0),
        "cache_read_tokens": int(cache_read_tokens or 0),
        "reasoning_tokens": int(reasoning_tokens or 0),
        "status": "error" if error is not None else "ok",
        "started_at": _now(),
    }
    if run_id is not None:
        body["run_id"] = run_id
    if step_index is not None:
        body["step_index"] = step_index
    if cost_usd is not None:
        body["cost_usd"] = float(cost_usd)
    if latency_ms is not None:
        body["latency_ms"] = max(0.0, float(latency_ms))
    if error is not None:
        body["error"] = _error_text(error)
    return Event("ai", dumps(body)), call_id


def _error_text(error: str | BaseException) -> str:
    if isinstance(error, BaseException):
        return f"{type(error).__name__}: {error}"
    return str(error)
