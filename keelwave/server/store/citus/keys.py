"""The key tables of steps and model calls on Citus (migration 0017): duplicate checks
that read one small table instead of every day.

On Citus, agent_steps and ai_traces are daily partitions (migration 0015) and carry
no unique key, so the writer's duplicate check used to probe every day kept, each
with its own planning: ingest slowed as days accumulated, and more so once they
were columnar. kw_step_keys holds (project_id, run_id, step_index) of every stored
step and kw_call_keys (project_id, run_key, id) of every stored model call (run_key
is the run's id, or the nil UUID for a call sent without a run: a call is the same
call when its id and run are, NULL runs alike), each with a primary key and
co-located with the runs. The Citus writer (citus/statements.py) checks staged rows
against them and adds its new rows' keys in the same transaction; kw_call_keys also
keeps each call's tokens and cost, so that a run that starts after its model calls
were stored is counted from the keys too, without reading the days.

The keys mirror the rows exactly, run by run. Every other path that adds or deletes
steps or model calls on Citus keeps them so:

* OTLP re-projection (traces.py) rewrites some of a run's rows; afterwards its keys
  are made again from what the run now has (:data:`RESYNC`).
* Erasure (erasure.py, and retention through it) deletes a run's keys with its rows
  (:data:`DELETE_OF_RUNS`); retention's sweep of rows without a run makes those
  runs' keys again, or deletes the keys of the calls it deleted (:data:`DELETE_LONE`).
* Retention's drop of whole days deletes the keys received before them (every key
  keeps when its row was received, :data:`DROP_BEFORE`): one pass over the key
  tables, on the rounds that dropped a day.
"""

from __future__ import annotations

import weakref

import psycopg

NIL = "'00000000-0000-0000-0000-000000000000'::uuid"
STEP_KEYS = "kw_step_keys"
CALL_KEYS = "kw_call_keys"
# The columns a call's key keeps, beside the key: what a new run counts from its calls.
CALL_TOTALS = ("input_tokens", "output_tokens", "cost_usd")

# The runs' keys from their rows as they are now (the rows were just rewritten).
RESYNC = (
    f"DELETE FROM {STEP_KEYS} WHERE project_id = %(project_id)s AND run_id = ANY(%(ids)s)",
    f"""INSERT INTO {STEP_KEYS} (project_id, run_id, step_index, received_at)
SELECT DISTINCT ON (run_id, step_index) project_id, run_id, step_index, received_at
FROM agent_steps WHERE project_id = %(project_id)s AND run_id = ANY(%(ids)s)
ORDER BY run_id, step_index, received_at""",
    f"DELETE FROM {CALL_KEYS} WHERE project_id = %(project_id)s AND run_key = ANY(%(ids)s)",
    f"""INSERT INTO {CALL_KEYS} (project_id, run_key, id, {", ".join(CALL_TOTALS)}, received_at)
SELECT DISTINCT ON (run_id, id) project_id, run_id, id, {", ".join(CALL_TOTALS)}, received_at
FROM ai_traces WHERE project_id = %(project_id)s AND run_id = ANY(%(ids)s)
ORDER BY run_id, id, received_at""",
)
# Erasure: the runs' keys go with their rows (%s: the project, the run ids).
DELETE_OF_RUNS = (
    f"DELETE FROM {STEP_KEYS} WHERE project_id = %s AND run_id = ANY(%s)",
    f"DELETE FROM {CALL_KEYS} WHERE project_id = %s AND run_key = ANY(%s)",
)

# Retention's sweep of model calls sent without a run: their keys, by id.
DELETE_LONE = f"DELETE FROM {CALL_KEYS} WHERE project_id = %s AND run_key = {NIL} AND id = ANY(%s)"
# Retention's drop of whole days: the keys of the rows those days held, every project's
# (%s: the time the days were dropped before; only days wholly before it went, and
# the days are UTC days, so the keys go up to the start of its day).
DROP_BEFORE = tuple(
    f"DELETE FROM {table} WHERE received_at < date_trunc('day', %s::timestamptz, 'UTC')"
    for table in (STEP_KEYS, CALL_KEYS)
)

_IN_USE = "SELECT to_regclass(%s) IS NOT NULL"
# Per connection: whether its database has the key tables. A connection stays on one
# database, and servers are stopped for migrations, so one look each is enough.
_known: weakref.WeakKeyDictionary[psycopg.AsyncConnection, bool] = weakref.WeakKeyDictionary()


async def in_use(conn: psycopg.AsyncConnection) -> bool:
    """Whether this connection's database keeps key tables (Citus, migration 0017)."""
    known = _known.get(conn)
    if known is None:
        cursor = await conn.execute(_IN_USE, (STEP_KEYS,))
        known = _known[conn] = bool((await cursor.fetchone())[0])
    return known
