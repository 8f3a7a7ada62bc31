"""Retention at the query issue's scale: how long `serve` takes to enforce it, and what
ingest does meanwhile, against ingest without it, in the same run.

    python bench/retention.py --url postgresql://postgres@127.0.0.1:5432/postgres \\
        [--tsdb postgresql://postgres@127.0.0.1:5433/postgres] [--runs 200000] \\
        [--clients 8] [--seconds 20] [--batch-runs 256] [--json out.json]

For each database: bench/history.py's history (``--runs`` finished runs over the last 30
days, 10 steps and 2 model calls each, written with SQL; on TimescaleDB every chunk
older than 7 days compressed) and one real `keelwave serve` (one process) enforcing
retention every two seconds. The load is history.py's: clients that start a run, send
20 steps in two batches, a model call and the finish, and now and then a late step of
a run of the last days. Phases, each measured with that load:

1. without enforcement, ``--seconds`` long: the baseline;
2. retention set to 29 days: a day of history goes (what a server with retention
   deletes every day, in one round instead of 144 ten-minute ones);
3. retention set to 7 days: 22 more days go (a first enforcement on an old database);
4. after it, ``--seconds`` more: is the space the deletes freed reused?

Ingest during enforcement is compared with the mean of phases 1 and 4 (the machine's
speed drifts; on a shared machine take one run's ratio as ±20%).

Phases 2 and 3 last as long as the enforcement round does (read from the server's
retention_enforcement row). Table sizes and dead tuples are read from the catalog.
``--batch-runs`` sets erasure.MAX_RUNS in the server (a sitecustomize module, as
history.py does for planner settings): past 256 runs a batch locks whole run groups,
and every writer waits for it. ``--pause`` sets retention.PAUSE_RATIO: the enforcer
sleeps that many times as long as each batch took.
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
sys.path.insert(0, str(Path(__file__).resolve().parent))
from history import BACKFILL  # noqa: E402
from serve_process import ServeProcess  # noqa: E402

from keelwave.db import keys as key_store  # noqa: E402
from keelwave.db import migrate  # noqa: E402
from keelwave.server.store.recount import recount  # noqa: E402

TABLES = ("agent_runs", "agent_steps", "ai_traces", "agent_run_rollups", "agent_tool_rollups")
NAME = "kw_bench_retention"


def build(admin_url: str, runs: int, compress: bool) -> tuple[str, str, str, list]:
    with psycopg.connect(admin_url, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{NAME}" WITH (FORCE)')
        conn.execute(f'CREATE DATABASE "{NAME}"')
    url = admin_url.rsplit("/", 1)[0] + "/" + NAME
    migrate.upgrade(url)
    with psycopg.connect(url, autocommit=True) as conn:
        created = key_store.create_key(conn, "bench", "all")
        started = time.perf_counter()
        conn.execute(BACKFILL.format(runs=runs, project=created.project_id))
        # As the server would have left them: counted in every rollup, and judged.
        recount(conn, created.project_id)
        conn.execute("UPDATE agent_runs SET verdict_steps = step_count")
        print(f"  history: {runs} runs in {time.perf_counter() - started:.0f} s", flush=True)
        if compress:
            for table in ("agent_steps", "ai_traces"):
                conn.execute(
                    f"SELECT compress_chunk(c, true) FROM show_chunks('{table}', "
                    "older_than => INTERVAL '7 days') AS c"
                )
        conn.execute("VACUUM ANALYZE")
        recent = [
            row[0]
            for row in conn.execute(
                "SELECT id FROM agent_runs WHERE started_at > now() - interval '6 days' LIMIT 2000"
            )
        ]
    return url, created.key, created.project_id, recent


class Load:
    """history.py's clients, until told to stop; counts acknowledged steps."""

    def __init__(self, url: str, key: str, recent: list, clients: int) -> None:
        self.url, self.recent, self.clients = url, recent, clients
        self.headers = {"Authorization": f"Bearer {key}"}
        self.steps = 0
        self.latencies: list[float] = []
        self.done: list[float] = []
        self.late = iter(range(1000, 10**9))

    async def run(self, stop: asyncio.Event) -> dict:
        self.steps, self.latencies, self.done = 0, [], []
        started = time.perf_counter()
        await asyncio.gather(*(self._client(n, stop) for n in range(self.clients)))
        elapsed = time.perf_counter() - started
        ordered = sorted(self.latencies)
        # The longest time in which no request of any client was answered: a stall.
        done = sorted([started, *self.done])
        gap = max(later - earlier for earlier, later in zip(done, done[1:], strict=False))
        return {
            "longest_silence_ms": round(gap * 1000, 1),
            "seconds": round(elapsed, 1),
            "steps_per_second": round(self.steps / elapsed, 1),
            "p50_ms": round(ordered[len(ordered) // 2] * 1000, 1),
            "p99_ms": round(ordered[int(len(ordered) * 0.99)] * 1000, 1),
            "max_ms": round(ordered[-1] * 1000, 1),
        }

    async def _post(self, session: aiohttp.ClientSession, path: str, body: object) -> None:
        started = time.perf_counter()
        async with session.post(self.url + path, data=json.dumps(body), headers=self.headers) as r:
            await r.read()
            assert r.status < 300, (path, r.status)
        now = time.perf_counter()
        self.latencies.append(now - started)
        self.done.append(now)

    async def _client(self, number: int, stop: asyncio.Event) -> None:
        rng = random.Random(number)
        async with aiohttp.ClientSession() as session:
            while not stop.is_set():
                run_id = str(uuid.uuid4())
                await self._post(
                    session, "/v1/ingest/agent/runs", {"id": run_id, "agent_name": "live"}
                )
                for first in (1, 11):
                    steps = [
                        {"run_id": run_id, "step_index": i, "tool_name": "search",
                         "tool_input": {"q": f"question {rng.random()}", "max_results": 5},
                         "tool_output": {"results": ["a result of some length", i]},
                         "duration_ms": 120}
                        for i in range(first, first + 10)
                    ]  # fmt: skip
                    await self._post(session, "/v1/ingest/agent/steps", steps)
                    self.steps += len(steps)
                await self._post(session, "/v1/ingest/ai", {
                    "id": str(uuid.uuid4()), "run_id": run_id, "provider": "openai",
                    "model": "gpt-4o", "input_tokens": 1000, "output_tokens": 50})  # fmt: skip
                if rng.random() < 0.1:
                    late = {"run_id": str(rng.choice(self.recent)),
                            "step_index": next(self.late), "tool_name": "resume"}  # fmt: skip
                    await self._post(session, "/v1/ingest/agent/steps", late)
                    self.steps += 1
                await self._post(session, f"/v1/ingest/agent/runs/{run_id}/finish",
                                 {"termination_reason": "clean"})  # fmt: skip


def tables(url: str) -> dict:
    """Per table: rows, dead tuples, size on disk (a hypertable's: all its chunks')."""
    found = {}
    with psycopg.connect(url, autocommit=True) as conn:
        timescale = conn.execute(
            "SELECT 1 FROM pg_extension WHERE extname = 'timescaledb'"
        ).fetchone()
        for table in TABLES:
            hyper = (
                timescale
                and conn.execute(
                    "SELECT 1 FROM timescaledb_information.hypertables WHERE hypertable_name = %s",
                    (table,),
                ).fetchone()
            )
            if hyper:
                size = conn.execute(f"SELECT hypertable_size('{table}')").fetchone()[0]
                dead = conn.execute(
                    "SELECT coalesce(sum(s.n_dead_tup), 0) FROM pg_stat_user_tables s "
                    "JOIN timescaledb_information.chunks c ON c.chunk_name = s.relname "
                    "AND c.hypertable_name = %s",
                    (table,),
                ).fetchone()[0]
            else:
                size = conn.execute(f"SELECT pg_total_relation_size('{table}')").fetchone()[0]
                dead = conn.execute(
                    "SELECT n_dead_tup FROM pg_stat_user_tables WHERE relname = %s", (table,)
                ).fetchone()[0]
            rows = conn.execute(f"SELECT count(*) FROM {table}").fetchone()[0]
            found[table] = {"rows": rows, "dead": int(dead), "mib": round(size / 2**20, 1)}
    return found


async def enforced(url: str, project_id: str, days: int, load: Load) -> dict:
    """Set the project's retention and measure the load until the server's round is done."""
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("UPDATE projects SET retention_days = %s WHERE id = %s", (days, project_id))
        set_at = conn.execute("SELECT now()").fetchone()[0]
    stop = asyncio.Event()
    task = asyncio.create_task(load.run(stop))
    deadline = time.monotonic() + 3600
    with psycopg.connect(url, autocommit=True) as conn:
        while time.monotonic() < deadline:
            row = conn.execute(
                "SELECT e.summary, e.started_at FROM retention_enforcement e, retention_sweeps s "
                "WHERE s.project_id = %s AND s.enforced_at > %s AND e.holder IS NULL "
                "AND e.finished_at > s.enforced_at "
                "AND (e.summary -> 'projects' -> 0 ->> 'retention_days')::int = %s",
                (project_id, set_at, days),
            ).fetchone()
            if row:
                break
            await asyncio.sleep(0.2)
    stop.set()
    figures = await task
    summary, _ = row
    [tally] = summary["projects"]
    return {
        "retention_days": days,
        "enforcement_seconds": summary["seconds"],
        "runs": tally["runs"],
        "steps": tally["steps"],
        "model_calls": tally["model_calls"],
        "chunks_dropped": summary["chunks_dropped"],
        "drop_seconds": summary.get("drop_seconds"),
        "vacuumed": summary["vacuumed"],
        "load": figures,
    }


async def phases(
    server: str, url: str, key: str, project_id: str, recent: list, args: argparse.Namespace
) -> dict:
    load = Load(server, key, recent, args.clients)
    timed = asyncio.Event()
    asyncio.get_running_loop().call_later(args.seconds, timed.set)
    result: dict = {"baseline": await load.run(timed), "tables_before": tables(url)}
    print(f"  baseline: {result['baseline']}", flush=True)
    for days in (29, 7):
        result[f"retention_{days}d"] = await enforced(url, project_id, days, load)
        result[f"tables_after_{days}d"] = tables(url)
        print(f"  {days} days: {result[f'retention_{days}d']}", flush=True)
    timed = asyncio.Event()
    asyncio.get_running_loop().call_later(args.seconds, timed.set)
    result["after"] = await load.run(timed)
    result["tables_after_more_ingest"] = tables(url)
    print(f"  after: {result['after']}", flush=True)
    for name in ("tables_before", "tables_after_7d", "tables_after_more_ingest"):
        print(f"  {name}: {result[name]}", flush=True)
    return result


def serve(url: str, batch_runs: int | None, pause: float | None, log: Path) -> ServeProcess:
    env = {"KEELWAVE_RETENTION_EVERY_SECONDS": "2"}
    lines = []
    if batch_runs is not None:
        lines.append(f"import keelwave.server.store.erasure as e; e.MAX_RUNS = {batch_runs}")
    if pause is not None:
        lines.append(f"import keelwave.server.store.retention as r; r.PAUSE_RATIO = {pause}")
    if lines:
        folder = Path(tempfile.mkdtemp(prefix="kw_bench_"))
        (folder / "sitecustomize.py").write_text("\n".join(lines) + "\n")
        env["PYTHONPATH"] = os.pathsep.join([str(folder), os.environ.get("PYTHONPATH", "")])
    return ServeProcess("--database-url", url, "--workers", "1", env=env, log=log)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", default="postgresql://postgres@127.0.0.1:5432/postgres")
    parser.add_argument("--tsdb", help="an admin URL of a PostgreSQL with TimescaleDB")
    parser.add_argument("--skip-plain", action="store_true", help="only the TimescaleDB run")
    parser.add_argument("--runs", type=int, default=200_000)
    parser.add_argument("--clients", type=int, default=8)
    parser.add_argument("--seconds", type=float, default=20)
    parser.add_argument("--batch-runs", type=int, help="erasure.MAX_RUNS in the server")
    parser.add_argument("--pause", type=float, help="retention.PAUSE_RATIO in the server")
    parser.add_argument("--json", help="also write the results to this file")
    args = parser.parse_args()
    targets = [] if args.skip_plain else [("postgresql", args.url, False)]
    if args.tsdb:
        targets.append(("timescaledb, compressed", args.tsdb, True))
    results = []
    print(f"python {sys.version.split()[0]}, {os.cpu_count()} cores", flush=True)
    for label, admin, compress in targets:
        print(f"{label}:", flush=True)
        url, key, project_id, recent = build(admin, args.runs, compress)
        log = Path(tempfile.mkdtemp(prefix="kw_bench_")) / "serve.log"
        server = serve(url, args.batch_runs, args.pause, log)
        try:
            figures = asyncio.run(phases(server.url, url, key, project_id, recent, args))
        finally:
            server.stop()
        figures.update(database=label, runs=args.runs, batch_runs=args.batch_runs or 256,
                       pause=args.pause or 0.0)  # fmt: skip
        results.append(figures)
        # Without enforcement: the mean of before and after it (the machine drifts).
        rates = (figures["baseline"]["steps_per_second"], figures["after"]["steps_per_second"])
        without = sum(rates) / 2
        figures["without_steps_per_second"] = round(without, 1)
        for days in (29, 7):
            phase = figures[f"retention_{days}d"]
            ratio = phase["load"]["steps_per_second"] / without
            phase["ingest_ratio"] = round(ratio, 3)
            print(f"  retention {days}d: {phase['runs']} runs in {phase['enforcement_seconds']} s;"
                  f" ingest {ratio:.0%} of without", flush=True)  # fmt: skip
        with psycopg.connect(admin, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{NAME}" WITH (FORCE)')
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=2, default=str))


if __name__ == "__main__":
    main()
