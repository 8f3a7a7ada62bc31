"""Workloads users have, against `keelwave serve`, next to raw COPY of the same rows.

    python bench/workloads.py [--seconds 15] [--clients 16] [--json out.json]
                              [--only new-user|agent-shaped] [--py-spy out.raw]

Each workload gets a fresh scratch database on the PostgreSQL at
KEELWAVE_BENCH_DATABASE_URL (default postgresql://postgres@127.0.0.1:5432/postgres)
and a real `keelwave serve` on it (its default workers: one per core). ``--clients``
aiohttp coroutines in this process (the load generator's CPU is on the same
machine, and part of what is measured) each loop over runs:

1. new-user: the load a new user writes first: start a run (POST
   /v1/ingest/agent/runs), post 5 arrays of 100 steps with tool inputs and outputs
   of a few hundred bytes each (varied text), move on to a new run, never finish it;
2. agent-shaped: runs as agents make them and the SDK batches them: a run start,
   20 steps in arrays of 5-10, 2-4 model calls (POST /v1/ingest/ai) between them,
   and the finish (POST /v1/ingest/agent/runs/finish).

Every body is built with json.dumps inside the clock, from a pool of tool inputs
and outputs made before it (with each step's own run, index, time and a varied
field). A step counts once its request was answered 200, which the server does
only after commit. Then the server is stopped and the rows it stored (runs,
steps, model calls) are COPYed, in 5,000-step transactions with their runs and
calls in proportion, into copies of the same tables with the same indexes: the
baseline, measured in the same run on the same machine.

CPU: the server's process tree, and the PostgreSQL backends connected to its
database, per acknowledged step; COPY's backend per step it copied (runs and
model calls included) and per row. Machine busy is 1 - idle over the load, all
cores, everything on the machine (this process too). Memory: the resident size of
the server's processes together, sampled once a second under the load.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import re
import signal
import subprocess
import sys
import time
import uuid
from datetime import UTC, datetime
from pathlib import Path

import aiohttp
import psutil
import psycopg

sys.path.insert(0, os.path.dirname(__file__))
from ingest import (  # noqa: E402
    RssSampler,
    _quiet_collector,
    drop_database,
    scratch_database,
    start_server,
)
from otlp import (  # noqa: E402
    DOMAINS,
    TOOLS,
    WORDS,
    _backend_cpu,
    _tree_cpu,
    spy_stages,
)

WORKLOADS = ("new-user", "agent-shaped")
TABLES = ("agent_runs", "agent_steps", "ai_traces")
AGENTS = ("research-agent", "support-triage", "code-reviewer", "data-analyst")
MODELS = (("openai", "gpt-4o-mini"), ("openai", "gpt-4o"), ("anthropic", "claude-sonnet-4-5"))
COPY_STEPS_PER_TXN = 5000
COPY_MAX_STEPS = 400_000  # the baseline's sample of what was stored (memory)
COPY_MIN_STEPS = 50_000  # fewer stored (agent-shaped): copied again under other ids
UUID = re.compile(rb"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")


# -- what clients send -------------------------------------------------------------------


def _sentence(rng: random.Random, low: int, high: int) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(rng.randint(low, high)))


def _tool_call(rng: random.Random) -> tuple[str, dict, dict]:
    """A tool, its input and its output: a few hundred bytes each, varied text."""
    tool = rng.choice(TOOLS)
    if tool == "web_search":
        given = {"query": _sentence(rng, 4, 10), "max_results": rng.choice((3, 5, 10)),
                 "reason": _sentence(rng, 8, 20)}  # fmt: skip
    elif tool == "read_file":
        start = rng.randint(1, 900)
        given = {"path": f"/srv/app/{rng.choice(WORDS)}/{rng.choice(WORDS)}.py",
                 "start_line": start, "end_line": start + rng.randint(20, 200),
                 "reason": _sentence(rng, 8, 20)}  # fmt: skip
    elif tool == "run_sql":
        given = {"database": "analytics",
                 "query": f"SELECT {rng.choice(WORDS)}, count(*) FROM {rng.choice(WORDS)}s "
                          f"WHERE created_at > now() - interval '{rng.randint(1, 90)} days' "
                          "GROUP BY 1 ORDER BY 2 DESC LIMIT 50"}  # fmt: skip
    elif tool == "http_get":
        given = {"url": f"https://api.example.com/v2/{rng.choice(WORDS)}s/{rng.randint(1, 99999)}",
                 "headers": {"Accept": "application/json"}, "timeout_s": 10,
                 "reason": _sentence(rng, 6, 14)}  # fmt: skip
    else:
        given = {"ticket_id": f"TCK-{rng.randint(1000, 99999)}", "include_history": True,
                 "fields": rng.sample(["status", "owner", "priority", "comments", "sla"], 3),
                 "reason": _sentence(rng, 6, 14)}  # fmt: skip
    items = [
        {"title": _sentence(rng, 3, 7), "snippet": _sentence(rng, 8, 25),
         "url": f"https://{rng.choice(DOMAINS)}/{rng.choice(WORDS)}/{rng.randint(1, 9999)}"}
        for _ in range(rng.choice((1, 1, 2, 3)))
    ]  # fmt: skip
    return tool, given, {"status": "ok", "elapsed_ms": rng.randint(5, 3000), "items": items}


POOL_SIZE = 1024


def tool_pool(seed: int) -> list[tuple[str, dict, dict]]:
    """Made before the clock: making varied text is the agents' work, not the sender's."""
    rng = random.Random(seed)
    return [_tool_call(rng) for _ in range(POOL_SIZE)]


def _now() -> str:
    return datetime.now(UTC).isoformat()


def _steps(rng: random.Random, pool: list, run_id: str, first: int, count: int) -> list[dict]:
    steps = []
    for index in range(first, first + count):
        tool, given, output = pool[rng.randrange(POOL_SIZE)]
        steps.append(
            {
                "run_id": run_id,
                "step_index": index,
                "step_type": "tool_call",
                "tool_name": tool,
                # the same pool entry in another run is another call: a field of its own
                "tool_input": {**given, "attempt": rng.randint(1, 3), "step": index},
                "tool_output": output,
                "started_at": _now(),
                "duration_ms": round(rng.uniform(5, 900), 1),
            }
        )
    return steps


class Tally:
    """What one workload's clients got answered."""

    def __init__(self) -> None:
        self.steps = self.runs = self.calls = self.finishes = self.failures = 0
        self.latencies: list[float] = []
        self.step_latencies: list[float] = []
        self.errors: dict[str, int] = {}


async def _post(
    session: aiohttp.ClientSession, url: str, body: bytes, tally: Tally, step_request: bool
) -> bool:
    started = time.perf_counter()
    async with session.post(url, data=body) as response:
        text = await response.read()
        if response.status in (200, 201):
            elapsed = time.perf_counter() - started
            tally.latencies.append(elapsed)
            if step_request:
                tally.step_latencies.append(elapsed)
            return True
        tally.failures += 1
        what = f"{response.status} {text[:120]!r}"
        tally.errors[what] = tally.errors.get(what, 0) + 1
        return False


async def new_user(session, base: str, pool, rng: random.Random, tally: Tally, deadline: float):
    while time.perf_counter() < deadline:
        run_id = str(uuid.uuid4())
        start = {"id": run_id, "agent_name": rng.choice(AGENTS), "started_at": _now()}
        if not await _post(session, f"{base}/v1/ingest/agent/runs",
                           json.dumps(start).encode(), tally, False):  # fmt: skip
            continue
        tally.runs += 1
        for batch in range(5):
            body = json.dumps(_steps(rng, pool, run_id, 1 + 100 * batch, 100)).encode()
            if await _post(session, f"{base}/v1/ingest/agent/steps", body, tally, True):
                tally.steps += 100


async def agent_shaped(session, base: str, pool, rng: random.Random, tally: Tally, deadline):
    while time.perf_counter() < deadline:
        run_id = str(uuid.uuid4())
        start = {"id": run_id, "agent_name": rng.choice(AGENTS), "started_at": _now(),
                 "input": {"task": _sentence(rng, 6, 16)}, "tags": ["bench"]}  # fmt: skip
        if not await _post(session, f"{base}/v1/ingest/agent/runs",
                           json.dumps(start).encode(), tally, False):  # fmt: skip
            continue
        tally.runs += 1
        sizes, left = [], 20
        while left:
            size = min(left, rng.randint(5, 10))
            sizes.append(size)
            left -= size
        calls = rng.randint(2, 4)
        # The SDK's sender posts what queued up, by kind: model calls land between
        # step batches, one or two to a request.
        call_after = sorted(rng.choice(range(len(sizes))) for _ in range(calls))
        index = 0
        for position, size in enumerate(sizes):
            for _ in range(call_after.count(position)):
                provider, model = rng.choice(MODELS)
                call = {"id": str(uuid.uuid4()), "run_id": run_id, "step_index": index + 1,
                        "provider": provider, "model": model, "started_at": _now(),
                        "input_tokens": rng.randint(200, 4000),
                        "output_tokens": rng.randint(20, 800),
                        "latency_ms": round(rng.uniform(300, 4000), 1)}  # fmt: skip
                if await _post(session, f"{base}/v1/ingest/ai",
                               json.dumps([call]).encode(), tally, False):  # fmt: skip
                    tally.calls += 1
            body = json.dumps(_steps(rng, pool, run_id, index + 1, size)).encode()
            if await _post(session, f"{base}/v1/ingest/agent/steps", body, tally, True):
                tally.steps += size
            index += size
        finish = [{"id": run_id, "termination_reason": "clean", "ended_at": _now(),
                   "output": {"answer": _sentence(rng, 8, 20)}}]  # fmt: skip
        if await _post(session, f"{base}/v1/ingest/agent/runs/finish",
                       json.dumps(finish).encode(), tally, False):  # fmt: skip
            tally.finishes += 1


async def load(workload: str, base: str, key: str, clients: int, seconds: float) -> tuple:
    pool = tool_pool(7)
    tally = Tally()
    client = new_user if workload == "new-user" else agent_shaped
    headers = {"Authorization": f"Bearer {key}", "Content-Type": "application/json"}
    connector = aiohttp.TCPConnector(limit=clients)
    async with aiohttp.ClientSession(connector=connector, headers=headers) as session:
        _quiet_collector()
        started = time.perf_counter()
        deadline = started + seconds
        await asyncio.gather(
            *[client(session, base, pool, random.Random(n), tally, deadline)
              for n in range(clients)]
        )  # fmt: skip
        elapsed = time.perf_counter() - started
    return tally, elapsed


# -- the baseline: COPY of what was stored -------------------------------------------------


def _columns(conn: psycopg.Connection, table: str) -> list[str]:
    return [
        row[0]
        for row in conn.execute(
            "SELECT column_name FROM information_schema.columns WHERE table_name = %s "
            "AND table_schema = current_schema() AND is_generated = 'NEVER' "
            "ORDER BY ordinal_position",
            (table,),
        )
    ]


def raw_copy(db_url: str) -> dict:
    """COPY the stored rows into empty copies of their tables (same indexes): 5,000
    steps a transaction, each with its share of the runs and model calls."""
    with psycopg.connect(db_url, autocommit=True) as conn:
        stored = {t: conn.execute(f"SELECT count(*) FROM {t}").fetchone()[0] for t in TABLES}
        share = min(1.0, COPY_MAX_STEPS / max(1, stored["agent_steps"]))
        lines, columns = {}, {}
        for table in TABLES:
            columns[table] = ", ".join(_columns(conn, table))
            limit = int(stored[table] * share)
            with conn.cursor().copy(
                f"COPY (SELECT {columns[table]} FROM {table} LIMIT {limit}) TO STDOUT"
            ) as copy:
                data = b"".join(copy)
            # Too few rows for a steady rate: the same rows again, each id's first two
            # hex digits replaced by the copy's number (ids stay distinct, runs keep
            # their steps and calls).
            copies = max(1, -(-COPY_MIN_STEPS // max(1, stored["agent_steps"])))
            data += b"".join(
                UUID.sub(lambda m, k=k: b"%02x" % k + m.group()[2:], data)
                for k in range(1, min(copies, 256))
            )
            lines[table] = data.splitlines(keepends=True)
            conn.execute(f"CREATE TABLE bench_{table} (LIKE {table} INCLUDING ALL)")
        steps = len(lines["agent_steps"])
        chunks = max(1, -(-steps // COPY_STEPS_PER_TXN))
        blocks = [
            [(t, b"".join(lines[t][k * len(lines[t]) // chunks:(k + 1) * len(lines[t]) // chunks]))
             for t in TABLES]
            for k in range(chunks)
        ]  # fmt: skip
        del lines
        backend = psutil.Process(conn.execute("SELECT pg_backend_pid()").fetchone()[0])
        cpu0 = sum(backend.cpu_times()[:2])
        started = time.perf_counter()
        for block in blocks:
            with conn.transaction():
                for table, data in block:
                    if data:
                        with conn.cursor().copy(
                            f"COPY bench_{table} ({columns[table]}) FROM STDIN"
                        ) as copy:
                            copy.write(data)
        elapsed = time.perf_counter() - started
        cpu = sum(backend.cpu_times()[:2]) - cpu0
        copied = {t: conn.execute(f"SELECT count(*) FROM bench_{t}").fetchone()[0] for t in TABLES}
    rows = sum(copied.values())
    return {
        "seconds": elapsed,
        "copied": copied,
        "steps_per_s": copied["agent_steps"] / elapsed,
        "runs_per_s": copied["agent_runs"] / elapsed,
        "calls_per_s": copied["ai_traces"] / elapsed,
        "rows_per_s": rows / elapsed,
        "backend_cpu_us_per_step": 1e6 * cpu / max(1, copied["agent_steps"]),
        "backend_cpu_us_per_row": 1e6 * cpu / max(1, rows),
    }


# -- one workload, measured ----------------------------------------------------------------


def _machine() -> tuple[float, float]:
    """(busy, all) jiffies of the machine from /proc/stat: busy is all but idle and
    iowait; guest time is inside user already, so it is left out of both."""
    fields = [float(v) for v in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:9]]
    idle = fields[3] + fields[4]
    return sum(fields) - idle, sum(fields)


def _own_cpu() -> float:
    times = os.times()
    return times.user + times.system


def _percentile(values: list[float], fraction: float) -> float | None:
    if not values:
        return None
    values = sorted(values)
    return 1000 * values[max(0, int(len(values) * fraction) - 1)]


def measure(workload: str, args: argparse.Namespace) -> dict:
    name, db_url = scratch_database()
    process, base, key = start_server(db_url, args.workers)
    profiler = None
    try:
        workers = len(psutil.Process(process.pid).children(recursive=True)) or 1
        with psycopg.connect(db_url, autocommit=True) as watch:
            if args.py_spy and (args.only or workload == WORKLOADS[0]):
                profiler = subprocess.Popen(
                    ["py-spy", "record", "--pid", str(process.pid), "--subprocesses",
                     "--rate", "200", "--format", "raw", "-o", args.py_spy,
                     "-d", str(int(args.seconds) + 5)],
                    stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                )  # fmt: skip
                time.sleep(2)  # py-spy attaches
            server0, backends0 = _tree_cpu(process.pid), _backend_cpu(watch)
            machine0, own0 = _machine(), _own_cpu()
            with RssSampler(process.pid) as rss:
                tally, elapsed = asyncio.run(load(workload, base, key, args.clients, args.seconds))
            machine1, own1 = _machine(), _own_cpu()
            server1, backends1 = _tree_cpu(process.pid), _backend_cpu(watch)
            load_average = os.getloadavg()[0]
        if profiler is not None:
            profiler.send_signal(signal.SIGINT)
            profiler.wait(60)
    finally:
        process.terminate()
        process.wait()
    try:
        copy = raw_copy(db_url)
    finally:
        drop_database(name)
    server_cpu = server1 - server0
    backend_cpu = sum(cpu - backends0.get(pid, 0.0) for pid, cpu in backends1.items())
    steps = max(1, tally.steps)
    result = {
        "workload": workload,
        "clients": args.clients,
        "server_workers": workers,
        "seconds": elapsed,
        "steps": tally.steps,
        "runs": tally.runs,
        "model_calls": tally.calls,
        "finishes": tally.finishes,
        "failures": tally.failures,
        "errors": tally.errors,
        "steps_per_s": tally.steps / elapsed,
        "runs_per_s": tally.runs / elapsed,
        "calls_per_s": tally.calls / elapsed,
        "requests_per_s": len(tally.latencies) / elapsed,
        "p50_ms": _percentile(tally.latencies, 0.5),
        "p99_ms": _percentile(tally.latencies, 0.99),
        "step_request_p50_ms": _percentile(tally.step_latencies, 0.5),
        "step_request_p99_ms": _percentile(tally.step_latencies, 0.99),
        "server_cpu_us_per_step": 1e6 * server_cpu / steps,
        "backend_cpu_us_per_step": 1e6 * backend_cpu / steps,
        "server_cpu_s": server_cpu,
        "backend_cpu_s": backend_cpu,
        "client_cpu_us_per_step": 1e6 * (own1 - own0) / steps,
        "machine_busy": (machine1[0] - machine0[0]) / max(1.0, machine1[1] - machine0[1]),
        # CPU of everything else on the (shared) machine, in cores, over the load
        "others_cores": max(
            0.0,
            (machine1[0] - machine0[0]) / os.sysconf("SC_CLK_TCK")
            - server_cpu
            - backend_cpu
            - (own1 - own0),
        )
        / elapsed,
        "load_average_1min": load_average,
        "rss_mib": rss.samples,  # the server's processes, once a second under the load
        "copy": copy,
        "ratio_steps": (tally.steps / elapsed) / copy["steps_per_s"],
    }
    if tally.runs and copy["runs_per_s"]:
        result["ratio_runs"] = result["runs_per_s"] / copy["runs_per_s"]
    if tally.calls and copy["calls_per_s"]:
        result["ratio_calls"] = result["calls_per_s"] / copy["calls_per_s"]
    return result


def print_table(results: list[dict]) -> None:
    print(
        f"python: {sys.executable} ({sys.version.split()[0]}, the non-PGO build on PATH); "
        f"{os.cpu_count()} cores; server workers: {results[0]['server_workers']} (its default); "
        f"{results[0]['clients']} aiohttp clients in the load generator, same machine"
    )
    header = (
        f"{'workload':<14}{'steps/s':>9}{'COPY/s':>9}{'ratio':>7}{'req/s':>7}{'p50 ms':>8}"
        f"{'p99 ms':>8}{'srv us':>8}{'pg us':>7}{'COPY us':>8}{'busy':>6}"
    )
    print(header)
    for r in results:
        c = r["copy"]
        print(
            f"{r['workload']:<14}{r['steps_per_s']:>9.0f}{c['steps_per_s']:>9.0f}"
            f"{r['ratio_steps']:>7.2f}{r['requests_per_s']:>7.0f}{r['p50_ms']:>8.1f}"
            f"{r['p99_ms']:>8.1f}{r['server_cpu_us_per_step']:>8.1f}"
            f"{r['backend_cpu_us_per_step']:>7.1f}{c['backend_cpu_us_per_step']:>8.1f}"
            f"{r['machine_busy']:>6.0%}"
            + (f"  ({r['failures']} failed: {r['errors']})" if r["failures"] else "")
        )
    print("steps/s acknowledged (after commit); COPY/s: the same stored rows (runs, steps, "
          "model calls) COPYed into same-indexed copies, in steps/s; srv/pg us: CPU us per "
          "acknowledged step of the server's processes / its PostgreSQL backends; COPY us: "
          "COPY's backend CPU per step copied (its runs and calls included); busy: 1 - idle, "
          "all cores")  # fmt: skip
    for r in results:
        extra = [f"runs {r['runs_per_s']:.0f}/s vs COPY {r['copy']['runs_per_s']:.0f}/s"]
        if r.get("ratio_calls"):
            extra.append(f"model calls {r['calls_per_s']:.0f}/s vs COPY "
                         f"{r['copy']['calls_per_s']:.0f}/s")  # fmt: skip
        extra.append(f"step requests p50 {r['step_request_p50_ms']:.1f} ms, "
                     f"p99 {r['step_request_p99_ms']:.1f} ms")  # fmt: skip
        extra.append(
            f"COPY backend {r['copy']['backend_cpu_us_per_row']:.1f} us/row over "
            f"{r['copy']['copied']['agent_steps']} steps"
        )
        extra.append(f"load generator {r['client_cpu_us_per_step']:.1f} us/step")
        if rss := r["rss_mib"]:
            extra.append(f"server memory {rss[0]:.0f} .. {max(rss):.0f} .. {rss[-1]:.0f} MiB "
                         f"(first .. largest .. last of {len(rss)} samples)")  # fmt: skip
        extra.append(
            f"others on the machine {r['others_cores']:.2f} cores "
            f"(load average {r['load_average_1min']:.1f})"
        )
        print(f"  {r['workload']}: " + "; ".join(extra))


def print_spy(path: str) -> None:
    found = spy_stages(Path(path))
    total = max(1, found["samples"])
    print(f"\npy-spy, the server's processes ({found['samples']} busy samples at 200/s, "
          f"{found['idle']} in epoll left out), by stage:")  # fmt: skip
    for stage, samples in sorted(found["stages"].items(), key=lambda item: -item[1]):
        print(f"  {samples / total:>5.0%}  {stage}")
    print("  top functions by own samples:")
    for function, samples in found["own"][:12]:
        print(f"  {samples / total:>5.0%}  {function}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=15)
    parser.add_argument("--clients", type=int, default=16)
    parser.add_argument("--workers", type=int, default=None, help="server processes")
    parser.add_argument("--only", choices=WORKLOADS, help="one workload (default: both)")
    parser.add_argument("--json", help="also write the results to this file")
    parser.add_argument("--py-spy", help="profile the server (py-spy raw) into this file "
                        "during the first workload")  # fmt: skip
    args = parser.parse_args()
    results = [measure(workload, args) for workload in ([args.only] if args.only else WORKLOADS)]
    print_table(results)
    if args.py_spy and Path(args.py_spy).exists():
        print_spy(args.py_spy)
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
