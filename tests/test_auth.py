"""Keys: bearer authentication, scopes, projects as walls, revocation at once."""

from __future__ import annotations

import asyncio
import uuid

import psycopg
import pytest
from conftest import Api, Project, make_project, query

from keelwave.db import keys as key_store


async def test_me_describes_the_calling_key(api: Api, project: Project) -> None:
    for scope in ("ingest", "read", "all"):
        status, body, _ = await api.get("/v1/me", headers=project.auth(scope))
        assert status == 200
        assert body["data"]["project_id"] == project.id
        assert body["data"]["project"] == project.name
        assert body["data"]["scope"] == scope


@pytest.mark.parametrize(
    ("header", "message"),
    [
        (None, "missing"),
        ("Basic dXNlcjpwYXNz", "Bearer"),
        ("Bearer ", "Bearer"),
        ("Bearer sk-123", "kw_"),
        ("Bearer kw_" + "x" * 43, "unknown"),
    ],
)
async def test_bad_credentials_are_401(api: Api, header: str | None, message: str) -> None:
    headers = {"Authorization": header} if header else {}
    status, body, response_headers = await api.post(
        "/v1/ingest/agent/runs", json={"agent_name": "a"}, headers=headers
    )
    assert status == 401
    assert body["error"]["code"] == "unauthorized"
    assert message in body["error"]["message"]
    assert response_headers["WWW-Authenticate"] == "Bearer"


async def test_scopes(api: Api, project: Project) -> None:
    run = {"agent_name": "a"}
    status, body, _ = await api.post(
        "/v1/ingest/agent/runs", json=run, headers=project.auth("read")
    )
    assert (status, body["error"]["code"]) == (403, "forbidden")
    assert "'read'" in body["error"]["message"]
    status, body, _ = await api.post(
        "/v1/ingest/agent/runs", json=run, headers=project.auth("ingest")
    )
    assert status == 201
    run_id = body["data"]["id"]
    loops = f"/v1/projects/{project.id}/agent/runs/{run_id}/loops"
    status, body, _ = await api.get(loops, headers=project.auth("ingest"))
    assert (status, body["error"]["code"]) == (403, "forbidden")
    for scope in ("read", "all"):
        status, body, _ = await api.get(loops, headers=project.auth(scope))
        assert (status, body) == (200, {"data": []})


async def test_another_projects_run_is_404(api: Api, project: Project, db_url: str) -> None:
    other = make_project(db_url)
    _, body, _ = await api.post(
        "/v1/ingest/agent/runs", json={"agent_name": "a"}, headers=other.auth()
    )
    theirs = body["data"]["id"]
    # their run through my project, and my key on their project path
    for path in (
        f"/v1/projects/{project.id}/agent/runs/{theirs}/loops",
        f"/v1/projects/{other.id}/agent/runs/{theirs}/loops",
        f"/v1/projects/{other.name}/agent/runs/{theirs}/loops",
        f"/v1/projects/{project.id}/agent/runs/{uuid.uuid4()}/loops",
        f"/v1/projects/{project.id}/agent/runs/not-a-uuid/loops",
    ):
        status, body, _ = await api.get(path, headers=project.auth("read"))
        assert (status, body["error"]["code"]) == (404, "not_found"), path
    # finishing their run with my key does not touch it
    status, _, _ = await api.post(
        f"/v1/ingest/agent/runs/{theirs}/finish",
        json={"termination_reason": "error"},
        headers=project.auth(),
    )
    assert status == 404
    assert query(db_url, "SELECT ended_at FROM agent_runs WHERE id = %s", (theirs,)) == [(None,)]


async def test_project_may_be_named_by_name_or_id(api: Api, project: Project) -> None:
    _, body, _ = await api.post(
        "/v1/ingest/agent/runs", json={"agent_name": "a"}, headers=project.auth()
    )
    for ref in (project.id, project.name):
        status, _, _ = await api.get(
            f"/v1/projects/{ref}/agent/runs/{body['data']['id']}/loops", headers=project.auth()
        )
        assert status == 200


async def test_revoked_key_stops_working_at_once(api: Api, db_url: str) -> None:
    with psycopg.connect(db_url, autocommit=True) as conn:
        created = key_store.create_key(conn, f"revoke-{uuid.uuid4().hex[:6]}", "all")
    headers = {"Authorization": f"Bearer {created.key}"}
    status, _, _ = await api.get("/v1/me", headers=headers)
    assert status == 200  # the key is now cached by the server
    with psycopg.connect(db_url, autocommit=True) as conn:
        key_store.revoke_key(conn, created.id[:13])
    # The server hears NOTIFY and drops its cache; allow it a moment to arrive.
    for _ in range(100):
        status, body, _ = await api.get("/v1/me", headers=headers)
        if status == 401:
            break
        await asyncio.sleep(0.05)
    assert status == 401
    assert "revoked" in body["error"]["message"]


def test_only_hashes_of_keys_are_stored(db_url: str, project: Project) -> None:
    rows = query(
        db_url, "SELECT key_hash, display_prefix FROM api_keys WHERE project_id = %s", (project.id,)
    )
    stored = repr(rows)
    for key in project.keys.values():
        assert key not in stored
        assert key_store.hash_key(key) in [row[0] for row in rows]
        assert len(key) >= 3 + 43  # kw_ and 32 random bytes in base64
    assert all(len(prefix) < 12 for _, prefix in rows)
