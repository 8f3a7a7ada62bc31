"""The server's own verdict on a run: exact loops, cycles, near-duplicates and no progress.

Pure functions over a run's steps, standard library only, so the writer, the
query side and the benchmarks can all call them without a database. ``detectors``
holds the public entry point, ``findings(steps)``, and the thresholds with their
reasons; ``normalise`` says when two inputs are "the same call"; ``cycles``
finds repeated periods.
"""

from keelwave.server.findings.detectors import KINDS, Finding, StepView, findings

__all__ = ["KINDS", "Finding", "StepView", "findings"]
