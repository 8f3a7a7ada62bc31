"""Every pair of runs-list filters, and a sample of three with a sort, timed against the
50 ms budget on a data set built by bench/scale.py.

    python bench/scale.py --agents 150 --tools 400 --keep kw_big --build-only   # once
    python bench/filter_sweep.py --reuse kw_big [--triples 300] [--repeat 5]

bench/scale.py times the filters one by one and a few combinations chosen by hand.
Someone trying the list without knowing how it is read combines them freely, and
a combination of a common filter with a rare one, or of two that rarely hold
together, is where a list like this one reads far more than a page. This script
asks for the first page of every combination of two filters of different kinds
(each kind with a common, a rare and an empty value where the data set has them),
then ``--triples`` random combinations of three with a random sort and order, and
prints the p50 / p95 of each one over the budget, then a count of those within it.
Exit status 1 if any p95 is over the budget.
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import random
import statistics
import sys
import time
from pathlib import Path
from urllib.parse import quote

import aiohttp

sys.path.insert(0, str(Path(__file__).resolve().parent))

from ingest import database_url, start_server  # noqa: E402
from scale import read_meta  # noqa: E402
from scale_data import AGENTS, NORMAL_TEMPLATES, TOOLS, agent_names, tool_name  # noqa: E402

BUDGET_MS = 50.0
SORTS = ("started_at", "duration_ms", "cost_usd", "step_count", "tokens", "agent_name")


def filter_kinds(meta: dict) -> dict[str, list[str]]:
    """Each kind of filter and the values tried (query strings), common to rare."""
    agents = agent_names(meta.get("agents", len(AGENTS)))
    tools = meta.get("tools", len(TOOLS))
    calls: dict[str, int] = {}
    for k in range(NORMAL_TEMPLATES):
        name = tool_name(k, tools)
        calls[name] = calls.get(name, 0) + 1
    rarest_tool = min(calls, key=lambda name: (calls[name], name))
    reasons = ("clean", "error", "max_steps_reached", "context_limit", "timeout", "loop_detected")
    return {
        "agent": [f"agent_name={agents[0]}", f"agent_name={agents[len(agents) // 2]}",
                  f"agent_name={agents[-1]}", "agent_name=no-such-agent"],
        "ending": [f"termination_reason={reason}" for reason in reasons],
        "finding": ["finding=exact_loop", "finding=cycle", "finding=near_duplicate",
                    "finding=no_progress", "detected_loop=true", "loop=true",
                    "loop_detected=true", "loop=false"],
        "tag": ["tag=prod", "tag=staging", "tag=v2", "tag=canary", "tag=experiment-42",
                "tag=customer:acme", "tag=no-such-tag"],
        "metadata": ["metadata=user_id=user-0", "metadata=user_id=user-40000",
                     "metadata=region=eu-west-1", "metadata=sdk_version=1.3.0"],
        "tool": [f"tool={TOOLS[0]}", f"tool={rarest_tool}", "tool=no_such_tool"],
        "status": ["status=finished", "status=running", "status=stalled"],
        "root": ["root=true", "root=false"],
        "window": ["window=24h", "window=7d"],
        "q": ["q=support", "q=agent-1"],
    }  # fmt: skip


def combinations(meta: dict, triples: int, seed: int) -> list[str]:
    kinds = filter_kinds(meta)
    queries = [value for values in kinds.values() for value in values]
    for first, second in itertools.combinations(kinds, 2):
        queries += [f"{a}&{b}" for a in kinds[first] for b in kinds[second]]
    draw = random.Random(seed)
    names = list(kinds)
    for _ in range(triples):
        chosen = draw.sample(names, 3)
        parts = [draw.choice(kinds[name]) for name in chosen]
        parts.append(f"sort={draw.choice(SORTS)}&order={draw.choice(('desc', 'asc'))}")
        queries.append("&".join(parts))
    return queries


async def sweep(url: str, key: str, queries: list[str], repeat: int) -> list[tuple]:
    over = []
    async with aiohttp.ClientSession(headers={"Authorization": f"Bearer {key}"}) as session:
        async with session.get(url + "/v1/me") as answer:
            project = (await answer.json())["data"]["project_id"]
        base = f"{url}/v1/projects/{project}/agent/runs?"
        for number, query in enumerate(queries, 1):
            path = base + quote(query, safe="=&")
            timings = []
            for attempt in range(repeat + 1):  # the first call warms the caches
                started = time.perf_counter()
                async with session.get(path) as answer:
                    body = await answer.read()
                    if answer.status != 200:
                        raise SystemExit(f"{query}: {answer.status} {body[:300]!r}")
                if attempt:
                    timings.append((time.perf_counter() - started) * 1000)
            timings.sort()
            # (the worst of fewer than 20 calls)
            p95 = timings[max(0, int(len(timings) * 0.95) - 1)] if repeat >= 20 else timings[-1]
            p50 = statistics.median(timings)
            if p95 > BUDGET_MS:
                over.append((query, p50, p95))
                print(f"  over: {query:<80} {p50:7.1f} {p95:7.1f}", flush=True)
            if number % 100 == 0:
                print(f"  {number} of {len(queries)} asked", flush=True)
    return over


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--reuse", required=True, help="a data set kept by bench/scale.py")
    parser.add_argument("--triples", type=int, default=300)
    parser.add_argument("--repeat", type=int, default=5, help="timed calls each (p95: the worst)")
    parser.add_argument("--seed", type=int, default=35)
    parser.add_argument("--only", help="ask only the combinations holding this text")
    args = parser.parse_args()
    meta = read_meta(args.reuse)
    queries = combinations(meta, args.triples, args.seed)
    if args.only:
        queries = [query for query in queries if args.only in query]
    process, url, _ = start_server(database_url(args.reuse))
    try:
        print(f"{len(queries)} combinations, {args.repeat} timed calls each, budget {BUDGET_MS} ms")
        over = asyncio.run(sweep(url, meta["key"], queries, args.repeat))
    finally:
        process.terminate()
        process.wait()
    print(f"{len(queries) - len(over)} of {len(queries)} within {BUDGET_MS} ms at p95")
    sys.exit(1 if over else 0)


if __name__ == "__main__":
    main()
