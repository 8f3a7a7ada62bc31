"""A run's whole story in start order: its steps (loops folded into bands), model calls
and child runs, as one list of rows.

The API's ``/timeline`` gives the three kinds interleaved by start time. A loop
band stays one row (that is the point of a band), so the model calls and child
runs that happened during it, a call linked to one of its steps or one that
started while it ran, go inside it (``Row.inside``: the CLI counts them, the
TUI lists them when the band is opened) rather than cutting it into pieces.
Everything else is a row of its own, placed by when it started. Shared by the
CLI and the TUI; the dashboard draws the same order as a waterfall.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from rich.text import Text

from keelwave.remote import format as fmt
from keelwave.remote import verdict
from keelwave.remote.timeline import Band, fold

KIND_ORDER = {"band": 0, "model_call": 1, "child_run": 2}  # at one moment, as the API orders


@dataclass
class Row:
    """A band of steps, or a model call, or a child run."""

    kind: str  # "band", "model_call" or "child_run"
    started_at: datetime | None
    band: Band | None = None
    item: dict | None = None  # the model call or child run
    inside: list[dict] = field(default_factory=list)  # model calls / child runs within a band

    @property
    def calls_inside(self) -> list[dict]:
        return [item for item in self.inside if item["kind"] == "model_call"]

    @property
    def children_inside(self) -> list[dict]:
        return [item for item in self.inside if item["kind"] == "child_run"]


def when(iso: str | None) -> datetime | None:
    return datetime.fromisoformat(iso) if iso else None


def rows_of(items: Iterable[dict], findings: Iterable[dict] = ()) -> list[Row]:
    """The rows of a run's ``/timeline`` items, with the run's ``findings`` on its bands."""
    items = list(items)
    steps = sorted((i for i in items if i["kind"] == "step"), key=lambda s: s["step_index"])
    rows = [Row("band", _start(band), band=band) for band in fold(steps, findings)]
    loops = [row for row in rows if row.band is not None and row.band.is_loop]
    for item in items:
        if item["kind"] == "step":
            continue
        host = _host(item, loops)
        if host is not None:
            host.inside.append(item)
        else:
            rows.append(Row(item["kind"], when(item.get("started_at")), item=item))
    # Stable: bands of steps that started together keep their step order.
    rows.sort(key=lambda row: (row.started_at or datetime.max.astimezone(), KIND_ORDER[row.kind]))
    return rows


def _start(band: Band) -> datetime | None:
    starts = [when(step.get("started_at")) for step in band.steps]
    return min((s for s in starts if s is not None), default=None)


def _end(band: Band) -> datetime | None:
    ends = [
        when(step["started_at"]) + timedelta(milliseconds=step.get("duration_ms") or 0)
        for step in band.steps
        if step.get("started_at")
    ]
    return max(ends, default=None)


def _host(item: dict, loops: list[Row]) -> Row | None:
    """The loop band a model call or child run belongs in: the one holding its step, or
    else the one that was running when it started."""
    index = item.get("step_index")
    for row in loops:
        assert row.band is not None
        if index is not None and any(s["step_index"] == index for s in row.band.steps):
            return row
    started = when(item.get("started_at"))
    if index is not None or started is None:
        return None
    for row in loops:
        assert row.band is not None
        low, high = row.started_at, _end(row.band)
        if low is not None and high is not None and low < started <= high:
            return row
    return None


def offset(moment: datetime | None, origin: str | None) -> str:
    """``+1.2 s``: how long after the run's start a row began."""
    start = when(origin)
    if moment is None or start is None:
        return ""
    return "+" + fmt.duration(max(0.0, (moment - start).total_seconds() * 1000))


def call_text(call: dict, compact: bool = False) -> Text:
    """``model gpt-4o · 12.0k in / 900 out · $0.031`` (``compact``: ``gpt-4o 12.0k/900
    $0.031``, for a narrow tree); red when the call failed."""
    failed = call.get("status") == "error"
    text = Text("" if compact else "model ", style="dim")
    text.append(call.get("model") or call.get("provider") or "?", style="red" if failed else "cyan")
    tokens_in, tokens_out = (
        fmt.tokens(call.get("input_tokens")),
        fmt.tokens(call.get("output_tokens")),
    )
    money = fmt.money(call.get("cost_usd"))
    if compact:
        text.append(f" {tokens_in}/{tokens_out} {money}", style="dim")
    else:
        text.append(f" · {tokens_in} in / {tokens_out} out · {money}", style="dim")
    if failed:
        text.append(f"  {call.get('error') or 'failed'}", style="red")
    return text


def child_text(child: dict) -> Text:
    """``child run 1a2b3c4d summarizer-agent · clean · 3 steps``, with its loop badge."""
    text = Text("child run ", style="dim")
    text.append(fmt.short_id(child["run_id"]), style="bold")
    text.append(f" {child['agent_name']} · ")
    text.append_text(fmt.status(child))
    text.append(f" · {fmt.plural(child['step_count'], 'step')}")
    if child.get("cost_usd"):
        text.append(f" · {fmt.money(child['cost_usd'])}")
    badge = verdict.badge(child, pad=" ")
    if badge.plain:
        text.append("  ")
        text.append_text(badge)
    return text


def inside_text(row: Row, compact: bool = False) -> Text:
    """``+ 4 model calls, 1 child run`` within a band (``compact``: ``+ 4 calls, 1 child``);
    empty when nothing is."""
    parts = []
    if calls := row.calls_inside:
        parts.append(fmt.plural(len(calls), "call" if compact else "model call"))
    if children := row.children_inside:
        parts.append(fmt.plural(len(children), "child", "children") if compact
                     else fmt.plural(len(children), "child run"))  # fmt: skip
    return Text(f"+ {', '.join(parts)}" if parts else "", style="dim")


def duration_ms(row: Row) -> float | None:
    if row.band is not None:
        return row.band.duration_ms
    assert row.item is not None
    if row.kind == "model_call":
        return row.item.get("latency_ms", row.item.get("duration_ms"))
    return row.item.get("duration_ms")
