"""/v1/openapi.json is a valid OpenAPI 3.1 document, and real responses match it."""

from __future__ import annotations

import uuid

import jsonschema
from conftest import Api, Project, make_settings
from openapi_spec_validator import validate

from keelwave.server.app import create_app
from keelwave.server.http.openapi import document


def validator_for(doc: dict, schema: dict) -> jsonschema.Draft202012Validator:
    # Resolve "#/components/…" references against the document itself.
    return jsonschema.Draft202012Validator(
        {**schema, "components": doc["components"]},
        format_checker=jsonschema.Draft202012Validator.FORMAT_CHECKER,
    )


def response_schema(doc: dict, path: str, method: str, status: int) -> dict:
    responses = doc["paths"][path][method]["responses"]
    assert str(status) in responses, f"{method.upper()} {path} does not document {status}"
    return responses[str(status)]["content"]["application/json"]["schema"]


def test_document_is_valid_openapi_31() -> None:
    doc = document()
    validate(doc)
    assert doc["openapi"].startswith("3.1")


def test_every_route_is_documented() -> None:
    app = create_app(make_settings(), "unused")
    routes = {
        (route.method.lower(), route.resource.canonical)
        for route in app.router.routes()
        if route.method != "HEAD"
        # the API, not the dashboard's pages and assets
        and route.resource.canonical.startswith(("/v1/", "/healthz", "/readyz"))
    }
    documented = {(method, path) for path, item in document()["paths"].items() for method in item}
    assert routes - documented == set()
    assert documented - routes == set()


async def test_real_responses_match_the_document(api: Api, project: Project) -> None:
    status, doc, _ = await api.get("/v1/openapi.json")
    assert status == 200
    checked = 0

    async def check(method: str, template: str, path: str, **kwargs) -> dict:
        nonlocal checked
        status, body, _ = await api.request(method.upper(), path, **kwargs)
        schema = (
            response_schema(doc, template, method, status)
            if status < 400
            else {"$ref": "#/components/schemas/Error"}
        )
        validator_for(doc, schema).validate(body)
        checked += 1
        return body

    auth = project.auth()
    run = str(uuid.uuid4())
    await check(
        "post",
        "/v1/ingest/agent/runs",
        "/v1/ingest/agent/runs",
        headers=auth,
        json={"id": run, "agent_name": "a", "input": {"q": 1}, "tags": ["x"]},
    )
    child = str(uuid.uuid4())
    await check(
        "post",
        "/v1/ingest/agent/runs",
        "/v1/ingest/agent/runs",
        headers=auth,
        json={"id": child, "agent_name": "a", "parent_run_id": run},
    )
    steps = [
        {"run_id": run, "step_index": i, "tool_name": "t", "tool_input": {}, "duration_ms": 3}
        for i in (1, 2)
    ]
    steps.append({"run_id": run, "step_index": 3, "step_type": "think", "content": "hm"})
    await check(
        "post", "/v1/ingest/agent/steps", "/v1/ingest/agent/steps", headers=auth, json=steps
    )
    await check(
        "post",
        "/v1/ingest/ai",
        "/v1/ingest/ai",
        headers=auth,
        json={"run_id": run, "provider": "openai", "model": "gpt-4o", "input_tokens": 9},
    )
    await check(
        "post",
        "/v1/ingest/agent/runs/{run_id}/finish",
        f"/v1/ingest/agent/runs/{run}/finish",
        headers=auth,
        json={"termination_reason": "loop_detected", "loop_detected": True, "loop_step_index": 1},
    )
    await check(
        "post",
        "/v1/ingest/agent/runs/{run_id}/finish",
        f"/v1/ingest/agent/runs/{uuid.uuid4()}/finish",
        headers=auth,
        json={"termination_reason": "clean"},
    )  # 404 matches Error

    base = "/v1/projects/{project_id}/agent"
    real = f"/v1/projects/{project.id}/agent"
    for suffix in (
        "/runs",
        "/runs?status=finished&limit=1",
        "/summary?window=1h",
        "/health?window=7d",
        "/runs/timeseries?window=6h&bucket=15m",
        "/runs/terminations",
        "/tools",
        f"/runs/{run}",
        f"/runs/{run}/loops",
        f"/runs/{run}/steps",
        f"/runs/{run}/llm",
        f"/runs/{child}",
    ):
        template = base + suffix.split("?")[0].replace(run, "{run_id}").replace(child, "{run_id}")
        body = await check("get", template, real + suffix, headers=auth)
        assert "data" in body
    await check("get", "/v1/me", "/v1/me", headers=auth)
    await check("get", "/healthz", "/healthz")
    await check("get", "/readyz", "/readyz")
    await check("get", f"{base}/summary", f"{real}/summary?window=eternity", headers=auth)
    assert checked >= 20
