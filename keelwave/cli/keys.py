"""``keelwave keys``: create, list and revoke API keys, straight in the database.

These commands work with the server running or not; on the embedded
database they join the server that ``keelwave serve`` runs. The database
driver is imported when a command runs, not when typer reads the signatures
(see :mod:`keelwave.cli.commands`).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from keelwave.cli.common import DatabaseUrl, DataDir, fail, new_app, stdout

if TYPE_CHECKING:
    import psycopg

app = new_app(help="Create, list and revoke API keys.", no_args_is_help=True)

# keelwave.db.keys.DEFAULT_PROJECT, spelt out: importing that module here would
# load psycopg for every `keelwave` command (tests/test_cli_startup.py checks they agree).
DEFAULT_PROJECT = "default"


@contextmanager
def key_database(database_url: str | None, data_dir: Path | None) -> Iterator[psycopg.Connection]:
    """A connection to a migrated keelwave database, or one clear error line."""
    import psycopg

    from keelwave.cli.database import connected, require_schema, settings_from

    settings = settings_from(database_url=database_url, data_dir=data_dir)
    with connected(settings) as conninfo, psycopg.connect(conninfo, autocommit=True) as conn:
        require_schema(conn)
        yield conn


class Scope(StrEnum):
    ingest = "ingest"
    read = "read"
    all = "all"


JsonFlag = Annotated[bool, typer.Option("--json", help="Print JSON instead of text.")]


@app.command("create")
def create(
    project: Annotated[
        str, typer.Option("--project", "-p", help="Project name; created if it does not exist.")
    ] = DEFAULT_PROJECT,
    name: Annotated[
        str | None, typer.Option("--name", help="A label to recognise the key.")
    ] = None,
    scope: Annotated[
        Scope, typer.Option("--scope", help="ingest: send data; read: query; all: both.")
    ] = Scope.all,
    as_json: JsonFlag = False,
    database_url: DatabaseUrl = None,
    data_dir: DataDir = None,
) -> None:
    """Create a key. It is printed once; only its hash is stored."""
    from keelwave.db import keys as store

    with key_database(database_url, data_dir) as conn:
        try:
            created = store.create_key(conn, project, scope.value, name)
        except ValueError as error:
            fail(str(error))
    if as_json:
        stdout.print_json(json.dumps(created.as_dict()))
        return
    stdout.print(
        f"Created {'an' if created.scope[0] in 'aeiou' else 'a'} [bold]{created.scope}[/] key "
        f"for project "
        f"[bold]{created.project}[/] ({created.project_id})."
    )
    stdout.print("It is shown only this once; store it somewhere safe:\n")
    stdout.print(f"  {created.key}\n", markup=False)
    stdout.print(f"Key id: {created.id}  (revoke with `keelwave keys revoke {created.id[:8]}`)")


@app.command("list")
def list_(
    project: Annotated[
        str | None, typer.Option("--project", "-p", help="Only this project's keys.")
    ] = None,
    as_json: JsonFlag = False,
    database_url: DatabaseUrl = None,
    data_dir: DataDir = None,
) -> None:
    """List keys (never the keys themselves: only their first characters)."""
    from rich.table import Table

    from keelwave.db import keys as store

    with key_database(database_url, data_dir) as conn:
        rows = store.list_keys(conn, project)
    if as_json:
        stdout.print_json(json.dumps([store.jsonable(row) for row in rows]))
        return
    if not rows:
        stdout.print("No keys yet. Create one with `keelwave keys create --project NAME`.")
        return
    # Short ids, as git shows commits: `keys revoke` takes any unique start of an id.
    table = Table("id", "key", "project", "scope", "name", "created", "status")
    for row in rows:
        status = "revoked" if row["revoked_at"] else "active"
        table.add_row(
            row["id"][:8],
            row["prefix"] + "…",
            row["project"],
            row["scope"],
            row["name"] or "",
            row["created_at"].strftime("%Y-%m-%d %H:%M"),
            f"[red]{status}[/]" if row["revoked_at"] else f"[green]{status}[/]",
        )
    stdout.print(table)


@app.command("revoke")
def revoke(
    key_ref: Annotated[
        str,
        typer.Argument(
            metavar="KEY",
            help="The key's id or a unique start of it, or the key prefix `keys list` "
            "prints (kw_AbC123).",
        ),
    ],
    yes: Annotated[bool, typer.Option("--yes", "-y", help="Revoke without asking.")] = False,
    as_json: JsonFlag = False,
    database_url: DatabaseUrl = None,
    data_dir: DataDir = None,
) -> None:
    """Revoke a key, after asking. Running servers stop accepting it at once."""
    from keelwave.db import keys as store

    with key_database(database_url, data_dir) as conn:
        try:
            row = find_key(store.list_keys(conn), key_ref)
        except store.UnknownKey as error:
            fail(str(error))
        if row["revoked_at"] is not None:
            if as_json:
                stdout.print_json(json.dumps(store.jsonable(row)))
                return
            stdout.print(f"Key {row['id']} ({row['prefix']}…) was already revoked, "
                         f"on {row['revoked_at']:%Y-%m-%d %H:%M %Z}.")  # fmt: skip
            return
        if not yes:
            confirm_revocation(row)
        row = {**row, **store.revoke_key(conn, row["id"])}
    if as_json:
        stdout.print_json(json.dumps(store.jsonable(row)))
        return
    stdout.print(f"Revoked key {row['id']} ({row['prefix']}…).")


def find_key(rows: list[dict], reference: str) -> dict:
    """The one key ``reference`` names: an id or its start (as `keys list` shows ids), or
    the display prefix `keys list` shows (``kw_AbC123``, with or without its ``…``, or a
    start of it; the case matters, as in the key)."""
    from keelwave.db.keys import KEY_PREFIX, UnknownKey

    reference = reference.strip().removesuffix("…")
    if reference.startswith(KEY_PREFIX):
        matches = [row for row in rows if row["prefix"].startswith(reference)]
        what = "key prefix"
    else:
        wanted = reference.lower()
        if not wanted or any(ch not in "0123456789abcdef-" for ch in wanted):
            raise UnknownKey(f"{reference!r} is neither a key id nor a key prefix (kw_…): "
                             "see `keelwave keys list`")  # fmt: skip
        matches = [row for row in rows if row["id"].startswith(wanted)]
        what = "id"
    if not matches:
        raise UnknownKey(f"no key with {what} {reference!r} (see `keelwave keys list`)")
    if len(matches) > 1:
        raise UnknownKey(f"{reference!r} matches {len(matches)} keys; give more of the {what}")
    return matches[0]


def confirm_revocation(row: dict) -> None:
    """Ask on the terminal; without one, refuse rather than wait for an answer never typed."""
    import sys

    named = f", {row['name']!r}" if row.get("name") else ""
    what = f"{row['prefix']}… ({row['scope']} key of project {row['project']}{named})"
    if not sys.stdin.isatty():
        fail(f"not revoking {what} without asking, and there is no terminal to ask on: "
             "pass --yes to revoke it", code=2)  # fmt: skip
    if not typer.confirm(f"Revoke {what}? Anything using it is refused from now on"):
        stdout.print("Not revoked.")
        raise typer.Exit(1)
