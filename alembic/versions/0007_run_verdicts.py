"""The server's verdict on each run: loops it detected, and the kinds of its findings.

Revision ID: 0007
Revises: 0006
Create Date: 2026-12-01

The spec's ``loop_detected`` / ``loop_step_index`` stay what the SDK reported.
Beside them the server keeps its own view, computed from the stored steps
(keelwave.server.findings) shortly after they are committed (store/verdicts.py):

* ``detected_loop``, ``detected_loop_step_index``: an exact loop or a cycle,
  and the first step of the earliest one;
* ``findings``: the kinds found (exact_loop, cycle, near_duplicate, no_progress);
* ``verdict_steps``: how many steps the verdict was computed from. A run whose
  ``step_count`` differs (new or late steps) is due again; -1 forces it (an OTLP
  run whose steps were renumbered). The partial index lists the due runs, and
  is empty when the verdicts are current.

The hourly rollups count runs with each verdict, like ``loop_runs``, so the
aggregates read them without scanning runs. Runs stored before this revision
are due (their verdict_steps is 0) and get their verdicts as the server finds
time, oldest activity first.
"""

from __future__ import annotations

from alembic import op

revision = "0007"
down_revision = "0006"
branch_labels = None
depends_on = None

VERDICT_COUNTERS = (
    "detected_loop_runs", "exact_loop_runs", "cycle_runs", "near_duplicate_runs",
    "no_progress_runs",
)  # fmt: skip


def upgrade() -> None:
    op.execute(
        """
        ALTER TABLE agent_runs
            ADD COLUMN detected_loop             boolean NOT NULL DEFAULT false,
            ADD COLUMN detected_loop_step_index  integer,
            ADD COLUMN findings                  text[] NOT NULL DEFAULT '{}',
            ADD COLUMN verdict_steps             integer NOT NULL DEFAULT 0
        """
    )
    op.execute(
        "CREATE INDEX agent_runs_verdict_due_idx ON agent_runs (last_activity_at) "
        "WHERE verdict_steps <> step_count"
    )
    op.execute(
        "ALTER TABLE agent_run_rollups "
        + ", ".join(f"ADD COLUMN {name} bigint NOT NULL DEFAULT 0" for name in VERDICT_COUNTERS)
    )


def downgrade() -> None:
    op.execute(
        "ALTER TABLE agent_run_rollups "
        + ", ".join(f"DROP COLUMN {name}" for name in VERDICT_COUNTERS)
    )
    op.execute("DROP INDEX IF EXISTS agent_runs_verdict_due_idx")
    op.execute(
        "ALTER TABLE agent_runs DROP COLUMN detected_loop, DROP COLUMN detected_loop_step_index, "
        "DROP COLUMN findings, DROP COLUMN verdict_steps"
    )
