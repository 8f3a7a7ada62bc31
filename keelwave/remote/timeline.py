"""A run's steps as a timeline in which a loop reads as one band.

Consecutive steps that share a looping fingerprint (one that occurs at least
twice in the run) fold into a single band: ``web_search ×5  steps 1–5``.
Everything else stays a single step. Shared by the CLI and the TUI.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class Band:
    """One row of the timeline: a single step, or a run of repeated steps."""

    steps: list[dict] = field(default_factory=list)

    @property
    def first(self) -> dict:
        return self.steps[0]

    @property
    def is_loop(self) -> bool:
        return len(self.steps) > 1

    @property
    def hits(self) -> int:
        return len(self.steps)

    @property
    def indices(self) -> tuple[int, int]:
        return self.steps[0]["step_index"], self.steps[-1]["step_index"]

    @property
    def label(self) -> str:
        step = self.first
        name = step.get("tool_name") or step.get("step_type", "step")
        if not self.is_loop:
            return name
        low, high = self.indices
        return f"{name} ×{self.hits}  steps {low}–{high}"

    @property
    def duration_ms(self) -> float:
        return sum(step.get("duration_ms") or 0 for step in self.steps)

    @property
    def errors(self) -> int:
        return sum(1 for step in self.steps if step.get("error"))


def fold(steps: list[dict]) -> list[Band]:
    bands: list[Band] = []
    for step in steps:
        previous = bands[-1].steps[-1] if bands else None
        if (
            previous is not None
            and step.get("in_loop")
            and step.get("fingerprint")
            and previous.get("fingerprint") == step.get("fingerprint")
        ):
            bands[-1].steps.append(step)
        else:
            bands.append(Band([step]))
    return bands
