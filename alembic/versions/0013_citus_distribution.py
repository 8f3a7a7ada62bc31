"""On Citus: distribute the tables by project, and the shared ones to every node.

Revision ID: 0013
Revises: 0012
Create Date: 2026-12-01

On plain PostgreSQL and TimescaleDB this migration changes nothing; it acts
when the ``citus`` extension is installed in the database (``keelwave migrate
--profile citus`` installs it first). docs/scale-out.md says why and how.

* **Distributed by project_id, co-located**: runs, steps, model calls, the
  rollups, the OTLP spans and run digests. Every statement the server runs on
  them names one project (a request's key belongs to one project), so Citus
  routes it whole to the one shard that holds the project, joins and
  correlated subqueries included: a project's write is a single-node
  transaction, with no two-phase commit. Every primary key there already leads
  with project_id (the rollups', otlp_spans', otlp_runs'); runs, steps and
  model calls have no unique key at all (0001 says why).
* **Reference tables** (a copy on every node): projects, keys, alert rules,
  destinations, events and attempts, the alert and retention bookkeeping. They
  are small, read by every request (keys) or changed rarely (alerts), and the
  foreign keys between them stay.
* **Staging tables** (``kw_stage_*``): on one PostgreSQL the writer stages rows
  in session-local TEMP tables, and Citus refuses to join a local table with a
  distributed one. Here they are UNLOGGED distributed tables co-located with the
  data, under the same names; a writer that finds them does not create TEMP
  ones (store/citus/). A transaction only ever sees its own uncommitted rows in
  them (each empties what it staged before it commits), so writers need no
  batch id to stay apart; UNLOGGED because what is in them never outlives a
  transaction.
* **kw_run_locks**: advisory locks are node-local, and clients may connect to
  any node. A writer takes row locks on (project, run bucket) rows here instead
  (an upsert, in bucket order), on the project's own shard.
"""

from __future__ import annotations

from sqlalchemy import text

from alembic import op

revision = "0013"
down_revision = "0012"
branch_labels = None
depends_on = None

# In foreign-key order: a table's references are reference tables before it is one.
REFERENCE_TABLES = (
    "projects",
    "api_keys",
    "alert_destinations",
    "alert_rules",
    "alert_events",
    "alert_attempts",
    "alert_window_state",
    "alert_evaluation",
    "retention_enforcement",
    "retention_sweeps",
    # alembic's own: a server connected to a worker must see the schema's revision too.
    "alembic_version",
)
DISTRIBUTED_TABLES = (
    "agent_runs",  # first: the others are co-located with it
    "agent_steps",
    "ai_traces",
    "agent_run_rollups",
    "agent_duration_rollups",
    "agent_tool_rollups",
    "otlp_spans",
    "otlp_runs",
)
# (staging table, the table it mirrors, whether rows carry their place in the batch)
STAGING_TABLES = (
    ("kw_stage_runs", "agent_runs", True),
    ("kw_stage_steps", "agent_steps", True),
    ("kw_stage_traces", "ai_traces", True),
    ("kw_stage_rollups", "agent_run_rollups", False),
    ("kw_stage_durations", "agent_duration_rollups", False),
    ("kw_stage_tools", "agent_tool_rollups", False),
    ("kw_stage_spans", "otlp_spans", False),
)


def on_citus() -> bool:
    found = op.get_bind().execute(text("SELECT 1 FROM pg_extension WHERE extname = 'citus'"))
    return found.first() is not None


def upgrade() -> None:
    if not on_citus():
        return
    # One connection per worker for everything this transaction does: distributing
    # several tables (and their foreign keys) in one transaction requires it.
    op.execute("SET LOCAL citus.multi_shard_modify_mode TO 'sequential'")
    for table in REFERENCE_TABLES:
        op.execute(f"SELECT create_reference_table('{table}')")
    for table in DISTRIBUTED_TABLES:
        colocate = "none" if table == "agent_runs" else "agent_runs"
        op.execute(
            f"SELECT create_distributed_table('{table}', 'project_id', colocate_with => '{colocate}')"
        )
    for name, like, seq in STAGING_TABLES:
        op.execute(
            f"CREATE UNLOGGED TABLE {name} "
            f"({'seq integer, ' if seq else ''}LIKE {like} INCLUDING DEFAULTS)"
        )
        op.execute(
            f"SELECT create_distributed_table('{name}', 'project_id', colocate_with => 'agent_runs')"
        )
    op.execute(
        """
        CREATE TABLE kw_run_locks (
            project_id  uuid NOT NULL,
            bucket      integer NOT NULL,
            taken       bigint NOT NULL DEFAULT 0,
            PRIMARY KEY (project_id, bucket)
        )
        """
    )
    op.execute(
        "SELECT create_distributed_table('kw_run_locks', 'project_id', colocate_with => 'agent_runs')"
    )


def downgrade() -> None:
    if not on_citus():
        return
    op.execute("SET LOCAL citus.multi_shard_modify_mode TO 'sequential'")
    op.execute("DROP TABLE IF EXISTS kw_run_locks")
    for name, _, _ in STAGING_TABLES:
        op.execute(f"DROP TABLE IF EXISTS {name}")
    # Back to ordinary tables on the coordinator, data included (co-located ones last
    # first, so none is left co-located with a table that is gone).
    for table in reversed(DISTRIBUTED_TABLES):
        op.execute(f"SELECT undistribute_table('{table}', cascade_via_foreign_keys => false)")
    # A reference table is undistributed with every table its foreign keys connect it
    # to, so the first of a connected set takes the rest with it.
    for table in reversed(REFERENCE_TABLES):
        op.execute(
            f"SELECT undistribute_table('{table}', cascade_via_foreign_keys => true) "
            f"WHERE EXISTS (SELECT 1 FROM pg_dist_partition WHERE logicalrelid = '{table}'::regclass)"
        )
