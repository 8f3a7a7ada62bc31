"""`keelwave projects recount`: a project's counts derived again from its stored rows.

Ingest keeps run counters and rollups as rows arrive; rows loaded another way (COPY,
a partial restore) are counted only by a recount. These tests recount what ingest
counted (nothing changes), what was lost (it comes back exactly), rows written
straight into the tables (the API then shows them, loops included), and a project
receiving steps while it is recounted (nothing counted twice or lost).
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import time
import uuid
from datetime import timedelta
from pathlib import Path

import psycopg
import pytest
from conftest import Api, Project, query, serving
from lifecycle_data import NOW, aggregates, dataset, judged, rollups, send
from otlp_exports import document, split
from psycopg_pool import AsyncConnectionPool
from serve_process import ServeProcess, keelwave

from keelwave.server.store import uncounted

WINDOW = (NOW - timedelta(days=2), NOW + timedelta(hours=1))
COUNTERS = "step_count, llm_calls, input_tokens, output_tokens, round(cost_usd::numeric, 6)"


def recount(db_url: str, project: Project) -> dict:
    done = keelwave("projects", "recount", project.name, "--json", "--database-url", db_url)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


async def recounted(db_url: str, project: Project) -> dict:
    """:func:`recount` in a thread: the test's server shares this event loop, and a
    transaction of its that the recount waits for must be able to finish."""
    return await asyncio.to_thread(recount, db_url, project)


async def executed(db_url: str, *statements: str) -> None:
    """DDL on the tables the test's server writes, in a thread: it waits for the
    server's transactions that hold their locks (the tool calls folded in every
    second, a verdict's rollups), which need this event loop to finish. Run here,
    the wait would stop the loop and never end."""

    def run() -> None:
        with psycopg.connect(db_url, autocommit=True) as conn:
            for statement in statements:
                conn.execute(statement)

    await asyncio.to_thread(run)


def run_counters(db_url: str, project: Project) -> list[tuple]:
    return query(
        db_url,
        f"SELECT id, {COUNTERS}, duration_ms FROM agent_runs WHERE project_id = %s ORDER BY id",
        (project.id,),
    )


async def costs_in_two_requests(api: Api, project: Project, *requests: tuple) -> None:
    """A run whose model calls arrive in several requests, with these costs."""
    auth = project.auth("ingest")
    _, started, _ = await api.post(
        "/v1/ingest/agent/runs", json={"agent_name": "priced"}, headers=auth
    )
    run_id = started["data"]["id"]
    for costs in requests:
        calls = [{"run_id": run_id, "provider": "openai", "model": "gpt-4o", "input_tokens": 10,
                  "output_tokens": 1, "cost_usd": cost} for cost in costs]  # fmt: skip
        status, body, _ = await api.post("/v1/ingest/ai", json=calls, headers=auth)
        assert status == 200, body


async def test_a_recount_changes_nothing_ingest_counted_and_restores_what_was_lost(
    api: Api, project: Project, db_url: str
) -> None:
    await send(api, project, dataset(seed=11, count=24))
    await costs_in_two_requests(api, project, (0.7,), (0.1, 0.2))
    await judged(db_url, project.id)
    counted = rollups(db_url, project.id)
    answers = await aggregates(api, project, *WINDOW)
    counters = run_counters(db_url, project)

    result = await recounted(db_url, project)
    # (the run's cost, 0.7 + (0.1 + 0.2) as it arrived, is 0.7 + 0.1 + 0.2 summed again
    # in another order: equal but for the last bit, not a wrong count)
    assert result["runs"] == 25 and result["runs_corrected"] == 0
    assert rollups(db_url, project.id) == counted
    assert run_counters(db_url, project) == counters

    # Lost: every rollup row of the project, and every run's counters.
    with psycopg.connect(db_url, autocommit=True) as conn:
        for table in ("agent_run_rollups", "agent_duration_rollups", "agent_tool_rollups",
                      "agent_duration_rollups_daily", "agent_tool_rollups_daily",
                      "agent_duration_rollups_weekly", "agent_tool_rollups_weekly"):  # fmt: skip
            conn.execute(f"DELETE FROM {table} WHERE project_id = %s", (project.id,))
        conn.execute(
            "UPDATE agent_runs SET step_count = 0, llm_calls = 0, input_tokens = 0, "
            "output_tokens = 0, cost_usd = 0 WHERE project_id = %s",
            (project.id,),
        )
    lost = await aggregates(api, project, *WINDOW)
    assert lost["/summary"] != answers["/summary"]

    result = await recounted(db_url, project)
    assert result["runs_corrected"] == sum(1 for row in counters if any(row[1:6]))
    assert result["runs"] == 25
    await judged(db_url, project.id)  # runs whose step count changed are judged again
    assert run_counters(db_url, project) == counters
    assert rollups(db_url, project.id) == counted
    assert await aggregates(api, project, *WINDOW) == answers


async def test_runs_written_straight_into_the_tables_show_after_a_recount(
    api: Api, project: Project, db_url: str
) -> None:
    """A bulk load with COPY writes runs, steps and model calls and nothing else."""
    runs = [uuid.uuid4() for _ in range(5)]
    started = NOW - timedelta(hours=3)
    with psycopg.connect(db_url, autocommit=True) as conn:
        with conn.cursor().copy(
            "COPY agent_runs (project_id, id, agent_name, started_at, ended_at, "
            "termination_reason) FROM STDIN"
        ) as copy:
            for n, run in enumerate(runs):
                ended = started + timedelta(seconds=30 + n)
                copy.write_row((project.id, run, "loader", started, ended, "clean"))
        with conn.cursor().copy(
            "COPY agent_steps (project_id, run_id, step_index, step_type, tool_name, tool_input, "
            "input_fingerprint, started_at, duration_ms) FROM STDIN"
        ) as copy:
            for n, run in enumerate(runs):
                for index in range(1, 7):
                    # the first run asks the same thing six times: a loop
                    given = json.dumps({"city": "Oslo" if n == 0 else f"city {index}"})
                    print_ = hashlib.sha256(b"weather\x00" + given.encode()).digest()
                    copy.write_row((project.id, run, index, "tool_call", "weather", given,
                                    print_, started + timedelta(seconds=index), 12.5))  # fmt: skip
        with conn.cursor().copy(
            "COPY ai_traces (id, project_id, run_id, provider, model, input_tokens, "
            "output_tokens, cost_usd, started_at) FROM STDIN"
        ) as copy:
            for run in runs:
                copy.write_row((uuid.uuid4(), project.id, run, "openai", "gpt-4o", 1000, 100,
                                0.25, started))  # fmt: skip

    before = await aggregates(api, project, *WINDOW)
    assert before["/summary"]["data"]["current"]["runs"] == 0
    assert project.name in await uncounted_projects(db_url)

    result = await recounted(db_url, project)
    assert project.name not in await uncounted_projects(db_url)
    assert result == {"id": project.id, "name": project.name, "runs": 5, "runs_corrected": 5,
                      "rollup_rows": result["rollup_rows"]}  # fmt: skip
    await judged(db_url, project.id)
    after = await aggregates(api, project, *WINDOW)
    summary = after["/summary"]["data"]["current"]
    assert (summary["runs"], summary["finished_runs"], summary["avg_steps"]) == (5, 5, 6)
    assert (summary["llm_calls"], summary["input_tokens"]) == (5, 5000)
    assert round(summary["cost_usd"], 6) == 1.25
    assert summary["findings"]["exact_loop"] == 1
    tools = after["/tools"]["data"]
    assert [(tool["tool_name"], tool["calls"]) for tool in tools] == [("weather", 30)]
    status, body, _ = await api.get(
        f"/v1/projects/{project.id}/agent/runs/{runs[0]}/findings", headers=project.auth("read")
    )
    assert status == 200 and "exact_loop" in {f["kind"] for f in body["data"]}


async def uncounted_projects(db_url: str) -> list[str]:
    async with AsyncConnectionPool(db_url, kwargs={"autocommit": True}, open=False) as pool:
        return await uncounted.uncounted_projects(pool)


def test_a_server_says_which_projects_hold_runs_no_rollup_counts(
    db_url: str, tmp_path: Path
) -> None:
    """Runs loaded with COPY into a fresh database: the server's log names the project
    and the command that counts it, soon after it starts."""
    with psycopg.connect(db_url, autocommit=True) as conn:
        project_id = conn.execute(
            "INSERT INTO projects (name) VALUES ('bulk-loaded') RETURNING id"
        ).fetchone()[0]
        with conn.cursor().copy(
            "COPY agent_runs (project_id, id, agent_name, started_at) FROM STDIN"
        ) as copy:
            for _ in range(3):
                copy.write_row((project_id, uuid.uuid4(), "loader", NOW))
    server = ServeProcess("--database-url", db_url, log=tmp_path / "serve.log")
    try:
        for _ in range(300):
            if "keelwave projects recount bulk-loaded" in server.stderr():
                break
            time.sleep(0.1)
        said = server.stderr()
        assert "project 'bulk-loaded' has runs that no rollup counts" in said, said
        assert "Traceback" not in said
    finally:
        server.stop()


# Makes each recount dwell a second after it has emptied the project's rollups and
# before it rebuilds them: the moment a write it did not wait for would be lost or
# counted twice.
SLOW_RECOUNT = (
    # (on Citus the trigger goes to every shard, and each statement to every node)
    "SET citus.enable_unsafe_triggers TO on",
    "CREATE FUNCTION kw_test_dwell() RETURNS trigger LANGUAGE plpgsql AS"
    " $$ BEGIN PERFORM pg_sleep(1); RETURN NULL; END $$",
    "CREATE TRIGGER kw_test_dwell AFTER DELETE ON agent_tool_rollups_daily"
    " FOR EACH STATEMENT EXECUTE FUNCTION kw_test_dwell()",
)


async def test_steps_that_arrive_during_a_recount_are_counted_once(
    api: Api, project: Project, db_url: str
) -> None:
    runs = dataset(seed=5, count=20)
    await send(api, project, runs[:8])
    await executed(db_url, *SLOW_RECOUNT)
    try:
        for part in (runs[8:14], runs[14:]):  # sent while a recount dwells, twice
            recounting = asyncio.create_task(recounted(db_url, project))
            await asyncio.sleep(1.2)  # (the command starts, empties the rollups, dwells)
            await send(api, project, part)
            await recounting
    finally:
        await executed(db_url, "DROP FUNCTION kw_test_dwell CASCADE")
    await judged(db_url, project.id)
    counted = rollups(db_url, project.id)
    counters = run_counters(db_url, project)
    # Counted as they arrived, whatever the recounts did meanwhile: a recount now
    # finds nothing to correct and rebuilds the same rows.
    result = await recounted(db_url, project)
    assert result["runs"] == 20 and result["runs_corrected"] == 0
    assert run_counters(db_url, project) == counters
    assert rollups(db_url, project.id) == counted


@pytest.fixture
async def big_bodies_api(db_url: str, aiohttp_server):
    """A real server that takes the captured OpenTelemetry traces (up to 1 MiB)."""
    async with serving(db_url, aiohttp_server, 1024 * 1024) as running:
        yield running


async def test_a_recount_of_runs_sent_as_opentelemetry_spans_changes_nothing(
    big_bodies_api: Api, project: Project, db_url: str
) -> None:
    """OTLP runs are counted by the store of spans, not the native writer: the recount
    finds the same counts (loops, nesting, errors, tokens and cost included)."""
    names = ("openaiagents_loop", "langgraph_nested", "pydanticai_tool_error",
             "crewai_max_iter", "strands_loop")  # fmt: skip
    for name in names:
        for export in split(document(name), seed=len(name)):  # several exports, shuffled
            async with big_bodies_api.session.post(
                big_bodies_api.url + "/v1/traces",
                json=export,
                headers=project.auth("ingest"),
            ) as response:
                assert response.status == 200, await response.text()
    await judged(db_url, project.id)
    counted = counting(rollups(db_url, project.id))
    counters = run_counters(db_url, project)
    assert len(counters) >= len(names)
    result = await recounted(db_url, project)
    assert result["runs_corrected"] == 0
    assert run_counters(db_url, project) == counters
    assert counting(rollups(db_url, project.id)) == counted


def counting(tables: dict[str, list[dict]]) -> dict[str, list[dict]]:
    """Rollup rows without those that count nothing: an OTLP run counted under its
    service's name until its agent span names it leaves a row of zeros behind, which
    readers add as nothing and a recount does not make."""
    keys = ("bucket", "day", "agent_name", "tool_name", "duration_bin")
    return {
        table: [row for row in rows if any(v for k, v in row.items() if k not in keys)]
        for table, rows in tables.items()
    }


def test_recounting_a_project_that_does_not_exist_says_so(db_url: str) -> None:
    done = keelwave("projects", "recount", "no-such-project", "--database-url", db_url)
    assert done.returncode == 1
    assert "no project named 'no-such-project'" in done.stderr
    assert "Traceback" not in done.stderr


async def test_every_project_is_recounted_with_all(api: Api, project: Project, db_url: str) -> None:
    await send(api, project, dataset(seed=2, count=6))
    with psycopg.connect(db_url, autocommit=True) as conn:
        conn.execute("DELETE FROM agent_run_rollups WHERE project_id = %s", (project.id,))
    done = await asyncio.to_thread(
        keelwave, "projects", "recount", "--all", "--json", "--database-url", db_url
    )
    assert done.returncode == 0, done.stderr
    results = {result["name"]: result for result in json.loads(done.stdout)}
    assert results[project.name]["runs"] == 6
    status, body, _ = await api.get(
        f"/v1/projects/{project.id}/agent/summary",
        params={"since": WINDOW[0].isoformat(), "until": WINDOW[1].isoformat()},
        headers=project.auth("read"),
    )
    assert status == 200 and body["data"]["current"]["runs"] == 6


def test_recount_needs_a_project_or_all(db_url: str) -> None:
    for args in ((), ("some-project", "--all")):
        done = keelwave("projects", "recount", *args, "--database-url", db_url)
        assert done.returncode == 1
        assert "name one project to recount, or give --all" in done.stderr
