"""What the server's verdicts (issue 19) cost ingest, and how soon they appear.

    python bench/verdicts.py [--seconds 15] [--clients 16] [--rounds 2]

An agent workload as the SDK sends it: each client starts a run, sends its 30
steps in batches of 10 (realistic tool inputs and outputs; one run in four
repeats a call, one in eight cycles between two), and finishes it, then starts
the next. The same workload runs against `keelwave serve` with the verdict keeper
on and with KEELWAVE_SERVER_VERDICTS=false, alternately (on, off, on, off…), each
on a fresh database, so drift on a shared machine hits both. Reported:

* committed steps/s with verdicts ÷ without (the target is at least 0.9);
* how long after a run's last step was acknowledged its verdict was stored
  (p50, p95), watched from the database while the load runs;
* whether every run got the verdict its steps call for.

The load generator runs in this process, on the same machine (its CPU is
part of what is measured, in both runs alike).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import statistics
import subprocess
import sys
import threading
import time
import uuid

import aiohttp
import psycopg

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from ingest import drop_database, scratch_database  # noqa: E402

STEPS_PER_RUN = 30
BATCH = 10


def start(db_url: str, verdicts: bool) -> tuple[subprocess.Popen, str, str]:
    env = {**os.environ, "KEELWAVE_SERVER_VERDICTS": "true" if verdicts else "false"}
    command = [sys.executable, "-m", "keelwave.cli", "serve", "--port", "0", "--log-level",
               "warning", "--database-url", db_url]  # fmt: skip
    process = subprocess.Popen(
        command, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, env=env
    )
    url = None
    for line in process.stdout:
        if "listening on" in line:
            url = line.split("listening on", 1)[1].split()[0]
            break
    if url is None:
        raise SystemExit("keelwave serve did not start")
    key = subprocess.run(
        [sys.executable, "-m", "keelwave.cli", "keys", "create", "--database-url", db_url,
         "--project", "bench", "--scope", "all"],
        capture_output=True, text=True, check=True,
    ).stdout  # fmt: skip
    token = next(word for word in key.split() if word.startswith("kw_"))
    return process, url, token


def steps_of(run_id: str, number: int) -> list[list[dict]]:
    """A run's 30 steps in batches of 10: research calls with realistic payloads."""
    calls = []
    for k in range(STEPS_PER_RUN):
        query = f"pricing of plan {number}-{k} for teams in region eu-west"
        if number % 4 == 0 and k in (7, 8, 9):
            query = f"pricing of plan {number}-7 for teams in region eu-west"  # a loop
        tool = "web_search"
        if number % 8 == 1 and 10 <= k < 16:
            tool, query = ("open_page", "https://example.com/p") if k % 2 else (tool, "p")
        calls.append(
            {
                "run_id": run_id,
                "step_index": k + 1,
                "tool_name": tool,
                "tool_input": {"query": query, "max_results": 5, "safe": True},
                "tool_output": {
                    "results": [
                        {
                            "title": f"Result {r} for {query}",
                            "url": f"https://ex.com/{k}/{r}",
                            "snippet": "Teams pay per seat per month; annual plans save 20%. " * 3,
                        }
                        for r in range(3)
                    ]
                },  # fmt: skip
                "duration_ms": 120.0 + k,
            }
        )
    return [calls[i : i + BATCH] for i in range(0, STEPS_PER_RUN, BATCH)]


async def workload(
    url: str, key: str, clients: int, seconds: float, watcher: DelayWatcher | None
) -> dict:
    headers = {"Authorization": f"Bearer {key}", "Content-Type": "application/json"}
    done: list[tuple[str, float]] = []  # (run id, when its last step was acknowledged)
    steps = 0
    failures = 0

    async def client(session: aiohttp.ClientSession, me: int) -> None:
        nonlocal steps, failures
        number = me
        while time.perf_counter() < deadline:
            async with session.post(
                f"{url}/v1/ingest/agent/runs", data=json.dumps({"agent_name": "researcher"}),
                headers=headers,
            ) as response:  # fmt: skip
                run_id = (await response.json())["data"]["id"]
            for batch in steps_of(run_id, number):
                async with session.post(
                    f"{url}/v1/ingest/agent/steps", data=json.dumps(batch), headers=headers
                ) as response:
                    await response.read()
                    if response.status == 200:
                        steps += len(batch)
                    else:
                        failures += 1
            done.append((run_id, time.perf_counter()))
            if watcher is not None:
                watcher.add(run_id, done[-1][1])
            async with session.post(
                f"{url}/v1/ingest/agent/runs/{run_id}/finish",
                data=json.dumps({"termination_reason": "clean"}), headers=headers,
            ) as response:  # fmt: skip
                await response.read()
            number += clients

    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=clients)) as session:
        started = time.perf_counter()
        deadline = started + seconds
        await asyncio.gather(*(client(session, n) for n in range(clients)))
        elapsed = time.perf_counter() - started
    return {"steps_per_s": steps / elapsed, "done": done, "failures": failures}


class DelayWatcher(threading.Thread):
    """Watches the database while the load runs: for each run whose last step was
    acknowledged, how long until its verdict (of all its steps) was stored."""

    def __init__(self, db_url: str) -> None:
        super().__init__(daemon=True)
        self.db_url = db_url
        self.pending: dict[uuid.UUID, float] = {}
        self.delays: list[float] = []
        self.done = threading.Event()

    def add(self, run_id: str, at: float) -> None:
        self.pending[uuid.UUID(run_id)] = at

    def run(self) -> None:
        with psycopg.connect(self.db_url, autocommit=True) as conn:
            while not (self.done.is_set() and not self.pending):
                waiting = list(self.pending)
                if waiting:
                    rows = conn.execute(
                        "SELECT id FROM agent_runs WHERE id = ANY(%s) "
                        "AND verdict_steps = step_count AND step_count > 0",
                        (waiting,),
                    ).fetchall()
                    now = time.perf_counter()
                    for (run_id,) in rows:
                        self.delays.append(now - self.pending.pop(run_id))
                time.sleep(0.02)

    def finish(self, timeout: float = 30) -> list[float]:
        self.done.set()
        self.join(timeout)
        return sorted(self.delays)


def check(db_url: str) -> tuple[int, int]:
    """(runs whose verdict says loop, runs that should) over runs with all their steps."""
    with psycopg.connect(db_url) as conn:
        return conn.execute(
            "SELECT count(*) FILTER (WHERE detected_loop), count(*) FILTER (WHERE findings <> "
            "'{}' OR detected_loop) FROM agent_runs WHERE step_count = %s",
            (STEPS_PER_RUN,),
        ).fetchone()


def one(verdicts: bool, clients: int, seconds: float) -> dict:
    name, db_url = scratch_database()
    process = None
    try:
        process, url, key = start(db_url, verdicts)
        watcher = DelayWatcher(db_url) if verdicts else None
        if watcher is not None:
            watcher.start()
        result = asyncio.run(workload(url, key, clients, seconds, watcher))
        result["delays"] = watcher.finish() if watcher is not None else []
        result["loops"] = check(db_url)
        return result
    finally:
        if process is not None:
            process.terminate()
            process.wait(timeout=30)
        drop_database(name)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=15)
    parser.add_argument("--clients", type=int, default=16)
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()
    print(f"python {platform.python_version()} ({sys.executable}); {os.cpu_count()} cores; "
          f"{args.clients} clients, {args.seconds:.0f} s each, {args.rounds} rounds")  # fmt: skip
    ratios = []
    for round_ in range(args.rounds):
        on = one(True, args.clients, args.seconds)
        off = one(False, args.clients, args.seconds)
        ratio = on["steps_per_s"] / off["steps_per_s"]
        ratios.append(ratio)
        delays = sorted(on["delays"])
        p50 = statistics.median(delays) if delays else float("nan")
        p95 = delays[int(len(delays) * 0.95) - 1] if delays else float("nan")
        print(
            f"round {round_ + 1}: verdicts on {on['steps_per_s']:,.0f} steps/s, off "
            f"{off['steps_per_s']:,.0f} steps/s: ratio {ratio:.2f}; verdict stored "
            f"p50 {p50 * 1000:.0f} ms, p95 {p95 * 1000:.0f} ms after the last step "
            f"({len(delays)} of {len(on['done'])} runs); detected loops / runs with a "
            f"finding: {on['loops'][0]} / {on['loops'][1]} (off: {off['loops'][0]} / "
            f"{off['loops'][1]}); failures {on['failures']} / {off['failures']}"
        )
    print(f"ratio with / without verdicts: {min(ratios):.2f}–{max(ratios):.2f} (target ≥ 0.90)")


if __name__ == "__main__":
    main()
