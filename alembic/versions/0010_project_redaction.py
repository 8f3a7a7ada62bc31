"""Redaction patterns a project adds to the built-in set.

Revision ID: 0010
Revises: 0009
Create Date: 2026-12-03

* ``projects.redaction_patterns``: regular expressions (Python syntax) whose
  matches the server replaces with ``"[REDACTED]"`` in this project's payloads
  before they are stored, on top of the built-in rules
  (keelwave/server/redaction.py). Set with ``PATCH /v1/projects/{p}``
  (``{"redaction_patterns": [...]}``) or ``keelwave projects set-redaction``.
  Empty by default: the built-in rules alone.
"""

from __future__ import annotations

from alembic import op

revision = "0010"
down_revision = "0009"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.execute("ALTER TABLE projects ADD COLUMN redaction_patterns text[] NOT NULL DEFAULT '{}'")


def downgrade() -> None:
    op.execute("ALTER TABLE projects DROP COLUMN IF EXISTS redaction_patterns")
