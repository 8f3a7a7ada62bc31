"""Which run, and which step of it, the calling code is inside of.

Kept apart from the client and from :class:`~keelwave.sdk.Run` because both
sides need it: the client sets the current run and step as it enters them,
while the provider adapters (and the agent's own code) only read them. With
the context in its own module, the adapters link a model call to its run and
step without importing the client, and nothing here imports anything back.

contextvars, not thread-locals: each thread and each asyncio task sees its
own value, and a task started inside a run inherits that run.
"""

from __future__ import annotations

import contextvars
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from keelwave.sdk._run import Run

# The run being recorded; set and reset by the client's RunScope.
current_run: contextvars.ContextVar[Run | None] = contextvars.ContextVar(
    "keelwave_current_run", default=None
)

# The step an observed tool is running as, so a model call made inside it is linked to it.
current_step_index: contextvars.ContextVar[int | None] = contextvars.ContextVar(
    "keelwave_current_step", default=None
)


def get_current_run() -> Run | None:
    """The run the calling code is inside of, or None.

    Each thread and each asyncio task sees its own (contextvars); a task
    started inside a run sees that run.
    """
    return current_run.get()
