"""Projects whose runs no rollup counts: rows loaded without the API, said in the log.

The aggregates (summary, health, timeseries, terminations, findings, tools) read
rollups that ingest keeps as rows arrive (statements.py). Rows written into the
tables another way, a bulk ``COPY`` or a restore of some tables, are in none of
them until ``keelwave projects recount`` derives them (store/recount.py). Nothing
tells that apart cheaply in general, but one case is unmistakable and is the
common one, a data set loaded by hand into a fresh database: a project with runs
and not a single run rollup. Its run list is full while its summary says zero.

So a server looks for such projects soon after it starts and every few minutes
after, and says in its log, once a project, what to run. Two index probes a
project, whatever the size of its data.
"""

from __future__ import annotations

import logging

from psycopg_pool import AsyncConnectionPool

from keelwave.server.store.periodic import Periodic

log = logging.getLogger("keelwave.uncounted")

CHECK_EVERY_SECONDS = 300.0
FIRST_CHECK_AFTER_SECONDS = 5.0

# One project at a time, by its id: each probe is a single-shard query on Citus.
PROJECTS = "SELECT id, name FROM projects ORDER BY name"
UNCOUNTED = """
SELECT EXISTS (SELECT 1 FROM agent_runs WHERE project_id = %(project)s)
   AND NOT EXISTS (SELECT 1 FROM agent_run_rollups WHERE project_id = %(project)s)
"""


async def uncounted_projects(pool: AsyncConnectionPool) -> list[str]:
    """The names of the projects that have runs and no run rollup at all."""
    async with pool.connection() as conn:
        projects = await (await conn.execute(PROJECTS)).fetchall()
        found = []
        for project_id, name in projects:
            cursor = await conn.execute(UNCOUNTED, {"project": project_id})
            if (await cursor.fetchone())[0]:
                found.append(name)
        return found


class UncountedWatch(Periodic):
    """Logs each project :func:`uncounted_projects` finds, once, with the command that
    counts it."""

    def __init__(self, pool: AsyncConnectionPool, every: float = CHECK_EVERY_SECONDS) -> None:
        super().__init__("uncounted projects", self.run_once, every, log, FIRST_CHECK_AFTER_SECONDS)
        self._pool = pool
        self._said: set[str] = set()

    async def run_once(self) -> list[str]:
        found = await uncounted_projects(self._pool)
        for name in found:
            if name not in self._said:
                log.warning(
                    "project %r has runs that no rollup counts (loaded into the tables "
                    "without the API?): its summary, health, timeseries, terminations, "
                    "findings and tools say nothing of them until "
                    "`keelwave projects recount %s` counts them",
                    name,
                    name,
                )
        self._said = set(found)  # (counted since: said again if it happens again)
        return found
