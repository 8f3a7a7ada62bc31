"""TimescaleDB storage that stays compressed: runs in a plain table, steps and model
calls compressed per run.

Revision ID: 0005
Revises: 0004
Create Date: 2026-12-01

On plain PostgreSQL this migration changes nothing.

Why (the decision, measured on TimescaleDB 2.28 / PostgreSQL 15, docs/deployment.md):

* **agent_runs is a plain table.** A run is one row that changes all its life:
  every step and model call bumps its counters, its finish and the reaper
  update it. As a hypertable with compressed chunks, each such UPDATE without
  a bound on started_at made TimescaleDB decompress every compressed batch of
  the table, and past 100,000 compressed runs (its
  max_tuples_decompressed_per_dml_transaction) every step, model call and
  finish failed for good. Bounding every write by the run's chunk would need
  started_at on every step and finish, which clients do not send. Runs are few
  next to steps (10 to 50 steps a run), so one row per run in an ordinary
  table with ordinary indexes is cheap, and updating it never touches
  compressed data. Retention deletes runs in batches (the data lifecycle).
* **agent_steps and ai_traces stay hypertables**, written once and never
  updated, compressed after seven days, segmented by (project_id, run_id). A
  step or a model call is found by its run: the writer's duplicate checks,
  the run-start counts of steps and calls that came first, a run's timeline,
  all filter on (project_id, run_id), which in a compressed chunk is an index
  probe of one segment instead of decompressing a project's every batch. A
  late step of an old run is inserted beside the compressed data (TimescaleDB
  2.11+), never decompressing it.
* **Rollups stay tables kept by the writer, not continuous aggregates.** They
  count runs by the hour the run started, and a run's finish changes its
  hour's counts later: a continuous aggregate cannot be defined over a plain
  table, refreshes after a delay, and would have to re-read whole hours. The
  rollups are exact at once, and the same on plain PostgreSQL.

The move: agent_runs is copied into a new plain table (compressed chunks are
read, not decompressed in place), its indexes and the views over it are made
again, and the hypertable is dropped. ai_traces' compressed chunks are
decompressed so that its segmenting can change; the compression policy (or
keelwave's own maintenance, store/timescale.py) compresses them again.
"""

from __future__ import annotations

from sqlalchemy import text

from alembic import op

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None

# TimescaleDB's own index on a hypertable's time column; plain installs have none.
TIMESCALE_DEFAULT_INDEX = "agent_runs_started_at_idx"
SEGMENT_BY = "project_id, run_id"


def upgrade() -> None:
    if not _is_hypertable("agent_runs"):
        return
    bind = op.get_bind()
    indexes = [
        definition
        for name, definition in bind.execute(
            text("SELECT indexname, indexdef FROM pg_indexes WHERE tablename = 'agent_runs'")
        )
        if name != TIMESCALE_DEFAULT_INDEX
    ]
    views = bind.execute(
        text(
            """
            SELECT DISTINCT v.relname, pg_get_viewdef(v.oid)
            FROM pg_depend d
            JOIN pg_rewrite w ON w.oid = d.objid
            JOIN pg_class v ON v.oid = w.ev_class
            WHERE d.refobjid = 'agent_runs'::regclass AND v.relname <> 'agent_runs'
            """
        )
    ).fetchall()
    for name, _ in views:
        op.execute(f'DROP VIEW "{name}"')
    op.execute("ALTER TABLE agent_runs RENAME TO agent_runs_hypertable")
    op.execute(
        "CREATE TABLE agent_runs (LIKE agent_runs_hypertable "
        "INCLUDING DEFAULTS INCLUDING CONSTRAINTS INCLUDING STORAGE)"
    )
    op.execute("INSERT INTO agent_runs SELECT * FROM agent_runs_hypertable")
    op.execute("DROP TABLE agent_runs_hypertable")
    for definition in indexes:
        op.execute(definition)
    for name, definition in views:
        op.execute(f'CREATE VIEW "{name}" AS {definition}')
    op.execute("ANALYZE agent_runs")

    if _compression_enabled("ai_traces"):
        op.execute("SELECT decompress_chunk(chunk, true) FROM show_chunks('ai_traces') AS chunk")
        op.execute(f"ALTER TABLE ai_traces SET (timescaledb.compress_segmentby = '{SEGMENT_BY}')")


def downgrade() -> None:
    # The plain agent_runs works on every version of keelwave's queries; turning it
    # back into a hypertable would bring back what this migration removes.
    pass


def _is_hypertable(table: str) -> bool:
    bind = op.get_bind()
    if not bind.execute(text("SELECT 1 FROM pg_extension WHERE extname = 'timescaledb'")).scalar():
        return False
    return bool(
        bind.execute(
            text("SELECT 1 FROM timescaledb_information.hypertables WHERE hypertable_name = :t"),
            {"t": table},
        ).scalar()
    )


def _compression_enabled(table: str) -> bool:
    return _is_hypertable(table) and bool(
        op.get_bind()
        .execute(
            text(
                "SELECT compression_enabled FROM timescaledb_information.hypertables "
                "WHERE hypertable_name = :t"
            ),
            {"t": table},
        )
        .scalar()
    )
