"""keelwave on TimescaleDB with compressed history: writes never decompress what they do
not touch, counters and rollups stay exact, and ingest keeps working at scale.

Runs against the TimescaleDB at ``KEELWAVE_TEST_TIMESCALEDB_URL`` (an admin URL,
e.g. postgresql://postgres@127.0.0.1:5433/postgres, with timescaledb preloaded);
skipped, and listed as skipped, without it.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta

import aiohttp
import psycopg
import pytest
from conftest import make_project, make_settings

from keelwave.db import migrate
from keelwave.server.app import create_app

ADMIN_URL = os.environ.get("KEELWAVE_TEST_TIMESCALEDB_URL")
pytestmark = pytest.mark.skipif(
    not ADMIN_URL, reason="KEELWAVE_TEST_TIMESCALEDB_URL is not set (a TimescaleDB to test on)"
)

NOW = datetime.now(UTC)


def _url(name: str) -> str:
    base, _, _ = (ADMIN_URL or "").rpartition("/")
    return f"{base}/{name}"


@pytest.fixture(scope="module")
def tsdb_url() -> Iterator[str]:
    name = f"kw_ts_{uuid.uuid4().hex[:10]}"
    with psycopg.connect(ADMIN_URL, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    url = _url(name)
    migrate.upgrade(url)
    yield url
    with psycopg.connect(ADMIN_URL, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def sql(url: str, statement: str, params: tuple = ()) -> list[tuple]:
    with psycopg.connect(url, autocommit=True) as conn:
        cursor = conn.execute(statement, params)
        return cursor.fetchall() if cursor.description else []


def compress_old_chunks(url: str, how: str) -> int:
    """Compress every chunk older than the policy's seven days: through the policy's
    own job (``policy``, run in the foreground) or chunk by chunk (``chunks``)."""
    if how == "policy":
        for (job,) in sql(
            url,
            "SELECT job_id FROM timescaledb_information.jobs "
            "WHERE proc_name = 'policy_compression'",
        ):
            sql(url, f"CALL run_job({job})")
    else:
        for (table,) in sql(
            url,
            "SELECT hypertable_name FROM timescaledb_information.hypertables "
            "WHERE compression_enabled",
        ):
            sql(
                url,
                f"SELECT compress_chunk(c, true) FROM show_chunks('{table}', "
                "older_than => INTERVAL '7 days') AS c",
            )
    return chunk_states(url)["compressed"]


def chunk_states(url: str) -> dict[str, int]:
    """How many chunks are compressed, and how many rows sit outside compression in
    them (written, or moved back out, since they were compressed)."""
    compressed = sql(
        url,
        "SELECT format('%%I.%%I', chunk_schema, chunk_name) FROM timescaledb_information.chunks "
        "WHERE is_compressed",
    )
    loose = 0
    for (chunk,) in compressed:
        [(count,)] = sql(url, f"SELECT count(*) FROM ONLY {chunk}")
        loose += count
    return {"compressed": len(compressed), "loose_rows": loose}


class Client:
    def __init__(self, session: aiohttp.ClientSession, base: str, auth: dict) -> None:
        self.session, self.base, self.auth = session, base, auth

    async def post(self, path: str, body: object) -> dict:
        async with self.session.post(self.base + path, json=body, headers=self.auth) as answer:
            payload = await answer.json()
            assert answer.status < 300, (path, answer.status, payload)
            return payload


def history(run_ids: list[str], days: int) -> tuple[list, list, list, list]:
    """Runs spread over ``days`` days, each with steps, a model call and a finish."""
    runs, steps, calls, finishes = [], [], [], []
    for number, run_id in enumerate(run_ids):
        started = NOW - timedelta(days=days * number / len(run_ids), minutes=5)
        runs.append({"id": run_id, "agent_name": f"agent-{number % 3}",
                     "started_at": started.isoformat()})  # fmt: skip
        steps += [
            {"run_id": run_id, "step_index": i, "tool_name": "search",
             "tool_input": {"q": i % 2}, "duration_ms": 4.0,
             "started_at": (started + timedelta(seconds=i)).isoformat()}
            for i in range(1, 6)
        ]  # fmt: skip
        calls.append({"id": str(uuid.uuid4()), "run_id": run_id, "provider": "openai",
                      "model": "gpt-4o", "input_tokens": 100, "output_tokens": 10,
                      "started_at": started.isoformat()})  # fmt: skip
        finishes.append({"id": run_id, "termination_reason": "clean",
                         "ended_at": (started + timedelta(seconds=30)).isoformat()})  # fmt: skip
    return runs, steps, calls, finishes


@pytest.mark.parametrize("how", ["policy", "chunks"])
async def test_live_ingest_into_compressed_history(tsdb_url: str, aiohttp_server, how) -> None:
    server = await aiohttp_server(create_app(make_settings(), tsdb_url))
    project = make_project(tsdb_url)
    old_runs = [str(uuid.uuid4()) for _ in range(300)]
    unfinished_old = old_runs[-1]
    runs, steps, calls, finishes = history(old_runs, days=30)
    async with aiohttp.ClientSession() as session:
        client = Client(session, str(server.make_url("")).rstrip("/"), project.auth("ingest"))
        await client.post("/v1/ingest/agent/runs", runs)
        for first in range(0, len(steps), 500):
            await client.post("/v1/ingest/agent/steps", steps[first : first + 500])
        await client.post("/v1/ingest/ai", calls)
        await client.post("/v1/ingest/agent/runs/finish", finishes[:-1])

        assert compress_old_chunks(tsdb_url, how) >= 40  # steps and calls, 23 days each
        before = chunk_states(tsdb_url)
        assert before["loose_rows"] == 0

        # Live traffic: new runs with steps, calls and finishes; retries of old data.
        new_runs, new_steps, new_calls, new_finishes = history(
            [str(uuid.uuid4()) for _ in range(50)], days=0
        )
        await client.post("/v1/ingest/agent/runs", new_runs)
        await client.post("/v1/ingest/agent/steps", new_steps)
        await client.post("/v1/ingest/ai", new_calls)
        await client.post("/v1/ingest/agent/runs/finish", new_finishes)
        await client.post("/v1/ingest/agent/runs", runs[:100])  # retries: stored already
        await client.post("/v1/ingest/agent/steps", steps[:500])
        await client.post("/v1/ingest/ai", calls[:100])
        # Into old runs: the oldest run's finish again, the unfinished one's finish.
        await client.post("/v1/ingest/agent/runs/finish", finishes[:1])
        await client.post(f"/v1/ingest/agent/runs/{unfinished_old}/finish",
                          {"termination_reason": "timeout"})  # fmt: skip

    after = chunk_states(tsdb_url)
    assert after == before, "a write decompressed rows it did not touch"
    total_runs = len(old_runs) + 50
    [(stored_runs, finished, step_count, llm_calls)] = sql(
        tsdb_url,
        "SELECT count(*), count(ended_at), sum(step_count), sum(llm_calls) FROM agent_runs "
        "WHERE project_id = %s",
        (project.id,),
    )
    [(stored_steps, distinct_steps)] = sql(
        tsdb_url,
        "SELECT count(*), count(DISTINCT (run_id, step_index)) FROM agent_steps "
        "WHERE project_id = %s",
        (project.id,),
    )
    [(stored_calls,)] = sql(
        tsdb_url, "SELECT count(*) FROM ai_traces WHERE project_id = %s", (project.id,)
    )
    assert (stored_runs, finished) == (total_runs, total_runs)
    assert stored_steps == distinct_steps == step_count == 5 * total_runs
    assert stored_calls == llm_calls == total_runs
    [(rolled_runs, rolled_finished, rolled_steps, rolled_calls)] = sql(
        tsdb_url,
        "SELECT sum(runs), sum(finished_runs), sum(steps), sum(llm_calls) "
        "FROM agent_run_rollups WHERE project_id = %s",
        (project.id,),
    )
    assert (rolled_runs, rolled_finished, rolled_steps, rolled_calls) == (
        total_runs, total_runs, 5 * total_runs, total_runs,
    )  # fmt: skip


async def test_late_steps_of_an_old_run_leave_the_rest_compressed(
    tsdb_url: str, aiohttp_server
) -> None:
    """A step of a run whose chunk is compressed lands beside the compressed rows: only
    that row is outside compression afterwards."""
    server = await aiohttp_server(create_app(make_settings(), tsdb_url))
    project = make_project(tsdb_url)
    run_ids = [str(uuid.uuid4()) for _ in range(40)]
    runs, steps, _, _ = history(run_ids, days=20)
    async with aiohttp.ClientSession() as session:
        client = Client(session, str(server.make_url("")).rstrip("/"), project.auth("ingest"))
        await client.post("/v1/ingest/agent/runs", runs)
        await client.post("/v1/ingest/agent/steps", steps)
        compress_old_chunks(tsdb_url, "chunks")
        before = chunk_states(tsdb_url)
        oldest = runs[-1]
        await client.post(
            "/v1/ingest/agent/steps",
            {"run_id": oldest["id"], "step_index": 99, "tool_name": "late",
             "started_at": oldest["started_at"]},
        )  # fmt: skip
    after = chunk_states(tsdb_url)
    assert after["compressed"] == before["compressed"]
    assert after["loose_rows"] == before["loose_rows"] + 1
    [(count,)] = sql(tsdb_url, "SELECT step_count FROM agent_runs WHERE id = %s", (oldest["id"],))
    assert count == 6


async def test_ingest_works_with_200000_runs_of_compressed_history(
    tsdb_url: str, aiohttp_server
) -> None:
    """More compressed rows than TimescaleDB lets one write decompress (100,000 by
    default): a write that decompressed them would fail, and fail every time."""
    project = make_project(tsdb_url)
    count = 200_000
    sql(
        tsdb_url,
        """
        WITH runs AS (
            SELECT gen_random_uuid() AS id, now() - (n * interval '10 seconds') - interval '8 days'
                   AS started_at, n
            FROM generate_series(1, %(count)s) AS n
        ), r AS (
            INSERT INTO agent_runs (project_id, id, agent_name, started_at, ended_at,
                                    termination_reason, step_count, llm_calls, last_activity_at)
            SELECT %(project)s, id, 'bulk', started_at, started_at + interval '5 seconds',
                   'clean', 1, 1, started_at FROM runs RETURNING id, started_at
        ), s AS (
            INSERT INTO agent_steps (project_id, run_id, step_index, step_type, tool_name,
                                     tool_input, input_fingerprint, started_at)
            SELECT %(project)s, id, 1, 'tool_call', 'search', '{}', '\\x00', started_at FROM r
        )
        INSERT INTO ai_traces (project_id, id, run_id, provider, model, input_tokens, started_at)
        SELECT %(project)s, gen_random_uuid(), id, 'openai', 'gpt-4o', 5, started_at FROM r
        """.replace("%(count)s", str(count)).replace("%(project)s", f"'{project.id}'"),
    )
    compress_old_chunks(tsdb_url, "chunks")
    [(compressed_rows,)] = sql(
        tsdb_url,
        "SELECT coalesce(sum(after_compression_total_bytes), 0) FROM "
        "hypertable_compression_stats('agent_steps')",
    )
    assert compressed_rows > 0
    before = chunk_states(tsdb_url)
    server = await aiohttp_server(create_app(make_settings(), tsdb_url))
    [(old_run,)] = sql(
        tsdb_url, "SELECT id FROM agent_runs WHERE project_id = %s LIMIT 1", (project.id,)
    )
    async with aiohttp.ClientSession() as session:
        client = Client(session, str(server.make_url("")).rstrip("/"), project.auth("ingest"))
        run_id = str(uuid.uuid4())
        await client.post("/v1/ingest/agent/runs", {"id": run_id, "agent_name": "fresh"})
        await client.post(
            "/v1/ingest/agent/steps",
            [{"run_id": run_id, "step_index": i, "tool_name": "t"} for i in range(1, 11)],
        )
        await client.post(
            "/v1/ingest/ai", {"run_id": run_id, "provider": "openai", "model": "gpt-4o"}
        )
        await client.post(f"/v1/ingest/agent/runs/{run_id}/finish", {"termination_reason": "clean"})
        await client.post(
            "/v1/ingest/agent/steps", {"run_id": str(old_run), "step_index": 2, "tool_name": "t"}
        )
        await client.post(
            f"/v1/ingest/agent/runs/{old_run}/finish", {"termination_reason": "error"}
        )
    after = chunk_states(tsdb_url)
    assert after["compressed"] == before["compressed"]
    assert after["loose_rows"] <= before["loose_rows"] + 1
    [(steps, calls, reason)] = sql(
        tsdb_url,
        "SELECT step_count, llm_calls, termination_reason FROM agent_runs WHERE id = %s",
        (run_id,),
    )
    assert (steps, calls, reason) == (10, 1, "clean")


INDEXES = "SELECT indexname FROM pg_indexes WHERE tablename = 'agent_runs'"
HYPERTABLE = "SELECT 1 FROM timescaledb_information.hypertables WHERE hypertable_name = %s"


def test_migration_moves_compressed_runs_into_a_plain_table() -> None:
    """An installation from before 0005, with runs compressed in a hypertable, keeps every
    run, index and view when agent_runs becomes a plain table."""
    name = f"kw_ts_{uuid.uuid4().hex[:10]}"
    with psycopg.connect(ADMIN_URL, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    url = _url(name)
    try:
        migrate.upgrade(url, "0004")
        project = make_project(url)
        sql(
            url,
            """
            INSERT INTO agent_runs (project_id, id, agent_name, started_at, step_count,
                                    last_activity_at, input, tags)
            SELECT %s, gen_random_uuid(), 'old', now() - n * interval '1 hour', n %% 7,
                   now() - n * interval '1 hour', json_build_object('n', n), ARRAY['t']
            FROM generate_series(1, 2000) AS n
            """,
            (project.id,),
        )
        sql(
            url,
            "INSERT INTO ai_traces (project_id, id, run_id, provider, model, started_at) "
            "SELECT project_id, gen_random_uuid(), id, 'p', 'm', started_at FROM agent_runs",
        )
        for table in ("agent_runs", "ai_traces"):
            sql(
                url,
                f"SELECT compress_chunk(c) FROM show_chunks('{table}', "
                "older_than => INTERVAL '7 days') AS c",
            )
        before = sql(url, "SELECT id, step_count, input::text, tags FROM agent_runs ORDER BY id")
        indexes = set(sql(url, INDEXES))
        migrate.upgrade(url, "0005")  # the revision under test; later ones add indexes
        after = sql(url, "SELECT id, step_count, input::text, tags FROM agent_runs ORDER BY id")
        assert after == before and len(after) == 2000
        assert not sql(url, HYPERTABLE, ("agent_runs",))
        assert set(sql(url, INDEXES)) == indexes - {("agent_runs_started_at_idx",)}
        migrate.upgrade(url)
        [(health,)] = sql(url, "SELECT sum(runs) FROM agent_run_health")
        assert health == 2000
        [(traces,)] = sql(url, "SELECT count(*) FROM ai_traces")
        assert traces == 2000
    finally:
        with psycopg.connect(ADMIN_URL, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


async def test_keelwave_compresses_what_the_background_jobs_did_not(tsdb_url: str) -> None:
    """When TimescaleDB's background jobs do not compress (they fail, or do not run),
    keelwave's own maintenance runs the policy's jobs in the foreground."""
    from psycopg_pool import AsyncConnectionPool

    from keelwave.server.store.timescale import Maintenance

    project = make_project(tsdb_url)
    sql(
        tsdb_url,
        "INSERT INTO agent_steps (project_id, run_id, step_index, step_type, started_at) "
        "SELECT %s, gen_random_uuid(), 1, 'think', now() - n * interval '1 hour' - "
        "interval '60 days' FROM generate_series(1, 300) AS n",
        (project.id,),
    )
    # (60 days back: chunks no other test of this module has compressed.)
    # The background scheduler is kept from running the jobs (as when it fails).
    jobs = sql(
        tsdb_url,
        "SELECT job_id FROM timescaledb_information.jobs WHERE proc_name = 'policy_compression'",
    )
    for (job,) in jobs:
        sql(tsdb_url, f"SELECT alter_job({job}, next_start => now() + interval '1 day')")

    def uncompressed_old() -> int:
        [(count,)] = sql(
            tsdb_url,
            "SELECT count(*) FROM timescaledb_information.chunks WHERE NOT is_compressed "
            "AND hypertable_name = 'agent_steps' AND range_end < now() - interval '59 days'",
        )
        return count

    assert uncompressed_old() > 5
    async with AsyncConnectionPool(tsdb_url, kwargs={"autocommit": True}, open=False) as pool:
        ran = await Maintenance(pool).run_once()
        assert ran >= 1
        assert uncompressed_old() == 0
        assert await Maintenance(pool).run_once() == 0  # nothing overdue any more
