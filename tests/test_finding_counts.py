"""GET /agent/findings: per kind of finding, the window's runs the server found it on, in
all and per agent; the same counts as summary and health give, exact at the window's
edges, for one agent if asked; bad windows are a 422."""

from __future__ import annotations

from datetime import timedelta

from conftest import Api, make_project
from lifecycle_data import NOW, Run, judged, send

from keelwave.server.findings import KINDS


def runs() -> list[Run]:
    """Looping and plain runs of two agents over two days."""
    return [
        Run(
            started=NOW - timedelta(hours=3 * n, minutes=7 * n),
            agent=("alpha", "beta")[n % 2],
            steps=6,
            looping=n % 3 == 0,
        )
        for n in range(16)
    ]


async def test_findings_per_kind_and_agent_as_summary_and_health_count_them(
    api: Api, db_url: str
) -> None:
    project = make_project(db_url)
    await send(api, project, runs())
    await judged(db_url, project.id)
    path = f"/v1/projects/{project.id}/agent"
    # Edges inside hours, so the edge runs are read from agent_runs.
    window = {
        "since": (NOW - timedelta(hours=40, minutes=13)).isoformat(),
        "until": (NOW + timedelta(minutes=5)).isoformat(),
    }
    status, body, _ = await api.get(f"{path}/findings", params=window, headers=project.auth("read"))
    assert status == 200, body
    _, summary, _ = await api.get(f"{path}/summary", params=window, headers=project.auth("read"))
    _, health, _ = await api.get(f"{path}/health", params=window, headers=project.auth("read"))
    current = summary["data"]["current"]
    assert [row["kind"] for row in body["data"]] == list(KINDS)
    assert body["runs"] == current["runs"] > 0
    assert body["detected_loop_runs"] == current["detected_loop_runs"] > 0
    assert {row["kind"]: row["runs"] for row in body["data"]} == current["findings"]
    per_agent = {
        (agent["agent_name"], kind): count
        for agent in health["data"]
        for kind, count in agent["findings"].items()
        if count
    }
    assert {
        (agent["agent_name"], row["kind"]): agent["runs"]
        for row in body["data"]
        for agent in row["agents"]
    } == per_agent
    exact = next(row for row in body["data"] if row["kind"] == "exact_loop")
    assert exact["runs"] > 0 and exact["rate"] == round(exact["runs"] / body["runs"], 6)

    status, one, _ = await api.get(
        f"{path}/findings", params={**window, "agent_name": "beta"}, headers=project.auth("read")
    )
    assert status == 200
    assert {agent["agent_name"] for row in one["data"] for agent in row["agents"]} <= {"beta"}
    assert one["runs"] == next(a["runs"] for a in health["data"] if a["agent_name"] == "beta")

    status, body, _ = await api.get(
        f"{path}/findings", params={"window": "soon"}, headers=project.auth("read")
    )
    assert status == 422 and "window" in str(body)
    status, _, _ = await api.get(f"{path}/findings", headers=project.auth("ingest"))
    assert status in (401, 403)
