"""Log-scale duration histograms, for percentiles that need no sort of the raw values.

The rollups keep durations (of tool calls, of runs) as counts per bin, in
DDSketch's scheme: bin ``i`` holds durations in ``(MIN_MS·γ^(i-1), MIN_MS·γ^i]``,
and the value reported for a bin is within ``ACCURACY`` of every duration in
it, so a percentile read from the histogram is within ``ACCURACY`` of the
duration at that rank. Bins of any hours add up, which is what lets a week be
read from hourly rows. Bin 0 holds durations up to ``MIN_MS``; ``NO_DURATION``
counts what was sent without one.

These constants are part of the stored data: changing them needs a migration
that rebuilds every histogram table.
"""

from __future__ import annotations

import math

ACCURACY = 0.02  # relative error of a percentile read from a histogram
GAMMA = (1 + ACCURACY) / (1 - ACCURACY)
MIN_MS = 0.001
NO_DURATION = -1

_LOG_GAMMA = repr(math.log(GAMMA))


def bin_sql(column: str) -> str:
    """The SQL expression that puts the duration in ``column`` in its bin."""
    return (
        f"CASE WHEN {column} IS NULL THEN {NO_DURATION} WHEN {column} <= {MIN_MS} THEN 0 "
        f"ELSE ceil(ln({column} / {MIN_MS}) / {_LOG_GAMMA})::int END"
    )


def bin_value(duration_bin: int) -> float:
    """The duration reported for a bin: within ACCURACY of everything in it."""
    if duration_bin <= 0:
        return 0.0
    return 2 * MIN_MS * GAMMA**duration_bin / (GAMMA + 1)


def percentile(histogram: list[tuple[int, int]], fraction: float) -> float | None:
    """The ``fraction`` percentile of a histogram of (bin, count), bins ascending.

    Picks the bin holding the value at rank ``fraction·(n-1)``, the rank
    PostgreSQL's percentile_cont interpolates at. NO_DURATION bins are ignored.
    """
    histogram = [(b, count) for b, count in histogram if b != NO_DURATION and count > 0]
    total = sum(count for _, count in histogram)
    if not total:
        return None
    rank = fraction * (total - 1)
    seen = 0
    for duration_bin, count in histogram:
        seen += count
        if seen > rank:
            return round(bin_value(duration_bin), 3)
    return round(bin_value(histogram[-1][0]), 3)
