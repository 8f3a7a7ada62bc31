"""The server's verdict on each run, kept current as its steps are committed.

A run is *due* when the number of steps its verdict was computed from
(``verdict_steps``) differs from its ``step_count``: the writer's every commit
of steps makes it so, with no extra work in the writer's transaction. The
:class:`VerdictKeeper` picks due runs soon after the writer commits (the writer
wakes it; rounds are at least ``MIN_GAP_SECONDS`` apart, so a run that gets
several batches in a row is judged once for them) and every half second anyway
(the due runs of another server, or of before a restart). A round:

1. reads the due runs' step counts and tool calls (store/run_calls.py: the
   narrow columns of every call in one statement, one snapshot, then only the
   payloads the detectors need), without locks: ingest never waits for a keeper
   that is reading;
2. runs the detectors (keelwave.server.findings) in a thread, so the event loop
   keeps answering ingest;
3. in a short transaction under the runs' locks (statements.py's rule 1),
   writes each verdict (``detected_loop``, ``detected_loop_step_index``,
   ``findings``, ``verdict_steps``) if the run still has the steps it was judged
   on, and moves it between the rollups' verdict counters (its old share out,
   its new share in, in one statement). A run that got steps meanwhile stays
   due and is judged again next round. The locks are tried, never waited for:
   a run a writer holds right now stays due for the next round, because a round
   that waited for one run while holding others would queue every writer of
   those behind it.

Only the first worker of a ``serve`` judges (cli/workers.py): one keeper per
server, never several doing the same work. Servers sharing a database may judge
a run twice; the write makes that harmless.

A run is judged whole each time, so when matters. A run that has ended, or that
has been quiet for QUIET_SECONDS, is judged at the next round; one still
receiving steps is judged once it has waited MAX_WAIT_SECONDS: an agent that
sends a burst of batches is judged once for the burst, and a running run shows
its loop within about two seconds of the step that made it, however busy. A run
that took ``t`` seconds to judge is not judged again for ``PACING × t`` seconds,
so a very long run sent in many small batches cannot keep a server busy. (The
detectors remember the keys of payloads they have seen: findings/normalise.py.)

A round takes the runs active in the last RECENT_SECONDS first, oldest first, and
fills up with the oldest of the others: a recount of a bulk-loaded project can leave
millions of old runs due, which take the keeper many minutes, and a run looping now
is judged in the next round all the same.
"""

from __future__ import annotations

import asyncio
import logging
import os
import time
from collections.abc import Callable
from typing import Any

import psycopg
from psycopg_pool import AsyncConnectionPool, PoolTimeout

from keelwave.server.findings import Finding, StepView, findings
from keelwave.server.store import run_calls, statements
from keelwave.server.store.periodic import stopped, woken

log = logging.getLogger("keelwave.verdicts")

EVERY_SECONDS = 0.5  # how often due runs are looked for without a wake-up
MIN_GAP_SECONDS = 0.2  # rounds are at least this far apart
QUIET_SECONDS = 0.5  # a run still going is judged once quiet this long…
MAX_WAIT_SECONDS = 2.0  # …or once it has waited this long (an agent that never pauses)
RUNS_PER_ROUND = 200
PACING = 10  # a run is not judged again before 10× the time judging it took
LOOPS = ("exact_loop", "cycle")  # the findings that make a detected loop

Key = run_calls.Key
Verdict = tuple[bool, int | None, list[str]]

# Due runs, and whether each has settled: ended, or quiet for a moment (an agent
# sending a burst of batches is judged once for the burst). Runs active in the last
# RECENT_SECONDS come first (DUE_NOW), then the oldest of the others (DUE_BEFORE): a
# bulk load or a recount can leave millions of old runs due at once, and agents
# running now must not wait until those are judged. Both read the partial index on
# last_activity_at that holds only the due runs.
RECENT_SECONDS = 60
_DUE = """
SELECT project_id, id,
       ended_at IS NOT NULL OR last_activity_at < now() - make_interval(secs => %s) AS settled
FROM agent_runs WHERE verdict_steps <> step_count
  AND last_activity_at {} now() - make_interval(secs => %s)
ORDER BY last_activity_at LIMIT %s
"""
DUE_NOW = _DUE.format(">=")
DUE_BEFORE = _DUE.format("<")
# (kinds are cast here, not in the UPDATE: Citus refuses a STABLE function, the cast
# to text[], applied to a column in an UPDATE it sends to the shards.)
_INPUT = """
    SELECT project_id, id, detected, began, kinds::text[] AS kinds, steps
    FROM unnest(%(projects)b::uuid[], %(ids)b::uuid[], %(detected)b::boolean[],
                %(began)b::int[], %(kinds)b::text[], %(steps)b::int[])
        AS v (project_id, id, detected, began, kinds, steps)"""
_SHARE_COLUMNS = ", ".join(statements.VERDICT_COUNTERS)
# Save the verdicts of runs that still have the steps they were judged on, and stage
# what that changes in the verdict counters (the old row's share out, the new one's
# in; both CTEs read the rows as they were before the statement, RETURNING after).
SAVE = f"""
WITH v AS ({_INPUT}
), old AS (
    SELECT r.* FROM agent_runs r JOIN v ON r.project_id = v.project_id AND r.id = v.id
    WHERE r.step_count = v.steps
), new AS (
    UPDATE agent_runs r SET detected_loop = v.detected, detected_loop_step_index = v.began,
           findings = v.kinds, verdict_steps = v.steps
    FROM v WHERE r.project_id = v.project_id AND r.id = v.id AND r.step_count = v.steps
    RETURNING r.*
), shares AS (
    SELECT r.*, -1 AS sign FROM old r UNION ALL SELECT r.*, 1 FROM new r
)
INSERT INTO kw_stage_rollups (project_id, agent_name, bucket, {_SHARE_COLUMNS})
SELECT r.project_id, r.agent_name, date_trunc('hour', r.started_at, 'UTC'),
       {statements.VERDICT_SHARES.replace("%(sign)s", "r.sign")}
FROM shares r
"""


def verdict(found: list[Finding]) -> Verdict:
    """(detected loop, the step it began at, the kinds found) from a run's findings."""
    loops = [finding.began_at_step for finding in found if finding.kind in LOOPS]
    kinds = sorted({finding.kind for finding in found})
    return bool(loops), (min(loops) if loops else None), kinds


async def judge(
    pool: AsyncConnectionPool,
    limit: int = RUNS_PER_ROUND,
    ready: Callable[[Key, bool], bool] = lambda run, settled: True,
) -> dict[Key, float]:
    """Bring the verdicts of up to ``limit`` due runs that are ``ready`` (given the run
    and whether it has settled) up to date; return the seconds the detectors took on
    each run judged."""
    async with pool.connection() as conn:
        due: dict[Key, None] = {}  # (ordered; a run crossing the line between the two
        for sql in (DUE_NOW, DUE_BEFORE):  # reads may be in both)
            params = (QUIET_SECONDS, RECENT_SECONDS, limit)
            for project, run, settled in await (await conn.execute(sql, params)).fetchall():
                if len(due) < limit and ready((project, run), settled):
                    due[(project, run)] = None
            if len(due) >= limit:
                break
        if not due:
            return {}

        async def fetch(sql: str, params: dict) -> list[tuple]:
            return await (await conn.execute(sql, params)).fetchall()

        # (the Python in a thread: a round reads up to tens of thousands of calls, and
        # the event loop keeps answering ingest meanwhile)
        read = await run_calls.read_calls(fetch, list(due), offload=asyncio.to_thread)
    counts = read.counts  # (a run without tool calls has none: it is judged on [])
    judged = await asyncio.to_thread(_judge_all, {key: read.calls.get(key, []) for key in counts})
    if not judged:
        return {}
    async with pool.connection() as conn, statements.transaction(conn), conn.cursor() as cur:
        # Runs a writer holds now are left due, for the next round: waiting for them
        # while holding the others would queue every writer behind this round.
        locked = await statements.try_lock_runs(cur, [run_id.int for _, run_id in judged])
        judged = {key: value for key, value in judged.items() if key[1].int in locked}
        if not judged:
            return {}
        await cur.execute(SAVE, _columns(judged, counts))
        await cur.execute(statements.MERGE_ROLLUPS)
    return {key: seconds for key, (_, seconds) in judged.items()}


def _columns(judged: dict[Key, tuple[Verdict, float]], counts: dict[Key, int]) -> dict[str, Any]:
    return {
        "projects": [p for p, _ in judged],
        "ids": [r for _, r in judged],
        "detected": [v[0] for v, _ in judged.values()],
        "began": [v[1] for v, _ in judged.values()],
        # As array literals: unnest would flatten an array of arrays.
        "kinds": ["{" + ",".join(v[2]) + "}" for v, _ in judged.values()],
        "steps": [counts[key] for key in judged],  # what the verdict was computed from
    }


def _judge_all(steps: dict[Key, list[StepView]]) -> dict[Key, tuple[Verdict, float]]:
    judged = {}
    for key, views in steps.items():  # (findings() puts the calls in step order)
        started = time.perf_counter()
        judged[key] = (verdict(findings(views)), time.perf_counter() - started)
    return judged


class VerdictKeeper:
    """Judges due runs in the background of ``serve``: soon after the writer's commits,
    and every EVERY_SECONDS regardless."""

    def __init__(self, pool: AsyncConnectionPool) -> None:
        self._pool = pool
        self._wakeup = asyncio.Event()
        self._task: asyncio.Task | None = None
        self._not_before: dict[Key, float] = {}  # see PACING
        self._due_since: dict[Key, float] = {}  # when a run still going was first seen due

    def wake(self) -> None:
        """Steps were committed: look for due runs soon."""
        self._wakeup.set()

    def start(self) -> None:
        log.info("this process (pid %d) judges the runs' verdicts", os.getpid())
        self._task = asyncio.create_task(self._run(), name="keelwave-verdicts")

    async def stop(self) -> None:
        await stopped(self._task)

    async def round(self) -> int:
        """Judge the runs due now (up to RUNS_PER_ROUND); return how many."""
        now = time.monotonic()

        def ready(run: Key, settled: bool) -> bool:
            if self._not_before.get(run, 0) > now:
                return False
            waited = now - self._due_since.setdefault(run, now)
            return settled or waited >= MAX_WAIT_SECONDS

        spent = await judge(self._pool, RUNS_PER_ROUND, ready)
        for key, seconds in spent.items():
            self._not_before[key] = now + PACING * seconds
            self._due_since.pop(key, None)
        if len(self._due_since) > 50 * RUNS_PER_ROUND:
            self._due_since.clear()  # runs judged elsewhere; at worst some wait longer
        if len(self._not_before) > 50 * RUNS_PER_ROUND:  # forget what is long past
            self._not_before = {k: t for k, t in self._not_before.items() if t > now}
        return len(spent)

    async def _run(self) -> None:
        while True:
            await woken(self._wakeup, EVERY_SECONDS)
            self._wakeup.clear()
            started = time.monotonic()
            try:
                while await self.round() == RUNS_PER_ROUND:
                    pass  # more are due: keep going
            except (psycopg.Error, PoolTimeout, OSError) as error:
                log.debug("verdicts skipped a round: %s", error)
            except Exception:  # never let a bug stop the verdicts for good
                log.exception("verdicts failed")
            await asyncio.sleep(max(0.0, MIN_GAP_SECONDS - (time.monotonic() - started)))
