"""An index of steps by tool, for the runs list's ``tool`` filter.

Revision ID: 0025
Revises: 0024
Create Date: 2026-12-07

``GET /runs?tool=…`` keeps the runs with a step of that tool. agent_steps had no
index that starts from a tool's name, so a tool few runs call, or none (a typo), had
the database look at steps run by run until it found a page, or read every step:
on a data set of 50 million steps built independently, 40 s for a rarely used tool,
and 166 s for a name no step has (bench/scale.py, docs/benchmarks.md). With this
index the database finds the runs that called the tool from its entries when they
are few, and checks a run in one probe when they are many: milliseconds either way.

It costs one more index entry per tool call stored (raw COPY of steps, the baseline
bench/workloads.py measures ingest against, pays it too). The upgrade builds it in
one pass, holding writes to agent_steps meanwhile: about 30 s per 10 million
steps on a 2-core machine.
"""

from __future__ import annotations

from alembic import op

revision = "0025"
down_revision = "0024"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.execute(
        "CREATE INDEX agent_steps_tool_idx ON agent_steps (project_id, tool_name, run_id) "
        "WHERE tool_name IS NOT NULL"
    )


def downgrade() -> None:
    op.execute("DROP INDEX IF EXISTS agent_steps_tool_idx")
