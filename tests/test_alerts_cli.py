"""`keelwave alerts …` as subprocesses against a live server: make a destination and a
rule, see them listed, pause the rule, see what fired; errors in one line."""

from __future__ import annotations

import json
import time

import httpx
from conftest import make_project
from serve_process import keelwave


def cli(server, project, *args: str, scope: str = "all"):
    return keelwave(
        "alerts", *args,
        env={"KEELWAVE_ENDPOINT": server.url, "KEELWAVE_API_KEY": project.keys[scope],
             "KEELWAVE_CONFIG": "/nonexistent/keelwave.json", "COLUMNS": "160"},
    )  # fmt: skip


def test_destinations_rules_and_events_from_the_terminal(server, db_url) -> None:
    project = make_project(db_url)
    made = cli(server, project, "destinations", "create", "on-call", "--url",
               "https://93.184.216.34/hook", "--secret", "s3cret", "--json")  # fmt: skip
    assert made.returncode == 0, made.stderr
    destination = json.loads(made.stdout)
    assert destination["has_secret"] is True and "secret" not in destination
    listed = cli(server, project, "destinations", "list", scope="read")
    assert listed.returncode == 0 and "on-call" in listed.stdout and "yes" in listed.stdout

    condition = json.dumps({"type": "run", "metric": "steps", "above": 2})
    rule = cli(server, project, "rules", "create", "budget", "--destination", destination["id"],
               "--condition", condition, "--agent", "researcher")  # fmt: skip
    assert rule.returncode == 0, rule.stderr
    assert "a run's steps > 2" in rule.stdout
    rules = json.loads(cli(server, project, "rules", "list", "--json").stdout)
    [only] = rules
    assert only["scope"] == {"agent_name": "researcher"} and only["enabled"] is True

    with httpx.Client(base_url=server.url, headers=project.auth()) as http:
        run_id = http.post("/v1/ingest/agent/runs", json={"agent_name": "researcher"}).json()[
            "data"
        ]["id"]
        http.post("/v1/ingest/agent/steps", json=[
            {"run_id": run_id, "step_index": n, "tool_name": "search", "tool_input": {"q": n}}
            for n in range(1, 5)
        ]).raise_for_status()  # fmt: skip
    for _ in range(100):
        events = json.loads(cli(server, project, "events", "--json", scope="read").stdout)
        if events:
            break
        time.sleep(0.1)
    assert [(e["rule_name"], e["run_id"], e["value"]) for e in events] == [("budget", run_id, 4)]
    table = cli(server, project, "events", scope="read")
    assert "budget" in table.stdout and "steps = 4" in table.stdout

    paused = cli(server, project, "rules", "pause", only["id"])
    assert paused.returncode == 0 and "paused" in paused.stdout
    assert json.loads(cli(server, project, "rules", "list", "--json").stdout)[0]["enabled"] is False


def test_a_read_key_cannot_make_rules_and_errors_are_one_line(server, db_url) -> None:
    project = make_project(db_url)
    refused = cli(server, project, "destinations", "create", "x", "--url",
                  "https://93.184.216.34/hook", scope="read")  # fmt: skip
    assert refused.returncode == 1 and "not allowed" in refused.stderr
    assert "Traceback" not in refused.stderr
    private = cli(server, project, "destinations", "create", "x", "--url", "http://127.0.0.1:9/")
    assert private.returncode == 1 and "loopback" in private.stderr
    bad = cli(server, project, "rules", "create", "r", "--destination", "nope",
              "--condition", "{not json")  # fmt: skip
    assert bad.returncode != 0 and "not JSON" in bad.stderr and "Traceback" not in bad.stderr
