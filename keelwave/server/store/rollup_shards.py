"""Rollup rows that every writer adds to, kept in shards.

agent_run_rollups (migration 0016), agent_tool_rollups and its daily twin (0020)
have a row per (project, hour or day, agent or tool, …) that every transaction of
that project and hour adds to: the writer's flushes, finishes, the verdict keeper,
OTLP exports. Transactions meeting on one row wait for each other's commits, one
at a time. So a ``shard`` column ends each key, and a transaction adds to the
shard of its backend (:data:`SHARD`): two transactions wait for each other only
when their connections share a shard.

Readers sum rows, so their answers do not change. A shard's counters may go below
zero (a run counted in one shard and finished, or erased, in another): only a
key's sum over its shards means something, and a key's rows are deleted together,
once that sum counts nothing (:func:`delete_emptied`).
"""

from __future__ import annotations

SHARDS = 8
SHARD = f"mod(pg_backend_pid(), {SHARDS})"  # no %: statements are %-formatted


def delete_emptied(
    table: str, keys: tuple[str, ...], staged: str, counts_something: str, sharded: bool
) -> str:
    """DELETE the rows of ``table`` whose key (``keys``) is one of those ``staged`` (a
    SELECT of them) and counts nothing: ``counts_something`` is 0 (the counter that is
    0 exactly when nothing is counted) in the row, or, in a sharded table, summed over
    the key's shards, and then every shard of the key goes.

    The caller has just merged into those rows, which locks them (statements.py's
    rule 3); a sharded key's other shards may be held by other writers, each of whom
    holds one shard and never waits for this statement."""
    same = " AND ".join(f"r.{key} = e.{key}" for key in keys)
    if not sharded:
        return f"DELETE FROM {table} r USING ({staged}) e WHERE {same} AND r.{counts_something} = 0"
    join = " AND ".join(f"x.{key} = k.{key}" for key in keys)
    positions = ", ".join(str(n + 1) for n in range(len(keys)))
    return f"""
DELETE FROM {table} r USING (
    SELECT {", ".join(f"x.{key}" for key in keys)}
    FROM {table} x JOIN ({staged}) k ON {join}
    GROUP BY {positions} HAVING sum(x.{counts_something}) = 0
) e
WHERE {same}
"""
