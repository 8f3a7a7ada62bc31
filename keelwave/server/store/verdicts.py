"""The server's verdict on each run, kept current as its steps are committed.

A run is *due* when the number of steps its verdict was computed from
(``verdict_steps``) differs from its ``step_count``: the writer's every commit
of steps makes it so, with no extra work in the writer's transaction. The
:class:`VerdictKeeper` of each server process picks due runs right after the
writer commits (the writer wakes it) and every half second anyway (the due runs
of another process, or of before a restart), and for each:

1. takes the run's lock (statements.py's rule 1), so no step of it commits
   meanwhile and two keepers never interleave;
2. reads its steps and runs the detectors (keelwave.server.findings);
3. writes the verdict (``detected_loop``, ``detected_loop_step_index``,
   ``findings``, ``verdict_steps``) and moves the run between the rollups'
   verdict counters: its old share out, its new share in.

A run still going shows its loop within a moment of the step that made it. The
detectors are linear in a run's steps, but a run is recomputed whole each
time; so that a very long run sent in many small batches cannot keep a
process busy, a run that took ``t`` seconds to judge is not judged again for
``PACING × t`` seconds (its last steps are judged at the latest then).
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from collections.abc import Callable
from typing import Any

import psycopg
from psycopg_pool import AsyncConnectionPool, PoolTimeout

from keelwave.server.findings import Finding, StepView, findings
from keelwave.server.store import statements

log = logging.getLogger("keelwave.verdicts")

EVERY_SECONDS = 0.5  # how often due runs are looked for without a wake-up
RUNS_PER_ROUND = 100  # runs judged in one transaction
PACING = 10  # a run is not judged again before 10× the time judging it took
LOOPS = ("exact_loop", "cycle")  # the findings that make a detected loop

CLAIMS = 0x6B7A  # pg_try_advisory_xact_lock(int, int) namespace: runs a keeper is judging
# The runs due now that no other keeper (another worker or server) is judging:
# claimed with a lock only keepers take and never wait for, so two keepers share
# the work instead of doing it twice. (Claims come before the run locks, and
# nothing else takes them: no lock cycle.)
DUE = """
SELECT project_id, id FROM agent_runs
WHERE verdict_steps <> step_count
  AND pg_try_advisory_xact_lock(%s, hashtext(id::text))
ORDER BY last_activity_at LIMIT %s
"""
# Under the runs' locks: their step counts now, and every step, in order.
COUNTS = """
SELECT project_id, id, step_count FROM agent_runs r
JOIN unnest(%(projects)s::uuid[], %(ids)s::uuid[]) AS k (project_id, id) USING (project_id, id)
"""
STEPS = """
SELECT s.project_id, s.run_id, s.step_index, s.tool_name, s.tool_input::text, s.tool_output::text
FROM unnest(%(projects)s::uuid[], %(ids)s::uuid[]) AS k (project_id, run_id)
CROSS JOIN LATERAL (
    SELECT * FROM agent_steps t WHERE t.project_id = k.project_id AND t.run_id = k.run_id
) s
ORDER BY s.project_id, s.run_id, s.step_index
"""
_SHARE_COLUMNS = ", ".join(statements.VERDICT_COUNTERS)
# A run's share of the verdict counters, read from its row, staged ``sign`` times.
STAGE_VERDICT_SHARES = f"""
INSERT INTO kw_stage_rollups (project_id, agent_name, bucket, {_SHARE_COLUMNS})
SELECT r.project_id, r.agent_name, date_trunc('hour', r.started_at, 'UTC'),
       {statements.VERDICT_SHARES}
FROM agent_runs r
JOIN unnest(%(projects)s::uuid[], %(ids)s::uuid[]) AS k (project_id, id) USING (project_id, id)
"""
SAVE = """
UPDATE agent_runs r SET detected_loop = v.detected, detected_loop_step_index = v.began,
       findings = v.kinds::text[], verdict_steps = v.steps
FROM (
    SELECT * FROM unnest(%(projects)s::uuid[], %(ids)s::uuid[], %(detected)s::boolean[],
                         %(began)s::int[], %(kinds)s::text[], %(steps)s::int[])
        AS v (project_id, id, detected, began, kinds, steps)
) v
WHERE r.project_id = v.project_id AND r.id = v.id
"""


def verdict(found: list[Finding]) -> tuple[bool, int | None, list[str]]:
    """(detected loop, the step it began at, the kinds found) from a run's findings."""
    loops = [finding.began_at_step for finding in found if finding.kind in LOOPS]
    kinds = sorted({finding.kind for finding in found})
    return bool(loops), (min(loops) if loops else None), kinds


def _utf8(text: str | None) -> bytes | None:
    return text.encode("utf-8", "surrogatepass") if text is not None else None


async def judge(
    pool: AsyncConnectionPool,
    limit: int = RUNS_PER_ROUND,
    ready: Callable[[tuple[uuid.UUID, uuid.UUID]], bool] = lambda run: True,
) -> dict[tuple[uuid.UUID, uuid.UUID], float]:
    """Bring the verdicts of up to ``limit`` due runs that are ``ready`` up to date, in
    one transaction; return the seconds the detectors took on each run judged."""
    async with pool.connection() as conn, statements.transaction(conn), conn.cursor() as cur:
        await cur.execute(DUE, (CLAIMS, limit))
        runs = [run for run in await cur.fetchall() if ready(run)]
        if not runs:
            return {}
        keys = {"projects": [p for p, _ in runs], "ids": [r for _, r in runs]}
        await statements.lock_runs(cur, {run_id.int for _, run_id in runs})
        await cur.execute(COUNTS, keys)
        counts = {(project, run): count for project, run, count in await cur.fetchall()}
        await cur.execute(STEPS, keys)
        steps: dict[tuple[uuid.UUID, uuid.UUID], list[StepView]] = {key: [] for key in counts}
        for project, run, index, tool, tool_input, tool_output in await cur.fetchall():
            if (project, run) in steps:
                steps[(project, run)].append(
                    StepView(index, tool, _utf8(tool_input), _utf8(tool_output))
                )
        # In a thread: a long run takes the detectors a while, and the event loop
        # keeps answering ingest meanwhile.
        judged = await asyncio.to_thread(_judge_all, steps)
        columns: dict[str, list[Any]] = {
            "projects": [p for p, _ in judged],
            "ids": [r for _, r in judged],
            "detected": [v[0] for v, _ in judged.values()],
            "began": [v[1] for v, _ in judged.values()],
            # As array literals: unnest would flatten an array of arrays.
            "kinds": ["{" + ",".join(v[2]) + "}" for v, _ in judged.values()],
            # The count read under the lock: the steps just judged.
            "steps": [counts[key] for key in judged],
        }
        shares = {"projects": columns["projects"], "ids": columns["ids"]}
        await cur.execute(STAGE_VERDICT_SHARES, {**shares, "sign": -1})
        await cur.execute(SAVE, columns)
        await cur.execute(STAGE_VERDICT_SHARES, {**shares, "sign": 1})
        await cur.execute(statements.MERGE_ROLLUPS)
    return {key: seconds for key, (_, seconds) in judged.items()}


Verdict = tuple[bool, int | None, list[str]]


def _judge_all(
    steps: dict[tuple[uuid.UUID, uuid.UUID], list[StepView]],
) -> dict[tuple[uuid.UUID, uuid.UUID], tuple[Verdict, float]]:
    judged = {}
    for key, views in steps.items():
        started = time.perf_counter()
        judged[key] = (verdict(findings(views)), time.perf_counter() - started)
    return judged


class VerdictKeeper:
    """Judges due runs in the background of ``serve``: woken by the writer's commits,
    and every EVERY_SECONDS regardless."""

    def __init__(self, pool: AsyncConnectionPool) -> None:
        self._pool = pool
        self._wakeup = asyncio.Event()
        self._task: asyncio.Task | None = None
        self._not_before: dict[tuple[uuid.UUID, uuid.UUID], float] = {}  # see PACING

    def wake(self) -> None:
        """Steps were committed: look for due runs now."""
        self._wakeup.set()

    def start(self) -> None:
        self._task = asyncio.create_task(self._run(), name="keelwave-verdicts")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            try:
                await self._task
            except asyncio.CancelledError:
                pass

    async def round(self) -> int:
        """Judge the runs due now (up to RUNS_PER_ROUND); return how many."""
        now = time.monotonic()
        spent = await judge(
            self._pool, RUNS_PER_ROUND, lambda run: self._not_before.get(run, 0) <= now
        )
        for key, seconds in spent.items():
            self._not_before[key] = now + PACING * seconds
        if len(self._not_before) > 100 * RUNS_PER_ROUND:  # forget what is long past
            self._not_before = {k: t for k, t in self._not_before.items() if t > now}
        return len(spent)

    async def _run(self) -> None:
        while True:
            try:
                await asyncio.wait_for(self._wakeup.wait(), EVERY_SECONDS)
            except TimeoutError:
                pass
            self._wakeup.clear()
            try:
                while await self.round() == RUNS_PER_ROUND:
                    pass  # more are due: keep going
            except (psycopg.Error, PoolTimeout, OSError) as error:
                log.debug("verdicts skipped a round: %s", error)
            except Exception:  # never let a bug stop the verdicts for good
                log.exception("verdicts failed")
