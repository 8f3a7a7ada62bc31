"""The writer's statements find rows of the big tables by index, never by reading them whole.

The writer's sessions plan with hash joins and sequential scans switched off and
with generic plans (lane.PLANNER_SETTINGS). Under those settings a statement can
still end up walking a whole index of agent_runs from end to end, as the first
version of FINISH_STAGED did (it filtered agent_runs against the staged finishes
instead of probing it for each): correct, and cheap on a young database, but
slower on every flush as the table grows. So the generic plan of every statement
the writer prepares is read here: each scan of agent_runs, agent_steps or
ai_traces must probe an index: fix its first two columns, not read a range of
the project's rows, as an index of a project's runs in another order does when
the id is a condition on its last column (test_run_list_plans.py has that case on
a new database, where the planner chose such a plan).
"""

from __future__ import annotations

import json
import re

import psycopg
import pytest
from conftest import make_project, plain_lane_only

from keelwave.server.store import lane, pgscript, statements

pytestmark = plain_lane_only

BIG_TABLES = {"agent_runs", "agent_steps", "ai_traces"}


# Each index of the big tables: its key columns, in order (pg_get_indexdef's words).
_KEYS = """
SELECT c.relname, array_agg(pg_get_indexdef(i.indexrelid, k, true) ORDER BY k)
FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid
JOIN pg_class t ON t.oid = i.indrelid, generate_series(1, i.indnkeyatts) AS k
WHERE t.relname = ANY(%s) GROUP BY c.relname
"""


def _probes(condition: str, keys: list[str]) -> bool:
    """Whether an index condition fixes the index's first two key columns (both, for an
    index of two): anything less reads a range of the project's rows, not the rows
    asked for."""
    compared = set(re.findall(r"\((\w+) [=<>]", condition))
    return all(key in compared for key in keys[:2])


def _whole_table_scans(plan: dict, indexes: dict[str, list[str]]) -> list[str]:
    """The scans of a big table in ``plan`` (EXPLAIN's JSON) that have no index
    condition, or one that does not probe the index for the rows it needs (``indexes``:
    each big table's indexes' key columns)."""
    found = []
    kind = plan["Node Type"]
    index = plan.get("Index Name")
    if kind == "Seq Scan" and plan.get("Relation Name") in BIG_TABLES:
        found.append(f"{kind} on {plan['Relation Name']}")
    elif index in indexes and not _probes(plan.get("Index Cond", ""), indexes[index]):
        found.append(f"{kind} using {index}: {plan.get('Index Cond', 'no condition')}")
    for child in plan.get("Plans", ()):
        found += _whole_table_scans(child, indexes)
    return found


@pytest.fixture
def populated_db(db_url: str) -> str:
    """A database whose runs, steps and model calls outnumber any batch, analysed; most
    runs have ended."""
    project = make_project(db_url)
    with psycopg.connect(db_url, autocommit=True) as conn:
        conn.execute(
            "INSERT INTO agent_runs (project_id, id, agent_name, started_at, ended_at, "
            "duration_ms, termination_reason, step_count, input_tokens) "
            "SELECT %s, gen_random_uuid(), 'a' || n %% 7, now() - n * interval '1 second', "
            "CASE WHEN n > 100 THEN now() END, CASE WHEN n > 100 THEN n END, "
            "CASE WHEN n > 100 THEN 'clean' END, 5, n "
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
        found = await conn.execute(_KEYS, (list(BIG_TABLES),))
        indexes = dict(await found.fetchall())
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
            if scans := _whole_table_scans(plan[0]["Plan"], indexes):
                problems[name] = scans
    assert problems == {}
