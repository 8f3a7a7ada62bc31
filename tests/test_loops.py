"""GET …/runs/{id}/loops: groups of repeated fingerprints, computed from stored steps."""

from __future__ import annotations

import base64
import hashlib

from conftest import Api, Project


async def run_with_steps(api: Api, project: Project, steps: list[dict]) -> str:
    _, body, _ = await api.post(
        "/v1/ingest/agent/runs", json={"agent_name": "a"}, headers=project.auth()
    )
    run_id = body["data"]["id"]
    for index, step in enumerate(steps, start=1):
        step = {"run_id": run_id, "step_index": index, **step}
        status, body, _ = await api.post(
            "/v1/ingest/agent/steps", json=step, headers=project.auth()
        )
        assert status == 200, body
    return run_id


async def loops(api: Api, project: Project, run_id: str) -> list[dict]:
    status, body, _ = await api.get(
        f"/v1/projects/{project.id}/agent/runs/{run_id}/loops", headers=project.auth("read")
    )
    assert status == 200, body
    return body["data"]


async def test_groups_ordered_by_hits_then_first_step(api: Api, project: Project) -> None:
    a = {"tool_name": "search", "tool_input": {"q": "a"}}
    b = {"tool_name": "search", "tool_input": {"q": "b"}}
    c = {"tool_name": "fetch", "tool_input": {"url": "x"}}
    think = {"step_type": "think", "content": "hmm"}
    unique = {"tool_name": "search", "tool_input": {"q": "once"}}
    #        1  2  3      4  5  6  7      8  9  10
    steps = [c, a, think, b, a, c, think, b, a, unique]
    data = await loops(api, project, await run_with_steps(api, project, steps))
    assert [(g["tool_name"], g["hits"], g["step_indices"]) for g in data] == [
        ("search", 3, [2, 5, 9]),
        ("fetch", 2, [1, 6]),
        ("search", 2, [4, 8]),
    ]
    expected = hashlib.sha256(b'search\x00{"q": "a"}').digest()
    assert data[0]["fingerprint"] == base64.b64encode(expected).decode()
    assert len(base64.b64decode(data[0]["fingerprint"])) == 32


async def test_no_repetition_is_an_empty_list(api: Api, project: Project) -> None:
    steps = [{"tool_name": "t", "tool_input": {"i": i}} for i in range(5)]
    steps += [{"step_type": "think", "content": "same"}] * 3  # no tool: never a loop
    assert await loops(api, project, await run_with_steps(api, project, steps)) == []


async def test_same_input_different_tool_is_not_a_loop(api: Api, project: Project) -> None:
    steps = [
        {"tool_name": "read", "tool_input": {"p": 1}},
        {"tool_name": "write", "tool_input": {"p": 1}},
    ]
    assert await loops(api, project, await run_with_steps(api, project, steps)) == []


async def test_run_without_steps_has_no_loops(api: Api, project: Project) -> None:
    assert await loops(api, project, await run_with_steps(api, project, [])) == []
