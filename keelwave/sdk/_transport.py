"""The background sender: the agent hands over events and goes on at full speed.

Events go into a bounded in-memory queue; a daemon thread takes what is
waiting and sends it in batches, one request per kind of event (run starts,
steps, model calls, finishes), up to ``IN_FLIGHT`` requests at a time over
keep-alive connections: the server answers only after commit, so one request
at a time would leave it idle. Order matters only in that a run is created
before it is finished; see ``_take``. How one batch is sent (retried, split
when refused) is ``_delivery``'s business.

Failures never reach the agent. When the queue is full, new events are
dropped and counted. ``flush()`` says whether everything recorded until then
was stored: False after its timeout, and False when anything since the last
flush was lost (refused by the server, a refused key, a full queue).

At close (``shutdown()``, interpreter exit) what could not be sent is
reported, or, with a spool directory, written there for the next client with
that directory, which resends it in the background (``_spool``).

After ``os.fork()`` the child has none of the parent's threads: a client made
before a fork (gunicorn, Celery prefork, a ``fork`` multiprocessing pool)
would queue events in the child that nothing sends. So the child rebuilds
its sender with an empty queue (what was queued before the fork is the
parent's to send), as OpenTelemetry's SDK does, and in a multiprocessing
child it also flushes when the process ends, since those skip ``atexit``.
"""

from __future__ import annotations

import logging
import os
import queue
import sys
import threading
import time
import weakref
from collections import deque

from keelwave.sdk._delivery import Delivery, Event, Poster
from keelwave.sdk._spool import Spool
from keelwave.sdk._validate import Problems

log = logging.getLogger("keelwave")

MAX_BATCH = 500  # steps or model calls in one request
MAX_ROUND = 16 * MAX_BATCH  # events taken from the queue for one round of requests
IN_FLIGHT = 4  # requests sent at once, each on its own connection
EXIT_TIMEOUT = 5.0  # how long a process's end waits for the server


class Transport:
    def __init__(self, endpoint: str, api_key: str, max_queue: int = 100_000,
                 timeout: float = 10.0, *, problems: Problems | None = None,
                 spool: Spool | None = None) -> None:  # fmt: skip
        self._poster = Poster(endpoint, api_key, timeout)  # raises ValueError for a bad URL
        self._problems = problems or Problems()
        self._spool = spool
        self._max_queue = max_queue
        self._dropped = 0
        self._closed = False
        self._start(resend=spool is not None)
        _transports.add(self)

    def _start(self, resend: bool) -> None:
        """Fresh state and threads: in the constructor, and in a forked child."""
        self._queue: deque[Event] = deque()
        self._taken: dict[int, Event] = {}  # taken from the queue, not yet settled
        self._unfed: list[Event] = []  # read from the spool, not yet queued
        self._feeding = resend
        self._lost = 0  # events lost since the last flush
        self._idle = threading.Condition()
        self._wakeup = threading.Event()
        self._delivery = Delivery(
            self._poster,
            self._problems,
            settle=self._settle,
            closing=lambda: self._closed,
            pause=self._pause,
            dropped=lambda: self._dropped,
        )
        threading.Thread(target=self._run, name="keelwave-transport", daemon=True).start()
        # Helpers for the extra requests in flight; daemons, so a server that is
        # down never keeps the agent's process from exiting.
        self._work: queue.SimpleQueue[tuple[list[Event], threading.Event]] = queue.SimpleQueue()
        for number in range(IN_FLIGHT - 1):
            threading.Thread(target=self._help, name=f"keelwave-transport-{number + 1}",
                             daemon=True).start()  # fmt: skip
        if resend:
            threading.Thread(target=self._resend, name="keelwave-spool", daemon=True).start()

    # -- the agent's side: cheap, never blocks, never raises -------------------

    def send(self, event: Event) -> None:
        if self._closed or len(self._queue) >= self._max_queue:
            self._dropped += 1
            self._lost += 1
            return
        was_empty = not self._queue
        self._queue.append(event)
        if was_empty:
            self._wakeup.set()

    def flush(self, timeout: float = 10.0) -> bool:
        """Wait until everything queued so far is settled; True if it was all stored.

        False after ``timeout``, or when anything since the previous flush was
        lost (its log line says why).
        """
        if not self._wait(timeout):
            return False
        with self._idle:
            lost, self._lost = self._lost, 0
        return not lost

    def _wait(self, timeout: float) -> bool:
        deadline = time.monotonic() + timeout
        self._wakeup.set()
        with self._idle:
            while self._queue or self._taken or self._feeding:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    return False
                self._idle.wait(min(remaining, 0.1))
        return True

    def close(self, timeout: float = EXIT_TIMEOUT) -> None:
        """Send what is queued (up to ``timeout``), then stop; spool or report the rest."""
        if self._closed:
            return
        self._wait(timeout)
        with self._idle:
            self._closed = True
            left = [*self._unfed, *self._taken.values(), *self._queue]  # oldest first
            self._queue.clear()
            self._taken.clear()
            self._unfed = []
            self._idle.notify_all()
        self._wakeup.set()
        if self._spool is not None:
            self._spool_left(left)
        elif left:
            log.warning("keelwave: %d events were not sent before exit (the server did not "
                        "answer; a spool directory would keep them for later)",
                        len(left))  # fmt: skip
        if self._dropped:
            log.warning("keelwave: %d events were dropped (the queue was full)", self._dropped)

    def _spool_left(self, left: list[Event]) -> None:
        assert self._spool is not None
        if left:
            path = self._spool.write(left)
            if path is None:  # said why; the claims stay, for a later process to take over
                return
            log.warning("keelwave: %d events were not sent before exit; written to %s, for "
                        "the next client that starts with this spool directory", len(left),
                        path)  # fmt: skip
        self._spool.release_all()  # what they held is stored, or in the new file

    @property
    def dropped(self) -> int:
        return self._dropped

    # -- the sender threads --------------------------------------------------------

    def _run(self) -> None:
        while not self._closed:
            if not self._queue:
                self._wakeup.wait(1.0)
                self._wakeup.clear()
                continue
            phases = self._take()
            try:
                for phase in phases:
                    self._deliver_together(phase)
            except Exception:  # a bug must not kill the sender, nor keep flush() waiting
                log.exception("keelwave: failed to send events")
                self._settle([e for phase in phases for batch in phase for e in batch], False)
        self._poster.close_connection()

    def _deliver_together(self, batches: list[list[Event]]) -> None:
        """Send the batches, up to IN_FLIGHT at once; return when all are settled."""
        done = []
        for batch in batches[1:]:
            settled = threading.Event()
            self._work.put((batch, settled))
            done.append(settled)
        if batches:
            self._delivery.deliver(batches[0])  # this thread sends one itself
        for settled in done:
            settled.wait()

    def _help(self) -> None:
        while True:
            batch, settled = self._work.get()
            try:
                self._delivery.deliver(batch)
            except Exception:  # a bug must not kill the helper
                log.exception("keelwave: failed to send events")
                self._settle(batch, False)
            finally:
                settled.set()

    def _take(self) -> list[list[list[Event]]]:
        """Everything waiting (up to a limit), as phases of requests in a safe order.

        Batching comes from the sender being busy: what queued up during one
        round goes out together in the next, with no artificial delay. Run
        starts, steps and model calls go first, side by side: steps and model
        calls may arrive before their run (the server takes them, and their
        identities make resends harmless). Finishes go once all of those are
        acknowledged, so a finish never overtakes its run's start.
        """
        with self._idle:
            taken = [self._queue.popleft() for _ in range(min(len(self._queue), MAX_ROUND))]
            self._taken.update((id(event), event) for event in taken)
        by_kind: dict[str, list[Event]] = {"run": [], "step": [], "ai": [], "finish": []}
        for event in taken:
            by_kind[event.kind].append(event)

        def batches(kind: str) -> list[list[Event]]:
            events = by_kind[kind]
            return [events[i : i + MAX_BATCH] for i in range(0, len(events), MAX_BATCH)]

        return [batches("run") + batches("step") + batches("ai"), batches("finish")]

    def _settle(self, events: list[Event], stored: bool) -> None:
        """``events`` are done with: stored, or lost for good (and already said so)."""
        if not self._closed:  # once closed, the claims are settled by close()
            for event in events:  # first: flush() returns with the spool files deleted
                if event.claim is not None:
                    event.claim.settled()
        with self._idle:
            for event in events:
                self._taken.pop(id(event), None)
            if not stored:
                self._lost += len(events)
            self._idle.notify_all()

    def _pause(self, seconds: float) -> None:
        """Wait before a retry; flush() and close() cut it short."""
        self._wakeup.wait(seconds)
        self._wakeup.clear()

    # -- resending a spool -------------------------------------------------------

    def _resend(self) -> None:
        """Queue the spooled events of this client's files, never filling the queue."""
        assert self._spool is not None
        try:
            for claim in self._spool.claims():
                with self._idle:  # atomic with close(): its events are fed, or given back
                    if self._closed:
                        self._spool.give_back(claim)
                        return
                    self._spool.hold(claim)
                    self._unfed = list(claim.events)
                while self._feed():
                    self._spool.refresh()
        except Exception:  # a bug must not keep flush() waiting
            log.exception("keelwave: failed to resend the spool")
        finally:
            with self._idle:
                self._feeding = False
                self._idle.notify_all()
        while self._spool.holding and not self._closed:  # until the claims are settled
            with self._idle:
                self._idle.wait(5.0)
            self._spool.refresh()

    def _feed(self) -> bool:
        """Move what fits of the spooled events into the queue; False when done."""
        with self._idle:
            if self._closed or not self._unfed:
                return False
            room = max(1, self._max_queue // 2) - len(self._queue)  # room left for the agent
            if room <= 0:
                self._idle.wait(0.5)
                return True
            self._queue.extend(self._unfed[:room])
            del self._unfed[:room]
        self._wakeup.set()
        return True

    # -- fork --------------------------------------------------------------------

    def _restart_in_child(self) -> None:
        if self._closed:
            return
        self._dropped = 0
        self._poster.forget_connections()
        if self._spool is not None:
            self._spool.forget()
        self._start(resend=False)
        _close_at_multiprocessing_exit(self)


# Every live transport, for the fork hook; weak, so a client can still be collected.
_transports: weakref.WeakSet[Transport] = weakref.WeakSet()


def _after_fork_in_child() -> None:
    for transport in list(_transports):
        transport._restart_in_child()


if hasattr(os, "register_at_fork"):  # POSIX
    os.register_at_fork(after_in_child=_after_fork_in_child)


def _close_at_multiprocessing_exit(transport: Transport) -> None:
    """In a multiprocessing child, flush when the child ends: it leaves by os._exit, so
    atexit never runs, but multiprocessing runs its own finalizers first. They are
    cleared right after the fork, so the finalizer is registered from an after-fork
    hook, which multiprocessing runs once it has cleared them."""
    util = sys.modules.get("multiprocessing.util")
    if util is not None:
        util.register_after_fork(transport, _register_finalizer)


def _register_finalizer(transport: Transport) -> None:
    from multiprocessing import util

    util.Finalize(None, _close, args=(weakref.ref(transport),), exitpriority=10)


def _close(ref: weakref.ref[Transport]) -> None:
    transport = ref()
    if transport is not None:
        transport.close(EXIT_TIMEOUT)
