"""lz4, not pglz, for every large value the database stores from now on.

Revision ID: 0018
Revises: 0017
Create Date: 2026-12-02

PostgreSQL compresses a row's large values (a step's tool input and output, a
model call's messages, a run's input, output and metadata) once a row passes
about 2 KB, with pglz by default. pglz costs a lot of the database's CPU on the
payloads agents send: COPY of 20,000 rows of 2.6 KB JSON took 104-189 µs a row
with pglz and 43-62 µs with lz4 on this machine, at the same size
(docs/benchmarks.md). Migration 0006 made stored OTLP spans lz4 already.

``default_toast_compression`` is the method of every column that names none, so
setting it for the database covers every table, TimescaleDB's chunks and Citus's
shards included (Citus sends ALTER DATABASE … SET on to its nodes). It applies to
values written by sessions that start after it; values stored before stay as they
are (PostgreSQL reads both). A PostgreSQL built without lz4 (the embedded one
``keelwave serve`` starts is) keeps pglz, and so does a database whose owner is
not the user migrating it (ALTER DATABASE is the owner's).
"""

from __future__ import annotations

from alembic import op

revision = "0018"
down_revision = "0017"
branch_labels = None
depends_on = None

_SET = """
DO $$
BEGIN
    EXECUTE format('ALTER DATABASE %I {}', current_database());
EXCEPTION
    WHEN feature_not_supported OR invalid_parameter_value THEN
        NULL;  -- built without lz4: pglz, as before
    WHEN insufficient_privilege THEN
        RAISE NOTICE 'keelwave: not the database''s owner, so values stay pglz';
END $$
"""


def upgrade() -> None:
    op.execute(_SET.format("SET default_toast_compression = lz4"))


def downgrade() -> None:
    op.execute(_SET.format("RESET default_toast_compression"))
