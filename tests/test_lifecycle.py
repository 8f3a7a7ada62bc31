"""Stalls, the reaper, and prices: how runs end and what they cost."""

from __future__ import annotations

import asyncio
import json
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path

import aiohttp
import pytest
from conftest import Api, Project, make_settings, query

from keelwave.server.app import create_app
from keelwave.server.ingest.pricing import PriceTable, PriceTableError


@pytest.fixture
async def quick_api(db_url: str, aiohttp_server):
    """A server that calls runs stalled after 1 s of silence and times them out after 2 s."""
    settings = make_settings(stall_after_seconds=1, timeout_after_seconds=2)
    server = await aiohttp_server(create_app(settings, db_url))
    async with aiohttp.ClientSession() as session:
        yield Api(str(server.make_url("")).rstrip("/"), session)


async def run_status(api: Api, project: Project, run_id: str) -> dict:
    status, body, _ = await api.get(
        f"/v1/projects/{project.id}/agent/runs/{run_id}", headers=project.auth()
    )
    assert status == 200, body
    return body["data"]


async def test_silent_runs_stall_then_time_out(quick_api: Api, project: Project, db_url) -> None:
    api = quick_api
    _, body, _ = await api.post(
        "/v1/ingest/agent/runs", json={"agent_name": "sleepy"}, headers=project.auth()
    )
    run_id = body["data"]["id"]
    await api.post(
        "/v1/ingest/agent/steps",
        headers=project.auth(),
        json={"run_id": run_id, "step_index": 1, "tool_name": "wait"},
    )
    assert (await run_status(api, project, run_id))["status"] == "running"

    for _ in range(60):  # stalled after 1 s without activity
        run = await run_status(api, project, run_id)
        if run["status"] != "running":
            break
        await asyncio.sleep(0.1)
    assert run["status"] == "stalled"
    status, body, _ = await api.get(
        f"/v1/projects/{project.id}/agent/runs?status=stalled", headers=project.auth()
    )
    assert [r["id"] for r in body["data"]] == [run_id]
    _, body, _ = await api.get(f"/v1/projects/{project.id}/agent/summary", headers=project.auth())
    assert body["data"]["current"]["stalled_runs"] in (0, 1)  # 0 if already timed out

    for _ in range(100):  # the reaper finishes it with timeout after 2 s
        run = await run_status(api, project, run_id)
        if run["status"] == "finished":
            break
        await asyncio.sleep(0.1)
    assert run["termination_reason"] == "timeout"
    assert run["ended_at"] == run["last_activity_at"]  # it ended when it went silent
    _, body, _ = await api.get(
        f"/v1/projects/{project.id}/agent/runs/terminations", headers=project.auth()
    )
    counts = {row["termination_reason"]: row["count"] for row in body["data"]}
    assert counts["timeout"] == 1 and counts[None] == 0
    [(finished,)] = query(
        db_url,
        "SELECT sum(finished_runs) FROM agent_run_rollups WHERE project_id = %s",
        (project.id,),
    )
    assert finished == 1
    [(timed_out,)] = query(  # and its duration is in the histograms, once
        db_url, "SELECT sum(runs) FROM agent_duration_rollups WHERE project_id = %s", (project.id,)
    )
    assert timed_out == 1


async def test_tool_stats_follow_a_run_through_its_timeout(
    quick_api: Api, project: Project, db_url
) -> None:
    """While a run goes, /tools reads its steps; once timed out, the rollups; late steps adjust."""
    api = quick_api
    started = (datetime.now(UTC) - timedelta(hours=3)).isoformat()  # a whole hour of the window
    _, body, _ = await api.post(
        "/v1/ingest/agent/runs",
        json={"agent_name": "slow", "started_at": started},
        headers=project.auth(),
    )
    run_id = body["data"]["id"]

    def step(index: int, query: str) -> dict:
        return {"run_id": run_id, "step_index": index, "tool_name": "grep",
                "tool_input": {"q": query}, "duration_ms": 10.0 * index}  # fmt: skip

    await api.post(
        "/v1/ingest/agent/steps", json=[step(1, "a"), step(2, "a")], headers=project.auth()
    )

    async def grep() -> dict:
        _, body, _ = await api.get(
            f"/v1/projects/{project.id}/agent/tools?window=24h", headers=project.auth()
        )
        [row] = body["data"]
        return {key: row[key] for key in ("calls", "runs", "repeated_calls", "p50_duration_ms")}

    assert await grep() == {"calls": 2, "runs": 1, "repeated_calls": 1, "p50_duration_ms": 15.0}
    for _ in range(100):  # the reaper times it out after 2 s
        if (await run_status(api, project, run_id))["status"] == "finished":
            break
        await asyncio.sleep(0.1)
    [(calls,)] = query(
        db_url, "SELECT sum(calls) FROM agent_tool_rollups WHERE project_id = %s", (project.id,)
    )
    assert calls == 2  # counted in the rollups now, once
    assert await grep() == {"calls": 2, "runs": 1, "repeated_calls": 1, "p50_duration_ms": 15.0}

    await api.post(
        "/v1/ingest/agent/steps", json=[step(0, "a"), step(3, "b")], headers=project.auth()
    )
    assert await grep() == {"calls": 4, "runs": 1, "repeated_calls": 2, "p50_duration_ms": 15.0}


async def test_activity_keeps_a_run_alive(quick_api: Api, project: Project) -> None:
    api = quick_api
    _, body, _ = await api.post(
        "/v1/ingest/agent/runs", json={"agent_name": "busy"}, headers=project.auth()
    )
    run_id = body["data"]["id"]
    for index in range(1, 12):  # a step every 0.3 s for 3.3 s: never silent for 1 s
        await api.post(
            "/v1/ingest/agent/steps",
            headers=project.auth(),
            json={
                "run_id": run_id,
                "step_index": index,
                "tool_name": "t",
                "tool_input": {"i": index},
            },
        )
        assert (await run_status(api, project, run_id))["status"] == "running"
        await asyncio.sleep(0.3)


async def test_model_calls_are_priced_and_summed_on_the_run(api: Api, project: Project) -> None:
    run_id = str(uuid.uuid4())
    await api.post(
        "/v1/ingest/agent/runs", json={"id": run_id, "agent_name": "a"}, headers=project.auth()
    )
    calls = [
        # gpt-4o-mini: 0.15 in, 0.075 cached, 0.6 out per million
        {
            "run_id": run_id,
            "provider": "openai",
            "model": "gpt-4o-mini-2024-07-18",
            "input_tokens": 1_000_000,
            "cache_read_tokens": 400_000,
            "output_tokens": 100_000,
        },
        {
            "run_id": run_id,
            "provider": "anthropic",
            "model": "claude-sonnet-4-5-20250929",
            "input_tokens": 10_000,
            "output_tokens": 2_000,
            "reasoning_tokens": 500,
        },
        {"run_id": run_id, "provider": "acme", "model": "mystery-1", "input_tokens": 5},
        {"run_id": run_id, "provider": "openai", "model": "gpt-4o", "cost_usd": 1.5},
    ]
    status, body, _ = await api.post("/v1/ingest/ai", json=calls, headers=project.auth())
    assert status == 200
    _, body, _ = await api.get(
        f"/v1/projects/{project.id}/agent/runs/{run_id}/llm", headers=project.auth()
    )
    costs = {call["model"]: call["cost_usd"] for call in body["data"]}
    assert costs["gpt-4o-mini-2024-07-18"] == pytest.approx(0.6 * 0.15 + 0.4 * 0.075 + 0.1 * 0.6)
    assert costs["claude-sonnet-4-5-20250929"] == pytest.approx(0.01 * 3 + 0.002 * 15)
    assert costs["mystery-1"] is None  # unknown models are not guessed
    assert costs["gpt-4o"] == 1.5  # what the client says wins
    run = await run_status(api, project, run_id)
    assert run["llm_calls"] == 4
    assert run["cost_usd"] == pytest.approx(sum(c for c in costs.values() if c))
    assert run["input_tokens"] == 1_010_005


def test_price_file_extends_and_overrides(tmp_path: Path) -> None:
    path = tmp_path / "prices.json"
    path.write_text(
        json.dumps(
            {
                "models": {
                    "gpt-4o": {"input": 1, "output": 2},
                    "my-model": {"input": 10, "output": 20, "cached_input": 1, "reasoning": 40},
                }
            }
        )
    )
    table = PriceTable.load(path)
    assert table.cost("gpt-4o", 1_000_000, 1_000_000) == 3
    assert table.cost("my-model-v2", 1_000_000, 1_000_000, 500_000, 250_000) == pytest.approx(
        0.5 * 10 + 0.5 * 1 + 20 + 0.25 * 20
    )
    assert table.cost("gpt-4o-mini", 1_000_000, 0) == pytest.approx(0.15)  # still shipped
    path.write_text('{"models": {"x": {"input": "cheap"}}}')
    with pytest.raises(PriceTableError, match="'input' and 'output'"):
        PriceTable.load(path)


async def test_finishes_arriving_together_commit_together(api: Api, project: Project, db_url):
    """Group commit of finishes: many at once go in a few transactions (each one's
    UPDATE leaves its transaction id on the run), and each is answered as if alone."""
    runs = []
    for n in range(40):
        _, body, _ = await api.post("/v1/ingest/agent/runs", headers=project.auth(),
                                    json={"agent_name": "batch", "input": {"n": n}})  # fmt: skip
        runs.append(body["data"]["id"])
    missing = str(uuid.uuid4())
    answers = await asyncio.gather(
        *(
            api.post(f"/v1/ingest/agent/runs/{run_id}/finish", headers=project.auth(),
                     json={"termination_reason": "error" if n % 4 == 0 else "clean"})
            for n, run_id in enumerate([*runs, missing])
        )
    )  # fmt: skip
    assert [status for status, _, _ in answers] == [200] * 40 + [404]
    (transactions, finished), = query(
        db_url, "SELECT count(DISTINCT xmin::text), count(*) FILTER (WHERE ended_at IS NOT NULL) "
        "FROM agent_runs WHERE project_id = %s", (project.id,))  # fmt: skip
    assert finished == 40
    assert transactions < 40
    (finished_runs, error_runs), = query(
        db_url, "SELECT sum(finished_runs), sum(error_runs) FROM agent_run_rollups "
        "WHERE project_id = %s", (project.id,))  # fmt: skip
    assert (finished_runs, error_runs) == (40, 10)


async def test_a_refused_finish_fails_alone(api: Api, project: Project, db_url) -> None:
    """A finish the database refuses, committed with others, fails only itself."""
    from psycopg_pool import AsyncConnectionPool

    from keelwave.server.store.lifecycle import Finish, finish_runs

    runs = []
    for _ in range(3):
        _, body, _ = await api.post("/v1/ingest/agent/runs", headers=project.auth(),
                                    json={"agent_name": "refused"})  # fmt: skip
        runs.append(uuid.UUID(body["data"]["id"]))
    now = datetime.now(UTC)
    async with AsyncConnectionPool(db_url, kwargs={"autocommit": True}) as pool:
        answers = await asyncio.gather(
            *(
                finish_runs(pool, project.id, [(run_id, Finish("clean", now,
                            output='{"broken' if n == 1 else '{"ok": 1}'))])
                for n, run_id in enumerate(runs)
            ),
            return_exceptions=True,
        )  # fmt: skip
    assert answers[0] == [] and answers[2] == []
    assert "json" in str(answers[1]).lower()
    rows = dict(query(db_url, "SELECT id, termination_reason FROM agent_runs WHERE project_id = %s",
                      (project.id,)))  # fmt: skip
    assert rows == {runs[0]: "clean", runs[1]: None, runs[2]: "clean"}
