"""Send what is in the outbox (alert_events), at least once.

Every server process runs a :class:`Deliverer` (every worker, every server on
the database): the outbox is shared, and leases keep two processes from sending
one event at the same time. A round:

1. claims due events in one short statement: pending, due (``next_attempt_at``),
   not leased by someone else; ``FOR UPDATE SKIP LOCKED`` so that processes
   claiming at once take different events. Claiming sets ``lease_until`` and
   counts the attempt, and commits before anything is sent: a process killed
   mid-send leaves a lease that runs out, and the event is sent again (at least
   once; receivers tell repeats apart by ``X-Keelwave-Delivery``, the event's id);
2. sends each claimed event in a task of its own, so a receiver that hangs
   holds up nothing but its own event (each attempt ends after
   ``attempt_timeout``, well within the lease), and the next round does not
   wait for it;
3. records each attempt (alert_attempts) and the event's fate in one
   statement: delivered on a 2xx; otherwise pending again after a backoff
   (exponential from 1 s, at most 5 minutes), or failed once the event is
   older than RETRY_FOR_SECONDS (so a receiver gets at least an hour to come back).

Rounds come on :meth:`Deliverer.wake` (the evaluator committed events) and every
POLL_SECONDS anyway (events of other processes, retries coming due, what was
pending before a restart). Like the other background jobs (store/periodic.py),
no error stops the loop.
"""

from __future__ import annotations

import asyncio
import logging
import random
import time
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import aiohttp
import psycopg
from aiohttp import web
from psycopg_pool import AsyncConnectionPool, PoolTimeout

from keelwave import __version__
from keelwave.server.alerts import destinations
from keelwave.server.alerts.destinations import DestinationRefused, GuardedResolver
from keelwave.server.store.periodic import stopped, woken
from keelwave.settings import Settings

log = logging.getLogger("keelwave.alerts")

ATTEMPT_TIMEOUT_SECONDS = 10.0  # one attempt, connecting included
LEASE_SECONDS = 30.0  # comfortably longer than an attempt and recording it
POLL_SECONDS = 0.5  # how often due events are looked for without a wake-up
CLAIM_AT_MOST = 50  # events claimed in one statement
IN_FLIGHT_AT_MOST = 100  # events being sent at once, by this process
FIRST_BACKOFF_SECONDS = 1.0
MAX_BACKOFF_SECONDS = 300.0
RETRY_FOR_SECONDS = 65 * 60  # an event older than this fails at its next failed attempt
STOP_GRACE_SECONDS = 2.0  # how long stop() lets sends in flight finish
ERROR_BODY_CHARS = 200  # what a failed answer's body adds to last_error
USER_AGENT = f"keelwave/{__version__}"

CLAIM = """
WITH due AS (
    SELECT id FROM alert_events
    WHERE delivery_state = 'pending' AND next_attempt_at <= now()
      AND (lease_until IS NULL OR lease_until < now())
    ORDER BY next_attempt_at
    LIMIT %(limit)s
    FOR UPDATE SKIP LOCKED
), claimed AS (
    UPDATE alert_events e
    SET lease_until = now() + make_interval(secs => %(lease)s), attempts = e.attempts + 1
    FROM due WHERE e.id = due.id
    RETURNING e.id, e.attempts, e.body, e.content_type, e.destination_id
)
SELECT c.id, c.attempts, c.body, c.content_type, d.url, d.secret
FROM claimed c LEFT JOIN alert_destinations d ON d.id = c.destination_id
"""
# The attempt, and what it makes of the event. A delivery settles the event even if
# its lease ran out and another process claimed it meanwhile; a failure only if no
# later attempt was claimed (that one has the last word). The times are the database's
# clock, read just before (CLOCK), and reckoned from it here: Citus refuses functions
# that are not IMMUTABLE (now(), a timestamptz plus an interval) inside a CASE.
CLOCK = "SELECT now()"
RECORD = """
WITH attempt AS (
    INSERT INTO alert_attempts (event_id, attempt, started_at, duration_ms, status, error)
    SELECT %(id)s, %(attempt)s, %(started_at)s, %(duration_ms)s, %(status)s, %(error)s
    -- Not for an event deleted meanwhile (its run was erased): nothing is left to record.
    WHERE EXISTS (SELECT 1 FROM alert_events WHERE id = %(id)s)
    ON CONFLICT DO NOTHING
)
UPDATE alert_events SET
    delivery_state = CASE
        WHEN %(delivered)s::boolean THEN 'delivered'
        WHEN %(give_up)s::boolean
             OR fired_at < %(retry_since)s::timestamptz THEN 'failed'
        ELSE 'pending' END,
    delivered_at = CASE WHEN %(delivered)s::boolean THEN %(now)s::timestamptz END,
    next_attempt_at = CASE WHEN %(delivered)s::boolean THEN next_attempt_at
                           ELSE %(next_at)s::timestamptz END,
    lease_until = NULL,
    last_error = %(error)s
WHERE id = %(id)s AND delivery_state = 'pending'
  AND (%(delivered)s::boolean OR attempts = %(attempt)s)
"""
# Sends cut short by a shutdown: due again at once, for whichever process is up.
RELEASE = """
UPDATE alert_events SET lease_until = NULL
WHERE id = ANY(%(ids)s) AND delivery_state = 'pending'
"""


@dataclass(frozen=True)
class Claimed:
    id: uuid.UUID
    attempt: int
    body: bytes
    content_type: str
    url: str | None  # None: the destination was deleted
    secret: str | None


@dataclass(frozen=True)
class Outcome:
    delivered: bool
    status: int | None
    error: str | None
    started_at: datetime
    duration_ms: float

    def as_dict(self) -> dict[str, Any]:
        return {
            "delivered": self.delivered,
            "status": self.status,
            "error": self.error,
            "duration_ms": round(self.duration_ms, 1),
        }


def backoff_seconds(attempt: int) -> float:
    """How long after failed attempt number ``attempt`` (1, 2, …) the next one comes:
    1 s, 2 s, 4 s … at most 5 minutes, give or take a tenth so that events that
    failed together do not all come back together."""
    base = min(MAX_BACKOFF_SECONDS, FIRST_BACKOFF_SECONDS * 2 ** min(attempt - 1, 20))
    return base * random.uniform(0.9, 1.1)


def headers_for(
    delivery_id: uuid.UUID, body: bytes, content_type: str, secret: str | None
) -> dict[str, str]:
    headers = {
        "Content-Type": content_type,
        "User-Agent": USER_AGENT,
        "X-Keelwave-Delivery": str(delivery_id),
    }
    if secret:
        headers["X-Keelwave-Signature"] = destinations.signature(secret, body)
    return headers


def delivery_session(allow_private: bool, attempt_timeout: float) -> aiohttp.ClientSession:
    """An HTTP session for deliveries: every address it connects to is checked
    (:class:`GuardedResolver`), and each attempt ends after ``attempt_timeout``."""
    connector = aiohttp.TCPConnector(
        resolver=GuardedResolver(allow_private),
        # Resolve (and check) for every new connection, never from a cache.
        use_dns_cache=False,
        limit=IN_FLIGHT_AT_MOST,
    )
    return aiohttp.ClientSession(
        connector=connector,
        timeout=aiohttp.ClientTimeout(total=attempt_timeout),
        trust_env=False,  # no proxy from the environment between the check and the receiver
        auto_decompress=False,
    )


async def send(
    session: aiohttp.ClientSession,
    allow_private: bool,
    delivery_id: uuid.UUID,
    url: str,
    secret: str | None,
    body: bytes,
    content_type: str,
) -> Outcome:
    """One attempt: POST ``body`` to ``url`` on a :func:`delivery_session`; never raises
    for what the receiver (or its address) does."""
    started_at = datetime.now(UTC)
    started = time.perf_counter()
    status: int | None = None
    error: str | None = None
    try:
        # Literal addresses never reach the session's resolver: checked here.
        destinations.check_url_form(url, allow_private)
        async with session.post(
            url,
            data=body,
            headers=headers_for(delivery_id, body, content_type, secret),
            allow_redirects=False,  # a redirect could point anywhere, inward too
        ) as response:
            status = response.status
            if not 200 <= status < 300:
                error = await _answer_error(response)
    except DestinationRefused as refused:
        error = str(refused)
    except TimeoutError:
        total = session.timeout.total
        error = f"no answer within {total:g} s" if total else "timed out"
    except aiohttp.ClientConnectorError as failed:
        error = f"could not connect: {failed}"
    except (aiohttp.ClientError, OSError) as failed:
        error = f"{type(failed).__name__}: {failed}" if str(failed) else type(failed).__name__
    duration_ms = (time.perf_counter() - started) * 1000
    return Outcome(error is None and status is not None, status, error, started_at, duration_ms)


async def send_test(
    settings: Settings, destination: Mapping[str, Any], link: str | None = None
) -> dict[str, Any]:
    """Send a test alert to ``destination`` (a row: kind, url, secret, and project, the
    project's name) once, now, with the same headers and checks as a real one; nothing
    is stored. ``link``: the dashboard (default: public_url, else http://HOST:PORT).
    Returns {"delivered", "status", "error", "duration_ms"}."""
    event = {
        "id": str(uuid.uuid4()),
        "rule": {"id": None, "name": "Test alert"},
        "state": "firing",
        "project": destination.get("project"),
        "agent_name": None,
        "run_id": None,
        "metric": "test",
        "value": None,
        "threshold": None,
        "at": datetime.now(UTC).isoformat().replace("+00:00", "Z"),
        "url": link or settings.public_url or f"http://{settings.host}:{settings.port}",
    }
    body, content_type = destinations.render_body(destination["kind"], event)
    allow_private = settings.alerts_allow_private_destinations
    async with delivery_session(allow_private, ATTEMPT_TIMEOUT_SECONDS) as session:
        outcome = await send(
            session, allow_private, uuid.UUID(event["id"]), destination["url"],
            destination.get("secret"), body, content_type,
        )  # fmt: skip
    return outcome.as_dict()


class Deliverer:
    """Sends due outbox events in the background of ``serve``: soon after :meth:`wake`,
    and every ``poll_seconds`` regardless."""

    def __init__(
        self,
        pool: AsyncConnectionPool,
        *,
        allow_private: bool,
        attempt_timeout: float = ATTEMPT_TIMEOUT_SECONDS,
        poll_seconds: float = POLL_SECONDS,
    ) -> None:
        self._pool = pool
        self._allow_private = allow_private
        self._attempt_timeout = attempt_timeout
        self._poll_seconds = poll_seconds
        self._wakeup = asyncio.Event()
        self._task: asyncio.Task | None = None
        self._session: aiohttp.ClientSession | None = None
        self._sending: dict[asyncio.Task, uuid.UUID] = {}  # sends in flight, by task

    def wake(self) -> None:
        """Events were committed: look for due ones now."""
        self._wakeup.set()

    def start(self) -> None:
        self._task = asyncio.create_task(self._run(), name="keelwave-alerts-delivery")

    async def stop(self) -> None:
        """Stop claiming; let sends in flight finish for a moment, then cut them short
        and release their leases so that another process sends them at once."""
        await stopped(self._task)
        if self._sending:
            _, unfinished = await asyncio.wait(list(self._sending), timeout=STOP_GRACE_SECONDS)
            cut = [self._sending[task] for task in unfinished if task in self._sending]
            for task in unfinished:
                task.cancel()
            await asyncio.gather(*unfinished, return_exceptions=True)
            if cut:
                try:
                    async with asyncio.timeout(STOP_GRACE_SECONDS), self._pool.connection() as conn:
                        await conn.execute(RELEASE, {"ids": cut})
                except (TimeoutError, psycopg.Error, PoolTimeout, OSError) as error:
                    log.debug("alert leases left to run out: %s", error)
        if self._session is not None:
            await self._session.close()
            self._session = None

    async def round(self) -> int:
        """Claim the events due now (as many as there is room for) and start sending
        each; return how many were claimed."""
        room = min(CLAIM_AT_MOST, IN_FLIGHT_AT_MOST - len(self._sending))
        if room <= 0:
            return 0
        async with self._pool.connection() as conn:
            rows = await (
                await conn.execute(CLAIM, {"limit": room, "lease": LEASE_SECONDS})
            ).fetchall()
        for row in rows:
            claimed = Claimed(*row)
            task = asyncio.create_task(self._deliver(claimed), name=f"keelwave-alert-{claimed.id}")
            self._sending[task] = claimed.id
            task.add_done_callback(self._sending.pop)
        return len(rows)

    def _client(self) -> aiohttp.ClientSession:
        if self._session is None or self._session.closed:
            self._session = delivery_session(self._allow_private, self._attempt_timeout)
        return self._session

    async def _deliver(self, claimed: Claimed) -> None:
        try:
            if claimed.url is None:
                outcome = Outcome(
                    False, None, "its destination was deleted", datetime.now(UTC), 0.0
                )
            else:
                outcome = await send(
                    self._client(), self._allow_private, claimed.id, claimed.url,
                    claimed.secret, claimed.body, claimed.content_type,
                )  # fmt: skip
            await self._record(claimed, outcome, give_up=claimed.url is None)
        except (psycopg.Error, PoolTimeout, OSError) as error:
            # Its lease runs out and it is sent again: at least once.
            log.warning("alert %s: attempt %d not recorded: %s", claimed.id, claimed.attempt, error)
        except Exception:  # never let a bug end a delivery task silently
            log.exception("alert %s: delivery failed", claimed.id)

    async def _record(self, claimed: Claimed, outcome: Outcome, give_up: bool) -> None:
        async with self._pool.connection() as conn:
            [(now,)] = await (await conn.execute(CLOCK)).fetchall()
            await conn.execute(
                RECORD,
                {
                    "now": now,
                    "id": claimed.id,
                    "attempt": claimed.attempt,
                    "started_at": outcome.started_at,
                    "duration_ms": outcome.duration_ms,
                    "status": outcome.status,
                    "error": outcome.error,
                    "delivered": outcome.delivered,
                    "give_up": give_up,
                    "retry_since": now - timedelta(seconds=RETRY_FOR_SECONDS),
                    "next_at": now + timedelta(seconds=backoff_seconds(claimed.attempt)),
                },
            )
        if not outcome.delivered:
            log.info("alert %s: attempt %d failed: %s", claimed.id, claimed.attempt, outcome.error)

    async def _run(self) -> None:
        while True:
            await woken(self._wakeup, self._poll_seconds)
            self._wakeup.clear()
            try:
                while await self.round() == CLAIM_AT_MOST:
                    pass  # more are due: keep going
            except (psycopg.Error, PoolTimeout, OSError) as error:
                log.debug("alert delivery skipped a round: %s", error)
            except Exception:  # never let a bug stop the deliveries for good
                log.exception("alert delivery failed")


async def _answer_error(response: aiohttp.ClientResponse) -> str:
    if 300 <= response.status < 400:
        location = response.headers.get("Location")
        where = f" (to {location[:ERROR_BODY_CHARS]})" if location else ""
        return f"HTTP {response.status}: redirects are not followed{where}"
    try:
        start = await response.content.read(ERROR_BODY_CHARS * 4)
    except (aiohttp.ClientError, TimeoutError):
        start = b""
    text = " ".join(start.decode("utf-8", "replace").split())[:ERROR_BODY_CHARS]
    return f"HTTP {response.status}: {text}" if text else f"HTTP {response.status}"


# The process's deliverer, for the test-send route (and the evaluator's wake-ups).
DELIVERER = web.AppKey("alert_deliverer", Deliverer)
