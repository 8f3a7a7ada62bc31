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
from typing import Annotated, Any

import typer
from rich import box
from rich.table import Table
from rich.text import Text

from keelwave.cli.common import fail, stdout
from keelwave.remote import format as fmt
from keelwave.remote.api import Api, ApiError
from keelwave.remote.config import resolve, save
from keelwave.remote.timeline import fold

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

runs_app = typer.Typer(help="List runs, or show one (`keelwave runs show RUN_ID`).",
                       invoke_without_command=True)  # fmt: skip


@contextmanager
def api_for(endpoint: str | None, api_key: str | None) -> Iterator[Api]:
    """An API client; any API error becomes one line on stderr and exit code 1."""
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
    """Check a key against the server and remember both for the other commands."""
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
    loops: Annotated[bool, typer.Option("--loops", help="Only runs that looped.")] = False,
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
                           limit=limit, loop_detected="true" if loops else None)  # fmt: skip
    data = answer["data"]
    if as_json:
        print_json(data)
        return
    looping = sum(1 for run in data if run["loop_detected"])
    title = f"{len(data)} runs · loop rate {fmt.rate(looping / len(data) if data else None)}"
    # Light borders, one space between columns, short cells: it fits in 80 columns.
    table = Table(title=title, title_justify="left", box=box.SIMPLE_HEAD, pad_edge=False,
                  padding=(0, 1, 0, 0))  # fmt: skip
    for column, justify, width in (("run", "left", 8), ("agent", "left", None),
                                   ("started", "right", 8), ("duration", "right", 8),
                                   ("steps", "right", 5), ("status", "left", 9),
                                   ("loop", "left", 4), ("tokens", "right", 6),
                                   ("cost", "right", 7)):  # fmt: skip
        table.add_column(column, justify=justify, min_width=width,  # type: ignore[arg-type]
                         no_wrap=True, overflow="ellipsis")  # fmt: skip
    for run in data:
        table.add_row(
            fmt.short_id(run["id"]), run["agent_name"], fmt.ago(run["started_at"]),
            fmt.duration(run["duration_ms"]), str(run["step_count"]), fmt.status(run),
            Text("LOOP", style="bold white on red") if run["loop_detected"] else "",
            fmt.tokens(run["input_tokens"] + run["output_tokens"]), fmt.money(run["cost_usd"]),
        )  # fmt: skip
    if not data:
        stdout.print("No runs match. Send some with `keelwave demo`.")
        return
    stdout.print(table)
    if answer.get("next_cursor"):
        stdout.print("[dim]More runs exist: raise --limit (at most 500) or narrow the filters.[/]")


@runs_app.command("show")
def show(
    ctx: typer.Context,
    run_ref: Annotated[str, typer.Argument(metavar="RUN_ID", help="A run id or a unique start.")],
    as_json: Json = False,
    endpoint: Endpoint = None,
    api_key: ApiKey = None,
) -> None:
    """One run: its header and its step timeline, loops drawn as bands."""
    parent = ctx.obj or {}
    with api_for(endpoint or parent.get("endpoint"), api_key or parent.get("api_key")) as api:
        run_id = api.resolve_run(run_ref)
        run = api.agent(f"/runs/{run_id}")["data"]
        steps = api.all_steps(run_id)
        calls = api.agent(f"/runs/{run_id}/llm")["data"]
    if as_json:
        print_json({"run": run, "steps": steps, "llm_calls": calls})
        return
    header = Table.grid(padding=(0, 2))
    header.add_column(style="dim")
    header.add_column()
    loop = (f"[bold red]yes[/], from step {run['loop_step_index']}" if run["loop_detected"]
            else "no")  # fmt: skip
    for label, value in (
        ("run", run["id"]),
        ("agent", run["agent_name"]),
        ("status", fmt.status(run, short=False)),
        ("termination", run["termination_reason"] or "—"),
        ("loop", loop),
        ("duration", fmt.duration(run["duration_ms"])),
        ("steps", str(run["step_count"])),
        ("tokens", f"{fmt.tokens(run['input_tokens'])} in · "
                   f"{fmt.tokens(run['output_tokens'])} out · {run['llm_calls']} model calls"),
        ("cost", fmt.money(run["cost_usd"])),
        ("parent", run["parent_run_id"] or "—"),
        ("children", ", ".join(fmt.short_id(child) for child in run["child_runs"]) or "—"),
    ):  # fmt: skip
        header.add_row(label, value)
    if run.get("error"):
        header.add_row("error", Text(run["error"], style="red"))
    stdout.print(header)
    timeline = Table(title="timeline", title_justify="left")
    timeline.add_column("step", justify="right", no_wrap=True)
    timeline.add_column("what")
    timeline.add_column("duration", justify="right")
    timeline.add_column("", no_wrap=True)
    for band in fold(steps):
        low, high = band.indices
        where = str(low) if low == high else f"{low}–{high}"
        what = Text(band.label, style="bold red" if band.is_loop else "")
        if not band.is_loop and band.first.get("in_loop"):
            what.append(f"  (repeats ×{band.first['loop_hits']})", style="red")
        note = Text(f"{band.errors} error(s)", style="red") if band.errors else ""
        timeline.add_row(where, what, fmt.duration(band.duration_ms), note)
    stdout.print(timeline if steps else "No steps recorded.")


def loops(
    run_ref: Annotated[str, typer.Argument(metavar="RUN_ID", help="A run id or a unique start.")],
    full: Annotated[bool, typer.Option("--full", help="Show whole fingerprints.")] = False,
    as_json: Json = False,
    endpoint: Endpoint = None,
    api_key: ApiKey = None,
) -> None:
    """A run's loop groups: which tool repeated which input, how often, at which steps."""
    with api_for(endpoint, api_key) as api:
        run_id = api.resolve_run(run_ref)
        data = api.agent(f"/runs/{run_id}/loops")["data"]
    if as_json:
        print_json(data)
        return
    if not data:
        stdout.print(f"Run {fmt.short_id(run_id)} repeats nothing: no loops.")
        return
    table = Table(title=f"loops of run {run_id}", title_justify="left")
    for column in ("fingerprint", "tool", "hits", "steps"):
        table.add_column(column, justify="right" if column == "hits" else "left")
    for group in data:
        fingerprint = group["fingerprint"] if full else group["fingerprint"][:12] + "…"
        table.add_row(fingerprint, group["tool_name"], str(group["hits"]),
                      ", ".join(map(str, group["step_indices"])))  # fmt: skip
    stdout.print(table)


def summary(
    window: Window = "24h",
    as_json: Json = False,
    endpoint: Endpoint = None,
    api_key: ApiKey = None,
) -> None:
    """The window against the one before it, the termination mix, agents by loop rate."""
    with api_for(endpoint, api_key) as api:
        numbers = api.agent("/summary", window=window)["data"]
        terminations = api.agent("/runs/terminations", window=window)["data"]
        health = api.agent("/health", window=window)["data"]
    if as_json:
        print_json({"summary": numbers, "terminations": terminations, "health": health})
        return
    now, before = numbers["current"], numbers["previous"]
    table = Table(title=f"last {window} vs the {window} before", title_justify="left")
    for column in ("", "now", "before", "change"):
        table.add_column(column, justify="left" if not column else "right")
    rows = (
        ("runs", now["runs"], before["runs"], str, False),
        ("loop rate", now["loop_rate"], before["loop_rate"], fmt.rate, True),
        ("error rate", now["error_rate"], before["error_rate"], fmt.rate, True),
        ("stalled", now["stalled_runs"], before["stalled_runs"], str, False),
        ("p95 duration", now["p95_duration_ms"], before["p95_duration_ms"], fmt.duration, False),
        ("tokens", now["input_tokens"] + now["output_tokens"],
         before["input_tokens"] + before["output_tokens"], fmt.tokens, False),
        ("cost", now["cost_usd"], before["cost_usd"], fmt.money, False),
    )  # fmt: skip
    for label, current, previous, show_value, points in rows:
        table.add_row(label, show_value(current), show_value(previous),
                      fmt.change(current, previous, as_points=points))  # fmt: skip
    stdout.print(table)
    mix = Table(title="how runs ended", title_justify="left")
    mix.add_column("termination")
    mix.add_column("runs", justify="right")
    for row in terminations:
        if row["count"]:
            mix.add_row(row["termination_reason"] or "not finished yet", str(row["count"]))
    stdout.print(mix)
    agents = Table(title="agents by loop rate", title_justify="left")
    for column in ("agent", "runs", "loop rate", "error rate", "stalled", "p95", "cost"):
        agents.add_column(column, justify="left" if column == "agent" else "right")
    for row in health:
        agents.add_row(row["agent_name"], str(row["runs"]), fmt.rate(row["loop_rate"]),
                       fmt.rate(row["error_rate"]), str(row["stalled_runs"]),
                       fmt.duration(row["p95_duration_ms"]),
                       fmt.money(row["cost_usd"]))  # fmt: skip
    stdout.print(agents if health else "No runs in this window.")
