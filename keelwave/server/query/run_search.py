"""The runs list's ``q``: a run id prefix, or part of an agent's name, found by index.

Matched as text (``id::text LIKE 'q%' OR agent_name ILIKE '%q%'``), neither side has
an index, so PostgreSQL read the project's runs newest first until it had a page: the
whole project when nothing matched (28 s on 2.5 million runs). Here each side is
something an index serves:

- a run id prefix is a range of ids (UUIDs sort as their hex digits do), read off
  ``agent_runs_id_idx``;
- the agent names that contain ``q`` are looked for among the project's agent names,
  which ``agent_runs_agent_idx`` gives one at a time (a probe per agent: a project has
  tens or hundreds, not millions), and their runs are then read by that index too.
"""

from __future__ import annotations

import re
import uuid
from typing import Any

# The project's agent names, one index probe each (a loose index scan), those holding q.
AGENT_NAMES = """
WITH RECURSIVE names (agent_name) AS (
    SELECT min(agent_name) FROM agent_runs WHERE project_id = %(project)s
    UNION ALL
    SELECT (SELECT min(r.agent_name) FROM agent_runs r
            WHERE r.project_id = %(project)s AND r.agent_name > n.agent_name)
    FROM names n WHERE n.agent_name IS NOT NULL
)
SELECT agent_name FROM names WHERE agent_name ILIKE %(q_name)s
"""
_HEX = re.compile(r"[0-9a-f-]{1,36}")
_DASHES = (8, 13, 18, 23)  # where a UUID's text has them
_ANY_AGENT = "agent_name = ANY(%(q_agents)s)"


def like_pattern(q: str) -> str:
    """``%q%`` for ILIKE, its own wildcards escaped."""
    escaped = q.lower().replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
    return f"%{escaped}%"


def id_range(q: str) -> tuple[uuid.UUID, uuid.UUID] | None:
    """The ids whose text starts with ``q``, as (first, last); None if no id's can."""
    text = q.lower()
    if not _HEX.fullmatch(text):
        return None
    if any((position in _DASHES) != (char == "-") for position, char in enumerate(text)):
        return None  # a dash where a UUID has a digit, or the reverse
    digits = text.replace("-", "")
    return (
        uuid.UUID(digits.ljust(32, "0")),
        uuid.UUID(digits.ljust(32, "f")),
    )


def condition(q: str, agents: list[str], args: dict[str, Any], agent: str | None = None) -> str:
    """The WHERE condition for ``q``, given the agent names that contain it (from
    AGENT_NAMES); its values go into ``args``. ``agent``: the list's ``agent_name``, if
    given: of the names, only that one can pass both (else PostgreSQL read every run of
    that agent to find none: 0.3 s for ``agent_name=agent-support&q=agent-1`` on 2.5
    million runs)."""
    if agent is not None:
        agents = [name for name in agents if name == agent]
    either = []
    if (ids := id_range(q)) is not None:
        either.append("id BETWEEN %(q_first)s AND %(q_last)s")
        args.update(q_first=ids[0], q_last=ids[1])
    if len(agents) == 1:
        # (an equality, not ANY of one: PostgreSQL 15 reads = ANY on an index's second
        # column as a filter when the list is sorted by that index, so
        # ``q=support&sort=agent_name&order=asc`` beside two rare filters read all 2.5
        # million runs of the project through agent_runs_agent_idx: 12.3 s)
        either.append("agent_name = %(q_agent)s")
        args["q_agent"] = agents[0]
    elif agents:
        either.append(_ANY_AGENT)
        args["q_agents"] = agents
    return f"({' OR '.join(either)})" if either else "false"


# The condition for q naming several agents and no run id (run_list reads it agent by
# agent when the list is sorted by agent name).
AGENTS = f"({_ANY_AGENT})"
