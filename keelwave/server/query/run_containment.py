"""The runs list's ``tag`` and ``metadata`` beside other conditions, whichever way they correlate.

Both are containment (``tags @> …``, ``metadata @> …``), answered by GIN indexes.
PostgreSQL estimates how many runs pass two of them, or one and an agent, as if
they were independent: with ``prod`` on 70% of the runs and ``staging`` on 25% it
expects one run in six to have both, walks the runs newest first to fill a page,
and when no run has both (the two are one run's environment) reads every run of
the project before it knows: 0.7 s on 2.5 million runs, and 3.7 s for two values
of one metadata key. The GIN indexes would have said so in 30–50 ms, but their
answer comes whole, so for values most runs have it costs that much every time,
where the walk finds a page in a millisecond; and for a value few runs have, the
planner's own plan (that value's index, the rest as filters) takes a few.

So such a list is read like this, each step exact:

1. **A bounded walk** (in a sort an index reads in order): the project's first
   WALKED runs in the list's order, and of those the ones that pass every
   condition. If they are a whole page, it is the page: no later run comes before
   them. If the walk saw every run of the project, those are all there is. The
   walk also tells how common each tag and metadata value is among the runs
   walked that pass the other conditions and among all of them, how common those
   conditions are, and how common the list's tags are together.
2. If PLANNER_FROM or more of them passed, the runs that pass are not rare after
   all, and the list is read as PostgreSQL plans it. If some passed and, at that
   rate, a page is within ALONG runs of a condition with an index in the list's
   order (an agent's, a reason's: run_streams.py), those runs are read in order and
   each checked. Otherwise few runs pass, and indexes list up to LISTED of them, by
   what the walk found rare, the rest checked run by run: a value rare among the runs
   walked that pass the other conditions and that few runs have (SMALL_VALUE; of
   several, the fewest), beside other conditions most runs pass, by its GIN index
   alone (``tag=canary&termination_reason=timeout``: the tag's 12,500
   runs, not a BitmapAnd that reads the reason's 150,000 first); else the values rare
   among the runs walked that pass the other conditions (under RARE of them), by
   their GIN indexes and the other conditions' indexes; else the other conditions, if the
   walk found them rare and at most OTHERS_UP_TO runs pass them (an agent that ran
   little of late beside a tag most runs have: the agent's 10,000 runs, not the
   tag's 700,000); else, for two tags or more that the walk found rarely together,
   the pairs they make (migration 0029: one key's list, where each tag's own is
   most of the project's runs; ``tag=prod&tag=staging``, which no run has, took 50–85
   ms on 2.5 million runs to prove so from those); else every value's GIN index.

The page is then read from the ids found. More than LISTED runs pass, and the list
is read as PostgreSQL plans it: with that many, a page is not far. A single tag or
metadata value alone is estimated well enough and goes straight to the planner.
"""

from __future__ import annotations

import uuid
from typing import Any, NamedTuple

from psycopg import AsyncConnection

from keelwave.server.query import run_streams, run_tools

WALKED = 2_000
# As many runs walked passing every condition (short of a page) and those runs are
# common enough that PostgreSQL's own plan finds a page soon (a page of 50 within about
# 20,000 runs newest first), sooner than the GIN indexes answer (30–50 ms). With 10,
# a metadata value on 68,000 runs beside two tags, 6 to 9 walked runs passing, read
# that value's runs until 2,001 passed (70 ms) and then the planner's page (23 ms).
# (More than LISTED runs pass from 0.08% of 2.5 million up: there the GIN indexes'
# list is read to no end.)
PLANNER_FROM = 5
RARE = 0.05
LISTED = 2_000
# The runs of rare other conditions read and checked run by run, rather than a common
# value's list from its GIN index: 20,000 runs are about 30 ms.
OTHERS_UP_TO = 20_000
PROJECT = "project_id = %(project)s"  # (run_list.filters' first condition)
TAGS = "tags @> %(tags)s::text[]"
# Migration 0029's index of each run's pairs of tags holds runs with up to this many
# tags (a run with n has n(n-1)/2 pairs); another holds the tags of runs with more.
PAIRED_UP_TO = 8
_PAIRED = (
    f"cardinality(tags) BETWEEN 2 AND {PAIRED_UP_TO} "
    "AND keelwave_tag_pairs(tags) @> keelwave_tag_pairs(%(tags)s::text[])"
)
_MANY_TAGS = f"cardinality(tags) > {PAIRED_UP_TO} AND {TAGS}"
# keelwave_jsonb (migration 0009): metadata is json, which jsonb may refuse.
_METADATA = "keelwave_jsonb(metadata) @> %(metadata{number})s::jsonb"
# A value rare among the runs walked that pass the other conditions, which those most
# runs pass, and that at most this many runs have, is read alone from its GIN index and
# every other condition checked on each run: a tag's 12,500 runs take about 27 ms so,
# where PostgreSQL's BitmapAnd read the other condition's index first (a termination
# reason's 150,000 entries, 45 of its 60 ms). A common metadata value checked on each of
# them too (``sdk_version=1.3.0``, on 357,000 runs): 39 ms, where both GIN indexes took 80.
SMALL_VALUE = 20_000
# The runs of an ordered condition read in the list's order when the walk says a page is
# within as many (_along_stream): 5,000 runs read and checked take 10-17 ms.
ALONG = 5_000
_RUNS_ESTIMATE = "SELECT reltuples FROM pg_class WHERE oid = 'agent_runs'::regclass"
# GIN indexes answer in bitmaps only: without these the planner prefers a walk or a
# sequential scan that the LIMIT does not stop when nothing matches.
_BITMAPS_ONLY = ("enable_seqscan", "enable_indexscan", "enable_indexonlyscan")


def metadata(number: int) -> str:
    """The condition of the list's ``number``-th metadata value."""
    return _METADATA.format(number=number)


def _contains(condition: str) -> bool:
    return condition == TAGS or condition.startswith("keelwave_jsonb(metadata) @> ")


def _metadata_values(where: list[str]) -> list[str]:
    return [condition for condition in where if condition != TAGS and _contains(condition)]


def _values(where: list[str], args: dict[str, Any]) -> list[str]:
    """One condition per tag or metadata value (the tags' one condition split, each
    tag in ``args`` as a one-element array of its own)."""
    values = []
    for number, tag in enumerate(args.get("tags", ())):
        args[f"tag{number}"] = [tag]
        values.append(f"tags @> %(tag{number})s::text[]")
    return values + _metadata_values(where)


def correlated(where: list[str], args: dict[str, Any]) -> bool:
    """Whether ``where`` holds tags or metadata among other conditions: two values, or
    one and a condition besides the project's (always there)."""
    values = len(args.get("tags", ())) + len(_metadata_values(where))
    others = sum(1 for condition in where if not _contains(condition))
    return values > 1 or (values == 1 and others > 1)


class Walked(NamedTuple):
    """Step 1's answer."""

    passing: list[uuid.UUID]  # the first %(limit)s runs walked that pass, in order
    complete: bool  # the walk saw every run of the project (past the cursor)
    common: bool  # PLANNER_FROM or more passed: not few after all
    rare: list[str]  # the values that under RARE of the runs walked that pass the rest pass
    # Under RARE of the runs walked pass the other conditions (an agent's, say); and,
    # for two tags or more, have every tag of the list.
    rare_others: bool = False
    rare_together: bool = False
    # The values that at most SMALL_VALUE runs of the project have, by their share of the
    # runs walked and the runs the table holds (PostgreSQL's statistics); fewest first.
    small: tuple[str, ...] = ()
    kept: int = 0  # the runs walked that pass the other conditions


async def passing_runs(
    conn: AsyncConnection,
    where: list[str],
    cursor: str | None,
    order_by: str | None,
    args: dict[str, Any],
    in_list_order: bool = True,
) -> list[uuid.UUID] | None:
    """The ids of the runs the page is among (module docstring), or None: read it as
    PostgreSQL plans it. ``order_by``: an order an index reads runs in (else no walk):
    the list's, or with ``in_list_order`` false another (newest first), whose walk only
    says what is rare and common, from the newest runs whatever the cursor (a cursor
    in another order could leave few of them to walk, far into the project);
    ``cursor``: the list's condition in ``where``, if any."""
    if run_tools.ANY_STEP in where:
        # A probe of each run (of a tool many runs call): Citus plans none beside the
        # walk's subquery, and in bitmaps only each would be a bitmap scan. No walk
        # then, and step 2 leaves the probe to the page (ids of more runs than pass are
        # no harm: the page's query has every condition): only for two values or more,
        # which alone can make a page far; else as planned.
        where = [condition for condition in where if condition != run_tools.ANY_STEP]
        if len(args.get("tags", ())) + len(_metadata_values(where)) < 2:
            return None
        order_by = None
    values = _values(where, args)
    if order_by is None:
        # No walk: tags alone are read by their pairs, never slower than by each tag's
        # list; beside other conditions the pairs' list could be most runs, which the
        # planner, estimating it small, would filter run by run (3 s on 2.5 million runs).
        others = [c for c in where if c not in (PROJECT, cursor, TAGS)]
        by_pairs = not others and _distinct_tags(args) > 1
        return await runs_passing(
            conn, where, values, args, Walked([], False, False, [], rare_together=by_pairs)
        )
    if in_list_order:
        walked = await walk(conn, where, values, cursor, order_by, args)
        if len(walked.passing) == args["limit"] or walked.complete:
            return walked.passing
        along = await _along_stream(conn, where, cursor, order_by, args, walked)
        if along is not None:
            return along
    else:  # only its counts: the runs it passes are in another order
        uncursored = [condition for condition in where if condition != cursor]
        walked = await walk(conn, uncursored, values, None, order_by, args)
    if walked.common:  # (a whole page passed: common too)
        return None
    listed_in = order_by if in_list_order else None
    return await runs_passing(conn, where, values, args, walked, listed_in)


async def _along_stream(
    conn: AsyncConnection,
    where: list[str],
    cursor: str | None,
    order_by: str,
    args: dict[str, Any],
    walked: Walked,
) -> list[uuid.UUID] | None:
    """The page, if the walk says it is near along an index in the list's order of the
    other conditions (an agent's, a reason's: run_streams.py): the first ALONG of that
    condition's runs past the cursor, each checked (not the values' GIN indexes: for
    ``agent_name=agent-support&metadata=user_id=user-0`` those were 109,000 and 68,000
    entries, 65 ms, for a page among the agent's newest 2,000 runs); None if it is not
    near, or they held no page. Near: some walked runs passed, and at the rate the
    walk saw, a page is within ALONG of that condition's runs."""
    if not walked.passing or walked.small or not order_by.startswith("started_at "):
        return None  # (a value few runs have is read whole sooner: SMALL_VALUE)
    streams = run_streams.streams(where, args)
    if not streams or args["limit"] * walked.kept > ALONG * len(walked.passing):
        return None
    along = " AND ".join([PROJECT] + ([cursor] if cursor else []) + streams[:1])
    rest = [condition for condition in where if condition not in (PROJECT, cursor, streams[0])]
    found = await conn.execute(
        f"SELECT id FROM (SELECT * FROM agent_runs WHERE {along} ORDER BY {order_by} "
        f"LIMIT {ALONG}) AS agent_runs WHERE {' AND '.join(rest)} ORDER BY {order_by} "
        "LIMIT %(limit)s",
        args,
    )
    page = [run_id for (run_id,) in await found.fetchall()]
    return page if len(page) == args["limit"] else None


def _distinct_tags(args: dict[str, Any]) -> int:
    return len(set(args.get("tags", ())))


async def _few(conn: AsyncConnection, others: list[str], args: dict[str, Any]) -> bool:
    """Whether at most OTHERS_UP_TO runs pass the ``others`` conditions (the walk saw few
    of them among the newest runs, but an agent may have run often before)."""
    found = await conn.execute(
        f"SELECT count(*) FROM (SELECT 1 FROM agent_runs WHERE {' AND '.join(others)} "
        f"LIMIT {OTHERS_UP_TO + 1}) AS counted",
        args,
    )
    (count,) = await found.fetchone()
    return count <= OTHERS_UP_TO


async def walk(
    conn: AsyncConnection,
    where: list[str],
    values: list[str],
    cursor: str | None,
    order_by: str,
    args: dict[str, Any],
) -> Walked:
    """Step 1: the project's first WALKED runs past the ``cursor`` condition in the list's
    order ``order_by``, which an index reads in that order; the other conditions are
    checked on those. A fixed number of runs whatever they are: walking until 5,000
    runs passed an agent's condition, in order of cost, read 115,000 runs (0.3 s).
    First the page, read until it is whole (most lists stop within a few hundred
    runs); then, if it was not, how many of the runs walked each value passes, how
    many pass the other conditions, and how many have every tag of the list."""
    rest = [c for c in where if c not in (PROJECT, cursor) and not _contains(c)] or ["true"]
    # (in agent name order, an agent's runs are one range of it: walked from its start,
    # not from the project's first agent's)
    agents = (run_streams.AGENT, run_streams.Q_AGENT)
    agent = [c for c in where if c in agents] if order_by.startswith("agent_name ") else []
    walked_where = " AND ".join([PROJECT] + ([cursor] if cursor else []) + agent[:1])
    walked_runs = (
        f"(SELECT * FROM agent_runs WHERE {walked_where} ORDER BY {order_by} "
        f"LIMIT {WALKED}) AS agent_runs"
    )
    kept = " AND ".join(rest)
    found = await conn.execute(
        f"SELECT id FROM {walked_runs} WHERE {kept} AND {' AND '.join(values)} "
        f"ORDER BY {order_by} LIMIT %(limit)s",
        args,
    )
    passing = [run_id for (run_id,) in await found.fetchall()]
    if len(passing) == args["limit"]:
        return Walked(passing, False, True, [])
    # (each value only for the runs kept: a metadata condition costs a function call)
    counts = [f"count(*) FILTER (WHERE kept AND {value})" for value in values]
    counts += [f"count(*) FILTER (WHERE {value})" for value in values]
    tags = _distinct_tags(args)
    together = f"count(*) FILTER (WHERE {TAGS})" if tags > 1 else "0"
    found = await conn.execute(
        f"SELECT count(*), count(*) FILTER (WHERE kept), {together}, {', '.join(counts)} FROM ("
        f"SELECT tags, metadata, ({kept}) AS kept FROM {walked_runs} OFFSET 0) AS checked",
        args,
    )
    walked, kept_runs, with_tags, *passed = await found.fetchone()
    passed, alone = passed[: len(values)], passed[len(values) :]
    rare = [value for value, count in zip(values, passed, strict=True) if count < RARE * kept_runs]
    small = []
    if rare:  # (only a rare value is ever read alone)
        # (a statement of its own: on Citus the one above is a shard's, on a worker; an
        # estimate of 0 or less, the table never analysed or its rows on Citus's
        # workers, takes no value for small)
        (runs,) = await (await conn.execute(_RUNS_ESTIMATE)).fetchone()
        if runs > 0:
            few = [(count, number) for number, count in enumerate(alone)
                   if values[number] in rare and count * runs <= SMALL_VALUE * walked]  # fmt: skip
            small = [values[number] for _, number in sorted(few)]
    return Walked(
        passing,
        walked < WALKED,
        len(passing) >= PLANNER_FROM,
        rare,
        rare_others=rest != ["true"] and kept_runs < RARE * walked,
        rare_together=tags > 1 and with_tags < RARE * walked,
        small=tuple(small),
        kept=kept_runs,
    )


async def runs_passing(
    conn: AsyncConnection,
    where: list[str],
    values: list[str],
    args: dict[str, Any],
    walked: Walked,
    order_by: str | None = None,
) -> list[uuid.UUID] | None:
    """Step 2: the ids of the runs that pass ``where``, None if more than LISTED. Read
    from the indexes of what the walk found rare, the rest checked run by run behind a
    fence the planner does not look through: the rare ones of its ``values``; else the
    other conditions (an agent's runs, say), if at most OTHERS_UP_TO runs pass them;
    else two tags or more by their pairs, if the walk found them rarely together; else
    every value. ``order_by``: the list's, if an index reads it: then the answer is the
    page's own runs (not a thousand ids the page would read again)."""
    others = [condition for condition in where if not _contains(condition)]
    tags = _distinct_tags(args)
    checked: list[str] = []
    # (the one of fewest runs read: a user id few runs have beside canary's 12,500 runs)
    alone = [value for value in walked.small if value in walked.rare]
    # Another rare metadata value is read from its GIN index beside the first, not
    # decoded on each run: for canary's 12,500 runs and a user id on 68,000, both
    # indexes take about 20 ms, where checking each run's metadata took 39. (A common
    # metadata value is checked on each: its GIN index would read most runs.)
    by_index = [v for v in _metadata_values(where) if v in walked.rare and v not in alone[:1]]
    # (what the other ways check, and what the list's orders sort by)
    columns = "id, tags, metadata, started_at, cost_usd, agent_name"
    capped = True  # (more than LISTED runs passing: read as PostgreSQL plans it)
    if alone and not walked.rare_others and not by_index:
        # A value few runs have, beside conditions most runs pass: its runs, the rest
        # checked on each (SMALL_VALUE).
        sources = [[PROJECT, alone[0]]]
        checked = [condition for condition in where if condition not in (PROJECT, alone[0])]
        columns = "*"
        capped = order_by is None  # (at most SMALL_VALUE runs: the page is exact)
    elif walked.rare:
        sources = [others + walked.rare]
        checked = [value for value in values if value not in walked.rare]
    elif walked.rare_others and await _few(conn, others, args):
        # (a tag on most runs, beside an agent that ran recently few: the agent's runs
        # are fewer than the tag's list of them, 10,000 against 700,000)
        sources = [others]
        checked = values
    elif walked.rare_together:
        # The runs with few enough tags by their pairs (none has more tags than that),
        # the others by their tags; the tags checked again, since two pairs can make
        # one key (migration 0029).
        by_metadata = _metadata_values(where)
        sources = [others + [_MANY_TAGS] + by_metadata]
        if tags <= PAIRED_UP_TO:
            sources.insert(0, others + [_PAIRED] + by_metadata)
        checked = [TAGS]
    else:
        sources = [others + values]
    found = " UNION ALL ".join(
        f"SELECT {columns} FROM agent_runs WHERE {' AND '.join(source)}" for source in sources
    )
    output = "*" if order_by else "id"
    if checked:
        sql = f"SELECT {output} FROM ({found} OFFSET 0) AS agent_runs WHERE {' AND '.join(checked)}"
    else:
        sql = f"SELECT {output} FROM ({found}) AS agent_runs"
    async with conn.transaction():
        for setting in _BITMAPS_ONLY:
            await conn.execute(f"SET LOCAL {setting} = off")
        listed = {**args, "listed": LISTED + 1}
        if order_by:
            # The page's own runs, in order (with how many passed): not a thousand ids the
            # page reads again (23 ms of 60 for a finding and a user id).
            limited = f"{sql} LIMIT %(listed)s" if capped else sql
            found = await conn.execute(
                f"SELECT id, count(*) OVER () FROM ({limited}) AS agent_runs "
                f"ORDER BY {order_by} LIMIT %(limit)s",
                listed,
            )
            page_runs = await found.fetchall()
            if capped and page_runs and page_runs[0][1] > LISTED:
                return None
            return [run_id for run_id, _ in page_runs]
        found = await conn.execute(f"{sql} LIMIT %(listed)s", listed)
        runs = [run_id for (run_id,) in await found.fetchall()]
    return runs if len(runs) <= LISTED else None
