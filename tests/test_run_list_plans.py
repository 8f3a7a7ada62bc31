"""The runs list sorted by duration, steps or tokens reads its page off an index (0028)
and the few runs still going, not every run of the project: before, each page (and the
dashboard refreshes its first every few seconds) sorted all of them, 3–12 s on 2.5
million runs. The pages must be what sorting every run gives, cursor after cursor."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import aiohttp
import psycopg
import pytest
from conftest import (
    ON_CITUS,
    Api,
    create_database,
    drop_database,
    make_project,
    make_settings,
)
from psycopg.rows import dict_row
from test_run_calls import rows_touched
from test_run_explorer_api import finish, ok, start, steps

from keelwave.server.app import create_app
from keelwave.server.query import run_containment
from keelwave.server.query.run_list import SPLIT_SORTS, Order, page_statements

FINISHED, GOING = 20_000, 200
LIMIT = 50
# Runs with values that tie often (steps, tokens and durations from small ranges), so
# the order leans on started_at and id; every 7th started at the same moment as the
# one before. Runs still going have no end or duration, and steps and tokens among the
# finished runs' (their page merges with the index's); one finished run in a thousand
# has no duration (loaded by hand, say).
_RUNS = f"""
INSERT INTO agent_runs (project_id, id, agent_name, started_at, ended_at, duration_ms,
                        termination_reason, step_count, input_tokens, output_tokens,
                        last_activity_at)
SELECT %(project)s, md5(n::text)::uuid, 'agent-' || (n %% 5),
       timestamptz '2026-11-01' + make_interval(secs => n - (n %% 7 = 0)::int),
       CASE WHEN n <= {FINISHED} THEN timestamptz '2026-11-02' END,
       CASE WHEN n <= {FINISHED} AND n %% 1000 <> 0 THEN (n * 7919 %% 500)::float8 / 4 END,
       CASE WHEN n <= {FINISHED} THEN 'clean' END,
       n * 104729 %% 300, n * 31 %% 1000, n %% 17, timestamptz '2026-11-02'
FROM generate_series(1, {FINISHED + GOING}) n
"""


@pytest.fixture(scope="module")
def listed(db_url: str) -> tuple[str, uuid.UUID]:
    """The runs, analysed: the planner chooses by its statistics, and a project they
    do not know yet looks small (then sorting its runs is its choice, and cheap while
    that is true; autovacuum analyses the table as it grows)."""
    project = uuid.UUID(make_project(db_url).id)
    with psycopg.connect(db_url, autocommit=True) as conn:
        conn.execute(_RUNS, {"project": project})
        conn.execute("ANALYZE agent_runs")
    return db_url, project


def _value(sort: str, row: dict[str, Any]) -> Any:
    if sort == "tokens":
        return row["input_tokens"] + row["output_tokens"]
    return row[sort]


def _everything(conn: psycopg.Connection, project: uuid.UUID, sort: str, way: str) -> list:
    """Every run of the project in the list's order, sorted here: values first, in
    ``way``, ties by start then id the same way; runs without a value last."""
    rows = conn.execute(
        "SELECT id, started_at, duration_ms, step_count, input_tokens, output_tokens, agent_name "
        "FROM agent_runs WHERE project_id = %s",
        (project,),
    ).fetchall()
    valued = [row for row in rows if _value(sort, row) is not None]
    valued.sort(key=lambda r: (_value(sort, r), r["started_at"], r["id"]), reverse=way == "desc")
    missing = [row for row in rows if _value(sort, row) is None]
    missing.sort(key=lambda r: (r["started_at"], r["id"]), reverse=way == "desc")
    return [row["id"] for row in valued + missing]


def _page(conn: psycopg.Connection, project: uuid.UUID, order: Order, cursor: Any, plans: list):
    """One page as the list reads it (run_list.page_statements), each statement's plan
    added to ``plans``; and the cursor of its last row."""
    args: dict[str, Any] = {"project": project, "stall": timedelta(minutes=5), "limit": LIMIT + 1}
    after = order.after(cursor, args) if cursor else None
    rows: list[dict] = []
    for sql in page_statements(order, [run_containment.PROJECT], after):
        [plan] = conn.execute("EXPLAIN (ANALYZE, FORMAT JSON) " + sql, args).fetchone().values()
        plans.append(plan[0]["Plan"])
        rows += conn.execute(sql, args).fetchall()
        if len(rows) >= LIMIT + 1:
            break
    more = len(rows) > LIMIT
    rows = rows[:LIMIT]
    if not more:
        return rows, None
    row = rows[-1]
    value = row["sort_value"]
    return rows, [f"{order.sort}:{order.direction}",
                  "null" if value is None else f"v:{value}",
                  row["started_at"].isoformat(), str(row["id"])]  # fmt: skip


@pytest.mark.parametrize("way", ["desc", "asc"])
# (agent_name: migration 0030's index, in the list's order both ways; before, the first
# agent's runs were read and sorted for each page, 4,040 here)
@pytest.mark.parametrize("sort", [*SPLIT_SORTS, "agent_name"])
def test_sorted_pages_read_an_index_not_every_run(listed, sort, way):
    db_url, project = listed
    order = Order(sort, way)
    with psycopg.connect(db_url, autocommit=True, row_factory=dict_row) as conn:
        want = _everything(conn, project, sort, way)
        # The first pages, pages deep in the list, and the last ones (where the runs
        # without a duration follow those with one): from a cursor built off the
        # expected order's rows, as next_cursor would be.
        starts = [0, 1, 7_000, FINISHED - LIMIT - 30, FINISHED - 30, FINISHED + GOING - LIMIT // 2]
        for start in starts:
            plans: list[dict] = []
            cursor = None
            if start:
                _, cursor = _page(conn, project, order, None, [])
                first = conn.execute(
                    "SELECT *, input_tokens + output_tokens AS tokens FROM agent_runs "
                    "WHERE project_id = %s AND id = %s",
                    (project, want[start - 1]),
                ).fetchone()
                value = _value(sort, first)
                cursor = [cursor[0], "null" if value is None else f"v:{value}",
                          first["started_at"].isoformat(), str(first["id"])]  # fmt: skip
            rows, _ = _page(conn, project, order, cursor, plans)
            assert [row["id"] for row in rows] == want[start : start + LIMIT], (start, plans)
            touched = sum(rows_touched(plan) for plan in plans)
            # The page, its child counts, the runs still going: not the 20,000 finished.
            assert touched < 4 * (LIMIT + GOING), (start, touched, plans)


@pytest.fixture
def new_db_url(template_database: str) -> Iterator[str]:
    """A database as the first `keelwave serve` finds it: migrated, empty, never analysed."""
    name = f"kw_new_{uuid.uuid4().hex[:12]}"
    yield create_database(name, template=template_database)
    drop_database(name)


@pytest.mark.skipif(
    ON_CITUS, reason="on Citus the lookups run on the shards: the coordinator counts no scan"
)
async def test_ingest_never_reads_the_sorts_indexes(new_db_url, aiohttp_server):
    """The writer's lookups of runs by id (is this run ended?) must not be answered from
    a sort's index, which holds a project's ended runs in another order: the planner
    took one for cheaper than the id index while the tables were new (its prepared
    plans last as long as its connections, or until the next ANALYZE), and read every
    ended run of the project for each lookup (the agent-shaped flush cost twice as
    much in bench/flush_cost.py). The sorts' indexes hold runs with a duration."""
    project = make_project(new_db_url)
    server = await aiohttp_server(create_app(make_settings(max_body_bytes=64 * 1024), new_db_url))
    async with aiohttp.ClientSession() as session:
        api = Api(str(server.make_url("")).rstrip("/"), session)
        for n in range(40):
            run = await start(api, project, "agent", n)
            for batch in range(2):
                specs = [{"step_index": 1 + batch * 5 + i, "tool_name": "search",
                          "tool_input": {"q": f"{n} {batch} {i}"}} for i in range(5)]  # fmt: skip
                await steps(api, project, run, *specs)
            call = {"provider": "openai", "model": "m", "run_id": run, "input_tokens": 10}
            await ok(api, "/v1/ingest/ai", call, project)
            await finish(api, project, run, n + 1)
    await server.close()
    with psycopg.connect(new_db_url, autocommit=True) as conn:
        # A backend's statistics are in once it has exited: wait for the server's.
        for _ in range(600):
            others = conn.execute(
                "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
                "AND backend_type = 'client backend' AND pid <> pg_backend_pid()"
            ).fetchone()[0]
            if not others:
                break
            time.sleep(0.05)
        else:
            pytest.fail("the server's connections were still open 30 s after it stopped")
        conn.execute("SELECT pg_stat_clear_snapshot()")
        scans = dict(
            conn.execute(
                "SELECT indexrelname, idx_scan FROM pg_stat_user_indexes "
                "WHERE indexrelname = ANY(%s)",
                ([f"agent_runs_{name}_idx" for name in ("duration", "steps", "tokens")],),
            ).fetchall()
        )
    assert scans and set(scans.values()) == {0}, scans
