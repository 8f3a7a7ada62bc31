"""Shared fixtures: a real PostgreSQL, a real keelwave server on a free port.

Tests talk to the PostgreSQL at ``KEELWAVE_TEST_DATABASE_URL`` (default: the
local server at 127.0.0.1:5432, user postgres). Each test module gets its own
freshly migrated database, cloned from a template migrated once per session,
and each test its own project and keys, so tests never see each other's data.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import signal
import tempfile
import uuid
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path

import aiohttp
import psycopg
import pytest

from keelwave.db import keys as key_store
from keelwave.db import migrate
from keelwave.server.app import create_app
from keelwave.server.ingest.otlp import appends
from keelwave.settings import Settings

# Every OTLP trace mapped by adding an export's spans to what was mapped before is
# checked against mapping it whole, in every test whose server runs in-process.
appends.VERIFY = True


def _dump_tasks(signum: int, frame: object) -> None:
    """`kill -USR1 <pytest pid>` prints every asyncio task's stack: for a run that
    seems stuck inside a test's event loop, where thread dumps show only epoll."""
    import asyncio
    import sys

    loop = asyncio.events._get_running_loop()
    if loop is None:
        print("no running event loop", file=sys.stderr)
        return
    for task in asyncio.all_tasks(loop):
        print(f"--- {task.get_name()}: {task.get_coro()!r}", file=sys.stderr)
        task.print_stack(file=sys.stderr)


signal.signal(signal.SIGUSR1, _dump_tasks)

ADMIN_URL = os.environ.get(
    "KEELWAVE_TEST_DATABASE_URL", "postgresql://postgres@127.0.0.1:5432/postgres"
)


# The whole suite runs on a Citus cluster when both URLs name its coordinator
# (citus_cluster.py): each database is then made on every node and migrated, as
# Citus cannot copy a distributed database from a template.
ON_CITUS = os.environ.get("KEELWAVE_TEST_CITUS_URL") == ADMIN_URL


# For tests of how the writer's lane for one PostgreSQL keeps its guarantees (its run
# locks, its staging tables): the Citus lane keeps them otherwise, tested in
# test_citus*.py.
plain_lane_only = pytest.mark.skipif(
    ON_CITUS, reason="tests the one-PostgreSQL lane's mechanism (store/lane.py), not Citus's"
)


# For tests that watch the database with a trigger on a table Citus distributes: Citus
# runs no such trigger (what they check is not Citus's own, and holds there too).
trigger_probe = pytest.mark.skipif(
    ON_CITUS, reason="watches with a trigger, which Citus refuses on a distributed table"
)


def writer_lane() -> type:
    """The writer's lane class that ``serve`` would use on the database under test."""
    from keelwave.server.store.citus.lane import CitusLane
    from keelwave.server.store.lane import Lane

    return CitusLane if ON_CITUS else Lane


# Tests run three files at a time (pyproject.toml). A Citus test file that stops and
# starts the cluster's nodes (DISTURBS_THE_CLUSTER = True) must run alone: while a
# Citus cluster is given, every file takes a turn on a file lock, shared, and those
# files take it exclusively. Files finish, so no one waits for ever.
CITUS_TURNS = Path(tempfile.gettempdir()) / "keelwave-tests-citus.lock"


@pytest.fixture(scope="module", autouse=True)
def _citus_cluster_turn(request: pytest.FixtureRequest) -> Iterator[None]:
    if not os.environ.get("KEELWAVE_TEST_CITUS_URL"):
        yield
        return
    exclusive = getattr(request.module, "DISTURBS_THE_CLUSTER", False)
    with CITUS_TURNS.open("a") as turn:
        fcntl.flock(turn, fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH)
        yield


def database_url(name: str) -> str:
    base, _, _ = ADMIN_URL.rpartition("/")
    return f"{base}/{name}"


def _admin() -> psycopg.Connection:
    return psycopg.connect(ADMIN_URL, autocommit=True)


def create_database(name: str, template: str | None = None) -> str:
    if ON_CITUS:
        import citus_cluster

        url = citus_cluster.create_database(name)
        if template:
            migrate.upgrade(url)
        return url
    with _admin() as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        if template:
            conn.execute(f'CREATE DATABASE "{name}" TEMPLATE "{template}"')
        else:
            conn.execute(f'CREATE DATABASE "{name}"')
    return database_url(name)


def drop_database(name: str) -> None:
    if ON_CITUS:
        import citus_cluster

        citus_cluster.drop_database(name)
        return
    with _admin() as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@pytest.fixture(scope="session")
def template_database() -> Iterator[str]:
    """A database at the latest migration, to clone from."""
    name = f"kw_template_{os.getpid()}"
    if ON_CITUS:  # no template: create_database migrates each database instead
        yield name
        return
    url = create_database(name)
    migrate.upgrade(url)
    with psycopg.connect(url, autocommit=True) as conn:
        if conn.execute("SELECT 1 FROM pg_extension WHERE extname = 'timescaledb'").fetchone():
            # TimescaleDB restarts its job scheduler in a template being copied, and the
            # scheduler's session can make CREATE DATABASE … TEMPLATE fail (its issue
            # #4048). A template that takes no connections gets no scheduler.
            conn.execute("SELECT _timescaledb_functions.stop_background_workers()")
    with _admin() as conn:
        conn.execute(f'ALTER DATABASE "{name}" ALLOW_CONNECTIONS false')
    yield name
    drop_database(name)


@pytest.fixture(scope="module")
def db_url(template_database: str) -> Iterator[str]:
    name = f"kw_test_{uuid.uuid4().hex[:12]}"
    url = create_database(name, template=template_database)
    yield url
    drop_database(name)


@pytest.fixture
def fresh_db_url() -> Iterator[str]:
    """An empty database (no schema), for migration tests."""
    name = f"kw_empty_{uuid.uuid4().hex[:12]}"
    yield create_database(name)
    drop_database(name)


@dataclass
class Project:
    """A project of its own for one test, with a key of each scope."""

    id: str
    name: str
    keys: dict[str, str]

    def auth(self, scope: str = "all") -> dict[str, str]:
        return {"Authorization": f"Bearer {self.keys[scope]}"}


@pytest.fixture
def project(db_url: str) -> Project:
    return make_project(db_url)


def make_project(db_url: str) -> Project:
    name = f"test-{uuid.uuid4().hex[:10]}"
    keys: dict[str, str] = {}
    with psycopg.connect(db_url, autocommit=True) as conn:
        for scope in key_store.SCOPES:
            created = key_store.create_key(conn, name, scope)
            keys[scope] = created.key
    return Project(created.project_id, name, keys)


@dataclass
class Api:
    """A running keelwave server and an HTTP session to it."""

    url: str
    session: aiohttp.ClientSession

    async def request(self, method: str, path: str, **kwargs) -> tuple[int, dict, dict]:
        async with self.session.request(method, self.url + path, **kwargs) as response:
            body = await response.json(content_type=None)
            return response.status, body, dict(response.headers)

    async def post(self, path: str, **kwargs) -> tuple[int, dict, dict]:
        return await self.request("POST", path, **kwargs)

    async def get(self, path: str, **kwargs) -> tuple[int, dict, dict]:
        return await self.request("GET", path, **kwargs)


def make_settings(**overrides) -> Settings:
    return Settings(database_url="unused", port=0, **overrides)


@contextlib.asynccontextmanager
async def serving(db_url: str, aiohttp_server, max_body_bytes: int) -> AsyncIterator[Api]:
    """A real keelwave server on a free port, in the test's event loop, and a session."""
    server = await aiohttp_server(create_app(make_settings(max_body_bytes=max_body_bytes), db_url))
    async with aiohttp.ClientSession() as session:
        yield Api(str(server.make_url("")).rstrip("/"), session)


@pytest.fixture
async def api(db_url: str, aiohttp_server) -> AsyncIterator[Api]:
    """A real keelwave server on a free port, in the test's event loop."""
    async with serving(db_url, aiohttp_server, 64 * 1024) as running:
        yield running


@pytest.fixture(scope="module")
def server(db_url: str, tmp_path_factory):
    """A real `keelwave serve` subprocess on the module's database."""
    from serve_process import ServeProcess

    process = ServeProcess(
        "--database-url", db_url, log=tmp_path_factory.mktemp("serve") / "serve.log"
    )
    yield process
    process.stop()
    process.kill()


def query(db_url: str, sql: str, params: tuple = ()) -> list[tuple]:
    with psycopg.connect(db_url) as conn:
        return conn.execute(sql, params).fetchall()


def fold_pending_tool_rollups(db_url: str) -> None:
    """Fold in the tool rollups the writer left pending, as a server does every second
    (store/pending_tools.py): the rollup tables then hold everything committed."""
    from keelwave.server.store import pending_tools, statements

    if ON_CITUS:
        return  # its writer merges tool calls at once: nothing is left pending
    with psycopg.connect(db_url, autocommit=True) as conn:
        conn.execute(statements.one_round_trip(pending_tools.FOLD))


def assert_sketches_stored(db_url: str, project_id: str) -> int:
    """Every tool step of the project keeps the sketch of its input as stored (what the
    verdict keeper groups by, findings/sketch.py), a step without a tool none; returns
    how many tool steps there are."""
    from keelwave.server.findings.sketch import stored_sketch

    rows = query(
        db_url,
        "SELECT step_index, tool_name, tool_input::text, input_sketch FROM agent_steps "
        "WHERE project_id = %s",
        (uuid.UUID(project_id),),
    )
    for index, tool, tool_input, sketch in rows:
        raw = None if tool_input is None else tool_input.encode("utf-8", "surrogatepass")
        assert sketch == stored_sketch(tool, raw), (index, tool, tool_input)
    return sum(tool is not None for _, tool, _, _ in rows)
