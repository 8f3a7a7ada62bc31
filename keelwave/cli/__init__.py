"""The ``keelwave`` command. Each subcommand lives in its own module."""

from __future__ import annotations

import typer

from keelwave.cli import demo, keys, migrate, query, serve, tui

app = typer.Typer(
    name="keelwave",
    help="Self-hosted monitoring for AI agents: loops, stalls and token burn, down to the step.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
app.command("serve")(serve.serve)
app.add_typer(migrate.app, name="migrate")
app.add_typer(keys.app, name="keys")
app.command("demo")(demo.demo)
app.command("login")(query.login)
app.add_typer(query.runs_app, name="runs")
app.command("loops")(query.loops)
app.command("summary")(query.summary)
app.command("tui")(tui.tui)


def main() -> None:
    app()
