"""``keelwave migrate``: apply, undo and inspect schema migrations (alembic)."""

from __future__ import annotations

import logging
from typing import Annotated

import typer
from alembic.util import CommandError

from keelwave.cli.common import DatabaseUrl, DataDir, connected, fail, settings_from
from keelwave.db import migrate as migrations

app = typer.Typer(
    help="Apply or inspect database migrations. With no subcommand: upgrade to the latest.",
    invoke_without_command=True,
)


def _only_revisions(record: logging.LogRecord) -> bool:
    return record.getMessage().startswith(("Running upgrade", "Running downgrade"))


def _run(action, database_url: str | None, data_dir, *args) -> None:  # noqa: ANN001
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
    with connected(settings) as conninfo:
        try:
            action(conninfo, *args)
        except CommandError as error:
            fail(str(error))


@app.callback()
def default(
    ctx: typer.Context,
    database_url: DatabaseUrl = None,
    data_dir: DataDir = None,
) -> None:
    if ctx.invoked_subcommand is None:
        _run(migrations.upgrade, database_url, data_dir, "head")


@app.command()
def upgrade(
    revision: Annotated[str, typer.Argument(help="Target revision.")] = "head",
    database_url: DatabaseUrl = None,
    data_dir: DataDir = None,
) -> None:
    """Upgrade the schema to REVISION (default: the latest)."""
    _run(migrations.upgrade, database_url, data_dir, revision)


@app.command()
def downgrade(
    revision: Annotated[str, typer.Argument(help="Target revision, e.g. 'base' or '-1'.")],
    database_url: DatabaseUrl = None,
    data_dir: DataDir = None,
) -> None:
    """Downgrade the schema to REVISION. Downgrading past a table drops its data."""
    _run(migrations.downgrade, database_url, data_dir, revision)


@app.command()
def current(database_url: DatabaseUrl = None, data_dir: DataDir = None) -> None:
    """Show the revision the database is at."""
    _run(migrations.current, database_url, data_dir)


@app.command()
def history() -> None:
    """List every revision that ships with this keelwave."""
    try:
        migrations.history_offline()
    except CommandError as error:
        fail(str(error))
