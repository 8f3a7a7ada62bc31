"""The runs list's ``tag`` beside other conditions: a page whichever way they correlate.

PostgreSQL estimates how many runs have two tags, or a tag and an agent, as if they
were independent: with ``prod`` on 70% of the runs and ``staging`` on 25% it expects
one run in six to have both, walks the runs newest first to fill a page, and when
no run has both (the two are one run's environment) reads every run of the
project before it knows (0.7 s on 2.5 million runs). The tag index would have said
so in 30 ms, but its answer comes whole, so for tags most runs have it costs that
much every time, where the walk finds a page in a millisecond.

So such a list is read in two tries, each exact:

1. **A bounded walk**: the first WALKED runs that pass the other conditions, in the
   list's order, and of those the ones with the tags. If a whole page is among them,
   it is the page: no later run comes before them.
2. Otherwise few runs have them: the tag index (with the other conditions) lists up
   to LISTED of them and the page is sorted out of those. More than that, and the
   list is read as PostgreSQL plans it: with that many runs, a page is not far.

A single tag alone is estimated well (PostgreSQL keeps each tag's frequency) and
goes straight to the planner.
"""

from __future__ import annotations

import uuid
from typing import Any

from psycopg import AsyncConnection

WALKED = 5_000
LISTED = 2_000
CONDITION = "tags @> %(tags)s::text[]"
# The tag index answers in bitmaps only: without these the planner prefers a walk or
# a sequential scan that the LIMIT does not stop when nothing matches.
_BITMAPS_ONLY = ("enable_seqscan", "enable_indexscan", "enable_indexonlyscan")


def correlated(tags: list[str], where: list[str]) -> bool:
    """Whether the tags are one condition among others (the project's is always there)."""
    return len(tags) > 1 or len(where) > 2


def walked(where: list[str], order_by: str) -> str:
    """The FROM item of step 1: the first WALKED runs by every condition of ``where`` but
    the tags', in the list's order ``order_by``, under the name agent_runs."""
    others = [condition for condition in where if condition != CONDITION]
    return (
        f"(SELECT * FROM agent_runs WHERE {' AND '.join(others)} "
        f"ORDER BY {order_by} LIMIT {WALKED}) AS agent_runs"
    )


async def tagged_runs(
    conn: AsyncConnection, where: list[str], args: dict[str, Any]
) -> list[uuid.UUID] | None:
    """Step 2: the ids of the runs that pass ``where``, from the tag index; None if more
    than LISTED."""
    async with conn.transaction():
        for setting in _BITMAPS_ONLY:
            await conn.execute(f"SET LOCAL {setting} = off")
        found = await conn.execute(
            f"SELECT id FROM agent_runs WHERE {' AND '.join(where)} LIMIT %(listed)s",
            {**args, "listed": LISTED + 1},
        )
        runs = [run_id for (run_id,) in await found.fetchall()]
    return runs if len(runs) <= LISTED else None
