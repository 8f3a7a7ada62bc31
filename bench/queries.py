"""The read API at scale: build a large data set through ingest, then time every endpoint.

    python bench/queries.py [--runs 250000] [--steps 5000000] [--days 7] [--keep DB_NAME]
    python bench/queries.py --reuse DB_NAME          # time an existing data set again
    python bench/queries.py --reuse DB_NAME --compress   # on TimescaleDB: compress, then time

The data set is sent through the real ingest API of a `keelwave serve`
(so counters and rollups are built the way production builds them): runs
spread over the last N days across 12 agents, 20 steps per run on average with
one run in eight looping, model calls with tokens, a mix of termination
reasons, and one run with 1,000 steps for /loops. Then each endpoint is
called repeatedly and its p50/p95 latency printed, against the budget.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import statistics
import sys
import time
import uuid
from datetime import UTC, datetime, timedelta

import aiohttp
import psycopg

sys.path.insert(0, os.path.dirname(__file__))
from ingest import ADMIN_URL, database_url, start_server  # noqa: E402

AGENTS = [f"agent-{name}" for name in ("research", "support", "coder", "planner", "sql",
          "browser", "triage", "writer", "review", "search", "ops", "data")]  # fmt: skip
REASONS = ["clean"] * 14 + ["error", "max_steps_reached", "context_limit", "loop_detected",
                            "timeout"]  # fmt: skip
TOOLS = ["web_search", "fetch_url", "sql_query", "read_file", "write_file", "run_tests"]


def run_batch(rng: random.Random, now: datetime, days: float, steps_per_run: int) -> tuple:
    run_id = str(uuid.uuid4())
    started = now - timedelta(seconds=rng.uniform(0, days * 86400))
    looping = rng.random() < 0.125
    n_steps = max(1, int(rng.expovariate(1 / steps_per_run)))
    steps = []
    for index in range(1, n_steps + 1):
        repeat = looping and index > n_steps // 2
        tool = TOOLS[index % len(TOOLS)] if not repeat else "web_search"
        steps.append(
            {
                "run_id": run_id,
                "step_index": index,
                "tool_name": tool,
                "tool_input": {"q": "same"} if repeat else {"q": f"{tool} {index}"},
                "duration_ms": rng.uniform(5, 800),
                "started_at": (started + timedelta(seconds=index)).isoformat(),
            }
        )
    calls = [
        {
            "run_id": run_id,
            "provider": "openai",
            "model": "gpt-4o-mini",
            "input_tokens": rng.randint(500, 8000),
            "output_tokens": rng.randint(20, 800),
            "started_at": started.isoformat(),
        }
        for _ in range(max(1, n_steps // 4))
    ]
    reason = "loop_detected" if looping and rng.random() < 0.5 else rng.choice(REASONS)
    finish = {
        "termination_reason": reason,
        "loop_detected": looping,
        "loop_step_index": n_steps // 2 + 1 if looping else None,
        "ended_at": (started + timedelta(seconds=n_steps + rng.uniform(1, 120))).isoformat(),
    }
    run = {"id": run_id, "agent_name": rng.choice(AGENTS), "started_at": started.isoformat()}
    return run, steps, calls, finish


async def build(url: str, key: str, runs: int, steps: int, days: float) -> str:
    headers = {"Authorization": f"Bearer {key}", "Content-Type": "application/json"}
    now = datetime.now(UTC)
    per_run = steps / runs
    queue: asyncio.Queue = asyncio.Queue(maxsize=256)
    sent = {"runs": 0, "steps": 0}
    started = time.perf_counter()

    async def producer() -> None:
        # Runs go out in groups of 25, each kind of event in one request, as the
        # SDKs batch them: runs, then their steps, model calls and finishes.
        rng = random.Random(42)
        for first in range(0, runs, 25):
            group = [run_batch(rng, now, days, per_run) for _ in range(min(25, runs - first))]
            await queue.put(group)
        for _ in range(8):
            await queue.put(None)

    async def post(session: aiohttp.ClientSession, path: str, body: object) -> None:
        data = json.dumps(body)
        for _attempt in range(20):
            async with session.post(url + path, data=data, headers=headers) as response:
                await response.read()
                if response.status < 300:
                    return
                await asyncio.sleep(0.2)
        raise RuntimeError(f"{path} kept failing: {response.status}")

    async def worker(session: aiohttp.ClientSession) -> None:
        while (group := await queue.get()) is not None:
            await post(session, "/v1/ingest/agent/runs", [run for run, _, _, _ in group])
            group_steps = [step for _, run_steps, _, _ in group for step in run_steps]
            await post(session, "/v1/ingest/agent/steps", group_steps)
            group_calls = [call for _, _, calls, _ in group for call in calls]
            await post(session, "/v1/ingest/ai", group_calls)
            finishes = [{"id": run["id"], **finish} for run, _, _, finish in group]
            await post(session, "/v1/ingest/agent/runs/finish", finishes)
            before = sent["runs"] // 10000
            sent["runs"] += len(group)
            sent["steps"] += len(group_steps)
            if sent["runs"] // 10000 > before:
                rate = sent["steps"] / (time.perf_counter() - started)
                print(
                    f"  {sent['runs']} runs, {sent['steps']} steps ({rate:.0f} steps/s)", flush=True
                )

    async with aiohttp.ClientSession() as session:
        await asyncio.gather(producer(), *[worker(session) for _ in range(8)])
        # One long run for /loops: 1,000 steps, a third of them repeating.
        long_run = str(uuid.uuid4())
        await session.post(
            url + "/v1/ingest/agent/runs",
            headers=headers,
            data=json.dumps({"id": long_run, "agent_name": "agent-long"}),
        )
        steps_body = [
            {
                "run_id": long_run,
                "step_index": i,
                "tool_name": "web_search",
                "tool_input": {"q": i % 3 if i % 3 == 0 else i},
            }
            for i in range(1, 1001)
        ]
        await session.post(
            url + "/v1/ingest/agent/steps", headers=headers, data=json.dumps(steps_body)
        )
    return long_run


async def measure(url: str, key: str, long_run: str, repeat: int) -> list[tuple]:
    headers = {"Authorization": f"Bearer {key}"}
    async with aiohttp.ClientSession(headers=headers) as session:
        async with session.get(url + "/v1/me") as response:
            project = (await response.json())["data"]["project_id"]
        base = f"{url}/v1/projects/{project}/agent"
        endpoints = [
            ("summary 7d", f"{base}/summary?window=7d", 200),
            ("health 7d", f"{base}/health?window=7d", 200),
            ("timeseries 7d/1h", f"{base}/runs/timeseries?window=7d&bucket=1h", 200),
            ("terminations 7d", f"{base}/runs/terminations?window=7d", 200),
            ("summary 24h", f"{base}/summary?window=24h", 200),
            ("runs first page", f"{base}/runs", 50),
            ("runs, one agent", f"{base}/runs?agent_name=agent-coder", 50),
            ("runs, looping", f"{base}/runs?loop_detected=true", 50),
            ("runs, longest first", f"{base}/runs?sort=duration_ms", 50),
            ("runs, most tokens first", f"{base}/runs?sort=tokens", 50),
            ("loops, 1000-step run", f"{base}/runs/{long_run}/loops", 10),
            ("steps, 1000-step run", f"{base}/runs/{long_run}/steps", None),
            ("tools 24h", f"{base}/tools?window=24h", 200),
            ("tools 7d", f"{base}/tools?window=7d", 200),
        ]
        results = []
        for label, endpoint, budget in endpoints:
            timings = []
            for _ in range(repeat):
                started = time.perf_counter()
                async with session.get(endpoint) as response:
                    await response.read()
                    assert response.status == 200, (label, response.status)
                timings.append((time.perf_counter() - started) * 1000)
            timings.sort()
            results.append(
                (
                    label,
                    statistics.median(timings),
                    timings[max(0, int(len(timings) * 0.95) - 1)],
                    budget,
                )
            )
        return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=250_000)
    parser.add_argument("--steps", type=int, default=5_000_000)
    parser.add_argument("--days", type=float, default=7)
    parser.add_argument("--repeat", type=int, default=20)
    parser.add_argument("--reuse", help="time an existing database made by --keep")
    parser.add_argument("--keep", help="name the database and keep it afterwards")
    parser.add_argument("--json", help="also write the results to this file (bench/all.py)")
    parser.add_argument(
        "--compress",
        action="store_true",
        help="on TimescaleDB, compress every chunk older than the policy's 7 days first",
    )
    args = parser.parse_args()

    name = args.reuse or args.keep or f"kw_bench_q_{os.getpid()}"
    db_url = database_url(name)
    if not args.reuse:
        with psycopg.connect(ADMIN_URL, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
            conn.execute(f'CREATE DATABASE "{name}"')
    process, url, key = start_server(db_url)
    try:
        if args.reuse:
            with psycopg.connect(db_url) as conn:
                key, long_run = conn.execute("SELECT key, long_run FROM bench_meta").fetchone()
        else:
            started = time.perf_counter()
            long_run = asyncio.run(build(url, key, args.runs, args.steps, args.days))
            print(f"built in {time.perf_counter() - started:.0f} s")
            with psycopg.connect(db_url, autocommit=True) as conn:
                conn.execute("VACUUM ANALYZE")
                conn.execute("CREATE TABLE IF NOT EXISTS bench_meta (key text, long_run uuid)")
                conn.execute("INSERT INTO bench_meta VALUES (%s, %s)", (key, long_run))
        if args.compress:
            with psycopg.connect(db_url, autocommit=True) as conn:
                for table in ("agent_steps", "ai_traces"):
                    conn.execute(
                        f"SELECT compress_chunk(c, true) FROM show_chunks('{table}', "
                        "older_than => INTERVAL '7 days') AS c"
                    )
                conn.execute("VACUUM ANALYZE")
        with psycopg.connect(db_url) as conn:
            runs, steps = conn.execute(
                "SELECT (SELECT count(*) FROM agent_runs), (SELECT count(*) FROM agent_steps)"
            ).fetchone()
        results = asyncio.run(measure(url, key, str(long_run), args.repeat))
    finally:
        process.terminate()
        process.wait()
    print(
        f"\n{runs:,} runs, {steps:,} steps; python {sys.version.split()[0]} "
        f"({sys.executable}); {os.cpu_count()} cores"
    )
    print(f"{'endpoint':<24}{'p50 ms':>9}{'p95 ms':>9}{'budget':>9}")
    for label, p50, p95, budget in results:
        verdict = "" if budget is None else ("  ok" if p95 <= budget else "  OVER")
        print(f"{label:<24}{p50:>9.1f}{p95:>9.1f}{budget or '':>9}{verdict}")
    if args.json:
        with open(args.json, "w") as file:
            json.dump({"runs": runs, "steps": steps, "endpoints": results}, file)
    if not (args.keep or args.reuse):
        with psycopg.connect(ADMIN_URL, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


if __name__ == "__main__":
    main()
