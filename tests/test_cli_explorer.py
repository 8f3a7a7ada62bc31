"""`keelwave runs` filters and sorting, `runs show`'s whole story, `runs diff` and `loops`
with the input that repeats: subprocesses against a live server, with runs whose times,
tags, metadata and nesting are known."""

from __future__ import annotations

import json
import uuid
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

import httpx
import pytest
from conftest import make_project
from serve_process import keelwave

NOW = datetime.now(UTC).replace(microsecond=0)
TRACEBACK = (
    "Traceback (most recent call last):\n"
    '  File "agent.py", line 12, in fetch\n'
    "    raise TimeoutError('read timed out')\n"
    "TimeoutError: read timed out"
)

STEP_TRACEBACK = (
    "Traceback (most recent call last):\n"
    '  File "tools.py", line 7, in fetch_url\n'
    "    return http.get(url, timeout=5)\n"
    "TimeoutError: read timed out"
)


@dataclass
class Runs:
    first: str  # research-agent, 2 h ago, tags prod+eu, env=prod; a child run; clean
    second: str  # research-agent, 1 h ago, like first with changes; clean
    failed: str  # support-agent, 3 days ago, tag prod, env=staging; error with a traceback
    looping: str  # loop-agent, 30 min ago: web_search ×4 with a model call before each
    open: str  # planner-agent, 5 min ago, still running
    child: str  # summarizer-agent, started by first, one model call


def at(start: datetime, seconds: float) -> str:
    return (start + timedelta(seconds=seconds)).isoformat()


@pytest.fixture(scope="module")
def explorer(server, db_url):
    project = make_project(db_url)
    runs = Runs(*(str(uuid.uuid4()) for _ in range(6)))
    with httpx.Client(base_url=server.url, headers=project.auth("ingest")) as http:

        def post(path, body):
            http.post(path, json=body).raise_for_status()

        def start(run_id, agent, started, **extra):
            post("/v1/ingest/agent/runs", {"id": run_id, "agent_name": agent,
                                           "started_at": started.isoformat(), **extra})  # fmt: skip

        def finish(run_id, started, seconds, reason, **extra):
            post(f"/v1/ingest/agent/runs/{run_id}/finish", {"termination_reason": reason,
                 "ended_at": at(started, seconds), **extra})  # fmt: skip

        def call(run_id, started, seconds, step=None, tokens=(1000, 100), cost=0.01):
            post("/v1/ingest/ai", {"run_id": run_id, "step_index": step, "provider": "openai",
                                   "model": "gpt-4o", "input_tokens": tokens[0],
                                   "output_tokens": tokens[1], "cost_usd": cost,
                                   "latency_ms": 300,
                                   "started_at": at(started, seconds)})  # fmt: skip

        def step(run_id, started, index, seconds, tool, tool_input, tool_output, **extra):
            body = {"run_id": run_id, "step_index": index, "tool_name": tool,
                    "tool_input": tool_input, "tool_output": tool_output,
                    "started_at": at(started, seconds), "duration_ms": 400, **extra}  # fmt: skip
            post("/v1/ingest/agent/steps", body)

        first = NOW - timedelta(hours=2)
        start(runs.first, "research-agent", first, tags=["prod", "eu"],
              metadata={"env": "prod", "team": "search"},
              input={"question": "what is keelwave?"})  # fmt: skip
        call(runs.first, first, 0.5, tokens=(2000, 200), cost=0.02)
        step(runs.first, first, 1, 1, "search", {"q": "keelwave"}, {"hits": 3})
        call(runs.first, first, 1.5, step=2)
        step(runs.first, first, 2, 2, "fetch", {"url": "https://a.example"}, {"status": 200})
        start(runs.child, "summarizer-agent", first + timedelta(seconds=2.5),
              parent_run_id=runs.first)  # fmt: skip
        call(runs.child, first + timedelta(seconds=2.5), 0.1)
        finish(runs.child, first + timedelta(seconds=2.5), 1, "clean")
        step(runs.first, first, 3, 3, "summarize", {"n": 1}, {"text": "short"})
        finish(runs.first, first, 10, "clean", output={"answer": "a monitor for agents"})

        second = NOW - timedelta(hours=1)
        start(runs.second, "research-agent", second, tags=["eu"], metadata={"env": "prod"})
        for seconds in (0.5, 1.5, 2.5):
            call(runs.second, second, seconds, tokens=(3000, 300), cost=0.05)
        step(runs.second, second, 1, 1, "search", {"q": "keelwave"}, {"hits": 3})
        step(runs.second, second, 2, 2, "fetch", {"url": "https://b.example"}, {"status": 200})
        step(runs.second, second, 3, 3, "summarize", {"n": 1}, {"text": "longer"})
        step(runs.second, second, 4, 4, "publish", {"to": "blog"}, {"ok": True})
        finish(runs.second, second, 20, "clean")

        failed = NOW - timedelta(days=3)
        start(runs.failed, "support-agent", failed, tags=["prod"], metadata={"env": "staging"})
        step(runs.failed, failed, 1, 1, "fetch_url", {"url": "https://example.com"}, None,
             error="TimeoutError: read timed out", error_traceback=STEP_TRACEBACK)  # fmt: skip
        finish(runs.failed, failed, 8, "error", error="TimeoutError: read timed out",
               error_traceback=TRACEBACK)  # fmt: skip

        looping = NOW - timedelta(minutes=30)
        start(runs.looping, "loop-agent", looping)
        for index in range(1, 5):
            call(runs.looping, looping, index - 0.5)
            step(runs.looping, looping, index, index, "web_search",
                 {"q": "the same question, asked again and again"}, {"results": []})  # fmt: skip
        finish(runs.looping, looping, 6, "loop_detected", loop_detected=True, loop_step_index=1)

        start(runs.open, "planner-agent", NOW - timedelta(minutes=5))
    return project, runs


def cli(server, project, *args: str, **env: str):
    environment = {
        "KEELWAVE_ENDPOINT": server.url,
        "KEELWAVE_API_KEY": project.keys["read"],
        "KEELWAVE_CONFIG": "/nonexistent/keelwave.json",
        "COLUMNS": "160",
        "TZ": "UTC",
        **env,
    }
    return keelwave(*args, env=environment)


def ids_of(server, project, *args: str) -> list[str]:
    result = cli(server, project, "runs", *args, "--json")
    assert result.returncode == 0, result.stderr
    return [run["id"] for run in json.loads(result.stdout)]


def one_line_error(result, *fragments: str) -> None:
    assert result.returncode == 2, (result.stdout, result.stderr)
    assert "Traceback" not in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1, result.stderr
    for fragment in fragments:
        assert fragment in result.stderr


def test_status_takes_what_the_status_column_shows(server, explorer) -> None:
    project, runs = explorer
    table = cli(server, project, "runs", "--since", "7d").stdout
    failed_line = next(line for line in table.splitlines() if runs.failed[:8] in line)
    assert " error " in failed_line  # what the column shows…
    assert ids_of(server, project, "--status", "error") == [runs.failed]  # …is accepted
    assert ids_of(server, project, "--status", "loop") == [runs.looping]
    assert ids_of(server, project, "--ending", "loop_detected") == [runs.looping]
    assert ids_of(server, project, "--termination", "error") == [runs.failed]
    assert set(ids_of(server, project, "--status", "clean")) == {
        runs.first, runs.second, runs.child
    }  # fmt: skip
    assert ids_of(server, project, "--status", "running") == [runs.open]
    one_line_error(cli(server, project, "runs", "--status", "broken"), "--status", "clean, error")
    one_line_error(cli(server, project, "runs", "--ending", "done"), "--ending", "context_limit")


def test_search_and_time_range(server, explorer) -> None:
    project, runs = explorer
    assert ids_of(server, project, "-q", "support") == [runs.failed]
    assert ids_of(server, project, "--search", runs.looping[:6]) == [runs.looping]
    assert runs.failed not in ids_of(server, project, "--since", "1d")
    assert ids_of(server, project, "--until", "2d") == [runs.failed]
    assert ids_of(server, project, "--since", "90m", "--until", "45m") == [runs.second]
    since = (NOW - timedelta(minutes=150)).strftime("%Y-%m-%dT%H:%M:%SZ")
    until = (NOW - timedelta(minutes=100)).isoformat()
    assert set(ids_of(server, project, "--since", since, "--until", until)) == {
        runs.first, runs.child
    }  # fmt: skip
    one_line_error(cli(server, project, "runs", "--since", "yesterday"), "--since", "30d")
    one_line_error(cli(server, project, "runs", "--since", "1h", "--until", "2h"), "before")
    empty = cli(server, project, "runs", "-q", "nobody-by-this-name")
    assert empty.returncode == 0 and "No runs match these filters." in empty.stdout


def test_tags_metadata_and_sort(server, explorer) -> None:
    project, runs = explorer
    assert set(ids_of(server, project, "--tag", "prod")) == {runs.first, runs.failed}
    assert ids_of(server, project, "--tag", "prod", "--tag", "eu") == [runs.first]
    assert ids_of(server, project, "--metadata", "env=staging") == [runs.failed]
    assert set(ids_of(server, project, "--metadata", "env=prod")) == {runs.first, runs.second}
    by_cost = ids_of(server, project, "--sort", "cost")
    assert by_cost[0] == runs.second  # $0.15, the most
    fewest_last = ids_of(server, project, "--sort", "steps", "--asc")[-2:]
    assert set(fewest_last) == {runs.second, runs.looping}  # 4 steps each
    agents = ids_of(server, project, "--sort", "agent", "--asc")
    assert agents[0] == runs.looping and agents[-1] == runs.failed  # loop… to support…
    oldest = ids_of(server, project, "--asc")
    assert oldest[0] == runs.failed and oldest[-1] == runs.open
    one_line_error(cli(server, project, "runs", "--sort", "price"), "--sort", "cost")
    one_line_error(cli(server, project, "runs", "--metadata", "env"), "KEY=VALUE")


def test_runs_show_tells_the_whole_story(server, explorer) -> None:
    project, runs = explorer
    result = cli(server, project, "runs", "show", runs.first[:8])
    assert result.returncode == 0, result.stderr
    out = result.stdout
    started = NOW - timedelta(hours=2)
    assert f"started      {started:%Y-%m-%d %H:%M:%S} UTC (2h ago)" in out
    assert f"ended        {started + timedelta(seconds=10):%Y-%m-%d %H:%M:%S} UTC" in out
    assert 'input        {"question": "what is keelwave?"}' in out
    assert 'output       {"answer": "a monitor for agents"}' in out
    assert 'metadata     {"env": "prod", "team": "search"}' in out
    assert "tags         prod, eu" in out
    assert "3 model calls" not in out and "2 model calls" in out
    # The timeline: model calls and the child run among the steps, in the order they began.
    rows = [line for line in out.splitlines() if line.startswith("│")]
    order = ["model gpt-4o", "search", "↳2", "fetch", "child run " + runs.child[:8],
             "summarize"]  # fmt: skip
    positions = [next(n for n, row in enumerate(rows) if what in row) for what in order]
    assert positions == sorted(positions), rows
    assert "+500 ms" in rows[positions[0]] and "+2.5 s" in rows[positions[4]]
    assert "summarizer-agent" in rows[positions[4]] and "clean" in rows[positions[4]]
    child = cli(server, project, "runs", "show", runs.child).stdout
    assert "1 model call" in child and "1 model calls" not in child


def test_runs_show_a_failed_run_with_its_traceback(server, explorer) -> None:
    project, runs = explorer
    result = cli(server, project, "runs", "show", runs.failed)
    assert result.returncode == 0, result.stderr
    assert "error        TimeoutError: read timed out" in result.stdout
    assert TRACEBACK in result.stdout
    assert "step 1 (fetch_url) failed: TimeoutError: read timed out" in result.stdout
    assert STEP_TRACEBACK in result.stdout  # the step's own, under the timeline
    assert "1 error" in result.stdout and "1 error(s)" not in result.stdout


def test_runs_show_keeps_a_loop_one_band_with_its_model_calls(server, explorer) -> None:
    project, runs = explorer
    result = cli(server, project, "runs", "show", runs.looping)
    assert result.returncode == 0, result.stderr
    rows = [line for line in result.stdout.splitlines() if line.startswith("│")]
    # The call before step 1 is a row; the three during the band are counted in it.
    assert len(rows) == 2, rows
    assert "model gpt-4o" in rows[0]
    assert "web_search ×4  steps 1–4" in rows[1] and "+ 3 model calls" in rows[1]
    shown = json.loads(cli(server, project, "runs", "show", runs.looping, "--json").stdout)
    assert [item["kind"] for item in shown["timeline"]] == ["model_call", "step"] * 4


def test_loops_shows_the_input_that_repeats(server, explorer) -> None:
    project, runs = explorer
    result = cli(server, project, "loops", runs.looping[:8], COLUMNS="100")
    assert result.returncode == 0, result.stderr
    assert '{"q": "the same question, asked again and again"}' in result.stdout  # it fits
    assert "1, 2, 3, 4" in result.stdout
    full = cli(server, project, "loops", runs.looping, "--full", COLUMNS="100").stdout
    assert '"q": "the same question, asked again and again"' in full


def test_loops_fits_a_pipe_80_columns_wide(server, explorer) -> None:
    # A pipe is 80 wide: the table fits it, and the step list keeps its width.
    project, runs = explorer
    result = cli(server, project, "loops", runs.looping[:8], COLUMNS="80")
    assert result.returncode == 0, result.stderr
    assert max(map(len, result.stdout.splitlines())) <= 80
    assert "1, 2, 3, 4" in result.stdout and '{"q": "the same' in result.stdout
    assert "asked again and again" not in result.stdout  # cut to fit


def test_runs_diff(server, explorer) -> None:
    project, runs = explorer
    result = cli(server, project, "runs", "diff", runs.first[:8], runs.second[:8])
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    words = ("same", "changed input", "changed output", "only in B", "only in A")
    rows = {n: w for n, line in enumerate(lines) for w in words if f"│ {w} " in line}
    assert list(rows.values()) == ["same", "changed input", "changed output", "only in B"]
    # What differs is shown under the step: both inputs, both outputs, the extra step's input.
    changed_input, changed_output, only_b = list(rows)[1:]
    assert "https://a.example" in lines[changed_input + 1]
    assert "https://b.example" in lines[changed_input + 1]
    assert '"short"' in lines[changed_output + 1] and '"longer"' in lines[changed_output + 1]
    assert '{"to": "blog"}' in lines[only_b + 1]
    assert "cost" in result.stdout and "+$0.12" in result.stdout
    assert "steps" in result.stdout and "+1" in result.stdout
    data = json.loads(
        cli(server, project, "runs", "diff", runs.first, runs.second, "--json").stdout
    )
    assert data["a"]["id"] == runs.first and data["b"]["id"] == runs.second
    assert [s["status"] for s in data["steps"]] == [
        "same", "changed_input", "changed_output", "only_b"
    ]  # fmt: skip
    missing = cli(server, project, "runs", "diff", runs.first, "ffffffff")
    assert missing.returncode == 1 and "no run starts with" in missing.stderr
