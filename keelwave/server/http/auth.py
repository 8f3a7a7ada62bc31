"""API key authentication: ``Authorization: Bearer kw_…``, one project per key, scopes.

Checking a key costs a database round trip, which the ingest hot path cannot
pay on every request, so checked keys are cached in memory. A revocation must
still take effect at once, on every server process: ``keelwave keys revoke``
sends ``NOTIFY keelwave_keys``, and each server LISTENs and drops its cache.
When the listener reconnects after losing its connection the cache is
dropped too (a revocation may have happened meanwhile), and entries expire
after ``key_cache_seconds`` whatever happens. During a database outage the
cache keeps serving: no key can be revoked while the database is down, and
ingest fails fast with 503 at the writer instead of waiting here.
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from dataclasses import dataclass

import psycopg
from aiohttp import web
from psycopg_pool import AsyncConnectionPool

from keelwave.db.keys import KEY_PREFIX, KEYS_CHANNEL, hash_key
from keelwave.server.http.errors import ApiError
from keelwave.server.redaction import BUILTIN, ServerRedaction, for_patterns
from keelwave.server.store.periodic import stopped

log = logging.getLogger("keelwave.auth")

INGEST = frozenset({"ingest", "all"})
READ = frozenset({"read", "all"})
ANY = frozenset({"ingest", "read", "all"})
ALL = frozenset({"all"})  # changing and deleting


@dataclass(frozen=True, slots=True)
class Principal:
    """Who is calling: the key's id, its project and its scope."""

    key_id: str
    project_id: str
    project: str
    scope: str
    project_uuid: uuid.UUID  # project_id as the writer's binary COPY takes it
    # The project's redaction rules (server/redaction.py), cached with the key.
    redaction: ServerRedaction = BUILTIN
    # The project's retention period (None: forever): ingest stores nothing older.
    retention_days: int | None = None


class KeyStore:
    def __init__(self, pool: AsyncConnectionPool, conninfo: str, ttl: float) -> None:
        self._pool = pool
        self._conninfo = conninfo
        self._ttl = ttl
        self._cache: dict[bytes, tuple[float, Principal]] = {}
        # Counts the times the cache was forgotten: a lookup that began before one does
        # not cache what it read (it may be the key or project as it was before).
        self._generation = 0
        self._listener: asyncio.Task | None = None

    async def authenticate(self, request: web.Request, scopes: frozenset[str]) -> Principal:
        principal = await self._principal(request.headers.get("Authorization"))
        if principal.scope not in scopes:
            needed = " or ".join(f"'{scope}'" for scope in sorted(scopes))
            raise ApiError(
                403,
                "forbidden",
                f"this key has scope '{principal.scope}'; this endpoint needs {needed}",
            )
        return principal

    async def _principal(self, header: str | None) -> Principal:
        if not header:
            raise _unauthorized("missing 'Authorization: Bearer kw_…' header")
        scheme, _, token = header.partition(" ")
        token = token.strip()
        if scheme.lower() != "bearer" or not token:
            raise _unauthorized("the Authorization header must be 'Bearer kw_…'")
        if not token.startswith(KEY_PREFIX):
            raise _unauthorized("not a keelwave API key (keys start with 'kw_')")
        digest = hash_key(token)
        cached = self._cache.get(digest)
        now = time.monotonic()
        if cached is not None and cached[0] > now:
            return cached[1]
        generation = self._generation
        async with self._pool.connection() as conn:
            row = await (
                await conn.execute(
                    "SELECT k.id::text, k.project_id::text, p.name, k.scope, k.revoked_at, "
                    "p.redaction_patterns, p.retention_days "
                    "FROM api_keys k JOIN projects p ON p.id = k.project_id "
                    "WHERE k.key_hash = %s",
                    (digest,),
                )
            ).fetchone()
        if row is None:
            raise _unauthorized("unknown API key")
        if row[4] is not None:
            raise _unauthorized("this API key has been revoked")
        principal = Principal(
            row[0], row[1], row[2], row[3], uuid.UUID(row[1]), for_patterns(tuple(row[5])), row[6]
        )
        if self._ttl > 0 and generation == self._generation:
            self._cache[digest] = (now + self._ttl, principal)
        return principal

    def forget(self) -> None:
        """Forget every cached key: a key was revoked or a project's rules changed. The
        server that made the change calls this itself once it has committed, so its own
        next request sees the change; the others hear of it by NOTIFY (_listen)."""
        self._cache.clear()
        self._generation += 1

    # -- revocation listener ------------------------------------------------

    def start(self) -> None:
        self._listener = asyncio.create_task(self._listen(), name="keelwave-key-listener")

    async def stop(self) -> None:
        await stopped(self._listener)

    async def _listen(self) -> None:
        while True:
            try:
                async with await psycopg.AsyncConnection.connect(
                    self._conninfo, autocommit=True
                ) as conn:
                    await conn.execute(f"LISTEN {KEYS_CHANNEL}")
                    self.forget()  # anything revoked while we were not listening
                    async for _ in conn.notifies():
                        self.forget()
            except (psycopg.Error, OSError) as error:
                log.debug("key listener disconnected: %s", error)
            await asyncio.sleep(1.0)


def _unauthorized(message: str) -> ApiError:
    return ApiError(401, "unauthorized", message, headers={"WWW-Authenticate": "Bearer"})
