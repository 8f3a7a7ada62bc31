"""``keelwave export`` and ``keelwave import``: a project's runs, steps and model calls as
JSON lines (docs/data.md), streamed out of one server and into another.

Both talk to the HTTP API with the key's project: export needs a ``read`` key, import
an ``all`` key. The format is keelwave/server/lifecycle/records.py's.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated

import typer

from keelwave.cli.common import fail, stderr, stdout
from keelwave.cli.delete import before_time
from keelwave.cli.query import ApiKey, Endpoint, api_for


def _plural(count: int, word: str) -> str:
    return f"{count:,} {word}{'' if count == 1 else 's'}"


def _check_project(api, project: str | None) -> None:
    if project is None:
        return
    me = api.me()
    if project not in (me["project"], me["project_id"]):
        fail(
            f"this key belongs to project {me['project']!r}, not {project!r}: "
            "use a key of that project (keys are per project)"
        )


def export(
    output: Annotated[
        Path | None,
        typer.Option("-o", "--output", help="Write to this file instead of standard output."),
    ] = None,
    project: Annotated[
        str | None,
        typer.Option(
            "--project",
            help="The project to export (checked against the key's own).",
            show_default=False,
        ),  # fmt: skip
    ] = None,
    since: Annotated[
        str | None,
        typer.Option(
            "--since",
            help="Runs that started at or after this time (ISO 8601, or an age: 7d).",
            show_default=False,
        ),  # fmt: skip
    ] = None,
    until: Annotated[
        str | None,
        typer.Option("--until", help="Runs that started before this time.", show_default=False),
    ] = None,
    agent: Annotated[
        str | None, typer.Option("--agent", help="Only this agent's runs.", show_default=False)
    ] = None,
    endpoint: Endpoint = None,
    api_key: ApiKey = None,
) -> None:
    """Export runs with their steps and model calls, one JSON object a line.

        keelwave export --project shop --since 30d > runs.jsonl

    Streamed: memory stays small whatever the project holds. `keelwave import` reads
    the file back into another server, with the same loops.
    """
    if output is None and sys.stdout.isatty():
        fail("the export is JSON lines: redirect it to a file (> runs.jsonl) or use -o FILE")
    from keelwave.remote.transfer import export_to

    with api_for(endpoint, api_key) as api:
        _check_project(api, project)
        since_at = before_time(since, "--since") if since else None
        until_at = before_time(until, "--until") if until else None
        try:
            if output is None:
                counts = export_to(api, sys.stdout.buffer, since_at, until_at, agent)
                sys.stdout.buffer.flush()
            else:
                with output.open("wb") as out:
                    counts = export_to(api, out, since_at, until_at, agent)
        except BrokenPipeError:  # `keelwave export | head`: the reader has what it wanted
            sys.stderr.close()
            raise typer.Exit(0) from None
    stderr.print(
        f"Exported {_plural(counts['runs'], 'run')}, {_plural(counts['steps'], 'step')} and "
        f"{_plural(counts['model_calls'], 'model call')}" + (f" to {output}." if output else ".")
    )


def import_(
    source: Annotated[
        str, typer.Argument(metavar="FILE", help="An export (`keelwave export`); - for stdin.")
    ],
    endpoint: Endpoint = None,
    api_key: ApiKey = None,
) -> None:
    """Import an export into the key's project (needs an `all` key).

        keelwave import runs.jsonl --endpoint https://new-server:8080 --api-key kw_…

    Sent a few thousand lines at a time, each part committed before the next. What is
    there already is not stored twice: an import that stopped half-way is run again.
    """
    from keelwave.remote.transfer import import_from

    if source == "-":
        stream = sys.stdin.buffer
    else:
        try:
            stream = Path(source).open("rb")  # noqa: SIM115 — closed below
        except OSError as error:
            fail(f"cannot read {source}: {error.strerror}")

    def progress(totals) -> None:
        if sys.stderr.isatty():
            stderr.print(f"  {totals.lines:,} lines imported…", end="\r")

    with stream, api_for(endpoint, api_key) as api:
        totals = import_from(api, stream, progress)
    stdout.print(
        f"Imported {_plural(totals.runs, 'run')}, {_plural(totals.steps, 'step')} and "
        f"{_plural(totals.model_calls, 'model call')} into project {api.me()['project']}."
    )
    if not totals.complete:
        stderr.print(
            "[yellow]warning:[/] the file does not end with an export's last line: "
            "it may have been cut off; what it holds was imported."
        )
