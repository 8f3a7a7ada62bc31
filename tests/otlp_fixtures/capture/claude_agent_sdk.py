"""Capture the Claude Agent SDK through OpenInference's instrumentor (no network but localhost).

Run: python tests/otlp_fixtures/capture/claude_agent_sdk.py
       needs claude-agent-sdk (its wheel bundles the Claude Code CLI)
       openinference-instrumentation-claude-agent-sdk opentelemetry-sdk
       opentelemetry-exporter-otlp-proto-common; writes claudeagentsdk_<scenario>.json

The Agent SDK does not call a model itself: it starts the Claude Code CLI as a
subprocess and talks to it over stdin/stdout (stream-json); the CLI runs the agent loop
and calls the Anthropic Messages API. So the model here is a FAKE Messages API, an
``http.server`` on 127.0.0.1 in a thread of this process, and the CLI is pointed at it
with ``ANTHROPIC_BASE_URL`` (``ANTHROPIC_API_KEY=fake``). It answers ``POST
/v1/messages`` from a script, in the streaming form the CLI asks for (SSE:
``message_start``, ``content_block_start`` / ``_delta`` / ``_stop`` for text and
``tool_use`` blocks, ``message_delta`` with ``stop_reason`` and the final usage,
``message_stop``) or as one JSON message if ``stream`` is false; anything else gets a
harmless 404 (``count_tokens`` a fixed count). The CLI runs with a throw-away ``HOME``
and working directory, no settings files, telemetry, auto-updater and nonessential
traffic off, and only the tools each scenario needs.

Token counts: the model call of turn *n* (0-based, counted per agent as the assistant
messages already in the request) reports input 100 + 10n in ``message_start`` and output
20 + n in ``message_delta``. As the real API does, ``message_start`` carries a
provisional ``output_tokens: 1``; the CLI forwards each assistant message to the SDK as
soon as its content block ends, i.e. with ``message_start``'s usage, and only the final
``ResultMessage`` has the real totals.

The custom tools are the SDK's own in-process MCP tools (``@tool`` +
``create_sdk_mcp_server``), so the model calls them as ``mcp__<server>__<tool>``. The
loop's arguments are streamed as ``{"city": "Paris",  "unit": "celsius"}`` (two spaces,
in two ``input_json_delta`` chunks); the CLI parses them, and the spans carry them
re-serialised.

OpenInference's instrumentor wraps ``query()`` and ``ClaudeSDKClient`` and builds its
spans from the SDK's message stream and from tool hooks it adds to the options: one
AGENT span per query, a TOOL span per ``tool_use`` block, an AGENT span per subagent;
there are no LLM spans (the model calls happen inside the CLI).

Scenarios (one fixture each):
  loop        the tool is called three times with the same arguments, one call per
              model turn, then the model answers
  tool_error  the tool raises; the SDK's MCP server turns it into an ``isError`` result,
              which goes to the model, which answers
  nested      the main agent calls a subagent (``agents=`` / the CLI's ``Agent`` tool,
              ``run_in_background: false``), which calls the tool once and answers;
              then the main agent answers
  nested_background  the same without ``run_in_background`` (the CLI's default is a
              background agent): the Agent tool returns at once, the main agent
              answers, and when the subagent is done the CLI sends the main agent a
              task notification, which it answers; all in one query()
  max_turns   the model asks for the tool forever, cut by ``max_turns=2``: the CLI ends
              with an ``error_max_turns`` result
  client      ``ClaudeSDKClient``: the loop, then a second prompt in the same session
              answered without tools (one AGENT span, i.e. one trace, per prompt)

``-v`` prints the CLI's stderr and every request body the fake API receives.
"""

from __future__ import annotations

import asyncio
import json
import shutil
import sys
import tempfile
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

from _otlp import Capture

# This script has the SDK's package name: take its folder off the path (after importing
# _otlp) so that `import claude_agent_sdk` finds the package, not this file.
_HERE = Path(__file__).resolve().parent
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != _HERE]

from openinference.instrumentation.claude_agent_sdk import ClaudeAgentSDKInstrumentor  # noqa: E402

cap = Capture("keelwave-capture-claudeagentsdk-openinference")
ClaudeAgentSDKInstrumentor().instrument(tracer_provider=cap.provider)

import claude_agent_sdk  # noqa: E402  (after instrument(): query() is the wrapped one)
from claude_agent_sdk import (  # noqa: E402
    AgentDefinition,
    ClaudeAgentOptions,
    ClaudeSDKClient,
    create_sdk_mcp_server,
    tool,
)

MODEL = "claude-fake-model"
LOOP_ARGS = {"city": "Paris", "unit": "celsius"}
LOOP_ARGS_JSON = '{"city": "Paris",  "unit": "celsius"}'  # the bytes the model streams
MAIN_PROMPT = "You answer weather questions with the tools you have."
EXPERT_PROMPT = "You are the weather expert subagent."
SCENARIO = "loop"  # what the fake model is scripted to do; set before each run


# --- the fake Anthropic Messages API --------------------------------------------------------


def _tool_use(name: str, args: dict, call_id: str) -> dict:
    raw = LOOP_ARGS_JSON if args == LOOP_ARGS else json.dumps(args)
    return {"type": "tool_use", "id": call_id, "name": name, "input": args, "raw": raw}


def _text(text: str) -> dict:
    return {"type": "text", "text": text}


def _script(agent: str, turn: int, body: dict) -> list[dict]:
    """The model's content blocks for this agent's turn."""
    if agent == "expert":  # the subagent of the nested scenario
        if turn < 1:
            return [
                _tool_use(
                    "mcp__weather__get_weather",
                    {"city": "Oslo", "unit": "celsius"},
                    "toolu_expert_0",
                )
            ]
        return [_text("Oslo: 3 degrees celsius.")]
    if agent != "main":  # anything the CLI asks on the side: answer plainly
        return [_text("OK")]
    if SCENARIO in ("loop", "client"):
        if turn < 3:
            return [_tool_use("mcp__weather__get_weather", LOOP_ARGS, f"toolu_{SCENARIO}_{turn}")]
        if turn == 3:
            return [_text("It is 18 degrees in Paris.")]
        return [_text("Tomorrow looks the same.")]
    if SCENARIO == "tool_error":
        if turn < 1:
            return [
                _tool_use(
                    "mcp__web__fetch_page", {"url": "https://example.com/"}, "toolu_tool_error_0"
                )
            ]
        result = _last_tool_result(body)
        return [_text(f"The page could not be fetched ({result[:40]}).")]
    if SCENARIO == "nested":
        if turn < 1:
            args = {
                "description": "Ask the weather expert",
                "prompt": "What is the weather in Oslo?",
                "subagent_type": "weather_expert",
                "run_in_background": False,  # the CLI's default is a background agent
            }
            return [_tool_use("Agent", args, "toolu_nested_0")]
        assert "Oslo: 3 degrees" in _last_tool_result(body)
        return [_text("The expert says it is 3 degrees in Oslo.")]
    if SCENARIO == "nested_background":
        if turn < 1:
            args = {
                "description": "Ask the weather expert",
                "prompt": "What is the weather in Oslo?",
                "subagent_type": "weather_expert",
            }
            return [_tool_use("Agent", args, "toolu_nested_background_0")]
        if "Oslo: 3 degrees" in json.dumps(body["messages"][-1]):
            return [_text("The expert says it is 3 degrees in Oslo.")]
        return [_text("I asked the weather expert; its answer will follow.")]
    if SCENARIO == "max_turns":
        return [_tool_use("mcp__weather__get_weather", LOOP_ARGS, f"toolu_max_turns_{turn}")]
    raise AssertionError(SCENARIO)


def _last_tool_result(body: dict) -> str:
    for message in reversed(body.get("messages", [])):
        content = message.get("content")
        for block in content if isinstance(content, list) else []:
            if block.get("type") == "tool_result":
                inner = block.get("content")
                if isinstance(inner, list):
                    return " ".join(b.get("text", "") for b in inner if isinstance(b, dict))
                return str(inner)
    return ""


def _agent_of(body: dict) -> str:
    system = json.dumps(body.get("system", ""))
    if EXPERT_PROMPT in system:
        return "expert"
    if MAIN_PROMPT in system:
        return "main"
    return "other"


def _sse(events: list[dict]) -> bytes:
    return "".join(f"event: {e['type']}\ndata: {json.dumps(e)}\n\n" for e in events).encode()


def _messages_response(body: dict) -> tuple[bytes, str]:
    agent = _agent_of(body)
    turn = sum(m.get("role") == "assistant" for m in body.get("messages", []))
    blocks = _script(agent, turn, body)
    stop = "tool_use" if any(b["type"] == "tool_use" for b in blocks) else "end_turn"
    usage = {
        "input_tokens": 100 + 10 * turn,
        "cache_creation_input_tokens": 0,
        "cache_read_input_tokens": 0,
        "output_tokens": 20 + turn,
    }
    message = {
        "id": f"msg_{SCENARIO}_{agent}_{turn}",
        "type": "message",
        "role": "assistant",
        "model": body.get("model", MODEL),
        "content": [],
        "stop_reason": None,
        "stop_sequence": None,
        "usage": {**usage, "output_tokens": 1},  # provisional, as the real API sends
    }
    if not body.get("stream"):
        content = [{k: v for k, v in b.items() if k != "raw"} for b in blocks]
        final = {**message, "content": content, "stop_reason": stop, "usage": usage}
        return json.dumps(final).encode(), "application/json"
    events: list[dict] = [{"type": "message_start", "message": message}]
    for i, block in enumerate(blocks):
        if block["type"] == "text":
            start = {"type": "text", "text": ""}
            deltas = [{"type": "text_delta", "text": block["text"]}]
        else:
            start = {"type": "tool_use", "id": block["id"], "name": block["name"], "input": {}}
            raw = block["raw"]
            half = len(raw) // 2
            deltas = [
                {"type": "input_json_delta", "partial_json": p} for p in (raw[:half], raw[half:])
            ]
        events.append({"type": "content_block_start", "index": i, "content_block": start})
        events += [{"type": "content_block_delta", "index": i, "delta": d} for d in deltas]
        events.append({"type": "content_block_stop", "index": i})
    events += [
        {
            "type": "message_delta",
            "delta": {"stop_reason": stop, "stop_sequence": None},
            "usage": {"output_tokens": 20 + turn},
        },
        {"type": "message_stop"},
    ]
    return _sse(events), "text/event-stream"


class FakeAnthropic(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args) -> None:  # quiet
        pass

    def _send(self, code: int, data: bytes, content_type: str = "application/json") -> None:
        self.send_response(code)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(data)))
        self.send_header("request-id", "req_fake")
        self.end_headers()
        self.wfile.write(data)

    def _not_faked(self) -> None:
        error = {"type": "error", "error": {"type": "not_found_error", "message": "not faked"}}
        self._send(404, json.dumps(error).encode())

    def do_GET(self) -> None:
        if "-v" in sys.argv:
            print("fake api: GET", self.path, file=sys.stderr)
        self._not_faked()

    def do_POST(self) -> None:
        raw = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        if "-v" in sys.argv:
            print("fake api: POST", self.path, file=sys.stderr)
        path = self.path.split("?")[0]
        if path == "/v1/messages/count_tokens":
            return self._send(200, b'{"input_tokens": 100}')
        if path != "/v1/messages":
            return self._not_faked()
        body = json.loads(raw)
        if "-v" in sys.argv:
            print("fake api:", json.dumps(body)[:20000], file=sys.stderr)
        data, content_type = _messages_response(body)
        self._send(200, data, content_type)


def start_fake_api() -> ThreadingHTTPServer:
    server = ThreadingHTTPServer(("127.0.0.1", 0), FakeAnthropic)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


# --- tools -------------------------------------------------------------------------------------


@tool("get_weather", "Current weather for a city.", {"city": str, "unit": str})
async def get_weather(args: dict) -> dict:
    return {"content": [{"type": "text", "text": f"18 degrees {args['unit']} in {args['city']}"}]}


@tool("fetch_page", "Fetch a web page.", {"url": str})
async def fetch_page(args: dict) -> dict:
    raise RuntimeError(f"connection refused: {args['url']}")


weather_server = create_sdk_mcp_server(name="weather", version="1.0.0", tools=[get_weather])
web_server = create_sdk_mcp_server(name="web", version="1.0.0", tools=[fetch_page])


# --- runs --------------------------------------------------------------------------------------


def options(base_url: str, home: str, **kwargs) -> ClaudeAgentOptions:
    env = {
        "ANTHROPIC_BASE_URL": base_url,
        "ANTHROPIC_API_KEY": "fake",
        "HOME": home,
        "CLAUDE_CODE_TMPDIR": home,  # else the CLI leaves task files in /tmp/claude-<uid>/
        "DISABLE_TELEMETRY": "1",
        "DISABLE_AUTOUPDATER": "1",
        "DISABLE_ERROR_REPORTING": "1",
        "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
    }
    kwargs.setdefault("mcp_servers", {"weather": weather_server})
    kwargs.setdefault("tools", [])  # no built-in tools (Bash, Read…)
    kwargs.setdefault("allowed_tools", ["mcp__weather__get_weather"])
    return ClaudeAgentOptions(
        model=MODEL,
        system_prompt=MAIN_PROMPT,
        env=env,
        cwd=home,
        setting_sources=[],
        strict_mcp_config=True,
        stderr=(lambda line: print("cli:", line, file=sys.stderr)) if "-v" in sys.argv else None,
        **kwargs,
    )


async def run(prompt: str, opts: ClaudeAgentOptions) -> None:
    async def consume() -> None:
        async for message in claude_agent_sdk.query(prompt=prompt, options=opts):
            if type(message).__name__ == "ResultMessage":
                print(f"  result: {message.subtype} {message.result!r} turns={message.num_turns}")

    await asyncio.wait_for(consume(), timeout=180)


async def main() -> None:
    global SCENARIO
    server = start_fake_api()
    base_url = f"http://127.0.0.1:{server.server_address[1]}"
    home = tempfile.mkdtemp(prefix="keelwave-claude-home-")
    try:
        SCENARIO = "loop"
        await run("Weather in Paris?", options(base_url, home))
        cap.save("claudeagentsdk_loop")

        SCENARIO = "tool_error"
        opts = options(
            base_url,
            home,
            mcp_servers={"web": web_server},
            allowed_tools=["mcp__web__fetch_page"],
        )
        await run("Fetch example.com", opts)
        cap.save("claudeagentsdk_tool_error")

        SCENARIO = "nested"
        expert = AgentDefinition(
            description="Knows the weather.",
            prompt=EXPERT_PROMPT,
            tools=["mcp__weather__get_weather"],
            model="inherit",
        )
        opts = options(
            base_url,
            home,
            tools=["Agent"],
            allowed_tools=["Agent", "mcp__weather__get_weather"],
            agents={"weather_expert": expert},
        )
        await run("Weather in Oslo?", opts)
        cap.save("claudeagentsdk_nested")

        SCENARIO = "nested_background"
        await run("Weather in Oslo?", opts)
        cap.save("claudeagentsdk_nested_background")

        SCENARIO = "max_turns"
        try:
            await run("Weather in Paris?", options(base_url, home, max_turns=2))
        except claude_agent_sdk.ClaudeSDKError as exc:
            print("  run failed as intended:", type(exc).__name__, exc)
        cap.save("claudeagentsdk_max_turns")

        SCENARIO = "client"
        async with ClaudeSDKClient(options=options(base_url, home)) as client:
            for prompt in ("Weather in Paris?", "And tomorrow?"):
                await client.query(prompt)
                async for message in client.receive_response():
                    if type(message).__name__ == "ResultMessage":
                        print(f"  result: {message.subtype} {message.result!r}")
        cap.save("claudeagentsdk_client")
    finally:
        server.shutdown()
        shutil.rmtree(home, ignore_errors=True)
        cap.shutdown()


if __name__ == "__main__":
    asyncio.run(main())
