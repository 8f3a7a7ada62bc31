"""``keelwave projects``: list projects, set how long each keeps its data and what the
server redacts from it, straight in the database (as ``keelwave keys`` does;
``PATCH /v1/projects/{p}`` is the API's way).

The database driver is imported when a command runs (see :mod:`keelwave.cli.commands`).
"""

from __future__ import annotations

import json
from typing import Annotated

import typer

from keelwave.cli.common import DatabaseUrl, DataDir, fail, new_app, stdout
from keelwave.cli.keys import JsonFlag, key_database

app = new_app(
    help="List projects, set their retention and their redaction patterns.", no_args_is_help=True
)

FOREVER = ("forever", "never", "off", "none")


def _days(text: str) -> int | None:
    if text.strip().lower() in FOREVER:
        return None
    try:
        return int(text)
    except ValueError:
        fail(f"DAYS must be a number of days or 'forever', not {text!r}")


def _retention(days: int | None) -> str:
    if days is None:
        return "forever"
    return f"{days} day" + ("s" if days != 1 else "")


def _redaction(patterns: list[str]) -> str:
    if not patterns:
        return "built-in"
    return f"built-in + {len(patterns)} pattern" + ("s" if len(patterns) != 1 else "")


@app.command("list")
def list_(
    as_json: JsonFlag = False, database_url: DatabaseUrl = None, data_dir: DataDir = None
) -> None:
    """List projects, with how long each keeps its runs."""
    from rich.table import Table

    from keelwave.db import keys as key_store
    from keelwave.db import projects as store

    with key_database(database_url, data_dir) as conn:
        rows = store.list_projects(conn)
    if as_json:
        stdout.print_json(json.dumps([key_store.jsonable(row) for row in rows]))
        return
    if not rows:
        stdout.print("No projects yet. `keelwave keys create --project NAME` makes one.")
        return
    table = Table("name", "id", "retention", "last enforced", "redaction", "keys", "created")
    for row in rows:
        enforced = row["retention_enforced_at"]
        table.add_row(
            row["name"],
            row["id"][:8],
            _retention(row["retention_days"]),
            enforced.strftime("%Y-%m-%d %H:%M") if enforced else "",
            _redaction(row["redaction_patterns"]),
            str(row["active_keys"]),
            row["created_at"].strftime("%Y-%m-%d %H:%M"),
        )
    stdout.print(table)


@app.command("set-retention")
def set_retention(
    name: Annotated[str, typer.Argument(help="The project's name (or id).")],
    days: Annotated[
        str, typer.Argument(metavar="DAYS", help="Days to keep runs after they start; 'forever'.")
    ],
    as_json: JsonFlag = False,
    database_url: DatabaseUrl = None,
    data_dir: DataDir = None,
) -> None:
    """Keep a project's runs DAYS days after they started ('forever': never delete).

    Running servers delete what is older within their next round (every ten minutes):
    runs with their steps, model calls and alert events, and the rollups of those hours.
    """
    from keelwave.db import projects as store

    retention = _days(days)
    with key_database(database_url, data_dir) as conn:
        try:
            row = store.set_retention(conn, name, retention)
        except (ValueError, store.UnknownProject) as error:
            fail(str(error))
    if as_json:
        stdout.print_json(json.dumps(row))
        return
    if retention is None:
        stdout.print(f"Project [bold]{row['name']}[/] keeps its runs forever.")
    else:
        stdout.print(
            f"Project [bold]{row['name']}[/] keeps runs for {_retention(retention)}; "
            "older ones are deleted within the servers' next retention round."
        )


@app.command("set-redaction")
def set_redaction(
    name: Annotated[str, typer.Argument(help="The project's name (or id).")],
    patterns: Annotated[
        list[str] | None,
        typer.Argument(
            metavar="[PATTERN]...",
            help="Regular expressions (Python syntax); none: only the built-in rules.",
            show_default=False,
        ),
    ] = None,
    as_json: JsonFlag = False,
    database_url: DatabaseUrl = None,
    data_dir: DataDir = None,
) -> None:
    """Redact what matches PATTERN in this project's payloads, on top of the built-in rules.

    The server replaces every match with "[REDACTED]" in step inputs and outputs, run
    inputs, outputs and metadata, errors, thoughts and OTLP span attributes, before
    they are stored (the fingerprint is still taken over the bytes as sent, so loops
    are found exactly). The patterns replace the project's previous ones, and apply
    to the next request on every server. Example, customer numbers like CUST-123456:

        keelwave projects set-redaction shop 'CUST-[0-9]{6}'
    """
    from keelwave.db import projects as store
    from keelwave.server.redaction import InvalidPattern

    with key_database(database_url, data_dir) as conn:
        try:
            row = store.set_redaction(conn, name, patterns or [])
        except (InvalidPattern, store.UnknownProject) as error:
            fail(str(error))
    if as_json:
        stdout.print_json(json.dumps(row))
        return
    if not row["redaction_patterns"]:
        stdout.print(f"Project [bold]{row['name']}[/] is redacted by the built-in rules only.")
        return
    stdout.print(
        f"Project [bold]{row['name']}[/] is redacted by the built-in rules and "
        f"{_redaction(row['redaction_patterns'])[len('built-in + ') :]}:"
    )
    for pattern in row["redaction_patterns"]:
        stdout.print(f"  {pattern}", markup=False, highlight=False)


@app.command("recount")
def recount(
    name: Annotated[
        str | None, typer.Argument(help="The project's name (or id).", show_default=False)
    ] = None,
    every: Annotated[
        bool, typer.Option("--all", help="Every project, one after the other.")
    ] = False,
    as_json: JsonFlag = False,
    database_url: DatabaseUrl = None,
    data_dir: DataDir = None,
) -> None:
    """Count a project's runs again from their stored steps and model calls.

    Ingest keeps each run's counters and the rollups behind summary, health,
    timeseries, terminations, findings and tools as rows arrive. Rows that came
    another way (a bulk load with COPY, a partial restore, a fix by hand) are not
    counted until you recount: each run's steps, model calls, tokens and cost are
    counted from its rows, and the project's rollups are rebuilt from its runs.
    Runs whose step count changed are judged again by the running servers.

    Ingest waits while a project is recounted (minutes on tens of millions of steps);
    queries go on. With --all, each project is recounted in a transaction of its own.
    """
    import psycopg

    from keelwave.db import projects as store
    from keelwave.server.store.recount import recount as recount_project

    if (name is None) == (not every):
        fail("name one project to recount, or give --all for every project")
    results = []
    with key_database(database_url, data_dir) as conn:
        try:
            projects = store.list_projects(conn) if every else [store.find(conn, name)]
        except store.UnknownProject as error:
            fail(str(error))
        for project in projects:
            try:
                counted = recount_project(conn, project["id"])
            except psycopg.Error as error:  # its transaction rolled back; earlier ones stay
                fail(f"the recount of {project['name']} failed, nothing of it changed: {error}")
            results.append({"id": project["id"], "name": project["name"], **counted.as_dict()})
            if not as_json:
                stdout.print(
                    f"Project [bold]{project['name']}[/]: {counted.runs:,} runs counted again, "
                    f"{counted.runs_corrected:,} of them corrected; {counted.rollup_rows:,} "
                    "rollup rows rebuilt."
                )
    if as_json:
        stdout.print_json(json.dumps(results if every else results[0]))
