"""Lists by two tags or more, each common and their combination rare: read by the pairs
of tags each run has (migration 0029), not by every run each tag is on. Before, proving
that no run has both ``prod`` and ``staging`` meant decoding both tags' lists from the
tags' GIN index: most of the project's runs (70–85 ms on 2.5 million runs)."""

from __future__ import annotations

import itertools
import json
import uuid
from collections.abc import Awaitable, Callable
from typing import Any

import psycopg
import pytest
from conftest import ON_CITUS, Api, Project, make_project
from test_run_calls import rows_touched
from test_run_explorer_api import all_pages, start

from keelwave.server.query import run_containment

# Tags on purpose: pairs across the PAIRED_UP_TO boundary (runs with 8, 9 and 10 tags,
# read by the other index), repeated tags, and two tags whose pairs make the same key
# ("a\x1fb" with "c", "a" with "b\x1fc").
_BIG = [f"t{n}" for n in range(10)]
TAGGED = [
    ["prod", "eu"],
    ["prod", "eu", "prod"],
    ["staging", "eu"],
    ["prod"],
    ["staging"],
    [],
    ["prod", "v2", "eu"],
    ["staging", "v2"],
    ["a\x1fb", "c"],
    ["a", "b\x1fc"],
    ["prod", "staging", *_BIG[:6]],  # 8 tags: paired
    ["prod", "staging", *_BIG[:7]],  # 9: not paired
    ["prod", "v2", *_BIG[:8]],  # 10
    _BIG[:8],
]
VOCABULARY = sorted({tag for tags in TAGGED for tag in tags} | {"nope"})


@pytest.fixture(params=["pairs", "others", "values", "alone"])
async def tagged(api: Api, project: Project, monkeypatch, request) -> list[tuple[str, set[str]]]:
    """The runs above, stored through the API; and the list made to read every
    combination the way the parameter names, whatever the walk found: by the pairs of
    its tags, by the other conditions (the project's runs, every tag checked on
    each), by every value's index, or by the first tag's alone (every tag checked on
    each of its runs)."""
    real_walk = run_containment.walk

    async def walk(conn, where, values, *arguments, **keywords) -> run_containment.Walked:
        walked = await real_walk(conn, where, values, *arguments, **keywords)
        alone = values[:1] if request.param == "alone" else []
        return walked._replace(
            passing=[], complete=False, common=False, rare=alone, small=tuple(alone),
            rare_together=request.param == "pairs", rare_others=request.param == "others",
        )  # fmt: skip

    monkeypatch.setattr(run_containment, "walk", walk)
    runs = []
    for n, tags in enumerate(TAGGED):
        runs.append((await start(api, project, "agent", n, tags=tags), set(tags)))
    return runs


async def test_every_combination_of_tags_keeps_exactly_the_runs_with_all(api, project, tagged):
    newest_first = [run_id for run_id, _ in reversed(tagged)]
    combinations = [
        *itertools.combinations(VOCABULARY, 2),
        *itertools.combinations(["prod", "staging", "eu", "v2", "t0", "t7"], 3),
        ("prod", "staging", *_BIG[:6]),
        ("prod", "staging", *_BIG[:7]),  # more tags than any run paired has
        ("prod", "v2", *_BIG[:8]),
        ("prod", *(f"x{n}" for n in range(70))),  # (its 2,485 pairs are never made)
        ("prod", "prod", "eu"),
        ("eu", "eu"),
    ]
    for wanted in combinations:
        rows = await all_pages(api, project, limit=3, tag=list(wanted))
        expected = [run_id for run_id in newest_first if set(wanted) <= dict(tagged)[run_id]]
        assert [row["id"] for row in rows] == expected, wanted


async def test_a_tag_with_the_pairs_separator_matches_only_itself(api, project, tagged):
    """U+001F joins a pair's two tags: ``a\\x1fb`` with ``c`` and ``a`` with ``b\\x1fc``
    make one key, and each run must still pass only its own tags."""
    by_tags = {frozenset(tags): run_id for run_id, tags in tagged}
    rows = await all_pages(api, project, tag=["a\x1fb", "c"])
    assert [row["id"] for row in rows] == [by_tags[frozenset({"a\x1fb", "c"})]]
    rows = await all_pages(api, project, tag=["a", "b\x1fc"])
    assert [row["id"] for row in rows] == [by_tags[frozenset({"a", "b\x1fc"})]]


# -- the plan, on a project of realistic size ------------------------------------------

RUNS = 20_000


@pytest.fixture(scope="module")
def environments(db_url: str) -> tuple[str, uuid.UUID, dict[str, str], list[uuid.UUID]]:
    """A project whose runs are 70% in prod and 25% in staging, never both (one run in
    a thousand carries both among ten tags), 40% on v2; its own tag names, so other
    tests' runs in the database do not count. 200 of its oldest runs are an agent's
    that has not run since. Analysed, as autovacuum would."""
    project = uuid.UUID(make_project(db_url).id)
    suffix = uuid.uuid4().hex[:8]
    names = {tag: f"{tag}-{suffix}" for tag in ("prod", "staging", "v2", "extra")}
    with psycopg.connect(db_url, autocommit=True) as conn:
        conn.execute(
            """
            INSERT INTO agent_runs (project_id, id, agent_name, started_at, last_activity_at, tags)
            SELECT %(project)s, md5(%(suffix)s || n)::uuid,
                   CASE WHEN n <= 2000 AND n %% 10 = 0 THEN 'rare' ELSE 'agent' END,
                   timestamptz '2026-11-01' + make_interval(secs => n), now(),
                   CASE WHEN n %% 1000 = 0
                        THEN ARRAY[%(prod)s, %(staging)s] || array(
                             SELECT %(extra)s || k FROM generate_series(1, 8) k)
                        ELSE array_remove(ARRAY[
                             CASE WHEN n %% 20 < 14 THEN %(prod)s
                                  WHEN n %% 20 < 19 THEN %(staging)s END,
                             CASE WHEN n %% 5 < 2 THEN %(v2)s END], NULL) END
            FROM generate_series(1, %(runs)s) n
            """,
            {"project": project, "suffix": suffix, "runs": RUNS, **names},
        )
        conn.execute("ANALYZE agent_runs")
        both = [
            run_id
            for (run_id,) in conn.execute(
                "SELECT id FROM agent_runs WHERE project_id = %s AND tags @> %s "
                "ORDER BY started_at DESC, id DESC",
                (project, [names["prod"], names["staging"]]),
            )
        ]
    return db_url, project, names, both


async def with_plans(db_url: str, read: Callable[[Any], Awaitable[Any]]) -> tuple[Any, list]:
    """``read(conn)``'s answer, and the plan of each statement it ran, captured with
    auto_explain."""
    plans: list[dict[str, Any]] = []

    def captured(diagnostic: psycopg.errors.Diagnostic) -> None:
        text = diagnostic.message_primary or ""
        if text.startswith("duration:") and "{" in text:
            plans.append(json.loads(text[text.index("{") :])["Plan"])

    async with await psycopg.AsyncConnection.connect(db_url, autocommit=True) as conn:
        conn.add_notice_handler(captured)
        await conn.execute("LOAD 'auto_explain'")
        for setting in (
            "auto_explain.log_min_duration = 0",
            "auto_explain.log_analyze = on",
            "auto_explain.log_format = json",
            "auto_explain.log_level = notice",
        ):
            await conn.execute(f"SET {setting}")
        found = await read(conn)
    return found, plans


async def _passing_runs(
    db_url: str, where: list[str], args: dict[str, Any]
) -> tuple[list | None, list[dict[str, Any]]]:
    """``passing_runs`` as the list calls it (newest first), and its statements' plans."""
    return await with_plans(
        db_url,
        lambda conn: run_containment.passing_runs(
            conn, where, None, "started_at DESC, id DESC", {"limit": 51, **args}
        ),
    )


@pytest.mark.skipif(ON_CITUS, reason="on Citus the coordinator's plan holds no shard's scans")
async def test_two_common_tags_never_together_are_found_by_their_pair(environments):
    """After the walk (which finds each tag common and the two rarely together), the
    pairs' index and the many tags' index answer, never the tags' own index."""
    db_url, project, names, both = environments
    where = [run_containment.PROJECT, run_containment.TAGS]
    args = {"project": project, "tags": [names["prod"], names["staging"]]}
    found, plans = await _passing_runs(db_url, where, args)
    assert found is not None and set(found) == set(both) and len(both) == RUNS // 1000
    indexes = [name for plan in plans for name in _indexes(plan)]
    assert "agent_runs_tags_idx" not in indexes, plans
    [by_pairs] = [plan for plan in plans if "agent_runs_tag_pairs_idx" in _indexes(plan)]
    # The runs with both tags (20) and their heap rows; not the 19,000 runs that the
    # two tags' own lists hold.
    assert rows_touched(by_pairs) < 10 * len(both), by_pairs


@pytest.mark.skipif(ON_CITUS, reason="on Citus the coordinator's plan holds no shard's scans")
@pytest.mark.parametrize("tags", [["prod"], ["prod", "v2"], ["staging", "v2"]])
async def test_common_tags_beside_an_agent_rare_of_late_read_the_agents_runs(environments, tags):
    """An agent none of the newest runs is, beside tags most runs have: its 200 runs
    are read and their tags checked, not the tags' lists of 14,000 runs (on 2.5
    million runs, a BitmapAnd of the agent's runs and the tags' took 114–170 ms, and
    the pairs' index with the agent as a filter 3 s)."""
    db_url, project, names, _ = environments
    where = [run_containment.PROJECT, "agent_name = %(agent)s", run_containment.TAGS]
    args = {"project": project, "agent": "rare", "tags": [names[tag] for tag in tags]}
    found, plans = await _passing_runs(db_url, where, args)
    with psycopg.connect(db_url) as conn:
        expected = conn.execute(
            "SELECT id FROM agent_runs WHERE project_id = %s AND agent_name = 'rare' "
            "AND tags @> %s ORDER BY started_at DESC, id DESC LIMIT 51",
            (project, args["tags"]),
        ).fetchall()
    # (the page's own runs, in the list's order)
    assert found == [run_id for (run_id,) in expected]
    indexes = [name for plan in plans for name in _indexes(plan)]
    assert not {"agent_runs_tags_idx", "agent_runs_tag_pairs_idx"} & set(indexes), plans
    # The walk's 2,000 runs (read twice, each counted by two nodes), the count of the
    # agent's runs, and its 200 runs read: not a tag's list.
    assert sum(rows_touched(plan) for plan in plans) < 14_000, plans


def _indexes(plan: dict[str, Any]) -> list[str]:
    own = [plan["Index Name"]] if "Index Name" in plan else []
    return own + [name for child in plan.get("Plans", []) for name in _indexes(child)]


CANARY_RUNS = 20_000


@pytest.fixture(scope="module")
def canary(db_url: str) -> tuple[str, uuid.UUID, str]:
    """A project of CANARY_RUNS runs, one in six ended by an error, one in two hundred
    tagged with a tag of its own (the others with another); analysed."""
    project = uuid.UUID(make_project(db_url).id)
    tag = f"canary-{uuid.uuid4().hex[:8]}"
    with psycopg.connect(db_url, autocommit=True) as conn:
        conn.execute(
            """
            INSERT INTO agent_runs (project_id, id, agent_name, started_at, last_activity_at,
                                    ended_at, termination_reason, tags)
            SELECT %(project)s, md5(%(tag)s || n)::uuid, 'agent',
                   timestamptz '2026-11-01' + make_interval(secs => n), now(),
                   timestamptz '2026-11-02', CASE WHEN n %% 6 = 0 THEN 'error' ELSE 'clean' END,
                   ARRAY[CASE WHEN n %% 200 = 12 THEN %(tag)s ELSE 'prod' END]
            FROM generate_series(1, %(runs)s) n
            """,
            {"project": project, "tag": tag, "runs": CANARY_RUNS},
        )
        conn.execute("ANALYZE agent_runs")
    return db_url, project, tag


@pytest.mark.skipif(ON_CITUS, reason="on Citus the coordinator's plan holds no shard's scans")
async def test_a_rare_tag_beside_a_common_reason_reads_the_tags_runs_alone(canary):
    """A tag few runs have beside a termination reason most runs walked have: the tag's
    runs are read from its index and each one's reason checked; the reason's index is
    not read. (On 20,000 runs PostgreSQL plans it so by itself; on 2.5 million it made
    a BitmapAnd that read a reason's 150,000 entries first, 45 ms of 60, which the
    fence now rules out: run_containment.SMALL_VALUE, bench/filter_sweep.py.)"""
    db_url, project, tag = canary
    where = [run_containment.PROJECT, "termination_reason = %(reason)s", run_containment.TAGS]
    args = {"project": project, "reason": "error", "tags": [tag]}
    found, plans = await _passing_runs(db_url, where, args)
    with psycopg.connect(db_url) as conn:
        expected = conn.execute(
            "SELECT id FROM agent_runs WHERE project_id = %s AND termination_reason = %s "
            "AND tags @> %s",
            (project, "error", [tag]),
        ).fetchall()
    assert found is not None and set(found) == {run_id for (run_id,) in expected}
    assert len(expected) == 34
    indexes = [name for plan in plans for name in _indexes(plan)]
    assert "agent_runs_termination_idx" not in indexes, plans
    assert "agent_runs_tags_idx" in indexes, plans
