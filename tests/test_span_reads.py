"""The OTLP store's reads of stored spans by their ids (store/traces.py) look each id
up in the primary key, however many spans the project holds and whatever the planner
believes about them."""

from __future__ import annotations

import uuid

import psycopg
import pytest
from conftest import Project
from test_run_calls import rows_touched

from keelwave.server.store import traces

# A project with 20,000 stored spans over 1,000 traces, written as exports write them
# and never analysed: on a new table (or a project new to the table's statistics) the
# planner takes ``project_id = $1`` to be rare.
_STORED = """
INSERT INTO otlp_spans (project_id, trace_id, span_id, span)
SELECT %(project)s, decode(lpad(to_hex(t), 32, '0'), 'hex'),
       decode(lpad(to_hex(t * 100 + s), 16, '0'), 'hex'), decode(repeat('ab', 400), 'hex')
FROM generate_series(1, 1000) t, generate_series(1, 20) s
"""
_EXPORT = 600  # span ids of one export: half stored already (a retry), half new


@pytest.mark.parametrize("statement", ["READ_STORED_OF_EXPORT", "READ_SPANS"])
def test_an_exports_spans_are_read_one_index_lookup_each(
    db_url: str, project: Project, statement: str
) -> None:
    """Before: a hash join over every span of the project, for each export (13 ms of
    PostgreSQL's time an export at 130,000 spans, growing with the project)."""
    project_id = uuid.UUID(project.id)
    traces_of = [bytes.fromhex(f"{t:032x}") for t in range(400, 400 + _EXPORT)]
    spans_of = [
        bytes.fromhex(f"{(t * 100 + 1 if n % 2 else 999_999_999 - n):016x}")
        for n, t in enumerate(range(400, 400 + _EXPORT))
    ]
    with psycopg.connect(db_url, autocommit=True) as conn:
        conn.execute(_STORED, {"project": project_id})
        sql = getattr(traces, statement)
        params = (traces_of, spans_of, project_id)
        [[plan]] = conn.execute("EXPLAIN (ANALYZE, FORMAT JSON) " + sql, params).fetchall()
        found = conn.execute(sql, params).fetchall()
    stored = [(t, s) for n, (t, s) in enumerate(zip(traces_of, spans_of, strict=True)) if n % 2]
    assert sorted((bytes(row[0]), bytes(row[1])) for row in found) == sorted(stored)
    # A lookup per id (each touches a row or none), not a pass over the project.
    assert rows_touched(plan[0]["Plan"]) < 5 * _EXPORT
