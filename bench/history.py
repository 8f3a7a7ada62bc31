"""Ingest with a month of history behind it, on plain PostgreSQL and on TimescaleDB
with that history compressed — the workload of a team that has used keelwave a while.

    python bench/history.py --url postgresql://postgres@127.0.0.1:5432/postgres \\
        [--tsdb postgresql://postgres@127.0.0.1:5433/postgres] [--runs 200000] \\
        [--seconds 20] [--clients 8] [--planner both]

For each database: a scratch database is made and migrated, and ``--runs``
finished runs (10 steps and 2 model calls each) are written over the last 30
days with SQL; on TimescaleDB every chunk older than the policy's 7 days is
then compressed. A real ``keelwave serve`` (one process) takes the load:
``--clients`` clients each start a run, send its 20 steps in two batches, a
model call and the finish, and one step in ten goes to a run of the history
(a late step), as agents that resume do. Steps count once acknowledged.

``--planner`` runs the server with the writer's planner settings
(lane.PLANNER_SETTINGS) as shipped, without them, or both, one after the
other: the figures say whether the settings still earn their place.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import sys
import tempfile
import time
import uuid
from pathlib import Path

import aiohttp
import psycopg

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
from serve_process import ServeProcess  # noqa: E402

from keelwave.db import keys as key_store  # noqa: E402
from keelwave.db import migrate  # noqa: E402

BACKFILL = """
WITH runs AS (
    SELECT gen_random_uuid() AS id, now() - n * (interval '30 days' / {runs}) AS started_at, n
    FROM generate_series(1, {runs}) AS n
), r AS (
    INSERT INTO agent_runs (project_id, id, agent_name, started_at, ended_at, termination_reason,
                            duration_ms, step_count, llm_calls, input_tokens, last_activity_at)
    SELECT '{project}', id, 'agent-' || n % 5, started_at, started_at + interval '20 seconds',
           'clean', 20000, 10, 2, 2000, started_at + interval '20 seconds'
    FROM runs RETURNING id, started_at
), s AS (
    INSERT INTO agent_steps (project_id, run_id, step_index, step_type, tool_name, tool_input,
                             tool_output, input_fingerprint, started_at, duration_ms)
    SELECT '{project}', id, i, 'tool_call', 'search',
           json_build_object('q', 'question ' || i, 'max_results', 5),
           json_build_object('results', json_build_array('a result of some length', i)),
           sha256(('search' || i)::bytea), started_at + i * interval '1 second', 120
    FROM r, generate_series(1, 10) AS i
)
INSERT INTO ai_traces (project_id, id, run_id, step_index, provider, model, input_tokens,
                       output_tokens, cost_usd, latency_ms, started_at)
SELECT '{project}', gen_random_uuid(), id, i * 5, 'openai', 'gpt-4o', 1000, 50, 0.003, 900,
       started_at + i * interval '5 seconds'
FROM r, generate_series(1, 2) AS i
"""


def scratch(admin_url: str, name: str, runs: int, compress: bool) -> tuple[str, str, list]:
    with psycopg.connect(admin_url, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        conn.execute(f'CREATE DATABASE "{name}"')
    url = admin_url.rsplit("/", 1)[0] + "/" + name
    migrate.upgrade(url)
    with psycopg.connect(url, autocommit=True) as conn:
        created = key_store.create_key(conn, "bench", "all")
        started = time.perf_counter()
        conn.execute(BACKFILL.format(runs=runs, project=created.project_id))
        print(f"  backfilled {runs} runs in {time.perf_counter() - started:.0f} s", flush=True)
        if compress:
            started = time.perf_counter()
            for table in ("agent_steps", "ai_traces"):
                conn.execute(
                    f"SELECT compress_chunk(c, true) FROM show_chunks('{table}', "
                    "older_than => INTERVAL '7 days') AS c"
                )
            print(f"  compressed in {time.perf_counter() - started:.0f} s", flush=True)
        conn.execute("VACUUM ANALYZE")
        old = [row[0] for row in conn.execute("SELECT id FROM agent_runs LIMIT 2000")]
    return url, created.key, old


async def load(url: str, key: str, old_runs: list, seconds: float, clients: int) -> dict:
    headers = {"Authorization": f"Bearer {key}"}
    acknowledged = 0
    latencies: list[float] = []
    deadline = time.perf_counter() + seconds
    late_index = iter(range(1000, 10**9))

    async def post(session: aiohttp.ClientSession, path: str, body: object) -> None:
        started = time.perf_counter()
        async with session.post(url + path, data=json.dumps(body), headers=headers) as answer:
            await answer.read()
            assert answer.status < 300, (path, answer.status)
        latencies.append(time.perf_counter() - started)

    async def client(number: int) -> None:
        nonlocal acknowledged
        rng = random.Random(number)
        async with aiohttp.ClientSession() as session:
            while time.perf_counter() < deadline:
                run_id = str(uuid.uuid4())
                await post(session, "/v1/ingest/agent/runs", {"id": run_id, "agent_name": "live"})
                for first in (1, 11):
                    steps = [
                        {"run_id": run_id, "step_index": i, "tool_name": "search",
                         "tool_input": {"q": f"question {rng.random()}", "max_results": 5},
                         "tool_output": {"results": ["a result of some length", i]},
                         "duration_ms": 120}
                        for i in range(first, first + 10)
                    ]  # fmt: skip
                    await post(session, "/v1/ingest/agent/steps", steps)
                    acknowledged += len(steps)
                await post(
                    session,
                    "/v1/ingest/ai",
                    {"id": str(uuid.uuid4()), "run_id": run_id, "provider": "openai",
                     "model": "gpt-4o", "input_tokens": 1000, "output_tokens": 50},
                )  # fmt: skip
                if rng.random() < 0.1:  # a late step of a run of the history
                    late = {"run_id": str(rng.choice(old_runs)), "step_index": next(late_index),
                            "tool_name": "resume"}  # fmt: skip
                    await post(session, "/v1/ingest/agent/steps", late)
                    acknowledged += 1
                finish = {"termination_reason": "clean"}
                await post(session, f"/v1/ingest/agent/runs/{run_id}/finish", finish)

    started = time.perf_counter()
    await asyncio.gather(*(client(n) for n in range(clients)))
    elapsed = time.perf_counter() - started
    latencies.sort()
    return {
        "steps_per_second": acknowledged / elapsed,
        "p50_ms": latencies[len(latencies) // 2] * 1000,
        "p99_ms": latencies[int(len(latencies) * 0.99)] * 1000,
    }


def serve(url: str, settings: tuple[str, ...] | None, log: Path) -> ServeProcess:
    """The shipped server; with ``settings``, the writer plans with those instead of
    what it would choose (set before the server starts, by a sitecustomize module on
    PYTHONPATH, which Python runs first in the process)."""
    env = {}
    if settings is not None:
        folder = Path(tempfile.mkdtemp(prefix="kw_bench_"))
        (folder / "sitecustomize.py").write_text(
            "import keelwave.server.store.lane as lane\n"
            f"lane.PLANNER_SETTINGS = lane.TIMESCALEDB_PLANNER_SETTINGS = {settings!r}\n"
        )
        env["PYTHONPATH"] = os.pathsep.join([str(folder), os.environ.get("PYTHONPATH", "")])
    return ServeProcess("--database-url", url, "--workers", "1", env=env, log=log)


def planner_variants(choice: str, custom: str | None) -> list[tuple[str, tuple | None]]:
    from keelwave.server.store.lane import PLANNER_SETTINGS

    variants = {
        "shipped": [("as shipped", None)],
        "on": [("all on", PLANNER_SETTINGS)],
        "off": [("all off", ())],
        "both": [("all on", PLANNER_SETTINGS), ("all off", ())],
    }[choice]
    if custom is not None:
        variants.append((custom, tuple(s.strip() for s in custom.split(";") if s.strip())))
    return variants


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", default="postgresql://postgres@127.0.0.1:5432/postgres")
    parser.add_argument("--tsdb", help="an admin URL of a PostgreSQL with TimescaleDB")
    parser.add_argument("--runs", type=int, default=200_000)
    parser.add_argument("--seconds", type=float, default=20)
    parser.add_argument("--clients", type=int, default=8)
    parser.add_argument(
        "--planner", choices=("shipped", "on", "off", "both"), default="both",
        help="the writer's planner settings: as shipped, all of lane.PLANNER_SETTINGS, none",
    )  # fmt: skip
    parser.add_argument("--also", help='one more variant: settings such as "jit = off; …"')
    parser.add_argument("--skip-plain", action="store_true", help="only the TimescaleDB run")
    parser.add_argument("--json", help="also write the results to this file")
    args = parser.parse_args()
    targets = [] if args.skip_plain else [("postgresql", args.url, False)]
    if args.tsdb:
        targets.append(("timescaledb, compressed", args.tsdb, True))
    planners = planner_variants(args.planner, args.also)
    results = []
    print(f"python {sys.version.split()[0]} ({sys.executable})")
    for label, admin, compress in targets:
        print(f"{label}:", flush=True)
        url, key, old = scratch(admin, "kw_bench_history", args.runs, compress)
        for name, settings in planners:
            server = serve(url, settings, Path(os.devnull))
            try:
                figures = asyncio.run(load(server.url, key, old, args.seconds, args.clients))
            finally:
                server.stop()
            figures.update(database=label, planner_settings=name)
            results.append(figures)
            print(
                f"  planner settings {name}: "
                f"{figures['steps_per_second']:8.0f} steps/s, p50 {figures['p50_ms']:5.1f} ms, "
                f"p99 {figures['p99_ms']:6.1f} ms",
                flush=True,
            )
        with psycopg.connect(admin, autocommit=True) as conn:
            conn.execute('DROP DATABASE IF EXISTS "kw_bench_history" WITH (FORCE)')
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
