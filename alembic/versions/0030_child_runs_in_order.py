"""An index of child runs newest first, for the runs list's ``root=false``.

Revision ID: 0030
Revises: 0029
Create Date: 2026-12-07

``root=false`` (runs with a parent run) had no index in the list's order:
``agent_runs_parent_idx`` (0001) finds a run's children by the parent. Alone it did not
need one: the list read runs newest first and kept the children. Beside a condition
PostgreSQL expects few runs to pass (a tool, checked on each run by a probe of the
steps), it read every child run of the project from the parent index instead, sorted
them and checked each: ``tool=web_search&root=false`` took 375 ms on 2.5 million runs
(75,000 of them children), for a page found among the newest 450 children.

``agent_runs_children_idx`` holds the child runs alone, in the list's order, as the
finding and loop indexes (0022) do theirs: the page is read off it whatever the other
conditions, and query/run_streams.py merges it with the other ordered conditions'
indexes. Runs without a parent, most of them in many projects, are not in it, so
their writes do not pay for it.

Built in one transaction (alembic's), so on a large agent_runs the upgrade holds
writes to it while it builds (about a second per million runs).
"""

from __future__ import annotations

from alembic import op

revision = "0030"
down_revision = "0029"
branch_labels = None
depends_on = None

NAME = "agent_runs_children_idx"


def upgrade() -> None:
    # (the predicate is query/run_list.py's root=false, written the same way)
    op.execute(
        f"CREATE INDEX {NAME} ON agent_runs (project_id, started_at DESC, id DESC) "
        "WHERE parent_run_id IS NOT NULL"
    )


def downgrade() -> None:
    op.execute(f"DROP INDEX IF EXISTS {NAME}")
