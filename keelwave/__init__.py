"""keelwave: see why an AI agent looped, stalled or burned tokens, down to the step.

``from keelwave import Keelwave`` is the SDK. Importing keelwave never imports
the server, the CLI or the terminal app, so an agent that installs keelwave
pays for nothing it does not use.

The SDK itself is loaded on first use of one of its names, not by ``import
keelwave``: every ``keelwave.*`` module (the CLI's ``keelwave --help`` among
them) runs this file first, and none of them should pay for the SDK unless
it uses it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from keelwave.sdk import (
        AgentStopped,
        Keelwave,
        LoopDetected,
        MaxStepsExceeded,
        Redaction,
        Run,
        get_current_run,
    )

__version__ = "0.1.0"
__all__ = [
    "AgentStopped",
    "Keelwave",
    "LoopDetected",
    "MaxStepsExceeded",
    "Redaction",
    "Run",
    "__version__",
    "get_current_run",
]


def __getattr__(name: str) -> Any:
    if name in __all__:
        from keelwave import sdk

        value = getattr(sdk, name)
        globals()[name] = value  # once: later lookups are plain attribute reads
        return value
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
