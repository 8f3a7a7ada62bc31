"""`keelwave export` and `keelwave import`: a project's runs move from one server to
another, with identical loops, steps, model calls and aggregates, and an import sent
twice stores nothing twice."""

from __future__ import annotations

import json
import time
import uuid
from datetime import UTC, datetime, timedelta

import httpx
import pytest
from conftest import assert_sketches_stored, create_database, drop_database, make_project, query
from serve_process import ServeProcess, keelwave

NOW = datetime.now(UTC).replace(microsecond=0)


@pytest.fixture(scope="module")
def servers(db_url, template_database, tmp_path_factory):
    """Two real servers on two databases: where runs come from, where they go."""
    name = f"kw_import_{uuid.uuid4().hex[:8]}"
    target_url = create_database(name, template=template_database)
    logs = tmp_path_factory.mktemp("transfer")
    source = ServeProcess("--database-url", db_url, log=logs / "source.log")
    target = ServeProcess("--database-url", target_url, log=logs / "target.log")
    yield source, db_url, target, target_url
    for process in (source, target):
        process.stop()
        process.kill()
    drop_database(name)


def _seed(http: httpx.Client) -> dict[str, str]:
    """Runs a real project has: finished with a loop the SDK reported, one whose steps
    differ only in a secret (the server tells them apart by the bytes as sent, and
    stores them redacted), a child run, one still running, model calls, one of them
    sent without a run, and tool inputs whose whitespace and key order are their own."""
    runs = {}
    for name, started in (("looper", 3), ("secretive", 2), ("child", 2), ("running", 1)):
        body = {"agent_name": f"{name}-agent", "started_at": (NOW - timedelta(hours=started))
                .isoformat(), "input": {"task": name, "n": 1}, "metadata": {"user_id": "u-1"},
                "tags": ["prod", name]}  # fmt: skip
        if name == "child":
            body["parent_run_id"] = runs["looper"]
        runs[name] = http.post("/v1/ingest/agent/runs", json=body).json()["data"]["id"]
    looper = runs["looper"]
    raw_input = '{ "q" :"weather",  "a": [1, 2.50] }'  # spacing and order as an agent sent them
    steps = [
        {"run_id": looper, "step_index": n, "step_type": "tool_call", "tool_name": "search",
         "tool_input": "RAW", "tool_output": {"hits": n}, "duration_ms": 12.5,
         "started_at": (NOW - timedelta(hours=3) + timedelta(seconds=n)).isoformat()}
        for n in (1, 2, 3)
    ] + [
        {"run_id": looper, "step_index": 4, "step_type": "think", "content": "stuck again"},
    ] + [
        {"run_id": runs["secretive"], "step_index": n, "tool_name": "login",
         "tool_input": {"user": "ann", "password": password}}
        for n, password in ((1, "hunter2-a"), (2, "hunter2-a"), (3, "hunter2-b"))
    ] + [
        {"run_id": runs["child"], "step_index": 1, "tool_name": "fetch", "tool_input": {"u": 1},
         "error": "timeout after 30 s",
         "error_traceback": "Traceback (most recent call last):\n  ...\nTimeoutError"},
    ]  # fmt: skip
    body = json.dumps(steps).replace('"RAW"', raw_input)
    response = http.post(
        "/v1/ingest/agent/steps", content=body, headers={"Content-Type": "application/json"}
    )
    assert response.status_code == 200, response.text
    calls = [
        {"run_id": looper, "step_index": 2, "provider": "openai", "model": "gpt-4o",
         "input_tokens": 1200, "output_tokens": 80, "latency_ms": 900,
         "input_messages": [{"role": "user", "content": "weather?"}],
         "output_messages": [{"role": "assistant", "content": "search again"}]},
        {"run_id": runs["secretive"], "provider": "anthropic", "model": "claude-sonnet-4",
         "input_tokens": 300, "output_tokens": 20, "cost_usd": 0.0123, "status": "error",
         "error": "overloaded"},
        {"provider": "openai", "model": "gpt-4o-mini", "input_tokens": 5, "output_tokens": 1},
    ]  # fmt: skip
    assert http.post("/v1/ingest/ai", json=calls).status_code == 200
    finishes = {
        "looper": {"termination_reason": "loop_detected", "loop_detected": True,
                   "loop_step_index": 1, "output": {"answer": None}},
        "secretive": {"termination_reason": "error", "error": "login refused",
                      "error_traceback": "Traceback (most recent call last):\nPermissionError"},
        "child": {"termination_reason": "clean", "output": "done"},
    }  # fmt: skip
    for name, finish in finishes.items():
        assert http.post(f"/v1/ingest/agent/runs/{runs[name]}/finish", json=finish).is_success
    return runs


def _views(http: httpx.Client, project_id: str, runs: dict[str, str]) -> dict:
    """What a user sees of the runs: details, steps, loops, model calls, aggregates,
    once the server has judged the runs (its verdicts come a moment after ingest)."""
    base = f"/v1/projects/{project_id}/agent"
    deadline = time.monotonic() + 30
    while not all(
        http.get(f"{base}/runs/{runs[name]}").json()["data"]["detected_loop"]
        for name in ("looper", "secretive")
    ):
        assert time.monotonic() < deadline, "the server never judged the looping runs"
        time.sleep(0.2)
    seen: dict = {}
    for name, run_id in runs.items():
        detail = http.get(f"{base}/runs/{run_id}").json()["data"]
        detail.pop("last_activity_at")  # when the server last heard of it: the import
        detail.pop("status")
        seen[name] = {
            "run": detail,
            "steps": http.get(f"{base}/runs/{run_id}/steps").json()["data"],
            "loops": http.get(f"{base}/runs/{run_id}/loops").json()["data"],
            "llm": http.get(f"{base}/runs/{run_id}/llm").json()["data"],
        }
    window = {"window": "7d"}
    for aggregate in ("summary", "health", "runs/terminations", "tools"):
        answer = http.get(f"{base}/{aggregate}", params=window).json()["data"]
        seen[aggregate] = _without_times(answer)
    return seen


def _without_times(value):
    """Aggregates name their window by the time they were asked: not what is compared."""
    if isinstance(value, dict):
        return {k: _without_times(v) for k, v in value.items()
                if k not in ("since", "until", "window", "generated_at")}  # fmt: skip
    if isinstance(value, list):
        return [_without_times(v) for v in value]
    return value


def test_a_project_moves_to_another_server_with_identical_loops(servers, tmp_path) -> None:
    source, source_url, target, target_url = servers
    mine, theirs = make_project(source_url), make_project(target_url)
    with httpx.Client(base_url=source.url, headers=mine.auth()) as http:
        runs = _seed(http)
        before = _views(http, mine.id, runs)
    assert [group["step_indices"] for group in before["looper"]["loops"]] == [[1, 2, 3]]
    # Told apart by the bytes as sent, though stored alike:
    assert [group["step_indices"] for group in before["secretive"]["loops"]] == [[1, 2]]
    assert before["secretive"]["steps"][2]["tool_input"]["password"] == "[REDACTED]"
    assert before["secretive"]["run"]["error_traceback"].endswith("PermissionError")
    assert before["child"]["steps"][0]["error_traceback"].endswith("TimeoutError")
    assert before["looper"]["llm"][0]["output_messages"][0]["content"] == "search again"

    exported = tmp_path / "runs.jsonl"
    env = {"KEELWAVE_ENDPOINT": source.url, "KEELWAVE_API_KEY": mine.keys["read"]}
    result = keelwave("export", "--project", mine.name, "-o", str(exported), env=env)
    assert result.returncode == 0, result.stderr
    assert "Exported 4 runs, 8 steps and 3 model calls" in result.stderr
    lines = [json.loads(line) for line in exported.read_text().splitlines()]
    assert lines[0]["keelwave_export"] == 1 and lines[0]["project"]["name"] == mine.name
    assert lines[-1] == {"kind": "end", "runs": 4, "steps": 8, "model_calls": 3}
    # The stored JSON text is copied byte for byte (spacing and key order kept).
    assert '{ "q" :"weather",  "a": [1, 2.50] }' in exported.read_text()
    assert "hunter2" not in exported.read_text()

    env = {"KEELWAVE_ENDPOINT": target.url, "KEELWAVE_API_KEY": theirs.keys["all"]}
    for _attempt in (1, 2):  # the second time stores nothing
        result = keelwave("import", str(exported), env=env)
        assert result.returncode == 0, result.stderr
        assert f"into project {theirs.name}" in result.stdout
        assert "warning" not in result.stderr
    with httpx.Client(base_url=target.url, headers=theirs.auth()) as http:
        after = _views(http, theirs.id, runs)
    assert after == before

    counts = query(
        target_url,
        "SELECT (SELECT count(*) FROM agent_runs WHERE project_id = %(p)s),"
        " (SELECT count(*) FROM agent_steps WHERE project_id = %(p)s),"
        " (SELECT count(*) FROM ai_traces WHERE project_id = %(p)s)",
        {"p": uuid.UUID(theirs.id)},  # type: ignore[arg-type]
    )
    assert counts == [(4, 8, 3)]
    assert assert_sketches_stored(target_url, theirs.id) > 0  # derived again, not exported


def test_export_filters_and_import_from_stdin(servers, tmp_path) -> None:
    source, source_url, target, target_url = servers
    mine, theirs = make_project(source_url), make_project(target_url)
    with httpx.Client(base_url=source.url, headers=mine.auth()) as http:
        runs = _seed(http)
    env = {"KEELWAVE_ENDPOINT": source.url, "KEELWAVE_API_KEY": mine.keys["read"]}
    since = (NOW - timedelta(minutes=150)).isoformat()
    result = keelwave("export", "--since", since, "--agent", "secretive-agent", env=env)
    assert result.returncode == 0, result.stderr
    lines = [json.loads(line) for line in result.stdout.splitlines()]
    assert {line["id"] for line in lines if line.get("kind") == "run"} == {runs["secretive"]}
    assert lines[-1] == {"kind": "end", "runs": 1, "steps": 3, "model_calls": 1}

    import subprocess
    import sys

    imported = subprocess.run(
        [sys.executable, "-m", "keelwave", "import", "-"],
        input=result.stdout, capture_output=True, text=True, timeout=120,
        env={**__import__("os").environ, "KEELWAVE_ENDPOINT": target.url,
             "KEELWAVE_API_KEY": theirs.keys["all"]},
    )  # fmt: skip
    assert imported.returncode == 0, imported.stderr
    assert "Imported 1 run, 3 steps and 1 model call" in imported.stdout
    with httpx.Client(base_url=target.url, headers=theirs.auth()) as http:
        loops = http.get(f"/v1/projects/{theirs.id}/agent/runs/{runs['secretive']}/loops")
    assert [group["step_indices"] for group in loops.json()["data"]] == [[1, 2]]


def test_bad_exports_are_refused_naming_the_line(servers, tmp_path) -> None:
    source, source_url, target, target_url = servers
    theirs = make_project(target_url)
    env = {"KEELWAVE_ENDPOINT": target.url, "KEELWAVE_API_KEY": theirs.keys["all"]}
    run_id = str(uuid.uuid4())
    good = json.dumps({"kind": "run", "id": run_id, "agent_name": "a",
                       "started_at": NOW.isoformat()})  # fmt: skip
    cases = (
        ("not json at all", "line 2: not a JSON object"),
        (json.dumps({"kind": "span"}), "line 2: kind must be one of run, step, model_call"),
        (
            json.dumps(
                {
                    "kind": "step",
                    "run_id": "nope",
                    "step_index": 1,
                    "step_type": "tool_call",
                    "started_at": NOW.isoformat(),
                }
            ),
            "line 2: run_id",
        ),  # fmt: skip
        (
            json.dumps(
                {
                    "kind": "step",
                    "run_id": run_id,
                    "step_type": "tool_call",
                    "started_at": NOW.isoformat(),
                }
            ),
            "line 2: step_index is missing",
        ),  # fmt: skip
        (json.dumps({"keelwave_export": 9}), "export format 9"),
    )
    for line, words in cases:
        path = tmp_path / "bad.jsonl"
        path.write_text(good + "\n" + line + "\n")
        result = keelwave("import", str(path), env=env)
        assert result.returncode == 1, (line, result.stdout)
        assert words in result.stderr, (line, result.stderr)
        assert "Traceback" not in result.stderr
    # Nothing of a refused part is stored: the good line went with it.
    assert query(target_url, "SELECT count(*) FROM agent_runs WHERE id = %s", (run_id,)) == [(0,)]

    path.write_text(good + "\n")  # an export cut off before its last line
    result = keelwave("import", str(path), env=env)
    assert result.returncode == 0 and "cut off" in result.stderr
    result = keelwave("import", str(tmp_path / "missing.jsonl"), env=env)
    assert result.returncode == 1 and "cannot read" in result.stderr

    read_only = {**env, "KEELWAVE_API_KEY": theirs.keys["read"]}
    result = keelwave("import", str(path), env=read_only)
    assert result.returncode == 1 and "scope" in result.stderr
    result = keelwave("export", "--project", "someone-else", "-o", str(path), env=read_only)
    assert result.returncode == 1 and f"belongs to project {theirs.name!r}" in result.stderr


def test_an_import_keeps_what_ingest_would(servers, tmp_path) -> None:
    """Lines written by hand (or by an older server) are held to what ingest stores: a
    traceback to its last 16 KiB, secrets redacted by the receiving project's rules."""
    source, source_url, target, target_url = servers
    theirs = make_project(target_url)
    run_id = str(uuid.uuid4())
    huge = "Traceback (most recent call last):\n" + "  frame\n" * 20_000 + "ValueError: x"
    line = {"kind": "run", "id": run_id, "agent_name": "a", "started_at": NOW.isoformat(),
            "ended_at": NOW.isoformat(), "termination_reason": "error",
            "error": "token sk-proj-4f9QmT7xKp2LrV8nZs3Wd6Yh1Bc5Ej0A refused",
            "error_traceback": huge}  # fmt: skip
    path = tmp_path / "hand.jsonl"
    path.write_text(json.dumps(line) + "\n")
    env = {"KEELWAVE_ENDPOINT": target.url, "KEELWAVE_API_KEY": theirs.keys["all"]}
    assert keelwave("import", str(path), env=env).returncode == 0
    [(error, traceback)] = query(
        target_url, "SELECT error, error_traceback FROM agent_runs WHERE id = %s", (run_id,)
    )
    assert "sk-proj" not in error and "[REDACTED]" in error
    assert len(traceback) <= 16 * 1024 and traceback.endswith("ValueError: x")
