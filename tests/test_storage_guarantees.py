"""The storage guarantees under concurrency: writers racing on the same fresh rows store
each row once, whatever the database's default isolation level, on every locking path.

Two writers here are two IngestWriters, each with its own connection, as two
``keelwave serve`` processes are; "fresh" steps are steps of runs nothing is
stored for yet, the case where both writers' duplicate checks find nothing and
only the run locks keep them apart.
"""

from __future__ import annotations

import asyncio
import uuid
from datetime import UTC, datetime

import aiohttp
import psycopg
import pytest
from conftest import (
    create_database,
    database_url,
    drop_database,
    make_project,
    make_settings,
    plain_lane_only,
    query,
    writer_lane,
)
from test_writer import step

from keelwave.server.app import create_app
from keelwave.server.store import lane as lane_module
from keelwave.server.store import statements
from keelwave.server.store.writer import IngestWriter


def run_row(project_id: str, run_id: uuid.UUID) -> tuple:
    return (uuid.UUID(project_id), run_id, "racer", None, datetime.now(UTC), None, None, [])


async def race(writers: list[IngestWriter], **rows: list[tuple]) -> None:
    """Every writer gets the same rows at the same moment."""
    await asyncio.gather(*(writer.write(**rows) for writer in writers))


def stored(db_url: str, project_id: str) -> tuple[int, int, int]:
    [(rows, distinct)] = query(
        db_url,
        "SELECT count(*), count(DISTINCT (run_id, step_index)) FROM agent_steps "
        "WHERE project_id = %s",
        (project_id,),
    )
    [(counted,)] = query(
        db_url,
        "SELECT coalesce(sum(step_count), 0) FROM agent_runs WHERE project_id = %s",
        (project_id,),
    )
    return rows, distinct, counted


@pytest.fixture
async def two_writers(db_url: str):
    """Two writers of one lane each: two server processes."""
    writers = [
        IngestWriter(db_url, 5000, 100_000, lanes=1, lane_class=writer_lane()) for _ in range(2)
    ]
    for writer in writers:
        writer.start()
    yield writers
    for writer in writers:
        await writer.close()


@plain_lane_only
@pytest.mark.parametrize("runs", [20, statements.FINE_LOCKS_UP_TO + 44])  # run locks; group locks
async def test_two_writers_store_the_same_fresh_steps_once(
    two_writers: list[IngestWriter], db_url: str, runs: int, monkeypatch
) -> None:
    """Both writers' checks find nothing stored; the run locks make the second wait for
    the first and then see its rows. Above FINE_LOCKS_UP_TO runs a flush locks whole
    groups of runs instead, and must keep the writers apart just the same."""
    taken: list[str] = []
    original = statements.lock_statement

    def recording(run_ids: set[int]) -> tuple[str, tuple]:
        sql, args = original(run_ids)
        taken.append(sql)
        return sql, args

    monkeypatch.setattr(statements, "lock_statement", recording)
    project = make_project(db_url)
    expected = 0
    for _ in range(4):
        run_ids = [uuid.uuid4() for _ in range(runs)]
        steps = [step(project.id, run_id, i) for run_id in run_ids for i in range(1, 6)]
        await race(two_writers, runs=[run_row(project.id, r) for r in run_ids], steps=steps)
        expected += len(steps)
    assert stored(db_url, project.id) == (expected, expected, expected)
    coarse = runs > statements.FINE_LOCKS_UP_TO
    assert set(taken) == {statements.LOCK_GROUPS_SQL if coarse else statements.LOCK_RUNS_SQL}


async def test_two_lanes_of_one_writer_store_the_same_fresh_steps_once(db_url: str) -> None:
    """One server process with two lanes: each lane takes one of the two requests."""
    project = make_project(db_url)
    per_request = 40 * 25
    writer = IngestWriter(
        db_url,
        flush_max_rows=per_request,
        buffer_max_rows=100_000,
        lanes=2,
        lane_class=writer_lane(),
    )
    writer.start()
    expected = 0
    try:
        for _ in range(5):
            run_ids = [uuid.uuid4() for _ in range(40)]
            steps = [step(project.id, run_id, i) for run_id in run_ids for i in range(1, 26)]
            await asyncio.gather(writer.write(steps=steps), writer.write(steps=list(steps)))
            expected += len(steps)
    finally:
        await writer.close()
    rows, distinct, _ = stored(db_url, project.id)
    assert rows == distinct == expected


@pytest.fixture
def repeatable_read_db(template_database: str):
    """A database whose sessions default to REPEATABLE READ, as some teams configure."""
    name = f"kw_rr_{uuid.uuid4().hex[:10]}"
    url = create_database(name, template=template_database)
    with psycopg.connect(database_url("postgres"), autocommit=True) as conn:
        conn.execute(
            f"ALTER DATABASE \"{name}\" SET default_transaction_isolation = 'repeatable read'"
        )
    yield url
    drop_database(name)


async def test_repeatable_read_by_default_still_stores_fresh_steps_once(
    repeatable_read_db: str,
) -> None:
    """Under REPEATABLE READ the second writer's snapshot would be taken before the
    lock wait and miss the first writer's rows; the writer pins READ COMMITTED."""
    [(level,)] = query(repeatable_read_db, "SHOW default_transaction_isolation")
    assert level == "repeatable read"
    project = make_project(repeatable_read_db)
    writers = [
        IngestWriter(repeatable_read_db, 5000, 100_000, lanes=1, lane_class=writer_lane())
        for _ in range(2)
    ]
    for writer in writers:
        writer.start()
    try:
        run_ids = [uuid.uuid4() for _ in range(50)]
        steps = [step(project.id, run_id, i) for run_id in run_ids for i in range(1, 21)]
        await race(writers, steps=steps)
        await race(writers, steps=steps)  # and a retry of them all
    finally:
        for writer in writers:
            await writer.close()
    rows, distinct, _ = stored(repeatable_read_db, project.id)
    assert rows == distinct == len(steps)


@plain_lane_only
async def test_staging_tables_are_truncated_and_nothing_is_lost(db_url: str, monkeypatch) -> None:
    """Past TRUNCATE_STAGES_AFTER_ROWS staged rows a flush empties the staging tables
    with TRUNCATE instead of DELETE; rows either side of it are all stored once."""
    truncated: list[bool] = []
    original = lane_module.Lane._truncate_now

    def recording(self, parts):
        answer = original(self, parts)
        truncated.append(answer)
        return answer

    monkeypatch.setattr(lane_module.Lane, "_truncate_now", recording)
    project = make_project(db_url)
    writer = IngestWriter(db_url, 5000, 100_000, lanes=1, lane_class=writer_lane())
    writer.start()
    run_ids = [uuid.uuid4() for _ in range(lane_module.TRUNCATE_STAGES_AFTER_ROWS + 500)]
    try:
        for first in range(0, len(run_ids), 400):
            chunk = run_ids[first : first + 400]
            await writer.write(runs=[run_row(project.id, run_id) for run_id in chunk])
            await writer.write(runs=[run_row(project.id, run_id) for run_id in chunk[:50]])
    finally:
        await writer.close()
    assert any(truncated) and not all(truncated)
    [(count, distinct)] = query(
        db_url,
        "SELECT count(*), count(DISTINCT id) FROM agent_runs WHERE project_id = %s",
        (project.id,),
    )
    assert count == distinct == len(run_ids)


async def test_repeatable_read_by_default_finishes_race_safely(
    repeatable_read_db: str, aiohttp_server
) -> None:
    """Finishes of the same runs at the same moment, through the server: both answered
    200 (no serialization failure passed on as 503), each run counted finished once."""
    app = create_app(make_settings(), repeatable_read_db)
    server = await aiohttp_server(app)
    project = make_project(repeatable_read_db)
    auth = project.auth()
    url = str(server.make_url("")).rstrip("/")
    run_ids = [str(uuid.uuid4()) for _ in range(30)]
    async with aiohttp.ClientSession(headers=auth) as session:

        async def post(path: str, body: object) -> int:
            async with session.post(url + path, json=body) as response:
                return response.status

        assert await post("/v1/ingest/agent/runs", [{"id": r, "agent_name": "rr"} for r in run_ids])
        finishes = [{"id": r, "termination_reason": "clean"} for r in run_ids]
        for _ in range(3):
            statuses = await asyncio.gather(
                *(post("/v1/ingest/agent/runs/finish", finishes) for _ in range(4))
            )
            assert statuses == [200] * 4
    [(finished,)] = query(
        repeatable_read_db,
        "SELECT sum(finished_runs) FROM agent_run_rollups WHERE project_id = %s",
        (project.id,),
    )
    assert finished == len(run_ids)
