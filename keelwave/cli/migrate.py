"""``keelwave migrate``: apply, undo and inspect schema migrations (alembic).

alembic and the database driver are imported when a command runs, not when
typer reads the signatures (see :mod:`keelwave.cli.commands`).
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Annotated

import typer

from keelwave.cli.common import DatabaseUrl, DataDir, fail, new_app

app = new_app(
    help="Apply or inspect database migrations. With no subcommand: upgrade to the latest.",
    invoke_without_command=True,
)


def _only_revisions(record: logging.LogRecord) -> bool:
    return record.getMessage().startswith(("Running upgrade", "Running downgrade"))


Profile = Annotated[
    str,
    typer.Option(
        "--profile",
        help="auto: distribute the schema if the database has Citus; citus: install Citus "
        "first (it must be preloaded on every node), fail if it cannot be.",
    ),
]
PROFILES = ("auto", "citus")


def _install_citus(conninfo: str) -> None:
    """What --profile citus adds: the extension, so that migration 0013 distributes."""
    import psycopg

    try:
        with psycopg.connect(conninfo, autocommit=True) as conn:
            conn.execute("CREATE EXTENSION IF NOT EXISTS citus")
    except psycopg.Error as error:
        fail(f"--profile citus: cannot install Citus here: {str(error).splitlines()[0]}")


def _run(
    action: str, database_url: str | None, data_dir: Path | None, *args: str, profile: str = "auto"
) -> None:
    """Run ``keelwave.db.migrate.<action>`` on the database the flags name."""
    from alembic.util import CommandError

    from keelwave.cli.database import connected, settings_from
    from keelwave.db import migrate as migrations

    # alembic reports each revision it runs through logging; show those lines only,
    # on a handler of our own (the root logger's handlers are not ours to filter).
    migration_log = logging.getLogger("alembic.runtime.migration")
    if not any(getattr(h, "_keelwave", False) for h in migration_log.handlers):
        handler = logging.StreamHandler()
        handler.setFormatter(logging.Formatter("%(message)s"))
        handler.addFilter(_only_revisions)
        handler._keelwave = True  # type: ignore[attr-defined]
        migration_log.addHandler(handler)
    migration_log.setLevel(logging.INFO)
    migration_log.propagate = False
    settings = settings_from(database_url=database_url, data_dir=data_dir)
    if profile not in PROFILES:
        fail(f"--profile must be one of {', '.join(PROFILES)}, not {profile!r}")
    with connected(settings) as conninfo:
        if profile == "citus":
            _install_citus(conninfo)
        try:
            getattr(migrations, action)(conninfo, *args)
        except CommandError as error:
            fail(str(error))


@app.callback()
def default(
    ctx: typer.Context,
    database_url: DatabaseUrl = None,
    data_dir: DataDir = None,
    profile: Profile = "auto",
) -> None:
    if ctx.invoked_subcommand is None:
        _run("upgrade", database_url, data_dir, "head", profile=profile)


@app.command()
def upgrade(
    revision: Annotated[str, typer.Argument(help="Target revision.")] = "head",
    database_url: DatabaseUrl = None,
    data_dir: DataDir = None,
    profile: Profile = "auto",
) -> None:
    """Upgrade the schema to REVISION (default: the latest)."""
    _run("upgrade", database_url, data_dir, revision, profile=profile)


@app.command()
def downgrade(
    revision: Annotated[str, typer.Argument(help="Target revision, e.g. 'base' or '-1'.")],
    database_url: DatabaseUrl = None,
    data_dir: DataDir = None,
) -> None:
    """Downgrade the schema to REVISION. Downgrading past a table drops its data."""
    _run("downgrade", database_url, data_dir, revision)


@app.command()
def current(database_url: DatabaseUrl = None, data_dir: DataDir = None) -> None:
    """Show the revision the database is at."""
    _run("current", database_url, data_dir)


@app.command()
def history() -> None:
    """List every revision that ships with this keelwave."""
    from alembic.util import CommandError

    from keelwave.db import migrate as migrations

    try:
        migrations.history_offline()
    except CommandError as error:
        fail(str(error))
