"""Finished runs' tool calls wait in agent_tool_rollups_pending until a fold moves them
into the tool rollups (store/pending_tools.py). Whenever the fold comes, what users
see is the same: /tools counts the pending rows, an erasure leaves no trace of its
runs, a recount and retention leave nothing pending that would count twice."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from datetime import timedelta

import psycopg
import pytest
from conftest import ON_CITUS, Api, fold_pending_tool_rollups, make_project, query, serving
from lifecycle_data import NOW, Run, dataset, judged, send
from otlp_exports import document, split
from psycopg_pool import AsyncConnectionPool

from keelwave.server.store import daily_rollups, pending_tools, retention, rollup_shards, statements
from keelwave.server.store.recount import recount

pytestmark = pytest.mark.skipif(ON_CITUS, reason="on Citus the writer merges tool calls at once")

SINCE, UNTIL = NOW - timedelta(days=1), NOW + timedelta(hours=1)


@pytest.fixture
async def api(db_url: str, aiohttp_server, monkeypatch) -> AsyncIterator[Api]:
    """A real server whose fold does not come during the test: what is pending stays."""
    monkeypatch.setattr(pending_tools, "FOLD_SECONDS", 3600.0)
    async with serving(db_url, aiohttp_server, 64 * 1024) as running:
        yield running


def pending(db_url: str, project_id: str) -> int:
    [(count,)] = query(
        db_url,
        f"SELECT count(*) FROM {pending_tools.PENDING} WHERE project_id = %s",
        (project_id,),
    )
    return count


def tool_rollup_rows(db_url: str, project_id: str, with_pending: bool = False) -> list[tuple]:
    """The project's tool rollups summed by key; ``with_pending``: what they count folded
    or not, their pending rows added (keys that then count no call left out)."""
    columns = "tool_name, bucket, duration_bin, calls, runs, repeated_calls, error_calls"
    rows = f"SELECT {columns} FROM agent_tool_rollups WHERE project_id = %(p)s"
    if with_pending:
        rows += f" UNION ALL SELECT {columns} FROM {pending_tools.PENDING} WHERE project_id = %(p)s"
    return query(
        db_url,
        "SELECT tool_name, bucket, duration_bin, sum(calls), sum(runs), sum(repeated_calls), "
        f"sum(error_calls) FROM ({rows}) AS parts GROUP BY 1, 2, 3 "
        f"{'HAVING sum(calls) <> 0 ' if with_pending else ''}ORDER BY 1, 2, 3",
        {"p": project_id},
    )


async def tools(api: Api, project, since=SINCE, until=UNTIL) -> dict:
    status, body, _ = await api.get(
        f"/v1/projects/{project.id}/agent/tools",
        params={"since": since.isoformat(), "until": until.isoformat()},
        headers=project.auth(),
    )
    assert status == 200, body
    return {tool["tool_name"]: tool for tool in body["data"]}


async def test_tools_counts_what_is_pending_as_it_counts_it_once_folded(api, db_url) -> None:
    project = make_project(db_url)
    runs = [run for run in dataset(seed=11, count=12) if run.reason and run.steps]
    await send(api, project, runs)
    assert pending(db_url, project.id) > 0
    assert tool_rollup_rows(db_url, project.id) == []  # nothing folded yet

    before = await tools(api, project)
    assert sum(tool["calls"] for tool in before.values()) == sum(run.steps for run in runs)
    fold_pending_tool_rollups(db_url)
    assert pending(db_url, project.id) == 0
    assert tool_rollup_rows(db_url, project.id) != []
    assert await tools(api, project) == before


async def test_runs_sent_as_opentelemetry_spans_leave_their_tool_calls_pending_too(
    api, db_url
) -> None:
    """OTLP ingest appends what finished runs add to the tool rollups as the writer does
    (store/traces.py), late spans that renumber a finished run included (exports split,
    shuffled, some sent twice): /tools counts them before the fold as after it, and the
    fold leaves what a recount makes."""
    project = make_project(db_url)
    for name in ("openaiagents_loop", "langgraph_nested", "pydanticai_tool_error"):
        for export in split(document(name), seed=len(name)):
            async with api.session.post(
                api.url + "/v1/traces", json=export, headers=project.auth("ingest")
            ) as response:
                assert response.status == 200, await response.text()
    await judged(db_url, project.id)  # (the keeper's saves do not meet the recount below)
    assert pending(db_url, project.id) > 0
    assert tool_rollup_rows(db_url, project.id) == []  # nothing merged by the exports
    [(since, until, calls)] = query(
        db_url,
        "SELECT min(r.started_at) - interval '1 hour', max(r.started_at) + interval '1 hour', "
        "count(s.tool_name) FROM agent_runs r LEFT JOIN agent_steps s "
        "ON s.project_id = r.project_id AND s.run_id = r.id "
        "WHERE r.project_id = %s AND r.ended_at IS NOT NULL",
        (project.id,),
    )
    before = await tools(api, project, since, until)
    assert sum(tool["calls"] for tool in before.values()) == calls > 0
    counted = tool_rollup_rows(db_url, project.id, with_pending=True)

    fold_pending_tool_rollups(db_url)
    assert pending(db_url, project.id) == 0
    assert tool_rollup_rows(db_url, project.id) == counted
    assert await tools(api, project, since, until) == before

    def recounted() -> None:  # (in a thread: the server in this event loop keeps going)
        with psycopg.connect(db_url, autocommit=True) as conn:
            recount(conn, project.id)

    await asyncio.to_thread(recounted)
    assert tool_rollup_rows(db_url, project.id) == counted


async def test_folding_twice_at_once_counts_every_row_once(api, db_url) -> None:
    project = make_project(db_url)
    runs = [run for run in dataset(seed=12, count=12) if run.reason and run.steps]
    await send(api, project, runs)
    expected = await tools(api, project)
    # Two folds (two servers) racing over the same rows: each takes what the other did not.
    await asyncio.gather(
        asyncio.to_thread(fold_pending_tool_rollups, db_url),
        asyncio.to_thread(fold_pending_tool_rollups, db_url),
    )
    assert pending(db_url, project.id) == 0
    assert await tools(api, project) == expected


def connections_in_two_shards(db_url: str) -> list[psycopg.Connection]:
    """Two connections whose backends fall in different rollup shards (rollup_shards.py)."""
    opened: dict[int, psycopg.Connection] = {}
    while len(opened) < 2:
        conn = psycopg.connect(db_url, autocommit=True)
        [(shard,)] = conn.execute(f"SELECT {rollup_shards.SHARD}").fetchall()
        if shard in opened:
            conn.close()
        else:
            opened[shard] = conn
    return list(opened.values())


async def test_folds_on_any_connection_keep_one_row_a_key(api, db_url) -> None:
    """The fold is the tool rollups' writer (the reaper's and erasure's merges aside), once
    a second, so it has no one to share a row with: whichever pool connection it runs on,
    a key keeps one row, and a month of /tools reads one row a (tool, bin, day or week),
    not one a shard."""
    project = make_project(db_url)
    runs = [run for run in dataset(seed=14, count=24, span=timedelta(hours=1)) if run.steps]
    first, second = connections_in_two_shards(db_url)
    days = (
        f"SELECT day, tool_name, duration_bin FROM {daily_rollups.TOOLS.daily} "
        "WHERE project_id = %s"
    )
    pending_days = (
        f"SELECT DISTINCT date_trunc('day', bucket, 'UTC'), tool_name, duration_bin "
        f"FROM {pending_tools.PENDING} WHERE project_id = %s"
    )
    try:
        await send(api, project, runs[: len(runs) // 2])
        first.execute(statements.one_round_trip(pending_tools.FOLD))
        await send(api, project, runs[len(runs) // 2 :])
        # (else the test could not fail: the second fold must add to keys the first made)
        assert set(query(db_url, days, (project.id,))) & set(
            query(db_url, pending_days, (project.id,))
        )
        expected = await tools(api, project)
        second.execute(statements.one_round_trip(pending_tools.FOLD))
    finally:
        first.close()
        second.close()
    for table, time in (
        (daily_rollups.TOOLS.hourly, "bucket"),
        (daily_rollups.TOOLS.daily, "day"),
        (daily_rollups.TOOLS.weekly, "week"),
    ):
        rows = query(
            db_url,
            f"SELECT {time}, tool_name, duration_bin, count(*) FROM {table} "
            f"WHERE project_id = %s GROUP BY 1, 2, 3 HAVING count(*) > 1",
            (project.id,),
        )
        assert rows == [], f"{table}: keys in more than one row: {rows}"
    assert pending(db_url, project.id) == 0
    assert await tools(api, project) == expected


async def test_an_erasure_takes_pending_calls_in_and_leaves_no_trace(api, db_url) -> None:
    project = make_project(db_url)
    run = Run(NOW - timedelta(hours=3))
    run.reason, run.steps = "clean", 5
    await send(api, project, [run])
    await judged(db_url, project.id)
    assert pending(db_url, project.id) > 0

    status, body, _ = await api.request(
        "DELETE", f"/v1/projects/{project.id}/agent/runs/{run.id}", headers=project.auth()
    )
    assert status == 200, body
    fold_pending_tool_rollups(db_url)
    assert pending(db_url, project.id) == 0
    assert tool_rollup_rows(db_url, project.id) == []
    assert query(
        db_url, "SELECT count(*) FROM agent_tool_rollups_daily WHERE project_id = %s", (project.id,)
    ) == [(0,)]


async def test_a_recount_counts_pending_calls_once(api, db_url) -> None:
    project = make_project(db_url)
    await send(api, project, dataset(seed=13, count=16))
    await judged(db_url, project.id)
    assert pending(db_url, project.id) > 0
    counted = tool_rollup_rows(db_url, project.id, with_pending=True)
    with psycopg.connect(db_url, autocommit=True) as conn:
        recount(conn, project.id)
    assert pending(db_url, project.id) == 0
    assert tool_rollup_rows(db_url, project.id) == counted


async def test_retention_forgets_pending_calls_of_the_hours_it_deletes(api, db_url) -> None:
    project = make_project(db_url)
    old, kept = Run(NOW - timedelta(days=40)), Run(NOW - timedelta(hours=2))
    for run in (old, kept):
        run.reason, run.steps = "clean", 3
    await send(api, project, [old, kept])  # (no retention yet: the old run is stored)
    status, body, _ = await api.request(
        "PATCH", f"/v1/projects/{project.id}", json={"retention_days": 30},
        headers=project.auth(),
    )  # fmt: skip
    assert status == 200, body
    async with AsyncConnectionPool(db_url, kwargs={"autocommit": True}, open=False) as pool:
        while await retention.enforce(pool) is None:  # (the server's own round may hold it)
            await asyncio.sleep(0.2)
    fold_pending_tool_rollups(db_url)
    buckets = query(
        db_url,
        "SELECT DISTINCT bucket FROM agent_tool_rollups WHERE project_id = %s",
        (project.id,),
    )
    assert buckets == [(kept.started.replace(minute=0, second=0),)]  # the old hour stays gone
