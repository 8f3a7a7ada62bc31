"""The typer application: every subcommand registered, none of their dependencies imported.

typer reads every command's signature to build ``--help`` (and to parse any
command line), so each command module is imported here, and each keeps its
top level to typer, rich and the standard library. What a command needs
beyond that (the server, the database driver, alembic, textual) it imports
in its body: ``keelwave runs`` starts without loading the server, and a
machine with only the ``cli`` extra can run it.
"""

from __future__ import annotations

from typing import Annotated

import typer

from keelwave import __version__
from keelwave.cli import (
    alerts,
    delete,
    demo,
    keys,
    migrate,
    projects,
    query,
    serve,
    transfer,
    tui,
)
from keelwave.cli.common import new_app

app = new_app(
    name="keelwave",
    help="Self-hosted monitoring for AI agents: loops, stalls and token burn, down to the step.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    context_settings={"help_option_names": ["-h", "--help"]},
)


def _print_version(value: bool) -> None:
    if value:
        print(f"keelwave {__version__}")
        raise typer.Exit()


@app.callback()
def root(
    version: Annotated[
        bool,
        typer.Option(
            "--version", callback=_print_version, is_eager=True, help="Print the version and exit."
        ),
    ] = False,
) -> None:
    """Self-hosted monitoring for AI agents: loops, stalls and token burn, down to the step."""


app.command("serve")(serve.serve)
app.add_typer(migrate.app, name="migrate")
app.add_typer(keys.app, name="keys")
app.add_typer(projects.app, name="projects")
app.command("demo")(demo.demo)
app.command("login")(query.login)
app.add_typer(query.runs_app, name="runs")
query.runs_app.command("delete")(delete.delete)  # on the runs group, beside `show`
app.command("loops")(query.loops)
app.command("findings")(query.findings)
app.command("summary")(query.summary)
app.add_typer(alerts.app, name="alerts")
app.command("export")(transfer.export)
app.command("import")(transfer.import_)
app.command("tui")(tui.tui)
