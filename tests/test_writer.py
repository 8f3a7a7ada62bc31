"""The group-commit writer on its own: shared batches, rejected rows, staging upkeep."""

from __future__ import annotations

import asyncio
import json
import uuid
from datetime import UTC, datetime

import pytest
from conftest import (
    fold_pending_tool_rollups,
    make_project,
    plain_lane_only,
    query,
    writer_lane,
)

from keelwave.server.findings.sketch import stored_sketch
from keelwave.server.store import lane as lane_module
from keelwave.server.store.lifecycle import Finish, finish_row
from keelwave.server.store.writer import IngestWriter, RowsRejected

# The sizes below take both ways rows travel: values in the script's text, and COPY.
assert 4 * 3 <= lane_module.INLINE_ROWS < 70


def step(project_id: str, run_id: uuid.UUID, index: int, step_type: str = "tool_call") -> tuple:
    return (
        uuid.UUID(project_id), run_id, index, step_type, "grep", b'{"q": 1}', None, None,
        b"\x01" * 32, datetime.now(UTC), 5.0, None, None, stored_sketch("grep", b'{"q": 1}'),
    )  # fmt: skip


@pytest.fixture
async def writer(db_url: str):
    writer = IngestWriter(
        db_url, flush_max_rows=5000, buffer_max_rows=100_000, lane_class=writer_lane()
    )
    writer.start()
    yield writer
    await writer.close()


@pytest.mark.parametrize("path", ["direct", "staged"])
@pytest.mark.parametrize("rows", [2, 80])
async def test_rows_the_database_rejects_fail_only_their_request(
    writer: IngestWriter, db_url: str, path: str, rows: int
) -> None:
    """Requests sharing a flush with a bad one are committed; the bad one alone fails.

    Every way steps are written is covered: straight into agent_steps or
    staged (when a step of the batch may be stored already), as values in the
    script's text (a few) or by COPY (more than INLINE_ROWS).
    """
    project = make_project(db_url)
    good_runs = [uuid.uuid4() for _ in range(3)]
    bad_run = uuid.uuid4()
    if path == "staged":  # every run has a step stored in the range the batch covers
        await writer.write(steps=[step(project.id, run_id, 0) for run_id in [*good_runs, bad_run]])

    def request(run_id: uuid.UUID, step_type: str = "tool_call") -> list[tuple]:
        return [step(project.id, run_id, i, step_type) for i in range(rows)]

    results = await asyncio.gather(
        writer.write(steps=request(good_runs[0])),
        writer.write(steps=request(bad_run, step_type="not-a-step-type")),  # fails a CHECK
        *(writer.write(steps=request(run_id)) for run_id in good_runs[1:]),
        return_exceptions=True,
    )
    assert [type(result) for result in results] == [list, RowsRejected, *[list] * 2]
    assert "check constraint" in str(results[1])
    stored = dict(
        query(
            db_url,
            "SELECT run_id, count(*) FROM agent_steps WHERE project_id = %s GROUP BY 1",
            (project.id,),
        )
    )
    assert stored == {run_id: rows for run_id in good_runs} | (
        {bad_run: 1} if path == "staged" else {}
    )


async def test_many_small_flushes_store_every_row_once(writer: IngestWriter, db_url: str) -> None:
    """Past TRUNCATE_STAGES_AFTER_ROWS the staging tables are truncated; nothing is lost
    or repeated either side of it, retries included."""
    project = make_project(db_url)
    run_id = uuid.uuid4()
    total = lane_module.TRUNCATE_STAGES_AFTER_ROWS * 2 + 37
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


@pytest.mark.parametrize("count", [3, 70])  # values in the script's text, or COPY
@pytest.mark.parametrize("steps_path", ["direct", "staged"])
async def test_every_value_is_stored_as_sent(
    api, project, db_url: str, count: int, steps_path: str
) -> None:
    """Runs, steps and model calls, staged or (steps) straight into agent_steps: JSON
    payloads stay JSON, and every column holds what was sent."""
    runs = [
        {"id": str(uuid.uuid4()), "agent_name": "exact", "started_at": "2026-11-30T08:00:00Z",
         "input": {"task": f"t{n}", "nested": [1, 2.5, None]}, "metadata": {"n": n},
         "tags": ["a", f"t{n}"]}
        for n in range(count)
    ]  # fmt: skip
    run_id = runs[0]["id"]
    steps = [
        {"run_id": run_id, "step_index": n, "tool_name": "grep", "tool_input": {"q": f"é{n}"},
         "tool_output": ["x", {"y": n}], "content": "naïve\ttab", "duration_ms": 12,
         "started_at": "2026-11-30T08:00:01Z", "error": "boom" if n == 1 else None}
        for n in range(count)
    ]  # fmt: skip
    calls = [
        {"run_id": run_id, "step_index": n, "provider": "openai", "model": "gpt-4o",
         "input_tokens": 3_000_000_000, "output_tokens": n, "cost_usd": 0.5,
         "latency_ms": 7, "started_at": "2026-11-30T08:00:02Z"}
        for n in range(count)
    ]  # fmt: skip
    for path, body in (("runs", runs), ("steps", steps), ("ai", calls)):
        url = f"/v1/ingest/agent/{path}" if path != "ai" else "/v1/ingest/ai"
        if path == "steps" and steps_path == "staged":  # late steps of a finished run
            finish = {"termination_reason": "clean", "ended_at": "2026-11-30T09:00:00Z"}
            status, _, _ = await api.post(
                f"/v1/ingest/agent/runs/{run_id}/finish", json=finish, headers=project.auth()
            )
            assert status == 200
        status, answer, _ = await api.post(url, json=body, headers=project.auth())
        assert status in (200, 201), answer

    stored_runs = query(
        db_url,
        "SELECT input::text, metadata::text, tags, step_count, llm_calls FROM agent_runs "
        "WHERE project_id = %s ORDER BY (metadata->>'n')::int",
        (project.id,),
    )
    assert [(json.loads(i), json.loads(m), t) for i, m, t, *_ in stored_runs] == [
        (run["input"], run["metadata"], run["tags"]) for run in runs
    ]
    assert stored_runs[0][3:] == (count, count)  # the counters saw every step and call
    stored_steps = query(
        db_url,
        "SELECT tool_input::text, tool_output::text, content, duration_ms, error "
        "FROM agent_steps WHERE project_id = %s ORDER BY step_index",
        (project.id,),
    )
    assert [(json.loads(i), json.loads(o), c, d, e) for i, o, c, d, e in stored_steps] == [
        (s["tool_input"], s["tool_output"], s["content"], 12.0, s["error"]) for s in steps
    ]
    stored_calls = query(
        db_url,
        "SELECT input_tokens, output_tokens, cost_usd, latency_ms FROM ai_traces "
        "WHERE project_id = %s ORDER BY step_index",
        (project.id,),
    )
    assert stored_calls == [(3_000_000_000, n, 0.5, 7.0) for n in range(count)]


async def test_many_late_steps_of_a_finished_run_update_its_tool_rollups(
    api, project, db_url: str
) -> None:
    """A batch for a run that has finished takes the staged path, which moves the
    run's share of the tool rollups; the direct path is for runs still going."""
    _, body, _ = await api.post(
        "/v1/ingest/agent/runs", json={"agent_name": "late"}, headers=project.auth()
    )
    run_id = body["data"]["id"]

    def steps(first: int, count: int) -> list[dict]:
        return [{"run_id": run_id, "step_index": n, "tool_name": "grep", "tool_input": {"q": n}}
                for n in range(first, first + count)]  # fmt: skip

    big = 74
    await api.post("/v1/ingest/agent/steps", json=steps(0, big), headers=project.auth())
    await api.post(
        f"/v1/ingest/agent/runs/{run_id}/finish",
        json={"termination_reason": "clean"},
        headers=project.auth(),
    )
    await api.post("/v1/ingest/agent/steps", json=steps(big, big), headers=project.auth())
    await api.post("/v1/ingest/agent/steps", json=steps(big, big), headers=project.auth())  # again
    [(step_count,)] = query(
        db_url, "SELECT step_count FROM agent_runs WHERE id = %s", (uuid.UUID(run_id),)
    )
    fold_pending_tool_rollups(db_url)
    [(calls, runs)] = query(
        db_url,
        "SELECT sum(calls), sum(runs) FROM agent_tool_rollups WHERE project_id = %s",
        (project.id,),
    )
    assert (step_count, calls, runs) == (2 * big, 2 * big, 1)


async def test_a_run_and_many_of_its_steps_in_one_flush_count_each_step_once(
    writer: IngestWriter, db_url: str
) -> None:
    """Steps COPYed straight into agent_steps before their run row exists: the run,
    inserted in the same transaction, counts them, and nothing counts them twice."""
    project = make_project(db_url)
    run_id = uuid.uuid4()
    count = 84
    run = (uuid.UUID(project.id), run_id, "same-flush", None, datetime.now(UTC), None, None, [])
    await asyncio.gather(
        writer.write(steps=[step(project.id, run_id, i) for i in range(count)]),
        writer.write(runs=[run]),
        writer.write(steps=[step(project.id, run_id, i) for i in range(count // 2)]),  # retried
    )
    [(step_count,)] = query(db_url, "SELECT step_count FROM agent_runs WHERE id = %s", (run_id,))
    [(rollup_runs, rollup_steps)] = query(
        db_url,
        "SELECT sum(runs), sum(steps) FROM agent_run_rollups WHERE project_id = %s",
        (project.id,),
    )
    assert (step_count, rollup_runs, rollup_steps) == (count, 1, count)


async def test_a_large_batch_sent_again_is_stored_once(writer: IngestWriter, db_url: str) -> None:
    """A retry of many steps, some of them stored already (the first attempt was
    committed but its answer lost): COPYing them straight in would store those
    twice, so the batch goes the staged way, and only the new steps count."""
    project = make_project(db_url)
    run_id = uuid.uuid4()
    count = 84
    run = (uuid.UUID(project.id), run_id, "retried", None, datetime.now(UTC), None, None, [])
    await writer.write(runs=[run])
    await writer.write(steps=[step(project.id, run_id, i) for i in range(count)])
    await writer.write(steps=[step(project.id, run_id, i) for i in range(count // 2, 2 * count)])
    [(rows, indexes)] = query(
        db_url,
        "SELECT count(*), count(DISTINCT step_index) FROM agent_steps WHERE run_id = %s",
        (run_id,),
    )
    [(step_count,)] = query(db_url, "SELECT step_count FROM agent_runs WHERE id = %s", (run_id,))
    [(rollup_steps,)] = query(
        db_url, "SELECT sum(steps) FROM agent_run_rollups WHERE project_id = %s", (project.id,)
    )
    assert (rows, indexes, step_count, rollup_steps) == (2 * count,) * 4


async def test_lost_prepared_statements_are_not_the_clients_fault(
    writer: IngestWriter, db_url: str
) -> None:
    """A session that lost its prepared statements (DEALLOCATE ALL, or a pooler handing
    the lane another server session) is a server-side condition: the flush is retried
    on a fresh connection and the request succeeds, never a 422 a client would drop."""
    project = make_project(db_url)
    run_id = uuid.uuid4()
    await writer.write(steps=[step(project.id, run_id, 1)])
    for lane in writer._lanes:  # what a pooler or an operator does to the session
        if lane._conn is not None:
            await lane._conn.execute("DEALLOCATE ALL")
    await writer.write(steps=[step(project.id, run_id, i) for i in range(2, 50)])
    await writer.write(steps=[step(project.id, run_id, 50)])
    [(count,)] = query(db_url, "SELECT count(*) FROM agent_steps WHERE run_id = %s", (run_id,))
    assert count == 50


async def test_a_bad_request_among_many_is_found_in_few_transactions(
    db_url: str, monkeypatch
) -> None:
    """One rejected request among 256 sharing a flush: the others are committed, and
    the bad one is isolated by bisection, not by 256 transactions one after another."""
    commits = 0
    original = lane_module.Lane.commit

    async def counting(self, batch):
        nonlocal commits
        commits += 1
        return await original(self, batch)

    monkeypatch.setattr(lane_module.Lane, "commit", counting)
    writer = IngestWriter(
        db_url, flush_max_rows=5000, buffer_max_rows=100_000, lanes=1, lane_class=writer_lane()
    )
    writer.start()
    project = make_project(db_url)
    run_ids = [uuid.uuid4() for _ in range(256)]
    try:
        await writer.write(steps=[step(project.id, uuid.uuid4(), 0)])  # the lane is warm
        commits = 0
        results = await asyncio.gather(
            *(
                writer.write(steps=[step(project.id, r, 1, "bad" if n == 77 else "tool_call")])
                for n, r in enumerate(run_ids)
            ),
            return_exceptions=True,
        )
    finally:
        await writer.close()
    assert [n for n, result in enumerate(results) if isinstance(result, Exception)] == [77]
    assert isinstance(results[77], RowsRejected)
    [(count,)] = query(
        db_url,
        "SELECT count(*) FROM agent_steps WHERE run_id = ANY(%s)",
        ([r for n, r in enumerate(run_ids) if n != 77],),
    )
    assert count == 255
    assert commits <= 2 * 8 + 2  # one flush, then about two per level of bisection


async def test_text_written_into_scripts_survives_a_session_that_changed_its_quoting(
    db_url: str,
) -> None:
    """A few rows travel as SQL literals, quoted for standard_conforming_strings=on and
    UTF-8. If something turned that off on the lane's session, backslashes would become
    escapes: the writer checks before every script and restores what it relies on."""
    writer = IngestWriter(
        db_url, flush_max_rows=5000, buffer_max_rows=100_000, lanes=1, lane_class=writer_lane()
    )
    writer.start()
    try:
        await _write_through_a_changed_session(writer, db_url)
    finally:
        await writer.close()


async def _write_through_a_changed_session(writer: IngestWriter, db_url: str) -> None:
    project = make_project(db_url)
    run_id = uuid.uuid4()
    await writer.write(steps=[step(project.id, run_id, 1)])
    for lane in writer._lanes:
        if lane._conn is not None:
            await lane._conn.execute("SET standard_conforming_strings = off")
            await lane._conn.execute("SET client_encoding = 'LATIN1'")
    payload = '{"path": "C:\\\\new\\\\table", "quote": "it\'s", "nl": "a\\nb", "é": "ü"}'.encode()
    row = list(step(project.id, run_id, 2))
    row[5] = payload
    row[7] = "back\\slash 'quoted' ünïcode"
    await writer.write(steps=[tuple(row)])
    [(stored_input, content)] = query(
        db_url,
        "SELECT tool_input::text, content FROM agent_steps WHERE run_id = %s AND step_index = 2",
        (run_id,),
    )
    assert (stored_input.encode(), content) == (payload, "back\\slash 'quoted' ünïcode")


def run_row(project_id: str, run_id: uuid.UUID, agent: str = "finishing") -> tuple:
    return (uuid.UUID(project_id), run_id, agent, None, datetime.now(UTC), None, None, [])


def finish(project_id: str, run_id: uuid.UUID, reason: str = "clean", **fields) -> tuple:
    return finish_row(uuid.UUID(project_id), run_id, Finish(reason, datetime.now(UTC), **fields))


def rollups(db_url: str, project_id: str) -> tuple:
    """(run rollups, run-duration histogram, tool rollups) of a project, summed."""
    fold_pending_tool_rollups(db_url)
    [runs] = query(
        db_url,
        "SELECT sum(runs), sum(finished_runs), sum(error_runs), sum(term_clean), "
        "sum(term_error), sum(steps) FROM agent_run_rollups WHERE project_id = %s",
        (project_id,),
    )
    [(durations,)] = query(
        db_url, "SELECT sum(runs) FROM agent_duration_rollups WHERE project_id = %s", (project_id,)
    )
    [tools] = query(
        db_url,
        "SELECT sum(calls), sum(runs), sum(repeated_calls) FROM agent_tool_rollups "
        "WHERE project_id = %s",
        (project_id,),
    )
    return tuple(runs), durations, tuple(tools)


@plain_lane_only
async def test_a_run_started_stepped_and_finished_in_one_flush(
    writer: IngestWriter, db_url: str
) -> None:
    """Finishes share the writer's transactions: a run started, given its steps and
    finished by requests committed together is found and finished after its steps,
    its tool calls count once, and an unknown run's finish says so."""
    project = make_project(db_url)
    run_id, unknown = uuid.uuid4(), uuid.uuid4()
    results = await asyncio.gather(
        writer.write(runs=[run_row(project.id, run_id)]),
        writer.write(steps=[step(project.id, run_id, i) for i in range(5)]),
        writer.write(finishes=[finish(project.id, run_id, output='{"answer": 42}')]),
        writer.write(finishes=[finish(project.id, unknown), finish(project.id, run_id)]),
    )
    assert results == [[], [], [True], [False, True]]
    [(reason, output, step_count, finished)] = query(
        db_url,
        "SELECT termination_reason, output::text, step_count, ended_at IS NOT NULL "
        "FROM agent_runs WHERE id = %s",
        (run_id,),
    )
    assert (reason, output, step_count, finished) == ("clean", '{"answer": 42}', 5, True)
    [(transactions,)] = query(
        db_url,
        "SELECT count(DISTINCT xmin::text) FROM (SELECT xmin FROM agent_runs WHERE id = %s "
        "UNION ALL SELECT xmin FROM agent_steps WHERE run_id = %s) AS rows",
        (run_id, run_id),
    )
    assert transactions == 1  # all four requests were committed together
    # runs, finished, errors, clean, error, steps; one run in the duration histogram;
    # tool calls, runs calling the tool, calls repeating an earlier input.
    assert rollups(db_url, project.id) == ((1, 1, 0, 1, 0, 5), 1, (5, 1, 4))


@plain_lane_only
async def test_a_run_finished_twice_in_one_flush_ends_as_the_last_finish_says(
    writer: IngestWriter, db_url: str
) -> None:
    """Two finishes of a run committed together apply in order, as two transactions
    would: the run moves from error to clean in the rollups, and its tool calls
    still count once."""
    project = make_project(db_url)
    run_id = uuid.uuid4()
    await writer.write(runs=[run_row(project.id, run_id)])
    await writer.write(steps=[step(project.id, run_id, i) for i in range(3)])
    results = await asyncio.gather(
        writer.write(finishes=[finish(project.id, run_id, "error", error="boom")]),
        writer.write(finishes=[finish(project.id, run_id, "clean")]),
    )
    assert results == [[True], [True]]
    [(reason, error)] = query(
        db_url, "SELECT termination_reason, error FROM agent_runs WHERE id = %s", (run_id,)
    )
    assert (reason, error) == ("clean", "boom")  # a finish without an error keeps the last
    assert rollups(db_url, project.id) == ((1, 1, 0, 1, 0, 3), 1, (3, 1, 2))


@plain_lane_only
async def test_many_finishes_in_one_request_go_by_copy(writer: IngestWriter, db_url: str) -> None:
    """More finishes than INLINE_ROWS travel by COPY; JSON outputs stay JSON."""
    project = make_project(db_url)
    runs = [uuid.uuid4() for _ in range(lane_module.INLINE_ROWS + 9)]
    await writer.write(runs=[run_row(project.id, run_id) for run_id in runs])
    found = await writer.write(
        finishes=[
            finish(project.id, run_id, "error" if n % 2 else "clean", output=f'{{"n": {n}}}')
            for n, run_id in enumerate(runs)
        ]
    )
    assert found == [True] * len(runs)
    sql = "SELECT id, output->>'n' FROM agent_runs WHERE project_id = %s"
    outputs = dict(query(db_url, sql, (project.id,)))
    assert outputs == {run_id: str(n) for n, run_id in enumerate(runs)}
    count = len(runs)
    assert rollups(db_url, project.id)[0] == (count, count, count // 2, count - count // 2,
                                               count // 2, 0)  # fmt: skip


@plain_lane_only
async def test_a_finish_the_database_refuses_fails_only_its_request(
    writer: IngestWriter, db_url: str
) -> None:
    project = make_project(db_url)
    runs = [uuid.uuid4() for _ in range(3)]
    await writer.write(runs=[run_row(project.id, run_id) for run_id in runs])
    results = await asyncio.gather(
        writer.write(finishes=[finish(project.id, runs[0])]),
        writer.write(finishes=[finish(project.id, runs[1], "not-a-reason")]),  # fails a CHECK
        writer.write(finishes=[finish(project.id, runs[2])]),
        return_exceptions=True,
    )
    assert [type(result) for result in results] == [list, RowsRejected, list]
    reasons = dict(
        query(
            db_url,
            "SELECT id, termination_reason FROM agent_runs WHERE project_id = %s",
            (project.id,),
        )  # fmt: skip
    )
    assert reasons == {runs[0]: "clean", runs[1]: None, runs[2]: "clean"}
