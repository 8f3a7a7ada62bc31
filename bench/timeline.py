"""The run explorer's reads on one long run: its timeline page by page, and a comparison.

    python bench/timeline.py [--steps 10000] [--calls 3000] [--children 50] [--others 10000]
                             [--keep]

One run of ``--steps`` steps (about 700 bytes of input and output each), with
``--calls`` model calls and ``--children`` child runs, and a second run like it
with every tenth step changed, are sent through the ingest API of a real
`keelwave serve`, among ``--others`` other runs of 20 steps (so the long runs are a
few per cent of the table, and found through its indexes as in a real one). Then the timeline is
read from its first page to its last at the default page size (500) and at
5,000, and the two long runs are compared (an LCS alignment up to 2,000 steps
each, greedy beyond). Printed: the p50 and worst time of a page over HTTP, the
time of the comparison, and the plans' database time of the first page.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import time
import uuid
from datetime import UTC, datetime, timedelta

import aiohttp
import psycopg

sys.path.insert(0, os.path.dirname(__file__))
from ingest import drop_database, scratch_database, start_server  # noqa: E402

from keelwave.db import keys as key_store  # noqa: E402
from keelwave.db import migrate  # noqa: E402


def long_run(run_id: str, started: datetime, steps: int, changed_every: int = 0) -> list[dict]:
    rows = []
    for index in range(1, steps + 1):
        changed = changed_every and index % changed_every == 0
        rows.append(
            {
                "run_id": run_id,
                "step_index": index,
                "tool_name": ("search", "fetch", "read")[index % 3],
                "tool_input": {"q": index % 50, "changed": bool(changed), "pad": "x" * 300},
                "tool_output": {"text": "y" * 300},
                "started_at": (started + timedelta(milliseconds=37 * index)).isoformat(),
                "duration_ms": 40.0,
            }
        )
    return rows


async def send(session: aiohttp.ClientSession, url: str, path: str, body: object) -> None:
    async with session.post(url + path, json=body) as response:
        assert response.status in (200, 201), await response.text()


async def main(args: argparse.Namespace) -> None:
    name, db_url = scratch_database()
    migrate.upgrade(db_url)
    with psycopg.connect(db_url, autocommit=True) as conn:
        key = key_store.create_key(conn, "bench", "all")
    process, url, _ = start_server(db_url)
    headers = {"Authorization": f"Bearer {key.key}"}
    try:
        async with aiohttp.ClientSession(headers=headers) as session:
            started = datetime.now(UTC) - timedelta(hours=2)
            for _ in range(args.others // 500):  # the other runs, 500 at a time
                runs = [{"id": str(uuid.uuid4()), "agent_name": "other"} for _n in range(500)]
                await send(session, url, "/v1/ingest/agent/runs", runs)
                steps = [
                    {"run_id": run["id"], "step_index": n, "tool_name": "search",
                     "tool_input": {"q": n}, "started_at": started.isoformat()}
                    for run in runs for n in range(1, 21)
                ]  # fmt: skip
                await send(session, url, "/v1/ingest/agent/steps", steps)
            ids = [str(uuid.uuid4()), str(uuid.uuid4())]
            for number, run_id in enumerate(ids):
                body = {"id": run_id, "agent_name": "long", "started_at": started.isoformat()}
                await send(session, url, "/v1/ingest/agent/runs", body)
                steps = long_run(run_id, started, args.steps, changed_every=10 * number)
                for first in range(0, len(steps), 1000):
                    await send(session, url, "/v1/ingest/agent/steps", steps[first : first + 1000])
            calls = [
                {"provider": "openai", "model": "gpt-4o", "run_id": ids[0], "step_index": n,
                 "started_at": (started + timedelta(milliseconds=37 * n * 3)).isoformat(),
                 "latency_ms": 30.0, "input_tokens": 100}
                for n in range(1, args.calls + 1)
            ]  # fmt: skip
            for first in range(0, len(calls), 1000):
                await send(session, url, "/v1/ingest/ai", calls[first : first + 1000])
            children = [
                {"id": str(uuid.uuid4()), "agent_name": "child", "parent_run_id": ids[0],
                 "started_at": (started + timedelta(seconds=7 * n)).isoformat()}
                for n in range(args.children)
            ]  # fmt: skip
            await send(session, url, "/v1/ingest/agent/runs", children)
            with psycopg.connect(db_url, autocommit=True) as conn:
                conn.execute("ANALYZE")
            path = f"{url}/v1/projects/{key.project_id}/agent/runs/{ids[0]}/timeline"
            for limit in (500, 5000):
                times, cursor, items = [], None, 0
                while True:
                    query = {"limit": str(limit), **({"cursor": cursor} if cursor else {})}
                    began = time.perf_counter()
                    async with session.get(path, params=query) as response:
                        page = await response.json()
                    times.append((time.perf_counter() - began) * 1000)
                    items += len(page["data"])
                    cursor = page["next_cursor"]
                    if cursor is None:
                        break
                p50, worst = statistics.median(times), max(times)
                print(f"timeline, pages of {limit}: {len(times)} pages, {items} items; "
                      f"p50 {p50:.1f} ms, worst {worst:.1f} ms")  # fmt: skip
            compare = f"{url}/v1/projects/{key.project_id}/agent/runs/compare"
            began = time.perf_counter()
            async with session.get(compare, params={"a": ids[0], "b": ids[1]}) as response:
                body = await response.json()
            took = (time.perf_counter() - began) * 1000
            kinds = {}
            for row in body["data"]["steps"]:
                kinds[row["status"]] = kinds.get(row["status"], 0) + 1
            print(f"compare, {args.steps} steps each ({body['data']['aligned']}): {took:.0f} ms; "
                  f"{kinds}")  # fmt: skip
    finally:
        process.terminate()
        process.wait()
        if args.keep:
            print(f"kept {name}: project {key.project_id}, runs {ids[0]} and {ids[1]}")
        else:
            drop_database(name)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=10_000)
    parser.add_argument("--calls", type=int, default=3_000)
    parser.add_argument("--children", type=int, default=50)
    parser.add_argument("--others", type=int, default=10_000, help="other runs, of 20 steps")
    parser.add_argument("--keep", action="store_true", help="keep the database, to look at")
    asyncio.run(main(parser.parse_args()))
