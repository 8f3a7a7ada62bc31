"""Background jobs stop when told: the waits between their rounds never swallow the
cancellation that stops them (a server's shutdown, a test's teardown, waits on it)."""

from __future__ import annotations

import asyncio
import logging

import pytest
from psycopg_pool import AsyncConnectionPool

from keelwave.server.store.periodic import Periodic, woken
from keelwave.server.store.verdicts import VerdictKeeper


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


def pool_job(pool: AsyncConnectionPool) -> Periodic:
    async def job() -> None:
        async with pool.connection() as conn:
            await conn.execute("SELECT 1")

    return Periodic("test", job, every=0.01, log=logging.getLogger("test"))


@pytest.mark.parametrize("turns", [0, 1, 2, 3, 4])
@pytest.mark.parametrize("make", [pool_job, VerdictKeeper], ids=["periodic", "verdicts"])
async def test_a_job_handed_a_connection_just_as_it_is_stopped_stops(db_url, make, turns) -> None:
    """psycopg_pool waits for a free connection with asyncio.wait_for, which on Python
    3.11 swallows a cancellation that arrives as the connection is handed over: the
    job ran on with it, and a shutdown waiting for the job hung (seen in a test's
    teardown, the server's background jobs still running after 17 minutes)."""
    pool = AsyncConnectionPool(db_url, min_size=1, max_size=1, open=False)
    await pool.open(wait=True)
    job = make(pool)
    stopping = None
    try:
        held = await pool.getconn()  # the pool's one connection, busy elsewhere
        job.start()
        for _ in range(500):  # the job waits for a connection…
            if pool.get_stats().get("requests_waiting"):
                break
            await asyncio.sleep(0.01)
        await pool.putconn(held)  # …is handed one…
        for _ in range(turns):
            await asyncio.sleep(0)
        stopping = asyncio.create_task(job.stop())  # …just as the server stops it
        done, _ = await asyncio.wait({stopping}, timeout=30)
        assert stopping in done, "the job ran on after it was stopped"
    finally:
        if stopping is not None and not stopping.done():
            job._task.cancel()  # (what the hung stop() waits for: let the test end)
            await asyncio.wait({stopping}, timeout=5)
        await pool.close()
