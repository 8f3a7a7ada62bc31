"""The loop every server process runs: the app on its port until a signal says stop.

``keelwave serve`` runs it in the first process and, with ``--workers N``,
in each of the others (:mod:`keelwave.cli.workers`). Both must start and
stop the same way — aiohttp's own signal handling off, so SIGTERM and
SIGINT only set an event and the process shuts down in order: stop
accepting, let in-flight requests finish, commit what the writer buffered,
close the pool. They differ only in what they do once listening and in
whether they also watch for a reason of their own to stop.
"""

from __future__ import annotations

import asyncio
import signal
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any

from aiohttp import web

from keelwave.server.app import create_app, tune_garbage_collector
from keelwave.server.ingest.pricing import PriceTable
from keelwave.server.store.periodic import woken
from keelwave.settings import Settings


def run(main: Coroutine[Any, Any, None], event_loop: str = "auto") -> None:
    """asyncio.run(main), on uvloop's event loop unless ``event_loop`` (the setting) says
    otherwise or uvloop is not installed (Windows).

    uvloop runs the loop, its sockets and their callbacks in C (libuv): under the
    new-user load of bench/workloads.py the server spent about a tenth less CPU a
    step with it (docs/benchmarks.md, session 20)."""
    if event_loop == "auto":
        try:
            import uvloop
        except ImportError:
            pass
        else:
            with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
                runner.run(main)
            return
    asyncio.run(main)


# How often `still_wanted` is asked, when given.
POLL_SECONDS = 1.0


async def serve_app(
    settings: Settings,
    conninfo: str,
    prices: PriceTable,
    *,
    reuse_port: bool,
    when_listening: Callable[[int], Awaitable[None]],
    when_stopping: Callable[[], None] = lambda: None,
    still_wanted: Callable[[], bool] | None = None,
) -> None:
    """Serve until SIGINT or SIGTERM (or until ``still_wanted()`` turns false).

    ``when_listening`` gets the port actually bound (the real one for port 0);
    ``when_stopping`` runs after a signal, before the buffered data is committed.
    """
    # The signals first: the app's start (the pool, the verdict keeper) takes a moment,
    # and a Ctrl+C then was Python's KeyboardInterrupt, an exit without the shutdown in
    # order. A signal now stops the server once it is up (the first key still printed).
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(signum, stop.set)
    app = create_app(settings, conninfo, prices)
    runner = web.AppRunner(app, handle_signals=False, access_log=None, shutdown_timeout=30)
    await runner.setup()
    tune_garbage_collector()
    try:
        site = web.TCPSite(runner, settings.host, settings.port, reuse_port=reuse_port)
        await site.start()
        await when_listening(site._server.sockets[0].getsockname()[1])
        if still_wanted is None:
            await stop.wait()
        else:
            while not stop.is_set() and still_wanted():
                await woken(stop, POLL_SECONDS)
        when_stopping()
    finally:
        # Stops accepting, lets in-flight requests finish, then the writer commits
        # what is buffered (app cleanup) before the pool closes.
        await runner.cleanup()
