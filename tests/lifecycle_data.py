"""Runs with known times, sent through the ingest API, and what the deletion and retention
tests compare: every aggregate endpoint's answer, and the rollup tables.

A data set is a list of :class:`Run`; :func:`send` ingests them into a project with the
times they say (runs, steps and model calls all take started_at), so the same list sent
to two projects gives the same aggregates. That is how the tests check that deleting
runs leaves the rollups as if the runs had never been sent.
"""

from __future__ import annotations

import asyncio
import json
import random
import time
import uuid
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from urllib.parse import parse_qsl

from conftest import Api, Project, fold_pending_tool_rollups, query

from keelwave.server.store import tool_rollups
from keelwave.server.store.statements import ROLLUP_COUNTERS

NOW = datetime.now(UTC).replace(microsecond=0)
TOOLS = ("search", "fetch", "write")


@dataclass
class Run:
    started: datetime
    agent: str = "alpha"
    reason: str | None = "clean"  # None: still running
    steps: int = 4
    calls: int = 1
    looping: bool = False  # one tool input over and over: the server finds a loop
    metadata: dict | None = None
    parent: str | None = None
    id: str = field(default_factory=lambda: str(uuid.uuid4()))

    def step_bodies(self) -> list[dict]:
        rng = random.Random(self.id)
        return [
            {
                "run_id": self.id,
                "step_index": i,
                "tool_name": TOOLS[0] if self.looping else rng.choice(TOOLS),
                "tool_input": {"q": "same"} if self.looping else {"q": rng.randint(0, 3)},
                "tool_output": {"n": i},
                "duration_ms": rng.randint(5, 4000),
                "error": "boom" if i == 3 else None,
                "started_at": (self.started + timedelta(seconds=i)).isoformat(),
            }
            for i in range(1, self.steps + 1)
        ]

    def call_bodies(self) -> list[dict]:
        rng = random.Random(self.id + "calls")
        return [
            {
                "id": str(uuid.uuid5(uuid.UUID(self.id), str(n))),
                "run_id": self.id,
                "provider": "openai",
                "model": "gpt-4o",
                "input_tokens": rng.randint(100, 5000),
                "output_tokens": rng.randint(10, 500),
                "cost_usd": round(rng.random() / 10, 6),
                "started_at": (self.started + timedelta(seconds=n)).isoformat(),
            }
            for n in range(self.calls)
        ]


def dataset(seed: int = 3, count: int = 30, span: timedelta = timedelta(hours=20)) -> list[Run]:
    """Runs of three agents started over ``span`` before now, a few looping, a few
    unfinished, some with a user_id in their metadata, a small tree of sub-agents."""
    rng = random.Random(seed)
    runs = []
    for n in range(count):
        started = NOW - timedelta(seconds=rng.randint(60, int(span.total_seconds())))
        runs.append(
            Run(
                started=started.replace(microsecond=0),
                agent=rng.choice(("alpha", "beta", "gamma")),
                reason=rng.choice(("clean", "clean", "error", "max_steps_reached", None)),
                steps=rng.randint(0, 7),
                calls=rng.randint(0, 3),
                looping=n % 7 == 0,
                metadata={"user_id": f"u{n % 4}", "plan": "pro"},
            )
        )
    # A run with two children, one of which has its own child.
    root, child, other, grandchild = runs[:4]
    child.parent = other.parent = root.id
    grandchild.parent = child.id
    for run in (child, other, grandchild):
        run.started = max(run.started, root.started)
    return runs


async def send(api: Api, project: Project, runs: list[Run]) -> None:
    """Ingest ``runs`` as agents would: start, steps, model calls, finish."""
    auth = project.auth("ingest")
    for run in runs:
        body: dict = {"id": run.id, "agent_name": run.agent, "started_at": run.started.isoformat()}
        if run.parent:
            body["parent_run_id"] = run.parent
        if run.metadata is not None:
            body["metadata"] = run.metadata
        status, answer, _ = await api.post("/v1/ingest/agent/runs", json=body, headers=auth)
        assert status == 201, answer
        if run.steps:
            status, answer, _ = await api.post(
                "/v1/ingest/agent/steps", json=run.step_bodies(), headers=auth
            )
            assert status == 200, answer
        if run.calls:
            status, answer, _ = await api.post(
                "/v1/ingest/ai", json=run.call_bodies(), headers=auth
            )
            assert status == 200, answer
        if run.reason:
            ended = run.started + timedelta(seconds=run.steps + 1, milliseconds=137)
            finish = {"termination_reason": run.reason, "ended_at": ended.isoformat()}
            status, answer, _ = await api.post(
                f"/v1/ingest/agent/runs/{run.id}/finish", json=finish, headers=auth
            )
            assert status == 200, answer


async def judged(db_url: str, *project_ids: str, timeout: float = 30) -> None:
    """Wait until the server has its verdict on every run of these projects."""
    deadline = time.monotonic() + timeout
    while True:
        [(due,)] = query(
            db_url,
            "SELECT count(*) FROM agent_runs WHERE project_id = ANY(%s::uuid[]) "
            "AND verdict_steps <> step_count",
            (list(project_ids),),
        )
        if due == 0:
            return
        assert time.monotonic() < deadline, f"{due} runs still wait for their verdicts"
        await asyncio.sleep(0.2)


AGGREGATES = (
    "/summary",
    "/health",
    "/runs/timeseries",
    "/runs/timeseries?bucket=1d",
    "/tools",
    "/runs/terminations",
    "/cost?group_by=agent&bucket=hour",
    "/cost?group_by=agent&bucket=day",
)


async def aggregates(api: Api, project: Project, since: datetime, until: datetime) -> dict:
    """Every aggregate endpoint's answer over [since, until), keyed by its path."""
    window = {"since": since.isoformat(), "until": until.isoformat()}
    found = {}
    for path in AGGREGATES:
        route, _, query = path.partition("?")
        status, body, _ = await api.get(
            f"/v1/projects/{project.id}/agent{route}",
            params=window | dict(parse_qsl(query)),
            headers=project.auth("read"),
        )
        assert status == 200, body
        found[path] = body
    return found


# Rollups in shards (rollup_shards.py): only a key's sum over its shards means something.
def _summed(table: str, keys: str, counters: tuple[str, ...]) -> str:
    sums = ", ".join(f"sum({c}) AS {c}" for c in counters)
    return f"(SELECT project_id, {keys}, {sums} FROM {table} GROUP BY project_id, {keys})"


RUN_ROLLUPS_SUMMED = _summed("agent_run_rollups", "agent_name, bucket", ROLLUP_COUNTERS)
_ROLLUPS = {
    RUN_ROLLUPS_SUMMED: ("agent_run_rollups", "agent_name, bucket"),
    "agent_duration_rollups": ("agent_duration_rollups", "agent_name, bucket, duration_bin"),
    _summed("agent_tool_rollups", "tool_name, bucket, duration_bin", tool_rollups.COUNTERS): (
        "agent_tool_rollups", "tool_name, bucket, duration_bin",
    ),
    "agent_duration_rollups_daily": (
        "agent_duration_rollups_daily", "agent_name, day, duration_bin",
    ),
    _summed("agent_tool_rollups_daily", "tool_name, day, duration_bin", tool_rollups.COUNTERS): (
        "agent_tool_rollups_daily", "tool_name, day, duration_bin",
    ),
    _summed("agent_run_rollups_daily", "agent_name, day", ROLLUP_COUNTERS): (
        "agent_run_rollups_daily", "agent_name, day",
    ),
    _summed("project_duration_rollups", "bucket, duration_bin", ("runs",)): (
        "project_duration_rollups", "bucket, duration_bin",
    ),
    _summed("project_duration_rollups_daily", "day, duration_bin", ("runs",)): (
        "project_duration_rollups_daily", "day, duration_bin",
    ),
    "agent_duration_rollups_weekly": (
        "agent_duration_rollups_weekly", "agent_name, week, duration_bin",
    ),
    _summed("agent_tool_rollups_weekly", "tool_name, week, duration_bin", tool_rollups.COUNTERS): (
        "agent_tool_rollups_weekly", "tool_name, week, duration_bin",
    ),
}  # fmt: skip


def rollups(db_url: str, project_id: str, since: datetime | None = None) -> dict[str, list]:
    """Each rollup table's rows of a project (from the hour ``since`` on, the daily ones
    from its day on), without the project's id, costs rounded (a subtraction leaves
    float residue)."""
    fold_pending_tool_rollups(db_url)
    found = {}
    since = since or datetime(1970, 1, 1, tzinfo=UTC)
    for table, (name, keys) in _ROLLUPS.items():
        start = "bucket >= %s"
        if name.endswith("_daily"):
            start = "day >= date_trunc('day', %s, 'UTC')"
        elif name.endswith("_weekly"):
            start = "week >= date_trunc('week', %s, 'UTC')"
        rows = query(
            db_url,
            f"SELECT to_jsonb(t) - 'project_id' FROM {table} t WHERE project_id = %s "
            f"AND {start} ORDER BY {keys}",
            (project_id, since),
        )
        found[name] = [_rounded(row) for (row,) in rows]
    return found


def _rounded(row: dict) -> dict:
    return {
        key: round(value, 6) if isinstance(value, float) else value for key, value in row.items()
    }


def recomputed_run_rollups(db_url: str, project_id: str, since: datetime | None = None) -> list:
    """agent_run_rollups' main counters as they follow from the stored runs."""
    return query(
        db_url,
        "SELECT agent_name, date_trunc('hour', started_at, 'UTC') AS bucket, count(*), "
        "count(ended_at), count(*) FILTER (WHERE loop_detected), "
        "count(*) FILTER (WHERE termination_reason = 'error'), sum(step_count), "
        "sum(llm_calls), sum(input_tokens), sum(output_tokens), round(sum(cost_usd)::numeric, 6), "
        "count(*) FILTER (WHERE detected_loop) "
        "FROM agent_runs WHERE project_id = %s AND started_at >= %s GROUP BY 1, 2 ORDER BY 1, 2",
        (project_id, since or datetime(1970, 1, 1, tzinfo=UTC)),
    )


def stored_run_rollups(db_url: str, project_id: str, since: datetime | None = None) -> list:
    return query(
        db_url,
        "SELECT agent_name, bucket, runs, finished_runs, loop_runs, error_runs, steps, "
        "llm_calls, input_tokens, output_tokens, round(cost_usd::numeric, 6), "
        f"detected_loop_runs FROM {RUN_ROLLUPS_SUMMED} r WHERE project_id = %s AND bucket >= %s "
        "ORDER BY 1, 2",
        (project_id, since or datetime(1970, 1, 1, tzinfo=UTC)),
    )


def counts(db_url: str, project_id: str) -> dict[str, int]:
    """How many rows of each table the project has."""
    tables = {
        "runs": "agent_runs", "steps": "agent_steps", "model_calls": "ai_traces",
        "alert_events": "alert_events", "otlp_runs": "otlp_runs", "otlp_spans": "otlp_spans",
    }  # fmt: skip
    return {
        name: query(db_url, f"SELECT count(*) FROM {table} WHERE project_id = %s", (project_id,))[
            0
        ][0]
        for name, table in tables.items()
    }


def add_alert_event(db_url: str, project_id: str, run_id: str | None, fired_at: datetime) -> None:
    """An alert event as the evaluator writes one (the outbox row), about ``run_id``."""
    query_commit(
        db_url,
        "INSERT INTO alert_events (id, project_id, rule_name, state, run_id, metric, fired_at, "
        "body) VALUES (gen_random_uuid(), %s, 'test', 'firing', %s, 'steps', %s, %s)",
        (project_id, run_id, fired_at, json.dumps({"run_id": run_id}).encode()),
    )


def query_commit(db_url: str, sql: str, params: tuple = ()) -> None:
    import psycopg

    with psycopg.connect(db_url, autocommit=True) as conn:
        conn.execute(sql, params)


def shifted(document: dict, by: timedelta) -> dict:
    """An OTLP export with every ``…UnixNano`` time moved ``by`` (earlier, if negative)."""
    nanos = int(by.total_seconds() * 1e9)

    def walk(value):
        if isinstance(value, dict):
            return {
                key: str(int(item) + nanos) if key.endswith("UnixNano") else walk(item)
                for key, item in value.items()
            }
        if isinstance(value, list):
            return [walk(item) for item in value]
        return value

    return walk(document)
