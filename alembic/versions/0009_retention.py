"""Retention and deletion: a retention period per project, and what enforcing it needs.

Revision ID: 0009
Revises: 0008
Create Date: 2026-12-02

* ``projects.retention_days``: how long a project's runs are kept, by the time
  they started; NULL keeps them forever (the default). ``serve`` enforces it
  (keelwave/server/store/retention.py), and deletion by request uses the same
  path (keelwave/server/store/erasure.py).
* ``retention_enforcement``: one row, the lease that makes one enforcer run at a
  time across every worker and server (a row, not a session advisory lock: a
  round spans many short transactions, and behind a transaction pooler a
  session lock may be taken on one server session and released on another),
  and what the last round did.
* ``retention_sweeps``: per project, the cutoff the last round swept up to, so
  that the sweep of rows that belong to no run (model calls sent without a run,
  steps whose run never came) reads only the time since, not all history.
* ``otlp_runs_run_idx``: deleting a run finds its OTLP trace by the run.
* ``keelwave_jsonb(json)``: metadata as jsonb for ``@>`` matching (erasure by
  ``metadata``). Payloads are stored as json, which accepts ``\\u0000`` and lone
  surrogates that jsonb rejects; a plain cast would make one such run abort an
  erasure request. The function turns those escapes into U+FFFD and retries.

Why batched deletes, not time partitioning, on plain PostgreSQL (the decision,
measured with bench/retention.py, docs/deployment.md "Retention"):

* Retention is per project. A time partition holds every project's rows of its
  days, so it can be dropped only once the *longest* period has passed it:
  projects with shorter periods need row deletes anyway, and with one project
  keeping forever no partition is ever dropped. Batched deletes are needed in
  every case; partitioning would only add a second path.
* Partitioning agent_steps and ai_traces by time makes every lookup by run (the
  writer's duplicate checks, a run's timeline, /loops) probe every partition,
  since steps are found by (project, run) and clients do not send a run's start
  with its steps: what TimescaleDB's daily chunks cost ingest in
  docs/benchmarks.md (31 chunks probed per check), and agent_runs is updated all
  its life, by (project, id), which a partition key on started_at does not serve.
* Deleting in batches of at most 256 runs (statements.FINE_LOCKS_UP_TO: a batch
  takes per-run locks, so ingest of other runs never waits for it) and 50,000
  steps and model calls (TimescaleDB decompresses at most 100,000 rows in one
  transaction), pausing between batches as long as each took, keeps every
  transaction short and leaves the database to ingest half the time. After a
  round that deleted more than 5% of a table, the enforcer runs VACUUM (not
  FULL: no lock that stalls reads or writes) on it, so that new rows reuse the
  space at once; the small rounds of a steady state are autovacuum's.

Measured (bench/retention.py, a month of history: 200,000 runs, 2 million steps,
400,000 model calls; one server under history.py's ingest load; 2 shared cores):
deleting 22 days of it (146,667 runs, 1,466,670 steps) took 49 to 61 s, with
ingest meanwhile at 78 to 117% of ingest without it in the same run (noise of
a shared machine); one day of it, 2 to 4 s. Without the pause: 41 to 44 s at 65
to 70%; with 2,000-run batches (which lock whole groups of runs): 17 to 19 s at
46 to 61%, and the longest moment without an answer to any client doubled. After
the VACUUM, agent_steps kept its 681 MiB and took 29,000 more steps without
growing.

On TimescaleDB, chunks of agent_steps and ai_traces wholly older than the
longest period of every project (when no project keeps forever) are dropped
whole with drop_chunks (22 days of each table in under a second, measured the
same way), after locking them all with a lock timeout under deadlock_timeout,
so that a deadlock with ingest, which reads every chunk, aborts the drop and
not the ingest; the rest goes by the batched deletes.
"""

from __future__ import annotations

from alembic import op

revision = "0009"
down_revision = "0008"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.execute(
        "ALTER TABLE projects ADD COLUMN retention_days integer "
        "CHECK (retention_days BETWEEN 1 AND 36500)"  # a hundred years: a typo, not a wish
    )
    op.execute(
        """
        CREATE TABLE retention_enforcement (
            id           integer PRIMARY KEY CHECK (id = 1),
            holder       uuid,            -- the enforcer at work, NULL when none is
            expires_at   timestamptz,     -- its lease; renewed after every batch
            started_at   timestamptz,     -- of the last round
            finished_at  timestamptz,
            summary      jsonb            -- what the last round did (retention.py)
        )
        """
    )
    op.execute("INSERT INTO retention_enforcement (id) VALUES (1)")
    op.execute(
        """
        CREATE TABLE retention_sweeps (
            project_id    uuid PRIMARY KEY REFERENCES projects (id) ON DELETE CASCADE,
            swept_before  timestamptz NOT NULL,  -- the cutoff of the last round
            enforced_at   timestamptz NOT NULL DEFAULT now(),
            runs_deleted  bigint NOT NULL DEFAULT 0  -- by the last round
        )
        """
    )
    op.execute("CREATE INDEX otlp_runs_run_idx ON otlp_runs (project_id, run_id)")
    op.execute(
        r"""
        CREATE FUNCTION keelwave_jsonb(value json) RETURNS jsonb
        LANGUAGE plpgsql IMMUTABLE STRICT PARALLEL SAFE AS $$
        BEGIN
            RETURN value::jsonb;
        EXCEPTION WHEN untranslatable_character OR invalid_text_representation THEN
            RETURN regexp_replace(value::text, '\\u(0000|[dD][89a-fA-F][0-9a-fA-F]{2})',
                                  '\\ufffd', 'g')::jsonb;
        END
        $$
        """
    )


def downgrade() -> None:
    op.execute("DROP FUNCTION IF EXISTS keelwave_jsonb(json)")
    op.execute("DROP INDEX IF EXISTS otlp_runs_run_idx")
    op.execute("DROP TABLE IF EXISTS retention_sweeps")
    op.execute("DROP TABLE IF EXISTS retention_enforcement")
    op.execute("ALTER TABLE projects DROP COLUMN IF EXISTS retention_days")
