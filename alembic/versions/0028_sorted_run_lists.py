"""Indexes for the runs list sorted by duration, steps or tokens.

Revision ID: 0028
Revises: 0027
Create Date: 2026-12-07

The dashboard's runs table sorts by any of its columns, and refreshes its first page
every few seconds. Sorted by duration, steps or tokens the page sorted every run of
the project: 3.3–12.8 s on a data set of 2.5 million runs built independently
(docs/benchmarks.md, session 30), again at each refresh. ``cost_usd`` has had an
index since 0012; these give the other three theirs, each holding only the runs
whose value no longer changes much, so that the writes of runs still going, which
update a run's counters several times, do not pay for them:

* ``agent_runs_duration_idx``, ``agent_runs_steps_idx`` and ``agent_runs_tokens_idx``
  (input + output): runs with a duration, which a run has once it has ended. Runs
  without one are read apart (query/run_list.py): those still going from
  ``agent_runs_unfinished_idx`` (0002), and those that ended without one (loaded by
  hand, say) from ``agent_runs_ended_without_duration_idx``, which holds no other
  run. By duration they come last in either order (docs/api.md); by steps or tokens
  they are merged with the page read off the index.

Why runs with a duration rather than ended runs, for steps and tokens: the writer
asks whether the runs of a batch have ended (statements.CHECK_DIRECT_COPY, by id,
among ``ended_at IS NOT NULL``), and an index of ended runs with the id as its last
column serves that condition too. While the tables were new the planner found it
cheaper than the id index and read every ended run of the project for each lookup,
in the plans a connection keeps until the next ANALYZE (tests/test_run_list_plans.py).

Built in one transaction (alembic's), so on a large agent_runs the upgrade holds
writes to it while they build (a few seconds each per million runs).
"""

from __future__ import annotations

from alembic import op

revision = "0028"
down_revision = "0027"
branch_labels = None
depends_on = None

# (name, the sorted expression, the runs it holds): the expressions and predicates are
# query/run_list.py's, written the same way, so the planner can tell they serve it.
INDEXES = (
    ("agent_runs_duration_idx", "duration_ms", "duration_ms IS NOT NULL"),
    ("agent_runs_steps_idx", "step_count", "duration_ms IS NOT NULL"),
    ("agent_runs_tokens_idx", "(input_tokens + output_tokens)", "duration_ms IS NOT NULL"),
)
WITHOUT_DURATION = "agent_runs_ended_without_duration_idx"


def upgrade() -> None:
    for name, expression, predicate in INDEXES:
        op.execute(
            f"CREATE INDEX {name} ON agent_runs "
            f"(project_id, {expression} DESC, started_at DESC, id DESC) WHERE {predicate}"
        )
    op.execute(
        f"CREATE INDEX {WITHOUT_DURATION} ON agent_runs (project_id, started_at DESC, id DESC) "
        "WHERE duration_ms IS NULL AND ended_at IS NOT NULL"
    )


def downgrade() -> None:
    for name in [name for name, _, _ in INDEXES] + [WITHOUT_DURATION]:
        op.execute(f"DROP INDEX IF EXISTS {name}")
