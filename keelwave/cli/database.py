"""What the database-facing commands share: settings from flags, every connection failure as
one line, the schema check.

Only ``serve``, ``migrate`` and ``keys`` import this, in their bodies: it
pulls in psycopg, SQLAlchemy and pydantic, which the query commands (and
``--help``) must not pay for, and which only the ``server`` extra installs.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import psycopg
import sqlalchemy.exc

from keelwave.cli.common import fail, redact
from keelwave.db.connect import database
from keelwave.db.embedded import EmbeddedDatabaseError
from keelwave.settings import Settings


def settings_from(**flags: Any) -> Settings:
    """Flags that were given override KEELWAVE_* variables, which override defaults."""
    try:
        return Settings(**{name: value for name, value in flags.items() if value is not None})
    except ValueError as error:
        fail(f"invalid setting: {error}")


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
