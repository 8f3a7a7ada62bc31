"""Deleting runs: one run with its children, by selector (an erasure request by metadata),
OTLP runs with their spans; gone from every endpoint and from every table, and the
aggregates as if the deleted runs had never been sent."""

from __future__ import annotations

import json
import uuid
from datetime import timedelta

import aiohttp
import httpx
import pytest
from conftest import Api, make_project, make_settings, query
from lifecycle_data import (
    NOW,
    Run,
    add_alert_event,
    aggregates,
    counts,
    dataset,
    judged,
    recomputed_run_rollups,
    rollups,
    send,
    stored_run_rollups,
)
from otlp_exports import document
from serve_process import keelwave

from keelwave.server.app import create_app

SINCE, UNTIL = NOW - timedelta(days=1), NOW + timedelta(hours=1)


@pytest.fixture
async def api(db_url: str, aiohttp_server):
    """A real keelwave server with a 1 MiB body limit (the captured OTLP traces are large)."""
    app = create_app(make_settings(max_body_bytes=1024 * 1024), db_url)
    server = await aiohttp_server(app)
    async with aiohttp.ClientSession() as session:
        yield Api(str(server.make_url("")).rstrip("/"), session)


def run_path(project, run_id: str = "", suffix: str = "") -> str:
    return f"/v1/projects/{project.id}/agent/runs{'/' + run_id if run_id else ''}{suffix}"


async def twin_checks(api, db_url: str, deleted_from, twin) -> None:
    """``deleted_from`` (its runs deleted) answers every aggregate as ``twin`` (sent
    only the runs kept), and their rollup tables hold the same rows."""
    await judged(db_url, deleted_from.id, twin.id)
    assert await aggregates(api, deleted_from, SINCE, UNTIL) == await aggregates(
        api, twin, SINCE, UNTIL
    )
    assert rollups(db_url, deleted_from.id) == rollups(db_url, twin.id)
    assert stored_run_rollups(db_url, deleted_from.id) == recomputed_run_rollups(
        db_url, deleted_from.id
    )


async def test_a_run_and_its_children_go_from_every_endpoint_and_table(api, db_url) -> None:
    runs = dataset()
    root, child, other, grandchild = runs[:4]
    tree = {root.id, child.id, other.id, grandchild.id}
    project = make_project(db_url)
    await send(api, project, runs)
    await judged(db_url, project.id)
    for run in runs[:6]:
        add_alert_event(db_url, project.id, run.id, NOW)
    before = counts(db_url, project.id)

    status, body, _ = await api.request(
        "DELETE", run_path(project, root.id), params={"children": "true"}, headers=project.auth()
    )
    assert status == 200, body
    gone = [run for run in runs if run.id in tree]
    assert body == {
        "data": {
            "runs": 4,
            "steps": sum(run.steps for run in gone),
            "model_calls": sum(run.calls for run in gone),
        }
    }
    for run_id in tree:
        for suffix in ("", "/steps", "/llm", "/loops", "/findings"):
            status, _, _ = await api.get(run_path(project, run_id, suffix), headers=project.auth())
            assert status == 404, (suffix, status)
        for table, column in (
            ("agent_runs", "id"), ("agent_steps", "run_id"), ("ai_traces", "run_id"),
            ("alert_events", "run_id"),
        ):  # fmt: skip
            assert query(db_url, f"SELECT 1 FROM {table} WHERE {column} = %s", (run_id,)) == []
    status, listed, _ = await api.get(
        run_path(project), params={"limit": "500"}, headers=project.auth()
    )
    assert {run["id"] for run in listed["data"]} == {run.id for run in runs} - tree
    after = counts(db_url, project.id)
    assert after["runs"] == before["runs"] - 4
    assert after["alert_events"] == before["alert_events"] - 4  # two were about other runs

    twin = make_project(db_url)
    await send(api, twin, [run for run in runs if run.id not in tree])
    await twin_checks(api, db_url, project, twin)

    # Without children=true only the run itself goes; its children stay.
    parent, kid = Run(NOW - timedelta(hours=2)), Run(NOW - timedelta(hours=2))
    kid.parent = parent.id
    await send(api, project, [parent, kid])
    status, body, _ = await api.request(
        "DELETE", run_path(project, parent.id), headers=project.auth()
    )
    assert body["data"]["runs"] == 1
    status, body, _ = await api.get(run_path(project, kid.id), headers=project.auth())
    assert status == 200 and body["data"]["parent_run_id"] == parent.id


async def test_unknown_runs_and_keys_that_may_not_delete(api, db_url) -> None:
    project, other = make_project(db_url), make_project(db_url)
    run = Run(NOW - timedelta(hours=1))
    await send(api, project, [run])
    status, body, _ = await api.request(
        "DELETE", run_path(project, str(uuid.uuid4())), headers=project.auth()
    )
    assert status == 404 and body["error"]["code"] == "not_found"
    # Another project's run is not found either, and stays.
    status, _, _ = await api.request(
        "DELETE", f"/v1/projects/{other.id}/agent/runs/{run.id}", headers=other.auth()
    )
    assert status == 404
    for scope in ("read", "ingest"):
        status, body, _ = await api.request(
            "DELETE", run_path(project, run.id), headers=project.auth(scope)
        )
        assert status == 403, body
        status, body, _ = await api.post(
            run_path(project, suffix="/delete"),
            json={"agent_name": "alpha"},
            headers=project.auth(scope),
        )
        assert status == 403, body
    assert counts(db_url, project.id)["runs"] == 1
    for selector in ({}, {"metadata": {}}, {"agent_name": ""}, {"agent_name": "a\u0000"}):
        status, body, _ = await api.post(
            run_path(project, suffix="/delete"), json=selector, headers=project.auth()
        )
        assert status == 422, (selector, body)
    assert counts(db_url, project.id)["runs"] == 1


async def test_erasure_by_metadata_across_agents(api, db_url) -> None:
    runs = dataset(seed=5, count=24)
    odd = Run(NOW - timedelta(hours=3), agent="delta", metadata={"user_id": "u1", "x": "\u0000"})
    number = Run(NOW - timedelta(hours=3), agent="delta", metadata={"user_id": 1})
    runs += [odd, number, Run(NOW - timedelta(hours=3), agent="delta", metadata=None)]
    project = make_project(db_url)
    await send(api, project, runs)
    erased = [run for run in runs if run.metadata and run.metadata.get("user_id") == "u1"]
    assert len({run.agent for run in erased}) >= 3  # several agents, and a NUL elsewhere

    status, body, _ = await api.post(
        run_path(project, suffix="/delete"),
        json={"metadata": {"user_id": "u1"}},
        headers=project.auth(),
    )
    assert status == 200, body
    assert body["data"] == {
        "runs": len(erased),
        "steps": sum(run.steps for run in erased),
        "model_calls": sum(run.calls for run in erased),
    }
    gone = {run.id for run in erased}
    left = {str(run_id) for (run_id,) in query(
        db_url, "SELECT id FROM agent_runs WHERE project_id = %s", (project.id,)
    )}  # fmt: skip
    assert left == {run.id for run in runs} - gone
    leftovers = query(
        db_url,
        "SELECT count(*) FROM agent_steps WHERE project_id = %s AND run_id = ANY(%s::uuid[])",
        (project.id, list(gone)),
    )
    assert leftovers == [(0,)]

    twin = make_project(db_url)
    await send(api, twin, [run for run in runs if run.id not in gone])
    await twin_checks(api, db_url, project, twin)


async def test_deletion_by_agent_and_by_start_time(api, db_url) -> None:
    old, older = Run(NOW - timedelta(hours=30), agent="x"), Run(NOW - timedelta(hours=40))
    recent = Run(NOW - timedelta(hours=2), agent="x")
    project = make_project(db_url)
    await send(api, project, [old, older, recent])
    delete = run_path(project, suffix="/delete")
    cutoff = (NOW - timedelta(hours=24)).isoformat()
    # Every criterion must hold: agent x and before the cutoff is one run.
    status, body, _ = await api.post(
        delete, json={"agent_name": "x", "before": cutoff}, headers=project.auth()
    )
    assert (status, body["data"]["runs"]) == (200, 1)
    status, body, _ = await api.post(
        delete, json={"before": cutoff.replace("+00:00", "")}, headers=project.auth()
    )
    assert body["data"]["runs"] == 1  # older: a time without an offset is UTC
    left = query(db_url, "SELECT id::text FROM agent_runs WHERE project_id = %s", (project.id,))
    assert left == [(recent.id,)]


async def test_otlp_runs_go_with_their_spans(api, db_url) -> None:
    project = make_project(db_url)
    doc = document("langgraph_nested")
    async with api.session.post(
        api.url + "/v1/traces",
        data=json.dumps(doc).encode(),
        headers={**project.auth("ingest"), "Content-Type": "application/json"},
    ) as response:
        assert response.status == 200
    runs = query(
        db_url,
        "SELECT id::text, parent_run_id::text FROM agent_runs WHERE project_id = %s",
        (project.id,),
    )
    assert len(runs) >= 2, runs
    [root] = [run_id for run_id, parent in runs if parent is None]
    child = next(run_id for run_id, parent in runs if parent is not None)
    spans = counts(db_url, project.id)["otlp_spans"]
    # A child alone: its projection goes, the trace's spans stay for the runs left.
    status, body, _ = await api.request("DELETE", run_path(project, child), headers=project.auth())
    assert status == 200 and body["data"]["runs"] == 1
    assert counts(db_url, project.id)["otlp_spans"] == spans
    assert query(db_url, "SELECT 1 FROM otlp_runs WHERE run_id = %s", (child,)) == []
    status, body, _ = await api.request(
        "DELETE", run_path(project, root), params={"children": "true"}, headers=project.auth()
    )
    assert status == 200
    left = counts(db_url, project.id)
    assert (left["runs"], left["steps"], left["model_calls"]) == (0, 0, 0)
    assert (left["otlp_runs"], left["otlp_spans"]) == (0, 0)
    # The same export again makes the runs anew, as if never sent (nothing left over).
    async with api.session.post(
        api.url + "/v1/traces",
        data=json.dumps(doc).encode(),
        headers={**project.auth("ingest"), "Content-Type": "application/json"},
    ) as response:
        assert response.status == 200
    assert counts(db_url, project.id)["runs"] == len(runs)


async def test_steps_that_came_without_their_run_can_be_deleted(api, db_url) -> None:
    project = make_project(db_url)
    run = Run(NOW - timedelta(hours=1))
    status, _, _ = await api.post(
        "/v1/ingest/agent/steps", json=run.step_bodies(), headers=project.auth("ingest")
    )
    assert status == 200
    status, body, _ = await api.request("DELETE", run_path(project, run.id), headers=project.auth())
    assert status == 200 and body["data"] == {"runs": 0, "steps": run.steps, "model_calls": 0}
    assert counts(db_url, project.id)["steps"] == 0


# -- the CLI, against a real `keelwave serve` -------------------------------------------


def cli(server, project, *args: str, scope: str = "all", stdin: str | None = None):
    env = {
        "KEELWAVE_ENDPOINT": server.url,
        "KEELWAVE_API_KEY": project.keys[scope],
        "KEELWAVE_CONFIG": "/nonexistent/keelwave.json",
        "COLUMNS": "200",
    }
    if stdin is None:
        return keelwave(*args, env=env)
    import os
    import subprocess
    import sys

    return subprocess.run(
        [sys.executable, "-m", "keelwave.cli", *args],
        input=stdin,
        capture_output=True,
        text=True,
        env={**os.environ, **env},
        timeout=60,
    )


def ingest(server, project, runs: list[Run]) -> None:
    with httpx.Client(base_url=server.url, headers=project.auth("ingest")) as http:
        for run in runs:
            body = {"id": run.id, "agent_name": run.agent, "started_at": run.started.isoformat()}
            if run.parent:
                body["parent_run_id"] = run.parent
            if run.metadata:
                body["metadata"] = run.metadata
            http.post("/v1/ingest/agent/runs", json=body).raise_for_status()
            if run.steps:
                http.post("/v1/ingest/agent/steps", json=run.step_bodies()).raise_for_status()


@pytest.fixture
def cli_project(server, db_url):
    return make_project(db_url)


def run_ids(db_url: str, project) -> set[str]:
    rows = query(db_url, "SELECT id::text FROM agent_runs WHERE project_id = %s", (project.id,))
    return {run_id for (run_id,) in rows}


def test_cli_deletes_a_run_after_asking(server, db_url, cli_project) -> None:
    parent, kid, other = (Run(NOW - timedelta(hours=1)) for _ in range(3))
    kid.parent = parent.id
    ingest(server, cli_project, [parent, kid, other])

    refused = cli(server, cli_project, "runs", "delete", parent.id[:8], stdin="n\n")
    assert refused.returncode == 1 and "Delete run " + parent.id in refused.stdout
    assert run_ids(db_url, cli_project) == {parent.id, kid.id, other.id}
    # No terminal and no --yes: nothing is deleted either.
    assert cli(server, cli_project, "runs", "delete", parent.id, stdin="").returncode == 1

    result = cli(server, cli_project, "runs", "delete", parent.id[:8], "--children", stdin="y\n")
    assert result.returncode == 0, result.stderr
    assert "Deleted 2 runs, 8 steps and 0 model calls." in result.stdout
    assert run_ids(db_url, cli_project) == {other.id}

    denied = cli(server, cli_project, "runs", "delete", other.id, "--yes", scope="read")
    assert denied.returncode == 1 and "not allowed" in denied.stderr
    missing = cli(server, cli_project, "runs", "delete", str(uuid.uuid4()), "--yes")
    assert missing.returncode == 1 and "not found" in missing.stderr


def test_cli_erasure_by_metadata_and_age(server, db_url, cli_project) -> None:
    runs = [
        Run(NOW - timedelta(hours=1), agent="a", metadata={"user_id": "u-42"}),
        Run(NOW - timedelta(hours=1), agent="b", metadata={"user_id": "u-42", "k": "v"}),
        Run(NOW - timedelta(hours=1), agent="b", metadata={"user_id": "u-7"}),
        Run(NOW - timedelta(days=40), agent="c"),
    ]
    ingest(server, cli_project, runs)
    result = cli(
        server, cli_project, "runs", "delete", "--metadata", "user_id=u-42", "--yes", "--json"
    )
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout) == {"runs": 2, "steps": 8, "model_calls": 0}
    result = cli(server, cli_project, "runs", "delete", "--before", "30d", stdin="y\n")
    assert result.returncode == 0, result.stderr
    assert "started before" in result.stdout and "Deleted 1 run, 4 steps" in result.stdout
    assert run_ids(db_url, cli_project) == {runs[2].id}
    both = cli(server, cli_project, "runs", "delete", runs[2].id, "--agent", "b", "--yes")
    assert both.returncode == 1 and "not both" in both.stderr
    nothing = cli(server, cli_project, "runs", "delete", "--yes")
    assert nothing.returncode == 1 and "give a RUN_ID" in nothing.stderr


def test_batches_bound_runs_and_rows_per_transaction() -> None:
    """Per transaction at most MAX_RUNS runs (locked one by one) and MAX_ROWS steps and
    model calls (TimescaleDB decompresses at most 100,000 rows in one); a run bigger
    than that goes alone."""
    from keelwave.server.store.erasure import MAX_ROWS, MAX_RUNS, batches

    runs = [(uuid.uuid4(), NOW, 10) for _ in range(1000)] + [(uuid.uuid4(), NOW, MAX_ROWS * 3)]
    runs += [(uuid.uuid4(), NOW, MAX_ROWS // 2 + 1) for _ in range(3)]
    split = list(batches(runs, MAX_RUNS, MAX_ROWS))
    assert [run for batch in split for run in batch] == runs
    for batch in split:
        assert len(batch) <= MAX_RUNS
        assert len(batch) == 1 or sum(rows for _, _, rows in batch) <= MAX_ROWS
    assert [len(batch) for batch in split[-4:]] == [1, 1, 1, 1]
