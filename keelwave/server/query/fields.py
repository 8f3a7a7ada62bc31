"""What the run queries select: the columns of a run, a step and a model call, shared by
the runs list, a run's pages, its timeline and comparisons, so that they answer alike.

``RUN_FIELDS`` computes a run's status when it is read (finished once it has
ended, stalled when silent for ``%(stall)s``, else running) and counts its
child runs through agent_runs_parent_idx. Steps need ``fingerprint_hits`` (how
many of the run's steps share their fingerprint) beside ``STEP_FIELDS`` for
:func:`step_json`.
"""

from __future__ import annotations

import base64
from typing import Any

RUN_FIELDS = """
    id, agent_name, parent_run_id, started_at, ended_at, duration_ms, termination_reason,
    loop_detected, loop_step_index, detected_loop, detected_loop_step_index, findings,
    step_count, input_tokens, output_tokens, cost_usd,
    llm_calls, error, tags, last_activity_at,
    CASE WHEN ended_at IS NOT NULL THEN 'finished'
         WHEN last_activity_at < now() - %(stall)s THEN 'stalled'
         ELSE 'running' END AS status,
    (SELECT count(*) FROM agent_runs child
     WHERE child.project_id = agent_runs.project_id
       AND child.parent_run_id = agent_runs.id) AS child_count
"""

# Whether a run came as OpenTelemetry spans: the mapping puts the trace's id in its
# metadata (ingest/otlp/conventions.py). Then no agent reported its loop_detected; the
# server set it from the fingerprints. (The runs list reads it from each row's
# metadata in Python instead: run_list.py.) Metadata is json as sent, and ``->>``
# refuses a document with a ``\u0000`` (or a lone surrogate) escape: such metadata,
# rare, is read through keelwave_jsonb (migration 0009), which masks them; the rest is
# read directly.
TRACE_ID = "otel.trace_id"
FROM_SPANS = rf"""
    (CASE WHEN strpos(metadata::text, '\u') > 0
          THEN keelwave_jsonb(metadata) ? '{TRACE_ID}'
          ELSE (metadata ->> '{TRACE_ID}') IS NOT NULL END) IS TRUE AS from_spans"""

STEP_FIELDS = """
    step_index, step_type, tool_name, tool_input, tool_output, content,
    input_fingerprint, started_at, duration_ms, error, error_traceback
"""

MODEL_CALL_FIELDS = """
    id, step_index, provider, model, input_tokens, output_tokens, cache_read_tokens,
    reasoning_tokens, cost_usd, latency_ms, status, error, started_at, input_messages,
    output_messages
"""


def step_json(row: dict[str, Any]) -> dict[str, Any]:
    fingerprint = row.pop("input_fingerprint")
    hits = row.pop("fingerprint_hits")
    row["fingerprint"] = base64.b64encode(fingerprint).decode() if fingerprint else None
    row["loop_hits"] = hits if hits > 1 else 0
    row["in_loop"] = hits > 1
    return row
