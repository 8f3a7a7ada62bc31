"""The Python SDK: record an agent's runs, steps and model calls.

It never imports keelwave.server, keelwave.tui or anything they need: agents
install keelwave for this module alone, and importing it stays fast.
"""

from keelwave.sdk.canonical import canonical_json, fingerprint
from keelwave.sdk.client import Keelwave, RunScope, get_current_run
from keelwave.sdk.errors import AgentStopped, LoopDetected, MaxStepsExceeded
from keelwave.sdk.run import Run

__all__ = [
    "AgentStopped",
    "Keelwave",
    "LoopDetected",
    "MaxStepsExceeded",
    "Run",
    "RunScope",
    "canonical_json",
    "fingerprint",
    "get_current_run",
]
