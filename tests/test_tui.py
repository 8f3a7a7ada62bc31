"""The Textual run explorer, driven by Pilot against a real server with known data,
and SVG snapshots of its main screens (at 100×30, with a frozen clock)."""

from __future__ import annotations

import asyncio
import functools
import html
import io
import re
import time
import uuid
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
import psycopg
import pytest
from rich.console import Console
from textual.widgets import DataTable, Static, TabbedContent, Tree
from verdict_runs import seed

from keelwave.db import keys as key_store
from keelwave.remote.api import Api
from keelwave.remote.config import Credentials
from keelwave.tui import KeelwaveApp, Source, runs_screen
from keelwave.tui.help_screen import SECTIONS, HelpScreen
from keelwave.tui.run_screen import RunScreen
from keelwave.tui.runs_screen import RunsScreen

NOW = datetime.now(UTC).replace(microsecond=0)
LOOP_RUN = "a1f3c2d4-0000-4000-8000-000000000001"
CHILD_RUN = "b2e4d6f8-0000-4000-8000-000000000002"
CLEAN_RUN = "c3d5e7a9-0000-4000-8000-000000000003"
OPEN_RUN = "d4c6b8a0-0000-4000-8000-000000000004"
TRACEBACK = (
    "Traceback (most recent call last):\n"
    '  File "support.py", line 40, in answer\n'
    "    page = fetch_url(url)\n"
    "TimeoutError: read timed out"
)


def seed_tui(server, db_url, project: str, now: datetime, series: int, open_run: bool) -> str:
    """A project of four runs at known times before ``now``: one that loops (with a model
    call before it and one during it, and a child run started during the loop), its child,
    one that fails with a traceback, and (``open_run``) one still going. ``series`` makes
    the ids of this project's runs its own. Returns the project's key."""
    loop_run, child_run, clean_run, open_id = (
        run_id.replace("-8000-", f"-{8000 + series}-")
        for run_id in (LOOP_RUN, CHILD_RUN, CLEAN_RUN, OPEN_RUN)
    )
    with psycopg.connect(db_url, autocommit=True) as conn:
        created = key_store.create_key(conn, project, "all")
    with httpx.Client(
        base_url=server.url, headers={"Authorization": f"Bearer {created.key}"}
    ) as http:

        def run(run_id, agent, minutes_ago, **extra):
            started = now - timedelta(minutes=minutes_ago)
            http.post(
                "/v1/ingest/agent/runs",
                json={
                    "id": run_id,
                    "agent_name": agent,
                    "started_at": started.isoformat(),
                    **extra,
                },
            ).raise_for_status()
            return started

        started = run(loop_run, "research-agent", 30)
        steps = [
            {
                "run_id": loop_run,
                "step_index": i,
                "tool_name": "web_search",
                "tool_input": {"q": "what is keelwave?", "max_results": 3},
                "tool_output": {"results": ["a", "b"]},
                "started_at": (started + timedelta(seconds=2 + 5 * i)).isoformat(),
                "duration_ms": 400,
            }
            for i in range(1, 6)
        ]
        steps.append(
            {
                "run_id": loop_run,
                "step_index": 6,
                "step_type": "think",
                "content": "I keep getting the same results.",
                "started_at": (started + timedelta(seconds=38)).isoformat(),
            }
        )
        http.post("/v1/ingest/agent/steps", json=steps).raise_for_status()
        # A model call before the first step, and one during the loop (linked to step 1).
        for number, (seconds, step_index) in enumerate(((0.5, None), (3, 1)), start=1):
            http.post("/v1/ingest/ai", json={"id": str(uuid.UUID(int=series * 100 + number)),
                                             "run_id": loop_run, "step_index": step_index,
                                             "provider": "openai", "model": "gpt-4o",
                                             "input_tokens": 6000, "output_tokens": 450,
                                             "latency_ms": 900,
                                             "started_at": (started + timedelta(
                                                 seconds=seconds)).isoformat()}
                      ).raise_for_status()  # fmt: skip
        http.post(
            f"/v1/ingest/agent/runs/{loop_run}/finish",
            json={
                "termination_reason": "loop_detected",
                "loop_detected": True,
                "loop_step_index": 1,
                "ended_at": (started + timedelta(seconds=42)).isoformat(),
            },
        ).raise_for_status()
        # The child starts 20 s into its parent's run (30 min ago), during the loop.
        started = run(child_run, "summarizer-agent", 30 - 1 / 3, parent_run_id=loop_run)
        http.post(
            f"/v1/ingest/agent/runs/{child_run}/finish",
            json={
                "termination_reason": "clean",
                "ended_at": (started + timedelta(seconds=3)).isoformat(),
            },
        ).raise_for_status()
        started = run(clean_run, "support-agent", 20)
        http.post("/v1/ingest/agent/steps", json={"run_id": clean_run, "step_index": 1,
                  "tool_name": "fetch_url", "tool_input": {"url": "https://example.com"},
                  "started_at": (started + timedelta(seconds=1)).isoformat(),
                  "duration_ms": 120, "error": "TimeoutError: read timed out"}
                  ).raise_for_status()  # fmt: skip
        http.post(
            f"/v1/ingest/agent/runs/{clean_run}/finish",
            json={
                "termination_reason": "error",
                "error": "TimeoutError: read timed out",
                "error_traceback": TRACEBACK,
                "ended_at": (started + timedelta(seconds=8)).isoformat(),
            },
        ).raise_for_status()
        if open_run:
            run(open_id, "planner-agent", 5)
        # The server judges the steps shortly after they commit: the snapshots show its
        # verdict, so wait for it.
        for _ in range(200):
            answer = http.get(f"/v1/projects/{created.project_id}/agent/runs/{loop_run}")
            if answer.json()["data"]["detected_loop"]:
                break
            time.sleep(0.05)
        else:
            raise AssertionError("the server never judged the looping run")
    return created.key


@pytest.fixture(scope="module")
def key(server, db_url) -> str:
    """Project 'tui', whose runs started minutes before the tests: one is still running,
    and the summary's 24 hours hold them all."""
    return seed_tui(server, db_url, "tui", NOW, series=0, open_run=True)


# The snapshots' runs are at fixed times, so that the absolute times they show are
# always the same; the summary strip's 24 hours (the server's, ending now) and the 24 hours
# before them hold none.
# A run still going would stall and be timed out by the server: the snapshots have none.
SNAPSHOT_NOW = datetime(2025, 6, 2, 9, 30, tzinfo=UTC)


@pytest.fixture(scope="module")
def snapshot_key(server, db_url) -> str:
    return seed_tui(server, db_url, "tui-snapshots", SNAPSHOT_NOW, series=1, open_run=False)


@pytest.fixture(scope="module")
def judged(server, db_url):
    """A project whose runs loop by the agent's account, the server's or both, and one with
    near-duplicates and no progress (tests/verdict_runs.py): its key and the runs."""
    with psycopg.connect(db_url, autocommit=True) as conn:
        created = key_store.create_key(conn, "tui-findings", "all")
    return created.key, seed(server.url, created.key, created.key, created.project_id)


def make_app(server, key: str, endpoint: str | None = None, now: datetime = NOW) -> KeelwaveApp:
    api = Api(Credentials(endpoint or server.url, key, "test"), timeout=2)
    return KeelwaveApp(Source(api, clock=lambda: now), refresh_seconds=0.5)


def text_of(widget: Static) -> str:
    """What a Static shows, as plain text, whatever renderable it holds."""
    console = Console(width=120, file=io.StringIO(), record=True)
    console.print(widget.content)
    return console.export_text()


class NeverGotThere(AssertionError):
    """The screen did not reach what a test waited for."""


async def wait_for(pilot, condition, tries: int = 400) -> None:
    # (up to 20 s, as the dashboard's tests wait: a shared machine can be that slow)
    for _ in range(tries):
        if condition():
            return
        await pilot.pause(0.05)
    raise NeverGotThere(f"the screen never got there; it shows:\n{screen_text(pilot.app)}")


def screen_text(app) -> str:
    """What the terminal shows, as lines of text (from the app's SVG screenshot)."""
    svg = app.export_screenshot()
    rows: dict[str, list[str]] = {}
    for y, text in re.findall(r'<text[^>]*\by="([\d.]+)"[^>]*>(.*?)</text>', svg):
        rows.setdefault(y, []).append(html.unescape(text).replace("\xa0", " "))
    return "\n".join("".join(parts).rstrip() for _, parts in
                     sorted(rows.items(), key=lambda item: float(item[0])))  # fmt: skip


def snapshot_matches(snap_compare, make, size, run_before) -> bool:
    """snap_compare of the app ``make()`` gives, run once more with a fresh app if the
    screen never got where ``run_before`` waits (a machine busy with the other tests
    delays a first answer past the app's two-second timeout): the picture must still
    match."""
    try:
        return snap_compare(make(), terminal_size=size, run_before=run_before)
    except NeverGotThere as first:
        print(f"snapshot again after: {first}")
        return snap_compare(make(), terminal_size=size, run_before=run_before)


async def test_runs_screen_filters_and_live_refresh(server, key) -> None:
    app = make_app(server, key)
    async with app.run_test(size=(100, 30)) as pilot:
        table = app.screen.query_one(DataTable)
        await wait_for(pilot, lambda: table.row_count == 4)
        summary = text_of(app.screen.query_one("#summary", Static))
        assert "loop rate" in summary and "25.0%" in summary
        await pilot.press("l")  # looping only
        await wait_for(pilot, lambda: table.row_count == 1)
        assert app.screen.row_ids == [LOOP_RUN]
        await pilot.press("l", "s")  # all again, then status: running
        await wait_for(pilot, lambda: app.screen.row_ids == [OPEN_RUN])
        await pilot.press("s", "s", "s")  # back to all statuses
        await wait_for(pilot, lambda: table.row_count == 4)
        await pilot.press("slash")
        await pilot.press(*"support", "enter")
        await wait_for(pilot, lambda: app.screen.row_ids == [CLEAN_RUN])
        await pilot.press("escape")
        await wait_for(pilot, lambda: table.row_count == 4)
        await pilot.press("question_mark")
        assert isinstance(app.screen, HelpScreen)
        await pilot.press("escape")


async def test_new_runs_appear_without_a_keypress(server, db_url) -> None:
    with psycopg.connect(db_url, autocommit=True) as conn:
        live_key = key_store.create_key(conn, f"tui-live-{uuid.uuid4().hex[:6]}", "all").key
    app = make_app(server, live_key)
    async with app.run_test(size=(100, 30)) as pilot:
        table = app.screen.query_one(DataTable)
        await wait_for(pilot, lambda: "0 runs" in text_of(app.screen.query_one("#filters")))
        for number in range(3):
            httpx.post(
                f"{server.url}/v1/ingest/agent/runs",
                json={"agent_name": "late-agent"},
                headers={"Authorization": f"Bearer {live_key}"},
            ).raise_for_status()
            await wait_for(pilot, lambda n=number: table.row_count == n + 1)


async def test_a_refresh_that_brings_nothing_new_leaves_the_list_where_the_user_was(
    server, db_url
) -> None:
    """The list refreshes every few seconds; redrawing it when nothing changed scrolled a
    user reading down a long list back to the top each time (and reset its columns to
    their labels' widths until the table was next idle)."""
    with psycopg.connect(db_url, autocommit=True) as conn:
        long_key = key_store.create_key(conn, f"tui-long-{uuid.uuid4().hex[:6]}", "all").key
    started = NOW - timedelta(hours=1)
    for number in range(40):
        httpx.post(
            f"{server.url}/v1/ingest/agent/runs",
            json={"agent_name": f"agent-{number:02}",
                  "started_at": (started + timedelta(seconds=number)).isoformat()},
            headers={"Authorization": f"Bearer {long_key}"},
        ).raise_for_status()  # fmt: skip
    app = make_app(server, long_key)
    app.refresh_seconds = 3600  # the refresh comes when the test says
    async with app.run_test(size=(100, 24)) as pilot:
        table = app.screen.query_one(DataTable)
        await wait_for(pilot, lambda: table.row_count == 40)
        await pilot.pause()
        table.scroll_to(y=20, animate=False)
        await pilot.pause()
        assert table.scroll_y == 20
        await app.screen.reload().wait()
        await pilot.pause()
        assert table.scroll_y == 20


async def test_run_screen_shows_the_whole_story_in_start_order(server, key) -> None:
    app = make_app(server, key)
    async with app.run_test(size=(100, 30)) as pilot:
        table = app.screen.query_one(DataTable)
        await wait_for(pilot, lambda: LOOP_RUN in app.screen.row_ids)
        table.move_cursor(row=app.screen.row_ids.index(LOOP_RUN))
        await pilot.press("enter")
        await wait_for(pilot, lambda: isinstance(app.screen, RunScreen))
        tree = app.screen.query_one(Tree)
        await wait_for(pilot, lambda: len(tree.root.children) == 3)
        # The model call made before step 1, the loop band, the think step: by start time.
        call, band, think = tree.root.children
        assert "gpt-4o" in str(call.label)
        assert "web_search ×5  steps 1–5" in str(band.label)
        assert "+ 1 call, 1 child" in str(band.label)  # made while the loop ran
        assert "think" in str(think.label)
        header = text_of(app.screen.query_one("#header", Static))
        assert "LOOP" in header and "from step 1" in header
        started = (NOW - timedelta(minutes=30)).astimezone()
        assert f"started {started:%Y-%m-%d %H:%M:%S %Z} (30m ago)" in header
        assert f"ended {started + timedelta(seconds=42):%H:%M:%S %Z}" in header
        assert "2 model calls" in header
        inspector = text_of(app.screen.query_one("#step", Static))
        assert "model call · openai gpt-4o" in inspector and "+500 ms" in inspector
        await pilot.press("down", "space")  # open the band: its steps, the call, the child
        await wait_for(pilot, lambda: band.is_expanded)
        kinds = [child.data["kind"] for child in band.children]
        assert kinds == ["model_call", "step", "step", "step", "child_run", "step", "step"]
        await pilot.press("down", "down")  # step 1
        inspector = text_of(app.screen.query_one("#step", Static))
        assert "what is keelwave?" in inspector and "repeated ×5" in inspector
        assert "+7.0 s" in inspector
        await pilot.press("c")  # the child run
        children = app.screen.query_one("#children", DataTable)
        await wait_for(pilot, lambda: children.row_count == 1)
        assert "summarizer-agent" in str(children.get_row_at(0)[1])
        await pilot.press("enter")
        await wait_for(pilot, lambda: getattr(app.screen, "run_id", None) == CHILD_RUN)
        await pilot.press("p")  # and back up to its parent
        await wait_for(pilot, lambda: getattr(app.screen, "run_id", None) == LOOP_RUN)


async def test_a_failed_run_opens_on_its_failing_step_with_the_traceback(server, key) -> None:
    app = make_app(server, key)
    async with app.run_test(size=(100, 30)) as pilot:
        screen = await open_run(pilot, app, CLEAN_RUN)
        tree = screen.query_one(Tree)
        step, error = tree.root.children
        assert tree.cursor_node is step and "fetch_url" in str(step.label)
        inspector = text_of(screen.query_one("#step", Static))
        assert "TimeoutError: read timed out" in inspector and "support.py" in inspector
        await pilot.press("down")  # the run's own error, last
        inspector = text_of(screen.query_one("#step", Static))
        assert "the run's error" in inspector and TRACEBACK.splitlines()[-2].strip() in inspector


async def open_run(pilot, app, run_id: str) -> RunScreen:
    table = app.screen.query_one(DataTable)
    await wait_for(pilot, lambda: run_id in app.screen.row_ids)
    table.move_cursor(row=app.screen.row_ids.index(run_id))
    await pilot.press("enter")
    await wait_for(pilot, lambda: isinstance(app.screen, RunScreen))
    screen = app.screen
    await wait_for(pilot, lambda: len(screen.query_one(Tree).root.children) > 0)
    return screen


def cell(app, run_id: str, column: int) -> str:
    row = app.screen.query_one(DataTable).get_row(run_id)
    return str(getattr(row[column], "plain", row[column]))


async def test_runs_screen_badges_say_whose_loop_it_is(server, judged) -> None:
    key, runs = judged
    app = make_app(server, key)
    async with app.run_test(size=(100, 30)) as pilot:
        table = app.screen.query_one(DataTable)
        await wait_for(pilot, lambda: table.row_count == 4)
        assert cell(app, runs.server_only, 6).strip() == "LOOP*"
        assert cell(app, runs.cycle, 6).strip() == "LOOP"
        assert cell(app, runs.agent_only, 6).strip() == "LOOP"
        assert cell(app, runs.near, 6).strip() == "≈∅"
        filters = text_of(app.screen.query_one("#filters", Static))
        assert "loop rate 75.0%" in filters and "LOOP* detected by the server only" in filters
        summary = text_of(app.screen.query_one("#summary", Static))
        assert "loop rate 50.0%" in summary and "detected 50.0%" in summary
        await pilot.press("l")  # loops by either account
        await wait_for(pilot, lambda: table.row_count == 3)
        assert set(app.screen.row_ids) == {runs.server_only, runs.cycle, runs.agent_only}


async def test_run_screen_a_loop_only_the_server_detected(server, judged) -> None:
    key, runs = judged
    app = make_app(server, key)
    async with app.run_test(size=(100, 30)) as pilot:
        screen = await open_run(pilot, app, runs.server_only)
        header = text_of(screen.query_one("#header", Static))
        assert "LOOP from step 1 (detected by the server)" in header
        assert "findings exact loop" in header
        [band] = screen.query_one(Tree).root.children
        assert "web_search ×3  steps 1–3" in str(band.label)


async def test_run_screen_draws_a_cycle_as_one_band(server, judged) -> None:
    key, runs = judged
    app = make_app(server, key)
    async with app.run_test(size=(100, 30)) as pilot:
        screen = await open_run(pilot, app, runs.cycle)
        header = text_of(screen.query_one("#header", Static))
        assert (
            "from step 1 (reported by the agent at step 3; the server found it from step 1)"
            in " ".join(header.split())
        )
        assert "findings exact loop, cycle" in header
        [band] = screen.query_one(Tree).root.children
        assert "search → open ×3  steps 1–7  (cycle)" in str(band.label)
        await pilot.press("space")
        await wait_for(pilot, lambda: band.is_expanded)
        names = [str(child.label).split()[-1] for child in band.children]
        assert names == ["search", "open", "search", "think", "open", "search", "open"]
        await pilot.press("down")
        inspector = text_of(screen.query_one("#step", Static))
        assert "cycle: search → open, 3 times" in inspector


async def test_run_screen_marks_near_duplicates_and_no_progress(server, judged) -> None:
    key, runs = judged
    app = make_app(server, key)
    async with app.run_test(size=(100, 30)) as pilot:
        screen = await open_run(pilot, app, runs.near)
        header = text_of(screen.query_one("#header", Static))
        assert "LOOP" not in header and "findings near-duplicate, no progress" in header
        assert "yellow: a warning, not a loop" in header
        labels = [str(node.label) for node in screen.query_one(Tree).root.children]
        assert labels[0].endswith("lookup  ≈ near-duplicate")
        assert labels[1].endswith("lookup  ≈ near-duplicate of step 1")
        assert labels[4].endswith("kb_search  ∅ no progress since step 4")
        await pilot.press("down")  # step 2
        inspector = " ".join(text_of(screen.query_one("#step", Static)).split())
        assert "near-duplicate: lookup called 3 times with inputs that differ only in" in inspector
        screen.query_one(TabbedContent).active = "findings-pane"
        findings = screen.query_one("#findings", DataTable)
        await wait_for(pilot, lambda: findings.row_count == 2)
        assert "kb_search called 3 times in a row" in str(findings.get_row_at(1)[-1])


# -- every key the help screen lists, pressed ------------------------------------------

CHECKS: dict[tuple[str, str], Callable[..., Awaitable[None]]] = {}


def checks(section: str, keys: str):
    """Register the check of one help entry: what pressing it does."""

    def register(check):
        CHECKS[(section, keys)] = check
        return check

    return register


@checks("Runs", "↑ ↓ j k")
async def _move_in_runs(pilot, app, **_) -> None:
    table = app.screen.query_one(DataTable)
    for key, row in (("j", 1), ("down", 2), ("k", 1), ("up", 0)):
        await pilot.press(key)
        assert table.cursor_row == row, key


@checks("Runs", "enter")
async def _open_a_run(pilot, app, **_) -> None:
    app.screen.query_one(DataTable).move_cursor(row=app.screen.row_ids.index(LOOP_RUN))
    await pilot.press("enter")
    await wait_for(pilot, lambda: getattr(app.screen, "run_id", None) == LOOP_RUN)
    app.pop_screen()


@checks("Runs", "/")
async def _search(pilot, app, **_) -> None:
    await pilot.press("slash", *"support")  # applies as it is typed: no enter
    assert app.screen.query_one("#search").has_focus
    await wait_for(pilot, lambda: app.screen.row_ids == [CLEAN_RUN])


@checks("Runs", "escape")
async def _clear_the_search(pilot, app, **_) -> None:
    await pilot.press("escape")
    await wait_for(pilot, lambda: len(app.screen.row_ids) == 4)
    assert app.screen.query_one("#search").value == ""


@checks("Runs", "l")
async def _loops_only(pilot, app, **_) -> None:
    await pilot.press("l")
    await wait_for(pilot, lambda: app.screen.row_ids == [LOOP_RUN])
    await pilot.press("l")
    await wait_for(pilot, lambda: len(app.screen.row_ids) == 4)


@checks("Runs", "s")
async def _status(pilot, app, **_) -> None:
    await pilot.press("s")
    await wait_for(pilot, lambda: app.screen.row_ids == [OPEN_RUN])
    await pilot.press("s", "s", "s")  # stalled, finished, all
    await wait_for(pilot, lambda: len(app.screen.row_ids) == 4)


@checks("Runs", "a")
async def _agent(pilot, app, **_) -> None:
    await pilot.press("a")  # the first agent by name
    await wait_for(pilot, lambda: app.screen.row_ids == [OPEN_RUN])  # planner-agent
    assert "agent planner-agent" in text_of(app.screen.query_one("#filters", Static))
    await pilot.press("a", "a", "a", "a")  # research, summarizer, support, all
    await wait_for(pilot, lambda: len(app.screen.row_ids) == 4)


@checks("Runs", "r")
async def _refresh(pilot, app, server, db_url, **_) -> None:
    """Refreshing by itself is off here (an hour): only r can show a new run."""
    with psycopg.connect(db_url, autocommit=True) as conn:
        created = key_store.create_key(conn, f"tui-r-{uuid.uuid4().hex[:6]}", "all")
    fresh = make_app(server, created.key)
    fresh.refresh_seconds = 3600
    async with fresh.run_test(size=(80, 24)) as inner:
        await wait_for(inner, lambda: "0 runs" in text_of(fresh.screen.query_one("#filters")))
        httpx.post(
            f"{server.url}/v1/ingest/agent/runs",
            json={"agent_name": "late-agent"},
            headers={"Authorization": f"Bearer {created.key}"},
        ).raise_for_status()
        await inner.pause(0.3)
        assert fresh.screen.query_one(DataTable).row_count == 0
        await inner.press("r")
        await wait_for(inner, lambda: fresh.screen.query_one(DataTable).row_count == 1)


async def _in_the_loop_run(pilot, app) -> RunScreen:
    if not isinstance(app.screen, RunScreen):
        return await open_run(pilot, app, LOOP_RUN)
    return app.screen


@checks("A run", "↑ ↓ j k")
async def _move_in_the_timeline(pilot, app, **_) -> None:
    screen = await _in_the_loop_run(pilot, app)
    tree = screen.query_one(Tree)
    for key, line in (("j", 1), ("down", 2), ("k", 1), ("up", 0)):
        await pilot.press(key)
        assert tree.cursor_line == line, key


@checks("A run", "enter")
async def _enter_opens_a_band_and_a_child_run(pilot, app, **_) -> None:
    screen = await _in_the_loop_run(pilot, app)
    tree = screen.query_one(Tree)
    band = tree.root.children[1]
    tree.move_cursor(band)
    await pilot.press("enter")
    await wait_for(pilot, lambda: band.is_expanded)
    child = next(node for node in band.children if node.data["kind"] == "child_run")
    tree.move_cursor(child)
    await pilot.press("enter")
    await wait_for(pilot, lambda: getattr(app.screen, "run_id", None) == CHILD_RUN)
    app.pop_screen()
    band.collapse()


@checks("A run", "→ ←")
async def _arrows_open_and_close_a_band(pilot, app, **_) -> None:
    screen = await _in_the_loop_run(pilot, app)
    tree = screen.query_one(Tree)
    band = tree.root.children[1]
    tree.move_cursor(band)
    await pilot.press("right")
    await wait_for(pilot, lambda: band.is_expanded)
    await pilot.press("right")  # into it
    assert tree.cursor_node is band.children[0]
    await pilot.press("left")  # out of it, closing it
    assert tree.cursor_node is band and not band.is_expanded
    await pilot.press("right", "left")
    assert not band.is_expanded


@checks("A run", "space")
async def _space_toggles_a_band(pilot, app, **_) -> None:
    screen = await _in_the_loop_run(pilot, app)
    tree = screen.query_one(Tree)
    band = tree.root.children[1]
    tree.move_cursor(band)
    await pilot.press("space")
    await wait_for(pilot, lambda: band.is_expanded)
    await pilot.press("space")
    await wait_for(pilot, lambda: not band.is_expanded)


@checks("A run", "1-5")
async def _tabs(pilot, app, **_) -> None:
    screen = await _in_the_loop_run(pilot, app)
    tabs = screen.query_one(TabbedContent)
    for key, pane, focused in (("2", "findings-pane", "findings"), ("3", "loops-pane", "loops"),
                               ("4", "calls-pane", "calls"), ("5", "children-pane", "children"),
                               ("1", "timeline-pane", "timeline")):  # fmt: skip
        await pilot.press(key)
        assert tabs.active == pane and screen.focused.id == focused, key
    await pilot.press("4")
    calls = screen.query_one("#calls", DataTable)
    await wait_for(pilot, lambda: calls.row_count == 2)
    await pilot.press("1")


@checks("A run", "c")
async def _child_runs(pilot, app, **_) -> None:
    screen = await _in_the_loop_run(pilot, app)
    await pilot.press("c")
    assert screen.query_one(TabbedContent).active == "children-pane"
    assert screen.focused is screen.query_one("#children", DataTable)
    await pilot.press("1")


@checks("A run", "p")
async def _parent(pilot, app, **_) -> None:
    screen = await _in_the_loop_run(pilot, app)
    await pilot.press("c", "enter")
    await wait_for(pilot, lambda: getattr(app.screen, "run_id", None) == CHILD_RUN)
    await wait_for(pilot, lambda: app.screen.run is not None)
    await pilot.press("p")
    await wait_for(pilot, lambda: getattr(app.screen, "run_id", None) == LOOP_RUN
                   and app.screen is not screen)  # fmt: skip
    app.pop_screen()
    app.pop_screen()
    await pilot.press("1")


@checks("A run", "escape")
async def _back_to_the_runs(pilot, app, **_) -> None:
    await _in_the_loop_run(pilot, app)
    await pilot.press("escape")
    assert isinstance(app.screen, RunsScreen)


@checks("Anywhere", "?")
async def _help(pilot, app, **_) -> None:
    for screen in ("runs", "run"):
        if screen == "run":
            await _in_the_loop_run(pilot, app)
        await pilot.press("question_mark")
        assert isinstance(app.screen, HelpScreen)
        await pilot.press("escape")
        assert not isinstance(app.screen, HelpScreen)
    app.pop_screen()


@checks("Anywhere", "q")
async def _quit(pilot, app, **_) -> None:
    await pilot.press("q")
    await wait_for(pilot, lambda: not app.is_running)


def test_the_checks_cover_every_key_the_help_lists() -> None:
    listed = [(title, keys) for title, entries in SECTIONS for keys, _ in entries]
    assert listed == list(CHECKS)  # the same keys, in the help's order


async def test_every_key_the_help_lists_does_what_it_says(server, key, db_url) -> None:
    app = make_app(server, key)
    app.refresh_seconds = 3600  # changes come from keys, not from the clock
    async with app.run_test(size=(80, 24)) as pilot:
        await wait_for(pilot, lambda: len(getattr(app.screen, "row_ids", ())) == 4)
        for (title, keys), check in CHECKS.items():
            try:
                await check(pilot, app, server=server, db_url=db_url)
            except AssertionError as error:
                raise AssertionError(f"{title}: {keys}: {error}") from error


async def test_a_vanished_server_is_a_status_line_not_a_crash(server, key) -> None:
    app = make_app(server, key, endpoint="http://127.0.0.1:9")
    async with app.run_test(size=(100, 30)) as pilot:
        status = app.screen.query_one("#status", Static)
        await wait_for(pilot, lambda: "cannot reach" in text_of(status))
        assert "retrying" in text_of(status)
        await pilot.pause(1.2)  # it keeps retrying without falling over
        assert app.is_running


class HeldSource(Source):
    """The real source, whose answers are held back until ``release`` is set: data that
    arrives while a screen is being closed."""

    def __init__(self, api: Api, clock) -> None:
        super().__init__(api, clock)
        self.release = asyncio.Event()
        self.waiting = asyncio.Event()

    async def _held(self, answer: Awaitable) -> Any:
        result = await answer
        self.waiting.set()
        await self.release.wait()
        return result

    async def runs(self, **filters: Any) -> list[dict]:
        return await self._held(super().runs(**filters))

    async def run(self, run_id: str) -> dict:
        return await self._held(super().run(run_id))


def release_when_unmounted(widget, source: HeldSource) -> None:
    """Let the held answer through the moment ``widget`` leaves the screen being closed,
    before the screen's own workers are stopped. (Textual finds handlers on the class,
    so the widget becomes an instance of a subclass that has one.)"""

    async def _on_unmount(self) -> None:
        source.release.set()
        await asyncio.sleep(0.05)  # the screen's worker takes its answer meanwhile
        super(type(self), self)._on_unmount()

    widget.__class__ = type(type(widget).__name__, (type(widget),), {"_on_unmount": _on_unmount})


async def test_quitting_while_the_runs_are_on_their_way_is_quiet(server, key) -> None:
    source = HeldSource(Api(Credentials(server.url, key, "test"), timeout=2), clock=lambda: NOW)
    app = KeelwaveApp(source, refresh_seconds=3600)
    async with app.run_test(size=(100, 30)) as pilot:
        await wait_for(pilot, source.waiting.is_set)
        release_when_unmounted(app.screen.query_one("#summary", Static), source)
    # leaving the block closes the app; the answer that lands meanwhile has nowhere to go


async def test_leaving_a_run_before_it_has_loaded_is_quiet(server, key) -> None:
    source = HeldSource(Api(Credentials(server.url, key, "test"), timeout=2), clock=lambda: NOW)
    app = KeelwaveApp(source, refresh_seconds=3600)
    async with app.run_test(size=(100, 30)) as pilot:
        await wait_for(pilot, source.waiting.is_set)
        source.release.set()
        table = app.screen.query_one(DataTable)
        await wait_for(pilot, lambda: table.row_count == 4)
        source.release.clear()
        source.waiting.clear()
        await pilot.press("enter")
        await wait_for(pilot, lambda: isinstance(app.screen, RunScreen))
        await wait_for(pilot, source.waiting.is_set)
        release_when_unmounted(app.screen.query_one("#header", Static), source)
        await pilot.press("escape")
        await wait_for(pilot, lambda: isinstance(app.screen, RunsScreen))
        await pilot.pause(0.2)
        assert app.is_running


# -- snapshots, at 80×24 and 120×40 ----------------------------------------------------

SIZES = pytest.mark.parametrize("size", [(80, 24), (120, 40)], ids=["80x24", "120x40"])


@pytest.fixture
def in_utc(monkeypatch):
    """Absolute times are shown in the terminal's time zone: UTC, for the snapshots."""
    monkeypatch.setenv("TZ", "UTC")
    time.tzset()
    yield
    monkeypatch.undo()
    time.tzset()


def snapshot_app(server, snapshot_key) -> KeelwaveApp:
    app = make_app(server, snapshot_key, now=SNAPSHOT_NOW)
    app.refresh_seconds = 3600  # no refresh while the picture is taken
    return app


async def settle_runs(pilot) -> None:
    table = pilot.app.screen.query_one(DataTable)
    await wait_for(pilot, lambda: table.row_count >= 3)
    await wait_for(pilot, lambda: widths_settled(pilot.app, table))
    await pilot.pause(0.3)
    await wait_for(pilot, lambda: widths_settled(pilot.app, table))
    # …and drawn so: a screen pushed on top now keeps the table as painted last.
    await wait_for(pilot, lambda: "summarizer-agent" in pilot.app.export_screenshot())


def widths_settled(app, table: DataTable) -> bool:
    """Whether the runs table is drawn as it will stay. Its columns are made for the
    terminal's width (a resize that a busy machine delivers late makes them again), and
    take their widths when the table is next idle, which a busy machine reaches late:
    until then the picture shows the columns cut to their labels."""
    wanted = (
        runs_screen.COLUMNS if app.size.width >= runs_screen.WIDE else runs_screen.NARROW_COLUMNS
    )
    run_column = next(iter(table.columns.values()), None)
    return (
        [str(column.label) for column in table.columns.values()] == list(wanted)
        and not table._require_update_dimensions
        and not table._updated_cells
        and run_column is not None
        and run_column.content_width >= 8
    )


def snapshot_id(run_id: str) -> str:
    return run_id.replace("-8000-", "-8001-")


async def open_snapshot_run(pilot, run_id: str) -> RunScreen:
    await settle_runs(pilot)
    screen = pilot.app.screen
    screen.query_one(DataTable).move_cursor(row=screen.row_ids.index(snapshot_id(run_id)))
    await pilot.press("enter")
    await wait_for(pilot, lambda: isinstance(pilot.app.screen, RunScreen))
    tree = pilot.app.screen.query_one(Tree)
    await wait_for(pilot, lambda: len(tree.root.children) >= 2)
    return pilot.app.screen


@SIZES
def test_snapshot_runs_screen(server, snapshot_key, snap_compare, in_utc, size) -> None:
    make = functools.partial(snapshot_app, server, snapshot_key)
    assert snapshot_matches(snap_compare, make, size, settle_runs)


@SIZES
def test_snapshot_help(server, snapshot_key, snap_compare, in_utc, size) -> None:
    async def open_help(pilot) -> None:
        await settle_runs(pilot)
        table = pilot.app.screen.query_one(DataTable)
        await pilot.press("question_mark")
        await wait_for(pilot, lambda: isinstance(pilot.app.screen, HelpScreen))
        await pilot.pause(0.2)
        await wait_for(pilot, lambda: widths_settled(pilot.app, table))  # (under the help)
        if size[0] >= runs_screen.WIDE:  # (narrower, the help hides the agent column)
            await wait_for(pilot, lambda: "summarizer-agent" in pilot.app.export_screenshot())

    make = functools.partial(snapshot_app, server, snapshot_key)
    assert snapshot_matches(snap_compare, make, size, open_help)


@SIZES
def test_snapshot_run_screen(server, snapshot_key, snap_compare, in_utc, size) -> None:
    """The looping run with its band open: the call and the child run made during it."""

    async def open_the_band(pilot) -> None:
        await open_snapshot_run(pilot, LOOP_RUN)
        await pilot.press("j", "right", "right")  # to the band, open it, into it
        await pilot.pause(0.2)

    make = functools.partial(snapshot_app, server, snapshot_key)
    assert snapshot_matches(snap_compare, make, size, open_the_band)


@SIZES
def test_snapshot_failed_run(server, snapshot_key, snap_compare, in_utc, size) -> None:
    """A failed run opens on the step that failed, with the traceback."""

    async def open_failed(pilot) -> None:
        await open_snapshot_run(pilot, CLEAN_RUN)
        await pilot.pause(0.2)

    make = functools.partial(snapshot_app, server, snapshot_key)
    assert snapshot_matches(snap_compare, make, size, open_failed)
