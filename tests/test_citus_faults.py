"""The distributed profile under faults: a worker killed mid-ingest, a rebalance under load.

Runs on a real Citus cluster (KEELWAVE_TEST_CITUS_URL, citus_cluster.py). Stopping
a worker needs Debian's pg_ctlcluster (the clusters of docs/scale-out.md); adding
a worker needs a spare node, KEELWAVE_TEST_CITUS_SPARE_NODE=host:port, running
Citus and not yet in the cluster. Without them those tests are skipped, saying why.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path

import aiohttp
import psycopg
import pytest
from citus_cluster import add_worker, citus_database, requires_citus, url_of, workers
from serve_process import ServeProcess

from keelwave.db import keys as key_store
from keelwave.db import migrate

pytestmark = requires_citus

# It stops a worker and adds one: no other test may use the cluster meanwhile (conftest.py).
DISTURBS_THE_CLUSTER = True
SPARE_NODE = os.environ.get("KEELWAVE_TEST_CITUS_SPARE_NODE")


def batch_of(run: str, number: int, size: int = 10) -> list[dict]:
    return [
        {"run_id": run, "step_index": i, "step_type": "tool_call", "tool_name": "fetch",
         "tool_input": {"page": i}}
        for i in range(number * size + 1, number * size + size + 1)
    ]  # fmt: skip


async def post(session: aiohttp.ClientSession, url: str, key: str, path: str, body) -> tuple:
    headers = {"Authorization": f"Bearer {key}"}
    async with session.post(url + path, json=body, headers=headers) as response:
        return response.status, dict(response.headers)


def stored_indices(url: str, project: str, run: str) -> list[int]:
    with psycopg.connect(url) as conn:
        rows = conn.execute(
            "SELECT step_index FROM agent_steps WHERE project_id = %s AND run_id = %s",
            (project, run),
        ).fetchall()
    return [index for (index,) in rows]


@pytest.fixture
def citus_url() -> Iterator[str]:
    with citus_database() as url:
        migrate.upgrade(url)
        yield url


def new_key(url: str) -> key_store.CreatedKey:
    with psycopg.connect(url, autocommit=True) as conn:
        return key_store.create_key(conn, f"faults-{uuid.uuid4().hex[:8]}", "all")


def cluster_of(url: str, node: tuple[str, int]) -> tuple[str, str]:
    """(version, name) of the Debian cluster serving ``node``, from its data directory."""
    with psycopg.connect(url_of(url, "postgres", *node), autocommit=True) as conn:
        (directory,) = conn.execute("SHOW data_directory").fetchone()
    version, name = Path(directory).parts[-2:]
    return version, name


def pg_ctlcluster(version: str, name: str, *action: str) -> None:
    subprocess.run(
        ["pg_ctlcluster", "--skip-systemctl-redirect", version, name, *action],
        check=True, capture_output=True, timeout=120,
    )  # fmt: skip


@pytest.mark.skipif(not shutil.which("pg_ctlcluster"), reason="needs Debian's pg_ctlcluster")
async def test_a_worker_stopped_mid_ingest_leaves_no_partial_batch_and_recovers(
    citus_url: str, tmp_path: Path
) -> None:
    key = new_key(citus_url)
    with psycopg.connect(citus_url) as conn:
        (host, port) = conn.execute(
            "SELECT nodename, nodeport FROM pg_dist_shard_placement "
            "WHERE shardid = get_shard_id_for_distribution_column('agent_steps', %s::uuid)",
            (key.project_id,),
        ).fetchone()
    version, name = cluster_of(citus_url, (host, port))
    serve = ServeProcess("--database-url", citus_url, log=tmp_path / "serve.log")
    run = str(uuid.uuid4())
    answers: dict[int, int] = {}
    try:
        async with aiohttp.ClientSession() as session:
            path = "/v1/ingest/agent/steps"
            status, _ = await post(
                session, serve.url, key.key, "/v1/ingest/agent/runs",
                {"id": run, "agent_name": "a"},
            )  # fmt: skip
            assert status == 201

            async def send(number: int) -> None:
                status, headers = await post(
                    session, serve.url, key.key, path, batch_of(run, number)
                )
                answers[number] = status
                if status == 503:
                    assert int(headers["Retry-After"]) >= 1

            # Batches in flight, four at a time, while the shard's worker dies at once.
            sending = asyncio.gather(*(send(number) for number in range(0, 4)))
            await asyncio.to_thread(pg_ctlcluster, version, name, "stop", "-m", "immediate")
            await sending
            for number in range(4, 8):  # sent while it is down
                await send(number)
            assert set(answers.values()) <= {200, 503}, answers
            assert 503 in answers.values(), answers
            await asyncio.to_thread(pg_ctlcluster, version, name, "start")
            # Nothing half-written: every batch is all there or not at all.
            stored = set(stored_indices(citus_url, key.project_id, run))
            for number in answers:
                indices = {step["step_index"] for step in batch_of(run, number)}
                assert indices <= stored or not indices & stored, (number, answers[number])
                if answers[number] == 200:
                    assert indices <= stored
            # A client that retries on 503 gets everything in, once.
            for number, status in sorted(answers.items()):
                for _ in range(60):
                    if status == 200:
                        break
                    await asyncio.sleep(0.5)
                    await send(number)
                    status = answers[number]
                assert status == 200
    finally:
        serve.stop()
        serve.kill()
        pg_ctlcluster(version, name, "start") if not _is_up(host, port) else None
    indices = stored_indices(citus_url, key.project_id, run)
    assert sorted(indices) == list(range(1, 81))
    with psycopg.connect(citus_url) as conn:
        (count,) = conn.execute(
            "SELECT step_count FROM agent_runs WHERE project_id = %s AND id = %s",
            (key.project_id, run),
        ).fetchone()
    assert count == 80


def _is_up(host: str, port: int) -> bool:
    try:
        psycopg.connect(f"postgresql://postgres@{host}:{port}/postgres", connect_timeout=2).close()
    except psycopg.OperationalError:
        return False
    return True


@pytest.mark.skipif(not SPARE_NODE, reason="KEELWAVE_TEST_CITUS_SPARE_NODE is not set")
async def test_adding_a_worker_and_rebalancing_while_ingesting_loses_nothing(
    tmp_path: Path,
) -> None:
    spare_host, _, spare_port = (SPARE_NODE or "").partition(":")
    spare = (spare_host, int(spare_port))
    nodes = workers()
    with citus_database() as url:
        migrate.upgrade(url)
        keys = [new_key(url) for _ in range(4)]  # four projects: several shards get writes
        serve = ServeProcess("--database-url", url, log=tmp_path / "serve.log")
        runs = {key.project_id: str(uuid.uuid4()) for key in keys}
        acknowledged: dict[str, set[int]] = {key.project_id: set() for key in keys}
        moving = True
        try:
            async with aiohttp.ClientSession() as session:

                async def ingest(key: key_store.CreatedKey) -> None:
                    run, number = runs[key.project_id], 0
                    status, _ = await post(
                        session, serve.url, key.key, "/v1/ingest/agent/runs",
                        {"id": run, "agent_name": "a"},
                    )  # fmt: skip
                    assert status == 201
                    while moving or number < 5:
                        batch = batch_of(run, number)
                        status, _ = await post(
                            session, serve.url, key.key, "/v1/ingest/agent/steps", batch
                        )
                        assert status in (200, 503), status
                        if status == 200:
                            acknowledged[key.project_id].update(s["step_index"] for s in batch)
                            number += 1
                        else:
                            await asyncio.sleep(0.2)  # retried, as the SDK does

                def rebalance() -> None:
                    add_worker(url, spare)
                    with psycopg.connect(url, autocommit=True) as conn:
                        # block_writes: runs, steps and model calls have no primary key
                        # for logical replication to identify rows by; writes to a shard
                        # being moved wait for the move (docs/scale-out.md).
                        conn.execute(
                            "SELECT citus_rebalance_start(shard_transfer_mode => 'block_writes')"
                        )
                        conn.execute("SELECT citus_rebalance_wait()")

                async def move() -> None:
                    nonlocal moving
                    try:
                        await asyncio.sleep(1)
                        await asyncio.to_thread(rebalance)
                    finally:
                        moving = False

                await asyncio.gather(move(), *(ingest(key) for key in keys))
        finally:
            serve.stop()
            serve.kill()
        with psycopg.connect(url) as conn:
            (moved,) = conn.execute(
                "SELECT count(*) FROM pg_dist_shard_placement "
                "WHERE nodename = %s AND nodeport = %s",
                spare,
            ).fetchone()
            assert moved > 0
            for key in keys:
                rows = conn.execute(
                    "SELECT step_index FROM agent_steps WHERE project_id = %s AND run_id = %s",
                    (key.project_id, runs[key.project_id]),
                ).fetchall()
                indices = [index for (index,) in rows]
                assert len(indices) == len(set(indices))  # stored once
                assert set(indices) >= acknowledged[key.project_id]  # nothing lost
                (count,) = conn.execute(
                    "SELECT step_count FROM agent_runs WHERE project_id = %s AND id = %s",
                    (key.project_id, runs[key.project_id]),
                ).fetchone()
                assert count == len(indices)
        # The spare leaves the cluster as it came: without this database.
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute(
                "SELECT citus_drain_node(%s, %s, shard_transfer_mode => 'block_writes')", spare
            )
            conn.execute("SELECT citus_remove_node(%s, %s)", spare)
    from citus_cluster import drop_database

    drop_database(url.rpartition("/")[2], [*nodes, spare])
