"""The alignment of two runs' steps (keelwave.server.query.compare), on its own.

The bit-parallel LCS is checked against the textbook table on many small random
inputs; the statuses of pairs and the greedy fallback on hand-made cases.
"""

from __future__ import annotations

import random

import pytest

from keelwave.server.query import compare


def lcs_length(a: list, b: list) -> int:
    """The textbook dynamic programme, to check the bit-parallel one against."""
    table = [[0] * (len(b) + 1) for _ in range(len(a) + 1)]
    for i, x in enumerate(a):
        for j, y in enumerate(b):
            table[i + 1][j + 1] = (
                table[i][j] + 1 if x == y else max(table[i][j + 1], table[i + 1][j])
            )
    return table[len(a)][len(b)]


def is_common_subsequence(pairs: list[tuple[int, int]], a: list, b: list) -> bool:
    ascending = all(p[0] < q[0] and p[1] < q[1] for p, q in zip(pairs, pairs[1:], strict=False))
    return ascending and all(a[i] == b[j] for i, j in pairs)


@pytest.mark.parametrize("seed", range(5))
def test_lcs_is_a_longest_common_subsequence(seed: int) -> None:
    rng = random.Random(seed)
    for _ in range(400):
        a = [rng.choice("abc") for _ in range(rng.randint(0, 14))]
        b = [rng.choice("abcd") for _ in range(rng.randint(0, 14))]
        pairs = compare.lcs_pairs(a, b)
        assert is_common_subsequence(pairs, a, b), (a, b, pairs)
        assert len(pairs) == lcs_length(a, b), (a, b, pairs)


def test_greedy_pairs_are_a_common_subsequence_and_find_a_shifted_run() -> None:
    rng = random.Random(3)
    for _ in range(300):
        a = [rng.choice("abc") for _ in range(rng.randint(0, 30))]
        b = [rng.choice("abc") for _ in range(rng.randint(0, 30))]
        assert is_common_subsequence(compare.greedy_pairs(a, b), a, b)
    # b has two extra steps at its start: everything else still pairs.
    a = list("abcabc")
    assert compare.greedy_pairs(a, ["x", "y", *a]) == [(i, i + 2) for i in range(6)]


def test_merge_keeps_every_step_once_in_order() -> None:
    merged = compare.merge([(1, 0), (3, 3)], 5, 4)
    assert merged == [(0, None), (1, 0), (2, None), (None, 1), (None, 2), (3, 3), (4, None)]


def step(index: int, tool: str | None, fingerprint: str | None = None, **fields) -> dict:
    base = {"step_index": index, "step_type": "tool_call" if tool else "think", "tool_name": tool,
            "fingerprint": fingerprint, "content": None, "tool_output": None}  # fmt: skip
    return {**base, **fields}


def test_statuses_of_aligned_steps() -> None:
    a = [
        step(1, "search", "f1", tool_output={"n": 1, "m": 2}),
        step(2, None, content="think"),
        step(3, "fetch", "f3", tool_output="x"),
        step(4, "write", "f4"),
    ]
    b = [
        step(1, "search", "f1", tool_output={"m": 2, "n": 1}),  # same output, other key order
        step(2, None, content="think again"),
        step(3, "fetch", "f3", tool_output="y"),
        step(4, "fetch", "f5"),
    ]
    method, aligned = compare.align(a, b)
    assert method == "lcs"
    assert [row["status"] for row in aligned] == [
        "same", "changed_input", "changed_output", "only_a", "only_b"
    ]  # fmt: skip
    assert aligned[3]["a"]["step_index"] == 4 and aligned[3]["b"] is None
    assert aligned[4]["b"]["step_index"] == 4 and aligned[4]["a"] is None


def test_long_runs_are_aligned_greedily_and_say_so(monkeypatch) -> None:
    monkeypatch.setattr(compare, "LCS_MAX_CELLS", 10)
    a = [step(i, "search", f"f{i}") for i in range(1, 6)]
    method, aligned = compare.align(a, a)
    assert method == "greedy"
    assert [row["status"] for row in aligned] == ["same"] * 5


def test_empty_runs() -> None:
    assert compare.align([], []) == ("lcs", [])
    method, aligned = compare.align([], [step(1, "search", "f")])
    assert [row["status"] for row in aligned] == ["only_b"]
