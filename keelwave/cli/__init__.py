"""The ``keelwave`` command. Each subcommand lives in its own module."""

from __future__ import annotations

import typer

from keelwave.cli import demo, keys, migrate, serve

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


def main() -> None:
    app()
