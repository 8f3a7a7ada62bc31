"""The runs list's indexes in its own order: child runs, and runs by agent name.

Revision ID: 0030
Revises: 0029
Create Date: 2026-12-07

* ``agent_runs_children_idx``: ``root=false`` (runs with a parent run) had no index in
  the list's order: ``agent_runs_parent_idx`` (0001) finds a run's children by the
  parent. Alone it did not need one: the list read runs newest first and kept the
  children. Beside a condition PostgreSQL expects few runs to pass (a tool, checked on
  each run by a probe of the steps), it read every child run of the project from the
  parent index instead, sorted them and checked each: ``tool=web_search&root=false``
  took 375 ms on 2.5 million runs (75,000 of them children), for a page found among
  the newest 450 children. This index holds the child runs alone, newest first, as
  the finding and loop indexes (0022) hold theirs: the page is read off it, and
  query/run_streams.py merges it with the other ordered conditions' indexes. Runs
  without a parent, most of them in many projects, are not in it, so their writes
  do not pay for it.
* ``agent_runs_agent_idx`` again, its columns all in one direction: (project, agent
  name, started_at, id), each descending. It was (project, agent name ascending,
  started_at and id descending) (0002), which gives one agent's runs newest first
  but not the list sorted by agent name, ``agent_name, started_at, id`` all one way:
  PostgreSQL read the first agent's runs and sorted them all (an incremental sort),
  109,000 runs for the dashboard's first page sorted by agent on 2.5 million runs.
  One direction throughout serves both, read forwards or backwards.

Built in one transaction (alembic's), so on a large agent_runs the upgrade holds
writes to it while they build (a few seconds per million runs).
"""

from __future__ import annotations

from alembic import op

revision = "0030"
down_revision = "0029"
branch_labels = None
depends_on = None

CHILDREN = "agent_runs_children_idx"
AGENT = "agent_runs_agent_idx"


def upgrade() -> None:
    # (the predicate is query/run_list.py's root=false, written the same way)
    op.execute(
        f"CREATE INDEX {CHILDREN} ON agent_runs (project_id, started_at DESC, id DESC) "
        "WHERE parent_run_id IS NOT NULL"
    )
    op.execute(f"DROP INDEX {AGENT}")
    op.execute(
        f"CREATE INDEX {AGENT} ON agent_runs (project_id, agent_name DESC, started_at DESC, id DESC)"
    )


def downgrade() -> None:
    op.execute(f"DROP INDEX IF EXISTS {CHILDREN}")
    op.execute(f"DROP INDEX IF EXISTS {AGENT}")
    op.execute(
        f"CREATE INDEX {AGENT} ON agent_runs (project_id, agent_name, started_at DESC, id DESC)"
    )
