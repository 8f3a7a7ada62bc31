"""The distributed profile on a real Citus cluster: schema, write path, dedup, routing.

Runs when KEELWAVE_TEST_CITUS_URL names a Citus coordinator with workers
(citus_cluster.py); skipped, saying so, otherwise. Every test has a database
of its own on every node, and real ``keelwave serve`` subprocesses.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Iterator
from pathlib import Path

import aiohttp
import otlp_exports
import psycopg
import pytest
from citus_cluster import (
    citus_database,
    keys_mismatch,
    requires_citus,
    url_of,
    worker_url,
    workers,
)
from serve_process import ServeProcess

from keelwave.db import keys as key_store
from keelwave.db import migrate
from keelwave.server.store.citus import statements as citus_statements
from keelwave.server.store.statements import BEGIN

pytestmark = requires_citus

DISTRIBUTED = {
    "agent_runs", "agent_steps", "ai_traces", "agent_run_rollups", "agent_duration_rollups",
    "agent_tool_rollups", "otlp_spans", "otlp_runs", "kw_run_locks",
    "agent_duration_rollups_daily", "agent_tool_rollups_daily", "agent_run_rollups_daily",
    "project_duration_rollups", "project_duration_rollups_daily",
    "agent_duration_rollups_weekly", "agent_tool_rollups_weekly",
}  # fmt: skip
REFERENCE = {"projects", "api_keys", "alert_rules", "alert_events", "retention_sweeps"}


def distribution(url: str) -> dict[str, str]:
    """Each Citus table of the database and its kind: 'h' distributed, 'n' reference."""
    with psycopg.connect(url) as conn:
        rows = conn.execute(
            "SELECT logicalrelid::text, partmethod FROM pg_dist_partition"
        ).fetchall()
    return dict(rows)


@pytest.fixture(scope="module")
def citus_url() -> Iterator[str]:
    """One migrated database for the module (making one takes a while on Citus); each
    test has a project of its own."""
    with citus_database() as url:
        migrate.upgrade(url)
        yield url


@pytest.fixture
def empty_citus_url() -> Iterator[str]:
    with citus_database() as url:
        yield url


@pytest.fixture
def key(citus_url: str) -> key_store.CreatedKey:
    with psycopg.connect(citus_url, autocommit=True) as conn:
        return key_store.create_key(conn, f"citus-{uuid.uuid4().hex[:8]}", "all")


@pytest.fixture
def serve(citus_url: str, tmp_path: Path) -> Iterator[ServeProcess]:
    process = ServeProcess("--database-url", citus_url, log=tmp_path / "serve.log")
    yield process
    process.stop()
    process.kill()


class Client:
    """HTTP to one server with one project's key."""

    def __init__(self, session: aiohttp.ClientSession, url: str, key: key_store.CreatedKey):
        self.session, self.url, self.key = session, url, key

    async def post(self, path: str, body: object) -> tuple[int, dict]:
        headers = {"Authorization": f"Bearer {self.key.key}"}
        async with self.session.post(self.url + path, json=body, headers=headers) as response:
            return response.status, await response.json(content_type=None)

    async def get(self, path: str) -> tuple[int, dict]:
        headers = {"Authorization": f"Bearer {self.key.key}"}
        async with self.session.get(self.url + path, headers=headers) as response:
            return response.status, await response.json(content_type=None)


def steps_of(run_id: str, indices: range, tool: str = "search") -> list[dict]:
    return [
        {"run_id": run_id, "step_index": i, "step_type": "tool_call", "tool_name": tool,
         "tool_input": {"q": i % 3}, "duration_ms": 10.0 + i}
        for i in indices
    ]  # fmt: skip


def stored(url: str, sql: str, params: tuple = ()) -> list[tuple]:
    with psycopg.connect(url) as conn:
        return conn.execute(sql, params).fetchall()


def test_migrations_distribute_the_schema_and_walk_back(empty_citus_url: str) -> None:
    citus_url = empty_citus_url
    migrate.upgrade(citus_url)
    kinds = distribution(citus_url)
    assert {table for table, kind in kinds.items() if kind == "h"} >= DISTRIBUTED
    assert {table for table, kind in kinds.items() if kind == "n"} >= REFERENCE
    with psycopg.connect(citus_url) as conn:
        groups = conn.execute(
            "SELECT count(DISTINCT colocationid) FROM pg_dist_partition WHERE partmethod = 'h'"
        ).fetchone()
    assert groups == (1,)  # every distributed table co-located with agent_runs
    migrate.downgrade(citus_url, "0012")
    assert distribution(citus_url) == {}
    migrate.upgrade(citus_url)
    assert distribution(citus_url).keys() >= DISTRIBUTED | REFERENCE
    migrate.downgrade(citus_url, "base")
    assert stored(citus_url, "SELECT tablename FROM pg_tables WHERE schemaname = 'public'") == [
        ("alembic_version",)
    ] or stored(citus_url, "SELECT count(*) FROM pg_tables WHERE schemaname = 'public'") == [(0,)]


async def test_ingest_and_query_through_the_server(
    serve: ServeProcess, key: key_store.CreatedKey, citus_url: str
) -> None:
    async with aiohttp.ClientSession() as session:
        api = Client(session, serve.url, key)
        status, body = await api.post("/v1/ingest/agent/runs", {"agent_name": "researcher"})
        assert status == 201, body
        run = body["data"]["id"]
        # 40 steps go by COPY, the model call as VALUES; the same tool input every third step.
        assert (await api.post("/v1/ingest/agent/steps", steps_of(run, range(1, 41))))[0] == 200
        call = {"run_id": run, "provider": "openai", "model": "gpt-4o", "input_tokens": 120,
                "output_tokens": 30, "cost_usd": 0.01}  # fmt: skip
        assert (await api.post("/v1/ingest/ai", [call]))[0] == 200
        status, body = await api.post(
            f"/v1/ingest/agent/runs/{run}/finish", {"termination_reason": "clean"}
        )
        assert status == 200, body
        # A late step: its run's tool rollups, hourly and daily, swap its share.
        assert (await api.post("/v1/ingest/agent/steps", steps_of(run, range(41, 42))))[0] == 200
        project = key.project_id
        status, loops = await api.get(f"/v1/projects/{project}/agent/runs/{run}/loops")
        assert status == 200
        assert sorted(group["hits"] for group in loops["data"]) == [13, 14, 14]
        status, summary = await api.get(f"/v1/projects/{project}/agent/summary?window=24h")
        assert status == 200, summary
        status, runs = await api.get(f"/v1/projects/{project}/agent/runs")
        assert status == 200 and [r["id"] for r in runs["data"]] == [run]
    [row] = stored(
        citus_url,
        "SELECT step_count, llm_calls, input_tokens, termination_reason FROM agent_runs "
        "WHERE project_id = %s AND id = %s",
        (project, run),
    )
    assert row == (41, 1, 120, "clean")
    [rollup] = stored(
        citus_url,
        "SELECT sum(runs), sum(finished_runs), sum(steps), sum(llm_calls) FROM agent_run_rollups "
        "WHERE project_id = %s",
        (project,),
    )
    assert rollup == (1, 1, 41, 1)
    [daily] = stored(
        citus_url,
        "SELECT sum(runs), sum(finished_runs), sum(steps), sum(llm_calls) "
        "FROM agent_run_rollups_daily WHERE project_id = %s",
        (project,),
    )
    assert daily == rollup
    # The finished run's duration, in the agent's histograms and the project's, by hour
    # and by day.
    durations = ("agent_duration_rollups", "agent_duration_rollups_daily",
                 "project_duration_rollups", "project_duration_rollups_daily")  # fmt: skip
    counted = stored(
        citus_url,
        " UNION ALL ".join(
            f"SELECT sum(runs) FROM {t} WHERE project_id = %(p)s" for t in durations
        ),
        {"p": project},
    )
    assert counted == [(1,)] * len(durations)
    [(calls,)] = stored(
        citus_url, "SELECT sum(calls) FROM agent_tool_rollups WHERE project_id = %s", (project,)
    )
    assert calls == 41
    [(daily_calls,)] = stored(
        citus_url, "SELECT sum(calls) FROM agent_tool_rollups_daily WHERE project_id = %s",
        (project,),
    )  # fmt: skip
    assert daily_calls == 41
    # Nothing is left behind in the shared staging tables.
    for stage in ("kw_stage_runs", "kw_stage_steps", "kw_stage_traces", "kw_stage_rollups"):
        assert stored(citus_url, f"SELECT count(*) FROM {stage}") == [(0,)]


async def test_a_batch_replayed_twice_is_stored_once(
    serve: ServeProcess, key: key_store.CreatedKey, citus_url: str
) -> None:
    async with aiohttp.ClientSession() as session:
        api = Client(session, serve.url, key)
        run = str(uuid.uuid4())
        batch = steps_of(run, range(1, 101))
        # Steps before their run; the same batch again; then the run.
        assert (await api.post("/v1/ingest/agent/steps", batch))[0] == 200
        assert (await api.post("/v1/ingest/agent/steps", batch))[0] == 200
        status, _ = await api.post("/v1/ingest/agent/runs", {"id": run, "agent_name": "a"})
        assert status == 201
        assert (await api.post("/v1/ingest/agent/runs", {"id": run, "agent_name": "a"}))[0] == 201
        # A retry of part of it, mixed with its neighbours' in one flush.
        answers = await asyncio.gather(
            *(api.post("/v1/ingest/agent/steps", batch[i : i + 10]) for i in range(0, 100, 10))
        )
        assert {status for status, _ in answers} == {200}
    project = key.project_id
    assert stored(
        citus_url,
        "SELECT count(*), count(DISTINCT step_index) FROM agent_steps "
        "WHERE project_id = %s AND run_id = %s",
        (project, run),
    ) == [(100, 100)]
    assert stored(
        citus_url,
        "SELECT count(*), sum(step_count) FROM agent_runs WHERE project_id = %s",
        (project,),
    ) == [(1, 100)]
    assert stored(
        citus_url, "SELECT sum(runs), sum(steps) FROM agent_run_rollups WHERE project_id = %s",
        (project,),
    ) == [(1, 100)]  # fmt: skip


async def test_writers_through_the_coordinator_and_a_worker_store_each_step_once(
    citus_url: str, key: key_store.CreatedKey, tmp_path: Path
) -> None:
    """Two servers, one connected to the coordinator and one to a worker, get the same
    fresh steps at the same moment, round after round: the row locks on the project's
    shard serialise them whichever node they came through."""
    name = citus_url.rpartition("/")[2]
    through_worker = worker_url(name, workers()[0])
    first = ServeProcess("--database-url", citus_url, log=tmp_path / "coordinator.log")
    processes = [first]
    run = str(uuid.uuid4())
    try:
        second = ServeProcess("--database-url", through_worker, log=tmp_path / "worker.log")
        processes.append(second)
        async with aiohttp.ClientSession() as session:
            apis = [Client(session, first.url, key), Client(session, second.url, key)]
            await apis[0].post("/v1/ingest/agent/runs", {"id": run, "agent_name": "a"})
            for round_ in range(20):
                batch = steps_of(run, range(round_ * 10 + 1, round_ * 10 + 11))
                answers = await asyncio.gather(
                    *(api.post("/v1/ingest/agent/steps", batch) for api in apis)
                )
                assert [status for status, _ in answers] == [200, 200], answers
    finally:
        for process in processes:
            process.stop()
            process.kill()
    project = key.project_id
    assert stored(
        citus_url,
        "SELECT count(*), count(DISTINCT step_index) FROM agent_steps "
        "WHERE project_id = %s AND run_id = %s",
        (project, run),
    ) == [(200, 200)]
    assert stored(
        citus_url, "SELECT step_count FROM agent_runs WHERE project_id = %s AND id = %s",
        (project, run),
    ) == [(200,)]  # fmt: skip


@pytest.fixture(params=["coordinator", "worker"])
def serve_on_a_node(request, citus_url: str, tmp_path: Path) -> Iterator[ServeProcess]:
    """A server connected to the coordinator, or to a worker (metadata is synced there)."""
    url = citus_url
    if request.param == "worker":
        url = worker_url(citus_url.rpartition("/")[2], workers()[0])
    process = ServeProcess("--database-url", url, log=tmp_path / "serve.log")
    yield process
    process.stop()
    process.kill()


async def test_every_path_keeps_the_key_tables_exact(
    serve_on_a_node: ServeProcess, key: key_store.CreatedKey, citus_url: str
) -> None:
    """The duplicate checks read kw_step_keys and kw_call_keys (migration 0017), so those
    must hold exactly the stored rows' keys after every path that adds or deletes rows:
    steps and model calls ahead of their run, replays, calls without a run, OTLP
    traces split, repeated and reordered (re-projected export by export), a deletion;
    through the coordinator and through a worker alike."""
    serve = serve_on_a_node
    project = key.project_id
    async with aiohttp.ClientSession() as session:
        api = Client(session, serve.url, key)
        early = str(uuid.uuid4())
        calls = [
            {"id": str(uuid.uuid4()), "run_id": early, "provider": "openai", "model": "gpt-4o",
             "input_tokens": 100 + n, "output_tokens": 7, "cost_usd": 0.001 * n}
            for n in range(3)
        ]  # fmt: skip
        lone = [{"id": str(uuid.uuid4()), "provider": "openai", "model": "gpt-4o"}]
        for _ in range(2):  # everything twice: the second time is a replay
            steps = await api.post("/v1/ingest/agent/steps", steps_of(early, range(1, 31)))
            assert steps[0] == 200
            assert (await api.post("/v1/ingest/ai", calls + lone))[0] == 200
        status, _ = await api.post("/v1/ingest/agent/runs", {"id": early, "agent_name": "a"})
        assert status == 201
        gone = await ingest_one(api, 12)
        for name in otlp_exports.ALL[:3]:
            for export in otlp_exports.split(otlp_exports.document(name), seed=7):
                async with session.post(
                    f"{serve.url}/v1/traces", json=export,
                    headers={"Authorization": f"Bearer {key.key}"},
                ) as response:  # fmt: skip
                    assert response.status == 200, await response.text()
        async with session.delete(
            f"{serve.url}/v1/projects/{project}/agent/runs/{gone}",
            headers={"Authorization": f"Bearer {key.key}"},
        ) as response:
            assert response.status == 200, await response.text()
    # The run that came after its rows counts them, from the keys.
    assert stored(
        citus_url,
        "SELECT step_count, llm_calls, input_tokens, output_tokens FROM agent_runs "
        "WHERE project_id = %s AND id = %s",
        (project, early),
    ) == [(30, 3, 303, 21)]
    # The OTLP traces became runs beside the two native ones.
    assert stored(
        citus_url, "SELECT count(*) > 2 FROM agent_runs WHERE project_id = %s", (project,)
    ) == [(True,)]
    assert keys_mismatch(citus_url) == (0, 0, 0, 0)
    assert stored(
        citus_url, "SELECT count(*) FROM kw_step_keys WHERE project_id = %s AND run_id = %s",
        (project, gone),
    ) == [(0,)]  # fmt: skip


async def ingest_one(api: Client, steps: int) -> str:
    status, body = await api.post("/v1/ingest/agent/runs", {"agent_name": "b"})
    assert status == 201, body
    run = body["data"]["id"]
    assert (await api.post("/v1/ingest/agent/steps", steps_of(run, range(1, steps + 1))))[0] == 200
    return run


def test_a_one_project_batch_is_planned_as_single_shard_tasks(citus_url: str) -> None:
    """EXPLAIN of every statement of a project's write: one task, on one shard, and
    never through the coordinator (no pull to coordinator, no repartition)."""
    project = uuid.uuid4()
    stages = ["kw_stage_runs", "kw_stage_steps", "kw_stage_traces"]
    sqls = [
        citus_statements.lock_runs(project, {1, 2, 3}),
        citus_statements.lock_run_rows(project, {1, 2, 3}),
    ]
    sqls += citus_statements.move_in(project, stages)
    unrouted = []
    with psycopg.connect(citus_url) as conn:
        conn.execute(BEGIN)
        for sql in sqls:
            plan = "\n".join(row[0] for row in conn.execute(f"EXPLAIN {sql}").fetchall())
            if (
                "Task Count: 1\n" not in plan + "\n"
                or "coordinator" in plan
                or "repartition" in plan
            ):
                unrouted.append(f"{sql}\n{plan}")
        conn.rollback()
    assert not unrouted, "\n\n".join(unrouted)


def test_urls_of_nodes() -> None:
    assert url_of("postgresql://u@h:1/db", "x", "w", 2) == "postgresql://u@w:2/x"
