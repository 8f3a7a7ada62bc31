"""Repeated periods in a sequence of calls: ``A B A B``, ``A B C A B C``.

The input is one integer per tool call (equal integers: same fingerprint), in
step order, with think and replan steps already left out: an agent that thinks
between two calls of its cycle is still cycling, and the steps without a tool
have no fingerprint to compare.

For each period ``p`` from 2 to ``MAX_PERIOD``, one pass finds the stretches
where ``ids[i] == ids[i + p]``; a stretch of ``L`` such positions starting at
``i`` means ``ids[i : i + L + p]`` repeats its first ``p`` calls. It is a cycle
when it holds at least two whole repetitions and its ``p`` calls are distinct
(the contract's "k distinct pairs"; it also makes ``p`` the smallest period that
explains the stretch, since a block of distinct calls is not a repetition of a
shorter one). Cost: O(n · MAX_PERIOD) comparisons of integers.

Why a bound of 8: the cycles agents get stuck in are short (search → open,
plan → delegate → review, navigate → click → screenshot); a period longer than 8
calls repeated back to back is rare, and every call of such a cycle is still an
exact loop, so it is not lost, only not named as a cycle.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

MAX_PERIOD = 8
MIN_REPETITIONS = 2


class Region(NamedTuple):
    """Calls ``start .. start + period * repetitions - 1`` (positions in the call list)
    are ``repetitions`` back-to-back copies of ``period`` distinct calls."""

    start: int
    period: int
    repetitions: int

    @property
    def end(self) -> int:
        return self.start + self.period * self.repetitions


def repeated_regions(ids: Sequence[int], max_period: int = MAX_PERIOD) -> list[Region]:
    """Every maximal cycle, in order of its first call.

    Only whole repetitions are reported: ``A B C A B C A B`` is ``A B C`` twice; the
    trailing ``A B`` did not complete a third. A region inside another one (of a
    different period) is dropped: the larger one says more.
    """
    n = len(ids)
    found: list[Region] = []
    for period in range(2, min(max_period, n // 2) + 1):
        i = 0
        while i + period < n:
            if ids[i] != ids[i + period]:
                i += 1
                continue
            j = i
            while j + period < n and ids[j] == ids[j + period]:
                j += 1
            repetitions = (j - i + period) // period
            if repetitions >= MIN_REPETITIONS and len(set(ids[i : i + period])) == period:
                found.append(Region(i, period, repetitions))
            i = j
    found.sort(key=lambda region: (region.start, -(region.end - region.start)))
    kept: list[Region] = []
    reach = -1
    for region in found:
        if region.end <= reach:
            continue
        kept.append(region)
        reach = max(reach, region.end)
    return kept
