"""Projects and their retention periods, used by ``keelwave projects``.

A project's ``retention_days`` (NULL: keep forever) is enforced by ``serve``
(keelwave/server/store/retention.py); ``PATCH /v1/projects/{p}`` sets it too.
"""

from __future__ import annotations

import psycopg
from psycopg.rows import dict_row

MAX_RETENTION_DAYS = 36_500  # migration 0009's CHECK


class UnknownProject(LookupError):
    """No project has that name (or id)."""


LIST = """
SELECT p.id::text AS id, p.name, p.created_at, p.retention_days,
       s.enforced_at AS retention_enforced_at,
       (SELECT count(*) FROM api_keys k WHERE k.project_id = p.id AND k.revoked_at IS NULL)
           AS active_keys
FROM projects p LEFT JOIN retention_sweeps s ON s.project_id = p.id
ORDER BY p.name
"""


def list_projects(conn: psycopg.Connection) -> list[dict]:
    with conn.cursor(row_factory=dict_row) as cur:
        return cur.execute(LIST).fetchall()


def set_retention(conn: psycopg.Connection, project: str, days: int | None) -> dict:
    """Set a project's retention (by name, or id); None keeps its data forever."""
    if days is not None and not 1 <= days <= MAX_RETENTION_DAYS:
        raise ValueError(f"retention must be 1 to {MAX_RETENTION_DAYS} days, or forever")
    with conn.cursor(row_factory=dict_row) as cur:
        row = cur.execute(
            "UPDATE projects SET retention_days = %s WHERE name = %s OR id::text = %s "
            "RETURNING id::text AS id, name, retention_days",
            (days, project, project),
        ).fetchone()
    if row is None:
        raise UnknownProject(f"no project named {project!r} (see `keelwave projects list`)")
    return row
