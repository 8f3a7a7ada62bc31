"""keelwave on Citus: the distributed profile (docs/scale-out.md).

Migration 0013 distributes the tables by project_id when the database has the
``citus`` extension. ``serve`` finds out at start (:func:`on_citus`) and then
writes ingest through :class:`~keelwave.server.store.citus.lane.CitusLane`, one
project per transaction, so that every write is routed to one shard.
"""

from __future__ import annotations

import psycopg

# What migration 0013 leaves behind on Citus; its presence, not the extension alone,
# says the schema is distributed (a Citus database migrated before 0013 is not).
DISTRIBUTED_MARKER = "kw_run_locks"


_ON_CITUS = "SELECT 1 FROM pg_extension WHERE extname = 'citus' AND to_regclass(%s) IS NOT NULL"


async def on_citus(conn: psycopg.AsyncConnection) -> bool:
    """Whether this database holds keelwave's distributed schema."""
    cursor = await conn.execute(_ON_CITUS, (DISTRIBUTED_MARKER,))
    return await cursor.fetchone() is not None


def on_citus_now(conn: psycopg.Connection) -> bool:
    """:func:`on_citus` on a synchronous connection (the CLI's)."""
    return conn.execute(_ON_CITUS, (DISTRIBUTED_MARKER,)).fetchone() is not None
