"""Ingest throughput of `keelwave serve`, against raw COPY into the same table.

    python bench/ingest.py [--seconds 10] [--clients 16] [--batch 100] [--embedded]

Creates a scratch database on the PostgreSQL at KEELWAVE_BENCH_DATABASE_URL
(default postgresql://postgres@127.0.0.1:5432/postgres), starts a real
`keelwave serve` on it (with --embedded: `keelwave serve` on its own embedded
database in a scratch data directory, as a newcomer runs it), and measures:

1. batched ingest: N clients each posting batches of steps in a loop;
2. single-step ingest: N clients posting one step per request, then single
   steps sent at half the rate that reached (open loop), for latency;
3. the baseline: the same kind of rows written with COPY straight into a copy
   of agent_steps with the same indexes, in 5,000-row transactions.

A step counts only once its request was acknowledged, and the server
acknowledges only after commit. The load generator runs in this process, on
the same machine: its CPU cost is part of what is measured.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path

import aiohttp
import psycopg
from psycopg.conninfo import make_conninfo

from keelwave.cli.common import redact
from keelwave.db.embedded import EmbeddedPostgres

ADMIN_URL = os.environ.get(
    "KEELWAVE_BENCH_DATABASE_URL", "postgresql://postgres@127.0.0.1:5432/postgres"
)


def scratch_database() -> tuple[str, str]:
    name = f"kw_bench_{os.getpid()}"
    with psycopg.connect(ADMIN_URL, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        conn.execute(f'CREATE DATABASE "{name}"')
    return name, database_url(name)


def database_url(name: str) -> str:
    """ADMIN_URL with another database: as a URL when ADMIN_URL is one without a query
    string, else as key=value pairs (a URL's ``?host=/run/postgresql`` says a socket)."""
    if ADMIN_URL.startswith(("postgresql://", "postgres://")) and "?" not in ADMIN_URL:
        return ADMIN_URL.rsplit("/", 1)[0] + "/" + name
    return make_conninfo(ADMIN_URL, dbname=name)


def drop_database(name: str) -> None:
    with psycopg.connect(ADMIN_URL, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def start_server(
    db_url: str | None, workers: int | None = None, data_dir: Path | None = None
) -> tuple[subprocess.Popen, str, str | None]:
    """Start `keelwave serve` on ``db_url`` (or its embedded database in ``data_dir``);
    return it, its URL, and the first key if it printed one."""
    extra = ["--workers", str(workers)] if workers else []
    extra += ["--database-url", db_url] if db_url else ["--data-dir", str(data_dir)]
    command = [sys.executable, "-m", "keelwave.cli", "serve", "--port", "0",
               "--log-level", "warning", *extra]  # fmt: skip
    process = subprocess.Popen(
        command, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True
    )
    key = url = None
    for line in process.stdout:
        if match := re.search(r"\b(kw_[A-Za-z0-9_-]{40,})", line):
            key = match.group(1)
        if match := re.search(r"listening on (http://\S+)", line):
            url = match.group(1)
            break
    if not url:
        raise SystemExit("keelwave serve did not start")
    return process, url, key


class RssSampler:
    """Samples the resident memory of the server's processes once a second (Linux)."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.samples: list[float] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> RssSampler:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def start(self) -> RssSampler:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()

    def _run(self) -> None:
        while not self._stop.wait(1.0):
            pids = [self.pid, *_children(self.pid)]
            self.samples.append(sum(_rss_mib(pid) for pid in pids))


def _children(pid: int) -> list[int]:
    """The processes ``pid`` started, from any of its threads (workers start from one)."""
    children = []
    for task in Path(f"/proc/{pid}/task").glob("*"):
        try:
            children += [int(child) for child in (task / "children").read_text().split()]
        except OSError:
            pass
    return children


def _rss_mib(pid: int) -> float:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return 0.0


def step_body(run_id: str, first_index: int, count: int) -> bytes:
    steps = [
        {
            "run_id": run_id,
            "step_index": first_index + k,
            "tool_name": "web_search",
            "tool_input": {"q": f"query {first_index + k}", "max_results": 3},
            "tool_output": {"results": ["a", "b", "c"]},
            "duration_ms": 12.5,
        }
        for k in range(count)
    ]
    return json.dumps(steps if count > 1 else steps[0]).encode()


async def load(url: str, key: str, clients: int, batch: int, seconds: float) -> dict:
    headers = {"Authorization": f"Bearer {key}", "Content-Type": "application/json"}
    latencies: list[float] = []
    acknowledged = 0
    failures = 0

    # Bodies are built before the clock starts, so it measures the server, not
    # json.dumps: each client has 64 bodies for a run id it swaps in (bytes.replace)
    # every time it starts a new run.
    placeholder = str(uuid.UUID(int=0))
    templates = [step_body(placeholder, 1 + m * batch, batch) for m in range(64)]

    async def client(session: aiohttp.ClientSession) -> None:
        nonlocal acknowledged, failures
        n = 0
        while time.perf_counter() < deadline:
            if n % len(templates) == 0:
                run_id = str(uuid.uuid4()).encode()
            body = templates[n % len(templates)].replace(placeholder.encode(), run_id)
            started = time.perf_counter()
            async with session.post(
                f"{url}/v1/ingest/agent/steps", data=body, headers=headers
            ) as response:
                await response.read()
                if response.status == 200:
                    acknowledged += batch
                    latencies.append(time.perf_counter() - started)
                else:
                    failures += 1
            n += 1

    connector = aiohttp.TCPConnector(limit=clients)
    async with aiohttp.ClientSession(connector=connector) as session:
        _quiet_collector()
        started = time.perf_counter()
        deadline = started + seconds
        await asyncio.gather(*[client(session) for _ in range(clients)])
        elapsed = time.perf_counter() - started
    latencies.sort()
    return {
        "steps_per_s": acknowledged / elapsed,
        "requests_per_s": len(latencies) / elapsed,
        "p50_ms": 1000 * statistics.median(latencies) if latencies else None,
        "p99_ms": 1000 * latencies[int(len(latencies) * 0.99) - 1] if latencies else None,
        "failures": failures,
    }


async def paced(url: str, key: str, rate: float, seconds: float) -> dict:
    """Single-step requests sent at a fixed ``rate`` (open loop), whatever the answers do.

    Latency counts from when a request was due, not when it was sent, so a
    server falling behind shows as latency instead of a slower sender.
    """
    headers = {"Authorization": f"Bearer {key}", "Content-Type": "application/json"}
    count = int(rate * seconds)
    run_id = str(uuid.uuid4())
    bodies = [step_body(run_id, index, 1) for index in range(count)]
    latencies: list[float] = []
    failures = 0

    async def one(session: aiohttp.ClientSession, due: float, body: bytes) -> None:
        nonlocal failures
        async with session.post(f"{url}/v1/ingest/agent/steps", data=body, headers=headers) as r:
            await r.read()
            if r.status == 200:
                latencies.append(time.perf_counter() - due)
            else:
                failures += 1

    connector = aiohttp.TCPConnector(limit=256)
    async with aiohttp.ClientSession(connector=connector) as session:
        # Each request is started when it is due (not all of them up front: tens of
        # thousands of waiting tasks would slow this process, and show as latency),
        # and forgotten once answered: keeping every finished task made this
        # process's own garbage collections pause it for 100-200 ms, which showed
        # as the server's latency.
        _quiet_collector()
        start = time.perf_counter()
        running: set[asyncio.Task] = set()
        for n, body in enumerate(bodies):
            due = start + n / rate
            if (delay := due - time.perf_counter()) > 0:
                await asyncio.sleep(delay)
            task = asyncio.create_task(one(session, due, body))
            running.add(task)
            task.add_done_callback(running.discard)
        await asyncio.gather(*running)
        elapsed = time.perf_counter() - start
    latencies.sort()
    return {
        "steps_per_s": len(latencies) / elapsed,
        "requests_per_s": len(latencies) / elapsed,
        "p50_ms": 1000 * statistics.median(latencies) if latencies else None,
        "p99_ms": 1000 * latencies[int(len(latencies) * 0.99) - 1] if latencies else None,
        "failures": failures,
    }


def checkpoint(db_url: str) -> None:
    """Write out what the phase before left in PostgreSQL's buffers and WAL before the
    next one starts (as pgbench's documentation advises between runs): otherwise the
    checkpoint that a saturating phase set off lands in the next, and one stall of the
    disk's WAL sync (about 200 ms, seen on the 2-core machines) becomes the half-rate
    phase's p99 (docs/benchmarks.md, session 23)."""
    with psycopg.connect(db_url, autocommit=True) as conn:
        conn.execute("CHECKPOINT")


def _quiet_collector() -> None:
    """Leave what exists now out of this process's garbage collections: they walk
    every container object, and a pause here is counted as the server's latency."""
    gc.collect()
    gc.freeze()


def raw_copy(db_url: str, rows: int) -> float:
    """COPY pre-formatted rows into a copy of agent_steps, 5,000 rows a transaction."""
    project = uuid.uuid4()
    chunk = 5000
    with psycopg.connect(db_url, autocommit=True) as conn:
        conn.execute("CREATE TABLE bench_copy (LIKE agent_steps INCLUDING ALL)")
        lines = []
        for index in range(chunk):
            run_id = uuid.uuid4() if index % 100 == 0 else run_id  # noqa: F821
            tool_input = json.dumps({"q": f"query {index}", "max_results": 3})
            fingerprint = os.urandom(32).hex()
            lines.append(
                f"{project}\t{run_id}\t{index}\ttool_call\tweb_search\t{tool_input}\t"
                f'{{"results": ["a", "b", "c"]}}\t\\N\t\\\\x{fingerprint}\t'
                f"2026-11-30 09:00:00+00\t12.5\t\\N\n"
            )
        block = "".join(lines).encode()
        columns = (
            "project_id, run_id, step_index, step_type, tool_name, tool_input, "
            "tool_output, content, input_fingerprint, started_at, duration_ms, error"
        )
        started = time.perf_counter()
        written = 0
        while written < rows:
            with (
                conn.transaction(),
                conn.cursor().copy(f"COPY bench_copy ({columns}) FROM STDIN") as copy,
            ):
                copy.write(block)
            written += chunk
        return written / (time.perf_counter() - started)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=10)
    parser.add_argument("--clients", type=int, default=16)
    parser.add_argument("--batch", type=int, default=100)
    parser.add_argument("--workers", type=int, default=None, help="server processes")
    parser.add_argument("--rss", action="store_true", help="report server memory over the run")
    parser.add_argument("--json", help="also write the results to this file (bench/all.py)")
    parser.add_argument(
        "--embedded", action="store_true", help="keelwave's embedded database (Unix socket)"
    )
    args = parser.parse_args()

    with tempfile.TemporaryDirectory(prefix="kw-bench-") as scratch:
        if args.embedded:
            name, data_dir = None, Path(scratch)
            process, url, key = start_server(None, args.workers, data_dir)
            db_url = EmbeddedPostgres(data_dir).conninfo
        else:
            name, db_url = scratch_database()
            process, url, key = start_server(db_url, args.workers)
        try:
            with RssSampler(process.pid) as rss:
                batched = asyncio.run(load(url, key, args.clients, args.batch, args.seconds))
            checkpoint(db_url)
            single = asyncio.run(load(url, key, args.clients, 1, args.seconds))
            checkpoint(db_url)
            half = asyncio.run(paced(url, key, single["requests_per_s"] / 2, args.seconds))
            checkpoint(db_url)
            # (while the server is up, idle: it owns the embedded database)
            copy_rate = raw_copy(db_url, max(50_000, int(batched["steps_per_s"] * args.seconds)))
        finally:
            process.terminate()
            process.wait()
            if name:
                drop_database(name)

    where = "embedded PostgreSQL" if args.embedded else redact(db_url)
    print(
        f"python: {sys.executable} ({sys.version.split()[0]}); {os.cpu_count()} cores; "
        f"server workers: {args.workers or 'default (one per core)'}; database: {where}"
    )
    print(f"{'workload':<34}{'steps/s':>10}{'req/s':>10}{'p50 ms':>9}{'p99 ms':>9}")
    for label, result in (
        (f"batched ({args.batch}/request, {args.clients} clients)", batched),
        (f"single step ({args.clients} clients)", single),
        ("single step at half that rate", half),
    ):
        print(
            f"{label:<34}{result['steps_per_s']:>10.0f}{result['requests_per_s']:>10.0f}"
            f"{result['p50_ms']:>9.1f}{result['p99_ms']:>9.1f}"
            + (f"  ({result['failures']} failed)" if result["failures"] else "")
        )
    print(f"{'raw COPY baseline (5000/txn)':<34}{copy_rate:>10.0f}")
    print(f"batched ingest / raw COPY = {batched['steps_per_s'] / copy_rate:.0%}")
    if args.rss and rss.samples:
        series = ", ".join(f"{mib:.0f}" for mib in rss.samples)
        print(f"server RSS during the batched run, MiB, once a second: {series}")
    if args.json:
        results = {"batched": batched, "single": single, "half_rate": half,
                   "copy_steps_per_s": copy_rate, "rss_mib": rss.samples,
                   "database": where}  # fmt: skip
        Path(args.json).write_text(json.dumps(results))


if __name__ == "__main__":
    main()
