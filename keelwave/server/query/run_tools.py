"""The runs list's ``tool``: the runs with a step of that tool, found by index.

agent_steps_tool_idx (migration 0025) holds the tool calls by (project, tool, run).
A tool few runs called, or none (a typo), is found from its entries: up to LISTED
distinct runs are read off the index and their ids filter the list, a page sorted
out of a few thousand runs at most. Checking runs one by one as the list is read
newest first would look at every run of the project before it knew that nothing
matched (166 s on 2.5 million runs). A tool called by more runs than that is
checked run by run after all, a probe of the same index each: with that many runs
calling it, a page of them is never far.
"""

from __future__ import annotations

import uuid
from typing import Any

from psycopg import AsyncConnection

LISTED = 2_000
_RUNS_CALLING = """
SELECT DISTINCT run_id FROM agent_steps
WHERE project_id = %(project)s AND tool_name = %(tool)s
LIMIT %(limit)s
"""
# (run_containment.py tells this condition by it)
ANY_STEP = (
    "EXISTS (SELECT 1 FROM agent_steps s WHERE s.project_id = agent_runs.project_id "
    "AND s.tool_name = %(tool)s AND s.run_id = agent_runs.id)"
)


async def runs_calling(conn: AsyncConnection, project_id: str, tool: str) -> list[uuid.UUID] | None:
    """The ids of the project's runs with a step of ``tool``; None if more than LISTED."""
    found = await conn.execute(
        _RUNS_CALLING, {"project": project_id, "tool": tool, "limit": LISTED + 1}
    )
    runs = [run_id for (run_id,) in await found.fetchall()]
    return runs if len(runs) <= LISTED else None


def condition(tool: str, runs: list[uuid.UUID] | None, args: dict[str, Any]) -> str:
    """The WHERE condition for ``tool``, given :func:`runs_calling`'s answer ``runs``."""
    args["tool"] = tool
    if runs is None:
        return ANY_STEP
    args["tool_runs"] = runs
    return "id = ANY(%(tool_runs)s)"
