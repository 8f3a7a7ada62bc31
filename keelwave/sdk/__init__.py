"""The Python SDK: record an agent's runs, steps and model calls.

It never imports keelwave.server, keelwave.tui or anything they need: agents
install keelwave for this module alone, and importing it stays fast.

The names below are the whole public surface; the modules behind them are
private (``_client``, ``_run``, ``_context``, ``_validate``, ``_transport``,
``_delivery``, ``_spool``, ``_canonical``, ``_redact``, ``_errors``,
``_adapters``), as in httpx, so they can be split or merged
without breaking anyone's imports. Their imports form a tree, with the
client at the top: see tests/test_sdk_structure.py.
"""

from keelwave.sdk._canonical import canonical_json, fingerprint
from keelwave.sdk._client import Keelwave, RunScope
from keelwave.sdk._context import get_current_run
from keelwave.sdk._errors import AgentStopped, LoopDetected, MaxStepsExceeded
from keelwave.sdk._redact import Redaction
from keelwave.sdk._run import Run

__all__ = [
    "AgentStopped",
    "Keelwave",
    "LoopDetected",
    "MaxStepsExceeded",
    "Redaction",
    "Run",
    "RunScope",
    "canonical_json",
    "fingerprint",
    "get_current_run",
]
