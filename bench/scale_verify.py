"""bench/scale.py --verify: replay a built data set through a real server, compare the tables.

Every run of the built database is sent to a ``keelwave serve`` on a second,
empty database as the SDKs batch them: per group of 25 runs their starts, their
steps (payloads as the exact bytes stored, so the server fingerprints what the
builder hashed), their model calls and their finishes. Once the server has
judged every run (its verdicts), runs, steps, model calls and every rollup table
are compared row for row.
"""

from __future__ import annotations

import asyncio
import json
import math
import time
from datetime import UTC, datetime

import aiohttp
import psycopg
from scale_data import ROLLUP_TABLES


def _raw_fields(fields: dict, raw: dict) -> str:
    """A JSON object of ``fields``, with the ``raw`` JSON texts put in as they are (the
    payloads must reach the server byte for byte, as an SDK sends them)."""
    text = json.dumps(fields)
    extra = "".join(f', "{name}": {value}' for name, value in raw.items() if value is not None)
    return text[:-1] + extra + "}"


RUNS_OF_GROUP = """
SELECT id, agent_name, parent_run_id, started_at, input::text, metadata::text, tags, ended_at,
       termination_reason, loop_detected, loop_step_index, output::text, error, error_traceback
FROM agent_runs WHERE started_at >= %s AND (started_at, id) > (%s, %s)
ORDER BY started_at, id LIMIT %s
"""
STEPS_OF_GROUP = """
SELECT run_id, step_index, step_type, tool_name, tool_input::text, tool_output::text, content,
       started_at, duration_ms, error, error_traceback
FROM agent_steps WHERE project_id = %s AND run_id = ANY(%s) ORDER BY run_id, step_index
"""
CALLS_OF_GROUP = """
SELECT id, run_id, step_index, provider, model, input_tokens, output_tokens, cache_read_tokens,
       reasoning_tokens, cost_usd, latency_ms, status, error, started_at
FROM ai_traces WHERE project_id = %s AND run_id = ANY(%s)
"""


def _iso(moment: datetime | None) -> str | None:
    return moment.isoformat() if moment is not None else None


async def replay(source_url: str, url: str, key: str, group: int = 25, workers: int = 8) -> int:
    """Send every run of ``source_url`` to the server at ``url``, as queries.py's load does:
    per group of runs, their starts, steps (in requests of at most 500), model calls and
    finishes; return the number of steps sent."""
    headers = {"Authorization": f"Bearer {key}", "Content-Type": "application/json"}
    queue: asyncio.Queue = asyncio.Queue(maxsize=64)
    sent = {"steps": 0}

    async def producer() -> None:
        async with await psycopg.AsyncConnection.connect(source_url) as conn:
            (project,) = await (await conn.execute("SELECT id FROM projects")).fetchone()
            last = (datetime(1970, 1, 1, tzinfo=UTC), "00000000-0000-0000-0000-000000000000")
            while True:
                runs = await (
                    await conn.execute(RUNS_OF_GROUP, (last[0], last[0], last[1], group))
                ).fetchall()
                if not runs:
                    break
                last = (runs[-1][3], runs[-1][0])
                ids = [run[0] for run in runs]
                steps = await (await conn.execute(STEPS_OF_GROUP, (project, ids))).fetchall()
                calls = await (await conn.execute(CALLS_OF_GROUP, (project, ids))).fetchall()
                await queue.put((runs, steps, calls))
        for _ in range(workers):
            await queue.put(None)

    def bodies(runs: list, steps: list, calls: list) -> list[tuple[str, str]]:
        starts = [
            _raw_fields(
                {
                    "id": str(r[0]),
                    "agent_name": r[1],
                    "started_at": _iso(r[3]),
                    "tags": r[6],
                    "parent_run_id": str(r[2]) if r[2] else None,
                },
                {"input": r[4], "metadata": r[5]},
            )
            for r in runs
        ]
        step_bodies = [
            _raw_fields(
                {
                    "run_id": str(s[0]),
                    "step_index": s[1],
                    "step_type": s[2],
                    "tool_name": s[3],
                    "content": s[6],
                    "started_at": _iso(s[7]),
                    "duration_ms": s[8],
                    "error": s[9],
                    "error_traceback": s[10],
                },
                {"tool_input": s[4], "tool_output": s[5]},
            )
            for s in steps
        ]
        call_bodies = [
            json.dumps(
                {
                    "id": str(c[0]),
                    "run_id": str(c[1]),
                    "step_index": c[2],
                    "provider": c[3],
                    "model": c[4],
                    "input_tokens": c[5],
                    "output_tokens": c[6],
                    "cache_read_tokens": c[7],
                    "reasoning_tokens": c[8],
                    "cost_usd": c[9],
                    "latency_ms": c[10],
                    "status": c[11],
                    "error": c[12],
                    "started_at": _iso(c[13]),
                }
            )
            for c in calls
        ]
        finishes = [
            _raw_fields(
                {
                    "id": str(r[0]),
                    "termination_reason": r[8],
                    "loop_detected": r[9],
                    "loop_step_index": r[10],
                    "error": r[12],
                    "error_traceback": r[13],
                    "ended_at": _iso(r[7]),
                },
                {"output": r[11]},
            )
            for r in runs
        ]
        requests = [("/v1/ingest/agent/runs", "[" + ", ".join(starts) + "]")]
        for first in range(0, len(step_bodies), 500):
            requests.append(
                ("/v1/ingest/agent/steps", "[" + ", ".join(step_bodies[first : first + 500]) + "]")
            )
        for first in range(0, len(call_bodies), 500):
            requests.append(
                ("/v1/ingest/ai", "[" + ", ".join(call_bodies[first : first + 500]) + "]")
            )
        requests.append(("/v1/ingest/agent/runs/finish", "[" + ", ".join(finishes) + "]"))
        return requests

    async def worker(session: aiohttp.ClientSession) -> None:
        while (item := await queue.get()) is not None:
            runs, steps, calls = item
            for path, body in bodies(runs, steps, calls):
                async with session.post(url + path, data=body.encode(), headers=headers) as answer:
                    text = await answer.text()
                    if answer.status >= 300:
                        raise SystemExit(f"{path} answered {answer.status}: {text[:500]}")
            sent["steps"] += len(steps)

    async with aiohttp.ClientSession() as session:
        await asyncio.gather(producer(), *(worker(session) for _ in range(workers)))
    return sent["steps"]


def wait_for_verdicts(url: str, timeout: float = 600) -> None:
    """Until the server has judged every run (none is due: statements/verdicts.py)."""
    deadline = time.monotonic() + timeout
    with psycopg.connect(url, autocommit=True) as conn:
        while True:
            (due,) = conn.execute(
                "SELECT count(*) FROM agent_runs WHERE verdict_steps <> step_count"
            ).fetchone()
            if not due:
                return
            if time.monotonic() > deadline:
                raise SystemExit(f"the server still had {due} runs to judge after {timeout:.0f} s")
            time.sleep(1)


# table -> (key columns, compared columns); payloads compared as md5 of their text.
# Not compared: project_id (each database has its own project), received_at and
# last_activity_at (ingest stamps them with the time it received the rows).
COMPARED = {
    "agent_runs": (
        ("id",),
        "agent_name, parent_run_id, started_at, ended_at, termination_reason, loop_detected, "
        "loop_step_index, md5(input::text), md5(output::text), md5(metadata::text), tags, error, "
        "duration_ms, step_count, llm_calls, input_tokens, output_tokens, cost_usd, detected_loop, "
        "detected_loop_step_index, findings, verdict_steps, error_traceback",
    ),
    "agent_steps": (
        ("run_id", "step_index"),
        "step_type, tool_name, md5(tool_input::text), md5(tool_output::text), content, "
        "input_fingerprint, started_at, duration_ms, error, error_traceback",
    ),
    "ai_traces": (
        ("id",),
        "run_id, step_index, provider, model, input_tokens, output_tokens, cache_read_tokens, "
        "reasoning_tokens, cost_usd, latency_ms, status, error, started_at",
    ),
    **{table: (keys, "*") for table, keys in ROLLUP_TABLES.items()},
}


def _rows(url: str, table: str, keys: tuple[str, ...], columns: str) -> dict[tuple, tuple]:
    grouped = ""
    with psycopg.connect(url) as conn:
        if columns == "*":
            names = [
                name
                for (name,) in conn.execute(
                    "SELECT column_name FROM information_schema.columns WHERE table_name = %s "
                    "AND column_name <> 'project_id' ORDER BY ordinal_position",
                    (table,),
                ).fetchall()
                if name not in keys
            ]
            if "shard" in names:  # agent_run_rollups (migration 0016): only a key's sum counts
                names.remove("shard")
                columns = ", ".join(f"sum({name})" for name in names)
                grouped = f" GROUP BY {', '.join(keys)}"
            else:
                columns = ", ".join(names)
                grouped = ""
        rows = conn.execute(f"SELECT {', '.join(keys)}, {columns} FROM {table}{grouped}").fetchall()
    return {row[: len(keys)]: row[len(keys) :] for row in rows}


def _same(a: tuple, b: tuple) -> bool:
    """Equal, floats within 1e-9 relative (sums of costs in another order round apart)."""
    return len(a) == len(b) and all(
        math.isclose(x, y, rel_tol=1e-9, abs_tol=1e-9)
        if isinstance(x, float) and isinstance(y, float)
        else x == y
        for x, y in zip(a, b, strict=True)
    )


def compare(built_url: str, ingested_url: str) -> bool:
    """Every table of COMPARED, row for row; print a line per table; True if all equal."""
    print(f"\n{'table':<24}{'built':>10}{'ingested':>10}{'equal':>10}{'differ':>8}{'only one':>10}")
    all_equal = True
    for table, (keys, columns) in COMPARED.items():
        built, ingested = (
            _rows(built_url, table, keys, columns),
            _rows(ingested_url, table, keys, columns),
        )
        equal = sum(
            1 for key, row in built.items() if key in ingested and _same(row, ingested[key])
        )
        differ = [
            key for key, row in built.items() if key in ingested and not _same(row, ingested[key])
        ]
        only = (built.keys() - ingested.keys()) | (ingested.keys() - built.keys())
        print(
            f"{table:<24}{len(built):>10,}{len(ingested):>10,}{equal:>10,}{len(differ):>8,}{len(only):>10,}"
        )
        for key in differ[:3]:
            print(f"    {key}:\n      built    {built[key]}\n      ingested {ingested[key]}")
        for key in list(only)[:3]:
            print(
                f"    only in {'built' if key in built else 'ingested'}: {key} "
                f"{built.get(key) or ingested.get(key)}"
            )
        all_equal = all_equal and not differ and not only
    return all_equal
