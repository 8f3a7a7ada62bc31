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
from keelwave.remote import verdict
from keelwave.remote.timeline import Band, band_text, fold
from keelwave.remote.timeline import legend as legend_of


def show_runs(answer: dict[str, Any]) -> None:
    """The run list, one line per run, with a LOOP badge when the agent reported a loop or
    the server found one (LOOP*: the server only), and a legend when it needs one."""
    data = answer["data"]
    title = f"{len(data)} runs · loop rate {fmt.rate(verdict.loop_rate(data))}"
    # Light borders, one space between columns, short cells: it fits in 80 columns.
    table = Table(title=title, title_justify="left", box=box.SIMPLE_HEAD, pad_edge=False,
                  padding=(0, 1, 0, 0))  # fmt: skip
    for column, justify, width in (("run", "left", 8), ("agent", "left", None),
                                   ("started", "right", 8), ("duration", "right", 8),
                                   ("steps", "right", 5), ("status", "left", 9),
                                   ("loop", "left", 5), ("tokens", "right", 6),
                                   ("cost", "right", 7)):  # fmt: skip
        table.add_column(column, justify=justify, min_width=width,  # type: ignore[arg-type]
                         no_wrap=True, overflow="ellipsis")  # fmt: skip
    for run in data:
        table.add_row(
            fmt.short_id(run["id"]), run["agent_name"], fmt.ago(run["started_at"]),
            fmt.duration(run["duration_ms"]), str(run["step_count"]), fmt.status(run),
            verdict.badge(run),
            fmt.tokens(run["input_tokens"] + run["output_tokens"]), fmt.money(run["cost_usd"]),
        )  # fmt: skip
    if not data:
        stdout.print("No runs match. Send some with `keelwave demo`.")
        return
    stdout.print(table)
    for line in verdict.legend(data):
        stdout.print(f"[dim]{line}[/]")
    if answer.get("next_cursor"):
        stdout.print("[dim]More runs exist: raise --limit (at most 500) or narrow the filters.[/]")


def show_run(
    run: dict[str, Any], steps: list[dict[str, Any]], findings: list[dict[str, Any]]
) -> None:
    """One run: its header, then its timeline with loops (repeats, cycles) folded into
    bands and the server's warnings marked on their steps."""
    header = Table.grid(padding=(0, 2))
    header.add_column(style="dim")
    header.add_column()
    loop = Text(verdict.loop_line(run))
    if verdict.loops(run):
        loop.stylize("bold red", 0, 3)
    for label, value in (
        ("run", run["id"]),
        ("agent", run["agent_name"]),
        ("status", fmt.status(run, short=False)),
        ("termination", run["termination_reason"] or "—"),
        ("loop", loop),
        ("findings", verdict.findings_text(run)),
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
    if not steps:
        stdout.print("No steps recorded.")
        return
    bands = fold(steps, findings)
    timeline = Table(title="timeline", title_justify="left")
    timeline.add_column("step", justify="right", no_wrap=True)
    timeline.add_column("what")
    timeline.add_column("duration", justify="right", no_wrap=True)
    timeline.add_column("")
    for band in bands:
        low, high = band.indices
        where = str(low) if low == high else f"{low}–{high}"
        timeline.add_row(where, band_text(band), fmt.duration(band.duration_ms), band_notes(band))
    stdout.print(timeline)
    if legend := legend_of(bands):
        stdout.print(f"[dim]{legend}[/]")


def band_notes(band: Band) -> Text:
    """Errors, then each warning on the band: its sentence where it began."""
    notes = Text()
    if band.errors:
        notes.append(f"{band.errors} error(s)", style="red")
    for mark in band.marks:
        if notes:
            notes.append("\n")
        notes.append(mark.text, style=verdict.WARNING_STYLE)
    return notes


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
        ("detected loop rate", now["detected_loop_rate"], before["detected_loop_rate"],
         fmt.rate, True),
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
    stdout.print("[dim]loop rate: runs the agent reported looping · detected: runs the server "
                 "found looping[/]")  # fmt: skip
    counts = now["findings"]
    stdout.print("runs with findings: " + " · ".join(
        f"{verdict.LABELS[kind]} {counts[kind]}" for kind in verdict.KINDS))  # fmt: skip
    mix = Table(title="how runs ended", title_justify="left")
    mix.add_column("termination")
    mix.add_column("runs", justify="right")
    for row in terminations:
        if row["count"]:
            mix.add_row(row["termination_reason"] or "not finished yet", str(row["count"]))
    stdout.print(mix)
    agents = Table(title="agents by loop rate", title_justify="left")
    for column in ("agent", "runs", "loop rate", "detected", "errors", "stalled", "p95", "cost"):
        agents.add_column(column, justify="left" if column == "agent" else "right")
    for row in health:
        agents.add_row(row["agent_name"], str(row["runs"]), fmt.rate(row["loop_rate"]),
                       fmt.rate(row["detected_loop_rate"]),
                       fmt.rate(row["error_rate"]), str(row["stalled_runs"]),
                       fmt.duration(row["p95_duration_ms"]),
                       fmt.money(row["cost_usd"]))  # fmt: skip
    stdout.print(agents if health else "No runs in this window.")
