"""Runs whose loops the agent reported, the server detected, or both, sent through the
native ingest API: what the CLI, TUI and dashboard tests show.

The server judges a run shortly after its steps commit, so :func:`seed` waits until
every run carries the verdict it should before it returns.
"""

from __future__ import annotations

import time
import uuid
from dataclasses import dataclass

import httpx

SEARCH = {"q": "keelwave pricing", "max_results": 3}


@dataclass(frozen=True)
class Seeded:
    """The ids of the runs, by what they show."""

    server_only: str  # three identical web_search calls, finished clean, nothing reported
    cycle: str  # search → open, three times (a think step inside), the agent reported it
    near: str  # lookups that differ only in a request id; then searches that find nothing
    agent_only: str  # the agent reported a loop its steps do not show

    @property
    def ids(self) -> list[str]:
        return [self.server_only, self.cycle, self.near, self.agent_only]


# What the server should say about each run: (detected_loop, findings).
EXPECTED = {
    "server_only": (True, ["exact_loop"]),
    "cycle": (True, ["cycle", "exact_loop"]),
    "near": (False, ["near_duplicate", "no_progress"]),
    "agent_only": (False, []),
}


def seed(url: str, ingest_key: str, read_key: str, project_id: str) -> Seeded:
    ids = Seeded(*(str(uuid.uuid4()) for _ in range(4)))
    with httpx.Client(base_url=url, headers={"Authorization": f"Bearer {ingest_key}"}) as http:

        def start(run_id: str, agent: str) -> None:
            body = {"id": run_id, "agent_name": agent}
            http.post("/v1/ingest/agent/runs", json=body).raise_for_status()

        def steps(run_id: str, calls: list[dict]) -> None:
            body = [{"run_id": run_id, "step_index": n, "duration_ms": 100} | call
                    for n, call in enumerate(calls, start=1)]  # fmt: skip
            http.post("/v1/ingest/agent/steps", json=body).raise_for_status()

        def finish(run_id: str, **fields) -> None:
            body = {"termination_reason": "clean", **fields}
            http.post(f"/v1/ingest/agent/runs/{run_id}/finish", json=body).raise_for_status()

        start(ids.server_only, "curl-agent")
        steps(ids.server_only, [{"tool_name": "web_search", "tool_input": SEARCH}] * 3)
        finish(ids.server_only)

        start(ids.cycle, "browse-agent")
        search = {"tool_name": "search", "tool_input": {"q": "keelwave docs"}}
        open_ = {"tool_name": "open", "tool_input": {"url": "https://keelwave.dev/docs"}}
        think = {"step_type": "think", "content": "Still not the page I need."}
        steps(ids.cycle, [search, open_, search, think, open_, search, open_])
        finish(ids.cycle, termination_reason="loop_detected", loop_detected=True,
               loop_step_index=3)  # fmt: skip

        start(ids.near, "support-agent")
        lookups = [
            {"tool_name": "lookup", "tool_input": {"order": "A-1", "request_id": str(uuid.uuid4())},
             "tool_output": {"status": f"checked {n}"}}
            for n in range(3)
        ]  # fmt: skip
        empty = {"results": []}
        searches = [
            {"tool_name": "kb_search", "tool_input": {"q": q}, "tool_output": empty}
            for q in ("refund", "refunds", "money back")
        ]
        steps(ids.near, lookups + searches)
        finish(ids.near)

        start(ids.agent_only, "sdk-agent")
        steps(ids.agent_only, [{"tool_name": "plan", "tool_input": {"goal": "ship"}}])
        finish(ids.agent_only, termination_reason="loop_detected", loop_detected=True,
               loop_step_index=1)  # fmt: skip

    wait_until_judged(url, read_key, project_id, ids)
    return ids


def wait_until_judged(url: str, read_key: str, project_id: str, ids: Seeded) -> None:
    headers = {"Authorization": f"Bearer {read_key}"}
    deadline = time.monotonic() + 30
    while True:
        verdicts = {}
        for name in EXPECTED:
            run_id = getattr(ids, name)
            answer = httpx.get(f"{url}/v1/projects/{project_id}/agent/runs/{run_id}",
                               headers=headers).json()["data"]  # fmt: skip
            verdicts[name] = (answer["detected_loop"], answer["findings"])
        if verdicts == EXPECTED:
            return
        if time.monotonic() > deadline:
            raise AssertionError(f"the server never judged the runs as expected: {verdicts}")
        time.sleep(0.1)
