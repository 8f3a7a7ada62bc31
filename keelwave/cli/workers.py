"""``keelwave serve --workers N``: several server processes on one port.

One Python process uses one core; ingest parses JSON and fingerprints in
Python, so a server uses every core by running one process per core, all
listening on the same port (SO_REUSEPORT lets the kernel spread connections).
The processes share nothing but the database, exactly as several machines
would: the writer's run locks, NOTIFY for revoked keys and idempotent reapers
make that safe.

The first process sets up (embedded database, migrations, the first key) and
serves too; the others are started afterwards with ``spawn`` and only serve.
The first says it is listening only once every other one is: the kernel
spreads connections over the processes listening when they connect, and a
client's keep-alive connections stay where they landed, so clients starting
before the others listened would keep one process busy and the rest idle.
The others stop when the first tells them (SIGTERM, when it is stopped by SIGTERM or
SIGINT) or when it disappears, even by ``kill -9``. They never take SIGINT themselves:
Ctrl+C in a terminal signals every process of the group, and the first process
stops the others in order.
"""

from __future__ import annotations

import contextlib
import logging
import multiprocessing
import os
import queue
import signal
import socket
import time
from collections.abc import Iterator
from typing import Any

from keelwave.cli.server_loop import run as run_loop
from keelwave.cli.server_loop import serve_app
from keelwave.server.http.errors import client_faults_in_one_line
from keelwave.server.ingest.pricing import PriceTable
from keelwave.settings import Settings


def free_port(host: str) -> int:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as probe:
        probe.bind((host, 0))
        return probe.getsockname()[1]


class WorkerFailed(Exception):
    """A worker process ended before it was listening."""


LOG_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"


def configure_logging(level: str) -> None:
    """The log of a serve process, the first or another: ``spawn`` starts each in a
    fresh interpreter, which logs nothing below a warning unless told."""
    logging.basicConfig(level=level.upper(), format=LOG_FORMAT)
    logging.getLogger("alembic").setLevel(logging.WARNING)
    logging.getLogger("aiohttp.server").addFilter(client_faults_in_one_line)


def start(
    count: int, settings: Settings, conninfo: str, timeout: float = 120, log_level: str = "info"
) -> list[multiprocessing.Process]:
    """Start ``count`` workers besides the first process (the caller) and return once
    every one of them is listening.

    Raises WorkerFailed if one exits first (its error is in the log), or if
    they are not all listening after ``timeout`` seconds.
    """
    context = multiprocessing.get_context("spawn")  # no fork of a process holding connections
    listening = context.Queue()
    processes = []
    with _interrupts_blocked():
        for number in range(count):
            own = settings
            if settings.metrics_port:  # each process its own metrics port
                port = settings.metrics_port + number + 1
                own = settings.model_copy(update={"metrics_port": port})
            # One verdict keeper per server, never two doing the same work: the first
            # process's (the caller's), so none of these.
            own = own.model_copy(update={"server_verdicts": False})
            process = context.Process(
                target=_worker,
                args=(own.model_dump(mode="json"), conninfo, os.getpid(), listening, log_level),
                name=f"keelwave-worker-{number + 1}",
                daemon=True,
            )
            process.start()
            processes.append(process)
    try:
        _wait_listening(processes, listening, timeout)
    except WorkerFailed:
        stop(processes, timeout=5)
        raise
    return processes


@contextlib.contextmanager
def _interrupts_blocked() -> Iterator[None]:
    """SIGINT blocked in this thread while it starts the workers, and so in them for
    good: a blocked signal stays blocked through fork and exec. Ctrl+C in a terminal
    signals every process of its group; a worker that got it while still importing
    printed a KeyboardInterrupt traceback and failed the start. The first process
    stops the workers itself (:func:`stop`), with SIGTERM."""
    if not hasattr(signal, "pthread_sigmask"):  # (Windows: no process groups to signal)
        yield
        return
    before = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, before)


def _wait_listening(processes: list, listening: Any, timeout: float) -> None:
    waiting = len(processes)
    deadline = time.monotonic() + timeout
    while waiting:
        try:
            listening.get(timeout=0.2)
            waiting -= 1
            continue
        except queue.Empty:
            pass
        if dead := [process for process in processes if process.exitcode is not None]:
            raise WorkerFailed(f"{dead[0].name} exited (code {dead[0].exitcode}) while starting")
        if time.monotonic() > deadline:
            raise WorkerFailed(f"{waiting} worker(s) not listening after {timeout:.0f} s")


def stop(processes: list[multiprocessing.Process], timeout: float = 30) -> None:
    """Ask every worker to commit what it holds and exit; wait for them."""
    for process in processes:
        if process.is_alive() and process.pid:
            os.kill(process.pid, signal.SIGTERM)
    for process in processes:
        process.join(timeout)
        if process.is_alive():
            process.kill()


def _worker(
    settings_data: dict[str, Any], conninfo: str, parent_pid: int, listening: Any, log_level: str
) -> None:
    configure_logging(log_level)
    settings = Settings(**settings_data)

    async def say_listening(port: int) -> None:
        listening.put(os.getpid())

    run_loop(
        serve_app(
            settings,
            conninfo,
            PriceTable.load(settings.prices_file),
            reuse_port=True,
            when_listening=say_listening,
            # the first process is gone (even by kill -9): so are we
            still_wanted=lambda: os.getppid() == parent_pid,
        ),
        settings.event_loop,
    )  # serve_app's cleanup commits what this worker buffered
