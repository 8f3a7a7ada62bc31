"""What every database-facing command shares: settings from flags, errors as one line."""

from __future__ import annotations

import re
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Annotated, Any, NoReturn

import psycopg
import sqlalchemy.exc
import typer
from rich.console import Console

from keelwave.db.connect import database
from keelwave.db.embedded import EmbeddedDatabaseError
from keelwave.settings import Settings

stdout = Console(highlight=False, soft_wrap=True)
stderr = Console(stderr=True, highlight=False, soft_wrap=True)

DatabaseUrl = Annotated[
    str | None,
    typer.Option(
        "--database-url",
        help="PostgreSQL/TimescaleDB URL (env KEELWAVE_DATABASE_URL). "
        "Default: the embedded database in the data directory.",
        show_default=False,
    ),
]
DataDir = Annotated[
    Path | None,
    typer.Option(
        "--data-dir",
        help="Where the embedded database lives (env KEELWAVE_DATA_DIR).",
        show_default=False,
    ),
]


def settings_from(**flags: Any) -> Settings:
    """Flags that were given override KEELWAVE_* variables, which override defaults."""
    try:
        return Settings(**{name: value for name, value in flags.items() if value is not None})
    except ValueError as error:
        fail(f"invalid setting: {error}")


def fail(message: str, code: int = 1) -> NoReturn:
    stderr.print(f"[bold red]error:[/] {message}", markup=True, highlight=False)
    raise typer.Exit(code)


def redact(url: str) -> str:
    """Hide the password of a database URL before printing it."""
    return re.sub(r"(://[^:/@]+:)[^@]*@", r"\1***@", url)


@contextmanager
def connected(settings: Settings) -> Iterator[str]:
    """Yield a conninfo; turn every way of not reaching the database into one clear line."""
    where = redact(settings.database_url) if settings.database_url else "the embedded database"
    try:
        with database(settings) as conninfo:
            # Fail here, with libpq's own words, rather than deep inside alembic.
            psycopg.connect(conninfo, connect_timeout=10).close()
            yield conninfo
    except EmbeddedDatabaseError as error:
        fail(str(error))
    except (psycopg.OperationalError, sqlalchemy.exc.OperationalError) as error:
        fail(f"cannot connect to {where}: {_reason(getattr(error, 'orig', None) or error)}")


def _reason(error: BaseException) -> str:
    lines = [line.strip() for line in str(error).strip().splitlines() if line.strip()]
    # libpq puts the useful part ("Connection refused", "password authentication
    # failed") on the first line after the host and port.
    return lines[0].split(": ", 1)[-1] if lines else "unreachable"


def require_schema(conn: psycopg.Connection) -> None:
    exists = conn.execute("SELECT to_regclass('api_keys') IS NOT NULL").fetchone()[0]
    if not exists:
        fail(
            "this database has no keelwave schema yet: run `keelwave migrate` "
            "(or `keelwave serve`, which migrates on start)"
        )


def is_tty() -> bool:
    return sys.stdout.isatty()
