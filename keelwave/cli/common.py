"""What every command shares: consoles, one-line errors, the database flags' declarations.

Every command module imports this at its top, and typer imports every
command module to build ``--help``: so this module imports typer and the
standard library only (rich when something is printed). What talks to the database is in
:mod:`keelwave.cli.database`, imported by the commands that need it.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, NoReturn, cast

import typer

if TYPE_CHECKING:
    from rich.console import Console


def new_app(**options: Any) -> typer.Typer:
    """A typer app (the command or a group of subcommands) whose help is plain text.

    typer's boxed help imports rich.markdown and markdown-it: about 80 ms more
    for every ``--help`` on the machine in docs/benchmarks.md, where the whole
    of ``keelwave --help`` now takes 150 ms. Plain text, as click prints it, is
    also what a coding agent reads best.
    """
    return typer.Typer(rich_markup_mode=None, **options)


class _LazyConsole:
    """A rich Console made on first use.

    Importing rich.console takes about 25 ms, which ``--help`` and
    ``--version`` (printed by typer) need not pay.
    """

    def __init__(self, **options: Any) -> None:
        self._options = options
        self._console: Console | None = None

    def __getattr__(self, name: str) -> Any:
        if self._console is None:
            from rich.console import Console

            self._console = Console(highlight=False, soft_wrap=True, **self._options)
        return getattr(self._console, name)


stdout = cast("Console", _LazyConsole())
stderr = cast("Console", _LazyConsole(stderr=True))

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


def fail(message: str, code: int = 1) -> NoReturn:
    stderr.print(f"[bold red]error:[/] {message}", markup=True, highlight=False)
    raise typer.Exit(code)


def redact(url: str) -> str:
    """Hide the password of a database URL before printing it."""
    return re.sub(r"(://[^:/@]+:)[^@]*@", r"\1***@", url)
