"""/v1/openapi.json is a valid OpenAPI 3.1 document generated from the code: the
committed docs/openapi.json is current, real responses match it, and the limits
it states are exactly where the server starts to refuse."""

from __future__ import annotations

import json
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

import jsonschema
import pytest
from conftest import Api, Project, make_settings
from openapi_spec_validator import validate

from keelwave.server.app import api_document as document
from keelwave.server.app import create_app

DOCS = Path(__file__).resolve().parent.parent / "docs" / "openapi.json"


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


def test_committed_document_is_current() -> None:
    assert json.loads(DOCS.read_text()) == document(), (
        "docs/openapi.json is out of date: run python -m keelwave.server.apidoc"
    )
    check = subprocess.run(
        [sys.executable, "-m", "keelwave.server.apidoc", "--check"], capture_output=True, text=True
    )
    assert check.returncode == 0, check.stderr


def test_served_document_is_the_generated_one() -> None:
    app = create_app(make_settings(), "unused")
    from keelwave.server.http.openapi import DOCUMENT

    assert app[DOCUMENT] == document()


def test_operation_ids_are_unique() -> None:
    ids = [op["operationId"] for item in document()["paths"].values() for op in item.values()]
    assert len(ids) == len(set(ids))


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


# The limits the document states, tried at the server: the last accepted value
# must be accepted and the first refused value refused with a 422 naming the field.

INGEST_BODIES = {
    "/v1/ingest/agent/runs": "RunStart",
    "/v1/ingest/agent/steps": "Step",
    "/v1/ingest/ai": "ModelCall",
    "/v1/ingest/agent/runs/{run_id}/finish": "RunFinish",
}


def _plain(schema: dict) -> dict:
    """The non-null branch of ``X | None``."""
    for branch in schema.get("anyOf", []):
        if branch.get("type") != "null":
            return branch
    return schema


def _minimal(component: dict) -> dict[str, Any]:
    body: dict[str, Any] = {}
    for name in component["required"]:
        schema = _plain(component["properties"][name])
        if "enum" in schema:
            body[name] = schema["enum"][0]
        elif schema.get("format") == "uuid":
            body[name] = str(uuid.uuid4())
        elif schema.get("type") == "integer":
            body[name] = schema.get("minimum", 0) + 1
        else:
            body[name] = "a" * max(1, schema.get("minLength", 1))
    return body


def _edges(schema: dict) -> list[tuple[Any, Any]]:
    """(last accepted, first refused) pairs for each limit of a field's schema."""
    plain = _plain(schema)
    kind = plain.get("type")
    edges = []
    if kind == "string":
        if "maxLength" in plain:
            edges.append(("x" * plain["maxLength"], "x" * (plain["maxLength"] + 1)))
        if plain.get("minLength"):
            edges.append(("x" * plain["minLength"], "x" * (plain["minLength"] - 1)))
    if kind in ("integer", "number"):
        step = 1 if kind == "integer" else plain.get("maximum", 1)
        if "maximum" in plain:
            edges.append((plain["maximum"], plain["maximum"] + step))
        if "minimum" in plain:
            low = plain["minimum"]
            edges.append((low, low - 1 if kind == "integer" else low - 0.5))
    if kind == "array" and "maxItems" in plain:
        item = "t"
        edges.append(([item] * plain["maxItems"], [item] * (plain["maxItems"] + 1)))
    if "enum" in plain:
        edges.append((plain["enum"][-1], "not-" + plain["enum"][-1]))
    return edges


@pytest.mark.parametrize("path", list(INGEST_BODIES))
async def test_stated_limits_are_the_servers_limits(api: Api, project: Project, path: str) -> None:
    doc = document()
    component = doc["components"]["schemas"][INGEST_BODIES[path]]
    auth = project.auth()
    tried = 0
    for field, schema in component["properties"].items():
        for accepted, refused in _edges(schema):
            for value, ok in ((accepted, True), (refused, False)):
                body = {**_minimal(component), field: value}
                url = path
                if "{run_id}" in path:
                    run = str(uuid.uuid4())
                    status, _, _ = await api.post(
                        "/v1/ingest/agent/runs", headers=auth, json={"id": run, "agent_name": "a"}
                    )
                    assert status == 201
                    url = path.replace("{run_id}", run)
                status, answer, _ = await api.post(url, headers=auth, json=body)
                if ok:
                    assert status < 300, (field, str(value)[:40], answer)
                else:
                    assert status == 422, (field, str(value)[:40], status, answer)
                    assert answer["error"]["field"] == field, answer
                tried += 1
    assert tried >= 6
