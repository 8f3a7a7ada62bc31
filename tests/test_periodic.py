"""Background jobs stop when told: the waits between their rounds never swallow the
cancellation that stops them (a server's shutdown, a test's teardown, waits on it)."""

from __future__ import annotations

import asyncio

import pytest

from keelwave.server.store.periodic import woken


async def a_job(event: asyncio.Event) -> None:
    while True:  # as the verdict keeper and the alert deliverer loop
        await woken(event, 10)
        event.clear()


@pytest.mark.parametrize("turns", [0, 1, 2, 3])
async def test_a_job_woken_just_before_it_is_stopped_stops(turns: int) -> None:
    """Python 3.11's asyncio.wait_for(event.wait()) returns instead of raising when the
    cancellation comes right after the event is set: the job ran on, and stop() hung."""
    event = asyncio.Event()
    job = asyncio.create_task(a_job(event))
    await asyncio.sleep(0)
    event.set()  # a commit wakes the job…
    for _ in range(turns):
        await asyncio.sleep(0)
    job.cancel()  # …just as the server stops it
    with pytest.raises(asyncio.CancelledError):
        await asyncio.wait_for(job, 5)


async def test_woken_returns_on_its_event_or_after_its_time() -> None:
    event = asyncio.Event()
    event.set()
    await woken(event, 10)  # at once
    await woken(asyncio.Event(), 0.01)  # after the time, without raising
