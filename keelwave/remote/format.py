"""Numbers for people: durations, relative and absolute times, tokens, money, rates,
changes, counted nouns."""

from __future__ import annotations

import json
import math
from datetime import UTC, datetime
from typing import Any

from rich.text import Text


def duration(ms: float | None) -> str:
    if ms is None:
        return "—"
    if ms < 1000:
        return f"{ms:.0f} ms"
    seconds = ms / 1000
    if seconds < 60:
        return f"{seconds:.1f} s"
    minutes, seconds = divmod(int(seconds), 60)
    if minutes < 60:
        return f"{minutes}m {seconds:02d}s"
    hours, minutes = divmod(minutes, 60)
    return f"{hours}h {minutes:02d}m"


def ago(iso: str | None, now: datetime | None = None) -> str:
    if not iso:
        return "—"
    moment = datetime.fromisoformat(iso)
    seconds = ((now or datetime.now(UTC)) - moment).total_seconds()
    if seconds < 0:
        return "just now"
    for limit, unit, size in ((60, "s", 1), (3600, "m", 60), (86400, "h", 3600)):
        if seconds < limit:
            return f"{int(seconds // size)}{unit} ago"
    return f"{int(seconds // 86400)}d ago"


def moment(iso: str | None, now: datetime | None = None) -> str:
    """``2026-12-01 14:03:07 UTC (8m ago)``: the absolute time, in the zone this terminal
    is in (``TZ``), named, then how long ago."""
    if not iso:
        return "—"
    local = datetime.fromisoformat(iso).astimezone()
    return f"{local:%Y-%m-%d %H:%M:%S %Z} ({ago(iso, now)})"


def clock(iso: str | None) -> str:
    """``14:03:07.250``: a time of day to the millisecond, local, for a timeline's rows."""
    if not iso:
        return ""
    return f"{datetime.fromisoformat(iso).astimezone():%H:%M:%S.%f}"[:-3]


def plural(count: int, noun: str, nouns: str | None = None) -> str:
    """``1 run``, ``2 runs``, ``0 runs``; ``nouns`` when the plural is not noun + s."""
    return f"{count} {noun if count == 1 else nouns or noun + 's'}"


def compact_json(value: Any) -> str:
    """A tool input on one line, as it would be sent: ``{"q": "same"}``; ``—`` for none."""
    if value is None:
        return "—"
    return json.dumps(value, ensure_ascii=False, separators=(", ", ": "))


def cut(text: str, limit: int | None) -> str:
    """``text``, or its first ``limit`` characters and ``…``."""
    return text if limit is None or len(text) <= limit else text[: limit - 1] + "…"


def tokens(count: int | None) -> str:
    if not count:
        return "0"
    if count < 1000:
        return str(count)
    if count < 1_000_000:
        return f"{count / 1000:.1f}k"
    return f"{count / 1_000_000:.2f}M"


def money(usd: float | None) -> str:
    if usd is None:
        return "—"
    if usd == 0:
        return "$0"
    if usd < 0.000001:
        return "<$0.000001"
    if usd < 0.01:  # two significant digits: a run of a cheap model costs $0.00019, not $0.000
        usd = float(f"{usd:.2g}")
        if usd < 0.01:
            return f"${usd:.{1 - math.floor(math.log10(usd))}f}"
    return f"${usd:,.2f}"


def rate(value: float | None) -> str:
    return "—" if value is None else f"{value * 100:.1f}%"


def change(current: float | None, previous: float | None, as_points: bool = False) -> str:
    """ "+3.2 pts" for rates, "+12%" for amounts, "—" when there is nothing to compare."""
    if current is None or previous is None:
        return "—"
    if as_points:
        delta = (current - previous) * 100
        return f"{delta:+.1f} pts"
    if previous == 0:
        return "new" if current else "—"
    return f"{(current - previous) / previous * 100:+.0f}%"


SHORT_REASONS = {"max_steps_reached": "max steps", "context_limit": "context",
                 "loop_detected": "loop"}  # fmt: skip


def status(run: dict, short: bool = True) -> Text:
    """How the run ended (its termination reason), or that it has not yet, coloured."""
    if run["status"] == "finished":
        reason = run["termination_reason"] or "finished"
        style = {"clean": "green", "error": "red", "loop_detected": "red"}.get(reason, "yellow")
        return Text(SHORT_REASONS.get(reason, reason) if short else reason, style=style)
    return Text(run["status"], style="yellow" if run["status"] == "stalled" else "cyan")


def short_id(run_id: str) -> str:
    return run_id[:8]
