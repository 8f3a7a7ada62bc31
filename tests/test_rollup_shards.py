"""Rollups in shards (migrations 0016 and 0020, rollup_shards.py): transactions on two
connections add to one agent's or one tool's hour without waiting for each other,
readers see the sum, and erasure leaves no row of an agent or a tool whose every run
went, whichever shards held its share; the downgrade folds the shards back."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta

import psycopg
from conftest import Api, Project, query
from psycopg_pool import AsyncConnectionPool

from keelwave.db import migrate
from keelwave.server.store import erasure, histogram, rollup_shards, statements

HOUR = datetime.now(UTC).replace(minute=0, second=0, microsecond=0) - timedelta(hours=3)


def connections_in_two_shards(db_url: str) -> tuple[psycopg.Connection, psycopg.Connection]:
    """Two connections whose backends add to different shards."""
    opened, by_shard = [], {}
    while len(by_shard) < 2:
        conn = psycopg.connect(db_url)
        opened.append(conn)
        pid = conn.execute("SELECT pg_backend_pid()").fetchone()[0]
        by_shard.setdefault(pid % rollup_shards.SHARDS, conn)
    for conn in opened:
        if conn not in by_shard.values():
            conn.close()
    first, second = by_shard.values()
    return first, second


def stage_and_merge(conn: psycopg.Connection, staged: str, values: tuple, merge: str) -> None:
    """Stage a row of rollup changes (``staged``: the INSERT into a staging table) and
    merge it, as every writer does; the transaction stays open."""
    for ddl in statements.staging_ddl(statements.ROLLUP_STAGES):
        conn.execute(ddl)
    conn.execute(staged, values)
    conn.execute(merge)
    for empty in statements.EMPTY_ROLLUP_STAGES:  # (emptied, as every writer leaves them)
        conn.execute(empty)


def add_one_run(conn: psycopg.Connection, project_id: str, agent: str) -> None:
    """One run's start, in the run rollups."""
    stage_and_merge(
        conn,
        "INSERT INTO kw_stage_rollups (project_id, agent_name, bucket, runs, steps) "
        "VALUES (%s, %s, %s, 1, 3)",
        (project_id, agent, HOUR),
        statements.MERGE_RUN_ROLLUPS,
    )


async def test_two_connections_add_to_one_agents_hour_without_waiting(
    api: Api, project: Project, db_url: str
) -> None:
    first, second = connections_in_two_shards(db_url)
    with first, second:
        add_one_run(first, project.id, "busy-agent")  # its transaction stays open
        # Without shards this waits for the first transaction's commit: the lock
        # timeout makes that an error instead of a hang.
        second.execute("SET lock_timeout = '3s'")
        add_one_run(second, project.id, "busy-agent")
        second.commit()
        first.commit()
    rows = query(
        db_url,
        "SELECT shard, runs FROM agent_run_rollups WHERE project_id = %s ORDER BY shard",
        (project.id,),
    )
    assert len(rows) == 2 and sum(runs for _, runs in rows) == 2
    status, body, _ = await api.get(
        f"/v1/projects/{project.id}/agent/summary",
        params={"since": HOUR.isoformat(), "until": (HOUR + timedelta(hours=1)).isoformat()},
        headers=project.auth("read"),
    )
    assert status == 200, body
    summary = body["data"]["current"]  # the hour is read from the rollups alone
    assert summary["runs"] == 2 and summary["avg_steps"] == 3


async def test_erasure_takes_a_run_out_of_every_shard(project: Project, db_url: str) -> None:
    # A run whose start went to one shard and whose finish and steps went to others.
    run_id = uuid.uuid4()
    with psycopg.connect(db_url) as conn:
        conn.execute(
            "INSERT INTO agent_runs (project_id, id, agent_name, started_at, ended_at, "
            "termination_reason, duration_ms, step_count) "
            "VALUES (%s, %s, 'gone-agent', %s, %s, 'clean', 1000, 2)",
            (project.id, run_id, HOUR + timedelta(minutes=5), HOUR + timedelta(minutes=6)),
        )
        conn.execute(
            "INSERT INTO agent_run_rollups (project_id, bucket, agent_name, shard, runs, steps) "
            "VALUES (%(p)s, %(h)s, 'gone-agent', 1, 1, 0), (%(p)s, %(h)s, 'gone-agent', 3, 0, 2), "
            "(%(p)s, %(h)s, 'gone-agent', 6, 0, 0)",
            {"p": project.id, "h": HOUR},
        )
        conn.execute(
            "UPDATE agent_run_rollups SET finished_runs = 1, term_clean = 1, "
            "duration_ms_sum = 1000 WHERE project_id = %s AND shard = 6",
            (project.id,),
        )
    async with AsyncConnectionPool(db_url, min_size=1, max_size=2, open=False) as pool:
        erased = await erasure.erase_run(pool, project.id, run_id, children=False)
    assert erased is not None and erased.runs == 1
    assert query(
        db_url, "SELECT count(*) FROM agent_run_rollups WHERE project_id = %s", (project.id,)
    ) == [(0,)]


def add_one_finished_run(conn: psycopg.Connection, project_id: str, tool: str) -> None:
    """A finished run's two calls of ``tool``, in the tool rollups, as a finish adds them."""
    stage_and_merge(
        conn,
        "INSERT INTO kw_stage_tools (project_id, bucket, tool_name, duration_bin, calls, runs, "
        "repeated_calls, error_calls) VALUES (%s, %s, %s, 300, 2, 1, 1, 0)",
        (project_id, HOUR, tool),
        statements.MERGE_TOOL_ROLLUPS,
    )


async def test_two_finishes_add_to_one_tools_hour_without_waiting(
    api: Api, project: Project, db_url: str
) -> None:
    first, second = connections_in_two_shards(db_url)
    with first, second:
        add_one_finished_run(first, project.id, "search")  # its transaction stays open
        second.execute("SET lock_timeout = '3s'")  # without shards: a lock timeout
        add_one_finished_run(second, project.id, "search")
        second.commit()
        first.commit()
    for table in ("agent_tool_rollups", "agent_tool_rollups_daily"):
        rows = query(
            db_url,
            f"SELECT shard, calls FROM {table} WHERE project_id = %s ORDER BY shard",
            (project.id,),
        )
        assert len(rows) == 2 and sum(calls for _, calls in rows) == 4, table
    for since in (HOUR, HOUR - timedelta(days=3)):  # the hour alone; whole days too
        status, body, _ = await api.get(
            f"/v1/projects/{project.id}/agent/tools",
            params={"since": since.isoformat(), "until": (HOUR + timedelta(hours=1)).isoformat()},
            headers=project.auth("read"),
        )
        assert status == 200, body
        [tool] = body["data"]
        assert (tool["tool_name"], tool["calls"], tool["runs"], tool["repeated_calls"]) == (
            "search", 4, 2, 2,
        )  # fmt: skip


async def test_erasure_takes_a_runs_tool_calls_out_of_every_shard(
    project: Project, db_url: str
) -> None:
    # A finished run whose calls were counted in one shard, and a late step's swap of
    # its share in another: no shard alone is empty, their sums are what the run adds.
    run_id = uuid.uuid4()
    started = HOUR + timedelta(minutes=5)
    day = HOUR.replace(hour=0)
    with psycopg.connect(db_url) as conn:
        conn.execute(
            "INSERT INTO agent_runs (project_id, id, agent_name, started_at, ended_at, "
            "termination_reason, duration_ms, step_count) "
            "VALUES (%s, %s, 'gone-agent', %s, %s, 'clean', 1000, 2)",
            (project.id, run_id, started, started + timedelta(minutes=1)),
        )
        for index in (1, 2):
            conn.execute(
                "INSERT INTO agent_steps (project_id, run_id, step_index, step_type, tool_name, "
                "input_fingerprint, started_at, duration_ms) "
                "VALUES (%s, %s, %s, 'tool_call', 'grep', %s, %s, 40)",
                (project.id, run_id, index, bytes([index]), started),
            )
        bin_ = query(db_url, f"SELECT {histogram.bin_sql('40::float8')}")[0][0]
        for table, moment in (("agent_tool_rollups", HOUR), ("agent_tool_rollups_daily", day)):
            time_column = "day" if table.endswith("_daily") else "bucket"
            conn.execute(
                f"INSERT INTO {table} (project_id, {time_column}, tool_name, duration_bin, "
                "shard, calls, runs) VALUES (%(p)s, %(t)s, 'grep', %(b)s, 2, 1, 1), "
                "(%(p)s, %(t)s, 'grep', %(b)s, 5, 1, 0)",
                {"p": project.id, "t": moment, "b": bin_},
            )
    async with AsyncConnectionPool(db_url, min_size=1, max_size=2, open=False) as pool:
        erased = await erasure.erase_run(pool, project.id, run_id, children=False)
    assert erased is not None and erased.runs == 1
    for table in ("agent_tool_rollups", "agent_tool_rollups_daily"):
        assert query(
            db_url, f"SELECT count(*) FROM {table} WHERE project_id = %s", (project.id,)
        ) == [(0,)], table


def test_the_downgrade_folds_the_tool_rollup_shards(fresh_db_url: str) -> None:
    migrate.upgrade(fresh_db_url)
    with psycopg.connect(fresh_db_url) as conn:
        conn.execute("INSERT INTO projects (id, name) VALUES (gen_random_uuid(), 'p')")
        for shard, calls in ((0, 3), (4, 2), (7, -1)):
            conn.execute(
                "INSERT INTO agent_tool_rollups (project_id, bucket, tool_name, duration_bin, "
                "shard, calls, runs) SELECT id, %s, 'grep', 300, %s, %s, 1 FROM projects",
                (HOUR, shard, calls),
            )
    migrate.downgrade(fresh_db_url, "0019")
    with psycopg.connect(fresh_db_url) as conn:
        assert conn.execute("SELECT tool_name, calls, runs FROM agent_tool_rollups").fetchall() == [
            ("grep", 4, 3)
        ]
    migrate.upgrade(fresh_db_url)
    with psycopg.connect(fresh_db_url) as conn:
        assert conn.execute("SELECT shard, calls FROM agent_tool_rollups").fetchall() == [(0, 4)]
