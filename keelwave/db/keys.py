"""Projects and API keys, used by ``keelwave keys`` and by the server's first start.

A key is ``kw_`` followed by 32 random bytes in URL-safe base64. Only its
SHA-256 is stored, with a short display prefix so a person can tell keys apart
in ``keys list``; the key itself is shown once, when it is created. A key
belongs to one project and has a scope: ``ingest`` (what an agent needs),
``read`` (dashboard, CLI) or ``all``.
"""

from __future__ import annotations

import hashlib
import secrets
import uuid
from dataclasses import asdict, dataclass
from datetime import datetime

import psycopg
from psycopg.rows import dict_row

KEY_PREFIX = "kw_"
SCOPES = ("ingest", "read", "all")
DEFAULT_PROJECT = "default"
# Servers LISTEN on this channel and forget cached keys when a key is revoked.
KEYS_CHANNEL = "keelwave_keys"


class UnknownKey(LookupError):
    """A key operation named something that does not exist or is ambiguous."""


def hash_key(key: str) -> bytes:
    return hashlib.sha256(key.encode()).digest()


def new_key() -> str:
    return KEY_PREFIX + secrets.token_urlsafe(32)


@dataclass(frozen=True)
class CreatedKey:
    id: str
    key: str
    project_id: str
    project: str
    scope: str

    def as_dict(self) -> dict[str, str]:
        return asdict(self)


def ensure_project(conn: psycopg.Connection, name: str) -> str:
    row = conn.execute(
        "INSERT INTO projects (name) VALUES (%s) ON CONFLICT (name) DO NOTHING RETURNING id",
        (name,),
    ).fetchone()
    if row is None:
        row = conn.execute("SELECT id FROM projects WHERE name = %s", (name,)).fetchone()
    return str(row[0])


def create_key(
    conn: psycopg.Connection, project: str, scope: str = "all", name: str | None = None
) -> CreatedKey:
    """Create a key, and the project too if it does not exist yet."""
    if scope not in SCOPES:
        raise ValueError(f"scope must be one of {', '.join(SCOPES)}, not {scope!r}")
    if not project.strip():
        raise ValueError("the project name must not be empty")
    with conn.transaction():
        project_id = ensure_project(conn, project)
        key = new_key()
        key_id = conn.execute(
            "INSERT INTO api_keys (project_id, name, scope, key_hash, display_prefix) "
            "VALUES (%s, %s, %s, %s, %s) RETURNING id",
            (project_id, name, scope, hash_key(key), key[: len(KEY_PREFIX) + 6]),
        ).fetchone()[0]
    return CreatedKey(str(key_id), key, project_id, project, scope)


def bootstrap_first_key(conn: psycopg.Connection) -> CreatedKey | None:
    """On a database with no key at all, create project ``default`` and one ``all`` key.

    Several server processes may start at once; the advisory lock makes sure
    only one of them creates (and prints) the key.
    """
    with conn.transaction():
        conn.execute("SELECT pg_advisory_xact_lock(hashtext('keelwave.bootstrap'))")
        if conn.execute("SELECT EXISTS (SELECT 1 FROM api_keys)").fetchone()[0]:
            return None
        return create_key(conn, DEFAULT_PROJECT, "all", name="created on first start")


def list_keys(conn: psycopg.Connection, project: str | None = None) -> list[dict]:
    query = (
        "SELECT k.id::text AS id, k.display_prefix AS prefix, k.name, k.scope, "
        "p.name AS project, p.id::text AS project_id, k.created_at, k.revoked_at "
        "FROM api_keys k JOIN projects p ON p.id = k.project_id "
    )
    params: tuple = ()
    if project is not None:
        query += "WHERE p.name = %s "
        params = (project,)
    query += "ORDER BY p.name, k.created_at"
    with conn.cursor(row_factory=dict_row) as cur:
        return cur.execute(query, params).fetchall()


def revoke_key(conn: psycopg.Connection, key_id: str) -> dict:
    """Revoke a key by its id or a unique prefix of it; returns the key's row."""
    key_id = key_id.strip().lower()
    if not key_id or any(ch not in "0123456789abcdef-" for ch in key_id):
        raise UnknownKey(f"{key_id!r} is not a key id (see `keelwave keys list`)")
    with conn.transaction(), conn.cursor(row_factory=dict_row) as cur:
        rows = cur.execute(
            "SELECT id::text AS id, display_prefix AS prefix, revoked_at FROM api_keys "
            "WHERE id::text LIKE %s",
            (key_id + "%",),
        ).fetchall()
        if not rows:
            raise UnknownKey(f"no key with id {key_id!r}")
        if len(rows) > 1:
            raise UnknownKey(f"{key_id!r} matches {len(rows)} keys; give more of the id")
        row = rows[0]
        if row["revoked_at"] is None:
            row["revoked_at"] = cur.execute(
                "UPDATE api_keys SET revoked_at = now() WHERE id = %s RETURNING revoked_at",
                (row["id"],),
            ).fetchone()["revoked_at"]
        cur.execute(f"NOTIFY {KEYS_CHANNEL}")
    return row


def jsonable(row: dict) -> dict:
    """Rows for --json output: datetimes as ISO 8601, ids as strings."""
    return {
        key: value.isoformat()
        if isinstance(value, datetime)
        else str(value)
        if isinstance(value, uuid.UUID)
        else value
        for key, value in row.items()
    }
