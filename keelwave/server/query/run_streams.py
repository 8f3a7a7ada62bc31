"""The runs list's conditions that have an index in the list's order, read side by side.

An agent, a termination reason, a kind of finding, each loop flag (when true) and
``root=false`` have an index of their runs newest first within a project
(agent_runs_agent_idx, migrations 0022 and 0030). Alone, such a condition's page is its
index's first entries. Two together, PostgreSQL walks one index in order and reads each
run to check the other; when they rarely hold together (on kw_big,
``termination_reason=loop_detected`` beside ``finding=no_progress``: no run of 2.5
million has both) it walks the whole index, a run read from the table for each entry:
115–240 ms.

Here both indexes are read in that same order, their entries alone (index-only), and
a run is kept when both list it: a merge join, which stops at the page. When many runs
pass both, that is a few entries of each (about 1 ms); when none do, every entry of
both: 157,000 and 50,000 entries in 25 ms.

That is not cheaper when one condition's runs are far fewer than the other's: the merge
reads the other's entries as far back as the few go (an agent's 10,000 runs spread over
a month beside 1.7 million clean ones), where walking the few and checking each is
bounded by them. So PostgreSQL's estimates of each condition's runs alone (good for one
condition: its column's statistics; it is their combination it gets wrong) decide: the
conditions with no more than RATIO times the fewest's runs are merged, any others
checked on each run the merge keeps, as are the list's other conditions, and only
conditions most runs pass may be among those (CHECKED); a list with any other condition
(a tag, a tool, a parent run, ``q`` naming several agents) is read as PostgreSQL plans it.
"""

from __future__ import annotations

import uuid
from typing import Any

from psycopg import AsyncConnection

PROJECT = "project_id = %(project)s"  # (run_list.filters' first condition)
AGENT = "agent_name = %(agent)s"
Q_AGENT = "(agent_name = %(q_agent)s)"  # (run_search.condition's for one agent, alone)
REASON = "termination_reason = %(reason)s"
FINDING = "%(kind)s = ANY(findings)"
# The loop flags, and the argument whose value true makes each a stream: a partial index
# holds the runs of each that loop, none the others (most runs).
REPORTED_LOOP = "loop_detected = %(looping)s"
DETECTED_LOOP = "detected_loop = %(detected)s"
EITHER_LOOP = "(loop_detected OR detected_loop) = %(either)s"
LOOPS = {REPORTED_LOOP: "looping", DETECTED_LOOP: "detected", EITHER_LOOP: "either"}
WINDOW = "started_at >= %(since)s AND started_at < %(until)s"
FINISHED = "ended_at IS NOT NULL"
ROOT = "parent_run_id IS NULL"
CHILD = "parent_run_id IS NOT NULL"
# Conditions checked on each run the merge keeps (and a loop flag when false): each
# passed by many runs or most, so no index of its own would find the page sooner.
CHECKED = (FINISHED, ROOT)
# Merged: the conditions whose estimated runs are at most this many times the fewest's.
# An index entry read in order costs about a sixteenth of a run read from the table
# and checked (157,000 and 50,000 entries in 25 ms; 50,000 runs read in 115).
RATIO = 16
# Fewer runs than this pass the fewest condition: walking them is quick whatever passes.
FEW = 2_000
_BY_MERGE = ("enable_hashjoin", "enable_nestloop", "enable_seqscan", "enable_bitmapscan")


def _checkable(condition: str, args: dict[str, Any]) -> bool:
    return condition in CHECKED or (condition in LOOPS and args[LOOPS[condition]] is False)


def streams(where: list[str], args: dict[str, Any]) -> list[str]:
    """The conditions of ``where`` that an index lists in started_at order."""
    # (q beside agent_name names that agent or none: run_search.condition)
    agents = (AGENT,) if AGENT in where else (Q_AGENT,)
    found = [c for c in where if c in (*agents, REASON, FINDING, CHILD)]
    return found + [c for c in where if c in LOOPS and args[LOOPS[c]] is True]


async def passing_runs(
    conn: AsyncConnection,
    where: list[str],
    cursor: str | None,
    direction: str,
    args: dict[str, Any],
) -> list[uuid.UUID] | None:
    """The ids of the list's page (its first %(limit)s runs) in a list sorted by
    started_at in ``direction`` (``cursor``: the list's condition for the runs after
    one, if any, in ``where``), read by merging ordered indexes; None: read it as
    PostgreSQL plans it (module docstring)."""
    ordered = streams(where, args)
    carried = [c for c in where if c in (PROJECT, WINDOW, cursor)]
    rest = [c for c in where if c not in ordered and c not in carried]
    if len(ordered) < 2 or not all(_checkable(condition, args) for condition in rest):
        return None
    estimates = await _estimates(conn, ordered, carried, args)
    if estimates is None:
        return None
    fewest = min(estimates)
    merged = [c for c, runs in zip(ordered, estimates, strict=True) if runs <= RATIO * fewest]
    if fewest < FEW or len(merged) < 2:
        return None
    checked = rest + [condition for condition in ordered if condition not in merged]
    way = direction.upper()
    entries = [
        f"(SELECT started_at, id FROM agent_runs WHERE {' AND '.join([*carried, condition])} "
        f"ORDER BY started_at {way}, id {way}) AS s{number}"
        for number, condition in enumerate(merged)
    ]
    joined = " JOIN ".join([entries[0], *(f"{e} USING (started_at, id)" for e in entries[1:])])
    sql = f"SELECT id FROM {joined}"
    if checked:
        # (a scalar subquery a run: the planner neither joins it nor looks through it)
        sql += (
            f" WHERE (SELECT true FROM agent_runs WHERE {PROJECT} AND agent_runs.id = s0.id "
            f"AND {' AND '.join(checked)})"
        )
    sql += f" ORDER BY started_at {way}, id {way} LIMIT %(limit)s"
    async with conn.transaction():
        await conn.execute("; ".join(f"SET LOCAL {setting} = off" for setting in _BY_MERGE))
        found = await conn.execute(sql, args)
        return [run_id for (run_id,) in await found.fetchall()]


async def _estimates(
    conn: AsyncConnection, ordered: list[str], carried: list[str], args: dict[str, Any]
) -> list[float] | None:
    """PostgreSQL's estimate of each ``ordered`` condition's runs (with the ``carried``
    ones), from one plan of them all; None if the plan is not one scan a condition."""
    sql = " UNION ALL ".join(
        f"SELECT 1 FROM agent_runs WHERE {' AND '.join([*carried, condition])}"
        for condition in ordered
    )
    found = await conn.execute(f"EXPLAIN (FORMAT JSON) {sql}", args)
    (plan,) = await found.fetchone()
    top = plan[0]["Plan"]
    scans = top.get("Plans", []) if top.get("Node Type") == "Append" else []
    if len(scans) != len(ordered):
        return None
    return [float(scan["Plan Rows"]) for scan in scans]
