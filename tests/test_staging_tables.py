"""The rollup staging tables of pooled transactions (statements.rollup_staging): every
transaction finds them empty, whatever an earlier one on the session left, and they
stay small though nothing vacuums temporary tables."""

from __future__ import annotations

from datetime import UTC, datetime

import psycopg
import pytest
from conftest import Project, query

from keelwave.server.store import statements

HOUR = datetime(2026, 12, 1, 10, tzinfo=UTC)
STAGE_RUN = (
    "INSERT INTO kw_stage_rollups (project_id, agent_name, bucket, runs, steps) "
    "SELECT %s, 'agent', %s, 1, 2 FROM generate_series(1, %s)"
)


def counted(db_url: str, project: Project) -> tuple[int, int]:
    [(runs, steps)] = query(
        db_url,
        "SELECT coalesce(sum(runs), 0)::int, coalesce(sum(steps), 0)::int "
        "FROM agent_run_rollups WHERE project_id = %s",
        (project.id,),
    )
    return runs, steps


async def test_a_transaction_never_merges_rows_an_earlier_one_left_staged(
    db_url: str, project: Project
) -> None:
    async with await psycopg.AsyncConnection.connect(db_url, autocommit=True) as conn:
        async with statements.transaction(conn):  # stages a run and commits, unmerged
            await conn.execute(STAGE_RUN, (project.id, HOUR, 1))
        async with statements.transaction(conn):
            await conn.execute(STAGE_RUN, (project.id, HOUR, 3))
            await conn.execute(statements.MERGE_ROLLUPS)
        await conn.execute(statements.one_round_trip(statements.MERGE_ROLLUPS))
    assert counted(db_url, project) == (3, 6)


async def test_the_staging_tables_stay_small_and_count_every_row_once(
    db_url: str, project: Project, monkeypatch: pytest.MonkeyPatch
) -> None:
    """DELETE leaves dead rows behind that no vacuum takes away: now and then a
    transaction truncates the tables instead (here one in four, on average)."""
    monkeypatch.setattr(statements, "TRUNCATE_ONE_IN", 4)
    transactions, rows = 300, 60
    async with await psycopg.AsyncConnection.connect(db_url, autocommit=True) as conn:
        for _ in range(transactions):
            async with statements.transaction(conn):
                await conn.execute(STAGE_RUN, (project.id, HOUR, rows))
                await conn.execute(statements.MERGE_ROLLUPS)
        size = await (await conn.execute("SELECT pg_relation_size('kw_stage_rollups')")).fetchone()
    assert counted(db_url, project) == (transactions * rows, 2 * transactions * rows)
    # Never truncated, they would hold 18,000 dead rows (about 4 MB); a run of 60
    # transactions without a truncation, about 1 MB, has odds of 3 in 100 million.
    assert size[0] < 1.5 * 1024 * 1024, size
