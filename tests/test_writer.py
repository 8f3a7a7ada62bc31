"""The group-commit writer on its own: shared batches, rejected rows, staging upkeep."""

from __future__ import annotations

import asyncio
import uuid
from datetime import UTC, datetime

import pytest
from conftest import make_project, query

from keelwave.server import writer as writer_module
from keelwave.server.writer import IngestWriter, RowsRejected


def step(project_id: str, run_id: uuid.UUID, index: int, step_type: str = "tool_call") -> tuple:
    return (
        uuid.UUID(project_id), run_id, index, step_type, "grep", '{"q": 1}', None, None,
        b"\x01" * 32, datetime.now(UTC), 5.0, None,
    )  # fmt: skip


@pytest.fixture
async def writer(db_url: str):
    writer = IngestWriter(db_url, flush_max_rows=5000, buffer_max_rows=100_000)
    writer.start()
    yield writer
    await writer.close()


@pytest.mark.parametrize("rows_per_request", [1, writer_module.PIPELINED_ROWS + 1])
async def test_rows_the_database_rejects_fail_only_their_request(
    writer: IngestWriter, db_url: str, rows_per_request: int
) -> None:
    """Requests sharing a flush with a bad one are committed; the bad one alone fails.

    Both ways a flush stages rows are covered: a multi-row INSERT (few rows)
    and COPY (more than PIPELINED_ROWS).
    """
    project = make_project(db_url)
    good_runs = [uuid.uuid4() for _ in range(3)]
    bad_run = uuid.uuid4()

    def request(run_id: uuid.UUID, step_type: str = "tool_call") -> list[tuple]:
        return [step(project.id, run_id, i, step_type) for i in range(rows_per_request)]

    results = await asyncio.gather(
        writer.write(steps=request(good_runs[0])),
        writer.write(steps=request(bad_run, step_type="not-a-step-type")),  # fails a CHECK
        *(writer.write(steps=request(run_id)) for run_id in good_runs[1:]),
        return_exceptions=True,
    )
    assert [type(result) for result in results] == [type(None), RowsRejected, *[type(None)] * 2]
    assert "check constraint" in str(results[1])
    stored = dict(
        query(
            db_url,
            "SELECT run_id, count(*) FROM agent_steps WHERE project_id = %s GROUP BY 1",
            (project.id,),
        )
    )
    assert stored == {run_id: rows_per_request for run_id in good_runs}


async def test_many_small_flushes_store_every_row_once(writer: IngestWriter, db_url: str) -> None:
    """Past TRUNCATE_STAGES_AFTER_ROWS the staging tables are truncated; nothing is lost
    or repeated either side of it, retries included."""
    project = make_project(db_url)
    run_id = uuid.uuid4()
    total = writer_module.TRUNCATE_STAGES_AFTER_ROWS * 2 + 37
    for first in range(0, total, 50):
        rows = [step(project.id, run_id, i) for i in range(first, min(first + 50, total))]
        await writer.write(steps=rows)
        await writer.write(steps=rows[:5])  # a retry: already stored, skipped
    [(count, distinct)] = query(
        db_url,
        "SELECT count(*), count(DISTINCT step_index) FROM agent_steps WHERE project_id = %s",
        (project.id,),
    )
    assert count == distinct == total
