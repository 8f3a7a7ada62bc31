"""Indexes for runs-list filters that few runs match: findings, loops, termination reasons.

Revision ID: 0022
Revises: 0021
Create Date: 2026-12-07

The first page of runs filtered by ``finding``, ``detected_loop``, ``loop_detected``,
``loop`` or ``termination_reason`` read runs newest first until it had a page. That is
quick when many runs match (bench/scale.py's data set loops in one run in eight), and
reads the whole project when few or none do: on a data set of 2.5 million runs built
independently, with the server's findings still rare, ``finding=exact_loop`` took 11 s
and ``detected_loop=true`` 16 s. Such filters are what someone looking for trouble
uses, and trouble is rare. Each index holds only the runs its filter asks for, in the
list's order, so the page is read off it whatever the share of runs that match, and it
costs nothing on the writes of runs that do not match (most of them):

* ``agent_runs_finding_<kind>_idx``, one per kind of finding (findings.KINDS);
* ``agent_runs_detected_loop_idx``, ``agent_runs_reported_loop_idx`` and
  ``agent_runs_any_loop_idx`` for ``detected_loop=true``, ``loop_detected=true`` and
  ``loop=true``;
* ``agent_runs_termination_idx``: finished runs by reason, for ``termination_reason``.
"""

from __future__ import annotations

from alembic import op

revision = "0022"
down_revision = "0021"
branch_labels = None
depends_on = None

# (the kinds when this was written; a kind added later gets its index in a migration)
FINDING_KINDS = ("exact_loop", "cycle", "near_duplicate", "no_progress")
NEWEST_FIRST = "(project_id, started_at DESC, id DESC)"
LOOPS = {
    "agent_runs_detected_loop_idx": "detected_loop",
    "agent_runs_reported_loop_idx": "loop_detected",
    "agent_runs_any_loop_idx": "(loop_detected OR detected_loop)",
}


def upgrade() -> None:
    for kind in FINDING_KINDS:
        # (the filter's own expression, so the planner can tell the index serves it)
        op.execute(
            f"CREATE INDEX agent_runs_finding_{kind}_idx ON agent_runs {NEWEST_FIRST} "
            f"WHERE '{kind}'::text = ANY (findings)"
        )
    for name, predicate in LOOPS.items():
        op.execute(f"CREATE INDEX {name} ON agent_runs {NEWEST_FIRST} WHERE {predicate}")
    op.execute(
        "CREATE INDEX agent_runs_termination_idx ON agent_runs "
        "(project_id, termination_reason, started_at DESC, id DESC) "
        "WHERE termination_reason IS NOT NULL"
    )


def downgrade() -> None:
    names = [f"agent_runs_finding_{kind}_idx" for kind in FINDING_KINDS]
    for name in [*names, *LOOPS, "agent_runs_termination_idx"]:
        op.execute(f"DROP INDEX IF EXISTS {name}")
