"""The read API against a data set with known answers, sent through ingest.

Every aggregate is recomputed here in plain Python from the data set's own
definition and compared with what the API says.
"""

from __future__ import annotations

import json
import random
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

import aiohttp
import psycopg
import pytest
from conftest import Api, Project, make_project, make_settings

from keelwave.server.app import create_app
from keelwave.server.store.histogram import ACCURACY

NOW = datetime.now(UTC)
REASONS = ["clean", "max_steps_reached", "context_limit", "error", "loop_detected", "timeout"]


@dataclass
class Run:
    id: str
    agent: str
    started: datetime
    reason: str | None  # None: not finished
    duration_ms: float
    loop: bool
    steps: int
    calls: list[dict] = field(default_factory=list)
    parent: str | None = None

    @property
    def input_tokens(self) -> int:
        return sum(call["input_tokens"] for call in self.calls)

    @property
    def cost(self) -> float:
        return sum(call["cost_usd"] for call in self.calls)


def make_dataset(seed: int = 7) -> list[Run]:
    rng = random.Random(seed)
    runs = []
    for _ in range(80):
        started = NOW - timedelta(minutes=rng.randint(1, 60 * 50))  # the last ~2 days
        finished = rng.random() < 0.85
        reason = rng.choice(REASONS) if finished else None
        loop = reason == "loop_detected" or rng.random() < 0.1
        calls = [
            {
                "id": str(uuid.uuid4()),
                "provider": "openai",
                "model": "gpt-4o",
                "input_tokens": rng.randint(100, 5000),
                "output_tokens": rng.randint(10, 500),
                "cost_usd": round(rng.random() / 10, 6),
            }
            for _ in range(rng.randint(0, 3))
        ]
        runs.append(
            Run(
                str(uuid.uuid4()),
                rng.choice(["alpha", "beta", "gamma"]),
                started,
                reason,
                rng.randint(50, 90_000) if finished else 0,
                loop,
                rng.randint(0, 6),
                calls,
            )
        )
    runs[1].parent = runs[0].id
    return runs


TOOLS = ("search", "fetch")


def steps_of(run: Run) -> list[dict]:
    """The run's steps: odd ones search, even ones fetch, every third one a thought.

    Inputs repeat within a run (search gets one of two queries), durations
    spread over four orders of magnitude, step 5 fails.
    """
    rng = random.Random(run.id)
    steps = []
    for i in range(1, run.steps + 1):
        step: dict = {
            "run_id": run.id,
            "step_index": i,
            "duration_ms": round(rng.uniform(0.5, 5000) ** rng.choice((1, 0.5)), 3),
            "error": "boom" if i == 5 else None,
            "started_at": (run.started + timedelta(seconds=i)).isoformat(),
        }
        if i % 3 == 0:
            step |= {"step_type": "think", "content": "hmm"}
        else:
            step |= {"tool_name": TOOLS[i % 2 == 0], "tool_input": {"q": rng.randint(0, 1)}}
        steps.append(step)
    return steps


async def send(api: Api, project: Project, runs: list[Run]) -> None:
    auth = project.auth("ingest")
    for position, run in enumerate(runs):
        steps = steps_of(run)
        # Some finished runs get their last step after their finish.
        late = steps[-1:] if run.reason and position % 4 == 2 else []
        steps = steps[: len(steps) - len(late)]
        calls = [
            {**call, "run_id": run.id, "started_at": run.started.isoformat()} for call in run.calls
        ]
        body = {"id": run.id, "agent_name": run.agent, "started_at": run.started.isoformat()}
        if run.parent:
            body["parent_run_id"] = run.parent
        # Some runs get their steps and model calls before the run itself.
        early = position % 4 == 0
        if early and steps:
            assert (await api.post("/v1/ingest/agent/steps", json=steps, headers=auth))[0] == 200
        if early and calls:
            assert (await api.post("/v1/ingest/ai", json=calls, headers=auth))[0] == 200
        assert (await api.post("/v1/ingest/agent/runs", json=body, headers=auth))[0] == 201
        if not early and steps:
            assert (await api.post("/v1/ingest/agent/steps", json=steps, headers=auth))[0] == 200
        if not early and calls:
            assert (await api.post("/v1/ingest/ai", json=calls, headers=auth))[0] == 200
        if run.reason:
            finish = {
                "termination_reason": run.reason,
                "loop_detected": run.loop,
                "ended_at": (run.started + timedelta(milliseconds=run.duration_ms)).isoformat(),
            }
            if position % 5 == 0:  # finished twice, first with something else: the last counts
                first = {**finish, "termination_reason": "error", "loop_detected": not run.loop}
                await api.post(f"/v1/ingest/agent/runs/{run.id}/finish", json=first, headers=auth)
            status, body, _ = await api.post(
                f"/v1/ingest/agent/runs/{run.id}/finish", json=finish, headers=auth
            )
            assert status == 200, body
            if late:
                assert (await api.post("/v1/ingest/agent/steps", json=late, headers=auth))[0] == 200
        elif run.loop:
            run.loop = False  # an unfinished run never reported a loop


def percentile(values: list[float], fraction: float) -> float | None:
    """Linear interpolation between closest ranks, as PostgreSQL's percentile_cont."""
    if not values:
        return None
    ordered = sorted(values)
    position = (len(ordered) - 1) * fraction
    low = int(position)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (position - low)


def expected_summary(runs: list[Run], since: datetime, until: datetime) -> dict:
    inside = [run for run in runs if since <= run.started < until]
    finished = [run for run in inside if run.reason]
    count = len(inside)
    durations = [run.duration_ms for run in finished]
    return {
        "runs": count,
        "loop_runs": sum(run.loop for run in inside),
        "error_runs": sum(run.reason == "error" for run in inside),
        "finished_runs": len(finished),
        "avg_steps": sum(run.steps for run in inside) / count if count else None,
        "input_tokens": sum(run.input_tokens for run in inside),
        "cost_usd": sum(run.cost for run in inside),
        "p50": percentile(durations, 0.5),
        "p95": percentile(durations, 0.95),
    }


@pytest.fixture(scope="module")
def dataset() -> list[Run]:
    return make_dataset()


@pytest.fixture
async def loaded(api: Api, db_url: str, dataset: list[Run]) -> tuple[Api, Project, list[Run]]:
    project = make_project(db_url)
    await send(api, project, dataset)
    return api, project, dataset


def approx(value: float | None) -> object:
    return None if value is None else pytest.approx(value, rel=1e-6, abs=1e-6)


@pytest.mark.parametrize("window", ["1h", "6h", "24h", "7d"])
async def test_summary_matches_the_data(loaded, window: str) -> None:
    api, project, runs = loaded
    status, body, _ = await api.get(
        f"/v1/projects/{project.id}/agent/summary?window={window}", headers=project.auth("read")
    )
    assert status == 200, body
    for part in ("current", "previous"):
        got = body["data"][part]
        since, until = datetime.fromisoformat(got["since"]), datetime.fromisoformat(got["until"])
        want = expected_summary(runs, since, until)
        assert got["runs"] == want["runs"], part
        assert got["loop_runs"] == want["loop_runs"]
        assert got["error_runs"] == want["error_runs"]
        assert got["finished_runs"] == want["finished_runs"]
        assert got["loop_rate"] == approx(
            want["loop_runs"] / want["runs"] if want["runs"] else None
        )
        assert got["avg_steps"] == approx(want["avg_steps"])
        assert got["input_tokens"] == want["input_tokens"]
        assert got["cost_usd"] == approx(want["cost_usd"])
        assert got["p50_duration_ms"] == approx(want["p50"])
        assert got["p95_duration_ms"] == approx(want["p95"])


async def test_odd_since_until_edges_are_exact(loaded) -> None:
    """Windows that start and end inside hours read rollups and raw runs together."""
    api, project, runs = loaded
    since = (NOW - timedelta(hours=37, minutes=13)).isoformat()
    until = (NOW - timedelta(hours=2, minutes=41)).isoformat()
    status, body, _ = await api.get(
        f"/v1/projects/{project.id}/agent/runs/terminations",
        params={"since": since, "until": until},
        headers=project.auth("read"),
    )
    assert status == 200, body
    inside = [
        run
        for run in runs
        if datetime.fromisoformat(since) <= run.started < datetime.fromisoformat(until)
    ]
    counts = {row["termination_reason"]: row["count"] for row in body["data"]}
    assert set(counts) == {*REASONS, None}
    for reason in REASONS:
        assert counts[reason] == sum(run.reason == reason for run in inside), reason
    assert counts[None] == sum(run.reason is None for run in inside)


async def test_health_per_agent(loaded) -> None:
    api, project, runs = loaded
    status, body, _ = await api.get(
        f"/v1/projects/{project.id}/agent/health?window=7d", headers=project.auth("read")
    )
    assert status == 200
    rates = [row["loop_rate"] for row in body["data"]]
    assert rates == sorted(rates, reverse=True)
    for row in body["data"]:
        mine = [run for run in runs if run.agent == row["agent_name"]]
        assert row["runs"] == len(mine)
        assert row["loop_runs"] == sum(run.loop for run in mine)
        assert row["cost_usd"] == approx(sum(run.cost for run in mine))
        durations = [run.duration_ms for run in mine if run.reason]
        assert row["p95_duration_ms"] == approx(percentile(durations, 0.95))
        assert datetime.fromisoformat(row["last_run_at"]) == max(run.started for run in mine)
    assert {row["agent_name"] for row in body["data"]} == {run.agent for run in runs}


@pytest.mark.parametrize(("window", "bucket"), [("24h", "1h"), ("7d", "6h"), ("6h", "15m")])
async def test_timeseries_buckets_add_up(loaded, window: str, bucket: str) -> None:
    api, project, runs = loaded
    status, body, _ = await api.get(
        f"/v1/projects/{project.id}/agent/runs/timeseries?window={window}&bucket={bucket}",
        headers=project.auth("read"),
    )
    assert status == 200, body
    since, until = datetime.fromisoformat(body["since"]), datetime.fromisoformat(body["until"])
    size = timedelta(seconds=body["bucket_seconds"])
    starts = [datetime.fromisoformat(point["start"]) for point in body["data"]]
    gaps = {later - earlier for earlier, later in zip(starts, starts[1:], strict=False)}
    assert gaps <= {size}
    assert starts[0] <= since < starts[0] + size and starts[-1] < until <= starts[-1] + size
    for point, start in zip(body["data"], starts, strict=True):
        inside = [
            run for run in runs if max(since, start) <= run.started < min(until, start + size)
        ]
        assert point["runs"] == len(inside), point
        assert point["loop_runs"] == sum(run.loop for run in inside)
        assert point["error_runs"] == sum(run.reason == "error" for run in inside)
        assert point["input_tokens"] == sum(run.input_tokens for run in inside)


def at_hour(hours: int, minute: int) -> str:
    """An ISO time ``hours`` from the current hour, at ``minute`` past."""
    hour = NOW.replace(minute=0, second=0, microsecond=0)
    return (hour + timedelta(hours=hours, minutes=minute)).isoformat()


def expected_tools(runs: list[Run], since: datetime, until: datetime) -> dict[str, dict]:
    """Per tool, from the data set's own definition, over the runs started in the range."""
    tools: dict[str, dict] = {}
    for run in runs:
        if not since <= run.started < until:
            continue
        seen_tools, seen_inputs = set(), set()
        for step in steps_of(run):
            name = step.get("tool_name")
            if name is None:
                continue
            tool = tools.setdefault(name, {"calls": 0, "runs": 0, "repeated": 0, "errors": 0})
            tool.setdefault("durations", []).append(step["duration_ms"])
            tool["calls"] += 1
            tool["runs"] += name not in seen_tools
            key = (name, json.dumps(step["tool_input"]))
            tool["repeated"] += key in seen_inputs
            tool["errors"] += step["error"] is not None
            seen_tools.add(name)
            seen_inputs.add(key)
    return tools


async def get_tools(api: Api, project: Project, runs: list[Run], query: dict) -> tuple[dict, dict]:
    status, body, _ = await api.get(
        f"/v1/projects/{project.id}/agent/tools", params=query, headers=project.auth("read")
    )
    assert status == 200, body
    got = {row["tool_name"]: row for row in body["data"]}
    want = expected_tools(
        runs, datetime.fromisoformat(body["since"]), datetime.fromisoformat(body["until"])
    )
    assert set(got) == set(want)
    assert [row["calls"] for row in body["data"]] == sorted(
        (tool["calls"] for tool in want.values()), reverse=True
    )
    for name, tool in want.items():
        row = got[name]
        assert row["calls"] == tool["calls"], name
        assert row["runs"] == tool["runs"], name
        assert row["repeated_calls"] == tool["repeated"], name
        assert row["repeat_rate"] == approx(tool["repeated"] / tool["calls"])
        assert row["error_calls"] == tool["errors"], name
        assert row["error_rate"] == approx(tool["errors"] / tool["calls"])
    return got, want


@pytest.mark.parametrize(
    "query",
    [
        {"window": "7d"},
        {"window": "24h"},
        {"window": "1h"},
        # Edges near the start or the end of their hours: both ways of reading an edge.
        {"since": at_hour(-40, 10), "until": at_hour(-3, 50)},
        {"since": at_hour(-40, 50), "until": at_hour(-3, 10)},
        {"since": at_hour(-20, 5), "until": at_hour(-20, 55)},
    ],
)
async def test_tools_match_the_data(loaded, query: dict) -> None:
    """Rollups (finished runs, whole hours) and steps (the rest) add up to the exact answer."""
    api, project, runs = loaded
    got, want = await get_tools(api, project, runs, query)
    for name, tool in want.items():
        assert got[name]["p50_duration_ms"] == approx(percentile(tool["durations"], 0.5))
        assert got[name]["p95_duration_ms"] == approx(percentile(tool["durations"], 0.95))


@pytest.fixture
async def histogram_api(db_url: str, aiohttp_server) -> AsyncIterator[Api]:
    """A server that always reads duration percentiles from the histograms."""
    server = await aiohttp_server(create_app(make_settings(exact_percentiles_up_to=0), db_url))
    async with aiohttp.ClientSession() as session:
        yield Api(str(server.make_url("")).rstrip("/"), session)


def near_rank(values: list[float], fraction: float) -> object:
    """What a histogram percentile may answer: within ACCURACY of the value at that rank."""
    if not values:
        return None
    ordered = sorted(values)
    return pytest.approx(ordered[int(fraction * (len(ordered) - 1))], rel=ACCURACY * 1.001)


async def test_tool_percentiles_from_histograms_are_within_their_accuracy(
    loaded, histogram_api: Api
) -> None:
    _, project, runs = loaded
    got, want = await get_tools(histogram_api, project, runs, {"window": "7d"})
    for name, tool in want.items():
        for fraction, key in ((0.5, "p50_duration_ms"), (0.95, "p95_duration_ms")):
            assert got[name][key] == near_rank(tool["durations"], fraction), (name, key)


@pytest.mark.parametrize(
    "query",
    [{"window": "7d"}, {"window": "24h"}, {"since": at_hour(-40, 10), "until": at_hour(-3, 50)}],
)
async def test_run_duration_percentiles_from_histograms_are_within_their_accuracy(
    loaded, histogram_api: Api, query: dict
) -> None:
    """Summary and health read run durations from hourly histograms past the exact limit."""
    _, project, runs = loaded
    auth = project.auth("read")
    path = f"/v1/projects/{project.id}/agent"
    status, body, _ = await histogram_api.get(f"{path}/summary", params=query, headers=auth)
    assert status == 200, body
    for part in ("current", "previous"):
        got = body["data"][part]
        since, until = datetime.fromisoformat(got["since"]), datetime.fromisoformat(got["until"])
        durations = [r.duration_ms for r in runs if r.reason and since <= r.started < until]
        assert got["p50_duration_ms"] == near_rank(durations, 0.5), part
        assert got["p95_duration_ms"] == near_rank(durations, 0.95), part

    status, body, _ = await histogram_api.get(f"{path}/health", params=query, headers=auth)
    assert status == 200, body
    since, until = datetime.fromisoformat(body["since"]), datetime.fromisoformat(body["until"])
    assert body["data"]
    for row in body["data"]:
        durations = [
            r.duration_ms
            for r in runs
            if r.reason and r.agent == row["agent_name"] and since <= r.started < until
        ]
        assert row["p95_duration_ms"] == near_rank(durations, 0.95), row["agent_name"]


async def test_runs_list_filters_and_pagination(loaded) -> None:
    api, project, runs = loaded
    path = f"/v1/projects/{project.id}/agent/runs"
    seen: list[str] = []
    cursor = None
    while True:
        query = {"limit": "7", **({"cursor": cursor} if cursor else {})}
        status, body, _ = await api.get(path, params=query, headers=project.auth("read"))
        assert status == 200, body
        seen += [run["id"] for run in body["data"]]
        cursor = body["next_cursor"]
        if cursor is None:
            break
    newest_first = sorted(runs, key=lambda run: (run.started, run.id), reverse=True)
    assert seen == [run.id for run in newest_first]

    for query, want in (
        ({"agent_name": "beta"}, [r for r in runs if r.agent == "beta"]),
        ({"loop_detected": "true"}, [r for r in runs if r.loop]),
        ({"termination_reason": "error"}, [r for r in runs if r.reason == "error"]),
        ({"status": "finished"}, [r for r in runs if r.reason]),
        ({"status": "running"}, [r for r in runs if not r.reason]),
        ({"window": "24h"}, [r for r in runs if r.started >= NOW - timedelta(hours=24)]),
        ({"q": runs[3].id[:8]}, [r for r in runs if r.id.startswith(runs[3].id[:8])]),
        # (an id prefix is a range of ids, a name part a match among the agents' names)
        ({"q": runs[3].id[:13].upper()}, [r for r in runs if r.id.startswith(runs[3].id[:13])]),
        ({"q": runs[3].id}, [runs[3]]),
        ({"q": "ETA"}, [r for r in runs if "eta" in r.agent.lower()]),
        ({"q": "b"}, [r for r in runs if "b" in r.agent or r.id.startswith("b")]),
        ({"q": "a%"}, []),
        ({"q": runs[3].id[:7] + "-"}, []),  # (a dash where an id has a digit)
        ({"q": "no such run"}, []),
    ):
        status, body, _ = await api.get(
            path, params={**query, "limit": "500"}, headers=project.auth("read")
        )
        assert status == 200, (query, body)
        assert {run["id"] for run in body["data"]} == {run.id for run in want}, query


async def test_pagination_is_stable_while_runs_arrive(loaded) -> None:
    api, project, runs = loaded
    path = f"/v1/projects/{project.id}/agent/runs"
    status, body, _ = await api.get(path, params={"limit": "10"}, headers=project.auth("read"))
    first = [run["id"] for run in body["data"]]
    for _ in range(5):  # newer runs arrive between pages
        await api.post(
            "/v1/ingest/agent/runs", json={"agent_name": "late"}, headers=project.auth("ingest")
        )
    status, body, _ = await api.get(
        path, params={"limit": "10", "cursor": body["next_cursor"]}, headers=project.auth("read")
    )
    newest_first = sorted(runs, key=lambda run: (run.started, run.id), reverse=True)
    assert first + [run["id"] for run in body["data"]] == [run.id for run in newest_first[:20]]


async def test_run_detail_steps_and_calls(loaded) -> None:
    api, project, runs = loaded
    parent, child = runs[0], runs[1]
    status, body, _ = await api.get(
        f"/v1/projects/{project.id}/agent/runs/{parent.id}", headers=project.auth("read")
    )
    assert status == 200
    run = body["data"]
    assert run["child_runs"] == [child.id]
    assert run["step_count"] == parent.steps and run["llm_calls"] == len(parent.calls)
    assert run["input_tokens"] == parent.input_tokens
    assert run["cost_usd"] == approx(parent.cost)
    assert run["status"] == ("finished" if parent.reason else "running")
    for key in (
        "id",
        "agent_name",
        "parent_run_id",
        "started_at",
        "ended_at",
        "duration_ms",
        "termination_reason",
        "loop_detected",
        "loop_step_index",
        "output_tokens",
        "error",
        "input",
        "output",
        "metadata",
        "tags",
        "loop_groups",
    ):
        assert key in run, key
    status, body, _ = await api.get(
        f"/v1/projects/{project.id}/agent/runs/{child.id}", headers=project.auth("read")
    )
    assert body["data"]["parent_run_id"] == parent.id

    long_run = max(runs, key=lambda run: run.steps)
    steps_path = f"/v1/projects/{project.id}/agent/runs/{long_run.id}/steps"
    status, body, _ = await api.get(steps_path, params={"limit": "2"}, headers=project.auth())
    assert [step["step_index"] for step in body["data"]] == [1, 2]
    collected = body["data"]
    while body["next_cursor"]:
        status, body, _ = await api.get(
            steps_path, params={"limit": "2", "cursor": body["next_cursor"]}, headers=project.auth()
        )
        collected += body["data"]
    assert [step["step_index"] for step in collected] == list(range(1, long_run.steps + 1))
    # Tool steps have fingerprints, thoughts none; a (tool, input) seen twice is a loop.
    sent = steps_of(long_run)
    keys = [(step.get("tool_name"), json.dumps(step.get("tool_input"))) for step in sent]
    for step, key in zip(collected, keys, strict=True):
        assert (step["fingerprint"] is not None) == (key[0] is not None)
        hits = keys.count(key) if key[0] is not None else 0
        assert step["in_loop"] == (hits > 1), step
        assert step["loop_hits"] == (hits if hits > 1 else 0)
    fingerprints = {key: step["fingerprint"] for step, key in zip(collected, keys, strict=True)}
    assert len(set(fingerprints.values())) == len(fingerprints)

    status, body, _ = await api.get(
        f"/v1/projects/{project.id}/agent/runs/{parent.id}/llm", headers=project.auth()
    )
    assert sorted(call["id"] for call in body["data"]) == sorted(c["id"] for c in parent.calls)


async def test_query_errors(api: Api, project: Project) -> None:
    base = f"/v1/projects/{project.id}/agent"
    for path, name in (
        (f"{base}/summary?window=forever", "window"),
        (f"{base}/runs?limit=0", "limit"),
        (f"{base}/runs?limit=501", "limit"),
        (f"{base}/runs?status=sleeping", "status"),
        (f"{base}/runs?loop_detected=maybe", "loop_detected"),
        (f"{base}/runs?termination_reason=done", "termination_reason"),
        (f"{base}/runs?cursor=garbage", "cursor"),
        (f"{base}/runs?since=yesterday", "since"),
        (f"{base}/runs/timeseries?window=30d&bucket=1m", "bucket"),
        (f"{base}/summary?window=1h&since=2026-01-01T00:00:00Z", "window"),
    ):
        status, body, _ = await api.get(path, headers=project.auth("read"))
        assert (status, body["error"]["field"]) == (422, name), path
    for path in (
        f"{base}/runs/{uuid.uuid4()}",
        f"{base}/runs/{uuid.uuid4()}/steps",
        f"{base}/runs/{uuid.uuid4()}/llm",
        f"{base}/runs/nope",
        f"/v1/projects/{uuid.uuid4()}/agent/summary",
    ):
        status, body, _ = await api.get(path, headers=project.auth("read"))
        assert status == 404, path
    status, _, _ = await api.get(f"{base}/summary", headers=project.auth("ingest"))
    assert status == 403


async def test_empty_project_answers_zeroes(api: Api, project: Project) -> None:
    base = f"/v1/projects/{project.id}/agent"
    status, body, _ = await api.get(f"{base}/summary", headers=project.auth())
    assert status == 200
    assert body["data"]["current"]["runs"] == 0 and body["data"]["current"]["loop_rate"] is None
    status, body, _ = await api.get(f"{base}/runs", headers=project.auth())
    assert body == {"data": [], "next_cursor": None}
    status, body, _ = await api.get(
        f"{base}/runs/timeseries?window=1h&bucket=5m", headers=project.auth()
    )
    assert all(point["runs"] == 0 for point in body["data"]) and len(body["data"]) in (12, 13)


def test_a_run_id_prefix_is_the_range_of_ids_whose_text_starts_with_it() -> None:
    from keelwave.server.query.run_search import condition, id_range

    first, last = id_range("7E7BE898-4d")  # (any case; a dash where an id has one)
    assert (str(first), str(last)) == (
        "7e7be898-4d00-0000-0000-000000000000",
        "7e7be898-4dff-ffff-ffff-ffffffffffff",
    )
    assert id_range("7e7be8984d") is None  # (a digit where an id has a dash)
    assert id_range("weather") is None and id_range("") is None
    assert id_range("f" * 32 + "-" * 4) is None
    args: dict = {}
    assert condition("nothing", [], args) == "false" and args == {}
    assert condition("abc", ["crabcake", "abcde"], args) == (
        "(id BETWEEN %(q_first)s AND %(q_last)s OR agent_name = ANY(%(q_agents)s))"
    )
    # One name: an equality, which an index scan in agent_name order can start from.
    assert condition("abc", ["crabcake"], args) == (
        "(id BETWEEN %(q_first)s AND %(q_last)s OR agent_name = %(q_agent)s)"
    )


def test_q_beside_an_agent_name_keeps_only_that_agent() -> None:
    """``agent_name`` and ``q`` together: of the agents whose name holds q, only the one
    asked for can pass both; q naming only others is no run at all, said at once (before,
    PostgreSQL read every run of ``agent-support`` for ``q=agent-1``: 0.3 s on 2.5
    million runs, bench/filter_sweep.py)."""
    from keelwave.server.query.run_search import condition

    args: dict = {}
    assert condition("agent-1", ["agent-1", "agent-10"], args, "agent-support") == "false"
    assert condition("agent-1", ["agent-1", "agent-10"], args, "agent-10") == (
        "(agent_name = %(q_agent)s)"
    )
    assert args["q_agent"] == "agent-10"
    # A run id prefix still holds beside the agent (any of its runs may have it).
    args = {}
    assert (
        condition("abc", ["crabcake"], args, "other") == "(id BETWEEN %(q_first)s AND %(q_last)s)"
    )


async def test_runs_by_q_and_agent_name_are_the_runs_of_both(api: Api, project: Project) -> None:
    base = f"/v1/projects/{project.id}/agent/runs"
    ids = {}
    for agent in ("planner", "plan-checker", "coder"):
        run_id = str(uuid.uuid4())
        body = {"id": run_id, "agent_name": agent}
        status, _, _ = await api.post(
            "/v1/ingest/agent/runs", json=body, headers=project.auth("ingest")
        )
        assert status == 201
        ids[agent] = run_id

    async def listed(**query) -> set[str]:
        status, body, _ = await api.get(base, params=query, headers=project.auth())
        assert status == 200, body
        return {row["id"] for row in body["data"]}

    assert await listed(q="plan") == {ids["planner"], ids["plan-checker"]}
    assert await listed(q="plan", agent_name="plan-checker") == {ids["plan-checker"]}
    assert await listed(q="plan", agent_name="coder") == set()
    assert await listed(q=ids["coder"][:8], agent_name="coder") == {ids["coder"]}
    assert await listed(q=ids["coder"][:8], agent_name="planner") == set()


async def test_q_naming_several_agents_sorted_by_agent_reads_agent_by_agent(
    api: Api, db_url: str, monkeypatch
) -> None:
    """Sorted by agent name, q naming several agents is read one agent at a time (run_list:
    PostgreSQL 15 filtered every run of the project otherwise, 5.3 s on 2.5 million);
    page after page, in both orders and beside other filters, the list is the same."""
    from test_run_explorer_api import all_pages

    from keelwave.server.query import run_list

    calls = []
    real = run_list._agent_by_agent

    async def spied(*arguments, **keywords):
        calls.append(arguments)
        return await real(*arguments, **keywords)

    monkeypatch.setattr(run_list, "_agent_by_agent", spied)
    project = make_project(db_url)
    with psycopg.connect(db_url, autocommit=True) as conn:
        conn.execute(
            """
            INSERT INTO agent_runs (project_id, id, agent_name, started_at, last_activity_at,
                                    ended_at, termination_reason, tags)
            SELECT %(project)s::uuid, md5(%(project)s::text || n)::uuid,
                   (ARRAY['plan-b', 'Plan-a', 'other', 'plan-c', 'plan-b'])[n %% 5 + 1],
                   timestamptz '2026-11-01' + make_interval(mins => n - (n %% 4 = 0)::int),
                   now(), timestamptz '2026-11-02',
                   CASE WHEN n %% 3 = 0 THEN 'error' ELSE 'clean' END,
                   CASE WHEN n %% 7 = 0 THEN ARRAY['x'] ELSE '{}' END
            FROM generate_series(1, 90) n
            """,
            {"project": project.id},
        )

    def expected(way: str, *conditions: str) -> list[str]:
        with psycopg.connect(db_url) as conn:
            found = conn.execute(
                "SELECT id::text FROM agent_runs WHERE project_id = %s AND agent_name ILIKE "
                f"'%%plan%%' {''.join(' AND ' + c for c in conditions)} "
                f"ORDER BY agent_name {way}, started_at {way}, id {way}",
                (project.id,),
            )
            return [run_id for (run_id,) in found]

    for way in ("asc", "desc"):
        for query, conditions in [
            ({}, ()),
            ({"termination_reason": "error"}, ("termination_reason = 'error'",)),
            ({"tag": "x"}, ("tags @> '{x}'",)),
            (
                {"tag": "x", "termination_reason": "error"},
                ("tags @> '{x}'", "termination_reason = 'error'"),
            ),
        ]:
            rows = await all_pages(
                api, project, q="plan", sort="agent_name", order=way, limit=4, **query
            )
            assert [row["id"] for row in rows] == expected(way, *conditions), (way, query)
    assert calls
