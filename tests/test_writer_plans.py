"""The writer's statements find rows of the big tables by index, never by reading them whole.

The writer's sessions plan with hash joins and sequential scans switched off and
with generic plans (lane.PLANNER_SETTINGS). Under those settings a statement can
still end up walking a whole index of agent_runs from end to end, as the first
version of FINISH_STAGED did (it filtered agent_runs against the staged finishes
instead of probing it for each): correct, and cheap on a young database, but
slower on every flush as the table grows. So the generic plan of every statement
the writer prepares is read here: each scan of agent_runs, agent_steps or
ai_traces must have an index condition.
"""

from __future__ import annotations

import json

import psycopg
import pytest
from conftest import make_project, plain_lane_only

from keelwave.server.store import lane, pgscript, statements

pytestmark = plain_lane_only

BIG_TABLES = {"agent_runs", "agent_steps", "ai_traces"}


def _whole_table_scans(plan: dict) -> list[str]:
    """The scans of a big table in ``plan`` (EXPLAIN's JSON) that have no index condition."""
    found = []
    kind = plan["Node Type"]
    whole = kind == "Seq Scan" or (
        kind in ("Index Scan", "Index Only Scan") and "Index Cond" not in plan
    )
    if whole and plan.get("Relation Name") in BIG_TABLES:
        found.append(f"{kind} on {plan['Relation Name']} {plan.get('Alias', '')}")
    for child in plan.get("Plans", ()):
        found += _whole_table_scans(child)
    return found


@pytest.fixture
def populated_db(db_url: str) -> str:
    """A database whose runs, steps and model calls outnumber any batch, analysed."""
    project = make_project(db_url)
    with psycopg.connect(db_url, autocommit=True) as conn:
        conn.execute(
            "INSERT INTO agent_runs (project_id, id, agent_name, started_at) "
            "SELECT %s, gen_random_uuid(), 'a' || n %% 7, now() - n * interval '1 second' "
            "FROM generate_series(1, 3000) AS n",
            (project.id,),
        )
        conn.execute(
            "INSERT INTO agent_steps (project_id, run_id, step_index, step_type, tool_name, "
            "started_at) SELECT project_id, id, n, 'tool_call', 'grep', started_at "
            "FROM agent_runs, generate_series(1, 5) AS n"
        )
        conn.execute(
            "INSERT INTO ai_traces (project_id, id, run_id, provider, model, started_at) "
            "SELECT project_id, gen_random_uuid(), id, 'openai', 'gpt-4o', started_at "
            "FROM agent_runs"
        )
        conn.execute("ANALYZE")
    return db_url


async def test_every_prepared_statement_probes_the_big_tables_by_index(populated_db) -> None:
    async with await psycopg.AsyncConnection.connect(populated_db, autocommit=True) as conn:
        for statement in (
            *(f"SET {setting}" for setting in lane.PLANNER_SETTINGS),
            *pgscript.SESSION,
            *statements.staging_ddl(lane.WRITER_STAGES),
            statements.FINISH_STAGING_DDL,
            statements.GUARD_DDL,
        ):
            await conn.execute(statement)
        names = await pgscript.prepare(conn, lane.PREPARED)
        problems = {}
        for sql, name in names.items():
            parameters = pgscript._parameters(sql)
            count = parameters if isinstance(parameters, int) else len(parameters)
            arguments = f"({', '.join(['NULL'] * count)})" if count else ""
            [(plan,)] = await (
                await conn.execute(f"EXPLAIN (FORMAT JSON) EXECUTE {name}{arguments}")
            ).fetchall()
            plan = plan if isinstance(plan, list) else json.loads(plan)
            if scans := _whole_table_scans(plan[0]["Plan"]):
                problems[name] = scans
    assert problems == {}
