"""The background sender: the agent hands over events and goes on at full speed.

Events go into a bounded in-memory queue; a daemon thread takes what is
waiting and sends it in batches, one request per kind of event (run starts,
steps, model calls, finishes), up to ``IN_FLIGHT`` requests at a time over
keep-alive connections: the server answers only after commit, so one request
at a time would leave it idle. Order matters only in that a run is created
before it is finished; see ``_take``.

Failures never reach the agent:

* connection errors, 429 and 5xx are retried with exponential backoff
  (honouring ``Retry-After``), forever while there is room in the queue;
  retries are safe because every event carries a stable identity (run id,
  run id + step index, model call id);
* other 4xx mean the event itself is wrong: it is dropped and logged once
  per kind of problem;
* when the queue is full, new events are dropped and counted; the count is
  logged when sending resumes and at exit.

``flush()`` waits until everything queued so far is sent (or a timeout);
the client flushes at interpreter exit.
"""

from __future__ import annotations

import http.client
import json
import logging
import queue
import random
import threading
import time
import urllib.parse
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass

log = logging.getLogger("keelwave")

MAX_BATCH = 500  # steps or model calls in one request
MAX_ROUND = 16 * MAX_BATCH  # events taken from the queue for one round of requests
IN_FLIGHT = 4  # requests sent at once, each on its own connection


@dataclass(slots=True)
class Event:
    """One thing to send: ``body`` is its JSON text, or a function the sender
    thread calls to make it (so the agent's thread does not pay for it)."""

    kind: str  # "run", "step", "ai" or "finish"
    body: str | Callable[[], str]

    def text(self) -> str:
        return self.body if isinstance(self.body, str) else self.body()


# What a run and the adapters hand their events to: the client's queueing function.
# A plain callable, so neither needs the client (nor imports it) to record anything.
Send = Callable[[Event], None]


_PATHS = {
    "run": "/v1/ingest/agent/runs",
    "step": "/v1/ingest/agent/steps",
    "ai": "/v1/ingest/ai",
    "finish": "/v1/ingest/agent/runs/finish",  # the batch form: one request, many finishes
}


class Transport:
    def __init__(self, endpoint: str, api_key: str, max_queue: int = 100_000,
                 timeout: float = 10.0) -> None:  # fmt: skip
        parsed = urllib.parse.urlsplit(endpoint)
        if parsed.scheme not in ("http", "https") or not parsed.hostname:
            raise ValueError(f"keelwave endpoint must be an http(s) URL, not {endpoint!r}")
        self._scheme = parsed.scheme
        self._host = parsed.hostname
        self._port = parsed.port
        self._prefix = parsed.path.rstrip("/")
        self._headers = {
            "Authorization": f"Bearer {api_key}",
            "Content-Type": "application/json",
            "User-Agent": "keelwave-python",
        }
        self._timeout = timeout
        self._max_queue = max_queue
        self._queue: deque[Event] = deque()
        self._wakeup = threading.Event()
        self._idle = threading.Condition()
        self._sending = 0  # events taken from the queue but not yet settled
        self._dropped = 0
        self._reported: set[str] = set()
        self._down_since: float | None = None
        self._closed = False
        self._local = threading.local()
        self._thread = threading.Thread(target=self._run, name="keelwave-transport", daemon=True)
        self._thread.start()
        # Helpers for the extra requests in flight; daemons, so a server that is
        # down never keeps the agent's process from exiting.
        self._work: queue.SimpleQueue[tuple[list[Event], threading.Event]] = queue.SimpleQueue()
        for number in range(IN_FLIGHT - 1):
            threading.Thread(target=self._help, name=f"keelwave-transport-{number + 1}",
                             daemon=True).start()  # fmt: skip

    # -- the agent's side: cheap, never blocks, never raises -------------------

    def send(self, event: Event) -> None:
        if self._closed or len(self._queue) >= self._max_queue:
            self._dropped += 1
            return
        was_empty = not self._queue
        self._queue.append(event)
        if was_empty:
            self._wakeup.set()

    def flush(self, timeout: float = 10.0) -> bool:
        """Wait until everything queued so far has been sent; False on timeout."""
        deadline = time.monotonic() + timeout
        self._wakeup.set()
        with self._idle:
            while self._queue or self._sending:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    return False
                self._idle.wait(min(remaining, 0.1))
        return True

    def close(self, timeout: float = 5.0) -> None:
        flushed = self.flush(timeout)
        self._closed = True
        self._wakeup.set()
        left = len(self._queue) + self._sending
        if not flushed and left:
            log.warning("keelwave: %d events were not sent before exit", left)
        if self._dropped:
            log.warning("keelwave: %d events were dropped (the queue was full)", self._dropped)

    @property
    def dropped(self) -> int:
        return self._dropped

    # -- the sender thread -----------------------------------------------------

    def _run(self) -> None:
        while not self._closed or self._queue:
            if not self._queue:
                self._wakeup.wait(1.0)
                self._wakeup.clear()
                continue
            try:
                for phase in self._take():
                    self._deliver_together(phase)
            except Exception:  # a bug must not kill the sender
                log.exception("keelwave: failed to send events")
            finally:
                with self._idle:
                    self._sending = 0
                    self._idle.notify_all()
        self._close_connection()

    def _deliver_together(self, batches: list[list[Event]]) -> None:
        """Send the batches, up to IN_FLIGHT at once; return when all are settled."""
        done = []
        for batch in batches[1:]:
            settled = threading.Event()
            self._work.put((batch, settled))
            done.append(settled)
        if batches:
            self._deliver(batches[0])  # this thread sends one itself
        for settled in done:
            settled.wait()
        with self._idle:
            self._sending -= sum(len(batch) for batch in batches)

    def _help(self) -> None:
        while True:
            batch, settled = self._work.get()
            try:
                self._deliver(batch)
            except Exception:  # a bug must not kill the helper
                log.exception("keelwave: failed to send events")
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
            self._sending = len(taken)
        by_kind: dict[str, list[Event]] = {"run": [], "step": [], "ai": [], "finish": []}
        for event in taken:
            by_kind[event.kind].append(event)

        def batches(kind: str) -> list[list[Event]]:
            events = by_kind[kind]
            return [events[i : i + MAX_BATCH] for i in range(0, len(events), MAX_BATCH)]

        return [batches("run") + batches("step") + batches("ai"), batches("finish")]

    def _deliver(self, batch: list[Event]) -> None:
        first = batch[0]
        # Every kind goes in batches: each ingest endpoint takes an array.
        path, body = _PATHS[first.kind], "[" + ",".join(e.text() for e in batch) + "]"
        delay = 0.5
        while True:
            status, retry_after = self._post(path, body.encode("utf-8"))
            if status is not None and status < 300:
                if self._down_since is not None:
                    log.warning("keelwave: server reachable again after %.0f s; sending resumes",
                                time.monotonic() - self._down_since)  # fmt: skip
                    self._down_since = None
                    if self._dropped:
                        log.warning("keelwave: %d events were dropped while it was unreachable",
                                    self._dropped)  # fmt: skip
                return
            if status is not None and status != 429 and status < 500:
                message = (f"keelwave: the server refused {len(batch)} {first.kind} event(s) "
                           f"with HTTP {status}; dropping them")  # fmt: skip
                self._report(f"http-{status}", message)
                return
            if self._down_since is None:
                self._down_since = time.monotonic()
                self._report("down", "keelwave: cannot reach the server "
                             f"({'HTTP ' + str(status) if status else 'no connection'}); "
                             "the agent keeps running, events are kept and retried")  # fmt: skip
            if self._closed:
                return  # exiting: what is left is reported by close()
            wait = retry_after if retry_after is not None else delay * random.uniform(0.8, 1.2)
            self._wakeup.wait(min(wait, 30.0))
            self._wakeup.clear()
            delay = min(delay * 2, 30.0)

    def _post(self, path: str, body: bytes) -> tuple[int | None, float | None]:
        for attempt in (1, 2):  # a kept-alive connection may have been closed by the server
            try:
                conn = self._connection()
                conn.request("POST", self._prefix + path, body=body, headers=self._headers)
                response = conn.getresponse()
                response.read()
                retry_after = response.getheader("Retry-After")
                return response.status, _seconds(retry_after)
            except (OSError, http.client.HTTPException):
                self._close_connection()
                if attempt == 2:
                    return None, None
        return None, None

    def _connection(self) -> http.client.HTTPConnection:
        conn = getattr(self._local, "conn", None)  # one keep-alive connection per thread
        if conn is None:
            cls = http.client.HTTPSConnection if self._scheme == "https" else \
                http.client.HTTPConnection  # fmt: skip
            conn = self._local.conn = cls(self._host, self._port, timeout=self._timeout)
        return conn

    def _close_connection(self) -> None:
        conn = getattr(self._local, "conn", None)
        if conn is not None:
            conn.close()
            self._local.conn = None

    def _report(self, kind: str, message: str) -> None:
        if kind not in self._reported:
            self._reported.add(kind)
            log.warning(message)


def _seconds(header: str | None) -> float | None:
    if not header:
        return None
    try:
        return max(0.0, float(header))
    except ValueError:
        return None


def dumps(value: object) -> str:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False, default=str)
