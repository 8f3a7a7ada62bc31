"""``keelwave login``, ``runs``, ``runs show``, ``loops`` and ``summary``: the API, in a terminal.

These commands only ever talk to the HTTP API, never to the database, so
they work against any keelwave server with a ``read`` key. ``--json``
prints the API's own data (documented in docs/cli.md), for scripts and
coding agents.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Annotated, Any

import typer

from keelwave.cli.common import fail, new_app, stdout
from keelwave.remote.config import resolve, save

if TYPE_CHECKING:
    from keelwave.remote.api import Api

Endpoint = Annotated[
    str | None,
    typer.Option(
        "--endpoint",
        help="Server URL (env KEELWAVE_ENDPOINT, else `keelwave login`).",
        show_default=False,
    ),  # fmt: skip
]
ApiKey = Annotated[
    str | None,
    typer.Option(
        "--api-key",
        help="A read or all key (env KEELWAVE_API_KEY, else login).",
        show_default=False,
    ),  # fmt: skip
]
Json = Annotated[bool, typer.Option("--json", help="Print the API's JSON instead of tables.")]
Window = Annotated[str, typer.Option(help="15m, 1h, 6h, 24h, 7d, 30d…")]

runs_app = new_app(
    help="List runs, or show one (`keelwave runs show RUN_ID`).", invoke_without_command=True
)


@contextmanager
def api_for(endpoint: str | None, api_key: str | None) -> Iterator[Api]:
    """An API client; any API error becomes one line on stderr and exit code 1."""
    # Imported here, not above: urllib.request is a third of `keelwave --help`'s imports.
    from keelwave.remote.api import Api, ApiError

    try:
        yield Api(resolve(endpoint, api_key))
    except ApiError as error:
        fail(str(error), code=1)


def print_json(data: Any) -> None:
    # Plain print: rich would wrap long lines and break the JSON for a pipe.
    print(json.dumps(data, indent=2, ensure_ascii=False))


def login(
    endpoint: Endpoint = None,
    api_key: ApiKey = None,
) -> None:
    """Check a key against a server and save both for later commands."""
    credentials = resolve(endpoint, api_key)
    key = api_key or typer.prompt("API key (kw_…)", hide_input=True).strip()
    with api_for(credentials.endpoint, key) as api:
        me = api.me()
    path = save(credentials.endpoint, key)
    stdout.print(f"Logged in to {credentials.endpoint}: project [bold]{me['project']}[/], "
                 f"scope {me['scope']}. Saved to {path}.")  # fmt: skip


@runs_app.callback()
def runs(
    ctx: typer.Context,
    agent: Annotated[str | None, typer.Option(help="Only this agent.")] = None,
    loops: Annotated[
        bool,
        typer.Option(
            "--loops",
            help="Only runs that looped: reported by the agent or detected by the server.",
        ),
    ] = False,  # fmt: skip
    finding: Annotated[
        str | None,
        typer.Option(
            "--finding",
            metavar="KIND",
            help="Only runs with this finding: exact_loop, cycle, near_duplicate, no_progress.",
            show_default=False,
        ),
    ] = None,
    status: Annotated[
        str | None, typer.Option(help="running, stalled or finished.", show_default=False)
    ] = None,
    window: Annotated[
        str | None,
        typer.Option(help="Only runs started in the last 15m, 24h, 7d…", show_default=False),
    ] = None,  # fmt: skip
    limit: Annotated[int, typer.Option(min=1, max=500, help="How many runs.")] = 50,
    as_json: Json = False,
    endpoint: Endpoint = None,
    api_key: ApiKey = None,
) -> None:
    """List runs, newest first."""
    if ctx.invoked_subcommand is not None:
        ctx.obj = {"endpoint": endpoint, "api_key": api_key}
        return
    with api_for(endpoint, api_key) as api:
        answer = api.agent("/runs", agent_name=agent, status=status, window=window,
                           limit=limit, loop="true" if loops else None,
                           finding=finding)  # fmt: skip
    data = answer["data"]
    if as_json:
        print_json(data)
        return
    from keelwave.cli.tables import show_runs

    show_runs(answer)


@runs_app.command("show")
def show(
    ctx: typer.Context,
    run_ref: Annotated[str, typer.Argument(metavar="RUN_ID", help="A run id or a unique start.")],
    as_json: Json = False,
    endpoint: Endpoint = None,
    api_key: ApiKey = None,
) -> None:
    """One run: its header and its step timeline, loops drawn as bands.

    The header says whether the run looped and who says so (the agent, the server, or
    both); the timeline folds repeats and cycles into bands and marks near-duplicate
    calls and calls that make no progress.
    """
    parent = ctx.obj or {}
    with api_for(endpoint or parent.get("endpoint"), api_key or parent.get("api_key")) as api:
        run_id = api.resolve_run(run_ref)
        run = api.agent(f"/runs/{run_id}")["data"]
        steps = api.all_steps(run_id)
        calls = api.agent(f"/runs/{run_id}/llm")["data"]
        found = api.agent(f"/runs/{run_id}/findings")["data"]
    if as_json:
        print_json({"run": run, "steps": steps, "llm_calls": calls, "findings": found})
        return
    from keelwave.cli.tables import show_run

    show_run(run, steps, found)


def loops(
    run_ref: Annotated[str, typer.Argument(metavar="RUN_ID", help="A run id or a unique start.")],
    full: Annotated[bool, typer.Option("--full", help="Show whole fingerprints.")] = False,
    as_json: Json = False,
    endpoint: Endpoint = None,
    api_key: ApiKey = None,
) -> None:
    """A run's loops: which tool repeated which input, and where.

    Each group: the tool, how often, at which steps, and the fingerprint.
    """
    with api_for(endpoint, api_key) as api:
        run_id = api.resolve_run(run_ref)
        data = api.agent(f"/runs/{run_id}/loops")["data"]
    if as_json:
        print_json(data)
        return
    from keelwave.cli.tables import show_loops

    show_loops(run_id, data, full=full)


def findings(
    run_ref: Annotated[str, typer.Argument(metavar="RUN_ID", help="A run id or a unique start.")],
    as_json: Json = False,
    endpoint: Endpoint = None,
    api_key: ApiKey = None,
) -> None:
    """How a run repeats itself, as the server finds it.

    Exact loops, cycles, near-duplicate calls and calls that make no progress,
    each with the step where it began.
    """
    with api_for(endpoint, api_key) as api:
        run_id = api.resolve_run(run_ref)
        data = api.agent(f"/runs/{run_id}/findings")["data"]
    if as_json:
        print_json(data)
        return
    from keelwave.cli.tables import show_findings

    show_findings(run_id, data)


def summary(
    window: Window = "24h",
    as_json: Json = False,
    endpoint: Endpoint = None,
    api_key: ApiKey = None,
) -> None:
    """This window against the last, and agents by loop rate.

    Loop rates as the agents reported them and as the server detected them, and how many
    runs have each kind of finding.

    Also how the window's runs ended (the termination mix).
    """
    with api_for(endpoint, api_key) as api:
        numbers = api.agent("/summary", window=window)["data"]
        terminations = api.agent("/runs/terminations", window=window)["data"]
        health = api.agent("/health", window=window)["data"]
    if as_json:
        print_json({"summary": numbers, "terminations": terminations, "health": health})
        return
    from keelwave.cli.tables import show_summary

    show_summary(window, numbers, terminations, health)
