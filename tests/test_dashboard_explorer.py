"""The run explorer in real headless Chromium (Debian's), against `keelwave serve` with
runs whose timings, nesting and differences are known: the waterfall (steps that ran at
once overlap, a child run sits where it ran and opens in place, model calls between the
steps), a failed run that opens on its failing step, the runs list (sorting, filters,
search as you type, children under their parent), run prefixes, a 404 page, the Tools
and Cost pages, and two runs compared. Screenshots go to tests/artifacts/explorer-*.png."""

from __future__ import annotations

import os
import re
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path

import httpx
import psycopg
import pytest

from keelwave.db import keys as key_store

sync_api = pytest.importorskip("playwright.sync_api")
CHROMIUM = "/usr/bin/chromium"
if not os.path.exists(CHROMIUM):
    pytest.skip("Debian's chromium is not installed", allow_module_level=True)

ARTIFACTS = Path(__file__).parent / "artifacts"
# The machines are shared and slow at times: wait longer than Playwright's 5 s default.
sync_api.expect.set_options(timeout=20_000)
expect = sync_api.expect

# Ten minutes ago, to the second: every time below is an offset from it.
T0 = datetime.now(UTC).replace(microsecond=0) - timedelta(minutes=10)
PLANNER = str(uuid.uuid4())  # the run with the waterfall
CHILD = str(uuid.uuid4())  # its child run, from +2.0 s to +2.8 s
FAILED = str(uuid.uuid4())  # fails at its step 2, with a traceback
BASE = str(uuid.uuid4())  # compare: run A
CHANGED = str(uuid.uuid4())  # compare: run B (a changed input, a step more)
LIVE = str(uuid.uuid4())  # still running
# Two runs whose ids share their first four characters, and one whose id is unlike any.
TWIN_A = "abcd" + str(uuid.uuid4())[4:]
TWIN_B = "abcd" + str(uuid.uuid4())[4:]
TRACEBACK = (
    "Traceback (most recent call last):\n"
    '  File "agent.py", line 12, in run_sql\n'
    "    cursor.execute(query)\n"
    'psycopg.errors.UndefinedTable: relation "users" does not exist'
)


def at(ms: int) -> str:
    return (T0 + timedelta(milliseconds=ms)).isoformat()


def clock(ms: int) -> str:
    """How the page writes a moment, in the browser's zone (the tests run it in UTC)."""
    return (T0 + timedelta(milliseconds=ms)).strftime("%Y-%m-%d %H:%M:%S UTC")


@pytest.fixture(scope="module")
def key(keys) -> str:
    return keys["read"]


@pytest.fixture(scope="module")
def keys(server, db_url) -> dict[str, str]:
    """The project's read and ingest keys, its runs sent."""
    with psycopg.connect(db_url, autocommit=True) as conn:
        made = {
            scope: key_store.create_key(conn, "explorer", scope).key for scope in ("read", "ingest")
        }
    with httpx.Client(
        base_url=server.url, headers={"Authorization": f"Bearer {made['ingest']}"}
    ) as http:

        def post(path: str, body: object) -> None:
            http.post(path, json=body).raise_for_status()

        def start(run_id: str, agent: str, ms: int, **fields) -> None:
            post(
                "/v1/ingest/agent/runs",
                {"id": run_id, "agent_name": agent, "started_at": at(ms), **fields},
            )

        def steps(run_id: str, rows: list[dict]) -> None:
            post("/v1/ingest/agent/steps", [{"run_id": run_id, **row} for row in rows])

        def finish(run_id: str, ms: int, **fields) -> None:
            body = {"termination_reason": "clean", "ended_at": at(ms), **fields}
            post(f"/v1/ingest/agent/runs/{run_id}/finish", body)

        start(
            PLANNER,
            "planner-agent",
            0,
            input={"goal": "explain keelwave"},
            metadata={"env": "prod", "team": "search"},
            tags=["nightly", "v2"],
        )
        start(CHILD, "summarizer-agent", 2000, parent_run_id=PLANNER)
        steps(
            PLANNER,
            [
                {
                    "step_index": 1,
                    "step_type": "think",
                    "content": "Plan: search and fetch at once.",
                    "started_at": at(0),
                    "duration_ms": 100,
                },
                {
                    "step_index": 2,
                    "tool_name": "web_search",
                    "tool_input": {"q": "keelwave"},
                    "tool_output": {"hits": 3},
                    "started_at": at(200),
                    "duration_ms": 1000,
                },
                {
                    "step_index": 3,
                    "tool_name": "fetch_url",
                    "tool_input": {"url": "https://example.com"},
                    "started_at": at(300),
                    "duration_ms": 900,
                },
                {
                    "step_index": 4,
                    "tool_name": "summarize",
                    "tool_input": {"n": 3},
                    "started_at": at(3000),
                    "duration_ms": 500,
                },
            ],
        )
        steps(
            CHILD,
            [
                {
                    "step_index": 1,
                    "tool_name": "condense",
                    "tool_input": {"text": "…"},
                    "started_at": at(2100),
                    "duration_ms": 600,
                }
            ],
        )
        post(
            "/v1/ingest/ai",
            [
                {
                    "run_id": PLANNER,
                    "step_index": 4,
                    "provider": "openai",
                    "model": "gpt-4o",
                    "input_tokens": 1200,
                    "output_tokens": 300,
                    "cost_usd": 0.5,
                    "latency_ms": 300,
                    "started_at": at(3100),
                    "input_messages": [
                        {"role": "user", "content": "Summarise the findings about keelwave."}
                    ],
                    "output_messages": [
                        {"role": "assistant", "content": "Keelwave records every step of an agent."}
                    ],
                }
            ],
        )
        finish(CHILD, 2800)
        finish(PLANNER, 4000, output={"answer": "a Sentry for agents"})

        start(FAILED, "sql-agent", 10_000, tags=["nightly"])
        steps(
            FAILED,
            [
                {
                    "step_index": 1,
                    "tool_name": "list_tables",
                    "tool_input": {},
                    "started_at": at(10_000),
                    "duration_ms": 50,
                },
                {
                    "step_index": 2,
                    "tool_name": "run_sql",
                    "tool_input": {"query": "SELECT * FROM users"},
                    "started_at": at(10_100),
                    "duration_ms": 20,
                    "error": 'relation "users" does not exist',
                    "error_traceback": TRACEBACK,
                },
                {
                    "step_index": 3,
                    "step_type": "think",
                    "content": "Give up.",
                    "started_at": at(10_200),
                    "duration_ms": 5,
                },
            ],
        )
        post(
            "/v1/ingest/ai",
            [
                {
                    "run_id": FAILED,
                    "provider": "openai",
                    "model": "gpt-4o-mini",
                    "input_tokens": 100,
                    "output_tokens": 10,
                    "cost_usd": 0.000194,  # shown as $0.00019, not as $0.000
                    "latency_ms": 40,
                    "started_at": at(10_010),
                }
            ],
        )
        finish(
            FAILED,
            10_300,
            termination_reason="error",
            error='relation "users" does not exist',
            error_traceback=TRACEBACK,
        )

        for run_id, ms, calls, cost in (
            (
                BASE,
                20_000,
                [("search", {"q": "pricing"}), ("open", {"url": "/a"}), ("answer", {})],
                0.02,
            ),
            (
                CHANGED,
                30_000,
                [
                    ("search", {"q": "pricing"}),
                    ("open", {"url": "/b"}),
                    ("open", {"url": "/c"}),
                    ("answer", {}),
                ],
                0.05,
            ),
        ):
            start(run_id, "diff-agent", ms)
            steps(
                run_id,
                [
                    {
                        "step_index": n,
                        "tool_name": name,
                        "tool_input": value,
                        "tool_output": {"ok": True},
                        "started_at": at(ms + 100 * n),
                        "duration_ms": 80,
                    }
                    for n, (name, value) in enumerate(calls, start=1)
                ],
            )
            post(
                "/v1/ingest/ai",
                [
                    {
                        "run_id": run_id,
                        "provider": "anthropic",
                        "model": "claude-haiku",
                        "input_tokens": 400,
                        "output_tokens": 40,
                        "cost_usd": cost,
                        "latency_ms": 50,
                        "started_at": at(ms + 50),
                    }
                ],
            )
            finish(run_id, ms + 1000)

        for run_id, ms in ((TWIN_A, 40_000), (TWIN_B, 41_000)):
            start(run_id, "twin-agent", ms)
            finish(run_id, ms + 100)

        now = datetime.now(UTC)
        post(
            "/v1/ingest/agent/runs",
            {
                "id": LIVE,
                "agent_name": "live-agent",
                "started_at": (now - timedelta(seconds=5)).isoformat(),
            },
        )
        steps(
            LIVE,
            [
                {
                    "step_index": 1,
                    "tool_name": "poll",
                    "tool_input": {"n": 1},
                    "started_at": (now - timedelta(seconds=4)).isoformat(),
                    "duration_ms": 200,
                }
            ],
        )
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


def open_context(browser, width=1366, height=900, scheme="light"):
    return browser.new_context(
        viewport={"width": width, "height": height}, color_scheme=scheme, timezone_id="UTC"
    )


@pytest.fixture
def page(browser):
    context = open_context(browser)
    yield context.new_page()
    context.close()


def sign_in(page, server, key: str, then: str = "/") -> None:
    page.goto(server.url + "/")
    page.get_by_label("API key").fill(key)
    page.get_by_role("button", name="Sign in").click()
    expect(page.get_by_role("heading", name="Overview")).to_be_visible()
    if then != "/":
        page.goto(server.url + then)


def box(locator) -> dict:
    found = locator.bounding_box()
    assert found, "not on screen"
    return found


def test_waterfall_interleaves_steps_model_calls_and_child_runs_by_time(server, key, page) -> None:
    sign_in(page, server, key, f"/runs/{PLANNER}")
    expect(page.get_by_role("heading", name="planner-agent")).to_be_visible()
    rows = page.locator("ol.timeline > li")
    expect(rows).to_have_text(
        [
            re.compile(r"^1think"),
            re.compile(r"^2web_search"),
            re.compile(r"^3fetch_url"),
            re.compile(r"^↳summarizer-agent.*child run · clean · 1 step"),
            re.compile(r"^4summarize"),
            re.compile(r"^llmgpt-4o.*of step 4"),
        ]
    )

    # Steps 2 and 3 ran at once: their bars overlap on the time axis; step 4 came after.
    search, fetch, summarize = (rows.nth(n).locator(".bar") for n in (1, 2, 4))
    a, b, c = box(search), box(fetch), box(summarize)
    assert a["x"] < b["x"] < a["x"] + a["width"], "steps 2 and 3 should overlap"
    assert c["x"] > a["x"] + a["width"], "step 4 began after step 2 ended"
    child = box(rows.nth(3).locator(".bar"))
    assert a["x"] + a["width"] < child["x"] < c["x"], "the child run sits between steps 3 and 4"

    # The child run opens in place, on the same axis.
    rows.nth(3).get_by_role("button").click()
    nested = page.get_by_label("Child run timeline")
    expect(nested.locator("li")).to_have_text([re.compile(r"^1condense")])
    condense = box(nested.locator(".bar"))
    assert child["x"] <= condense["x"] <= child["x"] + child["width"]

    # Absolute times with their zone, and the run's input, output, metadata and tags.
    facts = page.locator(".facts")
    expect(facts).to_contain_text(clock(0))
    expect(facts).to_contain_text(clock(4000))
    expect(facts.get_by_role("link", name="nightly")).to_be_visible()
    data = page.get_by_role("region", name="Run data")
    expect(data.get_by_label("run input")).to_contain_text('"goal": "explain keelwave"')
    expect(data.get_by_label("run output")).to_contain_text('"answer": "a Sentry for agents"')
    expect(data.get_by_label("run metadata")).to_contain_text('"env": "prod"')

    rows.nth(2).get_by_role("button").click()
    inspector = page.get_by_label("Step inspector")
    expect(inspector).to_contain_text(f"started {clock(300)} · +300 ms into the run")
    page.screenshot(path=ARTIFACTS / "explorer-waterfall.png", full_page=True)


def test_a_model_call_shows_its_prompt_and_response_and_leads_to_its_step(
    server, key, page
) -> None:
    sign_in(page, server, key, f"/runs/{PLANNER}")
    call = page.locator("ol.timeline > li.wf-call")
    call.get_by_role("button").click()
    inspector = page.get_by_label("Step inspector")
    expect(inspector.get_by_role("heading", name="Model call")).to_be_visible()
    expect(inspector).to_contain_text("1.2k in · 300 out")
    expect(inspector).to_contain_text("Summarise the findings about keelwave.")
    expect(inspector).to_contain_text("Keelwave records every step of an agent.")
    inspector.get_by_role("button", name="go to step 4").click()
    expect(inspector).to_contain_text("step 4 · tool_call · summarize")
    expect(page.locator("ol.timeline > li").nth(4).get_by_role("button")).to_have_attribute(
        "aria-pressed", "true"
    )
    inspector.get_by_role("button", name="gpt-4o").click()  # the step's own model calls
    expect(inspector.get_by_role("heading", name="Model call")).to_be_visible()


def test_a_failed_run_opens_on_its_failing_step_with_the_traceback(server, key, page) -> None:
    sign_in(page, server, key, f"/runs/{FAILED}")
    expect(page.get_by_role("heading", name="sql-agent")).to_be_visible()
    failing = page.locator("ol.timeline > li", has_text="run_sql").get_by_role("button")
    expect(failing).to_have_attribute("aria-pressed", "true")
    inspector = page.get_by_label("Step inspector")
    expect(inspector).to_contain_text("step 2")
    expect(inspector).to_contain_text('relation "users" does not exist')
    expect(inspector.locator("details.traceback pre")).to_contain_text(
        'File "agent.py", line 12, in run_sql'
    )
    run_error = page.locator(".run-error")
    expect(run_error.locator("p.error")).to_have_text('relation "users" does not exist')
    run_error.locator("summary", has_text="traceback").click()
    expect(run_error.locator("pre")).to_contain_text("UndefinedTable")
    status = page.locator(".facts .status")
    assert status.evaluate("e => getComputedStyle(e).color") == "rgb(198, 40, 40)"  # red, not green
    page.screenshot(path=ARTIFACTS / "explorer-failed-run.png", full_page=True)


def first_ids(page, count: int) -> list[str]:
    return [
        text[:8]
        for text in page.locator("tbody tr td:nth-child(2) a.mono").all_inner_texts()[:count]
    ]


def test_runs_list_sorts_when_a_header_is_clicked(server, key, page) -> None:
    sign_in(page, server, key, "/runs")
    expect(page.locator("tbody tr").first).to_be_visible()
    page.get_by_role("button", name="cost").click()
    expect(page.get_by_role("columnheader", name="cost")).to_have_attribute(
        "aria-sort", "descending"
    )
    expect(page.locator("tbody tr").first).to_contain_text(PLANNER[:8])  # $0.50, the most
    assert "sort=cost_usd" in page.url and "order=desc" in page.url
    page.get_by_role("button", name="cost").click()
    expect(page.get_by_role("columnheader", name="cost")).to_have_attribute(
        "aria-sort", "ascending"
    )
    expect(page.locator("tbody tr").last).to_contain_text(PLANNER[:8])
    expect(page.locator("tbody tr", has_text=FAILED[:8])).to_contain_text("$0.00019")
    page.get_by_role("button", name="tokens").click()
    expect(page.locator("tbody tr").first).to_contain_text(PLANNER[:8])  # 1.5k, the most
    page.screenshot(path=ARTIFACTS / "explorer-runs-sorted.png", full_page=True)


def test_runs_list_groups_child_runs_under_their_parent(server, key, page) -> None:
    sign_in(page, server, key, "/runs")
    expect(page.locator("tbody tr", has_text=PLANNER[:8])).to_be_visible()
    expect(page.locator("tbody tr", has_text=CHILD[:8])).to_have_count(0)  # under its parent
    page.locator("tbody tr", has_text=PLANNER[:8]).get_by_role("button", name="1 child").click()
    child = page.locator("tbody tr.child-run")
    expect(child).to_contain_text(CHILD[:8])
    expect(child).to_contain_text("↳")
    expect(child).to_contain_text("summarizer-agent")


def test_runs_list_filters_search_as_you_type_and_says_when_nothing_matches(
    server, key, page
) -> None:
    sign_in(page, server, key, "/runs")
    rows = page.locator("tbody tr")
    expect(rows.first).to_be_visible()
    page.get_by_label("Search by run id or agent").press_sequentially("sql-ag")  # no Enter
    expect(rows).to_have_count(1)
    expect(rows).to_contain_text("sql-agent")
    page.get_by_label("Search by run id or agent").fill("no-such-agent")
    expect(page.get_by_text("No run matches these filters.")).to_be_visible()
    expect(page.get_by_text("keelwave demo")).to_have_count(0)
    page.get_by_role("button", name="Clear filters").first.click()
    expect(page.get_by_label("Search by run id or agent")).to_have_value("")

    page.get_by_label("Tag").fill("nightly")
    page.get_by_label("Tag").press("Enter")
    expect(rows).to_have_count(2)  # the planner and the failed run
    page.get_by_label("Metadata").fill("env")
    page.get_by_label("Metadata").press("Enter")
    expect(page.get_by_role("alert")).to_contain_text("key=value")
    page.get_by_label("Metadata").fill("env=prod")
    page.get_by_label("Metadata").press("Enter")
    expect(rows).to_have_count(1)
    expect(rows).to_contain_text(PLANNER[:8])
    assert "tag=nightly" in page.url and "metadata=env%3Dprod" in page.url
    page.get_by_role("button", name="remove metadata: env=prod").click()
    expect(rows).to_have_count(2)

    page.get_by_role("button", name="Clear filters").first.click()
    page.get_by_label("From").fill((T0 + timedelta(seconds=25)).strftime("%Y-%m-%dT%H:%M"))
    page.get_by_label("To").fill((T0 + timedelta(seconds=35)).strftime("%Y-%m-%dT%H:%M"))
    # Minutes, not seconds: 25 s to 35 s becomes the minute of T0 (and the twins' 40 s may
    # fall in it too); the planner at T0 and the live run now are always out.
    expect(page.locator("tbody tr", has_text=LIVE[:8])).to_have_count(0)
    page.get_by_label("From").fill((T0 + timedelta(days=1)).strftime("%Y-%m-%dT%H:%M"))
    page.get_by_label("To").fill((T0 + timedelta(days=2)).strftime("%Y-%m-%dT%H:%M"))
    expect(page.get_by_text("No run matches these filters.")).to_be_visible()


def test_a_run_prefix_opens_the_run_and_an_ambiguous_one_lists_the_runs(server, key, page) -> None:
    sign_in(page, server, key, f"/runs/{PLANNER[:8]}")
    expect(page.get_by_role("heading", name="planner-agent")).to_be_visible()
    assert page.url.endswith(f"/runs/{PLANNER}")
    page.goto(f"{server.url}/runs/abcd")
    expect(page.get_by_role("heading", name="Runs starting with abcd")).to_be_visible()
    links = page.locator("tbody a.mono")
    expect(links).to_have_count(2)
    page.get_by_role("link", name=TWIN_B).click()
    expect(page.get_by_role("heading", name="twin-agent")).to_be_visible()
    assert page.url.endswith(f"/runs/{TWIN_B}")
    page.goto(f"{server.url}/runs/ffff0000ffff")
    expect(page.get_by_role("alert")).to_contain_text("is the start of no run's id")


def test_an_unknown_page_is_a_404_page(server, key, page) -> None:
    sign_in(page, server, key, "/nope")
    expect(page.get_by_role("heading", name="Page not found")).to_be_visible()
    expect(page.locator("main")).to_contain_text("/nope")
    expect(page.get_by_role("heading", name="Overview")).to_have_count(0)


def test_tools_link_to_the_runs_that_called_them_over_30_days(server, key, page) -> None:
    sign_in(page, server, key, "/tools")
    page.get_by_role("button", name="30d").click()
    expect(page.get_by_role("button", name="30d")).to_have_attribute("aria-pressed", "true")
    page.get_by_role("link", name="web_search").click()
    expect(page.get_by_role("heading", name="Runs")).to_be_visible()
    expect(page.get_by_label("Active filters")).to_contain_text("tool: web_search")
    rows = page.locator("tbody tr")
    expect(rows).to_have_count(1)
    expect(rows).to_contain_text(PLANNER[:8])


def test_cost_by_model_and_by_agent(server, key, page) -> None:
    sign_in(page, server, key, "/cost")
    by_model = page.get_by_label("Cost by model")
    expect(by_model.locator("tbody tr").first).to_contain_text("gpt-4o")
    expect(by_model.locator("tbody tr").first).to_contain_text("$0.50")
    expect(page.get_by_role("img", name="Cost over time")).to_be_visible()
    page.get_by_role("button", name="by agent").click()
    by_agent = page.get_by_label("Cost by agent")
    expect(by_agent.locator("tbody tr").first).to_contain_text("planner-agent")
    expect(by_agent).to_contain_text("diff-agent")
    page.screenshot(path=ARTIFACTS / "explorer-cost.png", full_page=True)


def test_colours_mean_one_thing_error_endings_are_red(server, key, page) -> None:
    sign_in(page, server, key)
    ends = page.locator("table.mix")
    red, green = "rgb(198, 40, 40)", "rgb(27, 127, 59)"
    error_bar = ends.locator("tr", has_text="error").locator(".fill")
    expect(error_bar).to_have_count(1)
    assert error_bar.evaluate("e => getComputedStyle(e).backgroundColor") == red
    clean_bar = ends.locator("tr", has_text="clean").locator(".fill")
    assert clean_bar.evaluate("e => getComputedStyle(e).backgroundColor") == green
    sql = page.locator("table").last.locator("tr", has_text="sql-agent")
    error_rate = sql.locator("td").nth(4)
    expect(error_rate).to_have_text("100.0%")
    assert error_rate.evaluate("e => getComputedStyle(e).color") == red
    page.goto(f"{server.url}/tools")
    run_sql = page.locator("tr", has_text="run_sql").locator("td").nth(4)
    expect(run_sql).to_have_text("100.0%")
    assert run_sql.evaluate("e => getComputedStyle(e).color") == red


def test_compare_two_runs_from_the_runs_list(server, key, page) -> None:
    sign_in(page, server, key, "/runs?agent_name=diff-agent")
    expect(page.locator("tbody tr")).to_have_count(2)
    page.get_by_label(f"compare {BASE[:8]}").check()
    page.get_by_label(f"compare {CHANGED[:8]}").check()
    page.get_by_role("group", name="Compare runs").get_by_role("button", name="Compare").click()
    expect(page.get_by_role("heading", name="Compare runs")).to_be_visible()
    pairs = page.get_by_label("Aligned steps").locator("tbody tr.pair")
    expect(pairs.filter(has_text="changed input")).to_have_count(1)
    changed = pairs.filter(has_text="changed input")
    expect(changed).to_contain_text("2 open")
    expect(changed).to_contain_text('{"url":"/a"}')
    expect(pairs.filter(has_text="only in")).to_have_count(1)
    expect(pairs.filter(has_text="same").first).to_contain_text("search")
    totals = page.get_by_label("Totals")
    expect(totals.locator("tr", has_text="steps")).to_contain_text("+1")
    expect(totals.locator("tr", has_text="cost")).to_contain_text("+$0.03")
    changed.click()
    expect(page.locator("tr.pair-detail")).to_contain_text('"url": "/b"')
    page.screenshot(path=ARTIFACTS / "explorer-compare.png", full_page=True)


def test_compare_with_another_run_from_a_run_page(server, key, page) -> None:
    sign_in(page, server, key, f"/runs/{CHANGED}")
    expect(page.get_by_role("heading", name="diff-agent")).to_be_visible()
    page.get_by_label("Compare with").select_option(index=1)
    expect(page.get_by_role("heading", name="Compare runs")).to_be_visible()
    assert f"a={CHANGED}" in page.url and f"b={BASE}" in page.url
    expect(page.get_by_label("Run A")).to_contain_text(CHANGED[:8])


def test_a_running_run_shows_its_elapsed_time_and_grows(server, keys, key, page) -> None:
    sign_in(page, server, key, f"/runs/{LIVE}")
    expect(page.locator(".facts .running-for")).to_contain_text("running for")
    rows = page.locator("ol.timeline > li")
    expect(rows).to_have_count(1)
    httpx.post(
        f"{server.url}/v1/ingest/agent/steps",
        headers={"Authorization": f"Bearer {keys['ingest']}"},
        json=[
            {
                "run_id": LIVE,
                "step_index": 2,
                "tool_name": "poll",
                "tool_input": {"n": 2},
                "duration_ms": 100,
            }
        ],
    ).raise_for_status()
    expect(rows).to_have_count(2)  # read again while the run is running


def test_a_long_run_is_read_page_after_page(server, keys, key, page) -> None:
    """The page asks for the timeline 1,000 items at a time: 1,203 steps take two pages."""
    run_id = str(uuid.uuid4())
    with httpx.Client(
        base_url=server.url, headers={"Authorization": f"Bearer {keys['ingest']}"}
    ) as http:
        http.post(
            "/v1/ingest/agent/runs", json={"id": run_id, "agent_name": "long-agent"}
        ).raise_for_status()
        steps = [
            {"run_id": run_id, "step_index": n, "tool_name": f"tool_{n % 7}",
             "tool_input": {"page": n}, "tool_output": {"rows": n}, "duration_ms": 5}
            for n in range(1, 1204)
        ]  # fmt: skip
        http.post("/v1/ingest/agent/steps", json=steps).raise_for_status()
        http.post(
            f"/v1/ingest/agent/runs/{run_id}/finish", json={"termination_reason": "clean"}
        ).raise_for_status()
    sign_in(page, server, key, f"/runs/{run_id}")
    rows = page.locator("ol.timeline > li")
    expect(rows).to_have_count(1203)
    expect(rows.last).to_contain_text("1203")


@pytest.mark.parametrize("scheme", ["light", "dark"])
@pytest.mark.parametrize("size", [(1366, 900), (390, 844)])
def test_screenshots_wide_and_narrow_light_and_dark(server, key, browser, scheme, size) -> None:
    context = open_context(browser, *size, scheme=scheme)
    page = context.new_page()
    sign_in(page, server, key, f"/runs/{PLANNER}")
    expect(page.locator("ol.timeline > li")).to_have_count(6)
    name = f"{size[0]}-{scheme}"
    page.screenshot(path=ARTIFACTS / f"explorer-run-{name}.png", full_page=True)
    page.goto(f"{server.url}/runs")
    expect(page.locator("tbody tr").first).to_be_visible()
    page.screenshot(path=ARTIFACTS / f"explorer-runs-{name}.png", full_page=True)
    page.goto(f"{server.url}/compare?a={BASE}&b={CHANGED}")
    expect(page.get_by_role("heading", name="Compare runs")).to_be_visible()
    page.screenshot(path=ARTIFACTS / f"explorer-compare-{name}.png", full_page=True)
    page.goto(f"{server.url}/cost")
    expect(page.get_by_role("heading", name="Cost")).to_be_visible()
    page.screenshot(path=ARTIFACTS / f"explorer-cost-{name}.png", full_page=True)
    context.close()
