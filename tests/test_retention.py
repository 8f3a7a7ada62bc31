"""Retention: a project's period set through the API and the CLI, enforced by the server
on data with known ages; what is past the period goes from every table, what is inside
it stays, and aggregates over a window inside the retained period do not change."""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from datetime import UTC, datetime, timedelta

import aiohttp
import pytest
from conftest import Api, make_project, make_settings, query
from lifecycle_data import (
    NOW,
    Run,
    add_alert_event,
    aggregates,
    counts,
    judged,
    recomputed_run_rollups,
    send,
    shifted,
    stored_run_rollups,
)
from otlp_exports import document
from psycopg_pool import AsyncConnectionPool
from serve_process import ServeProcess, keelwave

from keelwave.server.app import create_app
from keelwave.server.store import retention

DAY = timedelta(days=1)


@pytest.fixture(autouse=True)
def _now() -> None:
    """The retention cutoff is "now" minus the period when enforcement runs: the ages
    of the test's data count from the same moment (lifecycle_data.NOW is the moment
    the suite imported it, minutes earlier in a full run)."""
    global NOW
    NOW = datetime.now(UTC).replace(microsecond=0)


@pytest.fixture
async def api(db_url: str, aiohttp_server, monkeypatch):
    """A real server (1 MiB bodies, for the OTLP traces) whose own enforcer stays out of
    the way: the tests run rounds themselves (test_serve_… lets `serve` run them)."""
    monkeypatch.setattr(retention, "FIRST_AFTER_SECONDS", 3600.0)
    settings = make_settings(max_body_bytes=1024 * 1024, retention_every_seconds=3600)
    server = await aiohttp_server(create_app(settings, db_url))
    async with aiohttp.ClientSession() as session:
        yield Api(str(server.make_url("")).rstrip("/"), session)


async def enforce_now(db_url: str) -> dict:
    """One enforcement round, as `serve` runs it (waiting while another holds the lease)."""
    async with AsyncConnectionPool(db_url, kwargs={"autocommit": True}, open=False) as pool:
        for _ in range(100):
            summary = await retention.enforce(pool)
            if summary is not None:
                return summary
            await asyncio.sleep(0.2)
    raise AssertionError("the retention lease was never free")


async def otlp(api: Api, project, doc: dict) -> None:
    async with api.session.post(
        api.url + "/v1/traces",
        data=json.dumps(doc).encode(),
        headers={**project.auth("ingest"), "Content-Type": "application/json"},
    ) as response:
        assert response.status == 200, await response.text()


def ages(db_url: str, table: str, column: str, project_id: str, cutoff: datetime) -> tuple:
    """(rows before cutoff, rows after) of a project in a table."""
    [row] = query(
        db_url,
        f"SELECT count(*) FILTER (WHERE {column} < %s), count(*) FILTER (WHERE {column} >= %s) "
        f"FROM {table} WHERE project_id = %s",
        (cutoff, cutoff, project_id),
    )
    return row


def just_past_the_period() -> datetime:
    """A start before the coming cutoff (30 days before now) but in the same rollup hour,
    so that hour's rollups must lose exactly this run (unless the cutoff is on the hour)."""
    cutoff = NOW - 30 * DAY
    hour = retention.floor_hour(cutoff)
    return hour + (cutoff - hour) / 2 if cutoff - hour >= timedelta(minutes=2) else cutoff - DAY


async def test_known_ages_and_a_30_day_retention(api, db_url) -> None:
    project, forever = make_project(db_url), make_project(db_url)
    old = [
        Run(NOW - 45 * DAY, steps=6, calls=2),
        Run(NOW - 35 * DAY, agent="beta", looping=True),
        Run(NOW - 31 * DAY, reason=None),
        Run(just_past_the_period(), agent="beta"),
    ]
    kept = [
        Run(NOW - 30 * DAY + timedelta(minutes=5), agent="beta"),  # just inside it
        Run(NOW - 29 * DAY, calls=3),
        Run(NOW - 7 * DAY, looping=True),
        Run(NOW - 3 * DAY, agent="gamma", steps=0),
        Run(NOW - timedelta(hours=20), agent="beta", reason="error"),
        Run(NOW - timedelta(hours=2), looping=True, calls=2),
        Run(NOW - timedelta(minutes=30), reason=None),
    ]
    await send(api, project, old + kept)
    await send(api, forever, [Run(NOW - 45 * DAY), Run(NOW - timedelta(hours=1))])
    # What belongs to no run: model calls sent alone, steps whose run never came.
    lone = [
        {"provider": "openai", "model": "gpt-4o", "input_tokens": 5, "started_at": when}
        for when in ((NOW - 40 * DAY).isoformat(), (NOW - DAY).isoformat())
    ]
    assert (await api.post("/v1/ingest/ai", json=lone, headers=project.auth("ingest")))[0] == 200
    for started in (NOW - 40 * DAY, NOW - timedelta(hours=1)):
        steps = Run(started).step_bodies()
        status, _, _ = await api.post("/v1/ingest/agent/steps", json=steps, headers=project.auth())
        assert status == 200
    add_alert_event(db_url, project.id, None, NOW - 40 * DAY)
    add_alert_event(db_url, project.id, old[0].id, NOW - DAY)  # recent, about an old run
    add_alert_event(db_url, project.id, kept[-2].id, NOW - DAY)
    # OTLP traces: one from 40 days ago (its runs and spans go), one from yesterday.
    await otlp(api, project, shifted(document("langgraph_nested"), -40 * DAY))
    await otlp(api, project, shifted(document("pydanticai_nested"), -DAY))
    await judged(db_url, project.id, forever.id)
    boundary = NOW - 30 * DAY + timedelta(minutes=1)  # the cutoff will be just after
    old_runs, kept_runs = ages(db_url, "agent_runs", "started_at", project.id, boundary)
    assert old_runs > len(old) and kept_runs > len(kept)  # OTLP runs of both ages

    last_day = (NOW - DAY, NOW + timedelta(hours=1))
    inside = (NOW - 29 * DAY, NOW + timedelta(hours=1))  # wholly inside the retained period
    before = {
        "last_day": await aggregates(api, project, *last_day),
        "inside": await aggregates(api, project, *inside),
    }
    forever_before = counts(db_url, forever.id)

    status, body, _ = await api.request(
        "PATCH", f"/v1/projects/{project.id}", json={"retention_days": 30}, headers=project.auth()
    )
    assert status == 200 and body["data"]["retention_days"] == 30
    summary = await enforce_now(db_url)
    [tally] = [p for p in summary["projects"] if p["project"] == project.name]
    cutoff = tally["cutoff"]
    assert NOW - 30 * DAY <= cutoff < NOW - 30 * DAY + timedelta(minutes=10)
    assert tally["runs"] == old_runs

    # Past the period: nothing left in any table.
    assert ages(db_url, "agent_runs", "started_at", project.id, cutoff) == (0, kept_runs)
    assert ages(db_url, "agent_steps", "started_at", project.id, cutoff)[0] == 0
    assert ages(db_url, "ai_traces", "started_at", project.id, cutoff)[0] == 0
    assert ages(db_url, "ai_traces", "started_at", project.id, cutoff)[1] > 0
    assert ages(db_url, "alert_events", "fired_at", project.id, cutoff) == (0, 1)
    [(trace_runs,)] = query(
        db_url, "SELECT count(DISTINCT trace_id) FROM otlp_spans WHERE project_id = %s",
        (project.id,),
    )  # fmt: skip
    assert trace_runs == 1  # yesterday's trace
    for run in old:
        assert query(db_url, "SELECT 1 FROM agent_steps WHERE run_id = %s", (run.id,)) == []
    for run in kept:
        status, _, _ = await api.get(
            f"/v1/projects/{project.id}/agent/runs/{run.id}", headers=project.auth()
        )
        assert status == 200
    # Rollups: the hours wholly before the cutoff are gone; from the cutoff's hour on,
    # they are what the runs left add up to.
    hour = retention.floor_hour(cutoff)
    for table in ("agent_run_rollups", "agent_duration_rollups", "agent_tool_rollups"):
        assert query(
            db_url, f"SELECT count(*) FROM {table} WHERE project_id = %s AND bucket < %s",
            (project.id, hour),
        ) == [(0,)]  # fmt: skip
    assert stored_run_rollups(db_url, project.id) == recomputed_run_rollups(db_url, project.id)
    # Aggregates over windows inside the retained period: the same answers.
    after = {
        "last_day": await aggregates(api, project, *last_day),
        "inside": await aggregates(api, project, *inside),
    }
    assert after["last_day"] == before["last_day"]
    for path in after["inside"]:
        if path == "/summary":  # the window before this one is not inside the period
            assert (
                after["inside"][path]["data"]["current"]
                == (before["inside"][path]["data"]["current"])
            )
        else:
            assert after["inside"][path] == before["inside"][path], path
    # A project that keeps forever keeps everything.
    assert counts(db_url, forever.id) == forever_before

    status, body, _ = await api.get(f"/v1/projects/{project.name}", headers=project.auth("read"))
    assert body["data"]["retention_enforced_at"] is not None
    # The next round finds nothing more to do.
    again = await enforce_now(db_url)
    [tally] = [p for p in again["projects"] if p["project"] == project.name]
    assert (tally["runs"], tally["swept"], tally["rollup_rows"]) == (0, 0, 0)


async def test_the_retention_api(api, db_url) -> None:
    project = make_project(db_url)
    path = f"/v1/projects/{project.id}"
    status, body, _ = await api.get(path, headers=project.auth("read"))
    assert status == 200
    assert body["data"]["name"] == project.name
    assert (body["data"]["retention_days"], body["data"]["retention_enforced_at"]) == (None, None)
    for scope in ("read", "ingest"):
        status, _, _ = await api.request(
            "PATCH", path, json={"retention_days": 7}, headers=project.auth(scope)
        )
        assert status == 403
    changes = [({"retention_days": 7}, 7), ({}, 7), ({"retention_days": None}, None)]
    for change, expected in changes:
        status, body, _ = await api.request("PATCH", path, json=change, headers=project.auth())
        assert (status, body["data"]["retention_days"]) == (200, expected), body
    for bad in ({"retention_days": 0}, {"retention_days": 40_000}, {"retention_days": "7"},
                {"retention": 7}):  # fmt: skip
        status, body, _ = await api.request("PATCH", path, json=bad, headers=project.auth())
        assert status == 422, (bad, body)
    other = make_project(db_url)
    status, _, _ = await api.request(
        "PATCH", f"/v1/projects/{other.id}", json={"retention_days": 1}, headers=project.auth()
    )
    assert status == 404
    assert query(db_url, "SELECT retention_days FROM projects WHERE id = %s", (other.id,)) == [
        (None,)
    ]


async def test_steps_and_model_calls_older_than_the_retention_are_not_stored(api, db_url) -> None:
    """A step that comes after its run was deleted by retention (an agent resuming a
    month-old run), or a model call sent without a run, is past the period when it
    arrives: stored, it would belong to no run the enforcer looks at, and stay for good.
    It is accepted and not stored; what is within the period is stored as always."""
    project = make_project(db_url)
    status, _, _ = await api.request(
        "PATCH", f"/v1/projects/{project.id}", json={"retention_days": 30},
        headers=project.auth(),
    )  # fmt: skip
    assert status == 200
    gone_run, kept_run = str(uuid.uuid4()), str(uuid.uuid4())
    old = (datetime.now(UTC) - timedelta(days=40)).isoformat()
    recent = (datetime.now(UTC) - timedelta(days=10)).isoformat()
    steps = [
        {"run_id": gone_run, "step_index": 7, "tool_name": "t", "started_at": old},
        {"run_id": kept_run, "step_index": 1, "tool_name": "t", "started_at": recent},
    ]
    status, body, _ = await api.post(
        "/v1/ingest/agent/steps", json=steps, headers=project.auth("ingest")
    )
    assert (status, body["data"]["accepted"]) == (200, 2), body
    calls = [
        {"provider": "openai", "model": "gpt-4o", "started_at": when} for when in (old, recent)
    ]
    status, body, _ = await api.post("/v1/ingest/ai", json=calls, headers=project.auth("ingest"))
    assert status == 200 and body["data"]["accepted"] == 2, body
    stored_steps = query(
        db_url, "SELECT run_id::text FROM agent_steps WHERE project_id = %s", (project.id,)
    )
    assert stored_steps == [(kept_run,)]
    assert counts(db_url, project.id)["model_calls"] == 1


async def test_one_enforcer_at_a_time(db_url) -> None:
    async with AsyncConnectionPool(db_url, kwargs={"autocommit": True}, open=False) as pool:
        results = await asyncio.gather(*(retention.enforce(pool) for _ in range(4)))
        # The lease was held by one while the others asked (or it had finished already
        # and the others each took the next round: then each got one).
        assert sum(result is not None for result in results) >= 1
        # Right after a round, a server that asks with its gap skips.
        assert await retention.enforce(pool) is not None
        assert await retention.enforce(pool, gap_seconds=300) is None
        # A lease held by a server that died is taken over once it expires.
        async with pool.connection() as conn:
            await conn.execute(
                "UPDATE retention_enforcement SET holder = %s, expires_at = now() + interval "
                "'1 hour', finished_at = NULL",
                (uuid.uuid4(),),
            )
        assert await retention.enforce(pool) is None
        async with pool.connection() as conn:
            await conn.execute(
                "UPDATE retention_enforcement SET expires_at = now() - interval '1s'"
            )
        assert await retention.enforce(pool) is not None


def test_serve_enforces_on_its_schedule_as_the_cli_sets_it(db_url, tmp_path) -> None:
    project = make_project(db_url)
    process = ServeProcess(
        "--database-url", db_url, "--workers", "2",
        env={"KEELWAVE_RETENTION_EVERY_SECONDS": "1"}, log=tmp_path / "serve.log",
    )  # fmt: skip
    try:
        import httpx

        with httpx.Client(base_url=process.url, headers=project.auth("ingest")) as http:
            for days in (40, 1):
                started = (datetime.now(UTC) - days * DAY).isoformat()
                body = {"agent_name": "a", "started_at": started}
                http.post("/v1/ingest/agent/runs", json=body).raise_for_status()
        database = ("--database-url", db_url)
        result = keelwave("projects", "set-retention", project.name, "30", *database)
        assert result.returncode == 0, result.stderr
        assert "keeps runs for 30 days" in result.stdout
        deadline = time.monotonic() + 30
        while counts(db_url, project.id)["runs"] != 1 or not query(
            db_url, "SELECT 1 FROM retention_sweeps WHERE project_id = %s", (project.id,)
        ):  # (the round records itself once its rollup rows are gone too, after the runs)
            assert time.monotonic() < deadline, process.stderr()
            time.sleep(0.2)
        listed = json.loads(keelwave("projects", "list", "--json", *database).stdout)
        [row] = [row for row in listed if row["name"] == project.name]
        assert row["retention_days"] == 30 and row["retention_enforced_at"]
        table = keelwave("projects", "list", *database, env={"COLUMNS": "200"}).stdout
        assert project.name in table and "30 days" in table

        assert (
            keelwave("projects", "set-retention", project.name, "forever", *database).returncode
            == 0
        )
        listed = json.loads(keelwave("projects", "list", "--json", *database).stdout)
        assert [row["retention_days"] for row in listed if row["name"] == project.name] == [None]
        for bad in (("nope", "7"), (project.name, "0"), (project.name, "soon")):
            result = keelwave("projects", "set-retention", *bad, *database)
            assert result.returncode == 1 and "error:" in result.stderr, result
    finally:
        process.stop()
        process.kill()
