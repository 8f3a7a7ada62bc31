"""The Citus profile's daily partitions of steps and model calls (migration 0015): created
ahead, dropped by retention, closed days made columnar with late steps still accepted.

Runs on a real Citus cluster (KEELWAVE_TEST_CITUS_URL, citus_cluster.py); skipped,
saying so, otherwise. Rows are aged by moving them to an older day of received_at
(an UPDATE of the partition key moves a row between partitions), which is what
the partitions are keyed by.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from urllib.parse import quote

import aiohttp
import psycopg
import pytest
from citus_cluster import citus_database, keys_mismatch, requires_citus, worker_url, workers
from psycopg_pool import AsyncConnectionPool
from serve_process import ServeProcess
from test_citus import Client, steps_of, stored

from keelwave.db import keys as key_store
from keelwave.db import migrate
from keelwave.server.store import retention
from keelwave.server.store.citus import partitions

pytestmark = requires_citus

DAY = timedelta(days=1)
# The servers here leave the days' upkeep to the test (the keeper still creates days).
NO_COMPRESSION = {"KEELWAVE_CITUS_COMPRESS_AFTER_DAYS": "0"}


@pytest.fixture(scope="module")
def citus_url() -> Iterator[str]:
    with citus_database("kw_parts") as url:
        migrate.upgrade(url)
        yield url


@pytest.fixture
async def pool(citus_url: str) -> AsyncIterator[AsyncConnectionPool]:
    async with AsyncConnectionPool(
        citus_url, kwargs={"autocommit": True}, min_size=1, max_size=2, open=False
    ) as pool:
        yield pool


def now() -> datetime:
    return datetime.now(UTC).replace(microsecond=0)


def days(url: str, table: str) -> list[tuple[str, str]]:
    """(first moment, access method) of each day of ``table``, oldest first."""
    rows = stored(
        url,
        "SELECT from_value, access_method FROM time_partitions "
        "WHERE parent_table = %s::regclass ORDER BY from_value::timestamptz",
        (table,),
    )
    return [(str(start), method) for start, method in rows]


def method_of_day(url: str, at: object) -> list[tuple[str]]:
    """The access method of the day of agent_steps that ``at`` (a time) falls in."""
    return stored(
        url,
        "SELECT access_method FROM time_partitions WHERE parent_table = 'agent_steps'::regclass"
        " AND %s >= from_value::timestamptz AND %s < to_value::timestamptz",
        (at, at),
    )


def days_ago(url: str, days: int) -> object:
    [(at,)] = stored(url, "SELECT now() - make_interval(days => %s)", (days,))
    return at


def age(url: str, project: str, run: str, by: timedelta) -> None:
    """Move a run's steps and model calls to ``by`` ago in received_at (making the days;
    a literal, since Citus sends no expression of the row's own columns on to a shard)."""
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("SET timezone TO 'UTC'")
        for table in partitions.TABLES:
            conn.execute(
                "SELECT create_time_partitions(%s::regclass, INTERVAL '1 day', now(), now() - %s)",
                (table, by + DAY),
            )
            conn.execute(
                f"UPDATE {table} SET received_at = %s WHERE project_id = %s AND run_id = %s",
                (now() - by, project, run),
            )
        # Their keys (migration 0017) keep when the rows were received, as the rows do.
        for table, column in (("kw_step_keys", "run_id"), ("kw_call_keys", "run_key")):
            conn.execute(
                f"UPDATE {table} SET received_at = %s WHERE project_id = %s AND {column} = %s",
                (now() - by, project, run),
            )


def new_key(url: str, retention_days: int | None = None) -> key_store.CreatedKey:
    with psycopg.connect(url, autocommit=True) as conn:
        key = key_store.create_key(conn, f"parts-{uuid.uuid4().hex[:8]}", "all")
        conn.execute(
            "UPDATE projects SET retention_days = %s WHERE id = %s",
            (retention_days, key.project_id),
        )
    return key


async def ingest_run(
    api: Client, steps: int = 20, calls: int = 1, started: datetime | None = None
) -> str:
    """A run with its steps and model calls, finished; all at ``started`` (default now)."""
    at = {} if started is None else {"started_at": started.isoformat()}
    status, body = await api.post("/v1/ingest/agent/runs", {"agent_name": "a", **at})
    assert status == 201, body
    run_id = body["data"]["id"]
    batch = [{**step, **at} for step in steps_of(run_id, range(1, steps + 1))]
    assert (await api.post("/v1/ingest/agent/steps", batch))[0] == 200
    for n in range(calls):
        call = {"run_id": run_id, "provider": "openai", "model": "gpt-4o", "input_tokens": 10 + n}
        assert (await api.post("/v1/ingest/ai", [{**call, **at}]))[0] == 200
    finish = {"termination_reason": "clean"}
    if started is not None:
        finish["ended_at"] = (started + timedelta(seconds=30)).isoformat()
    status, body = await api.post(f"/v1/ingest/agent/runs/{run_id}/finish", finish)
    assert status == 200, body
    return run_id


def test_the_days_are_partitions_of_every_shard_and_made_ahead(citus_url: str) -> None:
    for table in partitions.TABLES:
        [(kind, partitioned)] = stored(
            citus_url,
            "SELECT d.partmethod, c.relkind FROM pg_dist_partition d "
            "JOIN pg_class c ON c.oid = d.logicalrelid WHERE d.logicalrelid = %s::regclass",
            (table,),
        )
        assert (kind, partitioned) == ("h", "p")  # distributed, and partitioned
        # Today and the migration's two days ahead, at least.
        assert stored(
            citus_url,
            "SELECT count(*) >= 3, max(to_value::timestamptz) >= now() + INTERVAL '2 days' "
            "FROM time_partitions WHERE parent_table = %s::regclass",
            (table,),
        ) == [(True, True)]
    # Co-located with runs, as every distributed table: a project's write stays on one shard.
    assert stored(
        citus_url,
        "SELECT count(DISTINCT colocationid) FROM pg_dist_partition WHERE partmethod = 'h'",
    ) == [(1,)]


async def test_the_keeper_makes_the_days_ahead(citus_url: str, pool: AsyncConnectionPool) -> None:
    before = days(citus_url, "agent_steps")
    made = await partitions.create_ahead(pool, partitions.AHEAD + 3 * DAY)
    after = days(citus_url, "agent_steps")
    assert made == 2 * (len(after) - len(before)) and len(after) >= len(before) + 2
    assert await partitions.create_ahead(pool, partitions.AHEAD + 3 * DAY) == 0  # no-op again


async def test_a_columnar_day_still_dedups_takes_late_steps_and_erases(
    citus_url: str, pool: AsyncConnectionPool, tmp_path: Path
) -> None:
    key = new_key(citus_url)
    project = key.project_id
    serve = ServeProcess("--database-url", citus_url, env=NO_COMPRESSION, log=tmp_path / "s.log")
    try:
        async with aiohttp.ClientSession() as session:
            api = Client(session, serve.url, key)
            old = await ingest_run(api)
            recent = await ingest_run(api, steps=5)
            age(citus_url, project, old, 9 * DAY)
            [(boundary,)] = stored(citus_url, "SELECT now() - INTERVAL '8 days'")
            converted = await partitions.compress_before(pool, boundary)
            assert converted.get("agent_steps", 0) >= 1
            [(received,)] = stored(
                citus_url,
                "SELECT DISTINCT received_at FROM agent_steps "
                "WHERE project_id = %s AND run_id = %s",
                (project, old),
            )
            assert method_of_day(citus_url, received) == [("columnar",)]
            # A replay of the old run's steps is found in the columnar day: stored once.
            replay = await api.post("/v1/ingest/agent/steps", steps_of(old, range(1, 21)))
            assert replay[0] == 200
            # A late step is received today, into a heap day.
            assert (await api.post("/v1/ingest/agent/steps", steps_of(old, range(21, 22))))[
                0
            ] == 200
            assert stored(
                citus_url,
                "SELECT count(*), count(DISTINCT step_index) FROM agent_steps "
                "WHERE project_id = %s AND run_id = %s",
                (project, old),
            ) == [(21, 21)]
            [(steps,)] = stored(
                citus_url,
                "SELECT step_count FROM agent_runs WHERE project_id = %s AND id = %s",
                (project, old),
            )
            assert steps == 21
            # Reads of the columnar day: the run's loops and its timeline.
            status, loops = await api.get(f"/v1/projects/{project}/agent/runs/{old}/loops")
            assert status == 200 and sum(group["hits"] for group in loops["data"]) == 21
            # Deleting a run whose rows are all in heap days works beside columnar ones …
            path = f"/v1/projects/{project}/agent/runs"
            async with session.delete(
                f"{serve.url}{path}/{recent}", headers={"Authorization": f"Bearer {key.key}"}
            ) as response:
                assert response.status == 200, await response.text()
            # … and one with rows in a columnar day too: the days holding them go back to
            # heap (the keeper compresses them again later), and the run goes whole.
            async with session.delete(
                f"{serve.url}{path}/{old}", headers={"Authorization": f"Bearer {key.key}"}
            ) as response:
                body = await response.json()
                assert response.status == 200, body
                assert body["data"] == {"runs": 1, "steps": 21, "model_calls": 1}
            assert method_of_day(citus_url, received) == [("heap",)]
            # Its steps sent again are stored again, as on one PostgreSQL: its keys went too.
            replay = await api.post("/v1/ingest/agent/steps", steps_of(old, range(1, 4)))
            assert replay[0] == 200
    finally:
        serve.stop()
        serve.kill()
    assert stored(
        citus_url, "SELECT count(*) FROM agent_steps WHERE project_id = %s", (project,)
    ) == [(3,)]
    assert stored(
        citus_url, "SELECT count(*), coalesce(sum(runs), 0) FROM agent_run_rollups "
        "WHERE project_id = %s", (project,),
    )[0][1] == 0  # fmt: skip
    assert keys_mismatch(citus_url) == (0, 0, 0, 0)


def test_compression_waits_for_retention(citus_url: str) -> None:
    """A project with a period holds columnar conversion back until retention has deleted
    its rows there: before its first round, altogether; then up to its cutoff less a day."""

    async def boundary() -> object:
        async with AsyncConnectionPool(
            citus_url, kwargs={"autocommit": True}, min_size=1, max_size=1, open=False
        ) as pool:
            return await partitions.compression_boundary(pool, 7 * DAY)

    key = new_key(citus_url, retention_days=30)
    try:
        assert asyncio.run(boundary()) is None  # never swept yet
        with psycopg.connect(citus_url, autocommit=True) as conn:
            conn.execute(
                "INSERT INTO retention_sweeps (project_id, swept_before) "
                "VALUES (%s, now() - INTERVAL '30 days')",
                (key.project_id,),
            )
        [(expected,)] = stored(citus_url, "SELECT now() - INTERVAL '31 days'")
        found = asyncio.run(boundary())
        assert abs(found - expected) < timedelta(minutes=5)
    finally:
        with psycopg.connect(citus_url, autocommit=True) as conn:
            conn.execute(
                "UPDATE projects SET retention_days = NULL WHERE id = %s", (key.project_id,)
            )


def summary_of(url: str, key: key_store.CreatedKey, window: str) -> dict:
    """The project's summary and tools over ``window``, as a server answers them."""

    async def ask() -> dict:
        serve = ServeProcess("--database-url", url, env=NO_COMPRESSION)
        try:
            async with aiohttp.ClientSession() as session:
                api = Client(session, serve.url, key)
                answers = {}
                for what in ("summary", "tools"):
                    status, body = await api.get(
                        f"/v1/projects/{key.project_id}/agent/{what}?{window}"
                    )
                    assert status == 200, body
                    answers[what] = body["data"]
                return answers
        finally:
            serve.stop()
            serve.kill()

    return asyncio.run(ask())


def test_retention_drops_whole_days_once_no_project_keeps_forever(tmp_path: Path) -> None:
    """Two projects with a run 40 days old and a recent one each. While one keeps forever,
    retention deletes the other's old run by rows and no day goes; once both have a
    30-day period, the days received before the cutoff less a day are dropped whole.
    The recent runs, their counters and the 7-day aggregates are untouched."""
    with citus_database("kw_parts_ret") as url:
        migrate.upgrade(url)
        short, forever = new_key(url, retention_days=30), new_key(url)
        runs: dict[str, tuple[str, str]] = {}

        async def ingest() -> None:
            serve = ServeProcess("--database-url", url, env=NO_COMPRESSION, log=tmp_path / "s.log")
            try:
                async with aiohttp.ClientSession() as session:
                    for key in (short, forever):
                        api = Client(session, serve.url, key)
                        old = await ingest_run(api, steps=6, calls=2, started=now() - 40 * DAY)
                        recent = await ingest_run(api, steps=4)
                        runs[key.project_id] = (old, recent)
            finally:
                serve.stop()
                serve.kill()

        asyncio.run(ingest())
        for project, (old, _) in runs.items():
            age(url, project, old, 40 * DAY)
        window = f"since={quote((now() - 7 * DAY).isoformat())}&until={quote(now().isoformat())}"
        before = {key.project_id: summary_of(url, key, window) for key in (short, forever)}
        [(cutoff,)] = stored(url, "SELECT now() - INTERVAL '31 days'")
        assert stored(
            url, "SELECT count(*) > 0 FROM time_partitions WHERE to_value::timestamptz <= %s",
            (cutoff,),
        ) == [(True,)]  # fmt: skip

        async def enforce() -> dict:
            async with AsyncConnectionPool(url, kwargs={"autocommit": True}, open=False) as pool:
                summary = await retention.enforce(pool)
                assert summary is not None
                return summary

        first = asyncio.run(enforce())
        assert first["chunks_dropped"] == {}  # a project keeps forever: no day goes
        short_old, short_recent = runs[short.project_id]
        assert stored(
            url, "SELECT count(*) FROM agent_steps WHERE project_id = %s AND run_id = %s",
            (short.project_id, short_old),
        ) == [(0,)]  # fmt: skip
        forever_old, _ = runs[forever.project_id]
        assert stored(
            url, "SELECT count(*) FROM agent_steps WHERE project_id = %s AND run_id = %s",
            (forever.project_id, forever_old),
        ) == [(6,)]  # fmt: skip

        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute(
                "UPDATE projects SET retention_days = 30 WHERE id = %s", (forever.project_id,)
            )
        second = asyncio.run(enforce())
        assert second["chunks_dropped"].get("agent_steps", 0) >= 1
        assert second["chunks_dropped"].get("ai_traces", 0) >= 1
        assert stored(
            url,
            "SELECT count(*) FROM time_partitions WHERE to_value::timestamptz <= %s",
            (cutoff,),
        ) == [(0,)]
        for key in (short, forever):
            old, recent = runs[key.project_id]
            assert stored(
                url, "SELECT id::text, step_count, llm_calls FROM agent_runs WHERE project_id = %s",
                (key.project_id,),
            ) == [(recent, 4, 1)]  # fmt: skip
            assert stored(
                url,
                "SELECT count(*) FROM agent_steps WHERE project_id = %s AND run_id = %s",
                (key.project_id, old),
            ) == [(0,)]
            assert stored(
                url, "SELECT sum(runs), sum(steps) FROM agent_run_rollups WHERE project_id = %s",
                (key.project_id,),
            ) == [(1, 4)]  # fmt: skip
            assert summary_of(url, key, window) == before[key.project_id]
        # The dropped days took their keys with them.
        assert keys_mismatch(url) == (0, 0, 0, 0)


async def test_a_period_set_after_compression_brings_the_days_back_for_retention(
    citus_url: str, pool: AsyncConnectionPool, tmp_path: Path
) -> None:
    """A project that kept forever has an old run in a columnar day; given a period, the
    retention round converts that day back to heap and deletes the run whole."""
    key = new_key(citus_url)
    new_key(citus_url)  # one that keeps forever, so that no day is dropped whole instead
    project = key.project_id
    serve = ServeProcess("--database-url", citus_url, env=NO_COMPRESSION, log=tmp_path / "s.log")
    try:
        async with aiohttp.ClientSession() as session:
            api = Client(session, serve.url, key)
            old = await ingest_run(api, steps=6, calls=2, started=now() - 20 * DAY)
            recent = await ingest_run(api, steps=4)
    finally:
        serve.stop()
        serve.kill()
    age(citus_url, project, old, 20 * DAY)
    [(boundary,)] = stored(citus_url, "SELECT now() - INTERVAL '15 days'")
    await partitions.compress_before(pool, boundary)
    with psycopg.connect(citus_url, autocommit=True) as conn:
        conn.execute("UPDATE projects SET retention_days = 10 WHERE id = %s", (project,))
    try:
        summary = None
        while summary is None:  # the lease may be another round's for a moment
            summary = await retention.enforce(pool)
        # The erasure of the old run brought its day back to heap, to delete it there.
        assert method_of_day(citus_url, days_ago(citus_url, 20)) == [("heap",)]
    finally:
        with psycopg.connect(citus_url, autocommit=True) as conn:
            conn.execute("UPDATE projects SET retention_days = NULL WHERE id = %s", (project,))
    assert stored(
        citus_url, "SELECT id::text, step_count FROM agent_runs WHERE project_id = %s", (project,)
    ) == [(recent, 4)]
    assert stored(
        citus_url,
        "SELECT (SELECT count(*) FROM agent_steps WHERE project_id = %s), "
        "(SELECT count(*) FROM ai_traces WHERE project_id = %s)",
        (project, project),
    ) == [(4, 1)]
    assert stored(
        citus_url, "SELECT sum(runs), sum(steps) FROM agent_run_rollups WHERE project_id = %s",
        (project,),
    ) == [(1, 4)]  # fmt: skip
    assert keys_mismatch(citus_url) == (0, 0, 0, 0)


async def test_the_keepers_round(pool: AsyncConnectionPool) -> None:
    """What `serve` runs hourly: days ahead made, closed days compressed, each once."""
    keeper = partitions.PartitionKeeper(pool, compress_after=7 * DAY)
    first = await keeper.run_once()
    assert set(first) == {"created", "compressed"}
    again = await keeper.run_once()
    assert again == {"created": 0, "compressed": {}}


def test_one_server_of_the_cluster_compresses_at_a_time(tmp_path: Path) -> None:
    """The compression lock is a row, so a server compressing through one node keeps a
    server on another node from compressing too (an advisory lock would not)."""
    with citus_database("kw_parts_lock") as url:
        migrate.upgrade(url)
        key = new_key(url)
        serve = ServeProcess("--database-url", url, env=NO_COMPRESSION, log=tmp_path / "s.log")

        async def one_run() -> str:
            async with aiohttp.ClientSession() as session:
                return await ingest_run(Client(session, serve.url, key), steps=3)

        try:
            old = asyncio.run(one_run())
        finally:
            serve.stop()
            serve.kill()
        age(url, key.project_id, old, 12 * DAY)

        async def keeper_round() -> dict:
            async with AsyncConnectionPool(url, kwargs={"autocommit": True}, open=False) as pool:
                return await partitions.PartitionKeeper(pool, compress_after=10 * DAY).run_once()

        # Another server's keeper, connected to a worker, holds the lock mid-compression.
        with psycopg.connect(worker_url(url.rpartition("/")[2], workers()[0])) as other:
            other.execute(partitions.COMPRESSION_ROW_MADE)
            other.commit()
            assert other.execute(partitions.COMPRESSION_ROW_TAKEN).fetchone() == (1,)
            assert asyncio.run(keeper_round())["compressed"] == {}
            other.rollback()  # it is done
        assert asyncio.run(keeper_round())["compressed"].get("agent_steps", 0) >= 1
        assert method_of_day(url, days_ago(url, 12)) == [("columnar",)]
        assert keys_mismatch(url) == (0, 0, 0, 0)
