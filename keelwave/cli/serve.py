"""``keelwave serve``: the API (and, later, the dashboard) on one origin.

It builds the same application object the tests build (``create_app``); all
this module adds is the process around it: the database (embedded unless a
URL is given), migrations, the first key, signals and a clean exit.
"""

from __future__ import annotations

import asyncio
import logging
import os
import signal
from typing import Annotated

import psycopg
import typer
from aiohttp import web

from keelwave.cli import workers as workers_mod
from keelwave.cli.common import (
    DatabaseUrl,
    DataDir,
    connected,
    fail,
    redact,
    settings_from,
    stdout,
)
from keelwave.db import keys as key_store
from keelwave.db import migrate as migrations
from keelwave.server.app import create_app, tune_garbage_collector
from keelwave.server.ingest.pricing import PriceTable, PriceTableError
from keelwave.settings import Settings

log = logging.getLogger("keelwave")


def serve(
    host: Annotated[
        str | None,
        typer.Option(
            help="Interface to bind (env KEELWAVE_HOST, default 127.0.0.1).", show_default=False
        ),
    ] = None,
    port: Annotated[
        int | None,
        typer.Option(
            help="Port (env KEELWAVE_PORT, default 8080; 0 picks a free one).", show_default=False
        ),
    ] = None,
    database_url: DatabaseUrl = None,
    data_dir: DataDir = None,
    migrate: Annotated[
        bool, typer.Option("--migrate/--no-migrate", help="Apply pending migrations on start.")
    ] = True,
    workers: Annotated[
        int | None,
        typer.Option(
            min=1,
            help="Server processes sharing the port (env KEELWAVE_WORKERS, default: one per core).",
            show_default=False,
        ),
    ] = None,
    log_level: Annotated[str, typer.Option(help="debug, info, warning or error.")] = "info",
) -> None:
    """Run the keelwave server."""
    logging.basicConfig(
        level=log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    logging.getLogger("alembic").setLevel(logging.WARNING)
    settings = settings_from(
        host=host, port=port, database_url=database_url, data_dir=data_dir, workers=workers
    )
    where = (
        redact(settings.database_url)
        if settings.database_url
        else (f"embedded PostgreSQL in {settings.data_dir}")
    )
    with connected(settings) as conninfo:
        if migrate:
            migrations.upgrade(conninfo)
        with psycopg.connect(conninfo, autocommit=True) as conn:
            if conn.execute("SELECT to_regclass('api_keys') IS NULL").fetchone()[0]:
                fail(
                    "the database has no keelwave schema: drop --no-migrate or run "
                    "`keelwave migrate`"
                )
            first_key = key_store.bootstrap_first_key(conn)
        try:
            prices = PriceTable.load(settings.prices_file)
        except PriceTableError as error:
            fail(str(error))
        count = settings.workers or os.cpu_count() or 1
        if settings.writer_lanes is None:
            settings = settings.model_copy(update={"writer_lanes": 2 if count == 1 else 1})
        if count > 1 and settings.port == 0:
            # Every process must bind the same port: choose it now.
            settings = settings.model_copy(update={"port": workers_mod.free_port(settings.host)})
        children: list = []
        try:
            asyncio.run(
                _serve(settings, conninfo, where, first_key, prices, count,
                       lambda: children.extend(workers_mod.start(count - 1, settings, conninfo)))
            )  # fmt: skip
        except OSError as error:
            fail(f"cannot listen on {settings.host}:{settings.port}: {error.strerror or error}")
        except workers_mod.WorkerFailed as error:
            fail(f"a server process could not start: {error}")
        finally:
            workers_mod.stop(children)
        stdout.print("Stopped.")


async def _serve(
    settings: Settings,
    conninfo: str,
    where: str,
    first_key: key_store.CreatedKey | None,
    prices: PriceTable,
    processes: int = 1,
    start_others=lambda: None,  # noqa: ANN001
) -> None:
    app = create_app(settings, conninfo, prices)
    runner = web.AppRunner(app, handle_signals=False, access_log=None, shutdown_timeout=30)
    await runner.setup()
    tune_garbage_collector()
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(signum, stop.set)
    try:
        site = web.TCPSite(runner, settings.host, settings.port, reuse_port=processes > 1)
        await site.start()
        # (blocking: the others must be listening before we say we are)
        await asyncio.to_thread(start_others)
        port = site._server.sockets[0].getsockname()[1]  # the real one when --port 0
        url = f"http://{_display_host(settings.host)}:{port}"
        if first_key is not None:
            _print_first_key(first_key, url)
        more = f", {processes} processes" if processes > 1 else ""
        stdout.print(f"keelwave listening on {url}  (database: {where}{more})")
        stdout.print("Press Ctrl+C to stop.")
        await stop.wait()
        stdout.print("Shutting down: committing buffered data…")
    finally:
        # Stops accepting, lets in-flight requests finish, then the writer commits
        # what is buffered (app cleanup) before the pool closes.
        await runner.cleanup()


def _display_host(host: str) -> str:
    if host in ("0.0.0.0", "::", ""):
        return "localhost"
    return f"[{host}]" if ":" in host else host


def _print_first_key(created: key_store.CreatedKey, url: str) -> None:
    stdout.print()
    stdout.print(
        f"First start: created project [bold]{created.project}[/] and an API key "
        f"with scope [bold]{created.scope}[/]. It is shown only this once:"
    )
    stdout.print()
    stdout.print(f"    {created.key}", markup=False)
    stdout.print()
    stdout.print(f"    export KEELWAVE_API_KEY={created.key}", markup=False)
    stdout.print(f"    export KEELWAVE_ENDPOINT={url}", markup=False)
    stdout.print(f"    open {url}", markup=False)
    stdout.print()
