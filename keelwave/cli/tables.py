"""The query commands' answers as tables for a person (``--json`` skips all of this).

Kept apart from :mod:`keelwave.cli.query` so that typer reading the commands'
signatures (every ``keelwave`` invocation, ``--help`` included) does not load
rich's tables; only a command that has something to show imports this.
"""

from __future__ import annotations

import json
from typing import Any

from rich import box
from rich.table import Table
from rich.text import Text

from keelwave.cli.common import stdout
from keelwave.remote import format as fmt
from keelwave.remote import verdict, waterfall
from keelwave.remote.timeline import Band, band_text, name_of
from keelwave.remote.timeline import legend as legend_of


def show_runs(answer: dict[str, Any], filtered: bool = False) -> None:
    """The run list, one line per run, with a LOOP badge when the agent reported a loop or
    the server found one (LOOP*: the server only), and a legend when it needs one.
    ``filtered``: the list was narrowed, so an empty one means no match, not no data."""
    data = answer["data"]
    title = f"{fmt.plural(len(data), 'run')} · loop rate {fmt.rate(verdict.loop_rate(data))}"
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
        stdout.print("No runs match these filters." if filtered
                     else "No runs yet. Send some with `keelwave demo`.")  # fmt: skip
        return
    stdout.print(table)
    for line in verdict.legend(data):
        stdout.print(f"[dim]{line}[/]")
    if answer.get("next_cursor"):
        stdout.print("[dim]More runs exist: raise --limit (at most 500) or narrow the filters.[/]")


def show_run(
    run: dict[str, Any],
    items: list[dict[str, Any]],
    findings: list[dict[str, Any]],
    full: bool = False,
) -> None:
    """One run: its header (when it started and ended, what went in and came out, its
    error with the traceback), then its timeline: steps with loops (repeats, cycles) folded
    into bands and the server's warnings marked, model calls and child runs placed where
    they started. ``full``: input, output and metadata uncut."""
    header = Table.grid(padding=(0, 2))
    header.add_column(style="dim", no_wrap=True)
    header.add_column(overflow="fold")
    loop = Text(verdict.loop_line(run))
    if verdict.loops(run):
        loop.stylize("bold red", 0, 3)
    calls = fmt.plural(run["llm_calls"], "model call")
    for label, value in (
        ("run", run["id"]),
        ("agent", run["agent_name"]),
        ("status", fmt.status(run, short=False)),
        ("termination", run["termination_reason"] or "—"),
        ("started", fmt.moment(run["started_at"])),
        ("ended", fmt.moment(run["ended_at"]) if run.get("ended_at") else "not yet"),
        ("loop", loop),
        ("findings", verdict.findings_text(run)),
        ("duration", fmt.duration(run["duration_ms"])),
        ("steps", str(run["step_count"])),
        ("tokens", f"{fmt.tokens(run['input_tokens'])} in · "
                   f"{fmt.tokens(run['output_tokens'])} out · {calls}"),
        ("cost", fmt.money(run["cost_usd"])),
        ("parent", run["parent_run_id"] or "—"),
        ("children", ", ".join(fmt.short_id(child) for child in run["child_runs"]) or "—"),
    ):  # fmt: skip
        header.add_row(label, value)
    if run.get("tags"):
        header.add_row("tags", ", ".join(run["tags"]))
    for label in ("metadata", "input", "output"):
        if run.get(label) not in (None, {}, ""):
            header.add_row(
                label, Text(fmt.cut(fmt.compact_json(run[label]), None if full else 300))
            )
    if run.get("error"):
        header.add_row("error", Text(run["error"], style="red"))
    stdout.print(header)
    if run.get("error_traceback"):
        stdout.print(Text(run["error_traceback"].rstrip(), style="red dim"))
    rows = waterfall.rows_of(items, findings)
    if not rows:
        stdout.print("No steps recorded.")
        return
    timeline = Table(title="timeline", title_justify="left")
    timeline.add_column("at", justify="right", no_wrap=True, style="dim")
    timeline.add_column("step", justify="right", no_wrap=True)
    timeline.add_column("what")
    timeline.add_column("duration", justify="right", no_wrap=True)
    timeline.add_column("")
    for row in rows:
        at = waterfall.offset(row.started_at, run["started_at"])
        took = fmt.duration(waterfall.duration_ms(row))
        if row.band is not None:
            low, high = row.band.indices
            where = str(low) if low == high else f"{low}–{high}"
            what = band_text(row.band)
            if row.inside:
                what.append("  ").append_text(waterfall.inside_text(row))
            timeline.add_row(at, where, what, took, band_notes(row.band))
        elif row.kind == "model_call":
            assert row.item is not None
            step = row.item.get("step_index")
            timeline.add_row(at, Text(f"↳{step}" if step is not None else "", style="dim"),
                             waterfall.call_text(row.item), took, "")  # fmt: skip
        else:
            assert row.item is not None
            timeline.add_row(at, "", waterfall.child_text(row.item), took, "")
    stdout.print(timeline)
    bands = [row.band for row in rows if row.band is not None]
    if legend := legend_of(bands):
        stdout.print(f"[dim]{legend}[/]")
    _step_errors([step for band in bands for step in band.steps], run)


def _step_errors(steps: list[dict[str, Any]], run: dict[str, Any]) -> None:
    """Each failed step's error under the timeline, with its traceback when it has one of
    its own (the run's was printed in the header)."""
    for step in steps:
        if not step.get("error"):
            continue
        stdout.print(Text(f"step {step['step_index']} ({name_of(step)}) failed: {step['error']}",
                          style="red"))  # fmt: skip
        traceback = step.get("error_traceback")
        if traceback and traceback != run.get("error_traceback"):
            stdout.print(Text(traceback.rstrip(), style="red dim"))


def band_notes(band: Band) -> Text:
    """Errors, then each warning on the band: its sentence where it began."""
    notes = Text()
    if band.errors:
        notes.append(fmt.plural(band.errors, "error"), style="red")
    for mark in band.marks:
        if notes:
            notes.append("\n")
        notes.append(mark.text, style=verdict.WARNING_STYLE)
    return notes


def show_loops(run_id: str, data: list[dict[str, Any]], inputs: dict[int, Any], full: bool) -> None:
    """A run's loop groups: each tool with the input it repeated (``inputs``: each step's
    tool_input by step index), cut to fit a line; ``full``: whole fingerprints, and each
    whole input below the table."""
    if not data:
        stdout.print(f"Run {fmt.short_id(run_id)} repeats nothing: no loops.")
        return
    steps_of = {id(group): ", ".join(map(str, group["step_indices"])) for group in data}
    table = Table(title=f"loops of run {run_id}", title_justify="left")
    table.add_column("tool", no_wrap=True)
    if not full:
        # The input gets what the other columns leave of the line (a non-terminal is 80
        # wide): a fixed width squeezed the step list to one character per line.
        steps_width = min(24, max(8, *(len(steps) for steps in steps_of.values())))
        tools_width = max(len(group["tool_name"]) for group in data)
        rest = tools_width + steps_width + len("hits") + len("fingerprint") + 16
        input_width = max(12, min(60, stdout.width - rest))
        table.add_column("input", no_wrap=True, overflow="ellipsis", max_width=input_width)
    table.add_column("hits", justify="right", no_wrap=True)
    table.add_column("steps", overflow="fold", min_width=8)
    table.add_column("fingerprint", no_wrap=True)
    for group in data:
        fingerprint = group["fingerprint"] if full else group["fingerprint"][:10] + "…"
        steps = steps_of[id(group)]
        repeated = [] if full else [fmt.compact_json(inputs.get(group["step_indices"][0]))]
        table.add_row(group["tool_name"], *repeated, str(group["hits"]), steps, fingerprint)
    stdout.print(table)
    if full:
        for group in data:
            stdout.print(f"\n{group['tool_name']} ×{group['hits']}, the input it repeated:")
            repeated = inputs.get(group["step_indices"][0])
            stdout.print(json.dumps(repeated, indent=2, ensure_ascii=False), markup=False)


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
