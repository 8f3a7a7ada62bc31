"""Batched ingest through `keelwave serve` on Citus, beside the same on one PostgreSQL.

    python bench/citus_ingest.py [--seconds 10] [--clients 8] [--batch 100] [--projects 4]

The plain database is a scratch one on KEELWAVE_BENCH_DATABASE_URL (default the
PostgreSQL at 127.0.0.1:5432); the Citus one a scratch database made on every
node of the cluster whose coordinator KEELWAVE_BENCH_CITUS_URL names (default
127.0.0.1:5440), its workers read from the coordinator's metadata. Each gets a
real `keelwave serve` and the same load, one after the other: ``clients``
clients spread over ``projects`` projects (a project's writes go to one shard,
so several projects spread the load over the workers), each posting batches of
``batch`` steps in a loop. A step counts once its request was acknowledged
(after commit). On one machine the nodes share its cores with the server and
the load generator: the figure says the write path works at a useful rate, not
what a cluster of machines does (docs/scale-out.md has the capacity model).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import time
import uuid
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import aiohttp
import psycopg

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
from serve_process import ServeProcess  # noqa: E402

from keelwave.db import keys as key_store  # noqa: E402
from keelwave.db import migrate  # noqa: E402

PLAIN = os.environ.get(
    "KEELWAVE_BENCH_DATABASE_URL", "postgresql://postgres@127.0.0.1:5432/postgres"
)
CITUS = os.environ.get("KEELWAVE_BENCH_CITUS_URL", "postgresql://postgres@127.0.0.1:5440/postgres")


def with_database(url: str, name: str, host: str | None = None, port: int | None = None) -> str:
    parts = urlsplit(url)
    netloc = parts.netloc
    if host is not None:
        user = netloc.rpartition("@")[0]
        netloc = f"{user}@{host}:{port}" if user else f"{host}:{port}"
    return urlunsplit((parts.scheme, netloc, f"/{name}", parts.query, parts.fragment))


def admins(url: str, citus: bool) -> list[str]:
    """The admin URL of every node the scratch database must exist on, coordinator last."""
    if not citus:
        return [url]
    with psycopg.connect(url, autocommit=True) as conn:
        nodes = conn.execute(
            "SELECT nodename, nodeport FROM pg_dist_node WHERE groupid <> 0 AND isactive"
        ).fetchall()
    return [with_database(url, "postgres", host, port) for host, port in nodes] + [url]


def create(url: str, name: str, citus: bool) -> str:
    for admin in admins(url, citus):
        with psycopg.connect(admin, autocommit=True) as conn:
            conn.execute(f'CREATE DATABASE "{name}"')
        if citus:
            with psycopg.connect(with_database(admin, name), autocommit=True) as conn:
                conn.execute("CREATE EXTENSION citus")
    scratch = with_database(url, name)
    if citus:
        parts = urlsplit(url)
        with psycopg.connect(scratch, autocommit=True) as conn:
            conn.execute("SELECT citus_set_coordinator_host(%s, %s)", (parts.hostname, parts.port))
            for admin in admins(url, citus)[:-1]:
                node = urlsplit(admin)
                conn.execute("SELECT citus_add_node(%s, %s)", (node.hostname, node.port))
    migrate.upgrade(scratch)
    return scratch


def drop(url: str, name: str, citus: bool) -> None:
    for admin in admins(url, citus):
        with psycopg.connect(admin, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


async def load(server: str, keys: list[str], clients: int, batch: int, seconds: float) -> int:
    acknowledged = 0
    deadline = time.monotonic() + seconds

    async def client(session: aiohttp.ClientSession, key: str) -> None:
        nonlocal acknowledged
        headers = {"Authorization": f"Bearer {key}"}
        while time.monotonic() < deadline:
            run = str(uuid.uuid4())
            steps = [
                {"run_id": run, "step_index": i, "step_type": "tool_call", "tool_name": "search",
                 "tool_input": {"q": i % 7}, "duration_ms": 12.5}
                for i in range(1, batch + 1)
            ]  # fmt: skip
            async with session.post(
                server + "/v1/ingest/agent/steps", json=steps, headers=headers
            ) as r:
                if r.status == 200:
                    acknowledged += batch

    async with aiohttp.ClientSession() as session:
        await asyncio.gather(*(client(session, keys[n % len(keys)]) for n in range(clients)))
    return acknowledged


def served_rate(
    url: str, keys: list[str], args: argparse.Namespace, env: dict[str, str] | None = None
) -> float:
    """Steps/s acknowledged by a `keelwave serve` on the database at ``url``, after a
    2 s warm-up."""
    serve = ServeProcess("--database-url", url, env=env or {})
    try:
        asyncio.run(load(serve.url, keys, args.clients, args.batch, 2))  # warm up
        started = time.monotonic()
        steps = asyncio.run(load(serve.url, keys, args.clients, args.batch, args.seconds))
        return steps / (time.monotonic() - started)
    finally:
        serve.stop()
        serve.kill()


def measure(url: str, citus: bool, args: argparse.Namespace) -> float:
    name = f"kw_bench_{'citus' if citus else 'plain'}_{uuid.uuid4().hex[:8]}"
    scratch = create(url, name, citus)
    try:
        with psycopg.connect(scratch, autocommit=True) as conn:
            keys = [
                key_store.create_key(conn, f"bench-{n}", "ingest").key for n in range(args.projects)
            ]
        return served_rate(scratch, keys, args)
    finally:
        drop(url, name, citus)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=10)
    parser.add_argument("--clients", type=int, default=8)
    parser.add_argument("--batch", type=int, default=100)
    parser.add_argument("--projects", type=int, default=4)
    args = parser.parse_args()
    plain = measure(PLAIN, False, args)
    citus = measure(CITUS, True, args)
    print(f"python {sys.version.split()[0]} ({sys.executable})")
    print(f"{args.clients} clients, {args.projects} projects, batches of {args.batch} steps")
    print(f"one PostgreSQL:                       {plain:10,.0f} steps/s")
    print(f"Citus, coordinator + workers (1 box): {citus:10,.0f} steps/s  ({citus / plain:.2f}x)")


if __name__ == "__main__":
    main()
