"""The Citus profile's daily partitions (migration 0015), measured on a cluster.

    python bench/citus_partitions.py [--days 10] [--rows-per-day 100000] [--seconds 10]

On scratch databases of the cluster KEELWAVE_BENCH_CITUS_URL names (default the
coordinator at 127.0.0.1:5440; bench/citus_ingest.py makes and drops them):

1. ingest through `keelwave serve` (bench/citus_ingest.py's load) on the
   partitioned schema, empty (today and the days ahead);
2. ``--days`` days of history (``--rows-per-day`` steps each, received on those
   days, with their keys, migration 0017) added to the partitioned one, the
   oldest half converted to columnar while the clients ingest: the
   conversion's time, the days' size before and after, ingest meanwhile;
   ingest again. Each time, the writer's duplicate check of
   100 staged steps, on the worker, against the key table (what the writer
   does) and, for comparison, against the days (what it did before 0017);
3. a retention round's worth: deleting one day's steps by rows (what the
   batched deletes do, in one statement here) against dropping the days
   wholly before a cutoff (``drop_old_time_partitions``).

Everything shares one machine's cores: the figures compare the paths, they are
not what a cluster of machines does.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import threading
import time
import uuid
from datetime import timedelta
from pathlib import Path

import psycopg
from psycopg_pool import AsyncConnectionPool

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
from citus_ingest import CITUS, create, drop, served_rate  # noqa: E402

from keelwave.db import keys as key_store  # noqa: E402
from keelwave.db import migrate  # noqa: E402
from keelwave.server.store.citus import partitions  # noqa: E402
from keelwave.server.store.citus import statements as citus_statements  # noqa: E402
from keelwave.server.store.pgscript import quote  # noqa: E402

DAY = timedelta(days=1)


def ingest(url: str, keys: list[str], args: argparse.Namespace) -> float:
    """Steps/s acknowledged by a server on ``url`` (compression left to this script)."""
    return served_rate(url, keys, args, env={"KEELWAVE_CITUS_COMPRESS_AFTER_DAYS": "0"})


def scratch(revision: str, args: argparse.Namespace) -> tuple[str, str, list[str], list[str]]:
    """A migrated scratch database: (its name, URL, ingest keys, project ids)."""
    name = f"kw_bench_parts_{uuid.uuid4().hex[:8]}"
    url = create(CITUS, name, True)  # migrated to head
    if revision != "head":
        migrate.downgrade(url, revision)
    with psycopg.connect(url, autocommit=True) as conn:
        created = [key_store.create_key(conn, f"bench-{n}", "ingest") for n in range(args.projects)]
    return name, url, [key.key for key in created], [key.project_id for key in created]


def fill_history(url: str, projects: list[str], days: int, rows: int) -> float:
    """``rows`` steps received on each of the ``days`` days before today; seconds taken."""
    started = time.monotonic()
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("SET timezone TO 'UTC'")
        for table in partitions.TABLES:
            conn.execute(
                "SELECT create_time_partitions(%s::regclass, INTERVAL '1 day', now(), "
                "date_trunc('day', now()) - %s)",
                (table, days * DAY),
            )
        for day in range(1, days + 1):
            [(received,)] = conn.execute(
                "SELECT date_trunc('day', now()) - %s + INTERVAL '12 hours'", (day * DAY,)
            ).fetchall()
            for project in projects:  # one routed INSERT … SELECT per project
                conn.execute(
                    """
                    INSERT INTO agent_steps (project_id, run_id, step_index, step_type, tool_name,
                                             tool_input, input_fingerprint, started_at,
                                             duration_ms, received_at)
                    SELECT %(p)s, md5(%(name)s || (g / 20)::text)::uuid, g %% 20, 'tool_call',
                           'search', json_build_object('q', g %% 7), sha256(g::text::bytea),
                           %(at)s, 12.5, %(at)s
                    FROM generate_series(1, %(n)s) g
                    """,
                    {
                        "p": project,
                        "name": str(project),
                        "at": received,
                        "n": rows // len(projects),
                    },
                )
        # Their keys, as the writer would have added them (store/citus/keys.py).
        conn.execute(
            "INSERT INTO kw_step_keys (project_id, run_id, step_index, received_at) "
            "SELECT project_id, run_id, step_index, received_at FROM agent_steps "
            "ON CONFLICT DO NOTHING"
        )
    return time.monotonic() - started


def size_of_days(url: str, before_days: int) -> int:
    """Bytes of agent_steps' days received more than ``before_days`` days ago, all shards."""
    with psycopg.connect(url, autocommit=True) as conn:
        parts = conn.execute(
            "SELECT partition FROM time_partitions WHERE parent_table = 'agent_steps'::regclass "
            "AND to_value::timestamptz <= date_trunc('day', now()) - %s",
            (before_days * DAY,),
        ).fetchall()
        return sum(
            conn.execute("SELECT citus_total_relation_size(%s)", (part,)).fetchone()[0]
            for (part,) in parts
        )


async def _compress(url: str, before: int) -> dict:
    async with AsyncConnectionPool(url, kwargs={"autocommit": True}, open=False) as pool:
        [(boundary,)] = await partitions._rows(
            pool, "SELECT date_trunc('day', now()) - %s", (before * DAY,)
        )
        return await partitions.compress_before(pool, boundary)


async def _drop(url: str, before: int) -> dict:
    async with AsyncConnectionPool(url, kwargs={"autocommit": True}, open=False) as pool:
        [(boundary,)] = await partitions._rows(
            pool, "SELECT date_trunc('day', now()) - %s", (before * DAY,)
        )
        return await partitions.drop_before(pool, boundary)


# The duplicate check before migration 0017: staged steps against every day's index.
AGAINST_THE_DAYS = (
    "DELETE FROM kw_stage_steps s USING agent_steps t WHERE s.project_id = {p} "
    "AND t.project_id = s.project_id AND t.run_id = s.run_id AND t.step_index = s.step_index"
)


def duplicate_check_ms(url: str, days: bool = False) -> tuple[float, float]:
    """(planning, execution) ms on the worker of the writer's duplicate check of 100
    staged steps against the stored ones (the key table, or with ``days`` every day of
    agent_steps): the median of 5, each rolled back."""
    plans, runs = [], []
    with psycopg.connect(url) as conn:
        for _ in range(5):
            conn.execute("SET LOCAL citus.enable_local_execution TO off")
            [(project,)] = conn.execute("SELECT id FROM projects LIMIT 1").fetchall()
            conn.execute(
                "INSERT INTO kw_stage_steps (seq, project_id, run_id, step_index, step_type, "
                "started_at) SELECT g, %s, %s, g, 'tool_call', now() "
                "FROM generate_series(1, 100) g",
                (project, uuid.uuid4()),
            )
            sql = (
                AGAINST_THE_DAYS.format(p=quote(project))
                if days
                else citus_statements._step_statements(quote(project))[0]
            )
            plan = [row[0] for row in conn.execute("EXPLAIN (ANALYZE) " + sql).fetchall()]
            # The worker's own figures are the indented ones, inside the task.
            plans += [
                float(line.split()[-2])
                for line in plan
                if line.startswith("      ") and "Planning Time" in line
            ]
            runs += [
                float(line.split()[-2])
                for line in plan
                if line.startswith("      ") and "Execution Time" in line
            ]
            conn.rollback()
    return sorted(plans)[len(plans) // 2], sorted(runs)[len(runs) // 2]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--days", type=int, default=10)
    parser.add_argument("--rows-per-day", type=int, default=100_000)
    parser.add_argument("--seconds", type=float, default=10)
    parser.add_argument("--clients", type=int, default=8)
    parser.add_argument("--batch", type=int, default=100)
    parser.add_argument("--projects", type=int, default=4)
    args = parser.parse_args()
    print(f"python {sys.version.split()[0]}; {args.clients} clients, {args.projects} projects, "
          f"batches of {args.batch} steps, {args.seconds:.0f} s each")  # fmt: skip

    def report(label: str, url: str, keys: list[str]) -> None:
        plan, run = duplicate_check_ms(url)
        checks = f"{plan:.1f} + {run:.1f} ms"
        plan, run = duplicate_check_ms(url, days=True)
        checks += f" (against the days, as before 0017: {plan:.1f} + {run:.1f} ms)"
        print(f"{label:44} {ingest(url, keys, args):8,.0f} steps/s; duplicate check of 100 "
              f"steps, planning + execution on the worker: {checks}")  # fmt: skip

    name, url, keys, projects = scratch("head", args)
    try:
        report("daily partitions, empty (3 days):", url, keys)
        seconds = fill_history(url, projects, args.days, args.rows_per_day)
        print(f"history: {args.days} days x {args.rows_per_day:,} steps in {seconds:.1f} s")
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute("ANALYZE agent_steps, ai_traces")
        report(f"{args.days + 3} days, all heap:", url, keys)
        half = args.days // 2
        heap = size_of_days(url, half)
        # The conversion runs while the clients ingest (after their warm-up): do they wait?
        conversion: dict = {}

        def convert() -> None:
            time.sleep(2.5)
            started = time.monotonic()
            conversion["converted"] = asyncio.run(_compress(url, half))
            conversion["took"] = time.monotonic() - started

        converter = threading.Thread(target=convert)
        converter.start()
        during = ingest(url, keys, args)
        converter.join()
        columnar = size_of_days(url, half)
        print(f"columnar: {conversion['converted']} in {conversion['took']:.1f} s; those days "
              f"{heap / 2**20:,.1f} MiB -> {columnar / 2**20:,.1f} MiB ({columnar / heap:.2f}x); "
              f"ingest meanwhile {during:,.0f} steps/s")  # fmt: skip
        report(f"{args.days + 3} days, the {half} oldest columnar:", url, keys)
        with psycopg.connect(url, autocommit=True) as conn:
            started = time.monotonic()
            deleted = conn.execute(
                "DELETE FROM agent_steps WHERE received_at >= date_trunc('day', now()) - %s "
                "AND received_at < date_trunc('day', now()) - %s",
                ((half - 1) * DAY, (half - 2) * DAY),
            ).rowcount
            print(f"one heap day deleted by rows: {deleted:,} steps in "
                  f"{time.monotonic() - started:.2f} s")  # fmt: skip
        started = time.monotonic()
        dropped = asyncio.run(_drop(url, half))
        print(f"drop_old_time_partitions: {dropped} days in {time.monotonic() - started:.2f} s")
        report(f"{args.days + 3 - half} days, all heap:", url, keys)
    finally:
        drop(CITUS, name, True)


if __name__ == "__main__":
    main()
