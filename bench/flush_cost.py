"""PostgreSQL's CPU for one flush of the ingest writer, by what the flush holds.

    python bench/flush_cost.py [--flushes 1000] [--repeat 3]

Agent traffic comes in small requests (a run start, a few steps, a model call, a
finish), so a flush of the group-commit writer holds a few rows, and what
PostgreSQL spends on it is mostly per transaction and per statement, not per row
(docs/benchmarks.md, session 22). This measures exactly that, without HTTP or a
load generator in the way: a real writer lane (store/lane.py) on a fresh scratch
database commits flushes of each shape, one after the other, and the CPU of its
PostgreSQL backend is read from the kernel before and after. The baseline, in the
same run on the same connection: a transaction inserting one step with a plain
INSERT (BEGIN, INSERT, COMMIT), the least a durable write costs.

Shapes (rows as the routes build them, payloads from bench/workloads.py's pool):
run start (with one tag, and with four); one model call; 7 steps of a started run;
the finish of a 20-step run; and a mixed flush as agent-shaped traffic makes them (a
run start, 7 steps of another run, a model call, and a finish). The tool calls of
finished runs that the writer leaves pending are folded in every FOLD_EVERY flushes,
counted with them.
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import json
import os
import random
import subprocess
import sys
import uuid
from collections.abc import Callable
from datetime import UTC, datetime

import msgspec
import psutil

sys.path.insert(0, os.path.dirname(__file__))
from ingest import drop_database, scratch_database  # noqa: E402
from workloads import POOL_SIZE, tool_pool  # noqa: E402

from keelwave.server.store import pending_tools  # noqa: E402
from keelwave.server.store.lane import Lane, Rows  # noqa: E402
from keelwave.server.store.lifecycle import Finish, finish_row  # noqa: E402
from keelwave.server.store.statements import STEP_COLUMNS  # noqa: E402

PROJECT = uuid.uuid4()
STEPS_A_RUN = 20
# The tool calls a finish leaves pending (store/pending_tools.py) are folded in by the
# server every second; here every this many flushes, on the same connection, so that
# their share of the fold counts in each flush's figure (100 finishes a second is what
# bench/workloads.py's agent-shaped load reaches on 2 cores).
FOLD_EVERY = 100
FOUR_TAGS = ("prod", "eu-west", "v2", "team-search")


async def fold(conn) -> None:
    async with conn.transaction():
        await conn.execute(pending_tools.FOLD)


class Maker:
    """Rows of each kind, as the ingest routes hand them to the writer."""

    def __init__(self, seed: int) -> None:
        self.pool = tool_pool(seed)
        self.rng = random.Random(seed)

    def run(self, run_id: uuid.UUID, tags: tuple[str, ...] = ("bench",)) -> tuple:
        task = msgspec.Raw(json.dumps({"task": "summarise the open tickets"}).encode())
        return (PROJECT, run_id, "support-triage", None, datetime.now(UTC), task, None, list(tags))

    def step(self, run_id: uuid.UUID, index: int) -> tuple:
        tool, given, output = self.pool[self.rng.randrange(POOL_SIZE)]
        given_raw = json.dumps(given).encode()
        fingerprint = hashlib.sha256(tool.encode() + b"\x00" + given_raw).digest()
        return (
            PROJECT, run_id, index, "tool_call", tool, msgspec.Raw(given_raw),
            msgspec.Raw(json.dumps(output).encode()), None, fingerprint, datetime.now(UTC),
            round(self.rng.uniform(5, 900), 1), None, None, self.rng.getrandbits(63),
        )  # fmt: skip

    def call(self, run_id: uuid.UUID) -> tuple:
        return (
            PROJECT, uuid.uuid4(), run_id, 1, "openai", "gpt-4o-mini",
            self.rng.randint(200, 4000), self.rng.randint(20, 800), 0, 0, 0.0012,
            round(self.rng.uniform(300, 4000), 1), "ok", None, datetime.now(UTC), None, None,
        )  # fmt: skip

    def finish(self, run_id: uuid.UUID) -> tuple:
        done = Finish("clean", datetime.now(UTC), output='{"answer": "done"}')
        return finish_row(PROJECT, run_id, done)


def _request(runs=(), steps=(), calls=(), finishes=()) -> Rows:
    return (list(runs), list(steps), list(calls), list(finishes))


async def _started(lane: Lane, rows: Maker, count: int, steps: int) -> list[uuid.UUID]:
    """``count`` runs started, each with ``steps`` steps, committed before the clock."""
    ids = [uuid.uuid4() for _ in range(count)]
    for first in range(0, count, 50):
        chunk = ids[first : first + 50]
        await lane.commit([_request(runs=[rows.run(run_id) for run_id in chunk])])
        if steps:
            body = [rows.step(run_id, n) for run_id in chunk for n in range(1, steps + 1)]
            await lane.commit([_request(steps=body)])
    return ids


async def measure(lane: Lane, flushes: int, seed: int) -> dict[str, float]:
    """µs of backend CPU a flush, for each shape and the baseline."""
    rows = Maker(seed)
    conn = await lane._connection()
    backend = psutil.Process(conn.info.backend_pid)
    going = await _started(lane, rows, flushes, 0)
    finishing = await _started(lane, rows, 2 * flushes, STEPS_A_RUN)
    # (a table of its own, not a temp table: a durable commit is one with WAL to flush)
    await conn.execute("CREATE TABLE kw_bench_floor (LIKE agent_steps INCLUDING DEFAULTS)")
    await conn.execute("VACUUM ANALYZE agent_runs, agent_steps, ai_traces")

    # Each shape: the batch of requests its n-th flush commits.
    shapes: dict[str, Callable[[int], list[Rows]]] = {
        "run start": lambda n: [_request(runs=[rows.run(uuid.uuid4())])],
        # (four tags make six pairs in migration 0029's index)
        "run start, 4 tags": lambda n: [_request(runs=[rows.run(uuid.uuid4(), FOUR_TAGS)])],
        "one model call": lambda n: [_request(calls=[rows.call(going[n])])],
        "7 steps": lambda n: [_request(steps=[rows.step(going[n], i) for i in range(1, 8)])],
        "finish (20 steps)": lambda n: [_request(finishes=[rows.finish(finishing[n])])],
        "agent mix (4 requests)": lambda n: [
            _request(runs=[rows.run(uuid.uuid4())]),
            _request(steps=[rows.step(going[n], i) for i in range(101, 108)]),
            _request(calls=[rows.call(going[n])]),
            _request(finishes=[rows.finish(finishing[flushes + n])]),
        ],
    }
    figures: dict[str, float] = {}
    for name, batch in shapes.items():
        before = sum(backend.cpu_times()[:2])
        for n in range(flushes):
            await lane.commit(batch(n))
            if n % FOLD_EVERY == FOLD_EVERY - 1:
                await fold(conn)
        await fold(conn)
        figures[name] = 1e6 * (sum(backend.cpu_times()[:2]) - before) / flushes
    # The same step as a plain INSERT: json columns as text, everything else as it is.
    step = [bytes(v).decode() if isinstance(v, msgspec.Raw) else v for v in rows.step(going[0], 1)]
    columns = ", ".join(name for name, _ in STEP_COLUMNS)
    values = ", ".join("%s::json" if kind == "json" else "%s" for _, kind in STEP_COLUMNS)
    insert = f"INSERT INTO kw_bench_floor ({columns}) VALUES ({values})"
    before = sum(backend.cpu_times()[:2])
    for _ in range(flushes):
        async with conn.transaction():
            await conn.execute(insert, step)
    figures["baseline: BEGIN, INSERT, COMMIT"] = (
        1e6 * (sum(backend.cpu_times()[:2]) - before) / flushes
    )
    return figures


async def one_round(flushes: int, seed: int) -> dict[str, float]:
    name, url = scratch_database()
    try:
        migrate = [sys.executable, "-m", "keelwave.cli", "migrate", "--database-url", url]
        subprocess.run(migrate, check=True, capture_output=True)
        lane = Lane(url, connect_timeout=5)
        try:
            return await measure(lane, flushes, seed)
        finally:
            await lane.drop()
    finally:
        drop_database(name)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--flushes", type=int, default=1000, help="flushes of each shape")
    parser.add_argument("--repeat", type=int, default=3, help="rounds, each on a fresh database")
    args = parser.parse_args()
    rounds = [asyncio.run(one_round(args.flushes, seed)) for seed in range(args.repeat)]
    print(f"python: {sys.executable} ({sys.version.split()[0]}); {os.cpu_count()} cores")
    print(f"{'flush holding':34s} {'backend µs a flush (each round)':>40s}  median  ×baseline")
    floor = sorted(r["baseline: BEGIN, INSERT, COMMIT"] for r in rounds)[len(rounds) // 2]
    for name in rounds[0]:
        values = [r[name] for r in rounds]
        median = sorted(values)[len(values) // 2]
        each = ", ".join(f"{v:.0f}" for v in values)
        print(f"{name:34s} {each:>40s}  {median:6.0f}  {median / floor:8.1f}")


if __name__ == "__main__":
    main()
