"""Finished runs' tool calls, appended by the ingest writer and folded in every second.

Adding a finished run's tool calls to agent_tool_rollups and its daily twin
costs about one hourly and one daily upsert a step: a step's tool and duration
bin are rarely another's in the same transaction. That was half of what
PostgreSQL spent on a 20-step run's finish (bench/flush_cost.py). So the ingest
writer (lane.py) appends what a batch adds, the rows it staged in
``kw_stage_tools``, to ``agent_tool_rollups_pending`` as plain rows
(:data:`APPEND`), and :class:`Folder` moves them into the rollups every
FOLD_SECONDS, for every run finished meanwhile at once (:data:`TAKE`, then
statements.MERGE_TOOL_ROLLUPS), so that a key many runs share is upserted once
a round. The pending rows are deltas like the staged ones (a late step's swap
is a minus and a plus), so the order they are folded in does not matter.

A tool rollup is therefore the sum of its rows and of its pending rows, and
everything that relies on the rollups alone takes the pending rows first:

- ``/tools`` adds the pending rows of the hours it reads from the rollups
  (query/tools.py);
- an erasure folds them in before it takes its runs out, so that the keys it
  empties are deleted (erasure.py);
- retention deletes those of the hours it deletes (retention.py);
- a recount deletes the project's, which its rebuild counts (recount.py).

Lock order (statements.py's rule 3): pending rows come before agent_tool_rollups.
The writer only inserts pending rows, which waits for nobody; the fold and an
erasure lock the pending rows they take, then the rollup rows. Two folds at
once (two servers) take disjoint rows: a row one of them deleted is skipped by
the other. OTLP ingest appends its finished runs' tool calls the same way
(store/traces.py, where a fold runs). Finishes that do not go through either (the
reaper, the pooled path on Citus) merge their tool calls at once, as before: both
are exact.
"""

from __future__ import annotations

import logging

from psycopg_pool import AsyncConnectionPool

from keelwave.server.store import daily_rollups, statements, tool_rollups
from keelwave.server.store.periodic import Periodic

log = logging.getLogger("keelwave.rollups")

PENDING = "agent_tool_rollups_pending"
FOLD_SECONDS = 1.0

_KEYS = "project_id, bucket, tool_name, duration_bin"
_COUNTERS = ", ".join(tool_rollups.COUNTERS)
_SUMS = ", ".join(f"sum({counter})" for counter in tool_rollups.COUNTERS)

# What a transaction staged in kw_stage_tools, appended (one row a key).
APPEND = f"""
INSERT INTO {PENDING} ({_KEYS}, {_COUNTERS})
SELECT {_KEYS}, {_SUMS} FROM kw_stage_tools GROUP BY 1, 2, 3, 4
"""
# Every pending row, taken into kw_stage_tools for statements.MERGE_TOOL_ROLLUPS.
TAKE = f"""
WITH taken AS (DELETE FROM {PENDING} RETURNING *)
INSERT INTO kw_stage_tools ({_KEYS}, {_COUNTERS})
SELECT {_KEYS}, {_SUMS} FROM taken GROUP BY 1, 2, 3, 4
"""
# Into one shard, whichever connection folds. Shards (rollup_shards.py) keep writers
# that meet on a row from waiting for each other, and the fold meets nobody: it is the
# tool rollups' writer (the reaper's, an erasure's and Citus's merges aside), once a
# second a server. Folded into the backend's shard, the pool's connections took turns
# and a key's rows spread over all eight, eight times the rows /tools sums for a month.
FOLD_SHARD = "0"
FOLD = ";\n".join(
    (
        TAKE,
        daily_rollups.merge(daily_rollups.TOOLS, shard=FOLD_SHARD),
        "DELETE FROM kw_stage_tools",
    )
)
# statements.MERGE_ROLLUPS, but what finished runs add to the tool rollups is appended
# to the pending rows: how an OTLP export ends (store/traces.py). An export finishes a
# few dozen runs, whose tool calls touched about 125 hourly and 125 daily tool rollup
# rows at once (bench/otlp.py); the fold upserts a key many exports share once a second.
MERGE_ROLLUPS = ";\n".join(
    (
        statements.MERGE_RUN_ROLLUPS,
        statements.MERGE_DURATION_ROLLUPS,
        APPEND,
        *statements.EMPTY_ROLLUP_STAGES,
    )
)
# A recount counts every run from its rows: the project's pending rows are in them.
FORGET_PROJECT = f"DELETE FROM {PENDING} WHERE project_id = %(project)s"
# Retention: the pending rows of the hours it deletes.
FORGET_HOURS = f"DELETE FROM {PENDING} WHERE project_id = %(project)s AND bucket < %(before)s"
# /tools: the pending rows of the rollup hours it reads (daily_rollups.hour_ranges).
READ = f"""
    SELECT tool_name, duration_bin, {_COUNTERS} FROM {PENDING}
    WHERE project_id = %(project)s AND bucket >= %(hours_from)s AND bucket < %(hours_to)s"""


async def fold(pool: AsyncConnectionPool) -> None:
    """Move every pending row into the tool rollups, in one transaction."""
    async with pool.connection() as conn:
        # (one round trip: the rollups' rows it locks are not held while this process
        # is busy)
        await conn.execute(statements.one_round_trip(FOLD))


class Folder(Periodic):
    """Runs :func:`fold` every FOLD_SECONDS inside ``serve``."""

    def __init__(self, pool: AsyncConnectionPool) -> None:
        super().__init__("tool-rollups", lambda: fold(pool), FOLD_SECONDS, log)
