"""Bad input gets a clear 4xx naming what is wrong; never a 5xx."""

from __future__ import annotations

import json
import uuid

import psycopg
import pytest
from conftest import Api, Project, query

STEPS = "/v1/ingest/agent/steps"


async def post(
    api: Api, project: Project, path: str, data: bytes | str, content_type: str = "application/json"
) -> tuple[int, dict]:
    status, body, _ = await api.post(
        path, data=data, headers={**project.auth("ingest"), "Content-Type": content_type}
    )
    return status, body


@pytest.mark.parametrize(
    ("body", "status", "code", "field"),
    [
        (b'{"run_id": ', 400, "malformed_json", None),
        (b"", 400, "malformed_json", None),
        (b"not json", 400, "malformed_json", None),
        (b'{"run_id": "\xff\xfe"}', 400, "malformed_json", None),
        (
            b'{"run_id": "%s", "step_index": 1, "tool_input": ' + b"[" * 5000 + b"]" * 5000 + b"}",
            400,
            "malformed_json",
            None,
        ),
        (b'{"step_index": 1}', 422, "validation_error", "run_id"),
        (b'{"run_id": "nope", "step_index": 1}', 422, "validation_error", "run_id"),
        (b'{"run_id": "%s", "step_index": -1}', 422, "validation_error", "step_index"),
        (
            b'{"run_id": "%s", "step_index": 99999999999999999999999}',
            422,
            "validation_error",
            "step_index",
        ),
        (b'{"run_id": "%s", "step_index": "1"}', 422, "validation_error", "step_index"),
        (
            b'{"run_id": "%s", "step_index": 1, "duration_ms": 1e999}',
            422,
            "validation_error",
            "duration_ms",
        ),
        (
            b'{"run_id": "%s", "step_index": 1, "step_type": "dance"}',
            422,
            "validation_error",
            "step_type",
        ),
        (
            b'{"run_id": "%s", "step_index": 1, "tool_name": "a\\u0000b"}',
            422,
            "validation_error",
            "tool_name",
        ),
        (
            b'[{"run_id": "%s", "step_index": 1}, {"run_id": "%s", "step_index": 1}]',
            422,
            "validation_error",
            "[1].step_index",
        ),
        (
            b'[{"run_id": "%s", "step_index": 1}, {"run_id": "%s"}]',
            422,
            "validation_error",
            "[1].step_index",
        ),
        (b'"a string"', 422, "validation_error", None),
        # half of a surrogate pair: no Unicode text; the field that holds it is named
        (
            b'[{"run_id": "%s", "step_index": 1, "tool_input": {"q": ["ok", "x\\ud800"]}}]',
            422,
            "validation_error",
            "[0].tool_input.q[1]",
        ),
        (
            b'{"run_id": "%s", "step_index": 1, "tool_name": "t\\udc00"}',
            422,
            "validation_error",
            "tool_name",
        ),
        (
            b'{"run_id": "%s", "step_index": 1, "error": "e\\ud83d"}',
            422,
            "validation_error",
            "error",
        ),
    ],
    ids=lambda value: value[:40].decode(errors="replace") if isinstance(value, bytes) else None,
)
async def test_bad_steps_are_rejected_clearly(
    api: Api, project: Project, db_url: str, body: bytes, status: int, code: str, field: str | None
) -> None:
    run_id = str(uuid.uuid4()).encode()
    body = body.replace(b"%s", run_id) if b"%s" in body else body
    got_status, got = await post(api, project, STEPS, body)
    assert got_status == status, got
    assert got["error"]["code"] == code
    assert got["error"].get("field") == field
    assert got["error"]["message"]
    if b"\\ud" in body:
        assert "lone UTF-16 surrogate" in got["error"]["message"]
    # nothing of a rejected request is stored
    assert query(
        db_url, "SELECT count(*) FROM agent_steps WHERE run_id = %s", (run_id.decode(),)
    ) == [(0,)]


async def test_enum_errors_list_accepted_values(api: Api, project: Project) -> None:
    _, body, _ = await api.post(
        "/v1/ingest/agent/runs", json={"agent_name": "a"}, headers=project.auth("ingest")
    )
    run_id = body["data"]["id"]
    status, body = await post(
        api,
        project,
        f"/v1/ingest/agent/runs/{run_id}/finish",
        b'{"termination_reason": "finished"}',
    )
    assert status == 422
    assert body["error"]["field"] == "termination_reason"
    for reason in (
        "clean",
        "max_steps_reached",
        "context_limit",
        "error",
        "loop_detected",
        "timeout",
    ):
        assert reason in body["error"]["message"]
    status, body = await post(api, project, f"/v1/ingest/agent/runs/{run_id}/finish", b"{}")
    assert (status, body["error"]["field"]) == (422, "termination_reason")


async def test_finish_of_unknown_run_is_404(api: Api, project: Project) -> None:
    for run_id in (str(uuid.uuid4()), "not-a-uuid"):
        status, body = await post(
            api,
            project,
            f"/v1/ingest/agent/runs/{run_id}/finish",
            b'{"termination_reason": "clean"}',
        )
        assert (status, body["error"]["code"]) == (404, "not_found")


async def test_body_over_the_limit_is_413(api: Api, project: Project) -> None:
    big = b'{"run_id": "%s", "step_index": 1, "content": "' % str(uuid.uuid4()).encode()
    big += b"x" * (70 * 1024) + b'"}'
    status, body = await post(api, project, STEPS, big)
    assert (status, body["error"]["code"]) == (413, "payload_too_large")


async def test_hostile_strings_and_payloads_are_stored_not_500(
    api: Api, project: Project, db_url: str
) -> None:
    run_id = str(uuid.uuid4())
    body = (
        '[{{"run_id": "{}", "step_index": 1, "step_type": "think", "content": "a\\u0000b"}},'
        ' {{"run_id": "{}", "step_index": 2, "tool_name": "t", "tool_input": {{"x": "\\u0000"}},'
        '  "tool_output": [1e308, -0, 12345678901234567890123456789, "\\ud83d\\ude00"]}},'
        ' {{"run_id": "{}", "step_index": 3, "tool_name": "t", "tool_input": {}}},'
        ' {{"run_id": "{}", "step_index": 4, "tool_name": "t", "unknown_field": 1}}]'
    ).format(run_id, run_id, run_id, "[" * 500 + "]" * 500, run_id)
    status, response = await post(api, project, STEPS, body.encode())
    assert status == 200, response
    rows = query(
        db_url,
        "SELECT step_index, content FROM agent_steps WHERE run_id = %s ORDER BY step_index",
        (run_id,),
    )
    assert [index for index, _ in rows] == [1, 2, 3, 4]
    assert rows[0][1] == "a\ufffdb"  # NUL cannot be stored in text; it is replaced, not lost


async def test_empty_array_is_accepted_as_nothing(api: Api, project: Project) -> None:
    status, body = await post(api, project, STEPS, b"[]")
    assert (status, body) == (200, {"data": {"accepted": 0}})


async def test_unknown_endpoint_and_method_are_json(api: Api, project: Project) -> None:
    status, body, _ = await api.get("/v1/nothing-here", headers=project.auth())
    assert (status, body["error"]["code"]) == (404, "not_found")
    status, body, headers = await api.get(STEPS, headers=project.auth())
    assert (status, body["error"]["code"]) == (405, "method_not_allowed")
    assert "POST" in headers["Allow"]


async def test_ten_thousand_steps_in_one_request(db_url: str, aiohttp_server, project) -> None:
    """Big arrays are fine within the body limit; any content type carrying JSON is read."""
    import aiohttp
    from conftest import make_settings

    from keelwave.server.app import create_app

    server = await aiohttp_server(create_app(make_settings(), db_url))  # the 10 MiB default
    run_id = str(uuid.uuid4())
    body = json.dumps(
        [
            {"run_id": run_id, "step_index": i, "tool_name": "t", "tool_input": i}
            for i in range(1, 10_001)
        ]
    )
    async with (
        aiohttp.ClientSession() as session,
        session.post(
            server.make_url("/v1/ingest/agent/steps"),
            data=body,
            headers={**project.auth("ingest"), "Content-Type": "text/plain"},
        ) as response,
    ):
        assert response.status == 200, await response.text()
        assert (await response.json())["data"]["accepted"] == 10_000
    assert query(db_url, "SELECT count(*) FROM agent_steps WHERE run_id = %s", (run_id,)) == [
        (10_000,)
    ]


@pytest.mark.parametrize(
    ("error", "status", "code"),
    [
        (
            PermissionError(13, "Permission denied", "/etc/keelwave/prices.json"),
            500,
            "internal_error",
        ),
        (FileNotFoundError(2, "No such file"), 500, "internal_error"),
        (psycopg.OperationalError("connection refused"), 503, "database_unavailable"),
    ],
)
async def test_only_database_failures_are_reported_as_database_unavailable(
    aiohttp_server, error: Exception, status: int, code: str
) -> None:
    """An OSError of the server's own (a file it cannot read) is a bug to log and a 500,
    not "database unavailable; retry", which would send clients retrying forever."""
    import aiohttp
    from aiohttp import web

    from keelwave.server.http.errors import error_middleware

    async def failing(request: web.Request) -> web.Response:
        raise error

    app = web.Application(middlewares=[error_middleware(retry_after=1)])
    app.router.add_get("/fails", failing)
    server = await aiohttp_server(app)
    async with aiohttp.ClientSession() as session, session.get(server.make_url("/fails")) as answer:
        body = await answer.json()
    assert (answer.status, body["error"]["code"]) == (status, code)
