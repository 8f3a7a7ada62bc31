"""One batch of events to the server, until each event is stored or known to be refused.

The server takes or refuses a request whole: one bad element and nothing of
it is stored (422 naming the element, ``[3].step_type``; 400 for a body it
cannot parse; 413 for one too large). Dropping the batch would lose hundreds
of good events for one bad one, so a refused batch is split and the parts
resent: the element the server named is tried on its own and the rest
together, or, with no element named, the two halves. Only the bad events are
lost in the end, each kind of loss logged once with the server's own words.

What the splitting cannot help is not split: a refused key (401, 403) or a
wrong endpoint (404, 405) refuses every part alike, so the batch is dropped
and said once. What is not an answer about the events (no connection, 408,
429, 5xx) is retried with backoff, honouring ``Retry-After``, for as long as
the client is not closing. No single event is ever retried on a 4xx.
"""

from __future__ import annotations

import http.client
import json
import random
import re
import threading
import time
import urllib.parse
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from keelwave.sdk._validate import Problems


@dataclass(slots=True)
class Event:
    """One thing to send: ``body`` is its JSON text, or a function the sender
    thread calls to make it (so the agent's thread does not pay for it).
    ``claim`` is the spool file it was read from, if it was."""

    kind: str  # "run", "step", "ai" or "finish"
    body: str | Callable[[], str]
    claim: Any = None

    def text(self) -> str:
        if not isinstance(self.body, str):
            self.body = self.body()  # made once, however often it is sent or split
        return self.body


# What a run and the adapters hand their events to: the client's queueing function.
# A plain callable, so neither needs the client (nor imports it) to record anything.
Send = Callable[[Event], None]


def dumps(value: object) -> str:
    """Compact JSON, ASCII only: a stray surrogate becomes an escape the server can name."""
    return json.dumps(value, separators=(",", ":"), default=str)


PATHS = {
    "run": "/v1/ingest/agent/runs",
    "step": "/v1/ingest/agent/steps",
    "ai": "/v1/ingest/ai",
    "finish": "/v1/ingest/agent/runs/finish",  # the batch form: one request, many finishes
}
NOUNS = {"run": "run start", "step": "step", "ai": "model call", "finish": "run finish"}
SPLIT = frozenset({400, 413, 422})  # about the events themselves: some may be fine
KEY_REFUSED = frozenset({401, 403})
RETRY = frozenset({408, 429})  # and every 5xx, and no answer at all
_ELEMENT = re.compile(r"^\[(\d+)\]\.?")


@dataclass(slots=True)
class Answer:
    status: int | None  # None: no answer at all (no connection, a timeout)
    retry_after: float | None = None
    code: str = ""
    message: str = ""
    field: str = ""
    element: int | None = None  # the position of the element the server named


class Poster:
    """POSTs over one keep-alive connection per thread (requests go out side by side)."""

    def __init__(self, endpoint: str, api_key: str, timeout: float) -> None:
        parsed = urllib.parse.urlsplit(endpoint)
        if parsed.scheme not in ("http", "https") or not parsed.hostname:
            raise ValueError(f"keelwave endpoint must be an http(s) URL, not {endpoint!r}")
        self.endpoint = endpoint
        self._https = parsed.scheme == "https"
        self._host = parsed.hostname
        self._port = parsed.port
        self._prefix = parsed.path.rstrip("/")
        self._headers = {
            "Authorization": f"Bearer {api_key}",
            "Content-Type": "application/json",
            "User-Agent": "keelwave-python",
        }
        self._timeout = timeout
        self._local = threading.local()

    def forget_connections(self) -> None:
        """After a fork: the parent's sockets are the parent's; the child opens its own."""
        self._local = threading.local()

    def post(self, path: str, body: bytes) -> Answer:
        for attempt in (1, 2):  # a kept-alive connection may have been closed by the server
            try:
                conn = self._connection()
                conn.request("POST", self._prefix + path, body=body, headers=self._headers)
                response = conn.getresponse()
                text = response.read()
            except (OSError, http.client.HTTPException):
                self.close_connection()
                if attempt == 2:
                    return Answer(None)
                continue
            answer = Answer(response.status, _seconds(response.getheader("Retry-After")))
            if response.status >= 400:
                _read_error(text, answer)
            return answer
        return Answer(None)

    def _connection(self) -> http.client.HTTPConnection:
        conn = getattr(self._local, "conn", None)
        if conn is None:
            cls = http.client.HTTPSConnection if self._https else http.client.HTTPConnection
            conn = self._local.conn = cls(self._host, self._port, timeout=self._timeout)
        return conn

    def close_connection(self) -> None:
        conn = getattr(self._local, "conn", None)
        if conn is not None:
            conn.close()
            self._local.conn = None


class Delivery:
    """Delivers batches through a Poster; tells ``settle`` what became of each event.

    ``settle(events, stored)`` is called once for every event that is either
    stored or lost for good; events it is never called for (the client closed
    while the server was away) are still the caller's, to keep or to spool.
    """

    def __init__(
        self,
        poster: Poster,
        problems: Problems,
        settle: Callable[[list[Event], bool], None],
        closing: Callable[[], bool],
        pause: Callable[[float], None],
        dropped: Callable[[], int],
    ) -> None:
        self._poster = poster
        self._problems = problems
        self._settle = settle
        self._closing = closing
        self._pause = pause
        self._dropped = dropped
        self._down_since: float | None = None

    def deliver(self, batch: list[Event]) -> bool:
        """Send ``batch`` (events of one kind); False if the client closed before the end."""
        kind = batch[0].kind
        parts = [batch]
        while parts:
            part = parts.pop()
            answer = self._answer(kind, part)
            if answer is None:
                return False
            status = answer.status or 0
            if status < 300:
                self._settle(part, True)
            elif status in SPLIT and len(part) > 1:
                parts.extend(_split(part, answer.element))
            else:
                self._settle(part, False)
                self._refused(kind, len(part), answer)
        return True

    def _answer(self, kind: str, part: list[Event]) -> Answer | None:
        """The server's answer about ``part``, retrying until there is one (None: closing)."""
        body = ("[" + ",".join(event.text() for event in part) + "]").encode(
            "utf-8", "surrogatepass"
        )  # a stray surrogate makes bytes the server refuses: a 400, split like any other
        delay = 0.5
        while True:
            answer = self._poster.post(PATHS[kind], body)
            status = answer.status
            if status is not None and status < 500 and status not in RETRY:
                self._reachable()
                return answer
            if self._down_since is None:
                self._down_since = time.monotonic()
                why = f"HTTP {status}" if status else "no connection"
                self._problems.warn("down", f"cannot reach the server ({why}); the agent keeps "
                                    "running, events are kept and retried")  # fmt: skip
            if self._closing():
                return None  # what is left is the caller's: reported or spooled at close
            wait = answer.retry_after
            if wait is None:
                wait = delay * random.uniform(0.8, 1.2)
            self._pause(min(wait, 30.0))
            delay = min(delay * 2, 30.0)

    def _reachable(self) -> None:
        if self._down_since is not None:
            down = time.monotonic() - self._down_since
            self._problems.log(f"server reachable again after {down:.0f} s; sending resumes")
            self._down_since = None
            if self._dropped():
                self._problems.log(f"{self._dropped()} events were dropped while it was "
                                   "unreachable (the queue was full)")  # fmt: skip

    def _refused(self, kind: str, count: int, answer: Answer) -> None:
        said = f"HTTP {answer.status}{' ' + answer.code if answer.code else ''}"
        if answer.message:
            said += f": {answer.message}"
        if answer.status in KEY_REFUSED:
            self._problems.warn("key", f"the server refused the API key ({said}); nothing is "
                                "recorded until the key is fixed (KEELWAVE_API_KEY)")  # fmt: skip
        elif answer.status in SPLIT:
            self._problems.warn(
                f"refused {answer.status} {answer.code} {answer.field} {kind}",
                f"the server refused a {NOUNS[kind]} ({said}); it is dropped, and other "
                f"{NOUNS[kind]}s refused for this reason will be dropped without another word",
            )
        else:
            self._problems.warn(f"refused {answer.status}", f"the server refused {count} "
                                f"{NOUNS[kind]}(s) ({said}); they are dropped. Is "
                                f"{self._poster.endpoint} a keelwave server?")  # fmt: skip


def _split(part: list[Event], element: int | None) -> list[list[Event]]:
    """The parts to resend, the one to send first last (they are popped from the end).

    The element the server named is tried alone (the server stops at the first
    bad one, so others may be bad too; and trying it alone never drops a good
    event on a wrong hint); with none named, the halves.
    """
    if element is not None and 0 <= element < len(part):
        return [part[:element] + part[element + 1 :], [part[element]]]
    middle = len(part) // 2
    return [part[middle:], part[:middle]]


def _read_error(text: bytes, answer: Answer) -> None:
    """The server's ``{"error": {code, message, field}}``, about one element of the batch."""
    try:
        error = json.loads(text)["error"]
        answer.code = str(error.get("code") or "")
        answer.message = str(error.get("message") or "")
        answer.field = str(error.get("field") or "")
    except (ValueError, KeyError, TypeError, AttributeError):
        answer.message = text[:200].decode("utf-8", "replace").strip()
        return
    match = _ELEMENT.match(answer.field)
    if match:
        answer.element = int(match.group(1))
        answer.field = answer.field[match.end() :]
        if answer.message.startswith(match.group(0)):
            answer.message = answer.message[match.end() :]


def _seconds(header: str | None) -> float | None:
    if not header:
        return None
    try:
        return max(0.0, float(header))
    except ValueError:
        return None
