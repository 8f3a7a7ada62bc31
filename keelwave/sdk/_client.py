"""The SDK's entry point: ``Keelwave``, its decorators and the run context manager.

Everything here runs in the agent's thread and is kept cheap: a step costs a
few microseconds of bookkeeping (binding arguments, canonical JSON, the
redaction screen, a hash) and a queue append; the network is the transport
thread's business.

The top of the SDK's import tree: this module uses the run, the run context
and the transport, and nothing else in the SDK imports it (runs and adapters
are handed the client's send and report functions instead), so there is no
cycle.

What is wrong in the code itself (a step type outside the protocol, a bad
name or tags given to a decorator) raises ValueError here, at decoration
time; what arrives at run time is checked by the run (see ``_validate``).
"""

from __future__ import annotations

import atexit
import contextvars
import functools
import inspect
import logging
import os
import time
import weakref
from collections.abc import Callable
from typing import Any, TypeVar

from keelwave.protocol import DEFAULT_STEP_TYPE, STEP_TYPES, TERMINATION_REASONS
from keelwave.sdk import _validate as check
from keelwave.sdk._canonical import canonical_json, fingerprint
from keelwave.sdk._context import current_run, current_step_index
from keelwave.sdk._delivery import Event, Send
from keelwave.sdk._errors import AgentStopped
from keelwave.sdk._redact import Redaction
from keelwave.sdk._redact import from_option as redaction_from_option
from keelwave.sdk._run import Run
from keelwave.sdk._spool import DEFAULT_MAX_BYTES, Spool
from keelwave.sdk._transport import EXIT_TIMEOUT, Transport

log = logging.getLogger("keelwave")

DEFAULT_ENDPOINT = "http://localhost:8080"
F = TypeVar("F", bound=Callable[..., Any])


class Keelwave:
    """Sends an agent's runs, steps and model calls to a keelwave server.

    ``api_key`` and ``endpoint`` default to ``KEELWAVE_API_KEY`` and
    ``KEELWAVE_ENDPOINT`` (else http://localhost:8080). Without a key the
    client does nothing at all (and says so once in the log): decorated
    functions run as if undecorated, and runs still have ids.

    ``spool_dir`` (default ``KEELWAVE_SPOOL_DIR``; off when neither is set)
    keeps what could not be sent before the process ended, up to
    ``spool_max_bytes`` in all, for the next client started with the same
    directory, endpoint and key, which resends it in the background.

    ``redact`` hides secrets before anything leaves the process: ``True`` (the
    default) the built-in rules (keys such as ``password`` or ``api_key``,
    values such as bearer tokens and ``sk-…`` keys), a :class:`Redaction` for
    more rules or a callback, ``False`` none (see docs/sdk.md, "Redaction").
    A step's input is fingerprinted as it is sent, redacted:
    ``fingerprint(name, client.redaction.canonical_json(input))`` (with
    ``redact=False``, ``canonical_json(input)``).
    """

    def __init__(
        self,
        api_key: str | None = None,
        endpoint: str | None = None,
        *,
        max_queue: int = 100_000,
        flush_at_exit: bool = True,
        spool_dir: str | os.PathLike | None = None,
        spool_max_bytes: int = DEFAULT_MAX_BYTES,
        redact: bool | Redaction = True,
    ) -> None:
        # Checked first: a wrong option is wrong on every run, so it raises ValueError.
        self.redaction: Redaction | None = redaction_from_option(redact)
        self.api_key = api_key if api_key is not None else os.environ.get("KEELWAVE_API_KEY")
        self.endpoint = (
            endpoint or os.environ.get("KEELWAVE_ENDPOINT") or DEFAULT_ENDPOINT
        ).rstrip("/")
        if spool_dir is None:
            spool_dir = os.environ.get("KEELWAVE_SPOOL_DIR") or None
        self._problems = check.Problems()  # each kind of problem is said once per client
        self._transport: Transport | None = None
        if not self.api_key:
            log.warning("keelwave: no API key (set KEELWAVE_API_KEY); nothing will be recorded")
        else:
            spool = None
            if spool_dir is not None:
                spool = Spool(spool_dir, self.endpoint, self.api_key, spool_max_bytes)
            try:
                self._transport = Transport(self.endpoint, self.api_key, max_queue=max_queue,
                                            problems=self._problems, spool=spool)  # fmt: skip
            except ValueError as error:
                log.warning("keelwave: %s; nothing will be recorded", error)
        if self._transport is not None and flush_at_exit:
            # A weak reference: registering the client must not keep it alive.
            atexit.register(_close_at_exit, weakref.ref(self))

    @property
    def enabled(self) -> bool:
        return self._transport is not None

    def _send(self, event: Event) -> None:
        if self._transport is not None:
            self._transport.send(event)

    def _report(self, kind: str, message: str) -> None:
        self._problems.warn(kind, message)

    def flush(self, timeout: float = 10.0) -> bool:
        """Block until everything recorded so far is sent; True if the server stored it all.

        False if ``timeout`` passed first, or if anything recorded since the
        previous flush was lost: refused by the server (a refused key, an
        event it would not take) or dropped because the queue was full. The
        log says which, once.
        """
        return self._transport.flush(timeout) if self._transport else True

    def shutdown(self, timeout: float = 10.0) -> None:
        """Send what is queued (up to ``timeout``) and stop the background sender.

        What is still unsent is written to the spool directory, if there is one.
        """
        if self._transport is not None:
            self._transport.close(timeout)

    # -- runs --------------------------------------------------------------

    def run(
        self,
        name: str,
        *,
        input: Any = None,
        metadata: dict[str, Any] | None = None,
        tags: list[str] | None = None,
        max_steps: int | None = None,
        stop_on_loop: bool = False,
        run_id: str | None = None,
    ) -> RunScope:
        """A run as a context manager (``with`` or ``async with``).

        It finishes ``clean`` when the block ends, ``error`` when an exception
        escapes (re-raised unchanged), or with the guard's reason when a guard
        stopped it. Inside another run it becomes that run's child.
        """
        return RunScope(self, name, dict(input=input, metadata=metadata, tags=tags,
                        max_steps=max_steps, stop_on_loop=stop_on_loop, run_id=run_id))  # fmt: skip

    def start_run(
        self,
        name: str,
        *,
        input: Any = None,
        metadata: dict[str, Any] | None = None,
        tags: list[str] | None = None,
        run_id: str | None = None,
    ) -> Run:
        """Open a run that you finish yourself with ``run.finish(...)``.

        For agents whose run does not fit one block of code (callbacks, a run
        handed between threads). It is not made the current run; a run never
        finished shows as running, then stalled, then timed out.
        """
        return Run(self._send, name, input=input, metadata=metadata, tags=tags, run_id=run_id,
                   report=self._report, redaction=self.redaction)  # fmt: skip

    def agent(
        self,
        name: str | None = None,
        *,
        max_steps: int | None = None,
        stop_on_loop: bool = False,
        tags: list[str] | None = None,
        metadata: dict[str, Any] | None = None,
    ) -> Callable[[F], F]:
        """Decorate an agent function: each call is a run (sync or async).

        A ``name`` or ``tags`` the server would refuse raise ValueError here.
        """
        tags = check.tags(tags)

        def decorate(func: F) -> F:
            run_name = check.name(func.__name__ if name is None else name, "name")
            binder = _Binder(func)
            options = dict(metadata=metadata, tags=tags, max_steps=max_steps,
                           stop_on_loop=stop_on_loop)  # fmt: skip

            if inspect.iscoroutinefunction(func):

                @functools.wraps(func)
                async def async_agent(*args: Any, **kwargs: Any) -> Any:
                    scope = RunScope(self, run_name, {**options, "input": binder(args, kwargs)})
                    async with scope:
                        result = await func(*args, **kwargs)
                        scope.output = result
                        return result

                return async_agent  # type: ignore[return-value]

            @functools.wraps(func)
            def sync_agent(*args: Any, **kwargs: Any) -> Any:
                scope = RunScope(self, run_name, {**options, "input": binder(args, kwargs)})
                with scope:
                    result = func(*args, **kwargs)
                    scope.output = result
                    return result

            return sync_agent  # type: ignore[return-value]

        return decorate

    # -- steps -------------------------------------------------------------

    def observe(
        self, name: str | None = None, *, step_type: str = DEFAULT_STEP_TYPE
    ) -> Callable[[F], F]:
        """Decorate a tool (sync or async): each call inside a run is a step.

        The tool's name is ``tool_name``, its arguments (bound to parameter
        names, defaults included, ``self``/``cls`` left out) are ``tool_input``,
        its return value ``tool_output``. For ``tool_call`` steps the
        fingerprint check runs, so a repeated call with the same input flags
        the run as looping. Outside a run the function is simply called.

        A ``step_type`` outside the protocol's, or a ``name`` the server would
        refuse, raise ValueError here, before the tool is ever called.
        """
        check.vocabulary(step_type, STEP_TYPES, "step_type")

        def decorate(func: F) -> F:
            tool_name = check.name(func.__name__ if name is None else name, "name")
            binder = _Binder(func)
            fingerprinted = step_type == "tool_call"

            if inspect.iscoroutinefunction(func):

                @functools.wraps(func)
                async def async_tool(*args: Any, **kwargs: Any) -> Any:
                    run = current_run.get()
                    if run is None or self._transport is None:
                        return await func(*args, **kwargs)
                    step = _Step(run, tool_name, step_type, binder(args, kwargs))
                    try:
                        result = await func(*args, **kwargs)
                    except BaseException as error:
                        step.done(None, error, fingerprinted)
                        raise
                    step.done(result, None, fingerprinted)
                    return result

                return async_tool  # type: ignore[return-value]

            @functools.wraps(func)
            def sync_tool(*args: Any, **kwargs: Any) -> Any:
                run = current_run.get()
                if run is None or self._transport is None:
                    return func(*args, **kwargs)
                step = _Step(run, tool_name, step_type, binder(args, kwargs))
                try:
                    result = func(*args, **kwargs)
                except BaseException as error:
                    step.done(None, error, fingerprinted)
                    raise
                step.done(result, None, fingerprinted)
                return result

            return sync_tool  # type: ignore[return-value]

        return decorate

    # -- provider adapters ---------------------------------------------------

    # The adapters get the send function, not the client, so they never import this
    # module; they are imported only when used, so ``import keelwave`` stays lean.

    def wrap_openai(self, client: Any, *, capture_content: bool = False) -> Any:
        """Record every chat/responses call of an OpenAI client (sync or async); with
        ``capture_content``, its prompt and response too (redacted)."""
        from keelwave.sdk._adapters.openai import wrap_openai

        return wrap_openai(
            self._sender(), client, self._report, self.redaction, capture_content=capture_content
        )

    def wrap_anthropic(self, client: Any, *, capture_content: bool = False) -> Any:
        """Record every messages call of an Anthropic client (sync or async); with
        ``capture_content``, its prompt and response too (redacted)."""
        from keelwave.sdk._adapters.anthropic import wrap_anthropic

        return wrap_anthropic(
            self._sender(), client, self._report, self.redaction, capture_content=capture_content
        )

    def _sender(self) -> Send | None:
        # None when nothing is recorded: a wrapped call then costs only the wrapper.
        return self._send if self.enabled else None


class _Step:
    """One observed call in progress: index taken, input redacted and hashed, clock running."""

    __slots__ = ("run", "name", "step_type", "index", "input_json", "started", "started_at",
                 "token")  # fmt: skip

    def __init__(self, run: Run, name: str, step_type: str, arguments: dict[str, Any]) -> None:
        self.run = run
        self.name = name
        self.step_type = step_type
        self.index = run.next_step_index()  # may raise MaxStepsExceeded: the tool never runs
        self.input_json = run._payload(arguments)  # redacted here: it is fingerprinted
        self.started_at = time.time()
        self.token = current_step_index.set(self.index)
        self.started = time.perf_counter()

    def done(self, result: Any, error: BaseException | None, fingerprinted: bool) -> None:
        duration_ms = (time.perf_counter() - self.started) * 1000
        try:
            current_step_index.reset(self.token)
        except ValueError:  # finished in another context (a generator, a callback): harmless
            pass
        output_json = None if error is not None else canonical_json(result)
        if self.step_type in ("think", "replan"):
            content = None if result is None else str(result)
            self.run._send_step(self.index, self.step_type, None, None, None, content,
                                duration_ms, error, self.started_at)  # fmt: skip
            return
        self.run._send_step(self.index, self.step_type, self.name, self.input_json, output_json,
                            None, duration_ms, error, self.started_at)  # fmt: skip
        if fingerprinted and error is None:
            # Raises LoopDetected when the run has stop_on_loop and this call repeats one.
            self.run._check(fingerprint(self.name, self.input_json), self.index)


class RunScope:
    """``with client.run(...) as run`` / ``async with``; what @client.agent uses."""

    def __init__(self, client: Keelwave, name: str, options: dict[str, Any]) -> None:
        self._client = client
        self._name = name
        self._options = options
        self._token: contextvars.Token | None = None
        self.run: Run | None = None
        self.output: Any = None

    def __enter__(self) -> Run:
        self.run = Run(self._client._send, self._name, parent=current_run.get(),
                       report=self._client._report, redaction=self._client.redaction,
                       **self._options)  # fmt: skip
        self._token = current_run.set(self.run)
        return self.run

    def __exit__(self, exc_type: Any, exc: BaseException | None, tb: Any) -> bool:
        assert self.run is not None and self._token is not None
        current_run.reset(self._token)
        if exc is None:
            self.run.finish("clean", output=self.output)
        elif isinstance(exc, AgentStopped) and exc.termination_reason in TERMINATION_REASONS:
            self.run.finish(exc.termination_reason, error=exc)
        elif isinstance(exc, Exception):
            self.run.finish("error", error=exc)
        else:  # KeyboardInterrupt, SystemExit, cancellation: the run did end badly
            self.run.finish("error", error=exc)
        return False  # never swallow the agent's exception

    async def __aenter__(self) -> Run:
        return self.__enter__()

    async def __aexit__(self, exc_type: Any, exc: BaseException | None, tb: Any) -> bool:
        return self.__exit__(exc_type, exc, tb)


class _Binder:
    """Turns a call's arguments into ``{parameter: value}``, fast for plain signatures."""

    def __init__(self, func: Callable[..., Any]) -> None:
        try:
            self._signature: inspect.Signature | None = inspect.signature(func)
        except (TypeError, ValueError):
            self._signature = None
            return
        params = list(self._signature.parameters.values())
        self._skip_first = bool(params) and params[0].name in ("self", "cls")
        simple = all(p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY) for p in params)
        self._names = [p.name for p in params] if simple else None
        self._defaults = {p.name: p.default for p in params if p.default is not p.empty}

    def __call__(self, args: tuple, kwargs: dict[str, Any]) -> dict[str, Any]:
        if self._signature is None:
            return {"args": list(args), "kwargs": kwargs}
        if self._names is not None and len(args) <= len(self._names):
            bound = dict(self._defaults)
            bound.update(zip(self._names, args, strict=False))
            bound.update(kwargs)
        else:
            try:
                arguments = self._signature.bind(*args, **kwargs)
            except TypeError:  # the call itself is wrong; the function will say so
                return {"args": list(args), "kwargs": kwargs}
            arguments.apply_defaults()
            bound = dict(arguments.arguments)
        if self._skip_first and args:
            bound.pop(next(iter(self._signature.parameters)), None)
        return bound


def _close_at_exit(ref: weakref.ref) -> None:
    client = ref()
    if client is not None:
        client.shutdown(timeout=EXIT_TIMEOUT)
