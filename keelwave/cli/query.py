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

from keelwave.cli import run_filters
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
    help="List runs, show one (`keelwave runs show RUN_ID`), or compare two "
    "(`keelwave runs diff A B`).",
    invoke_without_command=True,
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
    """Check a key against a server and save both for later commands.

    The key: --api-key, else KEELWAVE_API_KEY, else asked for (hidden) on a terminal, else
    read from standard input (`echo "$KEY" | keelwave login`). The endpoint may omit
    http:// (localhost:8080).
    """
    credentials = resolve(endpoint, api_key)
    if credentials.source in ("flag", "environment") and credentials.api_key:
        key = credentials.api_key
    else:  # a key saved before is not a reason to skip asking: login is for a new one
        key = _key_from_user()
    with api_for(credentials.endpoint, key) as api:
        me = api.me()
    path = save(credentials.endpoint, key)
    came_from = " (the key from KEELWAVE_API_KEY)" if credentials.source == "environment" else ""
    stdout.print(f"Logged in to {credentials.endpoint}{came_from}: project "
                 f"[bold]{me['project']}[/], scope {me['scope']}. Saved to {path}.")  # fmt: skip


def _key_from_user() -> str:
    """The key typed at a hidden prompt, or the first line piped in; never a wait for a
    terminal that is not there."""
    import sys

    if sys.stdin.isatty():
        key = typer.prompt("API key (kw_…)", hide_input=True)
    else:
        key = sys.stdin.readline()
    if not key.strip():
        fail("no API key to log in with: pass --api-key, set KEELWAVE_API_KEY, or pipe one "
             "in (echo \"$KEY\" | keelwave login)", code=2)  # fmt: skip
    return key.strip()


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
        str | None, typer.Option(metavar="STATUS", help=run_filters.STATUS_HELP, show_default=False)
    ] = None,
    ending: Annotated[
        str | None,
        typer.Option(
            "--ending",
            "--termination",
            metavar="REASON",
            help=run_filters.ENDING_HELP,
            show_default=False,
        ),
    ] = None,  # fmt: skip
    search: Annotated[
        str | None,
        typer.Option(
            "-q",
            "--search",
            metavar="TEXT",
            help="A run id start or part of the agent name.",
            show_default=False,
        ),
    ] = None,  # fmt: skip
    window: Annotated[
        str | None,
        typer.Option(
            metavar="AGE", help="Only runs started in the last 15m, 24h, 7d…", show_default=False
        ),
    ] = None,  # fmt: skip
    since: Annotated[
        str | None,
        typer.Option(
            metavar="WHEN",
            help="Only runs started since: an ISO time (local unless it has a zone) "
            "or an age (30d, 2h).",
            show_default=False,
        ),
    ] = None,  # fmt: skip
    until: Annotated[
        str | None,
        typer.Option(
            metavar="WHEN",
            help="Only runs started before: an ISO time or an age.",
            show_default=False,
        ),
    ] = None,  # fmt: skip
    tag: Annotated[
        list[str] | None,
        typer.Option(
            "--tag",
            metavar="TAG",
            help="Only runs with this tag (repeat: every tag).",
            show_default=False,
        ),
    ] = None,  # fmt: skip
    metadata: Annotated[
        list[str] | None,
        typer.Option(
            "--metadata",
            metavar="KEY=VALUE",
            help="Only runs whose metadata has KEY equal to VALUE (repeatable).",
            show_default=False,
        ),
    ] = None,  # fmt: skip
    sort: Annotated[
        str | None,
        typer.Option(
            metavar="COLUMN",
            help="Order by started, duration, cost, steps, tokens or agent "
            "(highest first; --asc for lowest).",
            show_default=False,
        ),
    ] = None,  # fmt: skip
    ascending: Annotated[bool, typer.Option("--asc", help="Lowest (or oldest) first.")] = False,
    limit: Annotated[int, typer.Option(min=1, max=500, help="How many runs.")] = 50,
    as_json: Json = False,
    endpoint: Endpoint = None,
    api_key: ApiKey = None,
) -> None:
    """List runs, newest first (or as --sort says), filtered."""
    if ctx.invoked_subcommand is not None:
        ctx.obj = {"endpoint": endpoint, "api_key": api_key}
        return
    try:
        filters = {
            **run_filters.status_params(status, ending),
            **run_filters.range_params(since, until),
            **run_filters.sort_params(sort, ascending),
            "metadata": run_filters.metadata_params(metadata or []),
        }
    except run_filters.BadFilter as error:
        fail(str(error), code=2)
    with api_for(endpoint, api_key) as api:
        answer = api.agent("/runs", agent_name=agent, window=window, q=search, tag=tag,
                           limit=limit, loop="true" if loops else None,
                           finding=finding, **filters)  # fmt: skip
    data = answer["data"]
    if as_json:
        print_json(data)
        return
    from keelwave.cli.tables import show_runs

    narrowed = (agent, loops or None, finding, status, ending, search, window, since, until,
                tag, metadata)  # fmt: skip
    show_runs(answer, filtered=any(narrowed))


@runs_app.command("show")
def show(
    ctx: typer.Context,
    run_ref: Annotated[str, typer.Argument(metavar="RUN_ID", help="A run id or a unique start.")],
    full: Annotated[
        bool, typer.Option("--full", help="Show input, output and metadata uncut.")
    ] = False,
    as_json: Json = False,
    endpoint: Endpoint = None,
    api_key: ApiKey = None,
) -> None:
    """One run: its header and its timeline, loops drawn as bands.

    The header says when the run started and ended, what went in and came out, its error
    with the traceback, and whether the run looped and who says so (the agent, the
    server, or both). The timeline has steps, model calls and child runs in the order they
    started; it folds repeats and cycles into bands and marks near-duplicate calls and
    calls that make no progress.
    """
    parent = ctx.obj or {}
    with api_for(endpoint or parent.get("endpoint"), api_key or parent.get("api_key")) as api:
        run_id = api.resolve_run(run_ref)
        run = api.agent(f"/runs/{run_id}")["data"]
        items = api.timeline(run_id)
        found = api.agent(f"/runs/{run_id}/findings")["data"]
        if as_json:
            steps = api.all_steps(run_id)
            calls = api.agent(f"/runs/{run_id}/llm")["data"]
    if as_json:
        print_json({"run": run, "steps": steps, "llm_calls": calls, "findings": found,
                    "timeline": items})  # fmt: skip
        return
    from keelwave.cli.tables import show_run

    show_run(run, items, found, full=full)


@runs_app.command("diff")
def diff(
    ctx: typer.Context,
    run_a: Annotated[str, typer.Argument(metavar="A", help="A run id or a unique start.")],
    run_b: Annotated[str, typer.Argument(metavar="B", help="Another run id or start.")],
    as_json: Json = False,
    endpoint: Endpoint = None,
    api_key: ApiKey = None,
) -> None:
    """Compare two runs: their steps aligned, and what the second cost more or less.

    Each aligned step is the same (tool, input and output), has a changed input or a
    changed output, or is only in one run. Then steps, tokens, model calls, cost and
    duration of A and B, and B minus A.
    """
    parent = ctx.obj or {}
    with api_for(endpoint or parent.get("endpoint"), api_key or parent.get("api_key")) as api:
        a, b = api.resolve_run(run_a), api.resolve_run(run_b)
        comparison = api.agent("/runs/compare", a=a, b=b)["data"]
    if as_json:
        print_json(comparison)
        return
    from keelwave.cli.diff import show_comparison

    show_comparison(comparison)


def loops(
    run_ref: Annotated[str, typer.Argument(metavar="RUN_ID", help="A run id or a unique start.")],
    full: Annotated[
        bool, typer.Option("--full", help="Show whole inputs and fingerprints.")
    ] = False,
    as_json: Json = False,
    endpoint: Endpoint = None,
    api_key: ApiKey = None,
) -> None:
    """A run's loops: which tool repeated which input, and where.

    Each group: the tool, the input it was called with again and again (cut short unless
    --full), how often, at which steps, and the fingerprint.
    """
    with api_for(endpoint, api_key) as api:
        run_id = api.resolve_run(run_ref)
        data = api.agent(f"/runs/{run_id}/loops")["data"]
        steps = api.all_steps(run_id) if data and not as_json else []
    if as_json:
        print_json(data)
        return
    from keelwave.cli.tables import show_loops

    inputs = {step["step_index"]: step.get("tool_input") for step in steps}
    show_loops(run_id, data, inputs, full=full)


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
