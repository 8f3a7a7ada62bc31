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


# Rows of steps made by SQL: many short runs, as a project has, and one long run
# whose inputs were stored before sketches were (NULL), so each of them is read.
_LONG_RUN = """
INSERT INTO agent_steps (project_id, run_id, step_index, step_type, tool_name, tool_input,
                         tool_output, input_fingerprint, started_at)
SELECT %(project)s, r.id, i, 'tool_call', 'search',
       json_build_object('q', 'query ' || i %% 50), json_build_object('hits', i %% 7),
       sha256(('search' || i %% 50)::bytea),
       now() - r.k * interval '1 minute' + i * interval '1 ms'
FROM (SELECT %(long)s::uuid AS id, %(steps)s AS n, 0 AS k
      UNION ALL SELECT gen_random_uuid(), 5, k FROM generate_series(1, %(short)s) k) r,
     generate_series(1, r.n) i
"""


def test_a_long_runs_payloads_are_read_one_index_lookup_each(db_url: str, project: Project) -> None:
    """The payloads of a 3,000-step run are read by their own index entries, not by
    matching each against all of the run's steps: the planner, believing a run has a
    few dozen steps, joined the whole run to every payload wanted (92 million rows
    for a 10,000-step run: 9 s for its findings)."""
    long_run = uuid.uuid4()
    steps_in_run = 3000
    with psycopg.connect(db_url, autocommit=True) as conn:
        # With the index on start times the planner may happen to look each payload up
        # by its start; on the 50-million-step data set it did not. Without that index
        # (this test's own database) the plan is the one that matters.
        conn.execute("DROP INDEX agent_steps_recent_idx")
        conn.execute(
            _LONG_RUN,
            {"project": project.id, "long": long_run, "steps": steps_in_run, "short": 4000},
        )
        conn.execute("ANALYZE agent_steps")
        key = (uuid.UUID(project.id), long_run)
        rows = conn.execute(run_calls.CALLS, {"projects": [key[0]], "ids": [long_run]}).fetchall()
        found, needed = run_calls._calls([key], rows)
        assert len(needed) == steps_in_run  # every input (and most outputs) wanted
        params = run_calls.payload_parameters([key], needed)
        [[plan]] = conn.execute("EXPLAIN (ANALYZE, FORMAT JSON) " + run_calls.PAYLOADS, params)
        payloads = conn.execute(run_calls.PAYLOADS, params).fetchall()
    assert len(payloads) == steps_in_run
    # Linear: a lookup per payload, or one pass over the table (TimescaleDB's planner
    # hashes this small one); not each payload against the run (9 million rows here).
    table_rows = steps_in_run + 4000 * 5
    assert rows_touched(plan[0]["Plan"]) < 5 * (table_rows + steps_in_run)


def rows_touched(node: dict) -> float:
    """Every row a plan's nodes produced or filtered away, over all their loops."""
    loops = node.get("Actual Loops", 1)
    own = node.get("Actual Rows", 0) * loops
    own += node.get("Rows Removed by Join Filter", 0) + node.get("Rows Removed by Filter", 0)
    return own + sum(rows_touched(child) for child in node.get("Plans", []))
