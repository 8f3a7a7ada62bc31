"""The OpenAPI 3.1 description of the HTTP API, served at ``/v1/openapi.json``.

Written out by hand, next to the code it describes, and kept true by
tests/test_openapi.py, which validates real responses against these schemas.
"""

from __future__ import annotations

from typing import Any

from aiohttp import web

from keelwave import __version__
from keelwave.protocol import CALL_STATUSES, STEP_TYPES, TERMINATION_REASONS
from keelwave.server.http.responses import json_response

routes = web.RouteTableDef()

JSONValue: dict[str, Any] = {"description": "Any JSON value, stored as sent."}
STR = {"type": "string"}
NSTR = {"type": ["string", "null"]}
INT = {"type": "integer"}
NUM = {"type": "number"}
NNUM = {"type": ["number", "null"]}
BOOL = {"type": "boolean"}
UUID = {"type": "string", "format": "uuid"}
NUUID = {"type": ["string", "null"], "format": "uuid"}
TIME = {"type": "string", "format": "date-time"}
NTIME = {"type": ["string", "null"], "format": "date-time"}
RATE = {"type": ["number", "null"], "description": "part / whole; null when whole is 0"}


def ref(name: str) -> dict[str, str]:
    return {"$ref": f"#/components/schemas/{name}"}


def obj(properties: dict[str, Any], required: list[str] | None = None, **extra: Any) -> dict:
    schema: dict[str, Any] = {"type": "object", "properties": properties}
    schema["required"] = list(properties) if required is None else required
    schema.update(extra)
    return schema


def envelope(data: dict[str, Any], **beside: Any) -> dict:
    return obj({"data": data, **beside})


WINDOW = {"since": TIME, "until": TIME}

SCHEMAS: dict[str, Any] = {
    "Error": obj(
        {"error": obj({"code": STR, "message": STR, "field": STR}, required=["code", "message"])}
    ),
    "RunStart": obj(
        {
            "agent_name": {"type": "string", "minLength": 1, "maxLength": 256},
            "id": UUID,
            "started_at": TIME,
            "parent_run_id": NUUID,
            "input": JSONValue,
            "metadata": JSONValue,
            "tags": {"type": "array", "items": STR, "maxItems": 64},
        },
        required=["agent_name"],
    ),
    "RunFinish": obj(
        {
            "termination_reason": {"enum": list(TERMINATION_REASONS)},
            "loop_detected": {"type": ["boolean", "null"]},
            "loop_step_index": {"type": ["integer", "null"], "minimum": 0},
            "output": JSONValue,
            "error": NSTR,
            "ended_at": NTIME,
        },
        required=["termination_reason"],
    ),
    "RunFinishItem": {
        "allOf": [{"$ref": "#/components/schemas/RunFinish"}, obj({"id": UUID})]
    },  # fmt: skip
    "Step": obj(
        {
            "run_id": UUID,
            "step_index": {"type": "integer", "minimum": 0, "maximum": 2**31 - 1},
            "step_type": {"enum": list(STEP_TYPES)},
            "tool_name": {"type": ["string", "null"], "minLength": 1, "maxLength": 256},
            "tool_input": JSONValue,
            "tool_output": JSONValue,
            "content": NSTR,
            "started_at": NTIME,
            "duration_ms": {"type": ["number", "null"], "minimum": 0},
            "error": NSTR,
        },
        required=["run_id", "step_index"],
    ),
    "ModelCall": obj(
        {
            "provider": STR,
            "model": STR,
            "id": NUUID,
            "run_id": NUUID,
            "step_index": {"type": ["integer", "null"], "minimum": 0},
            "input_tokens": {"type": "integer", "minimum": 0},
            "output_tokens": {"type": "integer", "minimum": 0},
            "cache_read_tokens": {"type": "integer", "minimum": 0},
            "reasoning_tokens": {"type": "integer", "minimum": 0},
            "cost_usd": {"type": ["number", "null"], "minimum": 0},
            "latency_ms": {"type": ["number", "null"], "minimum": 0},
            "status": {"enum": list(CALL_STATUSES)},
            "error": NSTR,
            "started_at": NTIME,
        },
        required=["provider", "model"],
    ),
    "LoopGroup": obj(
        {
            "fingerprint": {"type": "string", "description": "SHA-256 digest, standard base64"},
            "hits": INT,
            "step_indices": {"type": "array", "items": INT},
            "tool_name": STR,
        }
    ),
    "Run": obj(
        {
            "id": UUID,
            "agent_name": STR,
            "parent_run_id": NUUID,
            "status": {"enum": ["running", "stalled", "finished"]},
            "started_at": TIME,
            "ended_at": NTIME,
            "duration_ms": NNUM,
            "termination_reason": {"enum": [*TERMINATION_REASONS, None]},
            "loop_detected": BOOL,
            "loop_step_index": {"type": ["integer", "null"]},
            "step_count": INT,
            "input_tokens": INT,
            "output_tokens": INT,
            "cost_usd": NUM,
            "llm_calls": INT,
            "error": NSTR,
            "tags": {"type": "array", "items": STR},
            "last_activity_at": TIME,
        }
    ),
    "StepRecord": obj(
        {
            "step_index": INT,
            "step_type": {"enum": list(STEP_TYPES)},
            "tool_name": NSTR,
            "tool_input": JSONValue,
            "tool_output": JSONValue,
            "content": NSTR,
            "fingerprint": NSTR,
            "in_loop": BOOL,
            "loop_hits": INT,
            "started_at": TIME,
            "duration_ms": NNUM,
            "error": NSTR,
        }
    ),
    "ModelCallRecord": obj(
        {
            "id": UUID,
            "step_index": {"type": ["integer", "null"]},
            "provider": STR,
            "model": STR,
            "input_tokens": INT,
            "output_tokens": INT,
            "cache_read_tokens": INT,
            "reasoning_tokens": INT,
            "cost_usd": NNUM,
            "latency_ms": NNUM,
            "status": {"enum": list(CALL_STATUSES)},
            "error": NSTR,
            "started_at": TIME,
        }
    ),
    "WindowSummary": obj(
        {
            **WINDOW,
            "runs": INT,
            "loop_runs": INT,
            "loop_rate": RATE,
            "error_runs": INT,
            "error_rate": RATE,
            "stalled_runs": INT,
            "finished_runs": INT,
            "p50_duration_ms": NNUM,
            "p95_duration_ms": NNUM,
            "avg_steps": NNUM,
            "llm_calls": INT,
            "input_tokens": INT,
            "output_tokens": INT,
            "cost_usd": NUM,
        }
    ),
    "AgentHealth": obj(
        {
            "agent_name": STR,
            "runs": INT,
            "loop_runs": INT,
            "loop_rate": RATE,
            "error_runs": INT,
            "error_rate": RATE,
            "stalled_runs": INT,
            "p95_duration_ms": NNUM,
            "avg_steps": NNUM,
            "input_tokens": INT,
            "output_tokens": INT,
            "cost_usd": NUM,
            "last_run_at": TIME,
        }
    ),
    "TimeBucket": obj(
        {
            "start": TIME,
            "runs": INT,
            "loop_runs": INT,
            "error_runs": INT,
            "finished_runs": INT,
            "steps": INT,
            "input_tokens": INT,
            "output_tokens": INT,
            "cost_usd": NUM,
        }
    ),
    "ToolStats": obj(
        {
            "tool_name": STR,
            "calls": INT,
            "runs": INT,
            "repeated_calls": INT,
            "repeat_rate": RATE,
            "error_calls": INT,
            "error_rate": RATE,
            "p50_duration_ms": NNUM,
            "p95_duration_ms": NNUM,
        }
    ),
}
SCHEMAS["RunDetail"] = {
    "allOf": [
        ref("Run"),
        obj(
            {
                "input": JSONValue,
                "output": JSONValue,
                "metadata": JSONValue,
                "loop_groups": {"type": "array", "items": ref("LoopGroup")},
                "child_runs": {"type": "array", "items": UUID},
            }
        ),
    ]
}

RESPONSES: dict[str, Any] = {
    "RunCreated": envelope(
        {
            "oneOf": [
                obj({"id": UUID}),
                obj({"accepted": INT, "ids": {"type": "array", "items": UUID}}),
            ]
        }
    ),
    "RunFinished": envelope(
        obj({"id": UUID, "termination_reason": {"enum": list(TERMINATION_REASONS)}})
    ),
    "Accepted": envelope(obj({"accepted": INT})),
    "RunsFinished": envelope(obj({"finished": INT, "unknown": {"type": "array", "items": UUID}})),
    "CallsAccepted": envelope(obj({"accepted": INT, "ids": {"type": "array", "items": UUID}})),
    "Me": envelope(obj({"project_id": UUID, "project": STR, "scope": STR, "key_id": UUID})),
    "Loops": envelope({"type": "array", "items": ref("LoopGroup")}),
    "RunList": envelope({"type": "array", "items": ref("Run")}, next_cursor=NSTR),
    "RunDetail": envelope(ref("RunDetail")),
    "StepList": envelope({"type": "array", "items": ref("StepRecord")}, next_cursor=NSTR),
    "ModelCallList": envelope({"type": "array", "items": ref("ModelCallRecord")}),
    "Summary": envelope(obj({"current": ref("WindowSummary"), "previous": ref("WindowSummary")})),
    "Health": envelope({"type": "array", "items": ref("AgentHealth")}, **WINDOW),
    "Timeseries": envelope(
        {"type": "array", "items": ref("TimeBucket")}, bucket_seconds=INT, **WINDOW
    ),
    "Terminations": envelope(
        {
            "type": "array",
            "items": obj(
                {"termination_reason": {"enum": [*TERMINATION_REASONS, None]}, "count": INT}
            ),
        },
        **WINDOW,
    ),
    "Tools": envelope({"type": "array", "items": ref("ToolStats")}, **WINDOW),
    "Health check": obj({"status": STR}),
    "OpenAPI": {"type": "object", "description": "This document."},
}
SCHEMAS.update({f"{name.replace(' ', '')}Response": schema for name, schema in RESPONSES.items()})


def _param(name: str, where: str, schema: dict, description: str, required: bool = False):
    return {"name": name, "in": where, "schema": schema, "description": description,
            "required": required or where == "path"}  # fmt: skip


PROJECT = _param("project_id", "path", STR, "The key's project, by id or name.")
RUN = _param("run_id", "path", UUID, "The run's id.")
WINDOW_PARAMS = [
    _param("window", "query", STR, "15m, 1h, 6h, 24h, 7d, 30d…, ending now (default 24h)."),
    _param("since", "query", TIME, "Start of the range (instead of window)."),
    _param("until", "query", TIME, "End of the range (default now)."),
]
ERRORS = {
    status: {"description": text, "content": {"application/json": {"schema": ref("Error")}}}
    for status, text in {
        "400": "Malformed JSON",
        "401": "Missing, unknown or revoked key",
        "403": "The key's scope does not allow this",
        "404": "Not found (or another project's)",
        "413": "Body too large",
        "422": "Invalid field or parameter",
        "503": "Database unavailable or overloaded; retry after Retry-After",
    }.items()
}


def _op(
    summary: str,
    response: str,
    parameters: list | None = None,
    body: dict | None = None,
    status: str = "200",
    secured: bool = True,
) -> dict:
    operation: dict[str, Any] = {
        "summary": summary,
        "operationId": summary.lower().replace(" ", "_").replace(",", "").replace("'", ""),
        "parameters": parameters or [],
        "responses": {
            status: {
                "description": "OK",
                "content": {"application/json": {"schema": ref(f"{response}Response")}},
            },
            **(
                {k: v for k, v in ERRORS.items() if k in ("401", "403", "404", "422", "503")}
                if secured
                else {}
            ),  # fmt: skip
        },
    }
    if body is not None:
        operation["requestBody"] = {
            "required": True,
            "content": {"application/json": {"schema": body}},
        }
        operation["responses"].update({k: ERRORS[k] for k in ("400", "413")})
    if not secured:
        operation["security"] = []
    return operation


def one_or_many(name: str) -> dict:
    return {"oneOf": [ref(name), {"type": "array", "items": ref(name)}]}


LIST_PARAMS = [
    _param("agent_name", "query", STR, "Only this agent."),
    _param("status", "query", {"enum": ["running", "stalled", "finished"]}, "Run status."),
    _param("termination_reason", "query", {"enum": list(TERMINATION_REASONS)}, "Reason."),
    _param("loop_detected", "query", BOOL, "Only looping (true) or non-looping (false) runs."),
    _param("q", "query", STR, "Run id prefix or part of the agent name."),
    _param("limit", "query", {"type": "integer", "minimum": 1, "maximum": 500}, "Page size."),
    _param("cursor", "query", STR, "next_cursor of the previous page."),
]

A = "/v1/projects/{project_id}/agent"
PATHS = {
    "/v1/ingest/agent/runs": {
        "post": _op("Start a run", "RunCreated", body=ref("RunStart"), status="201")
    },
    "/v1/ingest/agent/runs/{run_id}/finish": {
        "post": _op("Finish a run", "RunFinished", [RUN], body=ref("RunFinish"))
    },
    "/v1/ingest/agent/runs/finish": {
        "post": _op("Finish several runs", "RunsFinished", body=one_or_many("RunFinishItem"))
    },
    "/v1/ingest/agent/steps": {"post": _op("Send steps", "Accepted", body=one_or_many("Step"))},
    "/v1/ingest/ai": {
        "post": _op("Send model calls", "CallsAccepted", body=one_or_many("ModelCall"))
    },
    "/v1/me": {"get": _op("Describe the calling key", "Me")},
    f"{A}/runs": {"get": _op("List runs", "RunList", [PROJECT, *LIST_PARAMS, *WINDOW_PARAMS])},
    f"{A}/runs/{{run_id}}": {"get": _op("Get a run", "RunDetail", [PROJECT, RUN])},
    f"{A}/runs/{{run_id}}/loops": {"get": _op("Get a run's loops", "Loops", [PROJECT, RUN])},
    f"{A}/runs/{{run_id}}/steps": {
        "get": _op(
            "List a run's steps",
            "StepList",
            [
                PROJECT,
                RUN,
                _param("limit", "query", INT, "Page size (max 5000)."),
                _param("cursor", "query", STR, "next_cursor of the previous page."),
            ],
        )
    },
    f"{A}/runs/{{run_id}}/llm": {
        "get": _op("List a run's model calls", "ModelCallList", [PROJECT, RUN])
    },
    f"{A}/summary": {"get": _op("Summary", "Summary", [PROJECT, *WINDOW_PARAMS])},
    f"{A}/health": {"get": _op("Health per agent", "Health", [PROJECT, *WINDOW_PARAMS])},
    f"{A}/runs/timeseries": {
        "get": _op(
            "Runs over time",
            "Timeseries",
            [
                PROJECT,
                *WINDOW_PARAMS,
                _param("bucket", "query", STR, "1m…1d (default 1h)."),
                _param("agent_name", "query", STR, "Only this agent."),
            ],
        )
    },
    f"{A}/runs/terminations": {
        "get": _op("Termination reasons", "Terminations", [PROJECT, *WINDOW_PARAMS])
    },
    f"{A}/tools": {"get": _op("Tool statistics", "Tools", [PROJECT, *WINDOW_PARAMS])},
    "/healthz": {"get": _op("Liveness", "Healthcheck", secured=False)},
    "/readyz": {"get": _op("Readiness", "Healthcheck", secured=False)},
    "/v1/openapi.json": {"get": _op("This document", "OpenAPI", secured=False)},
}


PATHS["/readyz"]["get"]["responses"]["503"] = {
    "description": "The database does not answer",
    "content": {"application/json": {"schema": ref("HealthcheckResponse")}},
}


def document() -> dict[str, Any]:
    return {
        "openapi": "3.1.0",
        "info": {
            "title": "keelwave",
            "version": __version__,
            "description": "Runs, steps and model calls of AI agents; loops, stalls and cost.",
        },
        "components": {
            "schemas": SCHEMAS,
            "securitySchemes": {
                "apiKey": {"type": "http", "scheme": "bearer", "description": "A kw_… API key"}
            },  # fmt: skip
        },
        "security": [{"apiKey": []}],
        "paths": PATHS,
    }


@routes.get("/v1/openapi.json")
async def openapi(request: web.Request) -> web.Response:
    return json_response(document())
