"""Initial schema: projects, API keys, runs, steps and model calls.

Revision ID: 0001
Revises:
Create Date: 2026-11-30

Design notes, because they are hard to change later:

* Payloads sent by agents (inputs, outputs, metadata, tool inputs) are stored
  as ``json``, not ``jsonb``: ``json`` keeps the exact text that was sent, so
  the stored ``tool_input`` hashes to the stored ``input_fingerprint``, and it
  accepts everything valid JSON may contain (``\\u0000``, lone surrogates),
  which ``jsonb`` rejects.
* agent_runs, agent_steps and ai_traces carry no unique constraint. On
  TimescaleDB they are hypertables, where a unique index must include the
  time column, and a retried request without a client timestamp would get a
  new server timestamp and slip past such an index. Identity ((project, run),
  (project, run, step_index), (project, call id)) is enforced by the ingest
  writer instead, the same way on both databases.
"""

from __future__ import annotations

from sqlalchemy import text

from alembic import op

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None

TERMINATION_REASONS = (
    "clean",
    "max_steps_reached",
    "context_limit",
    "error",
    "loop_detected",
    "timeout",
)
STEP_TYPES = ("tool_call", "llm_call", "think", "replan", "custom")

# (table, time column, compress segment-by, compress order-by)
HYPERTABLES = (
    ("agent_runs", "started_at", "project_id", "started_at DESC"),
    ("agent_steps", "started_at", "project_id, run_id", "step_index"),
    ("ai_traces", "started_at", "project_id", "started_at DESC"),
)


def _sql_list(values: tuple[str, ...]) -> str:
    return ", ".join(f"'{value}'" for value in values)


def upgrade() -> None:
    op.execute(
        """
        CREATE TABLE projects (
            id          uuid PRIMARY KEY DEFAULT gen_random_uuid(),
            name        text NOT NULL UNIQUE,
            created_at  timestamptz NOT NULL DEFAULT now()
        )
        """
    )
    op.execute(
        """
        CREATE TABLE api_keys (
            id              uuid PRIMARY KEY DEFAULT gen_random_uuid(),
            project_id      uuid NOT NULL REFERENCES projects (id) ON DELETE CASCADE,
            name            text,
            scope           text NOT NULL CHECK (scope IN ('ingest', 'read', 'all')),
            key_hash        bytea NOT NULL UNIQUE,   -- sha256 of the key; the key itself is never stored
            display_prefix  text NOT NULL,           -- 'kw_' and a few characters, to recognise a key
            created_at      timestamptz NOT NULL DEFAULT now(),
            revoked_at      timestamptz
        )
        """
    )
    op.execute("CREATE INDEX api_keys_project_idx ON api_keys (project_id)")

    op.execute(
        f"""
        CREATE TABLE agent_runs (
            project_id          uuid NOT NULL,
            id                  uuid NOT NULL,
            agent_name          text NOT NULL,
            parent_run_id       uuid,
            started_at          timestamptz NOT NULL,
            ended_at            timestamptz,
            termination_reason  text CHECK (termination_reason IN ({_sql_list(TERMINATION_REASONS)})),
            loop_detected       boolean NOT NULL DEFAULT false,
            loop_step_index     integer,
            input               json,
            output              json,
            metadata            json,
            tags                text[] NOT NULL DEFAULT '{{}}',
            error               text,
            received_at         timestamptz NOT NULL DEFAULT now()
        )
        """
    )
    op.execute("CREATE INDEX agent_runs_id_idx ON agent_runs (project_id, id)")
    op.execute("CREATE INDEX agent_runs_recent_idx ON agent_runs (project_id, started_at DESC)")
    op.execute(
        "CREATE INDEX agent_runs_parent_idx ON agent_runs (project_id, parent_run_id) "
        "WHERE parent_run_id IS NOT NULL"
    )

    op.execute(
        f"""
        CREATE TABLE agent_steps (
            project_id         uuid NOT NULL,
            run_id             uuid NOT NULL,
            step_index         integer NOT NULL,
            step_type          text NOT NULL CHECK (step_type IN ({_sql_list(STEP_TYPES)})),
            tool_name          text,
            tool_input         json,
            tool_output        json,
            content            text,
            input_fingerprint  bytea,   -- sha256(tool_name || 0x00 || tool_input bytes as sent)
            started_at         timestamptz NOT NULL,
            duration_ms        double precision,
            error              text,
            received_at        timestamptz NOT NULL DEFAULT now()
        )
        """
    )
    # Serves /loops, the step timeline and the writer's duplicate check.
    op.execute("CREATE INDEX agent_steps_run_idx ON agent_steps (project_id, run_id, step_index)")
    # By time alone: an index led by project_id would compete with agent_steps_run_idx
    # for the writer's duplicate checks, and win while the table has no statistics.
    op.execute("CREATE INDEX agent_steps_recent_idx ON agent_steps (started_at DESC)")

    op.execute(
        """
        CREATE TABLE ai_traces (
            project_id         uuid NOT NULL,
            id                 uuid NOT NULL,
            run_id             uuid,
            step_index         integer,
            provider           text NOT NULL,
            model              text NOT NULL,
            input_tokens       bigint NOT NULL DEFAULT 0,
            output_tokens      bigint NOT NULL DEFAULT 0,
            cache_read_tokens  bigint NOT NULL DEFAULT 0,
            reasoning_tokens   bigint NOT NULL DEFAULT 0,
            cost_usd           double precision,
            latency_ms         double precision,
            status             text NOT NULL DEFAULT 'ok' CHECK (status IN ('ok', 'error')),
            error              text,
            started_at         timestamptz NOT NULL,
            received_at        timestamptz NOT NULL DEFAULT now()
        )
        """
    )
    op.execute("CREATE INDEX ai_traces_id_idx ON ai_traces (project_id, id)")
    op.execute(
        "CREATE INDEX ai_traces_run_idx ON ai_traces (project_id, run_id) WHERE run_id IS NOT NULL"
    )
    op.execute("CREATE INDEX ai_traces_recent_idx ON ai_traces (started_at DESC)")

    if timescaledb_enabled():
        for table, time_column, segment_by, order_by in HYPERTABLES:
            op.execute(
                f"SELECT create_hypertable('{table}', '{time_column}', "
                f"chunk_time_interval => INTERVAL '1 day', migrate_data => true)"
            )
            _try_compression(table, segment_by, order_by)


def downgrade() -> None:
    for table in ("ai_traces", "agent_steps", "agent_runs", "api_keys", "projects"):
        op.execute(f"DROP TABLE IF EXISTS {table}")


def timescaledb_enabled() -> bool:
    """Create the extension where the server can load it; say whether it is there."""
    bind = op.get_bind()
    installed = bind.execute(
        text("SELECT 1 FROM pg_extension WHERE extname = 'timescaledb'")
    ).scalar()
    if installed:
        return True
    available = bind.execute(
        text("SELECT 1 FROM pg_available_extensions WHERE name = 'timescaledb'")
    ).scalar()
    preloaded = "timescaledb" in (
        bind.execute(text("SELECT current_setting('shared_preload_libraries')")).scalar() or ""
    )
    if not (available and preloaded):
        return False
    op.execute("CREATE EXTENSION IF NOT EXISTS timescaledb")
    return True


def _try_compression(table: str, segment_by: str, order_by: str) -> None:
    """Native compression needs the Timescale License build; the Apache-only build lacks it."""
    op.execute("SAVEPOINT keelwave_compression")
    try:
        op.execute(
            f"ALTER TABLE {table} SET (timescaledb.compress, "
            f"timescaledb.compress_segmentby = '{segment_by}', "
            f"timescaledb.compress_orderby = '{order_by}')"
        )
        op.execute(f"SELECT add_compression_policy('{table}', INTERVAL '7 days')")
    except Exception:
        op.execute("ROLLBACK TO SAVEPOINT keelwave_compression")
    else:
        op.execute("RELEASE SAVEPOINT keelwave_compression")
