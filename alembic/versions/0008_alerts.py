"""Alerts: destinations, rules, what fired (an outbox), and each delivery attempt.

Revision ID: 0008
Revises: 0007
Create Date: 2026-12-01

Why an outbox: an event is committed (alert_events) in the same transaction
that decides it fired, and only then sent; a process killed between the two
leaves it pending, and whichever server delivers next sends it, with the same
delivery id (the event's id). Deliveries are leased (``lease_until``) so that
two servers never send one event at the same time.

Once per run and rule is the unique index on (rule_id, run_id); a window rule's
firing/resolved state lives in alert_window_state, one row per rule. Run rules
look at the runs that changed since the last evaluation (alert_evaluation), found
through agent_runs_changed_idx: a step or model call moves last_activity_at, a
finish ended_at.
"""

from __future__ import annotations

from alembic import op

revision = "0008"
down_revision = "0007"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.execute(
        """
        CREATE TABLE alert_destinations (
            id          uuid PRIMARY KEY DEFAULT gen_random_uuid(),
            project_id  uuid NOT NULL REFERENCES projects (id) ON DELETE CASCADE,
            name        text NOT NULL,
            kind        text NOT NULL CHECK (kind IN ('webhook', 'slack')),
            url         text NOT NULL,
            secret      text,
            created_at  timestamptz NOT NULL DEFAULT now()
        )
        """
    )
    op.execute("CREATE INDEX alert_destinations_project_idx ON alert_destinations (project_id)")
    op.execute(
        """
        CREATE TABLE alert_rules (
            id                uuid PRIMARY KEY DEFAULT gen_random_uuid(),
            project_id        uuid NOT NULL REFERENCES projects (id) ON DELETE CASCADE,
            name              text NOT NULL,
            destination_id    uuid NOT NULL REFERENCES alert_destinations (id) ON DELETE CASCADE,
            agent_name        text,          -- the scope; NULL: every agent of the project
            condition         jsonb NOT NULL,
            cooldown_seconds  integer NOT NULL DEFAULT 0 CHECK (cooldown_seconds >= 0),
            enabled           boolean NOT NULL DEFAULT true,
            created_at        timestamptz NOT NULL DEFAULT now(),
            updated_at        timestamptz NOT NULL DEFAULT now()
        )
        """
    )
    op.execute("CREATE INDEX alert_rules_project_idx ON alert_rules (project_id)")
    op.execute(
        """
        CREATE TABLE alert_events (
            id               uuid PRIMARY KEY,     -- also the delivery id, stable across retries
            project_id       uuid NOT NULL REFERENCES projects (id) ON DELETE CASCADE,
            rule_id          uuid REFERENCES alert_rules (id) ON DELETE SET NULL,
            rule_name        text NOT NULL,
            destination_id   uuid REFERENCES alert_destinations (id) ON DELETE SET NULL,
            state            text NOT NULL CHECK (state IN ('firing', 'resolved')),
            agent_name       text,
            run_id           uuid,
            metric           text NOT NULL,
            value            jsonb,
            threshold        jsonb,
            fired_at         timestamptz NOT NULL DEFAULT now(),
            body             bytea NOT NULL,       -- exactly what is sent, every attempt
            content_type     text NOT NULL DEFAULT 'application/json',
            delivery_state   text NOT NULL DEFAULT 'pending'
                             CHECK (delivery_state IN ('pending', 'delivered', 'failed')),
            attempts         integer NOT NULL DEFAULT 0,
            next_attempt_at  timestamptz NOT NULL DEFAULT now(),
            lease_until      timestamptz,
            delivered_at     timestamptz,
            last_error       text
        )
        """
    )
    op.execute("CREATE INDEX alert_events_project_idx ON alert_events (project_id, fired_at DESC)")
    op.execute(
        "CREATE INDEX alert_events_due_idx ON alert_events (next_attempt_at) "
        "WHERE delivery_state = 'pending'"
    )
    # A run alert fires once per run and rule, whichever evaluator sees it first.
    op.execute(
        "CREATE UNIQUE INDEX alert_events_once_per_run ON alert_events (rule_id, run_id) "
        "WHERE run_id IS NOT NULL"
    )
    op.execute(
        "CREATE INDEX alert_events_run_idx ON alert_events (project_id, run_id) "
        "WHERE run_id IS NOT NULL"
    )
    op.execute(
        """
        CREATE TABLE alert_attempts (
            event_id     uuid NOT NULL REFERENCES alert_events (id) ON DELETE CASCADE,
            attempt      integer NOT NULL,
            started_at   timestamptz NOT NULL,
            duration_ms  double precision,
            status       integer,              -- the HTTP status, NULL when none came
            error        text,
            PRIMARY KEY (event_id, attempt)
        )
        """
    )
    # One evaluator at a time (whichever server holds its lock) resumes where the last
    # one stopped: the runs that changed since then.
    op.execute(
        "CREATE TABLE alert_evaluation (id integer PRIMARY KEY CHECK (id = 1), "
        "evaluated_until timestamptz NOT NULL)"
    )
    op.execute("INSERT INTO alert_evaluation VALUES (1, now())")
    op.execute(
        "CREATE INDEX agent_runs_changed_idx ON agent_runs "
        "(project_id, (greatest(last_activity_at, ended_at)))"
    )
    op.execute(
        """
        CREATE TABLE alert_window_state (
            rule_id     uuid PRIMARY KEY REFERENCES alert_rules (id) ON DELETE CASCADE,
            firing      boolean NOT NULL,
            value       jsonb,
            changed_at  timestamptz NOT NULL DEFAULT now()
        )
        """
    )


def downgrade() -> None:
    op.execute("DROP INDEX IF EXISTS agent_runs_changed_idx")
    for table in (
        "alert_window_state", "alert_evaluation", "alert_attempts", "alert_events", "alert_rules",
        "alert_destinations",
    ):  # fmt: skip
        op.execute(f"DROP TABLE IF EXISTS {table}")
