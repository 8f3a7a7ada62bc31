"""keelwave: see why an AI agent looped, stalled or burned tokens, down to the step.

``from keelwave import Keelwave`` is the SDK. Importing keelwave imports only
the SDK: never the server, the CLI or the terminal app, so an agent that
installs keelwave pays for nothing it does not use.
"""

from keelwave.sdk import (
    AgentStopped,
    Keelwave,
    LoopDetected,
    MaxStepsExceeded,
    Run,
    get_current_run,
)

__version__ = "0.1.0"
__all__ = [
    "AgentStopped",
    "Keelwave",
    "LoopDetected",
    "MaxStepsExceeded",
    "Run",
    "__version__",
    "get_current_run",
]
