"""What the provider adapters share: patch a method so each call is recorded once.

A call is recorded when it returns, raises, or (streamed) when its stream
ends, is closed or fails, linked to the run and step current when the call
was made. Each adapter only says how to read usage from its provider's
responses and stream chunks.

With ``capture_content`` (off by default: prompts are the agent's data, often
its users'), the call's prompt and response are sent too, as
``input_messages`` and ``output_messages``, redacted like every payload: the
request's messages as the agent passed them, and the response's messages (a
stream's text deltas joined into one assistant message).
"""

from __future__ import annotations

import functools
import inspect
import math
import time
from collections.abc import Callable
from typing import Any

from keelwave.sdk._context import current_step_index, get_current_run
from keelwave.sdk._delivery import Send
from keelwave.sdk._redact import DEFAULT as DEFAULT_REDACTION
from keelwave.sdk._redact import Redaction
from keelwave.sdk._run import model_call_event
from keelwave.sdk._validate import Report


class Usage:
    """Token counts in keelwave's convention (input includes cached; output includes
    reasoning), and the call's messages when content is captured."""

    __slots__ = ("model", "input_tokens", "output_tokens", "cache_read_tokens",
                 "reasoning_tokens", "capture", "input_messages", "output_messages",
                 "streamed_text")  # fmt: skip

    def __init__(self, model: str | None = None, capture: bool = False) -> None:
        self.model = model
        self.input_tokens = 0
        self.output_tokens = 0
        self.cache_read_tokens = 0
        self.reasoning_tokens = 0
        self.capture = capture  # the readers fill the fields below only if so
        self.input_messages: Any = None
        self.output_messages: Any = None
        self.streamed_text: list[str] = []

    def stream_text(self, text: Any) -> None:
        if self.capture and isinstance(text, str):
            self.streamed_text.append(text)

    def response(self) -> Any:
        """What the call answered: its messages, or a stream's text as one message."""
        if self.output_messages is None and self.streamed_text:
            return [{"role": "assistant", "content": "".join(self.streamed_text)}]
        return self.output_messages


def plain(value: Any, depth: int = 0) -> Any:
    """A provider's objects (pydantic models, SDK types) as plain JSON-like values."""
    if depth > 50:
        return "<too deep>"
    dump = getattr(value, "model_dump", None)
    if callable(dump) and not isinstance(value, type):
        try:
            return dump(mode="json", exclude_none=True)
        except Exception:  # an object whose dump fails is sent as its text
            return str(value)
    if isinstance(value, dict):
        return {str(key): plain(item, depth + 1) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [plain(item, depth + 1) for item in value]
    return value


def field(obj: Any, *names: str) -> Any:
    """``obj.a.b`` for objects or dicts, None when any part is missing."""
    for name in names:
        if obj is None:
            return None
        obj = obj.get(name) if isinstance(obj, dict) else getattr(obj, name, None)
    return obj


def number(value: Any) -> int:
    """A token count from a provider's response: 0 when absent or not a finite number
    (int() of a NaN would raise inside the agent's own call)."""
    if isinstance(value, int):
        return value
    return int(value) if isinstance(value, float) and math.isfinite(value) else 0


def record(
    send: Send | None,
    report: Report,
    provider: str,
    usage: Usage,
    started: float,
    error: BaseException | None,
    redaction: Redaction | None = DEFAULT_REDACTION,
) -> None:
    """Send one model call, linked to the current run and step when there are any.

    ``send`` is None when the SDK records nothing (no API key): no event is built.
    A provider's error may quote what it was sent: it goes through ``redaction``.
    A call that cannot be stored (a model name the server would refuse) is
    dropped and reported, never raised into the agent's call.
    """
    if send is None:
        return
    run = get_current_run()
    if run is not None and not run.recorded:
        run = None  # a run that is not recorded: the call is, on its own
    event, _ = model_call_event(
        run.id if run is not None else None,
        provider,
        usage.model or "unknown",
        input_tokens=usage.input_tokens,
        output_tokens=usage.output_tokens,
        cache_read_tokens=usage.cache_read_tokens,
        reasoning_tokens=usage.reasoning_tokens,
        latency_ms=(time.perf_counter() - started) * 1000,
        error=error,
        step_index=current_step_index.get() if run is not None else None,
        report=report,
        redaction=redaction,
        input_messages=plain(usage.input_messages) if usage.capture else None,
        output_messages=plain(usage.response()) if usage.capture else None,
    )
    if event is not None:
        send(event)


def patch(
    send: Send | None,
    report: Report,
    resource: Any,
    method: str,
    provider: str,
    read_response: Callable[[Any, Usage], None],
    read_chunk: Callable[[Any, Usage], None],
    redaction: Redaction | None = DEFAULT_REDACTION,
    read_request: Callable[[dict[str, Any]], Any] | None = None,
) -> None:
    """Replace ``resource.method`` by a recording version (sync or async, streaming or not).

    ``read_request`` (given when content is captured) reads the prompt from the
    call's keyword arguments; the response readers then keep the response."""
    original = getattr(resource, method, None)
    if original is None or getattr(original, "__keelwave__", False):
        return

    def finish(response: Any, usage: Usage, started: float, stream: bool) -> Any:
        done = functools.partial(
            record, send, report, provider, usage, started, redaction=redaction
        )
        if stream:
            wrapper = AsyncRecordingStream if hasattr(response, "__aiter__") else RecordingStream
            return wrapper(response, done, usage, read_chunk)
        read_response(response, usage)
        done(None)
        return response

    async def finish_async(pending: Any, usage: Usage, started: float, stream: bool) -> Any:
        try:
            response = await pending
        except BaseException as error:
            record(send, report, provider, usage, started, error, redaction)
            raise
        return finish(response, usage, started, stream)

    # One wrapper for sync and async clients: an async client's method returns an
    # awaitable (its methods are not always coroutine functions: they may be wrapped).
    @functools.wraps(original)
    def call(*args: Any, **kwargs: Any) -> Any:
        usage = Usage(kwargs.get("model"), capture=read_request is not None)
        if read_request is not None:
            usage.input_messages = read_request(kwargs)
        started = time.perf_counter()
        stream = bool(kwargs.get("stream"))
        try:
            response = original(*args, **kwargs)
        except BaseException as error:
            record(send, report, provider, usage, started, error, redaction)
            raise
        if inspect.isawaitable(response):
            return finish_async(response, usage, started, stream)
        return finish(response, usage, started, stream)

    call.__keelwave__ = True  # type: ignore[attr-defined]
    setattr(resource, method, call)


class RecordingStream:
    """A provider's stream, passed through chunk by chunk; recorded once it ends."""

    def __init__(self, stream: Any, done: Callable, usage: Usage, read_chunk: Callable) -> None:
        self._stream = stream
        self._done = done
        self._usage = usage
        self._read_chunk = read_chunk
        self._recorded = False

    def __iter__(self) -> Any:
        try:
            for chunk in self._stream:
                self._read_chunk(chunk, self._usage)
                yield chunk
        except BaseException as error:
            self._finish(error)
            raise
        self._finish(None)

    def _finish(self, error: BaseException | None) -> None:
        if not self._recorded:
            self._recorded = True
            self._done(error)

    def __enter__(self) -> RecordingStream:
        return self

    def __exit__(self, *exc: Any) -> None:
        self._finish(None)
        close = getattr(self._stream, "close", None)
        if close is not None:
            close()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._stream, name)


class AsyncRecordingStream(RecordingStream):
    async def __aiter__(self) -> Any:  # type: ignore[override]
        try:
            async for chunk in self._stream:
                self._read_chunk(chunk, self._usage)
                yield chunk
        except BaseException as error:
            self._finish(error)
            raise
        self._finish(None)

    async def __aenter__(self) -> AsyncRecordingStream:
        return self

    async def __aexit__(self, *exc: Any) -> None:
        self._finish(None)
        close = getattr(self._stream, "close", None)
        if close is not None:
            result = close()
            if inspect.isawaitable(result):
                await result
