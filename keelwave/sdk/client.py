"""The SDK client. So far it holds its configuration; runs, steps and the
background transport come with the Python SDK issue (#4)."""

from __future__ import annotations

import os
from contextvars import ContextVar
from typing import Any

DEFAULT_ENDPOINT = "http://localhost:8080"

_current_run: ContextVar[Any] = ContextVar("keelwave_current_run", default=None)


class Keelwave:
    """Connection settings for sending agent runs to a keelwave server."""

    def __init__(self, api_key: str | None = None, endpoint: str | None = None) -> None:
        self.api_key = api_key if api_key is not None else os.environ.get("KEELWAVE_API_KEY")
        self.endpoint = (
            endpoint or os.environ.get("KEELWAVE_ENDPOINT") or DEFAULT_ENDPOINT
        ).rstrip("/")


def get_current_run() -> Any:
    """The run the calling code is inside of, or None."""
    return _current_run.get()
