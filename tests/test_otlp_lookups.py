"""The OTLP store's reads of an export's traces and runs (store/traces.py) look each
key up in its index, however many rows the project holds and whatever the planner
believes about them: as joins, they read every row of the project for each export."""

from __future__ import annotations

import uuid

import psycopg
import pytest
from conftest import make_project
from test_run_calls import rows_touched

from keelwave.server.store import traces

# A project of 20,000 stored spans over 1,000 traces, 3,000 trace runs and 20,000 runs,
# written as exports write them and never analysed: on a new table (or a project new to
# the table's statistics) the planner takes ``project_id = $1`` to be rare.
_STORED = """
INSERT INTO otlp_spans (project_id, trace_id, span_id, span)
SELECT %(project)s, decode(lpad(to_hex(t), 32, '0'), 'hex'),
       decode(lpad(to_hex(t * 100 + s), 16, '0'), 'hex'), decode(repeat('ab', 400), 'hex')
FROM generate_series(1, 1000) t, generate_series(1, 20) s
"""
_STORED_RUNS = """
INSERT INTO otlp_runs (project_id, trace_id, run_id, digest, step_digests, calls)
SELECT %(project)s, decode(lpad(to_hex(t), 32, '0'), 'hex'),
       ('00000000-0000-4000-8000-' || lpad(to_hex(t * 10 + r), 12, '0'))::uuid, '\\x01', '', ''
FROM generate_series(1, 1000) t, generate_series(1, 3) r
"""
_RUNS_STORED = """
INSERT INTO agent_runs (project_id, id, agent_name, started_at)
SELECT %(project)s, ('00000000-0000-4000-8000-' || lpad(to_hex(n), 12, '0'))::uuid, 'agent',
       now()
FROM generate_series(1, 20000) n
"""
_KEYS = 600  # of one export: half of them stored already (a retry's), half new


def _trace(number: int) -> bytes:
    return bytes.fromhex(f"{number:032x}")


def _run(number: int) -> uuid.UUID:
    return uuid.UUID(f"00000000-0000-4000-8000-{number:012x}")


_NUMBERS = range(400, 400 + _KEYS)  # traces 400-999 are stored; every other one is asked
_SPANS = [
    (_trace(t), bytes.fromhex(f"{(t * 100 + 1 if n % 2 else 999_999_999 - n):016x}"))
    for n, t in enumerate(_NUMBERS)
]
_TRACES = [_trace(t if n % 2 else 5000 + t) for n, t in enumerate(_NUMBERS)]
_RUNS = [_run(10 * t if n % 2 else 50_000 + t) for n, t in enumerate(_NUMBERS)]
_HALF = _KEYS // 2

# (statement, its parameters but the project's, where the project goes, rows it finds,
#  rows it must read: COUNT_SPANS counts the 20 spans of each trace found)
CASES = {
    "READ_STORED_OF_EXPORT": (
        traces.READ_STORED_OF_EXPORT,
        ([t for t, _ in _SPANS], [s for _, s in _SPANS]),
        2,
        _HALF,
        _HALF,
    ),
    "READ_SPANS": (
        traces.READ_SPANS,
        ([t for t, _ in _SPANS], [s for _, s in _SPANS]),
        2,
        _HALF,
        _HALF,
    ),
    "COUNT_SPANS": (traces.COUNT_SPANS, (_TRACES,), 1, _HALF, 20 * _HALF),
    "READ_SPAN_IDS": (traces.READ_SPAN_IDS, (_TRACES,), 1, _HALF, 20 * _HALF),
    "READ_DIGESTS": (traces.READ_DIGESTS, (_TRACES,), 1, 3 * _HALF, 3 * _HALF),
    "RUNS_OF_TRACES": (traces.RUNS_OF_TRACES, (_TRACES,), 1, 3 * _HALF, 3 * _HALF),
    "runs of a rewrite": (
        "SELECT * FROM "
        + traces._RUNS_OF.replace("%(project_id)s", "%s").replace("%(ids)b", "%b")
        + " r",
        (_RUNS,),
        1,
        _HALF,
        _HALF,
    ),
}


@pytest.fixture(scope="module")
def stored(db_url: str) -> uuid.UUID:
    project_id = uuid.UUID(make_project(db_url).id)
    with psycopg.connect(db_url, autocommit=True) as conn:
        for sql in (_STORED, _STORED_RUNS, _RUNS_STORED):
            conn.execute(sql, {"project": project_id})
    return project_id


@pytest.mark.parametrize("case", CASES)
def test_an_exports_keys_are_looked_up_one_by_one(
    db_url: str, stored: uuid.UUID, case: str
) -> None:
    """Before: a hash join over every span (or run) of the project, for each export
    (13 ms of PostgreSQL's time an export at 130,000 spans, growing with the project)."""
    sql, given, at, found, needed = CASES[case]
    params = (*given[:at], stored, *given[at:])
    with psycopg.connect(db_url, autocommit=True) as conn:
        [[plan]] = conn.execute("EXPLAIN (ANALYZE, FORMAT JSON) " + sql, params).fetchall()
        rows = conn.execute(sql, params).fetchall()
    assert len(rows) == found
    # A lookup per key (each touches what it finds, or nothing), not a pass over the
    # project's 20,000 spans or runs.
    assert rows_touched(plan[0]["Plan"]) < 3 * (needed + _KEYS)
