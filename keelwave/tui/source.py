"""Where the TUI gets its data: the HTTP API, behind a small async interface.

The app is given a source rather than building one (as Harlequin does), so
tests can hand it one pointed at a test server, with a frozen clock.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from keelwave.remote.api import Api


class Source:
    def __init__(self, api: Api, clock: Callable[[], datetime] | None = None) -> None:
        self.api = api
        self.now = clock or (lambda: datetime.now(UTC))

    async def _get(self, path: str, **params: Any) -> Any:
        # The API client is synchronous; keep the interface responsive meanwhile.
        return await asyncio.to_thread(self.api.agent, path, **params)

    async def runs(self, **filters: Any) -> list[dict]:
        return (await self._get("/runs", **filters))["data"]

    async def summary(self, window: str = "24h") -> dict:
        return (await self._get("/summary", window=window))["data"]

    async def run(self, run_id: str) -> dict:
        return (await self._get(f"/runs/{run_id}"))["data"]

    async def steps(self, run_id: str) -> list[dict]:
        return await asyncio.to_thread(self.api.all_steps, run_id)

    async def timeline(self, run_id: str) -> list[dict]:
        """Steps, model calls and child runs, by start time."""
        return await asyncio.to_thread(self.api.timeline, run_id)

    async def llm_calls(self, run_id: str) -> list[dict]:
        return (await self._get(f"/runs/{run_id}/llm"))["data"]

    async def loops(self, run_id: str) -> list[dict]:
        return (await self._get(f"/runs/{run_id}/loops"))["data"]

    async def findings(self, run_id: str) -> list[dict]:
        return (await self._get(f"/runs/{run_id}/findings"))["data"]
