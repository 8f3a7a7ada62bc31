"""Tracebacks, from the exception to what a reader gets: the Python SDK sends the
formatted traceback of an exception that escapes a run or a step (its last 8 KiB), the
server keeps its last 16 KiB, redacted like the error, and answers it on the run, its
steps and its timeline. OTLP exception events' stack traces land in the same place."""

from __future__ import annotations

import uuid

import httpx
import pytest
from conftest import make_project
from serve_process import ServeProcess

from keelwave import Keelwave
from keelwave.protocol import TRACEBACK_SENT_MAX, TRACEBACK_STORED_MAX, bound_traceback


@pytest.fixture
def keys(db_url: str):
    return make_project(db_url)


@pytest.fixture
def client(server: ServeProcess, keys) -> Keelwave:
    sdk = Keelwave(api_key=keys.keys["ingest"], endpoint=server.url, flush_at_exit=False)
    yield sdk
    sdk.shutdown()


def api(server: ServeProcess, keys, path: str) -> dict | list:
    response = httpx.get(
        f"{server.url}/v1/projects/{keys.id}/agent{path}", headers=keys.auth("read")
    )
    response.raise_for_status()
    return response.json()["data"]


def post(server: ServeProcess, keys, path: str, body: object) -> httpx.Response:
    return httpx.post(f"{server.url}{path}", json=body, headers=keys.auth("ingest"))


def test_bound_traceback_keeps_the_end_from_a_line() -> None:
    text = "".join(f"  File 'agent.py', line {n}, in step_{n}\n" for n in range(1000))
    text += "ValueError: the end\n"
    bounded = bound_traceback(text, 2048)
    assert len(bounded) <= 2048
    marker, rest = bounded.split("\n", 1)
    assert rest.startswith("  File ") and text.endswith(rest)
    assert marker == f"… ({len(text) - len(rest)} earlier characters cut)"
    assert bound_traceback("short\n", 2048) == "short\n"


def test_an_exception_escaping_an_agent_and_a_step_sends_its_traceback(
    server, keys, client
) -> None:
    def deep_inside(x: int) -> int:
        raise ValueError(f"bad {x}")

    @client.observe(name="lookup")
    def lookup(x: int) -> int:
        return deep_inside(x)

    @client.agent(name="failing")
    def agent() -> None:
        lookup(1)

    with pytest.raises(ValueError, match="bad 1"):
        agent()
    client.flush()
    [row] = api(server, keys, "/runs")
    run = api(server, keys, f"/runs/{row['id']}")
    assert run["error"] == "ValueError: bad 1"
    trace = run["error_traceback"]
    assert trace.startswith("Traceback (most recent call last):")
    assert "in deep_inside" in trace and "in lookup" in trace
    assert trace.rstrip().endswith("ValueError: bad 1")
    [step] = api(server, keys, f"/runs/{row['id']}/steps")
    assert "in deep_inside" in step["error_traceback"]
    [item] = api(server, keys, f"/runs/{row['id']}/timeline")
    assert item["error_traceback"] == step["error_traceback"]


def test_the_context_manager_and_tool_call_send_tracebacks_too(server, keys, client) -> None:
    with pytest.raises(KeyError):  # noqa: SIM117
        with client.run("manual") as run:
            try:
                {}["missing"]
            except KeyError as error:
                run.tool_call("dict_get", {"key": "missing"}, error=error)
                raise
    with client.run("told") as told:
        told.tool_call("check", {}, error="not an exception: no traceback")
    client.flush()
    failed = api(server, keys, f"/runs/{run.id}")
    assert failed["termination_reason"] == "error"
    assert "KeyError: 'missing'" in failed["error_traceback"]
    [step] = api(server, keys, f"/runs/{run.id}/steps")
    assert "KeyError: 'missing'" in step["error_traceback"]
    [plain] = api(server, keys, f"/runs/{told.id}/steps")
    assert plain["error"] == "not an exception: no traceback"
    assert plain["error_traceback"] is None
    assert api(server, keys, f"/runs/{told.id}")["error_traceback"] is None


def test_a_deep_recursion_sends_only_its_end(server, keys, client) -> None:
    # Two functions calling each other: Python does not fold their frames together.
    def ping(n: int) -> int:
        return pong(n + 1) if n < 150 else int("not a number")

    def pong(n: int) -> int:
        return ping(n + 1)

    @client.agent(name="recursive")
    def agent() -> None:
        ping(0)

    with pytest.raises(ValueError):
        agent()
    client.flush()
    [row] = api(server, keys, "/runs")
    trace = api(server, keys, f"/runs/{row['id']}")["error_traceback"]
    assert len(trace) <= TRACEBACK_SENT_MAX
    assert trace.startswith("… (") and "earlier characters cut)\n" in trace
    assert "invalid literal for int()" in trace


def test_the_server_cuts_long_tracebacks_and_redacts_them(server, keys) -> None:
    run_id = str(uuid.uuid4())
    assert post(server, keys, "/v1/ingest/agent/runs", {"id": run_id, "agent_name": "curl"})
    frames = "".join(f'  File "x.py", line {n}, in f\n' for n in range(2000))
    secret = "sk-" + "a1B2c3D4" * 6
    trace = frames + f"RuntimeError: called with Authorization: Bearer {secret}\n"
    step = {"run_id": run_id, "step_index": 1, "tool_name": "t", "error": "RuntimeError",
            "error_traceback": trace}  # fmt: skip
    assert post(server, keys, "/v1/ingest/agent/steps", step).status_code == 200
    finish = {"termination_reason": "error", "error": "RuntimeError", "error_traceback": trace}
    answer = post(server, keys, f"/v1/ingest/agent/runs/{run_id}/finish", finish)
    assert answer.status_code == 200, answer.text
    for kept in (
        api(server, keys, f"/runs/{run_id}")["error_traceback"],
        api(server, keys, f"/runs/{run_id}/steps")[0]["error_traceback"],
    ):
        assert len(kept) <= TRACEBACK_STORED_MAX
        assert kept.startswith("… (") and "earlier characters cut)\n" in kept
        assert secret not in kept and "[REDACTED]" in kept
        assert kept.endswith("\n") and "RuntimeError: called with" in kept
    wrong = post(server, keys, "/v1/ingest/agent/steps", {**step, "error_traceback": 5})
    assert wrong.status_code == 422 and wrong.json()["error"]["field"] == "error_traceback"


def test_an_otlp_exception_event_gives_the_traceback(server, keys) -> None:
    trace_id, agent_span, tool_span = "ab" * 16, "01" * 8, "02" * 8
    stack = 'Traceback (most recent call last):\n  File "tool.py", line 3, in run\nOSError: gone\n'
    exception = {"name": "exception", "timeUnixNano": "1764590000500000000", "attributes": [
        {"key": "exception.type", "value": {"stringValue": "OSError"}},
        {"key": "exception.message", "value": {"stringValue": "gone"}},
        {"key": "exception.stacktrace", "value": {"stringValue": stack}},
    ]}  # fmt: skip
    spans = [
        {"traceId": trace_id, "spanId": agent_span, "name": "invoke_agent shop",
         "startTimeUnixNano": "1764590000000000000", "endTimeUnixNano": "1764590002000000000",
         "status": {"code": 2, "message": "gone"}, "events": [exception],
         "attributes": [{"key": "gen_ai.operation.name", "value": {"stringValue": "invoke_agent"}},
                        {"key": "gen_ai.agent.name", "value": {"stringValue": "shop"}}]},
        {"traceId": trace_id, "spanId": tool_span, "parentSpanId": agent_span,
         "name": "execute_tool fetch", "startTimeUnixNano": "1764590000100000000",
         "endTimeUnixNano": "1764590000600000000", "status": {"code": 2}, "events": [exception],
         "attributes": [{"key": "gen_ai.operation.name", "value": {"stringValue": "execute_tool"}},
                        {"key": "gen_ai.tool.name", "value": {"stringValue": "fetch"}}]},
    ]  # fmt: skip
    body = {"resourceSpans": [{"resource": {}, "scopeSpans": [{"spans": spans}]}]}
    answer = httpx.post(f"{server.url}/v1/traces", json=body, headers=keys.auth("ingest"))
    assert answer.status_code == 200, answer.text
    [row] = api(server, keys, "/runs")
    assert api(server, keys, f"/runs/{row['id']}")["error_traceback"] == stack
    [step] = api(server, keys, f"/runs/{row['id']}/steps")
    assert step["error_traceback"] == stack
