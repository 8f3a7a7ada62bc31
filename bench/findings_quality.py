"""How good and how cheap the findings detectors are (issue 19).

    python bench/findings_quality.py [--seeds 19 2] [--size 240] [--repeat 5]

Quality: precision and recall per kind over the labelled corpus of
``tests/findings_corpus.py`` for each seed (19 is the one the tests use; the
others are corpora the detectors were not tuned on), a finding being right when
its ``(kind, began_at_step)`` is a label of its trajectory. Also: how many of the
legitimately repetitive trajectories got a finding other than an exact loop
(the target is none).

Cost: ``findings()`` over whole runs of 50, 500 and 5,000 steps, made by
concatenating corpus trajectories (another seed, so the inputs are not the ones
measured for quality), best of ``--repeat``; reported as the total and per step.
A writer that recomputes a run's findings on every stored step pays the total
for that run's size on each step.
"""

from __future__ import annotations

import argparse
import os
import platform
import sys
import time
from collections import Counter

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests"))
from findings_corpus import Trajectory, corpus  # noqa: E402

from keelwave.server.findings import KINDS, StepView, findings  # noqa: E402

TARGET_PRECISION = 0.95
TARGET_RECALL = 0.9


def quality(trajectories: list[Trajectory]) -> tuple[dict[str, tuple[int, int, int]], int]:
    """Per kind: (true positives, found, expected); and the legitimate trajectories with
    a finding other than an exact loop."""
    hits, found, expected = Counter(), Counter(), Counter()
    noisy = 0
    for trajectory in trajectories:
        got = {(f.kind, f.began_at_step) for f in findings(trajectory.steps)}
        found.update(kind for kind, _ in got)
        expected.update(kind for kind, _ in trajectory.labels)
        hits.update(kind for kind, _ in got & trajectory.labels)
        if not trajectory.stuck and any(kind != "exact_loop" for kind, _ in got):
            noisy += 1
    return {k: (hits[k], found[k], expected[k]) for k in KINDS}, noisy


def report_quality(seed: int, size: int) -> bool:
    trajectories = corpus(seed, size)
    legit = sum(not t.stuck for t in trajectories)
    scores, noisy = quality(trajectories)
    print(
        f"\ncorpus seed {seed}: {len(trajectories)} trajectories, {legit} legitimately repetitive"
    )
    print(f"  {'kind':<15}{'labels':>7}{'found':>7}{'right':>7}{'precision':>11}{'recall':>8}")
    ok = noisy == 0
    for kind, (right, found, expected) in scores.items():
        precision = right / found if found else 1.0
        recall = right / expected if expected else 1.0
        ok &= precision >= TARGET_PRECISION and recall >= TARGET_RECALL
        print(f"  {kind:<15}{expected:>7}{found:>7}{right:>7}{precision:>11.3f}{recall:>8.3f}")
    print(f"  legitimate trajectories with a finding other than exact_loop: {noisy}")
    return ok


def long_run(steps: int, seed: int = 1001) -> list[StepView]:
    """One run of ``steps`` steps: trajectories one after the other, renumbered."""
    run: list[StepView] = []
    for trajectory in corpus(seed, size=max(40, steps // 5)):
        for step in trajectory.steps:
            if len(run) == steps:
                return run
            run.append(StepView(len(run) + 1, step.tool_name, step.tool_input, step.tool_output))
    raise RuntimeError("corpus too small")


def report_cost(repeat: int) -> None:
    print(
        f"\ncost of findings() on {platform.python_implementation()} {platform.python_version()}"
        f" ({platform.machine()}), best of {repeat}:"
    )
    print(f"  {'steps':>6}{'total ms':>10}{'µs/step':>9}{'findings':>10}")
    for size in (50, 500, 5_000):
        run = long_run(size)
        best = float("inf")
        for _ in range(repeat):
            started = time.perf_counter()
            result = findings(run)
            best = min(best, time.perf_counter() - started)
        print(f"  {size:>6}{best * 1e3:>10.2f}{best / size * 1e6:>9.1f}{len(result):>10}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[19, 2])
    parser.add_argument("--size", type=int, default=240)
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    ok = all([report_quality(seed, args.size) for seed in args.seeds])
    report_cost(args.repeat)
    print(
        f"\ntargets (precision ≥ {TARGET_PRECISION}, recall ≥ {TARGET_RECALL}, nothing but "
        f"exact loops on the legitimate half): {'met' if ok else 'NOT met'}"
    )


if __name__ == "__main__":
    main()
