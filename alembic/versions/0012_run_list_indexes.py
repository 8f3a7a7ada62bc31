"""Indexes for the runs list's sorts and filters that a scan in time order cannot serve.

Revision ID: 0012
Revises: 0011
Create Date: 2026-12-04

On 50 million steps over 2.5 million runs (bench/scale.py), the first page of runs
sorted by cost, or filtered by a rare tag or a rare metadata value, read the runs in
time order until it had a page: 2.1–2.8 s, 0.8–1.2 s and 6.8–9.3 s. With these:

* ``agent_runs_cost_idx``: ``sort=cost_usd`` (either order) reads its page in index
  order, with or without an agent (4–5 ms).
* ``agent_runs_tags_idx``: ``tag=…`` (GIN on the array; ``tags @> …``) finds a rare
  tag's runs at once (4 ms); a common tag keeps the ordered scan.
* ``agent_runs_metadata_idx``: ``metadata=KEY=VALUE`` (GIN, jsonb_path_ops, on
  ``keelwave_jsonb(metadata)``, the expression the filter and erasure by metadata
  use) finds a rare value's runs at once (3 ms).

Built in one transaction (alembic's), so on a large existing agent_runs the upgrade
holds writes to it while they build (5, 2 and 15 s for 2.5 million runs). Measured
with bench/workloads.py before and after, ingest's CPU per step did not move beyond
the noise of a shared machine (server 96–119 µs, PostgreSQL 22–29 µs a step without
them; 115 and 26 with them). What stays over budget at that scale (summary, health
and tools over 30 days: their duration histograms) needs daily rollups, not indexes.
"""

from __future__ import annotations

from alembic import op

revision = "0012"
down_revision = "0011"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.execute(
        "CREATE INDEX agent_runs_cost_idx ON agent_runs "
        "(project_id, cost_usd DESC, started_at DESC, id DESC)"
    )
    op.execute("CREATE INDEX agent_runs_tags_idx ON agent_runs USING gin (tags)")
    op.execute(
        "CREATE INDEX agent_runs_metadata_idx ON agent_runs "
        "USING gin (keelwave_jsonb(metadata) jsonb_path_ops)"
    )
    # The planner knows nothing of an expression until ANALYZE samples it: until then it
    # takes a rare metadata value for a common one and scans in time order (7 s on 2.5
    # million runs, against 2 ms once analysed). A sample of the table: seconds at most.
    op.execute("ANALYZE agent_runs")


def downgrade() -> None:
    for name in ("agent_runs_metadata_idx", "agent_runs_tags_idx", "agent_runs_cost_idx"):
        op.execute(f"DROP INDEX IF EXISTS {name}")
