"""The labelled findings corpus (tests/findings_corpus.py) sent to a real server, through
native ingest and as OTLP: the verdict stored on each run is the detectors' verdict on
the trajectory, byte for byte, whichever way it came."""

from __future__ import annotations

import asyncio
import json
import uuid

import pytest
from conftest import Api, Project, query
from findings_corpus import Trajectory, corpus

from keelwave.server.findings import StepView, findings
from keelwave.server.store.verdicts import verdict

SAMPLE = corpus(19, 240)[::5]  # 48 trajectories, stuck and legitimate alternately


def expected(steps: tuple[StepView, ...] | list[StepView]) -> dict:
    detected, began, kinds = verdict(findings(steps))
    return {"detected_loop": detected, "detected_loop_step_index": began, "findings": kinds}


def native_steps(run_id: str, trajectory: Trajectory) -> bytes:
    """The steps as an SDK would send them, payload bytes exactly as in the corpus."""
    parts = []
    for step in trajectory.steps:
        head = f'{{"run_id": "{run_id}", "step_index": {step.step_index}, '
        if step.tool_name is None:
            thought = json.dumps((step.tool_input or b"").decode())
            parts.append(f'{head}"step_type": "think", "content": {thought}}}'.encode())
            continue
        body = head.encode() + b'"tool_name": ' + json.dumps(step.tool_name).encode()
        body += b', "tool_input": ' + (step.tool_input or b"null")
        if step.tool_output is not None:
            body += b', "tool_output": ' + step.tool_output
        parts.append(body + b"}")
    return b"[" + b", ".join(parts) + b"]"


def otlp_export(trace_id: str, trajectory: Trajectory) -> dict:
    """The trajectory as a framework's trace: an agent span and a tool span per call."""
    agent_id = trace_id[:16]
    base = 1_764_590_000_000_000_000
    spans = [
        {
            "traceId": trace_id, "spanId": agent_id, "name": "invoke_agent corpus",
            "kind": 1, "startTimeUnixNano": str(base), "endTimeUnixNano": str(base + 10**9),
            "attributes": [
                {"key": "gen_ai.operation.name", "value": {"stringValue": "invoke_agent"}},
                {"key": "gen_ai.agent.name", "value": {"stringValue": trajectory.name[:60]}},
            ],
        }
    ]  # fmt: skip
    for step in trajectory.steps:
        if step.tool_name is None:
            continue
        attributes = [
            {"key": "gen_ai.operation.name", "value": {"stringValue": "execute_tool"}},
            {"key": "gen_ai.tool.name", "value": {"stringValue": step.tool_name}},
            {"key": "gen_ai.tool.call.arguments",
             "value": {"stringValue": (step.tool_input or b"{}").decode()}},
        ]  # fmt: skip
        if step.tool_output is not None:
            attributes.append(
                {"key": "gen_ai.tool.call.result",
                 "value": {"stringValue": step.tool_output.decode()}}
            )  # fmt: skip
        start = base + step.step_index * 1000
        spans.append(
            {
                "traceId": trace_id, "spanId": f"{step.step_index:016x}", "parentSpanId": agent_id,
                "name": f"execute_tool {step.tool_name}", "kind": 1,
                "startTimeUnixNano": str(start), "endTimeUnixNano": str(start + 500),
                "attributes": attributes,
            }
        )  # fmt: skip
    return {"resourceSpans": [{"resource": {}, "scopeSpans": [{"scope": {}, "spans": spans}]}]}


def tool_steps_renumbered(trajectory: Trajectory) -> list[StepView]:
    """What an OTLP run's steps are: the tool calls only, numbered 1…n."""
    tools = [step for step in trajectory.steps if step.tool_name is not None]
    return [
        StepView(n, step.tool_name, step.tool_input or b"{}", step.tool_output)
        for n, step in enumerate(tools, start=1)
    ]


async def verdicts_of(db_url: str, project: Project, runs: int) -> dict[uuid.UUID, dict]:
    """Every run's stored verdict, once all ``runs`` are judged."""
    for _ in range(200):
        rows = query(
            db_url,
            "SELECT id, detected_loop, detected_loop_step_index, findings, "
            "verdict_steps = step_count FROM agent_runs WHERE project_id = %s",
            (uuid.UUID(project.id),),
        )
        if len(rows) == runs and all(row[4] for row in rows):
            return {
                row[0]: {
                    "detected_loop": row[1],
                    "detected_loop_step_index": row[2],
                    "findings": row[3],
                }
                for row in rows
            }
        await asyncio.sleep(0.05)
    raise AssertionError("the runs were not all judged")


@pytest.mark.parametrize("transport", ["native", "otlp"])
async def test_the_stored_verdict_is_the_detectors_verdict(
    api: Api, project: Project, db_url: str, transport: str
) -> None:
    want: dict[uuid.UUID, dict] = {}
    for trajectory in SAMPLE:
        if transport == "native":
            status, body, _ = await api.post(
                "/v1/ingest/agent/runs", json={"agent_name": "corpus"}, headers=project.auth()
            )
            run_id = body["data"]["id"]
            status, body, _ = await api.post(
                "/v1/ingest/agent/steps",
                data=native_steps(run_id, trajectory),
                headers={**project.auth(), "Content-Type": "application/json"},
            )
            assert status == 200, body
            want[uuid.UUID(run_id)] = expected(trajectory.steps)
        else:
            trace_id = uuid.uuid4().hex
            async with api.session.post(
                api.url + "/v1/traces",
                data=json.dumps(otlp_export(trace_id, trajectory)),
                headers={**project.auth(), "Content-Type": "application/json"},
            ) as response:
                assert response.status == 200, await response.text()
            [(run_id,)] = query(
                db_url,
                "SELECT run_id FROM otlp_runs WHERE project_id = %s AND trace_id = %s",
                (uuid.UUID(project.id), bytes.fromhex(trace_id)),
            )
            want[run_id] = expected(tool_steps_renumbered(trajectory))
    got = await verdicts_of(db_url, project, len(SAMPLE))
    assert got == want
    assert sum(v["detected_loop"] for v in want.values()) >= 10  # the sample has loops
    assert sum(bool(v["findings"]) for v in want.values()) < len(want)  # and healthy runs
