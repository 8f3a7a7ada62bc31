"""What agent_run_rollups counts, per (project, hour a run started, agent, shard).

Its own module because both the writers (statements.py) and the daily twin's
definition (daily_rollups.py) need the list, and the second is imported by the first.
"""

from __future__ import annotations

COUNTERS = (
    "runs", "finished_runs", "loop_runs", "error_runs", "steps", "llm_calls",
    "input_tokens", "output_tokens", "cost_usd", "duration_ms_sum",
    "term_clean", "term_max_steps_reached", "term_context_limit", "term_error",
    "term_loop_detected", "term_timeout",
    # The server's own verdicts (verdicts.py), per kind of finding.
    "detected_loop_runs", "exact_loop_runs", "cycle_runs", "near_duplicate_runs",
    "no_progress_runs",
)  # fmt: skip
