"""Secrets sent without the SDK (curl, OTLP from a framework) never reach storage: the
server redacts them, and a test searches every table for them. Loops are still found."""

from __future__ import annotations

import json
import uuid

import aiohttp
from conftest import Api, Project, make_project, make_settings, query
from serve_process import keelwave

from keelwave.server.app import create_app
from keelwave.server.http import auth

SECRETS = (
    "sk-proj-4f9QmT7xKp2LrV8nZs3Wd6Yh1Bc5Ej0A",
    "AKIAIOSFODNN7EXAMPLE",
    "hunter2-but-longer",
    "ghp_16C7e42F292c6912E7710c838347Ae178B4a",
)


def stored_text(db_url: str, project_id: str) -> str:
    """Everything stored for a project, as one text to search."""
    project = uuid.UUID(project_id)
    parts = []
    for sql in (
        "SELECT row_to_json(r)::text FROM agent_runs r WHERE project_id = %s",
        "SELECT row_to_json(s)::text FROM agent_steps s WHERE project_id = %s",
        "SELECT row_to_json(a)::text FROM ai_traces a WHERE project_id = %s",
        "SELECT convert_from(span, 'UTF8') FROM otlp_spans WHERE project_id = %s",
    ):
        try:
            parts += [row[0] for row in query(db_url, sql, (project,))]
        except Exception:  # msgpack is not UTF-8 throughout: search its bytes instead
            rows = query(db_url, sql.replace("convert_from(span, 'UTF8')", "span"), (project,))
            parts += [bytes(row[0]).decode("latin-1") for row in rows]
    return "\n".join(parts)


async def test_secrets_sent_with_curl_are_not_stored_and_loops_still_show(
    api: Api, project: Project, db_url: str
) -> None:
    status, body, _ = await api.post(
        "/v1/ingest/agent/runs",
        json={"agent_name": "curl-agent", "input": {"openai_api_key": SECRETS[0]},
              "metadata": {"deploy": f"key {SECRETS[1]}"}},
        headers=project.auth(),
    )  # fmt: skip
    run_id = body["data"]["id"]
    call = {
        "tool_name": "fetch",
        "tool_input": {"url": "https://x.dev", "auth": {"password": SECRETS[2]}},
    }
    steps = [
        {"run_id": run_id, "step_index": n, **call,
         "tool_output": {"note": f"token {SECRETS[3]}"}, "error": f"401 with Bearer {SECRETS[0]}"}
        for n in (1, 2, 3)
    ]  # fmt: skip
    status, _, _ = await api.post("/v1/ingest/agent/steps", json=steps, headers=project.auth())
    assert status == 200
    status, _, _ = await api.post(
        f"/v1/ingest/agent/runs/{run_id}/finish",
        json={"termination_reason": "error", "error": f"key {SECRETS[1]} refused"},
        headers=project.auth(),
    )
    assert status == 200
    text = stored_text(db_url, project.id)
    assert "[REDACTED]" in text
    for secret in SECRETS:
        assert secret not in text, secret
    status, loops, _ = await api.get(
        f"/v1/projects/{project.id}/agent/runs/{run_id}/loops", headers=project.auth()
    )
    assert [group["step_indices"] for group in loops["data"]] == [[1, 2, 3]]
    status, steps_back, _ = await api.get(
        f"/v1/projects/{project.id}/agent/runs/{run_id}/steps", headers=project.auth()
    )
    first = steps_back["data"][0]
    assert first["tool_input"]["auth"] == "[REDACTED]"  # a key that names a secret
    assert first["tool_input"]["url"] == "https://x.dev"  # the rest is kept


async def test_secrets_behind_json_escapes_are_not_stored(
    api: Api, project: Project, db_url: str
) -> None:
    """JSON may write any character as an escape, and some encoders do by default (PHP
    writes every "/" as "\\/", Go writes "&" as "\\u0026"): a secret behind escapes is a
    secret all the same once the text is read."""
    _, started, _ = await api.post(
        "/v1/ingest/agent/runs", json={"agent_name": "php-agent"}, headers=project.auth()
    )
    run_id = started["data"]["id"]
    # Written by hand as such encoders write them, and as the SDKs never do.
    inputs = (
        r'{"dsn": "postgres:\/\/app:hunter2-but-longer@db.internal:5432\/shop"}',
        r'{"key": "sk\u002dproj-4f9QmT7xKp2LrV8nZs3Wd6Yh1Bc5Ej0A"}',
        r'{"p\u0061ssword": "correct-horse"}',
        r'{"note": "B\u0065arer ghp_16C7e42F292c6912E7710c838347Ae178B4a"}',
    )
    body = ",".join(
        f'{{"run_id": "{run_id}", "step_index": {n}, "tool_name": "connect", '
        f'"tool_input": {given}, "tool_output": {given}}}'
        for n, given in enumerate(inputs, start=1)
    )
    async with api.session.post(
        api.url + "/v1/ingest/agent/steps",
        data=f"[{body}]",
        headers={**project.auth(), "Content-Type": "application/json"},
    ) as response:
        assert response.status == 200, await response.text()
    text = stored_text(db_url, project.id)
    for secret in ("hunter2-but-longer", "4f9QmT7xKp2LrV8nZs3Wd6Yh1Bc5Ej0A", "correct-horse",
                   "16C7e42F292c6912E7710c838347Ae178B4a"):  # fmt: skip
        assert secret not in text, secret
    status, steps, _ = await api.get(
        f"/v1/projects/{project.id}/agent/runs/{run_id}/steps", headers=project.auth()
    )
    first = steps["data"][0]["tool_input"]
    assert first == {"dsn": "postgres://app:[REDACTED]@db.internal:5432/shop"}


async def test_one_secret_among_many_clean_steps_is_redacted_and_the_rest_kept_as_sent(
    api: Api, project: Project, db_url: str
) -> None:
    """A request's payloads are screened together: one secret anywhere in it is still
    found, only its own payload changes, and every clean one is stored as it was sent."""
    _, started, _ = await api.post(
        "/v1/ingest/agent/runs", json={"agent_name": "batch-agent"}, headers=project.auth()
    )
    run_id = started["data"]["id"]
    sent = [
        {"run_id": run_id, "step_index": n, "tool_name": "search",
         "tool_input": {"query": f"weather in city {n}", "limit": n},
         "tool_output": {"items": [{"title": f"result {n}", "snippet": "sunny"}]}}
        for n in range(1, 101)
    ]  # fmt: skip
    sent[36]["tool_output"]["items"][0]["snippet"] = f"use {SECRETS[0]} here"
    sent[81]["tool_input"]["api_key"] = "not-a-pattern-but-a-secret-key"
    status, _, _ = await api.post("/v1/ingest/agent/steps", json=sent, headers=project.auth())
    assert status == 200
    rows = query(
        db_url,
        "SELECT step_index, tool_input::text, tool_output::text FROM agent_steps "
        "WHERE project_id = %s ORDER BY step_index",
        (uuid.UUID(project.id),),
    )
    assert len(rows) == 100
    for index, given, output in rows:
        if index == 37:
            assert SECRETS[0] not in output and "[REDACTED]" in output
        elif index == 82:
            assert json.loads(given)["api_key"] == "[REDACTED]"
        else:  # byte for byte what aiohttp's json.dumps sent
            assert given == json.dumps(sent[index - 1]["tool_input"]), index
            assert output == json.dumps(sent[index - 1]["tool_output"]), index


def attr(key: str, value: str) -> dict:
    """An OTLP/JSON string attribute."""
    return {"key": key, "value": {"stringValue": value}}


async def send_spans(
    api: Api, project: Project, spans: list[dict], resource: list[dict] = (), role: str = "all"
) -> None:
    """POST the spans as one OTLP/JSON export; it must be accepted."""
    export = {"resourceSpans": [{"resource": {"attributes": list(resource)},
                                 "scopeSpans": [{"scope": {}, "spans": spans}]}]}  # fmt: skip
    async with api.session.post(
        api.url + "/v1/traces",
        data=json.dumps(export),
        headers={**project.auth(role), "Content-Type": "application/json"},
    ) as response:
        assert response.status == 200


async def test_secrets_in_otlp_spans_are_not_stored(api: Api, project: Project, db_url) -> None:
    trace, agent = uuid.uuid4().hex, "a" * 16
    spans = [
        {"traceId": trace, "spanId": agent, "name": "invoke_agent a", "kind": 1,
         "startTimeUnixNano": "1764590000000000000", "endTimeUnixNano": "1764590001000000000",
         "attributes": [attr("gen_ai.operation.name", "invoke_agent"),
                        attr("gen_ai.agent.name", "otel-agent"),
                        attr("input.value", f"use key {SECRETS[0]}")]},
    ] + [
        {"traceId": trace, "spanId": f"{n:016x}", "parentSpanId": agent, "name": "execute_tool",
         "kind": 1, "startTimeUnixNano": str(1764590000000000000 + n * 1000),
         "endTimeUnixNano": str(1764590000000000000 + n * 1000 + 500),
         "attributes": [attr("gen_ai.operation.name", "execute_tool"),
                        attr("gen_ai.tool.name", "fetch"),
                        attr("gen_ai.tool.call.arguments",
                             json.dumps({"url": "https://x.dev", "api_key": SECRETS[3]})),
                        attr("http.request.header.authorization", f"Bearer {SECRETS[2]}"),
                        # JSON in a string, a secret under a key of it: not credential-shaped
                        attr("tool.config", json.dumps({"db": {"password": "correct-horse"}}))]}
        for n in (1, 2)
    ]  # fmt: skip
    await send_spans(api, project, spans, [attr("deploy.token", SECRETS[1])])
    text = stored_text(db_url, project.id)
    for secret in (*SECRETS, "correct-horse"):
        assert secret not in text, secret
    [(run_id,)] = query(
        db_url, "SELECT id FROM agent_runs WHERE project_id = %s", (uuid.UUID(project.id),)
    )
    status, loops, _ = await api.get(
        f"/v1/projects/{project.id}/agent/runs/{run_id}/loops", headers=project.auth()
    )
    assert [group["step_indices"] for group in loops["data"]] == [[1, 2]]


async def test_secrets_in_a_failed_spans_status_and_exception_events_are_not_stored(
    api: Api, project: Project, db_url
) -> None:
    """A failed tool span and a failed chain span: their status messages and exception
    events are kept (the step's and run's error) with the secrets in them replaced."""
    trace, agent, chain = uuid.uuid4().hex, "b" * 16, "c" * 16

    def failed(span_id: str, parent: str, name: str, role: list, secret: str) -> dict:
        exception = [attr("exception.type", "PermissionError"),
                     attr("exception.message", f"token {secret}"),
                     attr("exception.stacktrace", f"at call({secret})")]  # fmt: skip
        return {"traceId": trace, "spanId": span_id, "parentSpanId": parent, "name": name,
                "kind": 1, "startTimeUnixNano": "1764590000000001000",
                "endTimeUnixNano": "1764590000000002000", "attributes": role,
                "status": {"code": 2, "message": f"denied for {secret}"},
                "events": [{"name": "exception", "timeUnixNano": "1764590000000001500",
                            "attributes": exception}]}  # fmt: skip

    spans = [
        {"traceId": trace, "spanId": agent, "name": "invoke_agent a", "kind": 1,
         "startTimeUnixNano": "1764590000000000000", "endTimeUnixNano": "1764590001000000000",
         "attributes": [attr("gen_ai.operation.name", "invoke_agent"),
                        attr("gen_ai.agent.name", "otel-agent")]},
        failed(chain, agent, "chain step", [attr("openinference.span.kind", "CHAIN")], SECRETS[0]),
        failed(f"{7:016x}", chain, "execute_tool fetch",
               [attr("gen_ai.operation.name", "execute_tool"), attr("gen_ai.tool.name", "fetch"),
                attr("gen_ai.tool.call.arguments", '{"url": "https://x.dev"}')], SECRETS[3]),
    ]  # fmt: skip
    await send_spans(api, project, spans)
    text = stored_text(db_url, project.id)
    for secret in (SECRETS[0], SECRETS[3]):
        assert secret not in text, secret
    [(error,)] = query(
        db_url, "SELECT error FROM agent_steps WHERE project_id = %s", (uuid.UUID(project.id),)
    )
    assert error and "REDACTED" in error  # the failure is kept, the secret is not


CUSTOMER = "CUST-482913"  # what a project's own pattern hides


async def _set_patterns(api: Api, project: Project, patterns: object) -> tuple[int, dict]:
    status, body, _ = await api.request(
        "PATCH",
        f"/v1/projects/{project.id}",
        json={"redaction_patterns": patterns},
        headers=project.auth(),
    )
    return status, body


async def test_a_projects_own_patterns_apply_to_native_and_otlp_ingest_and_loops_still_show(
    api: Api, project: Project, db_url: str
) -> None:
    other = make_project(db_url)  # another project keeps its customer numbers
    status, body = await _set_patterns(api, project, [r"CUST-[0-9]{6}", r"(?i)order #\d+"])
    assert status == 200, body
    assert body["data"]["redaction_patterns"] == [r"CUST-[0-9]{6}", r"(?i)order #\d+"]
    status, got, _ = await api.get(f"/v1/projects/{project.id}", headers=project.auth("read"))
    assert got["data"]["redaction_patterns"] == body["data"]["redaction_patterns"]

    for target in (project, other):
        _, started, _ = await api.post(
            "/v1/ingest/agent/runs",
            json={"agent_name": "shop", "input": f"refund {CUSTOMER}",
                  "metadata": {"customer": CUSTOMER}},
            headers=target.auth("ingest"),
        )  # fmt: skip
        run_id = started["data"]["id"]
        # Two calls that differ only in the customer number are different calls; the
        # same call twice is a loop, as the fingerprints of the bytes as sent say.
        steps = [
            {"run_id": run_id, "step_index": n, "tool_name": "lookup",
             "tool_input": {"customer": customer}, "tool_output": f"ORDER #{n} of {customer}",
             "content": None}
            for n, customer in ((1, CUSTOMER), (2, CUSTOMER), (3, "CUST-000001"))
        ]  # fmt: skip
        status, _, _ = await api.post(
            "/v1/ingest/agent/steps", json=steps, headers=target.auth("ingest")
        )
        assert status == 200
        status, loops, _ = await api.get(
            f"/v1/projects/{target.id}/agent/runs/{run_id}/loops", headers=target.auth()
        )
        assert [group["step_indices"] for group in loops["data"]] == [[1, 2]]

    trace = uuid.uuid4().hex
    span = {
        "traceId": trace, "spanId": "b" * 16, "name": "execute_tool lookup", "kind": 1,
        "startTimeUnixNano": "1764590000000000000", "endTimeUnixNano": "1764590001000000000",
        "attributes": [attr("gen_ai.operation.name", "execute_tool"),
                       attr("gen_ai.tool.name", "lookup"),
                       attr("gen_ai.tool.call.arguments", json.dumps({"customer": CUSTOMER}))],
    }  # fmt: skip
    await send_spans(api, project, [span], role="ingest")

    mine = stored_text(db_url, project.id)
    assert CUSTOMER not in mine and "CUST-000001" not in mine and "ORDER #" not in mine
    assert "[REDACTED]" in mine
    assert "refund [REDACTED]" in mine  # only the match goes
    assert CUSTOMER in stored_text(db_url, other.id)

    # Back to the built-in rules only: new data keeps what the patterns hid.
    status, body = await _set_patterns(api, project, [])
    assert status == 200 and body["data"]["redaction_patterns"] == []
    status, _, _ = await api.post(
        "/v1/ingest/agent/runs",
        json={"agent_name": "shop", "input": "refund CUST-777777"},
        headers=project.auth("ingest"),
    )
    assert "CUST-777777" in stored_text(db_url, project.id)


async def test_bad_redaction_patterns_are_refused_naming_what_is_wrong(
    api: Api, project: Project
) -> None:
    for patterns, words in (
        (["(unclosed"], "redaction_patterns[0] is not a regular expression"),
        (["ok", ""], "redaction_patterns[1] is empty"),
        (["a*"], "matches the empty string"),
        (["x" * 501], "at most 500"),
        ("CUST-[0-9]+", "Expected `array`"),
        ([f"p{n}" for n in range(51)], "redaction_patterns"),
    ):
        status, body = await _set_patterns(api, project, patterns)
        assert status in (400, 422), (patterns, body)
        assert words in body["error"]["message"], (patterns, body)
    status, body = await _set_patterns(api, project, ["ok"])
    assert status == 200
    status, body, _ = await api.request(
        "PATCH", f"/v1/projects/{project.id}", json={"redaction_patterns": ["x"]},
        headers=project.auth("ingest"),
    )  # fmt: skip
    assert status == 403


def test_projects_set_redaction_on_the_command_line(db_url: str) -> None:
    project = make_project(db_url)
    database = ("--database-url", db_url)
    result = keelwave("projects", "set-redaction", project.name, "CUST-[0-9]{6}", *database)
    assert result.returncode == 0, result.stderr
    assert "built-in rules and 1 pattern" in result.stdout and "CUST-[0-9]{6}" in result.stdout
    listed = json.loads(keelwave("projects", "list", "--json", *database).stdout)
    [row] = [row for row in listed if row["name"] == project.name]
    assert row["redaction_patterns"] == ["CUST-[0-9]{6}"]
    table = keelwave("projects", "list", *database, env={"COLUMNS": "200"}).stdout
    assert "built-in + 1 pattern" in table
    result = keelwave("projects", "set-redaction", project.name, "(oops", *database)
    assert result.returncode == 1
    assert "not a regular expression" in result.stderr and "Traceback" not in result.stderr
    result = keelwave("projects", "set-redaction", project.name, *database)
    assert result.returncode == 0 and "built-in rules only" in result.stdout


async def test_changed_patterns_apply_to_the_next_request_even_before_the_notice_arrives(
    db_url: str, aiohttp_server, monkeypatch
) -> None:
    """The server that takes a PATCH of a project's patterns uses them from its next
    request on, without waiting for the database's NOTIFY to come round to its own
    key cache (which, on a busy server, it may do only after that request)."""
    # A server whose key cache hears of no change at all: no listener.
    monkeypatch.setattr(auth.KeyStore, "start", lambda self: None)
    app = create_app(make_settings(key_cache_seconds=3600), db_url)
    server = await aiohttp_server(app)
    project = make_project(db_url)
    async with aiohttp.ClientSession() as session:
        api = Api(str(server.make_url("")).rstrip("/"), session)
        assert (await _set_patterns(api, project, [r"CUST-[0-9]{6}"]))[0] == 200

        async def start_run(customer: str) -> None:
            status, _, _ = await api.post(
                "/v1/ingest/agent/runs",
                json={"agent_name": "shop", "input": f"refund {customer}"},
                headers=project.auth("ingest"),
            )
            assert status == 201

        await start_run("CUST-000001")  # the key and its rules are cached now
        assert "CUST-000001" not in stored_text(db_url, project.id)
        assert (await _set_patterns(api, project, [r"ORDER-[0-9]+"]))[0] == 200
        await start_run("CUST-000002")
        assert "CUST-000002" in stored_text(db_url, project.id)
