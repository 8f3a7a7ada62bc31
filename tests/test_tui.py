"""The Textual run explorer, driven by Pilot against a real server with known data,
and SVG snapshots of its main screens (at 100×30, with a frozen clock)."""

from __future__ import annotations

import io
import time
import uuid
from datetime import UTC, datetime, timedelta

import httpx
import psycopg
import pytest
from rich.console import Console
from textual.widgets import DataTable, Static, TabbedContent, Tree
from verdict_runs import seed

from keelwave.db import keys as key_store
from keelwave.remote.api import Api
from keelwave.remote.config import Credentials
from keelwave.tui import KeelwaveApp, Source
from keelwave.tui.help_screen import HelpScreen
from keelwave.tui.run_screen import RunScreen

NOW = datetime.now(UTC).replace(microsecond=0)
LOOP_RUN = "a1f3c2d4-0000-4000-8000-000000000001"
CHILD_RUN = "b2e4d6f8-0000-4000-8000-000000000002"
CLEAN_RUN = "c3d5e7a9-0000-4000-8000-000000000003"
OPEN_RUN = "d4c6b8a0-0000-4000-8000-000000000004"


@pytest.fixture(scope="module")
def key(server, db_url) -> str:
    """Project 'tui' with fixed runs at fixed times: what the snapshots show."""
    with psycopg.connect(db_url, autocommit=True) as conn:
        created = key_store.create_key(conn, "tui", "all")
    with httpx.Client(
        base_url=server.url, headers={"Authorization": f"Bearer {created.key}"}
    ) as http:

        def run(run_id, agent, minutes_ago, **extra):
            started = NOW - timedelta(minutes=minutes_ago)
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

        started = run(LOOP_RUN, "research-agent", 30)
        steps = [
            {
                "run_id": LOOP_RUN,
                "step_index": i,
                "tool_name": "web_search",
                "tool_input": {"q": "what is keelwave?", "max_results": 3},
                "tool_output": {"results": ["a", "b"]},
                "duration_ms": 400,
            }
            for i in range(1, 6)
        ]
        steps.append(
            {
                "run_id": LOOP_RUN,
                "step_index": 6,
                "step_type": "think",
                "content": "I keep getting the same results.",
            }
        )
        http.post("/v1/ingest/agent/steps", json=steps).raise_for_status()
        http.post("/v1/ingest/ai", json={"id": str(uuid.UUID(int=1)), "run_id": LOOP_RUN,
                                         "step_index": 1, "provider": "openai",
                                         "model": "gpt-4o", "input_tokens": 12000,
                                         "output_tokens": 900, "latency_ms": 1800}
                  ).raise_for_status()  # fmt: skip
        http.post(
            f"/v1/ingest/agent/runs/{LOOP_RUN}/finish",
            json={
                "termination_reason": "loop_detected",
                "loop_detected": True,
                "loop_step_index": 1,
                "ended_at": (started + timedelta(seconds=42)).isoformat(),
            },
        ).raise_for_status()
        started = run(CHILD_RUN, "summarizer-agent", 29, parent_run_id=LOOP_RUN)
        http.post(
            f"/v1/ingest/agent/runs/{CHILD_RUN}/finish",
            json={
                "termination_reason": "clean",
                "ended_at": (started + timedelta(seconds=3)).isoformat(),
            },
        ).raise_for_status()
        started = run(CLEAN_RUN, "support-agent", 20)
        http.post("/v1/ingest/agent/steps", json={"run_id": CLEAN_RUN, "step_index": 1,
                  "tool_name": "fetch_url", "tool_input": {"url": "https://example.com"},
                  "duration_ms": 120, "error": "TimeoutError: read timed out"}
                  ).raise_for_status()  # fmt: skip
        http.post(
            f"/v1/ingest/agent/runs/{CLEAN_RUN}/finish",
            json={
                "termination_reason": "error",
                "error": "TimeoutError: read timed out",
                "ended_at": (started + timedelta(seconds=8)).isoformat(),
            },
        ).raise_for_status()
        run(OPEN_RUN, "planner-agent", 5)
        # The server judges the steps shortly after they commit: the snapshots show its
        # verdict, so wait for it.
        for _ in range(200):
            answer = http.get(f"/v1/projects/{created.project_id}/agent/runs/{LOOP_RUN}")
            if answer.json()["data"]["detected_loop"]:
                break
            time.sleep(0.05)
        else:
            raise AssertionError("the server never judged the looping run")
    return created.key


@pytest.fixture(scope="module")
def judged(server, db_url):
    """A project whose runs loop by the agent's account, the server's or both, and one with
    near-duplicates and no progress (tests/verdict_runs.py): its key and the runs."""
    with psycopg.connect(db_url, autocommit=True) as conn:
        created = key_store.create_key(conn, "tui-findings", "all")
    return created.key, seed(server.url, created.key, created.key, created.project_id)


def make_app(server, key: str, endpoint: str | None = None) -> KeelwaveApp:
    api = Api(Credentials(endpoint or server.url, key, "test"), timeout=2)
    return KeelwaveApp(Source(api, clock=lambda: NOW), refresh_seconds=0.5)


def text_of(widget: Static) -> str:
    """What a Static shows, as plain text, whatever renderable it holds."""
    console = Console(width=120, file=io.StringIO(), record=True)
    console.print(widget.content)
    return console.export_text()


async def wait_for(pilot, condition, tries: int = 100) -> None:
    for _ in range(tries):
        if condition():
            return
        await pilot.pause(0.05)
    raise AssertionError("the screen never got there")


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


async def test_run_screen_shows_the_loop_band(server, key) -> None:
    app = make_app(server, key)
    async with app.run_test(size=(100, 30)) as pilot:
        table = app.screen.query_one(DataTable)
        await wait_for(pilot, lambda: LOOP_RUN in app.screen.row_ids)
        table.move_cursor(row=app.screen.row_ids.index(LOOP_RUN))
        await pilot.press("enter")
        await wait_for(pilot, lambda: isinstance(app.screen, RunScreen))
        tree = app.screen.query_one(Tree)
        await wait_for(pilot, lambda: len(tree.root.children) == 2)
        band, think = tree.root.children
        assert "web_search ×5  steps 1–5" in str(band.label)
        assert "think" in str(think.label)
        header = text_of(app.screen.query_one("#header", Static))
        assert "LOOP" in header and "from step 1" in header
        await pilot.press("space")  # expand the band: each repeated step
        await wait_for(pilot, lambda: band.is_expanded)
        assert len(band.children) == 5
        await pilot.press("down", "down")
        inspector = text_of(app.screen.query_one("#step", Static))
        assert "what is keelwave?" in inspector and "repeated ×5" in inspector
        await pilot.press("c")  # the child run
        children = app.screen.query_one("#children", DataTable)
        await wait_for(pilot, lambda: children.row_count == 1)
        await pilot.press("enter")
        await wait_for(pilot, lambda: getattr(app.screen, "run_id", None) == CHILD_RUN)
        await pilot.press("p")  # and back up to its parent
        await wait_for(pilot, lambda: getattr(app.screen, "run_id", None) == LOOP_RUN)


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


async def test_a_vanished_server_is_a_status_line_not_a_crash(server, key) -> None:
    app = make_app(server, key, endpoint="http://127.0.0.1:9")
    async with app.run_test(size=(100, 30)) as pilot:
        status = app.screen.query_one("#status", Static)
        await wait_for(pilot, lambda: "cannot reach" in text_of(status))
        assert "retrying" in text_of(status)
        await pilot.pause(1.2)  # it keeps retrying without falling over
        assert app.is_running


def test_snapshot_runs_screen(server, key, snap_compare) -> None:
    async def settle(pilot) -> None:
        table = pilot.app.screen.query_one(DataTable)
        await wait_for(pilot, lambda: table.row_count >= 4)
        pilot.app.screen.refresh_seconds = 3600  # no refresh while the picture is taken
        await pilot.pause(0.3)  # and the columns take their widths (else they are cut)

    app = make_app(server, key)
    app.refresh_seconds = 3600
    assert snap_compare(app, terminal_size=(100, 30), run_before=settle)


def test_snapshot_run_screen(server, key, snap_compare) -> None:
    async def open_loop_run(pilot) -> None:
        screen = pilot.app.screen
        await wait_for(pilot, lambda: LOOP_RUN in screen.row_ids)
        screen.query_one(DataTable).move_cursor(row=screen.row_ids.index(LOOP_RUN))
        await pilot.press("enter")
        await wait_for(pilot, lambda: isinstance(pilot.app.screen, RunScreen))
        tree = pilot.app.screen.query_one(Tree)
        await wait_for(pilot, lambda: len(tree.root.children) == 2)
        await pilot.press("space")
        await pilot.pause(0.2)

    app = make_app(server, key)
    app.refresh_seconds = 3600
    assert snap_compare(app, terminal_size=(100, 30), run_before=open_loop_run)
