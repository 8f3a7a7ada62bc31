"""Alert rules against a real server and database: what fires, when, once, and what
resolves; the API's checks. (Delivery to receivers: tests/test_alert_delivery.py.)"""

from __future__ import annotations

import asyncio
import uuid

import aiohttp
import pytest
from conftest import Api, Project, make_project, make_settings, query

from keelwave.server.app import create_app


@pytest.fixture
async def api(db_url: str, aiohttp_server):
    """A server whose runs stall after 1 s, that may send alerts to private addresses
    (nothing listens: these tests read the outbox, not a receiver)."""
    settings = make_settings(
        stall_after_seconds=1, timeout_after_seconds=3600, alerts_allow_private_destinations=True
    )
    server = await aiohttp_server(create_app(settings, db_url))
    async with aiohttp.ClientSession() as session:
        yield Api(str(server.make_url("")).rstrip("/"), session)


def path(project: Project, rest: str) -> str:
    return f"/v1/projects/{project.name}/alerts{rest}"


async def destination(api: Api, project: Project, **extra) -> str:
    body = {"name": "hooks", "kind": "webhook", "url": "http://127.0.0.1:9/hook", **extra}
    status, answer, _ = await api.post(
        path(project, "/destinations"), json=body, headers=project.auth()
    )
    assert status == 201, answer
    return answer["data"]["id"]


async def rule(api: Api, project: Project, condition: dict, **extra) -> dict:
    body = {"name": f"rule {condition['type']}", "destination_id": await destination(api, project),
            "condition": condition, **extra}  # fmt: skip
    status, answer, _ = await api.post(path(project, "/rules"), json=body, headers=project.auth())
    assert status == 201, answer
    return answer["data"]


async def start(api: Api, project: Project, agent: str = "researcher") -> str:
    status, body, _ = await api.post(
        "/v1/ingest/agent/runs", json={"agent_name": agent}, headers=project.auth()
    )
    assert status == 201
    return body["data"]["id"]


async def steps(api: Api, project: Project, run_id: str, count: int, same: bool = False) -> None:
    body = [
        {"run_id": run_id, "step_index": n, "tool_name": "search",
         "tool_input": {"q": "same" if same else n}}
        for n in range(1, count + 1)
    ]  # fmt: skip
    status, _, _ = await api.post("/v1/ingest/agent/steps", json=body, headers=project.auth())
    assert status == 200


async def finish(api: Api, project: Project, run_id: str, reason: str = "clean") -> None:
    status, _, _ = await api.post(
        f"/v1/ingest/agent/runs/{run_id}/finish",
        json={"termination_reason": reason},
        headers=project.auth(),
    )
    assert status == 200


async def events(api: Api, project: Project, want: int, seconds: float = 15) -> list[dict]:
    """The project's events once there are ``want`` of them (newest first)."""
    for _ in range(int(seconds / 0.1)):
        status, body, _ = await api.get(path(project, "/events"), headers=project.auth())
        assert status == 200, body
        if len(body["data"]) >= want:
            return body["data"]
        await asyncio.sleep(0.1)
    raise AssertionError(f"expected {want} events, got {body['data']}")


async def test_a_run_over_its_step_budget_fires_once_while_it_runs(api, project) -> None:
    made = await rule(api, project, {"type": "run", "metric": "steps", "above": 3})
    run_id = await start(api, project)
    await steps(api, project, run_id, 5)
    [event] = await events(api, project, 1)
    assert event["rule_id"] == made["id"] and event["run_id"] == run_id
    assert event["state"] == "firing" and event["metric"] == "steps"
    assert event["value"] == 5 and event["threshold"] == 3
    assert event["agent_name"] == "researcher"
    assert event["delivery"]["state"] in ("pending", "failed")
    await steps(api, project, run_id, 8)  # more steps: still the one event for this run
    await finish(api, project, run_id)
    await asyncio.sleep(2.5)
    assert len(await events(api, project, 1)) == 1


async def test_findings_terminations_and_stalls_fire(api, project, db_url) -> None:
    await rule(api, project, {"type": "finding", "kinds": ["exact_loop", "cycle"]})
    await rule(api, project, {"type": "termination", "reasons": ["error"]})
    await rule(api, project, {"type": "stalled"})
    looping = await start(api, project)
    await steps(api, project, looping, 3, same=True)
    await finish(api, project, looping)
    failing = await start(api, project, "coder")
    await finish(api, project, failing, "error")
    silent = await start(api, project, "sleepy")  # nothing more: stalled after 1 s
    found = await events(api, project, 3)
    by_metric = {event["metric"]: event for event in found}
    assert by_metric["finding"]["run_id"] == looping
    assert by_metric["finding"]["value"] == ["exact_loop"]
    assert by_metric["termination_reason"]["run_id"] == failing
    assert by_metric["termination_reason"]["value"] == "error"
    assert by_metric["silent_ms"]["run_id"] == silent
    [(stored,)] = query(
        db_url, "SELECT count(*) FROM alert_events WHERE project_id = %s", (uuid.UUID(project.id),)
    )
    assert stored == 3


async def test_a_window_rule_fires_when_it_crosses_and_once_more_when_it_resolves(
    api, project
) -> None:
    await rule(
        api, project, {"type": "window", "metric": "error_rate", "window": "15m", "above": 0.5}
    )
    for _ in range(2):
        await finish(api, project, await start(api, project), "error")
    [firing] = await events(api, project, 1)
    assert firing["state"] == "firing" and firing["run_id"] is None
    assert firing["value"] == 1.0 and firing["threshold"] == 0.5
    for _ in range(4):
        await finish(api, project, await start(api, project))
    resolved, _ = await events(api, project, 2)
    assert resolved["state"] == "resolved" and resolved["value"] == pytest.approx(2 / 6, abs=1e-6)


async def test_an_agent_that_stopped_running_fires_a_runs_below_rule(api, project) -> None:
    await rule(
        api,
        project,
        {"type": "window", "metric": "runs", "window": "1h", "below": 1},
        scope={"agent_name": "nightly-report"},
    )
    [event] = await events(api, project, 1)
    assert (
        event["state"] == "firing"
        and event["value"] == 0
        and event["agent_name"] == ("nightly-report")
    )


async def test_cooldown_limits_repeats_per_agent_and_old_runs_never_fire(api, project) -> None:
    before = await start(api, project)
    await steps(api, project, before, 5)  # before the rule: never fires
    await rule(api, project, {"type": "run", "metric": "steps", "above": 1}, cooldown_seconds=3600)
    first = await start(api, project)
    await steps(api, project, first, 3)
    [event] = await events(api, project, 1)
    assert event["run_id"] == first
    second = await start(api, project)  # the same agent, inside the cooldown
    await steps(api, project, second, 3)
    other = await start(api, project, "another-agent")
    await steps(api, project, other, 3)
    found = await events(api, project, 2)
    await asyncio.sleep(2.5)
    assert {event["run_id"] for event in await events(api, project, 2)} == {first, other}
    assert len(found) == 2


async def test_rules_can_be_paused_changed_and_deleted(api, project) -> None:
    made = await rule(api, project, {"type": "run", "metric": "steps", "above": 2})
    status, body, _ = await api.request(
        "PATCH", path(project, f"/rules/{made['id']}"), json={"enabled": False},
        headers=project.auth(),
    )  # fmt: skip
    assert status == 200 and body["data"]["enabled"] is False
    run_id = await start(api, project)
    await steps(api, project, run_id, 4)
    await asyncio.sleep(2.5)
    status, body, _ = await api.get(path(project, "/events"), headers=project.auth())
    assert body["data"] == []  # paused
    status, body, _ = await api.request(
        "PATCH", path(project, f"/rules/{made['id']}"),
        json={"enabled": True, "condition": {"type": "run", "metric": "steps", "above": 10}},
        headers=project.auth(),
    )  # fmt: skip
    assert status == 200 and body["data"]["condition"]["above"] == 10
    status, body, _ = await api.get(path(project, "/rules"), headers=project.auth())
    assert [r["id"] for r in body["data"]] == [made["id"]]
    status, _, _ = await api.request(
        "DELETE", path(project, f"/rules/{made['id']}"), headers=project.auth()
    )
    assert status == 200
    status, body, _ = await api.get(path(project, "/rules"), headers=project.auth())
    assert body["data"] == []


async def test_what_the_api_refuses(api, project, db_url) -> None:
    read = {"Authorization": f"Bearer {project.keys['read']}"}
    body = {"name": "x", "kind": "webhook", "url": "http://127.0.0.1:9/"}
    status, answer, _ = await api.post(path(project, "/destinations"), json=body, headers=read)
    assert status == 403
    status, answer, _ = await api.get(path(project, "/rules"), headers=read)
    assert status == 200  # a read key may list
    hook = await destination(api, project)

    async def refused(condition: dict, field: str, **extra) -> None:
        status, answer, _ = await api.post(
            path(project, "/rules"),
            json={"name": "r", "destination_id": hook, "condition": condition, **extra},
            headers=project.auth(),
        )
        assert status == 422, answer
        assert field in answer["error"]["message"], answer

    await refused({"type": "window", "metric": "runs", "window": "1h"}, "above or below")
    await refused({"type": "window", "metric": "error_rate", "window": "1h", "below": 1}, "below")
    await refused({"type": "window", "metric": "error_rate", "window": "2h", "above": 1}, "window")
    await refused({"type": "sometimes"}, "type")
    await refused({"type": "finding", "kinds": []}, "kinds")
    await refused({"type": "termination", "reasons": ["bored"]}, "reasons")
    # In a thread: the server runs in this event loop, and on Citus the insert waits for
    # an evaluator's transaction on the reference tables that only this loop can end.
    elsewhere = await asyncio.to_thread(make_project, db_url)
    other_hook = await destination(api, elsewhere)
    await refused({"type": "stalled"}, "destination_id", destination_id=other_hook)
    status, answer, _ = await api.request(
        "DELETE", path(project, f"/rules/{uuid.uuid4()}"), headers=project.auth()
    )
    assert status == 404


async def test_private_destinations_are_refused_unless_allowed(db_url, aiohttp_server) -> None:
    server = await aiohttp_server(create_app(make_settings(), db_url))
    project = make_project(db_url)
    async with aiohttp.ClientSession() as session:
        api = Api(str(server.make_url("")).rstrip("/"), session)
        for url in (
            "http://127.0.0.1:8080/hook",
            "http://169.254.169.254/latest",
            "http://10.1.2.3/",
        ):
            status, answer, _ = await api.post(
                path(project, "/destinations"),
                json={"name": "x", "kind": "webhook", "url": url},
                headers=project.auth(),
            )
            assert status == 422 and answer["error"]["field"] == "url", answer
        status, answer, _ = await api.post(
            path(project, "/destinations"),
            json={"name": "x", "kind": "slack", "url": "https://93.184.216.34/services/T/B/X"},
            headers=project.auth(),
        )
        assert status == 201 and answer["data"]["has_secret"] is False
