"""A Citus cluster for the distributed profile's tests: databases on every node.

The tests of the Citus profile run when ``KEELWAVE_TEST_CITUS_URL`` names a
Citus coordinator (a database on it, e.g. postgresql://postgres@127.0.0.1:5440/postgres)
whose workers are registered (citus_add_node); otherwise they are skipped, and
say why. docs/scale-out.md tells how to build and start such a cluster.

Citus distributes tables within one database, and that database must exist on
every node with the extension in it: :func:`create_database` makes it on the
workers first, then on the coordinator, where it registers the coordinator and
the workers of the cluster (read from the coordinator's own metadata).
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from urllib.parse import urlsplit, urlunsplit

import psycopg
import pytest

CITUS_URL = os.environ.get("KEELWAVE_TEST_CITUS_URL")

requires_citus = pytest.mark.skipif(
    not CITUS_URL,
    reason="KEELWAVE_TEST_CITUS_URL is not set: no Citus coordinator to test the "
    "distributed profile on (docs/scale-out.md)",
)


def url_of(base: str, database: str, host: str | None = None, port: int | None = None) -> str:
    """``base`` with another database (and host and port, if given)."""
    parts = urlsplit(base)
    netloc = parts.netloc
    if host is not None:
        user = netloc.rpartition("@")[0]
        netloc = f"{user}@{host}:{port}" if user else f"{host}:{port}"
    return urlunsplit((parts.scheme, netloc, f"/{database}", parts.query, parts.fragment))


def coordinator() -> tuple[str, int]:
    parts = urlsplit(CITUS_URL or "")
    return parts.hostname or "127.0.0.1", parts.port or 5432


def workers() -> list[tuple[str, int]]:
    """The cluster's active workers, from the coordinator's metadata."""
    with psycopg.connect(CITUS_URL, autocommit=True) as conn:
        rows = conn.execute(
            "SELECT nodename, nodeport FROM pg_dist_node "
            "WHERE groupid <> 0 AND isactive AND noderole = 'primary' ORDER BY nodeport"
        ).fetchall()
    return [(host, port) for host, port in rows]


def worker_url(database: str, node: tuple[str, int]) -> str:
    return url_of(CITUS_URL or "", database, *node)


def create_database(name: str, nodes: list[tuple[str, int]] | None = None) -> str:
    """A new database with Citus on every node (``nodes``: the workers; default, the
    cluster's), the coordinator and workers registered; its coordinator URL."""
    nodes = workers() if nodes is None else nodes
    for node in nodes:
        _create_on(url_of(CITUS_URL or "", "postgres", *node), name)
    coordinator_admin = url_of(CITUS_URL or "", "postgres")
    _create_on(coordinator_admin, name)
    url = url_of(CITUS_URL or "", name)
    with psycopg.connect(url, autocommit=True) as conn:
        host, port = coordinator()
        conn.execute("SELECT citus_set_coordinator_host(%s, %s)", (host, port))
        for node_host, node_port in nodes:
            conn.execute("SELECT citus_add_node(%s, %s)", (node_host, node_port))
    return url


def add_worker(database_url: str, node: tuple[str, int]) -> None:
    """Make ``node`` a worker of the database at ``database_url`` (shards move there
    only when rebalanced)."""
    name = urlsplit(database_url).path.lstrip("/")
    _create_on(url_of(CITUS_URL or "", "postgres", *node), name)
    with psycopg.connect(database_url, autocommit=True) as conn:
        conn.execute("SELECT citus_add_node(%s, %s)", node)


def _create_on(admin_url: str, name: str) -> None:
    with psycopg.connect(admin_url, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        conn.execute(f'CREATE DATABASE "{name}"')
    with psycopg.connect(url_of(admin_url, name), autocommit=True) as conn:
        conn.execute("CREATE EXTENSION IF NOT EXISTS citus")


def drop_database(name: str, nodes: list[tuple[str, int]] | None = None) -> None:
    """Drop the database on the coordinator and on every node that may hold it."""
    nodes = workers() if nodes is None else nodes
    for admin in [url_of(CITUS_URL or "", "postgres")] + [
        url_of(CITUS_URL or "", "postgres", *node) for node in nodes
    ]:
        try:
            with psycopg.connect(admin, autocommit=True) as conn:
                conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        except psycopg.OperationalError:  # a node a test stopped
            pass


@contextmanager
def citus_database(prefix: str = "kw_citus") -> Iterator[str]:
    """A fresh Citus database (no keelwave schema yet) for the length of the block."""
    name = f"{prefix}_{uuid.uuid4().hex[:10]}"
    nodes = workers()
    try:
        yield create_database(name, nodes)
    finally:
        drop_database(name, nodes)


def is_citus(url: str) -> bool:
    """Whether the server at ``url`` has Citus loaded (shared_preload_libraries)."""
    with psycopg.connect(url, autocommit=True) as conn:
        row = conn.execute("SELECT current_setting('shared_preload_libraries', true)").fetchone()
    return "citus" in (row[0] or "")


# The key tables (migration 0017) hold exactly the stored rows' keys: the rows each
# key table lacks or has too many of, and the model calls whose totals differ.
_KEYS_MISMATCH = """
SELECT
  (SELECT count(*) FROM (SELECT project_id, run_id, step_index FROM agent_steps
                         EXCEPT ALL SELECT project_id, run_id, step_index FROM kw_step_keys) x),
  (SELECT count(*) FROM (SELECT project_id, run_id, step_index FROM kw_step_keys
                         EXCEPT ALL SELECT project_id, run_id, step_index FROM agent_steps) x),
  (SELECT count(*) FROM (
      SELECT project_id, coalesce(run_id, '00000000-0000-0000-0000-000000000000'::uuid), id,
             input_tokens, output_tokens, cost_usd FROM ai_traces
      EXCEPT ALL SELECT project_id, run_key, id, input_tokens, output_tokens, cost_usd
      FROM kw_call_keys) x),
  (SELECT count(*) FROM (
      SELECT project_id, run_key, id, input_tokens, output_tokens, cost_usd FROM kw_call_keys
      EXCEPT ALL SELECT project_id,
             coalesce(run_id, '00000000-0000-0000-0000-000000000000'::uuid), id,
             input_tokens, output_tokens, cost_usd FROM ai_traces) x)
"""


def keys_mismatch(url: str) -> tuple[int, int, int, int]:
    """(steps without a key, step keys without a step, calls without their key, call keys
    without their call): all zero when the key tables mirror the rows."""
    with psycopg.connect(url, autocommit=True) as conn:
        return conn.execute(_KEYS_MISMATCH).fetchone()
