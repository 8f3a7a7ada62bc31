"""A run's steps as a timeline in which a loop reads as one band.

Two kinds of band, both loops (drawn red):

- consecutive steps that share a looping fingerprint (one that occurs at least
  twice in the run) fold into one band: ``web_search ×5  steps 1–5``;
- the steps of a cycle the server found (``A B A B A B``, from the run's
  ``/findings``) fold into one band: ``search → open ×3  steps 1–6``; steps
  without a tool between its calls (thinking) belong to the band too.

Everything else stays a single step. The server's warnings, near-duplicate
calls and calls that make no progress, are not folded: each of their steps
carries a :class:`Mark` (drawn yellow), and the one holding the finding's
first step carries its sentence. Shared by the CLI and the TUI; the dashboard's
copy is keelwave/web/app/src/timeline.ts.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from rich.text import Text

from keelwave.remote.verdict import LABELS, SYMBOLS, WARNING_KINDS, WARNING_STYLE


@dataclass(frozen=True)
class Mark:
    """A warning finding (``near_duplicate`` or ``no_progress``) on a step of a band."""

    finding: dict
    first: bool  # the band holds the finding's first step: its sentence goes there

    @property
    def kind(self) -> str:
        return self.finding["kind"]

    @property
    def symbol(self) -> str:
        return SYMBOLS[self.kind]

    @property
    def text(self) -> str:
        """``≈ near-duplicate: lookup called 3 times with …`` on the first step, else
        ``≈ near-duplicate of step 4`` / ``∅ no progress since step 4``."""
        if self.first:
            return f"{self.symbol} {LABELS[self.kind]}: {self.finding['detail']}"
        return f"{self.symbol} {self.short}"

    @property
    def short(self) -> str:
        """``near-duplicate of step 4``, ``no progress since step 4``; the kind alone on the
        finding's first step."""
        if self.first:
            return LABELS[self.kind]
        since = "of" if self.kind == "near_duplicate" else "since"
        return f"{LABELS[self.kind]} {since} step {self.finding['began_at_step']}"


@dataclass
class Band:
    """One row of the timeline: a single step, a run of repeated steps, or a cycle."""

    steps: list[dict] = field(default_factory=list)
    cycle: dict | None = None  # the cycle finding this band draws
    marks: list[Mark] = field(default_factory=list)

    @property
    def first(self) -> dict:
        return self.steps[0]

    @property
    def is_loop(self) -> bool:
        return self.cycle is not None or len(self.steps) > 1

    @property
    def hits(self) -> int:
        return self.cycle["hits"] if self.cycle else len(self.steps)

    @property
    def indices(self) -> tuple[int, int]:
        return self.steps[0]["step_index"], self.steps[-1]["step_index"]

    @property
    def period(self) -> list[str]:
        """A cycle's calls, once: ``["search", "open"]`` (tool names may repeat when the
        same tool is called with two inputs in turn)."""
        if not self.cycle:
            return [name_of(self.first)]
        calls = self.cycle["step_indices"]
        length = max(1, len(calls) // max(1, self.cycle["hits"]))
        by_index = {step["step_index"]: step for step in self.steps}
        return [name_of(by_index[i]) if i in by_index else "?" for i in calls[:length]]

    @property
    def label(self) -> str:
        if not self.is_loop:
            return name_of(self.first)
        low, high = self.indices
        name = " → ".join(self.period) if self.cycle else name_of(self.first)
        return f"{name} ×{self.hits}  steps {low}–{high}"

    @property
    def duration_ms(self) -> float:
        return sum(step.get("duration_ms") or 0 for step in self.steps)

    @property
    def errors(self) -> int:
        return sum(1 for step in self.steps if step.get("error"))


def name_of(step: dict) -> str:
    return step.get("tool_name") or step.get("step_type", "step")


def fold(steps: list[dict], findings: Iterable[dict] = ()) -> list[Band]:
    """The bands of ``steps`` (in step order), with the server's ``findings`` on them."""
    findings = list(findings)
    present = {step["step_index"] for step in steps}
    cycles = sorted(
        (f for f in findings if f["kind"] == "cycle" and present.intersection(f["step_indices"])),
        key=lambda f: f["began_at_step"],
    )
    bands: list[Band] = []
    for step in steps:
        index = step["step_index"]
        current = bands[-1] if bands else None
        if current and current.cycle and index <= current.cycle["step_indices"][-1]:
            current.steps.append(step)  # inside a cycle: its think steps too
            continue
        cycle = next((c for c in cycles if c["step_indices"][0] <= index <= c["step_indices"][-1]
                      and (current is None or current.indices[1] < c["step_indices"][0])),
                     None)  # fmt: skip
        if cycle is not None:
            bands.append(Band([step], cycle=cycle))
            continue
        previous = current.steps[-1] if current else None
        if (
            current is not None
            and current.cycle is None
            and previous is not None
            and step.get("in_loop")
            and step.get("fingerprint")
            and previous.get("fingerprint") == step.get("fingerprint")
        ):
            current.steps.append(step)
        else:
            bands.append(Band([step]))
    _mark(bands, [f for f in findings if f["kind"] in WARNING_KINDS])
    return bands


def _mark(bands: list[Band], warnings: list[dict]) -> None:
    where = {step["step_index"]: band for band in bands for step in band.steps}
    for finding in warnings:
        first = where.get(finding["step_indices"][0])
        for index in finding["step_indices"]:
            band = where.get(index)
            if band is not None and not any(m.finding is finding for m in band.marks):
                band.marks.append(Mark(finding, first=band is first))


def band_text(band: Band, spell_out: bool = False) -> Text:
    """A band's label as the CLI and the TUI draw it: red for a loop, ``(cycle)`` for a
    cycle, ``(repeats ×N)`` for a step whose input repeats elsewhere, ≈ / ∅ in yellow
    (``≈ near-duplicate of step 1`` with ``spell_out``)."""
    what = Text(band.label, style="bold red" if band.is_loop else "")
    if band.cycle:
        what.append("  (cycle)", style="red")
    elif not band.is_loop and band.first.get("in_loop"):
        what.append(f"  (repeats ×{band.first['loop_hits']})", style="red")
    for mark in band.marks:
        words = f" {mark.short}" if spell_out else ""
        what.append(f"  {mark.symbol}{words}", style=WARNING_STYLE)
    return what


def legend(bands: list[Band]) -> str | None:
    """What the timeline's colours mean, for the ones it uses."""
    parts = []
    if any(band.is_loop or band.first.get("in_loop") for band in bands):
        parts.append("red: a loop (the same call repeated, or a cycle of calls)")
    kinds = {mark.kind for band in bands for mark in band.marks}
    if kinds:
        shown = ", ".join(f"{SYMBOLS[k]} {LABELS[k]}" for k in WARNING_KINDS if k in kinds)
        parts.append(f"yellow: a warning, not a loop ({shown})")
    return " · ".join(parts) or None


def findings_of(step: dict, findings: Iterable[dict]) -> list[dict]:
    """The findings a step is part of (for an inspector)."""
    return [f for f in findings if step["step_index"] in f["step_indices"]]
