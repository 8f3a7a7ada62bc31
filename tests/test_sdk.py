"""The Python SDK against a real `keelwave serve`: the spec's examples, decorators,
runs, guards, fingerprints, and an agent that never notices a broken server."""

from __future__ import annotations

import asyncio
import base64
import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx
import pytest
from conftest import make_project
from serve_process import ServeProcess

from keelwave import Keelwave, LoopDetected, MaxStepsExceeded, get_current_run
from keelwave.sdk import canonical_json, fingerprint


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


SPEC_LOOP_EXAMPLE = """
import os
from keelwave import Keelwave, get_current_run

client = Keelwave(
    api_key=os.environ["KEELWAVE_API_KEY"],
    endpoint=os.environ.get("KEELWAVE_ENDPOINT", "http://localhost:8080"),
)


@client.observe(name="web_search", step_type="tool_call")
def web_search(q: str, max_results: int = 3) -> dict:
    return {"results": search(q, max_results=max_results)}


@client.agent(name="looping-agent")
def run_loop(question: str) -> str:
    run = get_current_run()
    for _ in range(5):
        # Second identical call marks the run as a loop. No extra code.
        web_search(q=question, max_results=3)
    return run.id if run else ""
"""


def test_spec_loop_example_runs_verbatim(server: ServeProcess, keys, tmp_path: Path) -> None:
    script = tmp_path / "agent.py"
    script.write_text(
        "def search(q, max_results):\n"
        "    return [f'result {i} for {q}' for i in range(max_results)]\n"
        + SPEC_LOOP_EXAMPLE
        + "\nprint(run_loop('What is keelwave?'))\n"
    )
    env = {**os.environ, "KEELWAVE_API_KEY": keys.keys["ingest"], "KEELWAVE_ENDPOINT": server.url}
    result = subprocess.run(
        [sys.executable, str(script)], capture_output=True, text=True, env=env, timeout=60
    )
    assert result.returncode == 0, result.stderr
    run_id = result.stdout.strip()
    run = api(server, keys, f"/runs/{run_id}")  # flushed at interpreter exit
    assert run["agent_name"] == "looping-agent"
    assert run["termination_reason"] == "clean"
    assert run["loop_detected"] is True and run["loop_step_index"] == 1
    raw = json.dumps({"q": "What is keelwave?", "max_results": 3}, sort_keys=True)
    expected = base64.b64encode(fingerprint("web_search", raw)).decode()
    assert api(server, keys, f"/runs/{run_id}/loops") == [
        {
            "fingerprint": expected,
            "hits": 5,
            "step_indices": [1, 2, 3, 4, 5],
            "tool_name": "web_search",
        }
    ]


def test_spec_intro_example(server: ServeProcess, keys, client: Keelwave) -> None:
    @client.observe(name="web_search", step_type="tool_call")
    def web_search(q: str) -> dict:
        return {"results": [f"result for: {q}"]}

    @client.agent(name="research-agent")
    def run_agent(question: str) -> str:
        results = web_search(q=question)
        return f"Found: {results['results'][0]}"

    assert run_agent("why?") == "Found: result for: why?"
    assert client.flush()
    [run] = api(server, keys, "/runs")
    assert run["agent_name"] == "research-agent" and run["step_count"] == 1
    assert run["loop_detected"] is False and run["termination_reason"] == "clean"
    [step] = api(server, keys, f"/runs/{run['id']}/steps")
    assert step["tool_name"] == "web_search" and step["tool_input"] == {"q": "why?"}
    assert step["tool_output"] == {"results": ["result for: why?"]}
    detail = api(server, keys, f"/runs/{run['id']}")
    assert detail["input"] == {"question": "why?"} and detail["output"] == "Found: result for: why?"


def test_manual_run_tool_call_and_check(server, keys, client: Keelwave) -> None:
    with client.run("manual") as run:
        assert get_current_run() is run
        for _ in range(3):
            index = run.tool_call("web_search", input={"q": "x"}, output={"n": 1})
            duplicate = run.check_fingerprint("web_search", {"q": "x"})
            assert duplicate is (index > 1)
        run.think("maybe try something else")
        run.tool_call("fetch", input={"url": "u"})  # never checked: cannot flag anything
        run.tool_call("fetch", input={"url": "u"})
    assert get_current_run() is None
    client.flush()
    stored = api(server, keys, f"/runs/{run.id}")
    assert stored["loop_detected"] is True and stored["loop_step_index"] == 1
    assert stored["step_count"] == 6
    # the server sees both repeats, whatever the SDK checked
    loops = api(server, keys, f"/runs/{run.id}/loops")
    assert [(g["tool_name"], g["step_indices"]) for g in loops] == [
        ("web_search", [1, 2, 3]),
        ("fetch", [5, 6]),
    ]


def test_a_model_call_recorded_once_it_answered_started_its_latency_earlier(
    server, keys, client: Keelwave
) -> None:
    """run.llm_call is made when the model has answered (as the adapters do): the call
    began latency_ms before that, which is where a timeline must draw it."""
    from datetime import datetime, timedelta

    with client.run("timed") as run:
        before = datetime.now().astimezone()
        run.llm_call("openai", "gpt-4o", input_tokens=10, latency_ms=30_000)
        after = datetime.now().astimezone()
    client.flush()
    [call] = api(server, keys, f"/runs/{run.id}/llm")
    started = datetime.fromisoformat(call["started_at"])
    assert before - timedelta(seconds=30) <= started <= after - timedelta(seconds=30)


def test_key_order_does_not_matter_and_server_agrees(server, keys, client) -> None:
    @client.observe()
    def lookup(params: dict) -> int:
        return 1

    @client.agent()
    def agent() -> str:
        lookup({"b": {"y": 1, "x": [1, {"k": 2, "j": 3}]}, "a": "é"})
        lookup({"a": "é", "b": {"x": [1, {"j": 3, "k": 2}], "y": 1}})
        return get_current_run().id

    run_id = agent()
    client.flush()
    [group] = api(server, keys, f"/runs/{run_id}/loops")
    raw = canonical_json({"params": {"a": "é", "b": {"x": [1, {"j": 3, "k": 2}], "y": 1}}})
    assert raw == json.dumps(
        {"params": {"a": "é", "b": {"x": [1, {"j": 3, "k": 2}], "y": 1}}}, sort_keys=True
    )
    assert group["fingerprint"] == base64.b64encode(fingerprint("lookup", raw)).decode()
    assert group["step_indices"] == [1, 2]


def test_errors_are_recorded_and_reraised(server, keys, client) -> None:
    @client.observe()
    def flaky(x: int) -> int:
        raise ValueError(f"bad {x}")

    @client.agent(name="failing")
    def agent() -> None:
        flaky(1)

    with pytest.raises(ValueError, match="bad 1"):
        agent()
    client.flush()
    [run] = api(server, keys, "/runs")
    assert run["termination_reason"] == "error" and run["error"] == "ValueError: bad 1"
    [step] = api(server, keys, f"/runs/{run['id']}/steps")
    assert step["error"] == "ValueError: bad 1" and step["tool_output"] is None


def test_nested_agents_make_child_runs(server, keys, client) -> None:
    @client.agent(name="child")
    def child(n: int) -> int:
        return n * 2

    @client.agent(name="parent")
    def parent() -> str:
        child(1)
        child(2)
        return get_current_run().id

    parent_id = parent()
    client.flush()
    detail = api(server, keys, f"/runs/{parent_id}")
    assert len(detail["child_runs"]) == 2
    for child_id in detail["child_runs"]:
        assert api(server, keys, f"/runs/{child_id}")["parent_run_id"] == parent_id


def test_async_agents_and_tasks_keep_their_own_runs(server, keys, client) -> None:
    @client.observe()
    async def fetch(url: str) -> str:
        await asyncio.sleep(0.01)
        return url.upper()

    @client.agent(name="async-agent")
    async def agent(n: int) -> str:
        for _ in range(n):
            await fetch(url="same")
        return get_current_run().id

    async def main() -> list[str]:
        return await asyncio.gather(agent(1), agent(3), agent(2))

    ids = asyncio.run(main())
    client.flush()
    counts = [api(server, keys, f"/runs/{run_id}")["step_count"] for run_id in ids]
    assert counts == [1, 3, 2]
    assert [api(server, keys, f"/runs/{i}")["loop_detected"] for i in ids] == [False, True, True]

    async def with_block() -> str:
        async with client.run("async-with") as run:
            await fetch(url="x")
            return run.id

    run_id = asyncio.run(with_block())
    client.flush()
    assert api(server, keys, f"/runs/{run_id}")["termination_reason"] == "clean"


def test_threads_see_their_own_run(client) -> None:
    seen = {}

    def worker(name: str) -> None:
        with client.run(name) as run:
            time.sleep(0.05)
            seen[name] = get_current_run() is run

    threads = [threading.Thread(target=worker, args=(f"t{i}",)) for i in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert seen == {f"t{i}": True for i in range(4)}


def test_guards(server, keys, client) -> None:
    @client.observe()
    def step(i: int) -> int:
        return i

    @client.agent(name="bounded", max_steps=3)
    def bounded() -> None:
        for i in range(10):
            step(i)

    with pytest.raises(MaxStepsExceeded):
        bounded()

    calls = []

    @client.observe()
    def search(q: str) -> str:
        calls.append(q)
        return q

    @client.agent(name="guarded", stop_on_loop=True)
    def guarded() -> None:
        search("a")
        search("b")
        search("a")  # raises LoopDetected after recording the repeat
        search("never")

    with pytest.raises(LoopDetected) as caught:
        guarded()
    assert caught.value.first_step == 1 and caught.value.repeated_at == 3
    assert calls == ["a", "b", "a"]
    client.flush()
    runs = {run["agent_name"]: run for run in api(server, keys, "/runs")}
    assert runs["bounded"]["termination_reason"] == "max_steps_reached"
    assert runs["bounded"]["step_count"] == 3
    assert runs["guarded"]["termination_reason"] == "loop_detected"
    assert runs["guarded"]["loop_step_index"] == 1


def test_unencodable_inputs_never_raise(server, keys, client) -> None:
    class Opaque:
        pass

    cyclic: list = [1]
    cyclic.append(cyclic)

    @client.observe()
    def tool(value: object) -> object:
        return value

    @client.agent()
    def agent() -> str:
        for value in (
            {1, 2, 3},
            b"\x00\xff",
            float("nan"),
            {1: "int key", "a": 2},
            Opaque(),
            cyclic,
            {"when": __import__("datetime").date(2026, 11, 30)},
        ):
            tool(value)
        tool({3, 2, 1})  # same set, same canonical JSON: a repeat
        return get_current_run().id

    run_id = agent()
    client.flush()
    steps = api(server, keys, f"/runs/{run_id}/steps")
    assert len(steps) == 8
    assert steps[0]["tool_input"] == {"value": [1, 2, 3]}
    assert steps[2]["tool_input"] == {"value": "NaN"}
    assert steps[4]["tool_input"] == {"value": "<Opaque>"}
    assert [g["step_indices"] for g in api(server, keys, f"/runs/{run_id}/loops")] == [[1, 8]]


def test_no_key_means_no_op(monkeypatch, caplog) -> None:
    monkeypatch.delenv("KEELWAVE_API_KEY", raising=False)
    sdk = Keelwave()
    assert not sdk.enabled
    assert "no API key" in caplog.text

    @sdk.observe()
    def tool(x: int) -> int:
        return x + 1

    @sdk.agent()
    def agent() -> str:
        assert tool(1) == 2
        return get_current_run().id

    assert agent()  # runs still have ids


def test_agent_runs_at_full_speed_when_the_server_is_down(caplog) -> None:
    """Nothing listens on the endpoint: the agent never waits and never sees an error."""
    sdk = Keelwave(
        api_key="kw_" + "x" * 43, endpoint="http://127.0.0.1:9", max_queue=1000, flush_at_exit=False
    )

    @sdk.observe()
    def tool(i: int) -> int:
        return i

    @sdk.agent()
    def agent() -> None:
        for i in range(2000):
            tool(i)

    agent()
    # The agent is done while the sender is still failing to connect: it never waited.
    assert sdk._transport.dropped + len(sdk._transport._queue) > 0
    time.sleep(0.3)
    sdk.shutdown(timeout=0.5)
    assert sdk._transport.dropped > 0  # the queue is bounded
    assert caplog.text.count("cannot reach the server") == 1  # said once


def test_sdk_resends_after_the_server_returns(db_url: str, tmp_path: Path, keys) -> None:
    """Events recorded while the server was down arrive once it is up, exactly once."""
    from serve_process import free_port

    port = free_port()
    sdk = Keelwave(
        api_key=keys.keys["ingest"], endpoint=f"http://127.0.0.1:{port}", flush_at_exit=False
    )

    @sdk.observe()
    def tool(i: int) -> int:
        return i

    with sdk.run("patient") as run:
        for i in range(50):
            tool(i)
    assert not sdk.flush(timeout=0.5)  # nothing can be sent yet
    server = ServeProcess(
        "--database-url", db_url, "--port", str(port), log=tmp_path / "late.log", port=None
    )
    try:
        assert sdk.flush(timeout=30)
        response = httpx.get(
            f"{server.url}/v1/projects/{keys.id}/agent/runs/{run.id}/steps", headers=keys.auth()
        )
        assert [s["step_index"] for s in response.json()["data"]] == list(range(1, 51))
    finally:
        sdk.shutdown()
        server.stop()
        server.kill()


def test_demo_sends_a_full_picture(server: ServeProcess, keys) -> None:
    from serve_process import keelwave

    env = {"KEELWAVE_API_KEY": keys.keys["ingest"], "KEELWAVE_ENDPOINT": server.url}
    result = keelwave("demo", "--runs", "25", env=env)
    assert result.returncode == 0, result.stderr
    assert "Sent 25 runs" in result.stdout
    runs = api(server, keys, "/runs?limit=500")
    top = [run for run in runs if run["parent_run_id"] is None]
    assert len(top) == 25
    assert len(runs) > 25  # the triage agent's specialists ran as its children
    assert {run["agent_name"] for run in runs if run["parent_run_id"]} <= {
        "research-agent", "sql-agent"}  # fmt: skip
    reasons = {run["termination_reason"] for run in runs}
    assert {"clean", "error", "loop_detected", "max_steps_reached", "context_limit"} <= reasons
    # The server's own verdicts: an exact loop, a cycle, near-duplicate calls.
    deadline = time.monotonic() + 30
    while True:
        found = {kind: len(api(server, keys, f"/runs?finding={kind}"))
                 for kind in ("exact_loop", "cycle", "near_duplicate")}  # fmt: skip
        if all(found.values()) or time.monotonic() > deadline:
            break
        time.sleep(0.5)
    assert all(found.values()), found
    assert any(run["loop_detected"] for run in runs)
    assert any(run["status"] == "running" for run in runs)  # left unfinished on purpose
    assert sum(run["cost_usd"] for run in runs) > 0
    refused = keelwave("demo", env={**env, "KEELWAVE_API_KEY": keys.keys["read"]})
    assert refused.returncode == 1 and "scope 'read'" in refused.stderr


def test_sdk_retries_503_and_honours_retry_after() -> None:
    """A server that answers 503 with Retry-After: 2 before it accepts: the SDK waits
    what it is told (longer than its own first backoff of about half a second)
    before each retry, and nothing is lost."""
    import http.server

    received: list[list[dict]] = []
    # The server refuses what arrives in the first half second after its first request:
    # the SDK may have several requests on their way at once (a busy machine makes that
    # likelier), and each of those must be refused too for the wait to be measurable.
    refusing: dict[str, float] = {}
    arrivals: list[tuple[float, int]] = []  # (when, status answered)

    class Flaky(http.server.BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def do_POST(self) -> None:  # noqa: N802
            body = self.rfile.read(int(self.headers["Content-Length"]))
            now = time.monotonic()
            if now < refusing.setdefault("until", now + 0.5):
                arrivals.append((now, 503))
                self.send_response(503)
                self.send_header("Retry-After", "2")
                payload = b'{"error": {"code": "overloaded", "message": "busy"}}'
            else:
                arrivals.append((now, 200))
                parsed = json.loads(body)
                received.append(parsed if isinstance(parsed, list) else [parsed])
                self.send_response(200)
                payload = b'{"data": {}}'
            self.send_header("Content-Length", str(len(payload)))
            self.end_headers()
            self.wfile.write(payload)

        def log_message(self, *args: object) -> None:
            pass

    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Flaky)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    sdk = Keelwave(
        api_key="kw_" + "y" * 43,
        endpoint=f"http://127.0.0.1:{httpd.server_port}",
        flush_at_exit=False,
    )
    with sdk.run("patient") as run:
        for i in range(20):
            run.tool_call("t", input={"i": i})
    assert sdk.flush(timeout=30)
    sdk.shutdown()
    httpd.shutdown()
    steps = [item for batch in received for item in batch if "step_index" in item]
    assert sorted(step["step_index"] for step in steps) == list(range(1, 21))
    assert any(status == 503 for _, status in arrivals)
    # Nothing was accepted before the 2 s the server asked for had passed since it
    # first refused. A lower bound only: a slow machine makes the gap longer.
    first_refusal = min(at for at, status in arrivals if status == 503)
    first_accepted = min(at for at, status in arrivals if status == 200)
    assert first_accepted - first_refusal >= 1.9, arrivals
