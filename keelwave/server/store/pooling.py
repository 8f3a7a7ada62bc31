"""Whether the database connections are pinned to one PostgreSQL session.

Behind a pooler in transaction mode (PgBouncer's ``pool_mode = transaction``,
common in front of managed PostgreSQL) each transaction may run on another
server session, so nothing a session holds survives from one transaction to
the next: prepared statements, temp tables, ``SET``s. The writer's fast path
keeps all three in its session; in transaction mode it keeps none (lane.py),
and pooled connections never prepare statements.

``KEELWAVE_DATABASE_POOLING`` says which; ``auto`` asks :func:`sessions_are_pinned`
at start. The probe can miss a pooler (it never sees one that is not there), so
the writer also switches to transaction mode the first time its session loses
what it put there (writer.py).
"""

from __future__ import annotations

import logging

import psycopg

log = logging.getLogger("keelwave.pooling")

_PID = "SELECT pg_backend_pid()"


async def sessions_are_pinned(conninfo: str, connect_timeout: int = 5, rounds: int = 3) -> bool:
    """False if two client connections were seen sharing a server session, or one client
    connection moving between sessions: a pooler in transaction (or statement) mode.

    With a pooler, a client's server session goes back to the pool after each
    transaction, and PgBouncer hands out the one released last: the second
    connection's transaction then runs on the first connection's session.
    Connected directly, or through a pooler in session mode, each connection
    keeps its own session and the process ids never meet.
    """
    async with (
        await psycopg.AsyncConnection.connect(
            conninfo, autocommit=True, connect_timeout=connect_timeout, prepare_threshold=None
        ) as first,
        await psycopg.AsyncConnection.connect(
            conninfo, autocommit=True, connect_timeout=connect_timeout, prepare_threshold=None
        ) as second,
    ):
        seen_first: set[int] = set()
        seen_second: set[int] = set()
        for _ in range(rounds):
            seen_first.add((await (await first.execute(_PID)).fetchone())[0])
            seen_second.add((await (await second.execute(_PID)).fetchone())[0])
            if len(seen_first) > 1 or len(seen_second) > 1 or seen_first & seen_second:
                return False
    return True


async def transaction_pooling(mode: str, conninfo: str, connect_timeout: int) -> bool:
    """Whether to work as behind a transaction pooler, for the setting's ``mode``."""
    if mode != "auto":
        return mode == "transaction"
    try:
        pinned = await sessions_are_pinned(conninfo, connect_timeout)
    except psycopg.Error as error:  # the database is down: the writer finds out later
        log.info("could not probe for a connection pooler (%s); assuming none", error)
        return False
    if not pinned:
        log.warning(
            "the database connections are pooled per transaction (PgBouncer in transaction "
            "mode?): keelwave keeps nothing in a session; set KEELWAVE_DATABASE_POOLING="
            "transaction to say so and skip this probe"
        )
    return not pinned
