"""GET /runs/{id}/findings on a real server: what the detectors find in stored steps,
with the exact loops equal to /loops."""

from __future__ import annotations

import uuid

from conftest import Api, Project


async def send_steps(api: Api, project: Project, steps: list[tuple[str, object, object]]) -> str:
    run_id = str(uuid.uuid4())
    status, _, _ = await api.post(
        "/v1/ingest/agent/runs", headers=project.auth(), json={"id": run_id, "agent_name": "a"}
    )
    assert status == 201
    body = [
        {"run_id": run_id, "step_index": index, "tool_name": tool, "tool_input": given,
         "tool_output": output}
        for index, (tool, given, output) in enumerate(steps, start=1)
    ]  # fmt: skip
    status, answer, _ = await api.post("/v1/ingest/agent/steps", headers=project.auth(), json=body)
    assert status == 200, answer
    return run_id


async def get(api: Api, project: Project, run_id: str, what: str) -> tuple[int, dict]:
    status, body, _ = await api.get(
        f"/v1/projects/{project.id}/agent/runs/{run_id}/{what}", headers=project.auth("read")
    )
    return status, body


async def test_a_cycle_is_found_and_exact_loops_equal_loops(api: Api, project: Project) -> None:
    search = ("search", {"q": "keelwave docs"}, {"hits": 3})
    fetch = ("open", {"url": "https://keelwave.dev"}, {"status": 200})
    run_id = await send_steps(api, project, [search, fetch] * 3)
    status, body = await get(api, project, run_id, "findings")
    assert status == 200
    kinds = {finding["kind"]: finding for finding in body["data"]}
    assert kinds["cycle"]["began_at_step"] == 1
    assert kinds["cycle"]["step_indices"] == [1, 2, 3, 4, 5, 6]
    assert kinds["cycle"]["hits"] == 3
    _, loops = await get(api, project, run_id, "loops")
    exact = [f for f in body["data"] if f["kind"] == "exact_loop"]
    assert sorted((f["step_indices"], f["hits"]) for f in exact) == sorted(
        (group["step_indices"], group["hits"]) for group in loops["data"]
    )
    assert [f["began_at_step"] for f in body["data"]] == sorted(
        f["began_at_step"] for f in body["data"]
    )


async def test_near_duplicates_and_no_progress(api: Api, project: Project) -> None:
    steps = [
        ("search", {"q": "Weather  in Paris", "request_id": str(uuid.uuid4())}, {"r": i})
        for i in range(3)
    ] + [
        ("status", {"job": "build", "attempt": i}, {"state": "pending", "eta": None})
        for i in range(1, 5)
    ]
    run_id = await send_steps(api, project, steps)
    _, body = await get(api, project, run_id, "findings")
    kinds = {finding["kind"]: finding for finding in body["data"]}
    assert kinds["near_duplicate"]["step_indices"] == [1, 2, 3]
    assert kinds["no_progress"]["began_at_step"] == 4
    assert "exact_loop" not in kinds


async def test_legitimate_repetition_gives_nothing(api: Api, project: Project) -> None:
    steps = [("list_issues", {"repo": "keelwave", "page": page}, {"items": [page]})
             for page in range(1, 8)]  # fmt: skip
    steps += [("read_file", {"path": f"src/{name}.py"}, {"lines": len(name)})
              for name in ("app", "writer", "lane", "routes", "schemas")]  # fmt: skip
    run_id = await send_steps(api, project, steps)
    assert await get(api, project, run_id, "findings") == (200, {"data": []})


async def test_unknown_or_foreign_runs_are_404(api: Api, project: Project) -> None:
    status, body = await get(api, project, str(uuid.uuid4()), "findings")
    assert (status, body["error"]["code"]) == (404, "not_found")
    run_id = await send_steps(api, project, [("t", {}, None)] * 2)
    other = Project(str(uuid.uuid4()), "other", project.keys)
    status, _, _ = await api.get(
        f"/v1/projects/{other.id}/agent/runs/{run_id}/findings", headers=project.auth("read")
    )
    assert status == 404
