"""keelwave behind a real PgBouncer, in transaction and in session pooling mode.

In transaction mode each transaction may run on another server session, so
nothing may be kept in one: the writer must not rely on prepared statements,
temp tables or SETs surviving. Under concurrent ingest, finishes and queries,
everything acknowledged must be stored exactly once, and nothing refused.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from urllib.parse import urlsplit

import aiohttp
import pgbouncer
import pytest
from conftest import make_project, make_settings, query

from keelwave.server.app import create_app
from keelwave.server.store.pooling import sessions_are_pinned

pytestmark = pytest.mark.skipif(
    not pgbouncer.available(), reason="PgBouncer is not installed (Debian: apt install pgbouncer)"
)

CLIENTS = 6
RUNS_PER_CLIENT = 8
STEPS_PER_RUN = 30


@pytest.fixture(params=["transaction", "session"])
def bouncer(request, db_url: str):
    mode = request.param
    # Session mode needs a server session per client connection (lanes, pool,
    # listener, probe); transaction mode shares three among all of them.
    bouncer = pgbouncer.PgBouncer(db_url, mode, pool_size=3 if mode == "transaction" else 24)
    yield mode, bouncer.url(urlsplit(db_url).path.lstrip("/"))
    bouncer.stop()


async def test_the_probe_tells_transaction_pooling_apart(bouncer, db_url: str) -> None:
    mode, url = bouncer
    assert await sessions_are_pinned(url) == (mode == "session")
    assert await sessions_are_pinned(db_url)


async def _client(session: aiohttp.ClientSession, url: str, auth: dict, number: int) -> dict:
    """One agent process's worth of traffic; returns what the server acknowledged."""
    acknowledged = {"runs": 0, "steps": 0, "calls": 0, "finished": 0}

    async def post(path: str, body: object) -> dict:
        for _ in range(20):  # what the SDK does: retry 503s
            async with session.post(url + path, json=body, headers=auth) as response:
                answer = await response.json()
                if response.status == 503:
                    await asyncio.sleep(0.2)
                    continue
                assert response.status < 300, (path, response.status, answer)
                return answer
        raise AssertionError(f"{path} refused 20 times")

    run_ids = [str(uuid.uuid4()) for _ in range(RUNS_PER_CLIENT)]
    await post("/v1/ingest/agent/runs", [{"id": r, "agent_name": f"a{number}"} for r in run_ids])
    acknowledged["runs"] += len(run_ids)
    for run_id in run_ids:
        for first in range(1, STEPS_PER_RUN + 1, 10):
            steps = [
                {"run_id": run_id, "step_index": i, "tool_name": "search",
                 "tool_input": {"q": f"it's \\ {i % 4}"}, "duration_ms": 3}
                for i in range(first, first + 10)
            ]  # fmt: skip
            await post("/v1/ingest/agent/steps", steps)
            acknowledged["steps"] += len(steps)
        await post(
            "/v1/ingest/ai",
            {"id": str(uuid.uuid4()), "run_id": run_id, "provider": "openai", "model": "gpt-4o",
             "input_tokens": 100, "output_tokens": 10},
        )  # fmt: skip
        acknowledged["calls"] += 1
        answer = await post(
            f"/v1/ingest/agent/runs/{run_id}/finish", {"termination_reason": "clean"}
        )
        assert answer["data"]["termination_reason"] == "clean"
        acknowledged["finished"] += 1
    return acknowledged


async def test_ingest_finishes_and_queries_under_load(
    bouncer, db_url: str, aiohttp_server, caplog
) -> None:
    mode, url = bouncer
    caplog.set_level(logging.WARNING, logger="keelwave.pooling")
    server = await aiohttp_server(create_app(make_settings(), url))  # database_pooling=auto
    project = make_project(db_url)
    base = str(server.make_url("")).rstrip("/")
    async with aiohttp.ClientSession() as session:
        totals = await asyncio.gather(
            *(_client(session, base, project.auth("ingest"), n) for n in range(CLIENTS))
        )
        for path in (
            "/runs?limit=5",
            "/runs?tag=a&tag=b",
            "/summary?window=1h",
            "/health",
            "/tools",
        ):
            async with session.get(
                f"{base}/v1/projects/{project.id}/agent{path}", headers=project.auth("read")
            ) as response:
                assert response.status == 200, await response.text()
    assert ("transaction mode" in caplog.text) == (mode == "transaction")
    expected = {key: sum(total[key] for total in totals) for key in totals[0]}
    [(runs, finished, step_count, llm_calls)] = query(
        db_url,
        "SELECT count(*), count(ended_at), sum(step_count), sum(llm_calls) FROM agent_runs "
        "WHERE project_id = %s",
        (project.id,),
    )
    [(steps, distinct)] = query(
        db_url,
        "SELECT count(*), count(DISTINCT (run_id, step_index)) FROM agent_steps "
        "WHERE project_id = %s",
        (project.id,),
    )
    [(calls,)] = query(
        db_url, "SELECT count(*) FROM ai_traces WHERE project_id = %s", (project.id,)
    )
    [(rolled_runs, rolled_finished)] = query(
        db_url,
        "SELECT sum(runs), sum(finished_runs) FROM agent_run_rollups WHERE project_id = %s",
        (project.id,),
    )
    assert (runs, finished, rolled_runs, rolled_finished) == (expected["runs"],) * 2 + (
        expected["runs"],
        expected["finished"],
    )
    assert steps == distinct == step_count == expected["steps"]
    assert calls == llm_calls == expected["calls"]
