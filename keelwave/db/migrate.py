"""Run the alembic migrations that ship with keelwave.

The revisions live in the top-level ``alembic/`` folder of a checkout and in
``keelwave/migrations`` inside the wheel; :func:`migrations_dir` finds either
from ``__file__``, so ``keelwave migrate`` needs no alembic.ini and no checkout.
"""

from __future__ import annotations

import sys
from pathlib import Path

from alembic.config import Config

from alembic import command

PACKAGE_DIR = Path(__file__).resolve().parent.parent


def migrations_dir() -> Path:
    for candidate in (PACKAGE_DIR / "migrations", PACKAGE_DIR.parent / "alembic"):
        if (candidate / "env.py").is_file():
            return candidate
    raise FileNotFoundError(
        f"keelwave's migrations are missing (looked in {PACKAGE_DIR / 'migrations'} "
        f"and {PACKAGE_DIR.parent / 'alembic'}); reinstall keelwave"
    )


def sqlalchemy_url(conninfo: str) -> str:
    """Turn a libpq URL or key=value conninfo into a SQLAlchemy URL for psycopg 3."""
    if conninfo.startswith(("postgresql://", "postgres://")):
        return "postgresql+psycopg://" + conninfo.split("://", 1)[1]
    if conninfo.startswith("postgresql+psycopg://"):
        return conninfo
    # key=value form (the embedded database): hand everything to libpq as query args.
    from urllib.parse import quote

    pairs = dict(part.split("=", 1) for part in conninfo.split())
    dbname = pairs.pop("dbname", "postgres")
    query = "&".join(f"{key}={quote(value, safe='/')}" for key, value in pairs.items())
    return f"postgresql+psycopg:///{dbname}?{query}"


def alembic_config(conninfo: str) -> Config:
    config = Config(stdout=sys.stdout)  # the current stdout, not the one at import time
    config.set_main_option("script_location", str(migrations_dir()))
    # '%' is alembic's interpolation character; a password may contain it.
    config.set_main_option("sqlalchemy.url", sqlalchemy_url(conninfo).replace("%", "%%"))
    return config


def upgrade(conninfo: str, revision: str = "head") -> None:
    command.upgrade(alembic_config(conninfo), revision)


def downgrade(conninfo: str, revision: str) -> None:
    command.downgrade(alembic_config(conninfo), revision)


def current(conninfo: str, verbose: bool = False) -> None:
    command.current(alembic_config(conninfo), verbose=verbose)


def history_offline(verbose: bool = False) -> None:
    """List the shipped revisions; needs no database."""
    config = Config(stdout=sys.stdout)  # the current stdout, not the one at import time
    config.set_main_option("script_location", str(migrations_dir()))
    command.history(config, verbose=verbose)
