"""`keelwave login / runs / runs show / loops / summary` as subprocesses against a live server."""

from __future__ import annotations

import json
import os
import re
import stat
import time
import uuid
from pathlib import Path

import httpx
import pytest
from conftest import make_project
from serve_process import keelwave
from verdict_runs import seed


@pytest.fixture(scope="module")
def known(server, db_url):
    """A project with a looping run, a clean run and an unfinished one."""
    project = make_project(db_url)
    auth = project.auth("ingest")
    ids = {"loop": str(uuid.uuid4()), "clean": str(uuid.uuid4()), "open": str(uuid.uuid4())}
    with httpx.Client(base_url=server.url, headers=auth) as http:
        for name, run_id in ids.items():
            http.post(
                "/v1/ingest/agent/runs", json={"id": run_id, "agent_name": f"{name}-agent"}
            ).raise_for_status()
        steps = [
            {
                "run_id": ids["loop"],
                "step_index": i,
                "tool_name": "web_search",
                "tool_input": {"q": "same"},
            }
            for i in range(1, 6)
        ]
        steps += [
            {"run_id": ids["loop"], "step_index": 6, "step_type": "think", "content": "hm"},
            {"run_id": ids["clean"], "step_index": 1, "tool_name": "fetch", "tool_input": {"u": 1}},
        ]
        http.post("/v1/ingest/agent/steps", json=steps).raise_for_status()
        http.post(
            "/v1/ingest/ai",
            json={
                "run_id": ids["loop"],
                "provider": "openai",
                "model": "gpt-4o",
                "input_tokens": 1000,
                "output_tokens": 100,
            },
        ).raise_for_status()
        http.post(
            f"/v1/ingest/agent/runs/{ids['loop']}/finish",
            json={
                "termination_reason": "loop_detected",
                "loop_detected": True,
                "loop_step_index": 1,
            },
        ).raise_for_status()
        http.post(
            f"/v1/ingest/agent/runs/{ids['clean']}/finish", json={"termination_reason": "clean"}
        ).raise_for_status()
    # The server judges the steps shortly after they commit, and the tests compare reads
    # taken moments apart (the CLI's, the API's): they start once its verdict is in.
    for _ in range(200):
        if api(server, project, f"/runs/{ids['loop']}")["detected_loop"]:
            break
        time.sleep(0.05)
    else:
        raise AssertionError("the server never judged the looping run")
    return project, ids


def cli(server, project, *args: str, scope: str = "read", **env: str):
    environment = {
        "KEELWAVE_ENDPOINT": server.url,
        "KEELWAVE_API_KEY": project.keys[scope],
        "KEELWAVE_CONFIG": "/nonexistent/keelwave.json",
        "COLUMNS": "120",
        **env,
    }
    return keelwave(*args, env=environment)


def api(server, project, path: str):
    response = httpx.get(
        f"{server.url}/v1/projects/{project.id}/agent{path}", headers=project.auth("read")
    )
    return response.json()["data"]


def test_runs_table_and_json(server, known) -> None:
    project, ids = known
    result = cli(server, project, "runs")
    assert result.returncode == 0, result.stderr
    assert "3 runs · loop rate 33.3%" in result.stdout
    for run_id in ids.values():
        assert run_id[:8] in result.stdout
    assert "LOOP" in result.stdout and "running" in result.stdout
    as_json = json.loads(cli(server, project, "runs", "--json").stdout)
    assert as_json == api(server, project, "/runs")
    looping = json.loads(cli(server, project, "runs", "--loops", "--json").stdout)
    assert [run["id"] for run in looping] == [ids["loop"]]
    running = json.loads(cli(server, project, "runs", "--status", "running", "--json").stdout)
    assert [run["id"] for run in running] == [ids["open"]]


def test_runs_show_draws_the_loop_as_a_band(server, known) -> None:
    project, ids = known
    result = cli(server, project, "runs", "show", ids["loop"][:6])
    assert result.returncode == 0, result.stderr
    assert "web_search ×5  steps 1–5" in result.stdout
    assert "loop_detected" in result.stdout and "from step 1" in result.stdout
    assert "think" in result.stdout
    shown = json.loads(cli(server, project, "runs", "show", ids["loop"], "--json").stdout)
    assert shown["run"]["id"] == ids["loop"] and len(shown["steps"]) == 6
    assert len(shown["llm_calls"]) == 1


def test_loops_json_is_the_apis_data(server, known) -> None:
    project, ids = known
    result = cli(server, project, "loops", ids["loop"], "--json")
    assert json.loads(result.stdout) == api(server, project, f"/runs/{ids['loop']}/loops")
    text = cli(server, project, "loops", ids["loop"][:8], "--full").stdout
    group = api(server, project, f"/runs/{ids['loop']}/loops")[0]
    assert group["fingerprint"] in text and "1, 2, 3, 4, 5" in text
    assert "no loops" in cli(server, project, "loops", ids["clean"]).stdout


def test_findings_json_is_the_apis_data(server, known) -> None:
    project, ids = known
    result = cli(server, project, "findings", ids["loop"], "--json")
    assert result.returncode == 0, result.stderr
    data = json.loads(result.stdout)
    assert data == api(server, project, f"/runs/{ids['loop']}/findings")
    assert [f["kind"] for f in data] == ["exact_loop"]
    text = cli(server, project, "findings", ids["loop"][:8]).stdout
    assert "exact_loop" in text and "1, 2, 3, 4, 5" in text
    assert "not stuck" in cli(server, project, "findings", ids["clean"]).stdout


@pytest.fixture(scope="module")
def judged(server, db_url):
    """A project whose runs loop by the agent's account, the server's, or both, and one
    with near-duplicate calls and calls that make no progress; judged by the server."""
    project = make_project(db_url)
    return project, seed(server.url, project.keys["ingest"], project.keys["read"], project.id)


def line_of(output: str, run_id: str) -> str:
    [line] = [line for line in output.splitlines() if run_id[:8] in line]
    return line


def test_runs_badge_says_whose_loop_it_is(server, judged) -> None:
    project, runs = judged
    result = cli(server, project, "runs")
    assert result.returncode == 0, result.stderr
    # Three of four loop by one account or the other: the agent reported two, the
    # server found two (one of them the same run).
    assert "4 runs · loop rate 75.0%" in result.stdout
    assert "LOOP*" in line_of(result.stdout, runs.server_only)
    for run_id in (runs.cycle, runs.agent_only):
        assert "LOOP" in line_of(result.stdout, run_id)
        assert "LOOP*" not in line_of(result.stdout, run_id)
    assert "≈∅" in line_of(result.stdout, runs.near)
    assert "LOOP" not in line_of(result.stdout, runs.near)
    assert "LOOP* detected by the server only" in result.stdout
    assert "≈ near-duplicate calls, ∅ no progress: warnings, not loops" in result.stdout


def test_runs_loops_takes_either_account_and_finding_filters(server, judged) -> None:
    project, runs = judged
    looping = json.loads(cli(server, project, "runs", "--loops", "--json").stdout)
    assert {run["id"] for run in looping} == {runs.server_only, runs.cycle, runs.agent_only}
    cycles = json.loads(cli(server, project, "runs", "--finding", "cycle", "--json").stdout)
    assert [run["id"] for run in cycles] == [runs.cycle]
    text = cli(server, project, "runs", "--finding", "no_progress").stdout
    assert "1 run ·" in text and runs.near[:8] in text
    bad = cli(server, project, "runs", "--finding", "bogus")
    assert bad.returncode == 1 and "exact_loop, cycle, near_duplicate, no_progress" in bad.stderr
    assert len(bad.stderr.strip().splitlines()) == 1


def test_runs_show_a_loop_only_the_server_detected(server, judged) -> None:
    project, runs = judged
    result = cli(server, project, "runs", "show", runs.server_only[:8])
    assert result.returncode == 0, result.stderr
    assert "yes, from step 1 (detected by the server)" in result.stdout
    assert "findings     exact loop" in result.stdout
    assert "web_search ×3  steps 1–3" in result.stdout
    assert "red: a loop" in result.stdout
    shown = json.loads(cli(server, project, "runs", "show", runs.server_only, "--json").stdout)
    assert shown["findings"] == api(server, project, f"/runs/{runs.server_only}/findings")
    assert shown["run"]["detected_loop"] is True and shown["run"]["loop_detected"] is False


def test_runs_show_draws_a_cycle_as_one_band(server, judged) -> None:
    project, runs = judged
    result = cli(server, project, "runs", "show", runs.cycle)
    assert result.returncode == 0, result.stderr
    assert (
        "yes, from step 1 (reported by the agent at step 3; the server found it from step 1)"
        in result.stdout
    )
    assert "findings     exact loop, cycle" in result.stdout
    assert "search → open ×3  steps 1–7  (cycle)" in result.stdout
    rows = [line for line in result.stdout.splitlines() if line.startswith("│")]
    assert len(rows) == 1  # one band, the think step (4) inside it


def test_runs_show_marks_near_duplicates_and_no_progress(server, judged) -> None:
    project, runs = judged
    result = cli(server, project, "runs", "show", runs.near, COLUMNS="220")
    assert result.returncode == 0, result.stderr
    assert "loop         no" in result.stdout
    assert "findings     near-duplicate, no progress" in result.stdout
    assert (
        "≈ near-duplicate: lookup called 3 times with inputs that differ only in volatile values"
        in result.stdout
    )
    assert "≈ near-duplicate of step 1" in result.stdout
    assert (
        "∅ no progress: kb_search called 3 times in a row with 3 different inputs, same output "
        "each time" in result.stdout
    )
    assert result.stdout.count("∅ no progress since step 4") == 2
    assert "yellow: a warning, not a loop (≈ near-duplicate, ∅ no progress)" in result.stdout


def test_runs_show_a_loop_only_the_agent_reported(server, judged) -> None:
    project, runs = judged
    result = cli(server, project, "runs", "show", runs.agent_only)
    assert "yes, from step 1 (reported by the agent)" in result.stdout
    assert "findings     none" in result.stdout


def test_summary_shows_the_detected_loop_rate(server, judged) -> None:
    project, _ = judged
    result = cli(server, project, "summary", "--window", "1h")
    assert result.returncode == 0, result.stderr
    assert re.search(r"│ loop rate +│ +50\.0% │", result.stdout)  # the agent's account
    assert re.search(r"│ detected loop rate +│ +50\.0% │", result.stdout)  # the server's
    assert (
        "runs with findings: exact loop 2 · cycle 1 · near-duplicate 1 · no progress 1"
        in result.stdout
    )
    curl = line_of(result.stdout, "curl-agent")
    assert "0.0%" in curl and "100.0%" in curl  # agents: loop rate, detected


def test_summary(server, known) -> None:
    project, _ = known
    result = cli(server, project, "summary", "--window", "1h")
    assert result.returncode == 0, result.stderr
    for text in (
        "loop rate",
        "33.3%",
        "how runs ended",
        "loop_detected",
        "agents by loop rate",
        "loop-agent",
    ):
        assert text in result.stdout, text
    data = json.loads(cli(server, project, "summary", "--json").stdout)
    assert set(data) == {"summary", "terminations", "health"}
    assert data["summary"]["current"]["runs"] == 3


@pytest.mark.parametrize(
    ("args", "env", "message"),
    [
        (("runs", "show", "ffffffff"), {}, "no run starts with"),
        (("loops", "not-hex!"), {}, "is not a run id"),
        (("runs",), {"KEELWAVE_API_KEY": "kw_" + "z" * 43}, "the key was refused"),
        (("runs",), {"KEELWAVE_ENDPOINT": "http://127.0.0.1:9"}, "cannot reach keelwave"),
        (("summary", "--window", "forever"), {}, "window"),
    ],
)
def test_errors_are_one_clear_line(server, known, args, env, message) -> None:
    project, _ = known
    result = cli(server, project, *args, **env)
    assert result.returncode == 1
    assert message in result.stderr
    assert "Traceback" not in result.stderr and len(result.stderr.strip().splitlines()) == 1


def test_login_stores_the_key_privately_and_flags_win(server, known, tmp_path: Path) -> None:
    project, _ = known
    config = tmp_path / "config.json"
    env = {"KEELWAVE_CONFIG": str(config), "KEELWAVE_ENDPOINT": server.url}
    environment = {k: v for k, v in os.environ.items() if k != "KEELWAVE_API_KEY"}
    result = keelwave("login", "--api-key", project.keys["read"], env={**environment, **env})
    assert result.returncode == 0, result.stderr
    assert stat.S_IMODE(config.stat().st_mode) == 0o600
    assert json.loads(config.read_text()) == {
        "endpoint": server.url,
        "api_key": project.keys["read"],
    }
    # the stored key works with nothing else set
    stored = keelwave("runs", "--json", env={**environment, "KEELWAVE_CONFIG": str(config)})
    assert stored.returncode == 0, stored.stderr
    # the environment beats the file, and a flag beats the environment
    bad = "kw_" + "q" * 43
    assert (
        keelwave(
            "runs", env={**environment, "KEELWAVE_CONFIG": str(config), "KEELWAVE_API_KEY": bad}
        ).returncode
        == 1
    )
    assert (
        keelwave(
            "runs",
            "--api-key",
            project.keys["read"],
            env={**environment, "KEELWAVE_CONFIG": str(config), "KEELWAVE_API_KEY": bad},
        ).returncode
        == 0
    )
    refused = keelwave("login", "--api-key", bad, env={**environment, **env})
    assert refused.returncode == 1 and "refused" in refused.stderr


def login(server, stdin: str | None, *args: str, **env: str):
    """`keelwave login` with no terminal: its input is ``stdin`` (or nothing at all)."""
    import subprocess
    import sys

    environment = {k: v for k, v in os.environ.items() if k != "KEELWAVE_API_KEY"}
    return subprocess.run(
        [sys.executable, "-m", "keelwave.cli", "login", *args],
        input=stdin if stdin is not None else "",
        capture_output=True,
        text=True,
        env={**environment, "KEELWAVE_ENDPOINT": server.url, **env},
        timeout=60,
    )


def test_login_without_a_terminal(server, known, tmp_path: Path) -> None:
    project, _ = known
    key = project.keys["read"]
    # KEELWAVE_API_KEY is the key to log in with: no question asked.
    config = tmp_path / "env.json"
    result = login(server, None, KEELWAVE_API_KEY=key, KEELWAVE_CONFIG=str(config))
    assert result.returncode == 0, result.stderr
    assert "(the key from KEELWAVE_API_KEY)" in result.stdout
    assert json.loads(config.read_text())["api_key"] == key
    # A key piped in.
    config = tmp_path / "piped.json"
    result = login(server, key + "\n", KEELWAVE_CONFIG=str(config))
    assert result.returncode == 0, result.stderr
    assert json.loads(config.read_text())["api_key"] == key
    # Nothing at all: a clear refusal, at once.
    result = login(server, None, KEELWAVE_CONFIG=str(tmp_path / "none.json"))
    assert result.returncode == 2
    assert "no API key to log in with" in result.stderr and "KEELWAVE_API_KEY" in result.stderr
    assert "Traceback" not in result.stderr and not (tmp_path / "none.json").exists()


def test_an_endpoint_without_its_scheme(server, known, tmp_path: Path) -> None:
    project, _ = known
    bare = server.url.removeprefix("http://")
    config = tmp_path / "bare.json"
    result = login(server, None, "--endpoint", bare, "--api-key", project.keys["read"],
                   KEELWAVE_CONFIG=str(config))  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert f"Logged in to {server.url}" in result.stdout
    assert json.loads(config.read_text())["endpoint"] == server.url
    listed = cli(server, project, "runs", "--json", KEELWAVE_ENDPOINT=bare + "/")
    assert listed.returncode == 0, listed.stderr


def test_a_cost_below_a_cent_is_shown_with_its_first_digits_not_as_zero() -> None:
    from keelwave.remote.format import money

    shown = {usd: money(usd) for usd in (0, 0.000194, 0.0051, 0.0099999, 0.75, 1234.5, 1e-9)}
    assert shown == {0: "$0", 0.000194: "$0.00019", 0.0051: "$0.0051", 0.0099999: "$0.01",
                     0.75: "$0.75", 1234.5: "$1,234.50", 1e-9: "<$0.000001"}  # fmt: skip
