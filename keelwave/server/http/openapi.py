"""The OpenAPI 3.1 description of the HTTP API, generated from the code.

Every route is registered with its request and response types (operations.py);
those types are the msgspec Structs that decode requests and build answers,
and ``msgspec.json.schema_components`` turns them into JSON Schema. So the
limits the document states (name lengths, token bounds, accepted values) are
the limits ingest enforces. The server answers the document at
``/v1/openapi.json``; a copy is committed as docs/openapi.json and a test fails
when it differs from a fresh generation (``python -m keelwave.server.apidoc``
rewrites it).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import msgspec
from aiohttp import web

from keelwave import __version__
from keelwave.server.http.errors import Error
from keelwave.server.http.operations import ApiRoutes, Operation, Param
from keelwave.server.http.responses import json_response

routes = ApiRoutes("meta")
DOCUMENT = web.AppKey("openapi_document", dict)

REF = "#/components/schemas/{name}"

# The answers every authenticated operation may give besides its own, and what
# they mean; the body is always an Error.
SECURED_ERRORS = {
    "401": "Missing, unknown or revoked key",
    "403": "The key's scope does not allow this",
    "404": "Not found (or another project's)",
    "422": "Invalid field or parameter",
    "503": "Database unavailable or overloaded; retry after Retry-After",
}
BODY_ERRORS = {"400": "Malformed JSON", "413": "Body too large"}


def document(tables: Iterable[ApiRoutes]) -> dict[str, Any]:
    """The whole document for the operations of ``tables``, paths in registration order."""
    operations = [operation for table in tables for operation in table.operations]
    types: list[Any] = [Error]
    for operation in operations:
        if operation.body is not None:
            types.append(operation.body)
        if operation.error is not None:
            types.append(operation.error)
        types.extend(_response_types(operation))
    schemas, components = msgspec.json.schema_components(types, ref_template=REF)
    schema_of = dict(zip(map(_key, types), schemas, strict=True))

    paths: dict[str, dict[str, Any]] = {}
    for operation in operations:
        paths.setdefault(operation.path, {})[operation.method.lower()] = _operation(
            operation, schema_of
        )
    return {
        "openapi": "3.1.0",
        "info": {
            "title": "keelwave",
            "version": __version__,
            "description": "Runs, steps and model calls of AI agents; loops, stalls and cost.",
        },
        "components": {
            "schemas": dict(sorted(components.items())),
            "securitySchemes": {
                "apiKey": {"type": "http", "scheme": "bearer", "description": "A kw_… API key"}
            },
        },
        "security": [{"apiKey": []}],
        "paths": paths,
    }


def _key(kind: Any) -> str:
    return repr(kind)  # unions and generics are not always hashable; their repr is


def _response_types(operation: Operation) -> list[Any]:
    if operation.response is None:
        return []
    if isinstance(operation.response, tuple):
        return list(operation.response)
    return [operation.response]


def _content(schema: dict[str, Any]) -> dict[str, Any]:
    return {"application/json": {"schema": schema}}


def _operation(operation: Operation, schema_of: dict[str, dict]) -> dict[str, Any]:
    kinds = _response_types(operation)
    if not kinds:
        success: dict[str, Any] = {"type": "object", "description": "This document."}
    elif len(kinds) == 1:
        success = schema_of[_key(kinds[0])]
    else:
        success = {"oneOf": [schema_of[_key(kind)] for kind in kinds]}
    responses: dict[str, Any] = {
        str(operation.status): {"description": "OK", "content": _content(success)}
    }
    if operation.response_format is not None:
        media, text = operation.response_format
        responses[str(operation.status)] = {
            "description": text,
            "content": {media: {"schema": {"type": "string"}}},
        }
    for status in operation.also:
        responses[str(status)] = {"description": "Not OK", "content": _content(success)}
    error = _content(schema_of[_key(operation.error or Error)])
    errors = dict(SECURED_ERRORS) if operation.secured else {}
    if operation.body is not None or operation.body_formats:
        errors.update(BODY_ERRORS)
    for status, text in sorted(errors.items()):
        responses.setdefault(status, {"description": text, "content": error})

    result: dict[str, Any] = {
        "operationId": operation.operation_id,
        "summary": operation.summary,
        "tags": [operation.tag],
        "parameters": [_parameter(param, "path") for param in operation.path_params]
        + [_parameter(param, "query") for param in operation.query],
        "responses": responses,
    }
    if operation.description:
        result["description"] = operation.description
    if operation.body is not None:
        result["requestBody"] = {
            "required": True,
            "content": _content(schema_of[_key(operation.body)]),
        }
    if operation.body_formats:
        result["requestBody"] = {
            "required": True,
            "description": " ".join(f"{media}: {text}." for media, text in operation.body_formats),
            "content": {media: {"schema": _opaque(media)} for media, _ in operation.body_formats},
        }
    if not operation.secured:
        result["security"] = []
    return result


def _opaque(media: str) -> dict[str, Any]:
    """The schema of a body documented by its media type (OTLP's, defined elsewhere)."""
    if media.endswith("json"):
        return {"type": "object"}
    return {"type": "string", "format": "binary"}


def _parameter(param: Param, where: str) -> dict[str, Any]:
    return {
        "name": param.name,
        "in": where,
        "required": param.required or where == "path",
        "description": param.description,
        "schema": msgspec.json.schema(param.type),
    }


@routes.get("/v1/openapi.json", summary="This document", response=None, secured=False)
async def openapi(request: web.Request) -> web.Response:
    """The OpenAPI 3.1 description of this API."""
    return json_response(request.app[DOCUMENT])
