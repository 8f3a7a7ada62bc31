"""Exceptions the SDK raises inside an agent, and only when asked to (guards).

Both derive from :class:`AgentStopped`. When one escapes an ``@client.agent``
function (or a ``client.run`` block) the run is finished with the matching
termination reason, and the exception is re-raised to the caller.
"""

from __future__ import annotations


class AgentStopped(Exception):
    """A guard stopped the agent. ``termination_reason`` says which."""

    termination_reason = "error"


class MaxStepsExceeded(AgentStopped):
    """The agent tried to take more steps than ``max_steps`` allows."""

    termination_reason = "max_steps_reached"

    def __init__(self, max_steps: int) -> None:
        super().__init__(f"the agent took more than max_steps={max_steps} steps")
        self.max_steps = max_steps


class LoopDetected(AgentStopped):
    """The agent repeated a tool call with the same input (``stop_on_loop=True``)."""

    termination_reason = "loop_detected"

    def __init__(self, first_step: int, repeated_at: int) -> None:
        super().__init__(f"step {repeated_at} repeats step {first_step}: same tool, same input")
        self.first_step = first_step
        self.repeated_at = repeated_at
