"""Lists by two conditions with ordered indexes or more (an agent, an ending, a finding,
a loop flag) read by merging those indexes in the list's order (query/run_streams.py).
Before, when the two rarely held together, PostgreSQL walked one index to its end,
reading and checking each run: ``termination_reason=loop_detected&finding=no_progress``
took 115–240 ms on 2.5 million runs to find none."""

from __future__ import annotations

import itertools
import uuid
from datetime import timedelta
from typing import Any

import psycopg
import pytest
from conftest import ON_CITUS, Project, make_project
from test_run_explorer_api import all_pages
from test_run_tag_pairs import with_plans

from keelwave.server.query import run_containment, run_streams

RUNS = 150
# A run started every minute from this moment, every fifth at the same moment as the
# one before (ties broken by id); one in seventeen still going.
_SMALL = """
INSERT INTO agent_runs (project_id, id, agent_name, started_at, ended_at, last_activity_at,
                        termination_reason, findings, loop_detected, detected_loop,
                        parent_run_id)
SELECT %(project)s::uuid, id, agent, started, ended, started, reason,
       CASE WHEN reason = 'loop_detected' THEN ARRAY['exact_loop']
            WHEN n %% 7 = 0 THEN ARRAY['no_progress']
            WHEN n %% 11 = 0 THEN ARRAY['no_progress', 'cycle']
            ELSE '{}' END,
       reason IS NOT DISTINCT FROM 'loop_detected',
       reason IS NOT DISTINCT FROM 'loop_detected' OR n %% 13 = 0,
       CASE WHEN n %% 6 = 0 THEN md5('parent' || n)::uuid END
FROM (
    SELECT n, md5(%(project)s::text || n)::uuid AS id,
           CASE WHEN n %% 3 = 0 THEN 'b' ELSE 'a' END AS agent,
           timestamptz '2026-11-01' + make_interval(mins => n - (n %% 5 = 0)::int) AS started,
           CASE WHEN n %% 17 <> 0 THEN timestamptz '2026-11-02' END AS ended,
           CASE WHEN n %% 17 <> 0
                THEN (ARRAY['clean', 'clean', 'loop_detected', 'error', 'timeout'])[n %% 5 + 1]
           END AS reason
    FROM generate_series(1, %(runs)s) n
) AS made
"""
# Each query parameter and the plain condition a run passes it by, for the expected
# lists (read by PostgreSQL from this small project however it plans them).
STREAMS = {
    "agent_name=a": "agent_name = 'a'",
    "agent_name=b": "agent_name = 'b'",
    "termination_reason=clean": "termination_reason = 'clean'",
    "termination_reason=loop_detected": "termination_reason = 'loop_detected'",
    "termination_reason=error": "termination_reason = 'error'",
    "finding=no_progress": "'no_progress' = ANY(findings)",
    "finding=exact_loop": "'exact_loop' = ANY(findings)",
    "finding=cycle": "'cycle' = ANY(findings)",
    "loop_detected=true": "loop_detected",
    "detected_loop=true": "detected_loop",
    "loop=true": "(loop_detected OR detected_loop)",
    "root=false": "parent_run_id IS NOT NULL",
}
CHECKED = {
    "": "true",
    "status=finished": "ended_at IS NOT NULL",
    "root=true": "parent_run_id IS NULL",
    "loop=false": "NOT (loop_detected OR detected_loop)",
    "since=2026-11-01T00:40:00Z&until=2026-11-01T02:00:00Z": (
        "started_at >= '2026-11-01T00:40:00Z' AND started_at < '2026-11-01T02:00:00Z'"
    ),
}


@pytest.fixture(scope="module")
def small(db_url: str) -> Project:
    project = make_project(db_url)
    with psycopg.connect(db_url, autocommit=True) as conn:
        conn.execute(_SMALL, {"project": project.id, "runs": RUNS})
    return project


def _expected(db_url: str, project: Project, conditions: list[str], direction: str) -> list:
    way = direction.upper()
    with psycopg.connect(db_url) as conn:
        found = conn.execute(
            f"SELECT id::text FROM agent_runs WHERE project_id = %s AND {' AND '.join(conditions)} "
            f"ORDER BY started_at {way}, id {way}",
            (project.id,),
        )
        return [run_id for (run_id,) in found]


def _query(text: str) -> dict[str, str]:
    return dict(part.split("=", 1) for part in text.split("&") if part)


@pytest.fixture(params=["every one merged", "two merged, the rest checked"])
def merging(request, monkeypatch) -> list[list[uuid.UUID] | None]:
    """Every list made to merge (PostgreSQL's estimates for so few runs would not):
    each ordered condition estimated at FEW runs, or the first two at FEW and the rest
    at more than RATIO times as many. What passing_runs answered, for the test to see
    that the merge read the page."""
    answers: list[list[uuid.UUID] | None] = []

    async def estimates(conn, ordered, carried, args) -> list[float]:
        many = 1.0 if request.param == "every one merged" else run_streams.RATIO * 10.0
        return [run_streams.FEW * (1.0 if n < 2 else many) for n in range(len(ordered))]

    real = run_streams.passing_runs

    async def passing_runs(*arguments, **keywords):
        answers.append(await real(*arguments, **keywords))
        return answers[-1]

    monkeypatch.setattr(run_streams, "_estimates", estimates)
    monkeypatch.setattr(run_streams, "passing_runs", passing_runs)
    return answers


@pytest.mark.parametrize("direction", ["desc", "asc"])
async def test_every_pair_of_ordered_conditions_lists_exactly_their_runs(
    api, db_url, small, merging, direction
):
    """Page after page (three runs a page, so cursors fall on ties), every pair of
    ordered conditions beside each condition the merge checks on its runs."""
    for (first, a), (second, b) in itertools.combinations(STREAMS.items(), 2):
        if first.split("=")[0] == second.split("=")[0]:
            continue  # (one value a parameter)
        for extra, condition in CHECKED.items():
            query = _query(f"{first}&{second}&{extra}")
            if len(query) < len(_query(first)) + len(_query(second)) + len(_query(extra)):
                continue  # (loop=true and loop=false: one value a parameter)
            rows = await all_pages(api, small, limit=3, order=direction, **query)
            wanted = _expected(db_url, small, [a, b, condition], direction)
            assert [row["id"] for row in rows] == wanted, query
    assert any(answer is not None for answer in merging)


async def test_three_ordered_conditions_list_exactly_their_runs(api, db_url, small, merging):
    for trio in [
        ("agent_name=a", "termination_reason=error", "finding=no_progress"),
        ("agent_name=b", "finding=cycle", "detected_loop=true"),
        ("termination_reason=loop_detected", "finding=exact_loop", "loop=true"),
        ("termination_reason=clean", "loop_detected=true", "finding=no_progress"),  # none
    ]:
        query = _query("&".join(trio))
        rows = await all_pages(api, small, limit=4, **query)
        wanted = _expected(db_url, small, [STREAMS[part] for part in trio], "desc")
        assert [row["id"] for row in rows] == wanted, trio
    assert any(answer is not None for answer in merging)


async def test_other_conditions_leave_the_list_to_postgresql(api, db_url, small, merging):
    """A tool, a parent run, a run still going, q that may be a run id's prefix: each
    has its own way to few runs, which a merge would not use; the list is still exact."""
    parent = str(uuid.uuid5(uuid.NAMESPACE_URL, "none"))
    for extra, condition in [
        ("status=running", "ended_at IS NULL"),
        ("q=a", "true"),  # (agent a's runs, or those whose id starts with a: of a's, all)
        (f"parent_run_id={parent}", "false"),
        ("tool=search", "false"),  # (no run of these has steps)
    ]:
        query = _query(f"agent_name=a&termination_reason=error&{extra}")
        rows = await all_pages(api, small, limit=3, **query)
        wanted = _expected(
            db_url, small, ["agent_name = 'a'", "termination_reason = 'error'", condition], "desc"
        )
        assert [row["id"] for row in rows] == wanted, query


# -- the plan, on a project of realistic size ------------------------------------------

LARGE = 20_000


@pytest.fixture(scope="module")
def endings(db_url: str) -> tuple[str, uuid.UUID]:
    """A project of LARGE runs: a fifth end looping and the server finds no progress in
    another fifth, never in one that ended looping, and another fifth are child runs;
    one in fifty are a rare agent's, spread over the whole time, which never ends
    clean, where most of the others do."""
    project = uuid.UUID(make_project(db_url).id)
    with psycopg.connect(db_url, autocommit=True) as conn:
        conn.execute(
            """
            INSERT INTO agent_runs (project_id, id, agent_name, started_at, ended_at,
                                    last_activity_at, termination_reason, findings,
                                    parent_run_id)
            SELECT %(project)s, md5(%(project)s::text || n)::uuid,
                   CASE WHEN n %% 50 = 0 THEN 'rare' ELSE 'agent' END,
                   timestamptz '2026-11-01' + make_interval(secs => n),
                   timestamptz '2026-11-02', now(),
                   CASE WHEN n %% 5 = 1 THEN 'loop_detected'
                        WHEN n %% 50 = 0 OR n %% 5 = 2 THEN 'error' ELSE 'clean' END,
                   CASE WHEN n %% 10 IN (3, 4) THEN ARRAY['no_progress'] ELSE '{}' END,
                   CASE WHEN n %% 5 = 2 THEN md5('parent' || n)::uuid END
            FROM generate_series(1, %(runs)s) n
            """,
            {"project": project, "runs": LARGE},
        )
        conn.execute("VACUUM ANALYZE agent_runs")
    return db_url, project


async def _passing_runs(
    db_url: str, where: list[str], args: dict[str, Any]
) -> tuple[list | None, list[dict[str, Any]]]:
    """``passing_runs`` as the list calls it (newest first), and its statements' plans."""
    return await with_plans(
        db_url,
        lambda conn: run_streams.passing_runs(conn, where, None, "desc", {"limit": 51, **args}),
    )


def _nodes(plan: dict[str, Any]) -> list[dict[str, Any]]:
    return [plan] + [node for child in plan.get("Plans", []) for node in _nodes(child)]


@pytest.mark.skipif(ON_CITUS, reason="on Citus the coordinator's plan holds no shard's scans")
@pytest.mark.parametrize(
    "other, indexes",
    [
        (run_streams.FINDING, {"agent_runs_finding_no_progress_idx"}),
        (run_streams.CHILD, {"agent_runs_children_idx"}),  # (migration 0030)
    ],
)
async def test_conditions_never_together_are_merged_from_their_indexes(endings, other, indexes):
    """No run both ended looping and made no progress, nor is a child run: the two
    indexes' entries say so, merged, and no run is read from the table (before: each
    of the 4,000 runs of one of them, read and checked)."""
    db_url, project = endings
    where = [run_streams.PROJECT, run_streams.REASON, other]
    args = {"project": project, "reason": "loop_detected", "kind": "no_progress"}
    found, plans = await _passing_runs(db_url, where, args)
    assert found == []
    [merged] = [plan for plan in plans if "Merge Join" in str(plan)]
    scans = [node for node in _nodes(merged) if "Index Name" in node]
    assert {node["Index Name"] for node in scans} == {"agent_runs_termination_idx", *indexes}
    assert all(node["Node Type"] == "Index Only Scan" for node in scans), plans
    assert sum(node.get("Heap Fetches", 0) for node in scans) == 0, plans


@pytest.mark.skipif(ON_CITUS, reason="on Citus the coordinator's plan holds no shard's scans")
async def test_a_rare_agent_beside_a_common_ending_is_left_to_postgresql(endings, monkeypatch):
    """The rare agent's 400 runs are few beside the 11,600 clean ones (more than RATIO
    times as many): walking the agent's runs and checking each is bounded by them,
    where a merge would read the clean runs' entries as far back as the agent's go.
    (FEW lowered: at this scale, walking either is quick anyway.)"""
    monkeypatch.setattr(run_streams, "FEW", 100)
    db_url, project = endings
    where = [run_streams.PROJECT, run_streams.AGENT, run_streams.REASON]
    found, _ = await _passing_runs(
        db_url, where, {"project": project, "agent": "rare", "reason": "clean"}
    )
    assert found is None


# -- a tag beside an ordered condition, read along that condition's index ---------------

ALONG_RUNS = 8_000


@pytest.fixture(scope="module")
def along(db_url: str) -> tuple[Project, str]:
    """A quarter of the runs are agent a's, and one in 125 of those has a tag of its own:
    among the newest 2,000 runs, 500 of a's and 4 with the tag, too few for PostgreSQL's
    own plan by the walk's rule, yet a page of 10 is among a's newest 1,500 runs."""
    project = make_project(db_url)
    tag = f"u-{uuid.uuid4().hex[:8]}"
    with psycopg.connect(db_url, autocommit=True) as conn:
        conn.execute(
            """
            INSERT INTO agent_runs (project_id, id, agent_name, started_at, last_activity_at, tags)
            SELECT %(project)s::uuid, md5(%(project)s::text || n)::uuid,
                   CASE WHEN n %% 4 = 0 THEN 'a' ELSE 'b' END,
                   timestamptz '2026-11-01' + make_interval(secs => n), now(),
                   CASE WHEN n %% 500 = 0 THEN ARRAY[%(tag)s] ELSE '{}' END
            FROM generate_series(1, %(runs)s) n
            """,
            {"project": project.id, "tag": tag, "runs": ALONG_RUNS},
        )
        conn.execute("ANALYZE agent_runs")
    return project, tag


async def test_a_tag_rare_of_late_beside_an_agent_is_read_along_the_agents_runs(
    api, db_url, along, monkeypatch
):
    """(SMALL_VALUE 0: on so few runs the tag's would be read whole, sooner.)"""
    monkeypatch.setattr(run_containment, "SMALL_VALUE", 0)
    project, tag = along
    real = run_containment._along_stream
    answers = []

    async def spied(*arguments, **keywords):
        answers.append(await real(*arguments, **keywords))
        return answers[-1]

    monkeypatch.setattr(run_containment, "_along_stream", spied)
    for direction in ("desc", "asc"):
        rows = await all_pages(api, project, limit=10, agent_name="a", tag=tag, order=direction)
        conditions = ["agent_name = 'a'", f"tags @> ARRAY['{tag}']"]
        wanted = _expected(db_url, project, conditions, direction)
        assert [row["id"] for row in rows] == wanted and len(wanted) == ALONG_RUNS // 500
    assert answers[0] is not None and len(answers[0]) == 11, answers


@pytest.mark.skipif(
    ON_CITUS, reason="on Citus the coordinator's plan holds no shard's scans: no merge there"
)
async def test_a_page_after_a_cursor_in_a_window_is_merged_with_postgresqls_estimates(
    endings, monkeypatch
):
    """The estimates asked with the cursor's and the window's conditions and values;
    the merge's page after the cursor is the next runs in order. (FEW lowered: about
    2,000 runs of each pass in the window, either side of it as estimated.)"""
    monkeypatch.setattr(run_streams, "FEW", 100)
    db_url, project = endings
    cursor = "(started_at, id) < (%(c_started)s::timestamptz, %(c_id)s::uuid)"
    where = [run_streams.PROJECT, run_streams.REASON, run_streams.CHILD, run_streams.WINDOW]
    with psycopg.connect(db_url) as conn:
        rows = conn.execute(
            "SELECT id, started_at FROM agent_runs WHERE project_id = %s AND parent_run_id "
            "IS NOT NULL AND termination_reason = 'error' ORDER BY started_at DESC, id DESC",
            (project,),
        ).fetchall()
    first, since = rows[100], rows[3_000][1]
    args = {
        "project": project,
        "reason": "error",
        "since": since,
        "until": first[1] + timedelta(days=1),
        "c_started": first[1],
        "c_id": first[0],
        "limit": 51,
    }
    async with await psycopg.AsyncConnection.connect(db_url, autocommit=True) as conn:
        found = await run_streams.passing_runs(conn, [*where, cursor], cursor, "desc", args)
    assert found == [run_id for run_id, _ in rows[101:152]]
