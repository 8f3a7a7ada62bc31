"""Alert delivery: what is in the outbox (alert_events) reaches a real HTTP receiver at
least once, signed, with a delivery id stable across retries; a receiver that fails is
retried, one that hangs holds up nobody else, a redirect is not followed, a private
address is refused at delivery time too; a kill -9 of ``keelwave serve`` loses nothing,
and two servers send each event once. Slack messages keep to Slack's documented shape.

The events are inserted with SQL (the evaluator that fires them has its own tests),
with bodies made by ``render_body``, as the evaluator makes them.
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import json
import signal
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path

import psycopg
import pytest
from aiohttp import web
from conftest import Project, make_settings, query
from psycopg_pool import AsyncConnectionPool
from serve_process import ServeProcess, free_port

from keelwave import __version__
from keelwave.server.alerts import delivery
from keelwave.server.alerts.delivery import DELIVERER, Deliverer
from keelwave.server.alerts.destinations import (
    DestinationRefused,
    GuardedResolver,
    check_url,
    check_url_async,
    render_body,
    signature,
    slack_message,
)
from keelwave.server.app import create_app

PRIVATE_OK = {"KEELWAVE_ALERTS_ALLOW_PRIVATE_DESTINATIONS": "true"}
DEADLINE = 30.0  # seconds; generous: polls end as soon as what they wait for is there


# --- a real receiver ---------------------------------------------------------------


@dataclass
class Received:
    method: str
    path: str
    headers: dict[str, str]
    body: bytes


class Receiver:
    """An HTTP server on a free port that records what it gets. It answers the
    statuses in ``answers`` in turn, then 200; ``hang``: it never answers."""

    def __init__(self, answers: tuple[int, ...] = (), hang: bool = False, port: int = 0) -> None:
        self.answers = list(answers)
        self.hang = hang
        self.port = port
        self.requests: list[Received] = []
        self._release = asyncio.Event()
        self._runner: web.AppRunner | None = None

    async def start(self) -> Receiver:
        app = web.Application()
        app.router.add_route("*", "/{tail:.*}", self._handle)
        self._runner = web.AppRunner(app, access_log=None, shutdown_timeout=1)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", self.port)
        await site.start()
        self.port = self._runner.addresses[0][1]
        return self

    def url(self, path: str = "/hook", host: str = "127.0.0.1") -> str:
        return f"http://{host}:{self.port}{path}"

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        body = await request.read()
        self.requests.append(Received(request.method, request.path, dict(request.headers), body))
        if self.hang:
            await self._release.wait()
        status = self.answers.pop(0) if self.answers else 200
        if 300 <= status < 400:
            return web.Response(status=status, headers={"Location": self.url("/elsewhere")})
        return web.Response(status=status, text="ok" if status < 300 else "receiver says no")

    async def close(self) -> None:
        self._release.set()
        if self._runner is not None:
            await self._runner.cleanup()


@pytest.fixture
async def receivers() -> AsyncIterator[Callable[..., Awaitable[Receiver]]]:
    started: list[Receiver] = []

    async def start(*args, **kwargs) -> Receiver:
        receiver = await Receiver(*args, **kwargs).start()
        started.append(receiver)
        return receiver

    yield start
    for receiver in started:
        await receiver.close()


@pytest.fixture
async def pool(db_url: str) -> AsyncIterator[AsyncConnectionPool]:
    async with AsyncConnectionPool(
        db_url, min_size=1, max_size=4, kwargs={"autocommit": True}, open=False
    ) as opened:
        yield opened


@pytest.fixture
async def deliverers(pool: AsyncConnectionPool) -> AsyncIterator[Callable[..., Deliverer]]:
    """Start Deliverers on the test's pool; stopped when the test ends."""
    started: list[Deliverer] = []

    def start(allow_private: bool = True, **kwargs) -> Deliverer:
        deliverer = Deliverer(pool, allow_private=allow_private, **kwargs)
        deliverer.start()
        started.append(deliverer)
        return deliverer

    yield start
    for deliverer in started:
        await deliverer.stop()


@pytest.fixture(autouse=True)
def empty_outbox(db_url: str):
    """Each test sees only its own events: what one leaves pending is not sent later."""
    yield
    execute(db_url, "DELETE FROM alert_events")


# --- outbox rows, as the evaluator writes them -------------------------------------


def execute(db_url: str, sql: str, params: tuple = ()) -> None:
    with psycopg.connect(db_url, autocommit=True) as conn:
        conn.execute(sql, params)


def add_destination(
    db_url: str, project: Project, url: str, kind: str = "webhook", secret: str | None = None
) -> uuid.UUID:
    [(destination_id,)] = query(
        db_url,
        "INSERT INTO alert_destinations (project_id, name, kind, url, secret) "
        "VALUES (%s, %s, %s, %s, %s) RETURNING id",
        (project.id, f"to {url}", kind, url, secret),
    )
    return destination_id


def event_json(project: Project, event_id: uuid.UUID, **changes) -> dict:
    run_id = str(uuid.uuid4())
    return {
        "id": str(event_id),
        "rule": {"id": str(uuid.uuid4()), "name": "Too many steps"},
        "state": "firing",
        "project": project.name,
        "agent_name": "researcher",
        "run_id": run_id,
        "metric": "steps",
        "value": 120,
        "threshold": 100,
        "at": "2026-12-01T10:00:00Z",
        "url": f"http://localhost:8080/runs/{run_id}",
    } | changes


def add_event(
    db_url: str,
    project: Project,
    destination_id: uuid.UUID,
    kind: str = "webhook",
    fired_minutes_ago: float = 0,
) -> tuple[uuid.UUID, bytes]:
    event_id = uuid.uuid4()
    body, content_type = render_body(kind, event_json(project, event_id))
    execute(
        db_url,
        "INSERT INTO alert_events (id, project_id, rule_name, destination_id, state, agent_name, "
        "metric, value, threshold, fired_at, body, content_type) VALUES (%s, %s, 'Too many steps', "
        "%s, 'firing', 'researcher', 'steps', '120', '100', "
        "now() - make_interval(secs => %s), %s, %s)",
        (event_id, project.id, destination_id, fired_minutes_ago * 60, body, content_type),
    )
    return event_id, body


def event(db_url: str, event_id: uuid.UUID) -> dict:
    [row] = query(
        db_url,
        "SELECT delivery_state, attempts, lease_until, delivered_at, last_error "
        "FROM alert_events WHERE id = %s",
        (event_id,),
    )
    return dict(
        zip(("state", "attempts", "lease_until", "delivered_at", "last_error"), row, strict=True)
    )


def attempts(db_url: str, event_id: uuid.UUID) -> list[tuple]:
    return query(
        db_url,
        "SELECT attempt, status, error FROM alert_attempts WHERE event_id = %s ORDER BY attempt",
        (event_id,),
    )


async def until(check: Callable[[], object], what: str, deadline: float = DEADLINE):
    """Poll ``check`` (letting the receiver answer meanwhile) until it is truthy."""
    give_up = time.monotonic() + deadline
    while time.monotonic() < give_up:
        if result := check():
            return result
        await asyncio.sleep(0.05)
    raise AssertionError(f"still waiting for {what} after {deadline:.0f} s")


def delivered(db_url: str, event_id: uuid.UUID) -> Callable[[], bool]:
    return lambda: event(db_url, event_id)["state"] == "delivered"


# --- delivery ----------------------------------------------------------------------


async def test_the_receiver_gets_the_exact_body_signed_with_the_event_id(
    db_url: str, project: Project, receivers, deliverers
) -> None:
    receiver = await receivers()
    signed = add_destination(db_url, project, receiver.url(), secret="s3cret-ü")
    unsigned = add_destination(db_url, project, receiver.url("/plain"))
    signed_id, signed_body = add_event(db_url, project, signed)
    unsigned_id, unsigned_body = add_event(db_url, project, unsigned)
    deliverers()
    await until(lambda: len(receiver.requests) == 2, "both deliveries")
    await until(delivered(db_url, signed_id), "the signed event delivered")
    await until(delivered(db_url, unsigned_id), "the unsigned event delivered")

    by_id = {request.headers["X-Keelwave-Delivery"]: request for request in receiver.requests}
    first, second = by_id[str(signed_id)], by_id[str(unsigned_id)]
    assert (first.method, first.path, first.body) == ("POST", "/hook", signed_body)
    assert json.loads(first.body)["id"] == str(signed_id)
    expected = hmac.new("s3cret-ü".encode(), signed_body, hashlib.sha256).hexdigest()
    assert first.headers["X-Keelwave-Signature"] == f"sha256={expected}"
    assert first.headers["Content-Type"] == "application/json"
    assert first.headers["User-Agent"] == f"keelwave/{__version__}"
    assert second.body == unsigned_body
    assert "X-Keelwave-Signature" not in second.headers

    state = event(db_url, signed_id)
    assert state["attempts"] == 1 and state["lease_until"] is None
    assert state["delivered_at"] is not None and state["last_error"] is None
    assert attempts(db_url, signed_id) == [(1, 200, None)]


async def test_500_twice_then_200_is_sent_three_times_with_one_delivery_id(
    db_url: str, project: Project, receivers, deliverers
) -> None:
    receiver = await receivers(answers=(500, 500))
    event_id, body = add_event(db_url, project, add_destination(db_url, project, receiver.url()))
    deliverer = deliverers()
    await until(delivered(db_url, event_id), "the third attempt to deliver")

    assert [request.headers["X-Keelwave-Delivery"] for request in receiver.requests] == [
        str(event_id)
    ] * 3
    assert all(request.body == body for request in receiver.requests)
    assert attempts(db_url, event_id) == [
        (1, 500, "HTTP 500: receiver says no"),
        (2, 500, "HTTP 500: receiver says no"),
        (3, 200, None),
    ]
    # Delivered is final: more rounds (and a stop) send nothing more.
    assert await deliverer.round() == 0
    await deliverer.stop()
    assert len(receiver.requests) == 3
    assert event(db_url, event_id)["attempts"] == 3


async def test_a_hanging_receiver_times_out_and_holds_up_nobody(
    db_url: str, project: Project, receivers, deliverers
) -> None:
    hanging = await receivers(hang=True)
    prompt = await receivers()
    deliverer = deliverers(attempt_timeout=2)
    stuck_id, _ = add_event(db_url, project, add_destination(db_url, project, hanging.url()))
    deliverer.wake()
    await until(lambda: hanging.requests, "the hanging receiver to be called")

    # While that attempt hangs, an event to another receiver goes out at once.
    quick_id, quick_body = add_event(
        db_url, project, add_destination(db_url, project, prompt.url())
    )
    deliverer.wake()
    await until(delivered(db_url, quick_id), "the other event delivered")
    assert [request.body for request in prompt.requests] == [quick_body]
    assert attempts(db_url, stuck_id) == []  # the first attempt is still hanging

    await until(lambda: attempts(db_url, stuck_id), "the hanging attempt to time out")
    [(number, status, error)] = attempts(db_url, stuck_id)[:1]
    assert (number, status, error) == (1, None, "no answer within 2 s")
    state = event(db_url, stuck_id)
    assert state["state"] == "pending" and state["last_error"] == "no answer within 2 s"


async def test_an_event_deleted_while_it_is_sent_is_let_go_quietly(
    db_url: str, project: Project, receivers, deliverers, caplog
) -> None:
    """Deleting a run (an erasure request) deletes the alert events about it, also one
    whose delivery is under way: its attempt is then not recorded, and no warning says
    that the database refused it."""
    hanging = await receivers(hang=True)
    deliverer = deliverers(attempt_timeout=1)
    event_id, _ = add_event(db_url, project, add_destination(db_url, project, hanging.url()))
    deliverer.wake()
    await until(lambda: hanging.requests, "the receiver to be called")
    execute(db_url, "DELETE FROM alert_events WHERE id = %s", (event_id,))
    with caplog.at_level("INFO", logger="keelwave"):
        await asyncio.sleep(2.5)  # the attempt times out, and its outcome has no event
    assert attempts(db_url, event_id) == []
    assert not [r for r in caplog.records if r.levelname in ("WARNING", "ERROR")], caplog.text


async def test_a_redirect_is_not_followed(
    db_url: str, project: Project, receivers, deliverers
) -> None:
    receiver = await receivers(answers=(302,))
    event_id, _ = add_event(db_url, project, add_destination(db_url, project, receiver.url()))
    deliverers()
    await until(lambda: attempts(db_url, event_id), "the first attempt")
    [(_, status, error)] = attempts(db_url, event_id)[:1]
    assert status == 302
    assert error == f"HTTP 302: redirects are not followed (to {receiver.url('/elsewhere')})"
    assert event(db_url, event_id)["state"] == "pending"  # retried later, as any failure
    assert [request.path for request in receiver.requests] == ["/hook"]


async def test_private_addresses_are_refused_at_delivery_time(
    db_url: str, project: Project, receivers, deliverers
) -> None:
    receiver = await receivers()
    by_name, _ = add_event(
        db_url, project, add_destination(db_url, project, receiver.url(host="localhost"))
    )
    literal, _ = add_event(db_url, project, add_destination(db_url, project, receiver.url()))
    deliverers(allow_private=False)
    for event_id, where in ((by_name, "localhost, which resolves to "), (literal, "127.0.0.1 (")):
        await until(lambda event_id=event_id: attempts(db_url, event_id), "a refused attempt")
        [(_, status, error)] = attempts(db_url, event_id)[:1]
        assert status is None
        assert error.startswith(f"url: alerts may not go to {where}")
        assert "(a loopback address)" in error
        assert "KEELWAVE_ALERTS_ALLOW_PRIVATE_DESTINATIONS=true" in error
        assert event(db_url, event_id)["state"] == "pending"
    assert receiver.requests == []


async def test_the_resolver_checks_every_address_it_resolves() -> None:
    with pytest.raises(DestinationRefused, match=r"localhost, which resolves to .*loopback"):
        await GuardedResolver(allow_private=False).resolve("localhost", 80)
    with pytest.raises(DestinationRefused, match="cloud metadata"):
        await GuardedResolver(allow_private=False).resolve("metadata.google.internal", 80)
    resolved = await GuardedResolver(allow_private=True).resolve("localhost", 80)
    assert {result["host"] for result in resolved} <= {"127.0.0.1", "::1"}


async def test_an_event_gives_up_after_an_hour_or_without_its_destination(
    db_url: str, project: Project, receivers, deliverers
) -> None:
    receiver = await receivers(answers=(500,))
    old_id, _ = add_event(
        db_url, project, add_destination(db_url, project, receiver.url()), fired_minutes_ago=70
    )
    gone = add_destination(db_url, project, receiver.url("/gone"))
    orphan_id, _ = add_event(db_url, project, gone)
    execute(db_url, "DELETE FROM alert_destinations WHERE id = %s", (gone,))
    deliverers()
    await until(lambda: event(db_url, old_id)["state"] == "failed", "the old event to fail")
    await until(lambda: event(db_url, orphan_id)["state"] == "failed", "the orphan to fail")
    assert event(db_url, old_id)["last_error"] == "HTTP 500: receiver says no"
    assert event(db_url, orphan_id)["last_error"] == "its destination was deleted"
    assert [request.path for request in receiver.requests] == ["/hook"]


async def test_a_test_send_goes_out_at_once_with_the_same_checks(receivers) -> None:
    receiver = await receivers()
    destination = {"kind": "slack", "url": receiver.url(), "secret": "k", "project": "demo"}
    sent = await delivery.send_test(
        make_settings(alerts_allow_private_destinations=True), destination
    )
    assert sent["delivered"] is True and sent["status"] == 200 and sent["error"] is None
    assert sent["duration_ms"] >= 0
    [request] = receiver.requests
    message = json.loads(request.body)
    assert_slack_shape(message)
    assert "Test alert" in message["blocks"][0]["text"]["text"]
    assert request.headers["X-Keelwave-Signature"] == signature("k", request.body)

    refused = await delivery.send_test(make_settings(), destination)
    assert refused["delivered"] is False and refused["status"] is None
    assert "(a loopback address)" in refused["error"]
    assert len(receiver.requests) == 1


async def test_the_app_runs_a_deliverer(
    db_url: str, project: Project, receivers, aiohttp_server
) -> None:
    receiver = await receivers()
    app = create_app(make_settings(alerts_allow_private_destinations=True), db_url)
    await aiohttp_server(app)
    assert isinstance(app[DELIVERER], Deliverer)
    event_id, body = add_event(db_url, project, add_destination(db_url, project, receiver.url()))
    app[DELIVERER].wake()
    await until(delivered(db_url, event_id), "the app's deliverer to deliver")
    assert [request.body for request in receiver.requests] == [body]


# --- real servers: kill -9, and two of them ----------------------------------------


async def serve(db_url: str, log: Path, *args: str) -> ServeProcess:
    # In a thread: the receiver, on this event loop, answers while the server starts.
    return await asyncio.to_thread(
        ServeProcess, "--database-url", db_url, *args, env=PRIVATE_OK, log=log
    )


async def test_kill_9_before_delivery_delivers_after_the_restart(
    db_url: str, project: Project, receivers, tmp_path: Path
) -> None:
    port = free_port()  # the receiver is down: nothing listens here yet
    event_id, body = add_event(
        db_url, project, add_destination(db_url, project, f"http://127.0.0.1:{port}/hook")
    )
    first = await serve(db_url, tmp_path / "first.log", "--workers", "1")
    try:
        # Killed between two attempts: the first failed, and is recorded.
        await until(
            lambda: (
                (state := event(db_url, event_id))["attempts"] >= 1 and state["lease_until"] is None
            ),
            "a failed attempt",
        )
    finally:
        first.kill()
    assert "could not connect" in event(db_url, event_id)["last_error"]
    receiver = await receivers(port=port)
    second = await serve(db_url, tmp_path / "second.log", "--workers", "1")
    try:
        await until(delivered(db_url, event_id), "delivery after the restart")
    finally:
        await asyncio.to_thread(second.stop, signal.SIGTERM)
        second.kill()
    [request] = receiver.requests
    assert request.headers["X-Keelwave-Delivery"] == str(event_id)
    assert request.body == body


async def test_two_servers_send_each_event_once(
    db_url: str, project: Project, receivers, tmp_path: Path
) -> None:
    receiver = await receivers()
    destination = add_destination(db_url, project, receiver.url(), secret="shared")
    servers = [await serve(db_url, tmp_path / f"serve{n}.log", "--workers", "2") for n in range(2)]
    try:
        sent = {}
        for _ in range(20):  # one by one, so that every process has some to claim
            event_id, body = add_event(db_url, project, destination)
            sent[str(event_id)] = body
            await asyncio.sleep(0.05)
        await until(
            lambda: (
                query(
                    db_url, "SELECT count(*) FROM alert_events WHERE delivery_state = 'delivered'"
                )[0][0]
                == 20
            ),
            "20 deliveries",
        )
    finally:
        for server in servers:
            await asyncio.to_thread(server.stop, signal.SIGTERM)
            server.kill()
    ids = [request.headers["X-Keelwave-Delivery"] for request in receiver.requests]
    assert sorted(ids) == sorted(sent)  # each once, none twice
    for request in receiver.requests:
        assert request.body == sent[request.headers["X-Keelwave-Delivery"]]
    assert query(db_url, "SELECT count(*), max(attempt) FROM alert_attempts a "
                 "JOIN alert_events e ON e.id = a.event_id") == [(20, 1)]  # fmt: skip


# --- where alerts may go -----------------------------------------------------------


@pytest.mark.parametrize(
    ("url", "reason"),
    [
        ("http://127.0.0.1/hook", "127.0.0.1 (a loopback address)"),
        ("http://10.1.2.3/", "10.1.2.3 (a private address)"),
        ("http://192.168.0.10:8080/", "(a private address)"),
        ("http://169.254.169.254/latest/meta-data/", "169.254.169.254 (a cloud metadata address)"),
        ("http://[fd00:ec2::254]/", "(a cloud metadata address)"),
        ("http://metadata.google.internal/", "(a cloud metadata service)"),
        ("http://[::1]:9000/", "::1 (a loopback address)"),
        ("http://[::ffff:10.0.0.1]/", "holding 10.0.0.1, a private address"),
        ("http://100.64.0.1/", "(a shared carrier-grade NAT address)"),
        ("http://0.0.0.0/", "(the unspecified address)"),
        ("http://224.0.0.1/", "(a multicast address)"),
        ("http://[fe80::1]/", "(a link-local address)"),
        ("https://localhost:8443/", "localhost, which resolves to"),
        ("http://2130706433/", "which resolves to 127.0.0.1 (a loopback address)"),
    ],
)
def test_private_destinations_are_refused(url: str, reason: str) -> None:
    with pytest.raises(DestinationRefused) as refused:
        check_url(url, allow_private=False)
    message = str(refused.value)
    assert message.startswith("url: alerts may not go to ") and reason in message
    assert message.endswith(
        "; set KEELWAVE_ALERTS_ALLOW_PRIVATE_DESTINATIONS=true to allow private destinations"
    )
    check_url(url, allow_private=True)  # the setting lets them through


@pytest.mark.parametrize(
    ("url", "problem"),
    [
        ("ftp://example.com/", "http or https, not ftp"),
        ("hooks.slack.com/services/x", "has no scheme"),
        ("http:///path", "has no host"),
        ("https://user:pass@93.184.216.34/", "may not carry credentials"),
        ("http://93.184.216.34:99999/", "not a usable URL"),
    ],
)
def test_malformed_destinations_are_refused_even_when_private_is_allowed(
    url: str, problem: str
) -> None:
    with pytest.raises(DestinationRefused, match=problem):
        check_url(url, allow_private=True)


def test_public_addresses_are_accepted() -> None:
    for url in (
        "https://93.184.216.34/hook",
        "http://93.184.216.34:8080/x?y=1",
        "https://[2606:2800:220:1:248:1893:25c8:1946]/hook",
    ):
        check_url(url, allow_private=False)


async def test_the_request_path_check_resolves_on_the_loop() -> None:
    with pytest.raises(DestinationRefused, match="localhost, which resolves to"):
        await check_url_async("http://localhost:1/", allow_private=False)
    await check_url_async("https://93.184.216.34/", allow_private=False)
    await check_url_async("http://localhost:1/", allow_private=True)


# --- what is sent ------------------------------------------------------------------

# Slack's documented shapes (docs.slack.dev, Block Kit reference and incoming webhooks):
# a message is {"text", "blocks"}; a header block holds plain_text of at most 150
# characters, a section block a text object of 1 to 3000, a context block 1 to 10
# elements; text objects are {"type": "plain_text" | "mrkdwn", "text", "emoji"?}.
SLACK_SAMPLE = {
    "text": "Danny Torrence left a 1 star review for your property.",
    "blocks": [
        {"type": "header", "text": {"type": "plain_text", "text": "A Heartfelt Header"}},
        {
            "type": "section",
            "text": {
                "type": "mrkdwn",
                "text": "Danny Torrence left the following review for your property:",
            },
        },
        {"type": "divider"},
        {
            "type": "context",
            "elements": [{"type": "mrkdwn", "text": "Posted by <@U123ABC> • Dec 5, 2024"}],
        },
    ],
}
BLOCK_KEYS = {
    "header": {"type", "text", "block_id"},
    "section": {"type", "text", "fields", "accessory", "block_id", "expand"},
    "context": {"type", "elements", "block_id"},
    "divider": {"type", "block_id"},
}


def assert_text_object(text: dict, most: int, kinds: tuple[str, ...] = ("plain_text", "mrkdwn")):
    assert set(text) <= {"type", "text", "emoji", "verbatim"}, text
    assert text["type"] in kinds, text
    assert isinstance(text["text"], str) and 1 <= len(text["text"]) <= most, text
    if "emoji" in text:
        assert text["type"] == "plain_text" and isinstance(text["emoji"], bool)


def assert_slack_shape(message: dict) -> None:
    assert set(message) <= {"text", "blocks"}, message
    assert isinstance(message["text"], str) and message["text"]
    assert isinstance(message["blocks"], list) and 1 <= len(message["blocks"]) <= 50
    for block in message["blocks"]:
        assert block["type"] in BLOCK_KEYS, block
        assert set(block) <= BLOCK_KEYS[block["type"]], block
        if block["type"] == "header":
            assert_text_object(block["text"], 150, ("plain_text",))
        elif block["type"] == "section":
            assert_text_object(block["text"], 3000)
        elif block["type"] == "context":
            assert 1 <= len(block["elements"]) <= 10
            for element in block["elements"]:
                assert_text_object(element, 3000)


def test_slack_messages_keep_to_slacks_documented_shape(project: Project) -> None:
    assert_slack_shape(SLACK_SAMPLE)  # the check accepts Slack's own example
    event_id = uuid.uuid4()
    body, content_type = render_body("slack", event_json(project, event_id))
    assert content_type == "application/json"
    message = json.loads(body)
    assert_slack_shape(message)
    header, section, context = message["blocks"]
    assert header["type"] == "header" and "Firing: Too many steps" in header["text"]["text"]
    assert section["text"]["type"] == "mrkdwn"
    details = section["text"]["text"]
    assert "researcher" in details and "120 (threshold 100)" in details
    run_url = event_json(project, event_id)["url"].rsplit("/", 1)[0]
    assert f"<{run_url}/" in details and "|Open in keelwave>" in details
    assert context["type"] == "context" and "2026-12-01T10:00:00Z" in json.dumps(context)
    assert "Too many steps" in message["text"] and "steps 120" in message["text"]

    resolved = slack_message(event_json(project, event_id, state="resolved", run_id=None))
    assert_slack_shape(resolved)
    assert "Resolved" in resolved["text"]


def test_slack_messages_escape_names_and_stay_within_limits(project: Project) -> None:
    hostile = event_json(
        project,
        uuid.uuid4(),
        rule={"id": None, "name": "<!channel> & " + "x" * 400},
        agent_name="<@U123> " + "é" * 5000,
        value=[0.123456789, "exact_loop"],
        threshold=None,
    )
    message = slack_message(hostile)
    assert_slack_shape(message)
    everything = json.dumps(message["blocks"][1:]) + message["text"]
    assert "<!channel>" not in everything and "<@U123>" not in everything  # no mentions
    assert "&lt;!channel&gt; &amp;" in everything
    assert "0.123457, exact_loop" in message["blocks"][1]["text"]["text"]
    assert len(message["blocks"][0]["text"]["text"]) <= 150


def test_a_webhook_receives_the_event_json() -> None:
    body_event = {"id": "e", "rule": {"id": "r", "name": "n"}, "state": "firing", "value": 1.5}
    body, content_type = render_body("webhook", body_event)
    assert (json.loads(body), content_type) == (body_event, "application/json")
    assert b" " not in body  # compact
    with pytest.raises(ValueError):
        render_body("email", body_event)


def test_the_signature_is_hmac_sha256_of_the_raw_body() -> None:
    # RFC 4231 test case 2.
    assert signature("Jefe", b"what do ya want for nothing?") == (
        "sha256=5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843"
    )
