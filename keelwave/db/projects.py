"""Projects, their retention periods and redaction patterns, used by ``keelwave projects``.

A project's ``retention_days`` (NULL: keep forever) is enforced by ``serve``
(keelwave/server/store/retention.py); its ``redaction_patterns`` are applied by
the server before anything of the project is stored (server/server/redaction.py).
``PATCH /v1/projects/{p}`` sets both too.
"""

from __future__ import annotations

import psycopg
from psycopg.rows import dict_row

from keelwave.db.keys import KEYS_CHANNEL

MAX_RETENTION_DAYS = 36_500  # migration 0009's CHECK


class UnknownProject(LookupError):
    """No project has that name (or id)."""


LIST = """
SELECT p.id::text AS id, p.name, p.created_at, p.retention_days, p.redaction_patterns,
       s.enforced_at AS retention_enforced_at,
       (SELECT count(*) FROM api_keys k WHERE k.project_id = p.id AND k.revoked_at IS NULL)
           AS active_keys
FROM projects p LEFT JOIN retention_sweeps s ON s.project_id = p.id
ORDER BY p.name
"""


def list_projects(conn: psycopg.Connection) -> list[dict]:
    with conn.cursor(row_factory=dict_row) as cur:
        return cur.execute(LIST).fetchall()


def find(conn: psycopg.Connection, project: str) -> dict:
    """A project's id and name, by its name or id."""
    with conn.cursor(row_factory=dict_row) as cur:
        row = cur.execute(
            "SELECT id::text AS id, name FROM projects WHERE name = %s OR id::text = %s",
            (project, project),
        ).fetchone()
    if row is None:
        raise UnknownProject(f"no project named {project!r} (see `keelwave projects list`)")
    return row


def set_retention(conn: psycopg.Connection, project: str, days: int | None) -> dict:
    """Set a project's retention (by name, or id); None keeps its data forever."""
    if days is not None and not 1 <= days <= MAX_RETENTION_DAYS:
        raise ValueError(f"retention must be 1 to {MAX_RETENTION_DAYS} days, or forever")
    return _set(conn, project, "retention_days", days)


def set_redaction(conn: psycopg.Connection, project: str, patterns: list[str]) -> dict:
    """Replace a project's own redaction patterns (by name, or id); [] keeps only the
    built-in rules. Raises redaction.InvalidPattern naming a pattern that cannot be used."""
    from keelwave.server.redaction import check_patterns

    return _set(conn, project, "redaction_patterns", check_patterns(patterns))


def _set(conn: psycopg.Connection, project: str, column: str, value: object) -> dict:
    """Set one of a project's settings; the project's id, name and that setting.

    Every server's key cache is told: ingest reads a project's retention and redaction
    with its key (the Principal), so the change applies to the next request whichever
    server takes it."""
    with conn.cursor(row_factory=dict_row) as cur:
        row = cur.execute(
            f"UPDATE projects SET {column} = %s WHERE name = %s OR id::text = %s "
            f"RETURNING id::text AS id, name, {column}",
            (value, project, project),
        ).fetchone()
        if row is None:
            raise UnknownProject(f"no project named {project!r} (see `keelwave projects list`)")
        cur.execute(f"NOTIFY {KEYS_CHANNEL}")
    return row
