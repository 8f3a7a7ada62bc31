"""Retention on TimescaleDB: chunks wholly past every project's period are dropped whole
(drop_chunks), the rest of a shorter period goes by batched deletes from compressed
chunks, and aggregates inside the retained periods stay what they were.

Runs against the TimescaleDB at ``KEELWAVE_TEST_TIMESCALEDB_URL`` (an admin URL, e.g.
postgresql://postgres@127.0.0.1:5433/postgres); skipped, and listed as skipped, without it.
"""

from __future__ import annotations

import asyncio
import os
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta

import aiohttp
import psycopg
import pytest
from conftest import Api, make_project, make_settings
from lifecycle_data import (
    NOW,
    Run,
    aggregates,
    judged,
    recomputed_run_rollups,
    send,
    stored_run_rollups,
)
from psycopg_pool import AsyncConnectionPool

from keelwave.db import migrate
from keelwave.server.app import create_app
from keelwave.server.store import retention

ADMIN_URL = os.environ.get("KEELWAVE_TEST_TIMESCALEDB_URL")
pytestmark = pytest.mark.skipif(
    not ADMIN_URL, reason="KEELWAVE_TEST_TIMESCALEDB_URL is not set (a TimescaleDB to test on)"
)
DAY = timedelta(days=1)


@pytest.fixture(autouse=True)
def _now() -> None:
    """The retention cutoff is "now" minus the period when enforcement runs: the ages
    of the test's data count from the same moment (lifecycle_data.NOW is the moment
    the suite imported it, minutes earlier in a full run)."""
    global NOW
    NOW = datetime.now(UTC).replace(microsecond=0)


@pytest.fixture
def tsdb_url() -> Iterator[str]:
    name = f"kw_tsr_{uuid.uuid4().hex[:10]}"
    with psycopg.connect(ADMIN_URL, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    url = (ADMIN_URL or "").rpartition("/")[0] + "/" + name
    migrate.upgrade(url)
    yield url
    with psycopg.connect(ADMIN_URL, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def sql(url: str, statement: str, params: tuple = ()) -> list[tuple]:
    with psycopg.connect(url, autocommit=True) as conn:
        cursor = conn.execute(statement, params)
        return cursor.fetchall() if cursor.description else []


def chunks(url: str) -> dict[str, int]:
    """Chunks per hypertable."""
    return dict(
        sql(
            url,
            "SELECT hypertable_name, count(*) FROM timescaledb_information.chunks "
            "GROUP BY 1 ORDER BY 1",
        )
    )


def compress(url: str) -> int:
    for table in ("agent_steps", "ai_traces"):
        sql(
            url,
            f"SELECT compress_chunk(c, true) FROM show_chunks('{table}', "
            "older_than => INTERVAL '7 days') AS c",
        )
    return sql(url, "SELECT count(*) FROM timescaledb_information.chunks WHERE is_compressed")[0][0]


def history() -> list[Run]:
    """A run every 12 hours over 40 days, and some in the last day."""
    runs = [
        Run(NOW - timedelta(hours=12 * n + 1), agent=("alpha", "beta")[n % 2], looping=n % 5 == 0)
        for n in range(80)
    ]
    return runs + [Run(NOW - timedelta(hours=h), calls=2) for h in (2, 5, 9)]


async def enforce(url: str) -> dict:
    async with AsyncConnectionPool(url, kwargs={"autocommit": True}, open=False) as pool:
        summary = await retention.enforce(pool)
    assert summary is not None
    return summary


async def test_drop_chunks_past_every_period_and_batched_deletes_for_the_rest(
    tsdb_url: str, aiohttp_server, monkeypatch
) -> None:
    monkeypatch.setattr(retention, "FIRST_AFTER_SECONDS", 3600.0)  # the test runs rounds
    app = create_app(make_settings(retention_every_seconds=3600), tsdb_url)
    server = await aiohttp_server(app)
    long, short = make_project(tsdb_url), make_project(tsdb_url)
    async with aiohttp.ClientSession() as session:
        api = Api(str(server.make_url("")).rstrip("/"), session)
        await send(api, long, history())
        await send(api, short, history())
        await judged(tsdb_url, long.id, short.id)
        assert compress(tsdb_url) >= 60  # 33 days of steps and of model calls
        last_day = (NOW - DAY, NOW + timedelta(hours=1))
        before = {p.id: await aggregates(api, p, *last_day) for p in (long, short)}
        chunks_before = chunks(tsdb_url)

        sql(tsdb_url, "UPDATE projects SET retention_days = 30 WHERE id = %s", (long.id,))
        sql(tsdb_url, "UPDATE projects SET retention_days = 7 WHERE id = %s", (short.id,))
        summary = await enforce(tsdb_url)

        # The chunks wholly before the longest period's cutoff (30 days) and a day of
        # slack (retention.CHUNK_DROP_SLACK) are gone whole; the day goes by deletes.
        assert summary["chunks_dropped"]["agent_steps"] >= 8
        after = chunks(tsdb_url)
        for table in ("agent_steps", "ai_traces"):
            assert after[table] == chunks_before[table] - summary["chunks_dropped"][table]
            [(oldest,)] = sql(tsdb_url, f"SELECT min(started_at) FROM {table}")
            assert oldest >= NOW - 31 * DAY
        for project, days in ((long, 30), (short, 7)):
            cutoff = NOW - days * DAY
            for table in ("agent_runs", "agent_steps", "ai_traces"):
                [(old, kept)] = sql(
                    tsdb_url,
                    f"SELECT count(*) FILTER (WHERE started_at < %s), "
                    f"count(*) FILTER (WHERE started_at >= %s + interval '1 minute') "
                    f"FROM {table} WHERE project_id = %s",
                    (cutoff, cutoff, project.id),
                )
                assert old == 0, (project.name, table)
                assert kept > 0, (project.name, table)
            assert stored_run_rollups(tsdb_url, project.id) == recomputed_run_rollups(
                tsdb_url, project.id
            )
            assert await aggregates(api, project, *last_day) == before[project.id]

        # With a project that keeps forever, no chunk may go: only batched deletes.
        forever = make_project(tsdb_url)
        await send(api, forever, [Run(NOW - 20 * DAY)])
        sql(tsdb_url, "UPDATE projects SET retention_days = 3 WHERE id = %s", (short.id,))
        summary = await enforce(tsdb_url)
        assert summary["chunks_dropped"] == {}
        assert chunks(tsdb_url) == after
        [(old,)] = sql(
            tsdb_url,
            "SELECT count(*) FROM agent_steps WHERE project_id = %s AND started_at < %s",
            (short.id, NOW - 3 * DAY),
        )
        assert old == 0
        [(kept,)] = sql(
            tsdb_url, "SELECT count(*) FROM agent_runs WHERE project_id = %s", (forever.id,)
        )
        assert kept == 1


async def test_chunks_are_dropped_under_live_ingest_without_failing_it(
    tsdb_url: str, aiohttp_server, monkeypatch
) -> None:
    """Ingest reads every chunk (its duplicate checks have no time bound) while
    drop_chunks locks them: the drop waits or gives up, never the ingest."""
    monkeypatch.setattr(retention, "FIRST_AFTER_SECONDS", 3600.0)
    app = create_app(make_settings(retention_every_seconds=3600), tsdb_url)
    server = await aiohttp_server(app)
    project = make_project(tsdb_url)
    async with aiohttp.ClientSession() as session:
        api = Api(str(server.make_url("")).rstrip("/"), session)
        await send(api, project, history())
        compress(tsdb_url)
        sql(tsdb_url, "UPDATE projects SET retention_days = 20 WHERE id = %s", (project.id,))
        statuses: list[int] = []
        done = asyncio.Event()

        async def agent(number: int) -> None:
            auth = project.auth("ingest")
            while not done.is_set():
                run = Run(NOW, steps=5)
                body = {"id": run.id, "agent_name": f"live-{number}"}
                statuses.append(
                    (await api.post("/v1/ingest/agent/runs", json=body, headers=auth))[0]
                )
                status, _, _ = await api.post(
                    "/v1/ingest/agent/steps", json=run.step_bodies(), headers=auth
                )
                statuses.append(status)

        agents = [asyncio.create_task(agent(n)) for n in range(6)]
        await asyncio.sleep(1)
        summary = await enforce(tsdb_url)
        await asyncio.sleep(0.5)
        done.set()
        await asyncio.gather(*agents)
    assert summary["chunks_dropped"].get("agent_steps", 0) >= 15
    assert statuses and set(statuses) <= {200, 201}, sorted(set(statuses))
