"""A database that refuses every write until someone fixes it (here: read-only) is not
"unavailable, retry shortly": a distinct error, one log line, and /readyz not ready."""

from __future__ import annotations

import asyncio
import logging
import uuid

import aiohttp
import psycopg
import pytest
from conftest import create_database, database_url, drop_database, make_project, make_settings

from keelwave.server.app import create_app


@pytest.fixture
def own_db(template_database: str):
    name = f"kw_ro_{uuid.uuid4().hex[:10]}"
    url = create_database(name, template=template_database)
    yield name, url
    drop_database(name)


def set_read_only(name: str, on: bool) -> None:
    """Make the database read-only (or writable again) for every session, new and old."""
    with psycopg.connect(database_url("postgres"), autocommit=True) as conn:
        value = "SET default_transaction_read_only = on" if on else "RESET ALL"
        conn.execute(f'ALTER DATABASE "{name}" {value}')
        conn.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
            "WHERE datname = %s AND pid <> pg_backend_pid()",
            (name,),
        )


async def test_a_read_only_database_is_refused_not_unavailable(
    own_db, aiohttp_server, caplog
) -> None:
    name, url = own_db
    server = await aiohttp_server(create_app(make_settings(), url))
    project = make_project(url)
    base = str(server.make_url("")).rstrip("/")
    run_id = str(uuid.uuid4())

    async with aiohttp.ClientSession(headers=project.auth()) as session:

        async def send(index: int) -> tuple[int, dict, dict]:
            body = {"run_id": run_id, "step_index": index, "tool_name": "t"}
            async with session.post(base + "/v1/ingest/agent/steps", json=body) as answer:
                return answer.status, await answer.json(), dict(answer.headers)

        async def ready() -> tuple[int, dict]:
            async with session.get(base + "/readyz") as answer:
                return answer.status, await answer.json()

        assert (await send(1))[0] == 200
        set_read_only(name, True)
        caplog.set_level(logging.ERROR, logger="keelwave.database")
        # The first few may meet a connection that was terminated (each writer lane's,
        # each pooled one's): those are an outage, and are answered as one. Then every
        # answer is the refusal.
        answers: list[tuple[int, dict, dict]] = []

        def code(answer: tuple[int, dict, dict]) -> str | None:
            return answer[1].get("error", {}).get("code")

        for index in range(2, 22):
            answers.append(await send(index))
            if [code(a) for a in answers[-5:]] == ["database_refused"] * 5:
                break
        refused = [a for a in answers if code(a) == "database_refused"]
        assert len(refused) >= 5, answers
        assert {code(a) for a in answers} <= {"database_refused", "database_unavailable"}
        assert all(a[0] == 503 for a in answers), answers
        status, body, headers = refused[-1]
        assert status == 503 and "read-only" in body["error"]["message"]
        assert int(headers["Retry-After"]) >= 10
        status, readiness = await ready()
        assert status == 503 and "read-only" in readiness["reason"], readiness
        logged = [r for r in caplog.records if "read-only" in r.getMessage()]
        assert len(logged) == 1, [r.getMessage() for r in caplog.records]

        set_read_only(name, False)
        for _ in range(10):  # the writer reconnects on its own
            if (await send(9))[0] == 200:
                break
            await asyncio.sleep(0.3)
        assert (await send(10))[0] == 200
        assert await ready() == (200, {"status": "ready"})
