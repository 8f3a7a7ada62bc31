"""The runs list's ``tag`` and ``metadata`` beside other conditions, whichever way they correlate.

Both are containment (``tags @> …``, ``metadata @> …``), answered by GIN indexes.
PostgreSQL estimates how many runs pass two of them, or one and an agent, as if
they were independent: with ``prod`` on 70% of the runs and ``staging`` on 25% it
expects one run in six to have both, walks the runs newest first to fill a page,
and when no run has both (the two are one run's environment) reads every run of
the project before it knows: 0.5 s on 2.5 million runs, and 3.7 s for two values
of one metadata key. The GIN indexes would have said so in 30 ms, but their answer
comes whole, so for values most runs have it costs that much every time, where the
walk finds a page in a millisecond.

So such a list is read in up to two tries, each exact:

1. **A bounded walk** (only in a sort an index reads in order): the first WALKED
   runs that pass the other conditions, in the list's order, and of those the
   ones that pass these. If a whole page is among them, it is the page: no later
   run comes before them.
2. Otherwise few runs pass: the indexes (with the other conditions) list up to
   LISTED of them and the page is sorted out of those. More than that, and the
   list is read as PostgreSQL plans it: with that many runs, a page is not far.

A single tag or metadata value alone is estimated well enough and goes straight
to the planner.
"""

from __future__ import annotations

import uuid
from typing import Any

from psycopg import AsyncConnection

WALKED = 5_000
LISTED = 2_000
TAGS = "tags @> %(tags)s::text[]"
# keelwave_jsonb (migration 0009): metadata is json, which jsonb may refuse.
_METADATA = "keelwave_jsonb(metadata) @> %(metadata{number})s::jsonb"
# GIN indexes answer in bitmaps only: without these the planner prefers a walk or a
# sequential scan that the LIMIT does not stop when nothing matches.
_BITMAPS_ONLY = ("enable_seqscan", "enable_indexscan", "enable_indexonlyscan")


def metadata(number: int) -> str:
    """The condition of the list's ``number``-th metadata value."""
    return _METADATA.format(number=number)


def _contains(condition: str) -> bool:
    return condition == TAGS or condition.startswith("keelwave_jsonb(metadata) @> ")


def correlated(where: list[str], args: dict[str, Any]) -> bool:
    """Whether ``where`` holds containment among other conditions: two tags or values,
    or one and a condition besides the project's (always there)."""
    values = len(args.get("tags", ())) + sum(
        1 for condition in where if condition != TAGS and _contains(condition)
    )
    others = sum(1 for condition in where if not _contains(condition))
    return values > 1 or (values == 1 and others > 1)


def walked(where: list[str], order_by: str) -> tuple[str, list[str]]:
    """Step 1: the FROM item of the first WALKED runs by every condition of ``where``
    but containment, in the list's order ``order_by``, under the name agent_runs;
    and the containment conditions, to be applied to those."""
    others = [condition for condition in where if not _contains(condition)]
    source = (
        f"(SELECT * FROM agent_runs WHERE {' AND '.join(others)} "
        f"ORDER BY {order_by} LIMIT {WALKED}) AS agent_runs"
    )
    return source, [condition for condition in where if _contains(condition)]


async def runs_passing(
    conn: AsyncConnection, where: list[str], args: dict[str, Any]
) -> list[uuid.UUID] | None:
    """Step 2: the ids of the runs that pass ``where``, from the GIN indexes; None if
    more than LISTED."""
    async with conn.transaction():
        for setting in _BITMAPS_ONLY:
            await conn.execute(f"SET LOCAL {setting} = off")
        found = await conn.execute(
            f"SELECT id FROM agent_runs WHERE {' AND '.join(where)} LIMIT %(listed)s",
            {**args, "listed": LISTED + 1},
        )
        runs = [run_id for (run_id,) in await found.fetchall()]
    return runs if len(runs) <= LISTED else None
