"""What the detectors read of a run's calls (store/run_calls.py): which payloads leave
the database, and what happens to a run renumbered between the read's two statements."""

from __future__ import annotations

import uuid

import psycopg
from conftest import Api, Project, query
from test_verdicts import start, steps

from keelwave.server.findings import StepView
from keelwave.server.store import run_calls


def call(index: int, tool: str, sketch: int | None = 1) -> StepView:
    return StepView(index, tool, None, None, b"f%d" % index, True, sketch)


def picked(views: list[StepView]) -> dict[int, tuple[bool, bool]]:
    return {view.step_index: (i, o) for view, i, o in run_calls.wanted(views)}


def test_outputs_are_wanted_only_in_three_calls_of_one_tool_in_a_row() -> None:
    tools = ["a", "a", "b", "b", "b", "a", "c", "c", "c", "c", "a"]
    views = [call(n, tool, sketch=n) for n, tool in enumerate(tools, start=1)]
    assert picked(views) == {n: (False, True) for n in (3, 4, 5, 7, 8, 9, 10)}


def test_inputs_are_wanted_where_three_calls_of_a_tool_share_a_sketch() -> None:
    views = [call(1, "a", 7), call(2, "b", 7), call(3, "a", 7), call(4, "b", 8),
             call(5, "a", 7), call(6, "b", 9), call(7, "a", 5)]  # fmt: skip
    # a: three calls with sketch 7 (and a fourth with another); b: three sketches
    assert picked(views) == {1: (True, False), 3: (True, False), 5: (True, False)}


def test_one_unsketched_call_makes_every_input_of_a_tool_called_three_times_wanted() -> None:
    views = [call(1, "a", 1), call(2, "b", None), call(3, "a", 2), call(4, "c", 3),
             call(5, "a", 3), call(6, "b", 4)]  # fmt: skip
    assert picked(views) == {1: (True, False), 3: (True, False), 5: (True, False)}


async def test_a_run_renumbered_between_the_two_statements_is_left_out_and_read_again(
    api: Api, project: Project, db_url: str
) -> None:
    """An OpenTelemetry span arriving late renumbers a run's steps: payloads read by the
    old numbers would be another step's. The run is left out of that read, whole."""
    run_id = await start(api, project)
    calls = [("lookup", {"order": f"A-{n}"}, {"found": n}) for n in range(3)]
    await steps(api, project, run_id, calls)
    key = (uuid.UUID(project.id), uuid.UUID(run_id))
    async with await psycopg.AsyncConnection.connect(db_url, autocommit=True) as conn:
        renumber = True

        async def fetch(sql: str, params: dict) -> list[tuple]:
            nonlocal renumber
            if sql is run_calls.PAYLOADS and renumber:
                renumber = False  # as a late span would: every step moves up by one
                await conn.execute(
                    "UPDATE agent_steps SET step_index = step_index + 1000 WHERE run_id = %s",
                    (key[1],),
                )
                await conn.execute(
                    "UPDATE agent_steps SET step_index = step_index - 999 WHERE run_id = %s",
                    (key[1],),
                )
            return await (await conn.execute(sql, params)).fetchall()

        read = await run_calls.read_calls(fetch, [key])
        assert read.changed == {key} and key not in read.calls and key not in read.counts
        again = await run_calls.read_calls(fetch, [key])
    assert not again.changed
    assert [(c.step_index, c.tool_output) for c in again.calls[key]] == [
        (2, b'{"found": 0}'), (3, b'{"found": 1}'), (4, b'{"found": 2}')]  # fmt: skip
    [(count,)] = query(db_url, "SELECT step_count FROM agent_runs WHERE id = %s", (key[1],))
    assert again.counts == {key: count}
