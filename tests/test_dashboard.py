"""The web dashboard in real headless Chromium (Debian's), against `keelwave serve`
with known data. Screenshots of each page go to tests/artifacts/."""

from __future__ import annotations

import os
import re
import uuid
from pathlib import Path

import httpx
import psycopg
import pytest
from verdict_runs import seed

from keelwave.db import keys as key_store

sync_api = pytest.importorskip("playwright.sync_api")
CHROMIUM = "/usr/bin/chromium"
if not os.path.exists(CHROMIUM):
    pytest.skip("Debian's chromium is not installed", allow_module_level=True)

ARTIFACTS = Path(__file__).parent / "artifacts"
SCREENS = Path("/tmp/kw/screens")  # the findings screenshots, outside the repository
# The machines are shared and slow at times: wait longer than Playwright's 5 s default.
sync_api.expect.set_options(timeout=20_000)
LOOP_RUN = str(uuid.uuid4())
CHILD_RUN = str(uuid.uuid4())
ERROR_RUN = str(uuid.uuid4())
OPEN_RUN = str(uuid.uuid4())


@pytest.fixture(scope="module")
def keys(server, db_url) -> dict[str, str]:
    with psycopg.connect(db_url, autocommit=True) as conn:
        made = {
            scope: key_store.create_key(conn, "web", scope).key
            for scope in ("read", "ingest", "all")
        }
    with httpx.Client(
        base_url=server.url, headers={"Authorization": f"Bearer {made['ingest']}"}
    ) as http:
        for run_id, agent, extra in (
            (LOOP_RUN, "research-agent", {}),
            (CHILD_RUN, "summarizer-agent", {"parent_run_id": LOOP_RUN}),
            (ERROR_RUN, "sql-agent", {}),
            (OPEN_RUN, "planner-agent", {}),
        ):
            http.post(
                "/v1/ingest/agent/runs", json={"id": run_id, "agent_name": agent, **extra}
            ).raise_for_status()
        steps = [
            {
                "run_id": LOOP_RUN,
                "step_index": i,
                "tool_name": "web_search",
                "tool_input": {"q": "what is keelwave?"},
                "tool_output": {"hits": 3},
                "duration_ms": 250,
            }
            for i in range(1, 6)
        ]
        steps += [
            {
                "run_id": LOOP_RUN,
                "step_index": 6,
                "step_type": "think",
                "content": "Same results again.",
            },
            {
                "run_id": ERROR_RUN,
                "step_index": 1,
                "tool_name": "run_sql",
                "tool_input": {"query": "DROP TABLE x"},
                "error": "permission denied",
            },
            {
                "run_id": OPEN_RUN,
                "step_index": 1,
                "tool_name": "fetch_url",
                "tool_input": {"url": "https://example.com"},
            },
        ]
        http.post("/v1/ingest/agent/steps", json=steps).raise_for_status()
        http.post(
            "/v1/ingest/ai",
            json=[
                {
                    "run_id": LOOP_RUN,
                    "step_index": 1,
                    "provider": "openai",
                    "model": "gpt-4o",
                    "input_tokens": 5000,
                    "output_tokens": 300,
                    "latency_ms": 900,
                },
                {
                    "run_id": ERROR_RUN,
                    "provider": "anthropic",
                    "model": "claude-sonnet-4-5",
                    "input_tokens": 800,
                    "output_tokens": 0,
                    "status": "error",
                    "error": "overloaded",
                },
            ],
        ).raise_for_status()
        for run_id, finish in (
            (
                LOOP_RUN,
                {
                    "termination_reason": "loop_detected",
                    "loop_detected": True,
                    "loop_step_index": 1,
                },
            ),
            (CHILD_RUN, {"termination_reason": "clean"}),
            (ERROR_RUN, {"termination_reason": "error", "error": "permission denied"}),
        ):
            http.post(f"/v1/ingest/agent/runs/{run_id}/finish", json=finish).raise_for_status()
    return made


@pytest.fixture(scope="module")
def browser():
    ARTIFACTS.mkdir(exist_ok=True)
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
    context = browser.new_context(viewport={"width": 1280, "height": 800})
    requested: list[str] = []
    context.on("request", lambda request: requested.append(request.url))
    tab = context.new_page()
    tab.requested = requested  # type: ignore[attr-defined]
    yield tab
    context.close()


def sign_in(page, server, key: str) -> None:
    page.goto(server.url + "/")
    page.get_by_label("API key").fill(key)
    page.get_by_role("button", name="Sign in").click()


def test_sign_in_refuses_bad_keys_and_remembers_a_good_one(server, keys, page) -> None:
    sign_in(page, server, "kw_" + "n" * 43)
    sync_api.expect(page.get_by_role("alert")).to_contain_text("refused")
    page.screenshot(path=ARTIFACTS / "sign-in-refused.png")
    page.get_by_label("API key").fill(keys["ingest"])
    page.get_by_role("button", name="Sign in").click()
    sync_api.expect(page.get_by_role("alert")).to_contain_text("only send data")
    page.get_by_label("API key").fill(keys["read"])
    page.get_by_role("button", name="Sign in").click()
    sync_api.expect(page.get_by_role("heading", name="Overview")).to_be_visible()
    page.reload()  # the key is kept in the browser
    sync_api.expect(page.get_by_role("heading", name="Overview")).to_be_visible()
    page.get_by_role("button", name="Sign out").click()
    sync_api.expect(page.get_by_label("API key")).to_be_visible()
    assert not any("kw_" in url for url in page.requested)  # the key never goes in a URL


def test_overview_cards_chart_and_window(server, keys, page) -> None:
    sign_in(page, server, keys["read"])
    sync_api.expect(page.get_by_text("Loop rate", exact=True)).to_be_visible()
    cards = page.locator(".cards")
    sync_api.expect(cards).to_contain_text("25.0%")  # 1 looping run of 4
    chart = page.get_by_role("img", name="Runs, loops and errors over time")
    sync_api.expect(chart).to_be_visible()
    sync_api.expect(page.locator("table.mix")).to_contain_text("loop_detected")
    sync_api.expect(page.locator("table.mix")).to_contain_text("not finished yet")
    health = page.locator("table").last
    sync_api.expect(health).to_contain_text("research-agent")
    page.screenshot(path=ARTIFACTS / "overview.png", full_page=True)
    page.get_by_role("button", name="7d").click()
    sync_api.expect(page.get_by_role("button", name="7d")).to_have_attribute("aria-pressed", "true")
    sync_api.expect(cards).to_contain_text("25.0%")
    page.screenshot(path=ARTIFACTS / "overview-7d.png", full_page=True)


def test_runs_loop_band_and_step_inspector(server, keys, page) -> None:
    sign_in(page, server, keys["read"])
    page.get_by_role("link", name="Runs").click()
    looping_row = page.locator("tr", has_text=LOOP_RUN[:8])
    sync_api.expect(looping_row.get_by_text("LOOP", exact=True)).to_be_visible()
    sync_api.expect(page.get_by_text("loop rate")).to_be_visible()
    page.screenshot(path=ARTIFACTS / "runs.png", full_page=True)
    page.get_by_label("Loops").select_option(label="loops (either)")
    sync_api.expect(page.locator("tbody tr")).to_have_count(1)
    page.get_by_label("Loops").select_option(label="loop or not")
    # The whole list is back (a row the filter hid): the looping row is the new one,
    # not the filtered list's, which a click could catch as it is replaced.
    sync_api.expect(page.locator("tr", has_text=ERROR_RUN[:8])).to_be_visible()

    looping_row.get_by_role("link").click()
    sync_api.expect(page.get_by_role("heading", name="research-agent")).to_be_visible()
    sync_api.expect(page.get_by_text("step 1", exact=True)).to_be_visible()  # loop began at
    band = page.get_by_role("button", name="web_search ×5")
    sync_api.expect(band).to_contain_text("steps 1–5")
    band.click()
    sync_api.expect(band).to_have_attribute("aria-expanded", "true")
    repeated = page.locator("ol.timeline ol li")
    sync_api.expect(repeated).to_have_count(5)
    repeated.nth(2).get_by_role("button").click()
    inspector = page.get_by_label("Step inspector")
    sync_api.expect(inspector).to_contain_text("step 3")
    sync_api.expect(inspector).to_contain_text('"q": "what is keelwave?"')
    sync_api.expect(inspector).to_contain_text("5 times in this run")
    sync_api.expect(page.get_by_text("gpt-4o")).to_be_visible()  # model calls
    page.screenshot(path=ARTIFACTS / "run-detail.png", full_page=True)

    page.get_by_role("link", name=CHILD_RUN[:8]).click()  # a child run
    sync_api.expect(page.get_by_role("heading", name="summarizer-agent")).to_be_visible()
    page.get_by_role("link", name=LOOP_RUN[:8]).click()  # and its parent
    sync_api.expect(page.get_by_role("heading", name="research-agent")).to_be_visible()


def test_deep_link_survives_reload_and_errors_are_plain(server, keys, page) -> None:
    sign_in(page, server, keys["read"])
    sync_api.expect(page.get_by_role("heading", name="Overview")).to_be_visible()
    page.goto(f"{server.url}/runs/{ERROR_RUN}")
    sync_api.expect(page.get_by_role("heading", name="sql-agent")).to_be_visible()
    sync_api.expect(page.locator("p.error")).to_contain_text("permission denied")
    page.reload()
    sync_api.expect(page.get_by_role("heading", name="sql-agent")).to_be_visible()
    page.goto(f"{server.url}/runs/{uuid.uuid4()}")
    sync_api.expect(page.get_by_role("alert")).to_contain_text("not found")
    page.goto(f"{server.url}/tools")
    sync_api.expect(page.locator("table")).to_contain_text("web_search")
    page.screenshot(path=ARTIFACTS / "tools.png", full_page=True)
    page.set_viewport_size({"width": 420, "height": 800})  # a narrow window
    page.goto(f"{server.url}/runs/{LOOP_RUN}")
    sync_api.expect(page.get_by_role("button", name="web_search ×5")).to_be_visible()
    page.screenshot(path=ARTIFACTS / "run-detail-narrow.png", full_page=True)


def test_security_headers_and_no_cors(server) -> None:
    for path in ("/", "/runs/x", "/v1/me"):
        response = httpx.get(server.url + path, headers={"Origin": "https://evil.example"})
        assert "default-src 'self'" in response.headers["Content-Security-Policy"]
        assert response.headers["X-Content-Type-Options"] == "nosniff"
        assert response.headers["X-Frame-Options"] == "DENY"
        assert "Access-Control-Allow-Origin" not in response.headers
    assert httpx.get(server.url + "/v1/nothing").json()["error"]["code"] == "not_found"


def test_dark_theme_follows_the_system(server, keys, browser) -> None:
    context = browser.new_context(viewport={"width": 1280, "height": 800}, color_scheme="dark")
    page = context.new_page()
    sign_in(page, server, keys["read"])
    sync_api.expect(page.get_by_role("heading", name="Overview")).to_be_visible()
    background = page.evaluate("getComputedStyle(document.documentElement).backgroundColor")
    assert background == "rgb(19, 20, 23)"  # the dark palette's --bg
    page.goto(f"{server.url}/runs/{LOOP_RUN}")
    page.get_by_role("button", name="web_search ×5").click()
    page.screenshot(path=ARTIFACTS / "run-detail-dark.png", full_page=True)
    context.close()


@pytest.fixture(scope="module")
def judged(server, db_url):
    """A project of its own whose runs loop by the agent's account, the server's or both,
    and one with near-duplicates and no progress (tests/verdict_runs.py), judged."""
    with psycopg.connect(db_url, autocommit=True) as conn:
        made = {
            scope: key_store.create_key(conn, "web-findings", scope) for scope in ("read", "ingest")
        }
    runs = seed(server.url, made["ingest"].key, made["read"].key, made["read"].project_id)
    SCREENS.mkdir(parents=True, exist_ok=True)
    return made["read"].key, runs


def test_runs_list_says_whose_loop_it_is_and_filters_by_either(server, judged, page) -> None:
    key, runs = judged
    sign_in(page, server, key)
    page.get_by_role("link", name="Runs").click()
    rows = page.locator("tbody tr")
    sync_api.expect(rows).to_have_count(4)
    sync_api.expect(page.locator(".heading")).to_contain_text("loop rate 75.0%")
    for run_id, who, title in (
        (runs.server_only, "server", "Loop from step 1: detected by the server"),
        (runs.agent_only, "agent", "Loop from step 1: reported by the agent"),
        (runs.cycle, "agent + server", "reported by the agent at step 3; the server found it"),
    ):
        row = page.locator("tr", has_text=run_id[:8])
        sync_api.expect(row.get_by_text("LOOP", exact=True)).to_be_visible()
        sync_api.expect(row.locator(".verdict .who")).to_have_text(who)
        sync_api.expect(row.locator(".verdict")).to_have_attribute(
            "title", re.compile(re.escape(title))
        )
    near = page.locator("tr", has_text=runs.near[:8])
    sync_api.expect(near.get_by_text("LOOP", exact=True)).to_have_count(0)
    sync_api.expect(near.locator(".badge.warn")).to_have_text(["≈ near-duplicate", "∅ no progress"])
    sync_api.expect(page.get_by_label("Legend")).to_contain_text("server: the server found it")
    page.screenshot(path=SCREENS / "findings_runs.png", full_page=True)

    page.get_by_label("Loops").select_option(label="loops (either)")
    sync_api.expect(rows).to_have_count(3)
    sync_api.expect(page.locator("tr", has_text=runs.near[:8])).to_have_count(0)
    page.get_by_label("Loops").select_option(label="loop detected by the server")
    sync_api.expect(rows).to_have_count(2)
    page.get_by_label("Loops").select_option(label="loop reported by the agent")
    sync_api.expect(rows).to_have_count(2)
    sync_api.expect(page.locator("tr", has_text=runs.server_only[:8])).to_have_count(0)
    page.get_by_label("Loops").select_option(label="loop or not")
    page.get_by_label("Finding").select_option(label="cycle")
    sync_api.expect(rows).to_have_count(1)
    sync_api.expect(rows).to_contain_text(runs.cycle[:8])
    page.get_by_label("Finding").select_option(label="no progress")
    sync_api.expect(rows).to_contain_text(runs.near[:8])
    assert "finding=no_progress" in page.url


def test_run_page_a_loop_only_the_server_detected(server, judged, page) -> None:
    key, runs = judged
    sign_in(page, server, key)
    sync_api.expect(page.get_by_role("heading", name="Overview")).to_be_visible()
    page.goto(f"{server.url}/runs/{runs.server_only}")
    sync_api.expect(page.get_by_role("heading", name="curl-agent")).to_contain_text("server")
    facts = page.locator(".facts")
    sync_api.expect(facts.get_by_text("step 1", exact=True)).to_be_visible()
    sync_api.expect(facts).to_contain_text("detected by the server")
    sync_api.expect(page.get_by_role("button", name="web_search ×3")).to_contain_text("steps 1–3")
    findings = page.get_by_role("region", name="Findings")
    sync_api.expect(findings.locator("li")).to_have_text(
        [re.compile("exact loop.*from step 1.*web_search called 3 times with the same input")]
    )


def test_run_page_draws_a_cycle_as_one_band(server, judged, page) -> None:
    key, runs = judged
    sign_in(page, server, key)
    sync_api.expect(page.get_by_role("heading", name="Overview")).to_be_visible()
    page.goto(f"{server.url}/runs/{runs.cycle}")
    sync_api.expect(page.get_by_role("heading", name="browse-agent")).to_contain_text(
        "agent + server"
    )
    facts = page.locator(".facts")
    sync_api.expect(facts.get_by_text("step 1", exact=True)).to_be_visible()
    sync_api.expect(facts).to_contain_text(
        "reported by the agent at step 3; the server found it from step 1"
    )
    sync_api.expect(facts).to_contain_text("exact loop, cycle")
    findings = page.get_by_role("region", name="Findings")
    sync_api.expect(findings.locator("li")).to_have_count(3)
    sync_api.expect(findings).to_contain_text("search → open, 3 times")
    band = page.get_by_role("button", name="search → open ×3")
    sync_api.expect(band).to_contain_text("cycle, steps 1–7")
    sync_api.expect(page.locator("ol.timeline > li")).to_have_count(1)  # one band, no more
    band.click()
    steps = page.locator("ol.timeline ol li")
    sync_api.expect(steps).to_have_text(
        [re.compile(rf"^{n}{name}") for n, name in enumerate(
            ["search", "open", "search", "think", "open", "search", "open"], start=1)]
    )  # fmt: skip
    steps.nth(1).get_by_role("button").click()
    sync_api.expect(page.get_by_label("Step inspector")).to_contain_text(
        "cycle: search → open, 3 times"
    )
    sync_api.expect(page.get_by_label("Timeline legend")).to_contain_text("a cycle of calls")
    page.screenshot(path=SCREENS / "findings_cycle.png", full_page=True)


def test_run_page_marks_near_duplicates_and_no_progress(server, judged, page) -> None:
    key, runs = judged
    sign_in(page, server, key)
    sync_api.expect(page.get_by_role("heading", name="Overview")).to_be_visible()
    page.goto(f"{server.url}/runs/{runs.near}")
    sync_api.expect(page.get_by_role("heading", name="support-agent")).to_be_visible()
    sync_api.expect(page.get_by_role("heading", name="support-agent")).not_to_contain_text("LOOP")
    facts = page.locator(".facts")
    sync_api.expect(facts).to_contain_text("near-duplicate, no progress")
    rows = page.locator("ol.timeline > li")
    sync_api.expect(rows).to_have_count(6)  # nothing folded: warnings are not loops
    sync_api.expect(rows.nth(0)).to_contain_text("≈ near-duplicate")
    sync_api.expect(rows.nth(0).locator(".why")).to_have_text(
        re.compile("lookup called 3 times with inputs that differ only in volatile values")
    )
    sync_api.expect(rows.nth(1)).to_contain_text("≈ near-duplicate of step 1")
    sync_api.expect(rows.nth(3).locator(".why")).to_contain_text(
        "kb_search called 3 times in a row with 3 different inputs, same output each time"
    )
    sync_api.expect(rows.nth(5)).to_contain_text("∅ no progress since step 4")
    sync_api.expect(page.locator("ol.timeline .why")).to_have_count(2)  # one sentence each
    warn = page.evaluate("getComputedStyle(document.documentElement).getPropertyValue('--warn')")
    mark = rows.nth(0).locator(".mark").evaluate("element => getComputedStyle(element).color")
    assert warn.strip() == "#a86400" and mark == "rgb(168, 100, 0)"  # amber, not red
    sync_api.expect(page.get_by_label("Timeline legend")).to_contain_text(
        "a warning, not a loop: ≈ near-duplicate calls, ∅ no progress"
    )
    page.screenshot(path=SCREENS / "findings_near_duplicate.png", full_page=True)


def test_overview_shows_the_detected_loop_rate_and_findings(server, judged, page) -> None:
    key, _ = judged
    sign_in(page, server, key)
    cards = page.locator(".cards")
    reported = cards.locator(".card", has=page.get_by_text("Loop rate", exact=True))
    detected = cards.locator(".card", has=page.get_by_text("Detected loop rate", exact=True))
    sync_api.expect(reported).to_contain_text("50.0%")  # the agent reported 2 of 4
    sync_api.expect(detected).to_contain_text("50.0%")  # the server found 2 of 4
    counts = page.get_by_role("group", name="Runs with findings")
    for text in ("2 exact loop", "1 cycle", "1 ≈ near-duplicate", "1 ∅ no progress"):
        sync_api.expect(counts).to_contain_text(text)
    health = page.locator("table").last
    sync_api.expect(health.locator("th")).to_contain_text(["loop rate", "detected"])
    curl = health.locator("tr", has_text="curl-agent")
    sync_api.expect(curl.locator("td").nth(2)).to_have_text("0.0%")
    sync_api.expect(curl.locator("td").nth(3)).to_have_text("100.0%")
    page.screenshot(path=SCREENS / "findings_overview.png", full_page=True)


def test_run_page_of_a_run_sent_as_spans_says_the_loop_is_the_servers(server, keys, page) -> None:
    """No agent reports anything for a run sent as OpenTelemetry spans: its loop flag is
    the server's reading of the spans' fingerprints, and the page says so (not "agent +
    server", as for an SDK's run the server agrees with)."""
    from keelwave.server.ingest.otlp import decode, mapping

    body = (Path(__file__).parent / "otlp_fixtures" / "agentframework_loop.json").read_bytes()
    [run] = mapping.map_trace(decode.from_json(body))
    answer = httpx.post(
        f"{server.url}/v1/traces",
        content=body,
        headers={"Authorization": f"Bearer {keys['ingest']}", "Content-Type": "application/json"},
    )
    assert answer.status_code == 200, answer.text
    sign_in(page, server, keys["read"])
    sync_api.expect(page.get_by_role("heading", name="Overview")).to_be_visible()
    # The runs list, whose rows have no metadata, says so too.
    page.get_by_role("link", name="Runs").click()
    row = page.locator("tr", has_text=str(run.run_id)[:8])
    sync_api.expect(row.locator(".verdict .who")).to_have_text("server")
    page.goto(f"{server.url}/runs/{run.run_id}")
    heading = page.get_by_role("heading", name="weather_agent")
    sync_api.expect(heading).to_contain_text("server")
    sync_api.expect(heading).not_to_contain_text("agent +")
    sync_api.expect(page.locator(".facts")).to_contain_text("detected by the server")
