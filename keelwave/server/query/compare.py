"""Two runs' steps side by side: which steps correspond, and how each pair differs.

Pure functions over the steps as /steps gives them (dicts), so the alignment
is tested on its own (tests/test_compare.py) and the route (comparison.py) only
reads and answers.

Steps correspond by what they are, (step_type, tool_name), not by their index:
a run that made one more search than the other must still line up after it.
The pairs are a longest common subsequence of those keys. It is computed
bit-parallel (Hyyrö's variant of Allison and Dix's algorithm): each step of b
is a few operations on an integer holding one bit per step of a, so two runs
of 2,000 steps take milliseconds, not the seconds of a table of four million
cells, and the rows kept for the way back take a bit per cell. Beyond
:data:`LCS_MAX_CELLS` cells (runs of more than about 2,000 steps each), a linear
greedy alignment is used instead, and the answer says so.

A pair is ``same`` when its input (the fingerprint: tool and input as sent; for
a step without a tool, its content) and its tool_output are equal,
``changed_input`` when the input differs, ``changed_output`` when only the
output does. Unpaired steps are ``only_a`` or ``only_b``.
"""

from __future__ import annotations

import json
from collections.abc import Hashable, Sequence
from typing import Any

LCS_MAX_CELLS = 2_000 * 2_000
# How far ahead the greedy alignment looks for a step's counterpart.
GREEDY_WINDOW = 32

Step = dict[str, Any]
Pair = tuple[int | None, int | None]  # positions in a and b; None: no counterpart


def key(step: Step) -> tuple[str, str | None]:
    return (step["step_type"], step["tool_name"])


def lcs_pairs(a: Sequence[Hashable], b: Sequence[Hashable]) -> list[tuple[int, int]]:
    """The positions (i, j) of a longest common subsequence of ``a`` and ``b``, ascending:
    of those, the one that pairs each step as early as it can (an extra call at the end
    of b is b's last step unpaired, not an earlier one)."""
    last_a, last_b = len(a) - 1, len(b) - 1
    backwards = _latest_lcs_pairs(a[::-1], b[::-1])
    return [(last_a - i, last_b - j) for i, j in reversed(backwards)]


def _latest_lcs_pairs(a: Sequence[Hashable], b: Sequence[Hashable]) -> list[tuple[int, int]]:
    """One longest common subsequence, found from the ends (so pairing items late).

    Bit i of the row after b[:j] is 0 where the LCS of a[:i+1] and b[:j] is one
    longer than that of a[:i] and b[:j], so the LCS of a[:i] and b[:j] is the
    number of zeros below bit i.
    """
    if not a or not b:
        return []
    full = (1 << len(a)) - 1
    matches: dict[Hashable, int] = {}
    for i, item in enumerate(a):
        matches[item] = matches.get(item, 0) | (1 << i)
    rows = [full]
    row = full
    for item in b:
        u = row & matches.get(item, 0)
        row = ((row + u) | (row - u)) & full
        rows.append(row)

    def length(i: int, j: int) -> int:
        return i - (rows[j] & ((1 << i) - 1)).bit_count()

    pairs = []
    i, j = len(a), len(b)
    while i > 0 and j > 0:
        here = length(i, j)
        if a[i - 1] == b[j - 1] and length(i - 1, j - 1) == here - 1:
            pairs.append((i - 1, j - 1))
            i, j = i - 1, j - 1
        elif length(i - 1, j) == here:
            i -= 1
        else:
            j -= 1
    pairs.reverse()
    return pairs


def greedy_pairs(a: Sequence[Hashable], b: Sequence[Hashable]) -> list[tuple[int, int]]:
    """Pairs found walking both sequences once: equal items pair; otherwise the side whose
    counterpart is nearer (within GREEDY_WINDOW) skips ahead, else both move on unpaired."""
    pairs = []
    i = j = 0
    while i < len(a) and j < len(b):
        if a[i] == b[j]:
            pairs.append((i, j))
            i, j = i + 1, j + 1
            continue
        ahead_in_b = _distance(b, j, a[i])
        ahead_in_a = _distance(a, i, b[j])
        if ahead_in_b is None and ahead_in_a is None:
            i, j = i + 1, j + 1
        elif ahead_in_a is None or (ahead_in_b is not None and ahead_in_b <= ahead_in_a):
            j += ahead_in_b  # type: ignore[operator]
        else:
            i += ahead_in_a
    return pairs


def _distance(items: Sequence[Hashable], start: int, wanted: Hashable) -> int | None:
    for offset, item in enumerate(items[start : start + GREEDY_WINDOW]):
        if item == wanted:
            return offset
    return None


def merge(pairs: list[tuple[int, int]], len_a: int, len_b: int) -> list[Pair]:
    """Every position of a and b once, in order: the pairs, and between them the steps
    of a without a counterpart, then those of b."""
    merged: list[Pair] = []
    i = j = 0
    for pa, pb in [*pairs, (len_a, len_b)]:
        merged.extend((x, None) for x in range(i, pa))
        merged.extend((None, y) for y in range(j, pb))
        if pa < len_a and pb < len_b:
            merged.append((pa, pb))
        i, j = pa + 1, pb + 1
    return merged


def _canonical(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"))


def pair_status(step_a: Step, step_b: Step) -> str:
    """same, changed_input or changed_output, for two steps that correspond."""
    if step_a["tool_name"] is not None:
        same_input = step_a["fingerprint"] == step_b["fingerprint"]
    else:
        same_input = step_a["content"] == step_b["content"]
    if not same_input:
        return "changed_input"
    if _canonical(step_a["tool_output"]) != _canonical(step_b["tool_output"]):
        return "changed_output"
    return "same"


def align(steps_a: Sequence[Step], steps_b: Sequence[Step]) -> tuple[str, list[dict[str, Any]]]:
    """("lcs" or "greedy", [{"status", "a", "b"}]) for two runs' steps in step order."""
    keys_a = [key(step) for step in steps_a]
    keys_b = [key(step) for step in steps_b]
    if len(keys_a) * len(keys_b) <= LCS_MAX_CELLS:
        method, pairs = "lcs", lcs_pairs(keys_a, keys_b)
    else:
        method, pairs = "greedy", greedy_pairs(keys_a, keys_b)
    aligned = []
    for i, j in merge(pairs, len(keys_a), len(keys_b)):
        step_a = steps_a[i] if i is not None else None
        step_b = steps_b[j] if j is not None else None
        if step_a is not None and step_b is not None:
            status = pair_status(step_a, step_b)
        else:
            status = "only_a" if step_a is not None else "only_b"
        aligned.append({"status": status, "a": step_a, "b": step_b})
    return method, aligned
