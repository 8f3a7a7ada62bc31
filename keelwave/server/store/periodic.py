"""A job that ``serve`` runs every so often in the background (the reaper, TimescaleDB
maintenance): started and stopped with the app, and never stopped for good by an
error — a database that is away skips a round, a bug is logged and the next round
comes anyway."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable

import psycopg
from psycopg_pool import PoolTimeout

Job = Callable[[], Awaitable[object]]


async def woken(event: asyncio.Event, seconds: float) -> None:
    """Wait until ``event`` is set or ``seconds`` pass, whichever is first.

    Not ``asyncio.wait_for(event.wait(), seconds)``: on Python 3.11 that swallows a
    cancellation arriving just after the event is set (it returns the wait's result
    instead of raising), and a job stopped by cancelling it would then run on
    forever; a shutdown waiting for it hangs. asyncio.timeout has no such window.
    """
    try:
        async with asyncio.timeout(seconds):
            await event.wait()
    except TimeoutError:
        pass


# How long a cancelled background task is given to end before it is cancelled again.
RECANCEL_SECONDS = 1.0


async def stopped(task: asyncio.Task | None) -> None:
    """Cancel ``task`` and return once it has ended.

    One cancel is not always enough on Python 3.11: psycopg_pool waits for a free
    connection with ``asyncio.wait_for``, which returns the connection instead of
    raising when the cancellation and the connection arrive together. The task then
    runs on as if never told, and a shutdown awaiting it waits for ever. So the task
    is cancelled again while it has not ended. The caller's own cancellation is not
    swallowed here (``asyncio.wait`` neither raises for the task nor cancels it).
    """
    if task is None:
        return
    while not task.done():
        task.cancel()
        await asyncio.wait({task}, timeout=RECANCEL_SECONDS)
    if not task.cancelled() and task.exception() is not None:
        logging.getLogger("keelwave").error(
            "%s ended with an error", task.get_name(), exc_info=task.exception()
        )


class Periodic:
    def __init__(
        self, name: str, job: Job, every: float, log: logging.Logger, first_after: float = 0
    ) -> None:
        self.name = name
        self._job = job
        self._every = every
        self._first_after = first_after or every
        self._log = log
        self._task: asyncio.Task | None = None

    def start(self) -> None:
        self._task = asyncio.create_task(self._run(), name=f"keelwave-{self.name}")

    async def stop(self) -> None:
        await stopped(self._task)

    async def _run(self) -> None:
        await asyncio.sleep(self._first_after)
        while True:
            try:
                await self._job()
            except (psycopg.Error, PoolTimeout, OSError) as error:
                self._log.debug("%s skipped a round: %s", self.name, error)
            except Exception:  # never let a bug stop the job for good
                self._log.exception("%s failed", self.name)
            await asyncio.sleep(self._every)
