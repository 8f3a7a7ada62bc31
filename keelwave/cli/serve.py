"""``keelwave serve``: the API and the dashboard on one origin.

It builds the same application object the tests build (``create_app``); all
this module adds is the process around it: the database (embedded unless a
URL is given), migrations, the first key, worker processes, and a clean exit.
The server is imported when the command runs, not when typer reads its
signature (see :mod:`keelwave.cli.commands`).
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Annotated

import typer

from keelwave.cli.common import DatabaseUrl, DataDir, fail, redact, stdout

if TYPE_CHECKING:
    from keelwave.db.keys import CreatedKey


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
    otlp_grpc_port: Annotated[
        int | None,
        typer.Option(
            min=1,
            max=65535,
            help="Also take OTLP/gRPC trace exports on this port, on the same host "
            "(env KEELWAVE_OTLP_GRPC_PORT, default: off). Needs keelwave[grpc].",
            show_default=False,
        ),
    ] = None,
    log_level: Annotated[str, typer.Option(help="debug, info, warning or error.")] = "info",
) -> None:
    """Run the keelwave server."""
    import asyncio

    import psycopg

    from keelwave.cli import exclusive, server_loop
    from keelwave.cli import workers as workers_mod
    from keelwave.cli.database import connected, settings_from
    from keelwave.db import keys as key_store
    from keelwave.db import migrate as migrations
    from keelwave.server.ingest.pricing import PriceTable, PriceTableError

    workers_mod.configure_logging(log_level)
    settings = settings_from(
        host=host, port=port, database_url=database_url, data_dir=data_dir, workers=workers,
        otlp_grpc_port=otlp_grpc_port,
    )  # fmt: skip
    if settings.otlp_grpc_port is not None:
        _check_grpc(settings.host, settings.otlp_grpc_port)
    try:
        exclusive.check_port_free(settings.host, settings.port)
        if not settings.database_url:
            held = exclusive.claim_data_dir(settings.data_dir)  # noqa: F841 (kept until exit)
    except exclusive.Taken as error:
        fail(str(error))
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

        async def when_listening(port: int) -> None:
            # (blocking: the others must be listening before we say we are)
            await asyncio.to_thread(
                lambda: children.extend(
                    workers_mod.start(count - 1, settings, conninfo, log_level=log_level)
                )
            )
            url = f"http://{_display_host(settings.host)}:{port}"
            if first_key is not None:
                _print_first_key(first_key, url)
            more = f", {count} processes" if count > 1 else ""
            stdout.print(f"keelwave listening on {url}  (database: {where}{more})")
            stdout.print("Press Ctrl+C to stop.")

        try:
            server_loop.run(
                server_loop.serve_app(
                    settings, conninfo, prices, reuse_port=count > 1,
                    when_listening=when_listening,
                    when_stopping=lambda: stdout.print("Shutting down: committing buffered data…"),
                ),
                settings.event_loop,
            )  # fmt: skip
        except OSError as error:
            fail(f"cannot listen on {settings.host}:{settings.port}: {error.strerror or error}")
        except workers_mod.WorkerFailed as error:
            fail(f"a server process could not start: {error}")
        finally:
            workers_mod.stop(children)
        stdout.print("Stopped.")


def _check_grpc(host: str, port: int) -> None:
    """Before anything starts: grpcio is there (an optional extra), and nobody holds the
    port (SO_REUSEPORT would let us share it, as for the HTTP port: exclusive.py)."""
    from rich.markup import escape  # fail() prints rich markup, where [grpc] is a tag

    from keelwave.cli import exclusive

    try:
        import grpc  # noqa: F401
    except ImportError:
        fail(
            escape("OTLP/gRPC ingest (--otlp-grpc-port) needs grpcio: pip install 'keelwave[grpc]'")
        )
    try:
        exclusive.check_port_free(host, port)
    except exclusive.Taken:
        fail(
            f"the OTLP/gRPC port {port} on {host} is in use (another keelwave serve, or "
            "another program): stop it, or choose another --otlp-grpc-port"
        )
    except OSError as error:
        fail(f"cannot listen for OTLP/gRPC on {host}:{port}: {error.strerror or error}")


def _display_host(host: str) -> str:
    if host in ("0.0.0.0", "::", ""):
        return "localhost"
    return f"[{host}]" if ":" in host else host


def _print_first_key(created: CreatedKey, url: str) -> None:
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
    stdout.print(
        "No agent to point at it yet? With those two variables set, [bold]keelwave demo[/] "
        "sends a few realistic runs: loops, a stall, an error, nested agents."
    )
    stdout.print()
