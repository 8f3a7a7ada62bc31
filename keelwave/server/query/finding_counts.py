"""``GET /agent/findings``: how many of a window's runs the server found each kind of
finding on, in all and per agent.

What the dashboard's and the CLI's findings views need first: which ways of
going wrong are common, and which agents they come from, over a day or a
month. Summary and health carry the same counts inside their answers, beside
everything else; this answers only them, from the hourly run rollups (their
per-kind verdict counters, verdicts.py) for whole hours and the runs of the
edge hours, like every aggregate (aggregates.window_counters), so the counts
are exact and a month costs a read of ~720 rollup rows per agent.
"""

from __future__ import annotations

from typing import Annotated, Any

from aiohttp import web
from msgspec import Meta, Struct

from keelwave.server.findings import KINDS as FINDING_KINDS
from keelwave.server.http import appkeys, params
from keelwave.server.http.operations import ApiRoutes, Param
from keelwave.server.http.responses import respond
from keelwave.server.query.aggregates import counters, rate, window_counters
from keelwave.server.query.schemas import Count, FindingKind, Rate, Time

routes = ApiRoutes("query")


class AgentFindingCount(Struct):
    """One agent's runs with this kind of finding."""

    agent_name: str
    runs: Annotated[int, Meta(ge=1, description="The agent's runs with this finding")]
    rate: Annotated[float, Meta(description="Of the agent's runs in the window")]


class FindingCount(Struct):
    """Runs of the window the server found this kind of finding on."""

    kind: FindingKind
    runs: Count
    rate: Rate
    agents: Annotated[
        list[AgentFindingCount],
        Meta(description="The agents these runs came from, the most runs first"),
    ]


class FindingCountsResponse(Struct):
    data: Annotated[list[FindingCount], Meta(description="Every kind of finding, in order")]
    runs: Annotated[int, Meta(ge=0, description="Runs that started in the window")]
    detected_loop_runs: Annotated[
        int, Meta(ge=0, description="Runs the server found looping (an exact loop or a cycle)")
    ]
    since: Time
    until: Time


@routes.get(
    "/v1/projects/{project_id}/agent/findings",
    summary="Findings per kind",
    response=FindingCountsResponse,
    query=(*params.WINDOW_QUERY, Param("agent_name", str, "Only this agent.")),
)
async def findings(request: web.Request) -> web.Response:
    """For each kind of finding, the window's runs the server found it on, in all and per
    agent; runs count in the window their start falls in."""
    project_id = await params.read_project(request)
    window = params.window(request)
    agent_name = params.text(request, "agent_name")
    async with request.app[appkeys.POOL].connection() as conn:
        rows = await window_counters(
            conn, project_id, window, group="agent_name", agent_name=agent_name
        )
    per_agent = {name: counters(tuple(values)) for name, *values in rows}
    runs = sum(totals["runs"] for totals in per_agent.values())
    data: list[dict[str, Any]] = []
    for kind in FINDING_KINDS:
        agents = sorted(
            (
                {
                    "agent_name": name,
                    "runs": totals[f"{kind}_runs"],
                    "rate": rate(totals[f"{kind}_runs"], totals["runs"]),
                }
                for name, totals in per_agent.items()
                if totals[f"{kind}_runs"] > 0
            ),
            key=lambda agent: (-agent["runs"], agent["agent_name"]),
        )
        found = sum(agent["runs"] for agent in agents)
        data.append({"kind": kind, "runs": found, "rate": rate(found, runs), "agents": agents})
    detected = sum(totals["detected_loop_runs"] for totals in per_agent.values())
    body = {"data": data, "runs": runs, "detected_loop_runs": detected, **window.bounds()}
    return respond(FindingCountsResponse, body)
