"""Which pooled connections to test before handing them out.

The pool tests a connection before a request gets it, so that one that died
in a database restart is replaced instead of failing the request. The test is
a round trip; an agent-shaped load checks out a connection several times per
run (finishes, the keeper, queries), and made one check a few milliseconds
apart each time. A connection handed out moments ago was working then: it is
handed out again untested. If the database went down in between, the request
fails with 503 as it would have mid-query, and the pool drops the broken
connection when it comes back.
"""

from __future__ import annotations

import time
import weakref

import psycopg
from psycopg_pool import AsyncConnectionPool

TRUSTED_FOR_SECONDS = 0.5  # untested within this long of its last checkout

_LAST_CHECKOUT: weakref.WeakKeyDictionary[psycopg.AsyncConnection, float] = (
    weakref.WeakKeyDictionary()
)


async def check_unless_just_used(conn: psycopg.AsyncConnection) -> None:
    """The pool's ``check``: AsyncConnectionPool.check_connection, unless ``conn`` was
    handed out in the last TRUSTED_FOR_SECONDS."""
    now = time.monotonic()
    last = _LAST_CHECKOUT.get(conn)
    _LAST_CHECKOUT[conn] = now
    if last is not None and now - last < TRUSTED_FOR_SECONDS:
        return
    await AsyncConnectionPool.check_connection(conn)
