"""Real agent frameworks, traced by their real instrumentation, exported by the real
OpenTelemetry SDK to a real `keelwave serve`: what a user then sees in the API and
the CLI.

Each framework's agents run in a subprocess (tests/otlp_agents/<framework>_agent.py,
fake models, no network) configured only through the standard OTEL_* environment
variables, as a user configures an agent: a TracerProvider with a
BatchSpanProcessor in front of the OTLP/HTTP exporter that OTEL_EXPORTER_OTLP_PROTOCOL
names. Every framework runs two or three times, each time into a project of its own:
protobuf in one export (the flush at exit), protobuf with gzip and batches of two
spans sent every millisecond (the trace arrives in many exports, children first),
and (two of them) OTLP/JSON. Every way must give the same runs.

The fake models report 100 + 10n input and 20 + n output tokens on their turn n, under
a model name keelwave prices (gpt-4o-mini), and call the same tool with the same
arguments three times in the loop scenario.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
from conftest import Project, make_project
from serve_process import keelwave

AGENTS = Path(__file__).resolve().parent / "otlp_agents"
PRICES = Path(__file__).resolve().parents[1] / "keelwave" / "server" / "ingest" / "prices.json"

# framework -> (driver script, its scenarios)
FRAMEWORKS = {
    "pydantic_ai": ("pydantic_ai_agent.py", ["loop", "nested", "tool_error"]),
    "openai_agents": (
        "openai_agents_agent.py",
        ["loop", "nested", "handoff", "tool_error", "tool_error_handled"],
    ),
    "langgraph": ("langgraph_agent.py", ["loop", "nested", "tool_error"]),
    "smolagents": ("smolagents_agent.py", ["loop", "nested", "tool_error"]),
}
# How the exporter is set up: only standard environment variables.
MODES = {
    # The whole trace in one export: no timed export, only the flush at the end.
    "one_export": lambda url: {
        "OTEL_EXPORTER_OTLP_PROTOCOL": "http/protobuf",
        "OTEL_EXPORTER_OTLP_ENDPOINT": url,
        "OTEL_BSP_SCHEDULE_DELAY": "3600000",
    },
    "small_batches": lambda url: {
        "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL": "http/protobuf",
        "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": f"{url}/v1/traces",
        "OTEL_EXPORTER_OTLP_COMPRESSION": "gzip",
        "OTEL_BSP_MAX_EXPORT_BATCH_SIZE": "2",
        "OTEL_BSP_SCHEDULE_DELAY": "1",
    },
    # The SDK's default batching (an export every 5 s, or at exit), as OTLP/JSON.
    "json": lambda url: {
        "OTEL_EXPORTER_OTLP_PROTOCOL": "http/json",
        "OTEL_EXPORTER_OTLP_ENDPOINT": url,
    },
}
# OTLP/JSON for two of the frameworks (each driver costs seconds of imports).
JSON_FRAMEWORKS = ("pydantic_ai", "langgraph")
JOBS = [
    (framework, mode)
    for framework in FRAMEWORKS
    for mode in MODES
    if mode != "json" or framework in JSON_FRAMEWORKS
]
# The loop scenario's model calls: 4 turns of 100 + 10n in, 20 + n out.
LOOP_INPUT_TOKENS, LOOP_OUTPUT_TOKENS = 100 + 110 + 120 + 130, 20 + 21 + 22 + 23


@dataclass
class Exported:
    """One driver run into a project of its own: what it printed, and the project."""

    framework: str
    mode: str
    project: Project
    service: str
    returncode: int
    stdout: str
    stderr: str

    @property
    def report(self) -> dict[str, int]:
        """The driver's last line: spans ended, exports sent and failed, largest export."""
        return json.loads(self.stdout.strip().splitlines()[-1])

    def explain(self) -> str:
        said = f"{self.stdout}\n{self.stderr}"
        return f"{self.framework}/{self.mode} exited {self.returncode}:\n{said}"


def _environment(server, mode: str, project: Project, service: str) -> dict[str, str]:
    inherited = {
        k: v for k, v in os.environ.items() if not k.startswith(("OTEL_", "KEELWAVE_", "OPENAI_"))
    }
    return {
        **inherited,
        **MODES[mode](server.url),
        "OTEL_EXPORTER_OTLP_HEADERS": f"Authorization=Bearer {project.keys['ingest']}",
        "OTEL_SERVICE_NAME": service,
        # Nothing may leave the machine: no hub look-ups, no telemetry of the frameworks.
        "HF_HUB_OFFLINE": "1",
        "HF_HUB_DISABLE_TELEMETRY": "1",
        "PYTHONWARNINGS": "ignore",
    }


def _drive(server, db_url: str, framework: str, mode: str) -> Exported:
    script, scenarios = FRAMEWORKS[framework]
    project = make_project(db_url)
    service = f"{framework.replace('_', '-')}-agents"
    done = subprocess.run(
        [sys.executable, str(AGENTS / script), *scenarios],
        env=_environment(server, mode, project, service),
        capture_output=True,
        text=True,
        timeout=300,
    )
    return Exported(framework, mode, project, service, done.returncode, done.stdout, done.stderr)


@pytest.fixture(scope="module")
def exported(server, db_url) -> dict[tuple[str, str], Exported]:
    """Every framework in its modes, four drivers at a time."""
    with ThreadPoolExecutor(max_workers=4) as pool:
        done = pool.map(lambda job: _drive(server, db_url, *job), JOBS)
        return {(result.framework, result.mode): result for result in done}


RUN_FIELDS = (
    "status", "termination_reason", "error", "loop_detected", "loop_step_index", "step_count",
    "llm_calls", "input_tokens", "output_tokens", "cost_usd",
)  # fmt: skip


class Seen:
    """What a user sees of one project through the API."""

    def __init__(self, server, project: Project) -> None:
        self.http = httpx.Client(
            base_url=f"{server.url}/v1/projects/{project.name}/agent",
            headers=project.auth("read"),
            timeout=30,
        )

    def get(self, path: str) -> Any:
        response = self.http.get(path)
        assert response.status_code == 200, (path, response.text)
        return response.json()["data"]

    def runs(self) -> list[dict]:
        return self.get("/runs?limit=500")

    def named(self, agent: str) -> list[dict]:
        return [run for run in self.runs() if run["agent_name"] == agent]

    def one(self, agent: str) -> dict:
        runs = self.named(agent)
        assert len(runs) == 1, f"{len(runs)} runs of {agent}: {self.runs()}"
        return runs[0]

    def run(self, run_id: str) -> dict:
        return self.get(f"/runs/{run_id}")

    def steps(self, run_id: str) -> list[dict]:
        return self.get(f"/runs/{run_id}/steps")

    def calls(self, run_id: str) -> list[dict]:
        return self.get(f"/runs/{run_id}/llm")

    def loops(self, run_id: str) -> list[dict]:
        return self.get(f"/runs/{run_id}/loops")

    def everything(self) -> dict[str, dict]:
        """Every run with its steps, model calls and loops, by agent name, without what
        differs from one run of the same code to the next (ids, times, durations)."""
        runs = self.runs()
        names = {run["id"]: run["agent_name"] for run in runs}
        assert len(names) == len(set(names.values())), "one run per agent in these projects"
        seen = {}
        for run in runs:
            steps = [
                {k: v for k, v in step.items() if k not in ("started_at", "duration_ms")}
                for step in self.steps(run["id"])
            ]
            calls = [
                {k: v for k, v in call.items() if k not in ("id", "started_at", "latency_ms")}
                for call in self.calls(run["id"])
            ]
            detail = self.run(run["id"])
            seen[run["agent_name"]] = {
                **{field: run[field] for field in RUN_FIELDS},
                "parent": names.get(run["parent_run_id"]),
                "children": sorted(names[child] for child in detail["child_runs"]),
                "service": detail["metadata"].get("service.name"),
                "steps": steps,
                "calls": calls,
                "loops": self.loops(run["id"]),
            }
        return seen


@pytest.fixture(scope="module")
def seen(server, exported) -> Iterator[dict[tuple[str, str], Seen]]:
    users = {key: Seen(server, result.project) for key, result in exported.items()}
    yield users
    for user in users.values():
        user.http.close()


def _price(model: str) -> dict[str, float]:
    return json.loads(PRICES.read_text())["models"][model]


@pytest.mark.parametrize(("framework", "mode"), JOBS)
def test_the_agents_ran_and_every_export_was_accepted(exported, framework, mode) -> None:
    result = exported[framework, mode]
    assert result.returncode == 0, result.explain()
    report = result.report
    assert report["failed_exports"] == 0 and report["spans"] > 10, result.explain()
    if mode == "one_export":
        assert report["exports"] == 1
    if mode == "small_batches":
        # Batches of two, children first: the trace came in many exports.
        assert report["largest_export"] <= 2
        assert report["exports"] >= report["spans"] / 2


@pytest.mark.parametrize("framework", list(FRAMEWORKS))
def test_a_looping_agent_is_one_run_with_its_loop_at_the_right_steps(
    exported, seen, framework
) -> None:
    user = seen[framework, "one_export"]
    run = user.one("weather_agent")
    assert run["status"] == "finished" and run["termination_reason"] == "clean"
    assert run["parent_run_id"] is None and run["error"] is None
    assert run["loop_detected"] is True and run["loop_step_index"] == 1
    # No agent reported that flag: the list row and the run's page say it came as spans.
    assert run["from_spans"] is True and user.run(run["id"])["from_spans"] is True
    [loop] = user.loops(run["id"])
    assert loop["tool_name"] == "get_weather"
    assert loop["hits"] == 3 and loop["step_indices"] == [1, 2, 3]
    detail = user.run(run["id"])
    assert detail["loop_groups"] == [loop] and detail["child_runs"] == []
    # The resource came from OTEL_SERVICE_NAME.
    assert detail["metadata"]["service.name"] == exported[framework, "one_export"].service
    steps = user.steps(run["id"])
    expected = ["get_weather"] * 3 + (["final_answer"] if framework == "smolagents" else [])
    assert [step["tool_name"] for step in steps] == expected
    assert [step["step_index"] for step in steps] == list(range(1, len(expected) + 1))
    assert [step["in_loop"] for step in steps] == [True] * 3 + [False] * (len(expected) - 3)
    assert len({step["fingerprint"] for step in steps[:3]}) == 1
    assert steps[0]["tool_input"] == {"city": "Paris", "unit": "celsius"}
    assert "18 degrees" in json.dumps(steps[0]["tool_output"])
    assert run["step_count"] == len(expected)


@pytest.mark.parametrize("framework", list(FRAMEWORKS))
def test_tokens_and_cost_arrive_and_are_counted_once(seen, framework) -> None:
    user = seen[framework, "one_export"]
    run = user.one("weather_agent")
    calls = user.calls(run["id"])
    assert len(calls) == run["llm_calls"] == 4
    assert all(call["model"].startswith("gpt-4o-mini") for call in calls)
    assert [call["input_tokens"] for call in calls] == [100, 110, 120, 130]
    assert (run["input_tokens"], run["output_tokens"]) == (LOOP_INPUT_TOKENS, LOOP_OUTPUT_TOKENS)
    # Each of the first three calls asked for the tool call of its step.
    assert [call["step_index"] for call in calls[:3]] == [1, 2, 3]
    price = _price("gpt-4o-mini")
    cost = (LOOP_INPUT_TOKENS * price["input"] + LOOP_OUTPUT_TOKENS * price["output"]) / 1e6
    assert run["cost_usd"] > 0 and run["cost_usd"] == pytest.approx(cost)
    assert sum(call["cost_usd"] for call in calls) == pytest.approx(run["cost_usd"])
    # In every run of the project, nested ones included, the run's tokens are its own
    # model calls' (no agent span's totals counted again, no child's tokens in a parent).
    for other in user.runs():
        its = user.calls(other["id"])
        assert other["llm_calls"] == len(its), other["agent_name"]
        assert other["input_tokens"] == sum(call["input_tokens"] for call in its)
        assert other["output_tokens"] == sum(call["output_tokens"] for call in its)


# framework -> (outer agent, the outer agent's steps, the inner agent's steps)
NESTED = {
    "pydantic_ai": ("coordinator", ["ask_researcher"], ["lookup"]),
    # Agent.as_tool: the researcher answers without a tool of its own.
    "openai_agents": ("orchestrator", ["ask_researcher"], []),
    "langgraph": ("coordinator", ["ask_researcher"], ["lookup"]),
    # A managed agent is called without a tool span: the coordinator's only step is its
    # final_answer; the call of the researcher is the child run itself.
    "smolagents": ("coordinator", ["final_answer"], ["lookup", "final_answer"]),
}


@pytest.mark.parametrize("framework", list(FRAMEWORKS))
def test_an_agent_run_by_another_is_its_child_run(seen, framework) -> None:
    user = seen[framework, "one_export"]
    outer_name, outer_steps, inner_steps = NESTED[framework]
    outer, inner = user.one(outer_name), user.one("researcher")
    assert outer["parent_run_id"] is None and inner["parent_run_id"] == outer["id"]
    assert user.run(outer["id"])["child_runs"] == [inner["id"]]
    assert [step["tool_name"] for step in user.steps(outer["id"])] == outer_steps
    assert [step["tool_name"] for step in user.steps(inner["id"])] == inner_steps
    for run in (outer, inner):
        assert run["status"] == "finished" and run["termination_reason"] == "clean"
        assert run["loop_detected"] is False and user.loops(run["id"]) == []
    assert inner["llm_calls"] >= 1 and inner["cost_usd"] > 0


def test_a_handoff_makes_the_specialist_a_child_of_the_agent_that_handed_off(seen) -> None:
    user = seen["openai_agents", "one_export"]
    triage, specialist = user.one("triage_agent"), user.one("weather_specialist")
    assert triage["parent_run_id"] is None and specialist["parent_run_id"] == triage["id"]
    assert [s["tool_name"] for s in user.steps(triage["id"])] == ["handoff to weather_specialist"]
    [step] = user.steps(specialist["id"])
    assert step["tool_name"] == "get_weather" and step["tool_input"] == {"city": "Oslo"}
    assert triage["termination_reason"] == specialist["termination_reason"] == "clean"


# framework -> how the run ends when its tool raises
TOOL_ERROR = {
    "pydantic_ai": "error",  # the exception escapes agent.run
    "openai_agents": "error",  # failure_error_function=None: Runner.run raises
    "langgraph": "error",  # ToolNode re-raises: graph.invoke raises
    "smolagents": "clean",  # the step fails, the model is told and gives its final answer
}


@pytest.mark.parametrize("framework", list(FRAMEWORKS))
def test_a_tool_that_raises_is_a_failed_step(seen, framework) -> None:
    user = seen[framework, "one_export"]
    run = user.one("fetch_agent")
    first = user.steps(run["id"])[0]
    assert first["tool_name"] == "fetch_page"
    assert first["tool_input"] == {"url": "https://example.com/"} or (
        framework == "langgraph" and first["tool_input"] == "https://example.com/"
    )  # OpenInference's LangChain sends a lone string argument bare
    assert first["error"] and "connection refused" in first["error"]
    assert run["status"] == "finished"
    assert run["termination_reason"] == TOOL_ERROR[framework]
    if TOOL_ERROR[framework] == "error":
        assert "connection refused" in run["error"]
    else:
        assert run["error"] is None


def test_a_tool_error_the_model_is_told_of_fails_the_step_not_the_run(seen) -> None:
    user = seen["openai_agents", "one_export"]
    run = user.one("lenient_fetch_agent")
    [step] = user.steps(run["id"])
    assert step["tool_name"] == "fetch_page" and step["error"]
    assert run["termination_reason"] == "clean" and run["error"] is None
    assert run["llm_calls"] == 2  # the model was told, and answered


@pytest.mark.parametrize(("framework", "mode"), [job for job in JOBS if job[1] != "one_export"])
def test_many_small_exports_and_json_store_what_one_protobuf_export_does(
    exported, seen, framework, mode
) -> None:
    assert exported[framework, mode].returncode == 0, exported[framework, mode].explain()
    expected = seen[framework, "one_export"].everything()
    got = seen[framework, mode].everything()
    assert set(got) == set(expected)
    for agent, run in expected.items():
        assert got[agent] == run, agent
    # One run per agent: each scenario's, and a second one in nested and handoff.
    scenarios = FRAMEWORKS[framework][1]
    assert len(expected) == len(scenarios) + sum(s in ("nested", "handoff") for s in scenarios)


def test_keelwave_runs_show_draws_the_frameworks_loop(server, exported, seen) -> None:
    for framework in ("pydantic_ai", "smolagents"):
        project = exported[framework, "one_export"].project
        run = seen[framework, "one_export"].one("weather_agent")
        env = {
            "KEELWAVE_ENDPOINT": server.url,
            "KEELWAVE_API_KEY": project.keys["read"],
            "KEELWAVE_CONFIG": "/nonexistent/keelwave.json",
            "COLUMNS": "120",
        }
        shown = keelwave("runs", "show", run["id"], env=env)
        assert shown.returncode == 0, shown.stderr
        text = shown.stdout
        assert run["id"] in text and "weather_agent" in text
        assert "get_weather ×3  steps 1–3" in text
        # No agent reported it: the loop flag of a run sent as spans is the server's.
        assert "yes, from step 1 (detected by the server)" in text
        assert "460 in · 86 out · 4 model calls" in text
        assert ("final_answer" in text) == (framework == "smolagents")
        # The list says so too: LOOP* (the server's), not LOOP (an agent's report).
        listed = keelwave("runs", "--agent", "weather_agent", env=env)
        assert listed.returncode == 0, listed.stderr
        [line] = [line for line in listed.stdout.splitlines() if run["id"][:8] in line]
        assert "LOOP*" in line
