"""The dashboard's Alerts page in real headless Chromium (Debian's), against `keelwave serve`
(allowed to send to private addresses) and a real HTTP receiver on a free port: a
destination and a rule made through the page, a test sent, a run over the threshold
sent through the ingest API, its event on the Alerts page (delivered) and on the run's
page, a rule paused, and a read key that sees everything and may change nothing.
Screenshots go to /tmp/kw/screens/alerts_*.png, outside the repository."""

from __future__ import annotations

import asyncio
import json
import os
import re
import threading
import time
import uuid
from pathlib import Path

import httpx
import psycopg
import pytest
from aiohttp import web
from serve_process import ServeProcess

from keelwave.db import keys as key_store

sync_api = pytest.importorskip("playwright.sync_api")
CHROMIUM = "/usr/bin/chromium"
if not os.path.exists(CHROMIUM):
    pytest.skip("Debian's chromium is not installed", allow_module_level=True)

SCREENS = Path("/tmp/kw/screens")
PRIVATE_OK = {"KEELWAVE_ALERTS_ALLOW_PRIVATE_DESTINATIONS": "true"}
# The machines are shared and slow at times: wait longer than Playwright's 5 s default.
sync_api.expect.set_options(timeout=20_000)
DEADLINE = 30.0  # seconds for an alert to fire and be delivered; polls end sooner
expect = sync_api.expect
ANY = re.compile(".*")  # a cell whose text the test does not check (the buttons)


class Receiver:
    """A webhook receiver: a real aiohttp server on a free port, in a thread of its own
    (the browser tests are synchronous), that records every request and answers 200."""

    def __init__(self) -> None:
        self.requests: list[tuple[dict[str, str], bytes]] = []
        self.port = 0
        self._ready = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def start(self) -> Receiver:
        self._thread.start()
        assert self._ready.wait(10), "the receiver did not start"
        return self

    def url(self, path: str = "/hook") -> str:
        return f"http://127.0.0.1:{self.port}{path}"

    def bodies(self) -> list[dict]:
        return [json.loads(body) for _, body in list(self.requests)]

    def _run(self) -> None:
        self._loop = asyncio.new_event_loop()
        self._loop.run_until_complete(self._serve())
        self._loop.close()

    async def _serve(self) -> None:
        app = web.Application()
        app.router.add_route("*", "/{tail:.*}", self._handle)
        runner = web.AppRunner(app, access_log=None, shutdown_timeout=1)
        await runner.setup()
        await web.TCPSite(runner, "127.0.0.1", 0).start()
        self.port = runner.addresses[0][1]
        self._stop = asyncio.Event()
        self._ready.set()
        await self._stop.wait()
        await runner.cleanup()

    async def _handle(self, request: web.Request) -> web.Response:
        self.requests.append((dict(request.headers), await request.read()))
        return web.Response(text="ok")

    def close(self) -> None:
        self._loop.call_soon_threadsafe(self._stop.set)
        self._thread.join(10)


@pytest.fixture(scope="module")
def receiver():
    started = Receiver().start()
    yield started
    started.close()


@pytest.fixture(scope="module")
def server(db_url: str, tmp_path_factory):
    """`keelwave serve` that may send alerts to the receiver on 127.0.0.1."""
    process = ServeProcess(
        "--database-url",
        db_url,
        env=PRIVATE_OK,
        log=tmp_path_factory.mktemp("serve") / "serve.log",
    )
    yield process
    process.stop()
    process.kill()


@pytest.fixture(scope="module")
def keys(server, db_url) -> dict[str, str]:
    with psycopg.connect(db_url, autocommit=True) as conn:
        made = {
            scope: key_store.create_key(conn, "web-alerts", scope).key
            for scope in ("read", "ingest", "all")
        }
    SCREENS.mkdir(parents=True, exist_ok=True)
    return made


@pytest.fixture(scope="module")
def me(server, keys) -> dict:
    return httpx.get(server.url + "/v1/me", headers=_auth(keys["all"])).json()["data"]


def _auth(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


def _alerts(server, me: dict) -> str:
    return f"{server.url}/v1/projects/{me['project_id']}/alerts"


@pytest.fixture(scope="module")
def made_by_api(server, keys, me, receiver) -> dict:
    """A destination and a window rule made through the API, for the read key to see."""
    base, auth = _alerts(server, me), _auth(keys["all"])
    destination = httpx.post(
        base + "/destinations",
        headers=auth,
        json={"name": "api-hook", "kind": "slack", "url": receiver.url("/slack")},
    ).json()["data"]
    rule = httpx.post(
        base + "/rules",
        headers=auth,
        json={
            "name": "api-errors",
            "destination_id": destination["id"],
            "condition": {"type": "window", "metric": "error_rate", "window": "1h", "above": 0.2},
            "scope": {"agent_name": "research-agent"},
            "cooldown_seconds": 3600,
        },
    ).json()["data"]
    return {"destination": destination, "rule": rule}


@pytest.fixture(scope="module")
def browser():
    with sync_api.sync_playwright() as playwright:
        launched = playwright.chromium.launch(
            executable_path=CHROMIUM,
            args=[
                "--no-sandbox",
                "--disable-gpu",
                "--disable-background-networking",
                "--disable-component-update",
                "--disable-sync",
                "--no-first-run",
            ],
        )
        yield launched
        launched.close()


@pytest.fixture
def page(browser):
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    tab = context.new_page()
    yield tab
    context.close()


def sign_in(page, server, key: str) -> None:
    page.goto(server.url + "/")
    page.get_by_label("API key").fill(key)
    page.get_by_role("button", name="Sign in").click()
    expect(page.get_by_role("heading", name="Overview")).to_be_visible()


def send_run(server, key: str, agent: str, steps: int) -> str:
    run_id = str(uuid.uuid4())
    with httpx.Client(base_url=server.url, headers=_auth(key)) as http:
        http.post(
            "/v1/ingest/agent/runs", json={"id": run_id, "agent_name": agent}
        ).raise_for_status()
        http.post(
            "/v1/ingest/agent/steps",
            json=[
                {"run_id": run_id, "step_index": i, "tool_name": "search", "tool_input": {"n": i}}
                for i in range(1, steps + 1)
            ],
        ).raise_for_status()
    return run_id


def screenshot(page, name: str) -> None:
    page.evaluate("window.scrollTo(0, 0)")  # the sticky header stays at the top
    page.screenshot(path=SCREENS / f"{name}.png", full_page=True)


def wait_for(check, what: str):
    deadline = time.monotonic() + DEADLINE
    while time.monotonic() < deadline:
        if found := check():
            return found
        time.sleep(0.2)
    raise AssertionError(f"timed out waiting for {what}")


def test_destination_rule_event_and_the_run_it_fired_for(server, keys, me, receiver, page) -> None:
    sign_in(page, server, keys["all"])
    page.get_by_role("navigation", name="Pages").get_by_role("link", name="Alerts").click()
    expect(page.get_by_role("heading", name="Alerts", exact=True)).to_be_visible()
    expect(page.get_by_role("region", name="Events")).to_contain_text("Nothing has fired yet")

    # A destination: a refused URL is said next to the form, then a good one.
    form = page.get_by_role("form", name="New destination")
    form.get_by_label("Name").fill("hook")
    form.get_by_label("URL").fill("ftp://example.com/hook")
    form.get_by_role("button", name="Add destination").click()
    expect(form.get_by_role("alert")).to_contain_text("url: alerts are sent over http or https")
    expect(form.get_by_label("URL")).to_have_attribute("aria-invalid", "true")
    form.get_by_label("URL").fill(receiver.url())
    form.get_by_label("Secret (optional)").fill("s3cret")
    form.get_by_role("button", name="Add destination").click()
    expect(form.get_by_role("status")).to_contain_text("Destination “hook” added, signed")
    destinations = page.get_by_role("region", name="Destinations")
    row = destinations.locator("tr", has_text="hook")
    expect(row.locator("td")).to_have_text(["hook", "webhook", receiver.url(), "yes", ANY])

    # A test reaches the receiver, signed, and the page says how it went.
    row.get_by_role("button", name="Send a test to hook").click()
    expect(row.get_by_role("status")).to_contain_text(re.compile(r"^delivered · HTTP 200 · "))
    tested = wait_for(lambda: receiver.requests, "the test alert")
    assert tested[0][0]["X-Keelwave-Signature"].startswith("sha256=")

    # A rule: a cooldown the server refuses first (422, its field marked), then a good one.
    form = page.get_by_role("form", name="New rule")
    form.get_by_label("Name").fill("too-many-steps")
    form.get_by_label("Destination").select_option(label="hook (webhook)")
    form.get_by_label("Condition").select_option(label="a run goes over a number")
    form.get_by_label("Run metric").select_option("steps")
    form.get_by_label("Above").fill("3")
    form.get_by_label("Cooldown (seconds)").fill("99999999")
    form.get_by_role("button", name="Add rule").click()
    expect(form.get_by_role("alert")).to_contain_text("cooldown_seconds")
    expect(form.get_by_label("Cooldown (seconds)")).to_have_attribute("aria-invalid", "true")
    form.get_by_label("Cooldown (seconds)").fill("0")
    form.get_by_role("button", name="Add rule").click()
    expect(form.get_by_role("status")).to_contain_text("a run's steps > 3")
    expect(form.get_by_role("alert")).to_have_count(0)
    rules = page.get_by_role("region", name="Rules")
    rule_row = rules.locator("tr", has_text="too-many-steps")
    expect(rule_row.locator("td")).to_have_text(
        ["too-many-steps", "a run's steps > 3", "every agent", "hook", "none", "on", ANY]
    )

    # A run over the threshold fires; the event appears (auto-refresh), delivered.
    run_id = send_run(server, keys["ingest"], "research-agent", steps=5)
    events = page.get_by_role("region", name="Events")
    event = events.locator("tr.event", has_text="too-many-steps")
    expect(event).to_have_count(1, timeout=DEADLINE * 1000)
    expect(event.locator(".delivery")).to_have_text("delivered", timeout=DEADLINE * 1000)
    expect(event.locator(".alert-state")).to_have_text("firing")
    expect(event).to_contain_text("research-agent")
    expect(event).to_contain_text(run_id[:8])
    expect(event).to_contain_text("steps 5 > 3")
    absolute = re.compile(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d \S+")  # with the time zone
    expect(event.locator(".when")).to_contain_text(absolute)
    expect(event.locator(".when")).to_contain_text("ago")
    event.get_by_role("button", name="1 delivery attempt of too-many-steps").click()
    attempts = events.locator("tr.attempts-row")
    expect(attempts).to_contain_text("HTTP 200")
    fired = wait_for(
        lambda: [body for body in receiver.bodies() if body.get("run_id") == run_id], "the alert"
    )
    assert fired[0]["rule"]["name"] == "too-many-steps" and fired[0]["value"] == 5
    screenshot(page, "alerts_page")

    # The run's page says it fired, and links back.
    event.get_by_role("link", name=run_id[:8]).click()
    expect(page.get_by_role("heading", name="research-agent")).to_be_visible()
    expect(page.locator(".facts")).to_contain_text("1 fired")
    section = page.get_by_role("region", name="Alerts")
    expect(section.locator("li")).to_have_count(1)
    expect(section).to_contain_text("too-many-steps")
    expect(section).to_contain_text("steps 5 > 3")
    expect(section.locator(".delivery")).to_have_text("delivered")
    screenshot(page, "alerts_run")
    section.get_by_role("link", name="on the Alerts page →").click()
    expect(page.get_by_role("region", name="Events")).to_contain_text(f"for run {run_id[:8]}")
    expect(page.locator("tr.event")).to_have_count(1)

    # The runs list marks the run with a bell, from one request for the latest events.
    page.get_by_role("navigation", name="Pages").get_by_role("link", name="Runs").click()
    run_row = page.locator("tbody tr", has_text=run_id[:8])
    expect(run_row.get_by_role("img", name="fired an alert: too-many-steps")).to_be_visible()

    # Paused: the page says so, the API agrees, and a new run over the threshold is quiet.
    page.get_by_role("navigation", name="Pages").get_by_role("link", name="Alerts").click()
    rule_row = page.get_by_role("region", name="Rules").locator("tr", has_text="too-many-steps")
    rule_row.get_by_role("button", name="Pause too-many-steps").click()
    expect(rule_row.locator(".rule-state")).to_have_text("paused")
    expect(rule_row.get_by_role("button", name="Resume too-many-steps")).to_be_visible()
    listed = httpx.get(_alerts(server, me) + "/rules", headers=_auth(keys["all"])).json()["data"]
    assert [rule["enabled"] for rule in listed if rule["name"] == "too-many-steps"] == [False]
    quiet = send_run(server, keys["ingest"], "research-agent", steps=5)
    time.sleep(4)  # run rules are evaluated every second
    assert not [body for body in receiver.bodies() if body.get("run_id") == quiet]

    # A destination's delete says which rules go with it.
    form = page.get_by_role("form", name="New destination")
    form.get_by_label("Name").fill("spare")
    form.get_by_label("URL").fill(receiver.url("/spare"))
    form.get_by_role("button", name="Add destination").click()
    expect(destinations.locator("tr", has_text="spare")).to_have_count(1)
    form = page.get_by_role("form", name="New rule")
    form.get_by_label("Name").fill("spare-loops")
    form.get_by_label("Destination").select_option(label="spare (webhook)")
    finding = "the server finds a loop or warning on a run"
    form.get_by_label("Condition").select_option(label=finding)
    form.get_by_label("Agent").fill("sql-agent")
    form.get_by_role("button", name="Add rule").click()
    spare_rule = rules.locator("tr", has_text="spare-loops")
    expect(spare_rule.locator("td").nth(1)).to_have_text("a run has exact_loop or cycle")
    expect(spare_rule.locator("td").nth(2)).to_have_text("sql-agent")
    destinations.get_by_role("button", name="Delete destination spare").click()
    confirm = destinations.get_by_role("group", name="Delete destination spare")
    expect(confirm).to_contain_text("This also deletes the rule that sends to it: spare-loops")
    confirm.get_by_role("button", name="Yes, delete").click()
    expect(destinations.locator("tr", has_text="spare")).to_have_count(0)
    expect(rules.locator("tr", has_text="spare-loops")).to_have_count(0)

    # A rule's delete asks first.
    rule_row.get_by_role("button", name="Delete rule too-many-steps").click()
    rule_row.get_by_role("button", name="Yes, delete").click()
    expect(rules.locator("tr", has_text="too-many-steps")).to_have_count(0)
    expect(events.locator("tr.event", has_text="too-many-steps")).to_have_count(1)  # kept


def test_a_read_key_sees_the_lists_but_cannot_change_them(server, keys, made_by_api, page) -> None:
    sign_in(page, server, keys["read"])
    page.goto(server.url + "/alerts")  # a deep link, loaded from the server
    page.reload()
    expect(page.get_by_role("note")).to_contain_text("This key has scope read")
    rules = page.get_by_role("region", name="Rules")
    row = rules.locator("tr", has_text="api-errors")
    expect(row.locator("td")).to_have_text(
        ["api-errors", "error_rate over 1h > 0.2", "research-agent", "api-hook", "1h", "on", ANY]
    )
    destinations = page.get_by_role("region", name="Destinations")
    expect(destinations.locator("tr", has_text="api-hook")).to_contain_text("slack")

    form = page.get_by_role("form", name="New destination")
    form.get_by_label("Name").fill("mine")
    form.get_by_label("URL").fill("http://127.0.0.1:9/hook")
    form.get_by_role("button", name="Add destination").click()
    refused = form.get_by_role("alert")
    expect(refused).to_contain_text("Not allowed: this key has scope 'read'")
    expect(refused).to_contain_text("needs a key of scope 'all'")
    expect(destinations.locator("tr", has_text="mine")).to_have_count(0)

    row.get_by_role("button", name="Pause api-errors").click()
    expect(row.get_by_role("alert")).to_contain_text("needs a key of scope 'all'")
    expect(row.locator(".rule-state")).to_have_text("on")
    screenshot(page, "alerts_read_key")
