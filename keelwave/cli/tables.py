"""The query commands' answers as tables for a person (``--json`` skips all of this).

Kept apart from :mod:`keelwave.cli.query` so that typer reading the commands'
signatures (every ``keelwave`` invocation, ``--help`` included) does not load
rich's tables; only a command that has something to show imports this.
"""

from __future__ import annotations

from typing import Any

from rich import box
from rich.table import Table
from rich.text import Text

from keelwave.cli.common import stdout
from keelwave.remote import format as fmt
from keelwave.remote.timeline import fold


def show_runs(answer: dict[str, Any]) -> None:
    """The run list, one line per run, with a LOOP badge."""
    data = answer["data"]
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


def show_run(run: dict[str, Any], steps: list[dict[str, Any]]) -> None:
    """One run: its header, then its timeline with loops folded into bands."""
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


def show_loops(run_id: str, data: list[dict[str, Any]], full: bool) -> None:
    """A run's loop groups."""
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


def show_findings(run_id: str, data: list[dict[str, Any]]) -> None:
    """A run's findings, by the step where each began."""
    if not data:
        stdout.print(f"Run {fmt.short_id(run_id)} is not stuck in any way the server detects.")
        return
    table = Table(title=f"findings of run {run_id}", title_justify="left")
    for column in ("began at", "kind", "tools", "hits", "steps", "why"):
        table.add_column(column, justify="right" if column in ("began at", "hits") else "left")
    for finding in data:
        table.add_row(
            str(finding["began_at_step"]), finding["kind"], ", ".join(finding["tool_names"]),
            str(finding["hits"]), ", ".join(map(str, finding["step_indices"])), finding["detail"],
        )  # fmt: skip
    stdout.print(table)


def show_summary(
    window: str,
    numbers: dict[str, Any],
    terminations: list[dict[str, Any]],
    health: list[dict[str, Any]],
) -> None:
    """The window against the one before, how runs ended, agents by loop rate."""
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
