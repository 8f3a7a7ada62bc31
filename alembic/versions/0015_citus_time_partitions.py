"""On Citus: steps and model calls as daily time partitions, by the time they arrived.

Revision ID: 0015
Revises: 0014
Create Date: 2026-12-01

On plain PostgreSQL and TimescaleDB this migration changes nothing (TimescaleDB
has its own chunks, migration 0001); it acts where 0013 distributed the schema.

agent_steps and ai_traces, the two tables that grow with every request, become
range-partitioned tables of one partition per UTC day, still distributed by
project_id and co-located with agent_runs: each shard of them is partitioned
alike. Retention then drops whole days (``drop_old_time_partitions``) and closed
days are converted to the columnar access method
(``alter_old_partitions_set_access_method``); keelwave/server/store/citus/
partitions.py does both, and creates the days ahead.

Why ``received_at`` (when the server stored the row), not ``started_at`` (the
agent's clock), is the partition key (docs/scale-out.md, "Time partitions"):

* **Dedup keeps its exact key.** A step is stored once per (project_id, run_id,
  step_index), a model call once per (project_id, id, run_id). These tables
  have no unique key (0001 says why): the writer anti-joins staged rows against
  stored ones under row locks (store/citus/statements.py), so nothing has to
  add the partition column to a key. A key that did include a time would
  break dedup: a retried step whose ``started_at`` the server filled in
  (clients may omit it) carries another time the second time. The anti-join
  probes every partition's (project_id, run_id, …) index, as it probed the one
  table's before.
* **Every row has a partition.** The server's clock picks it, and the days are
  created ahead (partitions.AHEAD): an agent whose clock is off by years, or a
  late step of a month-old run, lands in today's partition instead of failing
  its batch for want of one (no default partition, which would block creating
  the days it holds rows of).
* **A closed day is never written again.** Late steps go to today, so the
  columnar conversion of a past day (append-only: no UPDATE or DELETE) never
  meets an insert there, and inserts never make small columnar stripes.
* **Dropping a day is retention-safe** with the slack the TimescaleDB path uses:
  a row arrives after its run started (give or take the agent's clock), so a
  day received wholly before the longest period's cutoff less a day holds
  only rows of runs every project has let go.

The upgrade copies the rows into the new tables (one routed INSERT … SELECT per
shard, co-located), in the migration's transaction; servers are stopped for it
as for every migration that rewrites a table. The downgrade copies them back.
"""

from __future__ import annotations

from sqlalchemy import text

from alembic import op

revision = "0015"
down_revision = "0014"
branch_labels = None
depends_on = None

PARTITIONED = ("agent_steps", "ai_traces")
PARTITION_COLUMN = "received_at"
INTERVAL = "1 day"
# Days created ahead by the migration; serve keeps this many ahead from then on. Few:
# every statement that reads steps by run is planned over every day there is.
AHEAD = "2 days"
_SET_CUSTOM_SCAN = "DO $$ BEGIN EXECUTE format('ALTER DATABASE %I {action} columnar.enable_custom_scan{value}', current_database()); END $$"


def on_citus_schema() -> bool:
    """Whether 0013 distributed this database (the extension alone does not say so)."""
    found = op.get_bind().execute(
        text(
            "SELECT 1 FROM pg_extension WHERE extname = 'citus' "
            "AND to_regclass('kw_run_locks') IS NOT NULL"
        )
    )
    return found.first() is not None


def _indexes(table: str) -> list[str]:
    rows = op.get_bind().execute(
        text("SELECT indexdef FROM pg_indexes WHERE schemaname = 'public' AND tablename = :t"),
        {"t": table},
    )
    return [definition for (definition,) in rows]


def _views(table: str) -> list[tuple[str, str]]:
    """The views over ``table`` (0002's) and their definitions."""
    rows = op.get_bind().execute(
        text(
            """
            SELECT DISTINCT v.relname, pg_get_viewdef(v.oid)
            FROM pg_depend d
            JOIN pg_rewrite w ON w.oid = d.objid
            JOIN pg_class v ON v.oid = w.ev_class
            WHERE d.refobjid = CAST(:t AS regclass) AND v.relname <> CAST(:t AS name)
            """
        ),
        {"t": table},
    )
    return [(name, definition) for name, definition in rows]


def _rebuild(table: str, partitioned: bool) -> None:
    """Replace ``table`` by a copy that is (or is not) partitioned by day, rows, indexes,
    views and distribution included."""
    indexes = _indexes(table)
    views = _views(table)
    for name, _ in views:
        op.execute(f'DROP VIEW "{name}"')
    old = f"{table}_before_0015"
    op.execute(f"ALTER TABLE {table} RENAME TO {old}")
    partition_by = f" PARTITION BY RANGE ({PARTITION_COLUMN})" if partitioned else ""
    op.execute(
        f"CREATE TABLE {table} (LIKE {old} INCLUDING DEFAULTS INCLUDING CONSTRAINTS){partition_by}"
    )
    op.execute(
        f"SELECT create_distributed_table('{table}', 'project_id', colocate_with => 'agent_runs')"
    )
    if partitioned:
        # Every day a stored row arrived on, up to AHEAD from now.
        op.execute(
            f"""
            SELECT create_time_partitions('{table}', INTERVAL '{INTERVAL}',
                   now() + INTERVAL '{AHEAD}',
                   date_trunc('day', least(now(), (SELECT min({PARTITION_COLUMN}) FROM {old})),
                              'UTC'))
            """
        )
    op.execute(f"INSERT INTO {table} SELECT * FROM {old}")
    op.execute(f"DROP TABLE {old}")
    for definition in indexes:
        op.execute(definition)
    for name, definition in views:
        op.execute(f'CREATE VIEW "{name}" AS {definition}')


def upgrade() -> None:
    if not on_citus_schema():
        return
    op.execute("SET LOCAL citus.multi_shard_modify_mode TO 'sequential'")
    # Time partitioning names its days in the session's time zone; keelwave's days are UTC.
    op.execute("SET LOCAL timezone TO 'UTC'")
    # The columnar access method, for closed days (store/citus/partitions.py); Citus
    # installs it on every node.
    op.execute("CREATE EXTENSION IF NOT EXISTS citus_columnar")
    # Columnar's own scan refuses every statement that needs a row's ctid, which every
    # DELETE of these tables does (erasure, retention, OTLP) and the writer's dedup
    # DELETE … USING too, even where no row of a columnar day matches: with it off,
    # those days are read by PostgreSQL's scans of the access method, and only a row
    # actually to be deleted there is refused. Set for the database, so every session
    # of every node has it from its start (Citus sends ALTER DATABASE on to the nodes).
    op.execute(_SET_CUSTOM_SCAN.format(action="SET", value=" = off"))
    for table in PARTITIONED:
        _rebuild(table, partitioned=True)


def downgrade() -> None:
    if not on_citus_schema():
        return
    op.execute("SET LOCAL citus.multi_shard_modify_mode TO 'sequential'")
    for table in PARTITIONED:
        _rebuild(table, partitioned=False)
    op.execute(_SET_CUSTOM_SCAN.format(action="RESET", value=""))
