"""An index of the pairs of tags each run has, for lists by two tags or more.

Revision ID: 0029
Revises: 0028
Create Date: 2026-12-07

``/runs?tag=prod&tag=staging`` when both tags are common and no run has both (each
run's environment): the tags' GIN index (0012) can prove that only by decoding both
tags' whole lists of runs, 2.4 million entries and 70–85 ms on a data set of 2.5
million runs (docs/benchmarks.md, sessions 33–35), however rare the combination is.
An index whose keys are the pairs a run's tags make answers it with one key's list:
as long as the runs that have both tags, empty here.

* ``keelwave_tag_pairs(text[])``: each pair of distinct tags of an array, the two in
  byte order (``COLLATE "C"``, which no locale changes) joined by U+001F. Used on both
  sides, the runs' tags and the list's, so the two agree by construction. A tag may
  itself contain U+001F, so two pairs can make one key: the list checks the tags
  themselves too (query/run_containment.py). In PL/pgSQL, which a connection compiles
  once: a SQL function with a query in its body is planned again by every statement
  that stores a run, 100–150 µs a run start (bench/flush_cost.py).
* ``agent_runs_tag_pairs_idx``: GIN over those pairs, for runs with 2 to
  PAIRED_UP_TO tags: a run with n tags has n(n-1)/2 pairs, and 64 tags (the most a
  run may have) would be 2,016 keys.
* ``agent_runs_many_tags_idx``: GIN over the tags of the runs with more than that,
  which the pairs do not cover; the list reads both.

A run's tags are set once, when it is stored, so each index is written once per
run, only for runs with two tags or more. Built in alembic's transaction: about half
a minute per million such runs, holding writes to agent_runs meanwhile.
"""

from __future__ import annotations

from sqlalchemy import text

from alembic import op

revision = "0029"
down_revision = "0028"
branch_labels = None
depends_on = None

# query/run_containment.py's PAIRED_UP_TO: the two must agree.
PAIRED_UP_TO = 8


def upgrade() -> None:
    op.execute(
        """
        CREATE FUNCTION keelwave_tag_pairs(tags text[]) RETURNS text[]
        LANGUAGE plpgsql IMMUTABLE STRICT PARALLEL SAFE AS $$
        DECLARE
            pairs text[] := '{}';
            a text;
            b text;
        BEGIN
            FOREACH a IN ARRAY tags LOOP
                FOREACH b IN ARRAY tags LOOP
                    IF a COLLATE "C" < b COLLATE "C" THEN
                        pairs := pairs || (a || chr(31) || b);
                    END IF;
                END LOOP;
            END LOOP;
            RETURN pairs;
        END
        $$
        """
    )
    op.execute(
        "CREATE INDEX agent_runs_tag_pairs_idx ON agent_runs USING gin (keelwave_tag_pairs(tags)) "
        f"WHERE cardinality(tags) BETWEEN 2 AND {PAIRED_UP_TO}"
    )
    op.execute(
        "CREATE INDEX agent_runs_many_tags_idx ON agent_runs USING gin (tags) "
        f"WHERE cardinality(tags) > {PAIRED_UP_TO}"
    )


def on_citus() -> bool:
    found = op.get_bind().execute(text("SELECT 1 FROM pg_extension WHERE extname = 'citus'"))
    return found.first() is not None


def downgrade() -> None:
    if on_citus():
        # Citus drops a function over one connection per node, which a transaction that
        # has dropped the indexes over several (one per shard) no longer can.
        op.execute("SET LOCAL citus.multi_shard_modify_mode TO 'sequential'")
    op.execute("DROP INDEX IF EXISTS agent_runs_many_tags_idx")
    op.execute("DROP INDEX IF EXISTS agent_runs_tag_pairs_idx")
    op.execute("DROP FUNCTION IF EXISTS keelwave_tag_pairs(text[])")
