"""``keelwave runs diff A B`` as a person reads it: two runs' steps side by side.

The server aligns the steps (``/runs/compare``); this draws each aligned pair
as one row saying what differs, then the totals of A and B and B minus A.
Imported only when a comparison is shown (rich's tables are not for ``--help``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from rich.table import Table
from rich.text import Text

from keelwave.cli.common import stdout
from keelwave.remote import format as fmt

# What each alignment status says, and how it is drawn.
STATUS = {
    "same": ("same", "dim"),
    "changed_input": ("changed input", "yellow"),
    "changed_output": ("changed output", "yellow"),
    "only_a": ("only in A", "red"),
    "only_b": ("only in B", "green"),
}
ALIGNMENTS = {"lcs": "by a longest common subsequence of (step type, tool)",
              "greedy": "in one pass (the runs are too long for the exact alignment)"}  # fmt: skip
CELL = 60  # characters of an input or output in a cell


def show_comparison(comparison: dict[str, Any]) -> None:
    a, b = comparison["a"], comparison["b"]
    for label, run in (("A", a), ("B", b)):
        line = Text(f"{label}  ", style="bold")
        line.append(f"{run['id']}  {run['agent_name']} · {fmt.moment(run['started_at'])} · ")
        line.append_text(fmt.status(run))
        stdout.print(line)
    how = ALIGNMENTS.get(comparison["aligned"], comparison["aligned"])
    stdout.print(f"[dim]steps aligned {how}[/]")
    table = Table(title="steps", title_justify="left")
    table.add_column("A", overflow="fold")
    table.add_column("B", overflow="fold")
    table.add_column("", no_wrap=True)
    for pair in comparison["steps"]:
        words, style = STATUS.get(pair["status"], (pair["status"], ""))
        table.add_row(_cell(pair["a"], pair["status"]), _cell(pair["b"], pair["status"]),
                      Text(words, style=style))  # fmt: skip
    if comparison["steps"]:
        stdout.print(table)
    else:
        stdout.print("Neither run has steps.")
    stdout.print(_totals(comparison["totals"]))


def _cell(step: dict | None, status: str) -> Text:
    """``2 fetch`` and, when it is what differs, the input or output below it."""
    if step is None:
        return Text("—", style="dim")
    text = Text(f"{step['step_index']} ", style="dim")
    text.append(step.get("tool_name") or step.get("step_type") or "step")
    shown = {"changed_input": "tool_input", "changed_output": "tool_output",
             "only_a": "tool_input", "only_b": "tool_input"}.get(status)  # fmt: skip
    if shown and step.get(shown) is not None:
        label = "out " if shown == "tool_output" else "in "
        text.append(f"\n{label}", style="dim")
        text.append(fmt.cut(fmt.compact_json(step[shown]), CELL))
    elif shown == "tool_input" and step.get("content"):
        text.append("\n" + fmt.cut(step["content"], CELL), style="dim")
    return text


TOTALS: tuple[tuple[str, str, Callable[[Any], str]], ...] = (
    ("steps", "step_count", lambda n: str(int(n))),
    ("model calls", "llm_calls", lambda n: str(int(n))),
    ("tokens in", "input_tokens", lambda n: fmt.tokens(int(n))),
    ("tokens out", "output_tokens", lambda n: fmt.tokens(int(n))),
    ("cost", "cost_usd", fmt.money),
    ("duration", "duration_ms", fmt.duration),
)


def _totals(totals: dict[str, dict[str, float | None]]) -> Table:
    table = Table(title="totals", title_justify="left")
    for column in ("", "A", "B", "B − A"):
        table.add_column(column, justify="left" if not column else "right")
    for label, key, show in TOTALS:
        numbers = totals[key]
        table.add_row(label, _or_dash(numbers["a"], show), _or_dash(numbers["b"], show),
                      _signed(numbers["delta"], show))  # fmt: skip
    return table


def _or_dash(value: float | None, show: Callable[[Any], str]) -> str:
    return "—" if value is None else show(value)


def _signed(delta: float | None, show: Callable[[Any], str]) -> Text:
    """``+$0.12``, ``-3``, ``0``: the difference with its sign, red when B is more."""
    if delta is None:
        return Text("—")
    if delta == 0:
        return Text("0", style="dim")
    sign = "+" if delta > 0 else "-"
    return Text(sign + show(abs(delta)), style="red" if delta > 0 else "green")
