"""A local HTTP server speaking the OpenAI and Anthropic wire formats (JSON and SSE),
so the real `openai` and `anthropic` packages can be tested against it offline."""

from __future__ import annotations

import asyncio
import json
import threading

from aiohttp import web

USAGE_OPENAI = {"prompt_tokens": 1200, "completion_tokens": 300, "total_tokens": 1500,
                "prompt_tokens_details": {"cached_tokens": 200},
                "completion_tokens_details": {"reasoning_tokens": 120}}  # fmt: skip
USAGE_RESPONSES = {"input_tokens": 900, "output_tokens": 100, "total_tokens": 1000,
                   "input_tokens_details": {"cached_tokens": 300},
                   "output_tokens_details": {"reasoning_tokens": 40}}  # fmt: skip
USAGE_ANTHROPIC = {"input_tokens": 50, "output_tokens": 70, "cache_read_input_tokens": 1000,
                   "cache_creation_input_tokens": 10}  # fmt: skip


def _sse(events: list[tuple[str | None, dict | str]]) -> bytes:
    out = []
    for name, data in events:
        if name:
            out.append(f"event: {name}\n")
        out.append(f"data: {data if isinstance(data, str) else json.dumps(data)}\n\n")
    return "".join(out).encode()


def _error(status: int, kind: str) -> web.Response:
    return web.json_response(
        {"type": "error", "error": {"type": kind, "message": "refused"}}, status=status
    )


async def chat(request: web.Request) -> web.Response:
    body = await request.json()
    if body["model"] == "broken":
        return _error(400, "invalid_request_error")
    base = {"id": "chatcmpl-1", "created": 1764490000, "model": body["model"] + "-2026-01-01"}
    if not body.get("stream"):
        return web.json_response({**base, "object": "chat.completion", "usage": USAGE_OPENAI,
                                  "choices": [{"index": 0, "finish_reason": "stop",
                                               "message": {"role": "assistant",
                                                           "content": "hello"}}]})  # fmt: skip
    chunk = {**base, "object": "chat.completion.chunk"}
    events = [
        (
            None,
            {**chunk, "choices": [{"index": 0, "delta": {"content": word}, "finish_reason": None}]},
        )
        for word in ("hel", "lo")
    ]
    if (body.get("stream_options") or {}).get("include_usage"):
        events.append((None, {**chunk, "choices": [], "usage": USAGE_OPENAI}))
    events.append((None, "[DONE]"))
    return web.Response(body=_sse(events), content_type="text/event-stream")


async def responses(request: web.Request) -> web.Response:
    body = await request.json()
    response = {"id": "resp_1", "object": "response", "created_at": 1764490000,
                "model": body["model"], "status": "completed", "usage": USAGE_RESPONSES,
                "output": [{"type": "message", "id": "msg_1", "role": "assistant",
                            "status": "completed",
                            "content": [{"type": "output_text", "text": "hi",
                                         "annotations": []}]}],
                "parallel_tool_calls": True, "tool_choice": "auto", "tools": []}  # fmt: skip
    if not body.get("stream"):
        return web.json_response(response)
    events = [
        (
            "response.created",
            {
                "type": "response.created",
                "sequence_number": 0,
                "response": {**response, "status": "in_progress", "usage": None},
            },
        ),  # fmt: skip
        (
            "response.completed",
            {"type": "response.completed", "sequence_number": 1, "response": response},
        ),
    ]
    return web.Response(body=_sse(events), content_type="text/event-stream")


async def messages(request: web.Request) -> web.Response:
    body = await request.json()
    if body["model"] == "broken":
        return _error(400, "invalid_request_error")
    message = {"id": "msg_1", "type": "message", "role": "assistant", "model": body["model"],
               "content": [{"type": "text", "text": "hi"}], "stop_reason": "end_turn",
               "stop_sequence": None, "usage": USAGE_ANTHROPIC}  # fmt: skip
    if not body.get("stream"):
        return web.json_response(message)
    start = {
        **message,
        "content": [],
        "stop_reason": None,
        "usage": {**USAGE_ANTHROPIC, "output_tokens": 1},
    }
    events = [
        ("message_start", {"type": "message_start", "message": start}),
        (
            "content_block_start",
            {
                "type": "content_block_start",
                "index": 0,
                "content_block": {"type": "text", "text": ""},
            },
        ),
        (
            "content_block_delta",
            {
                "type": "content_block_delta",
                "index": 0,
                "delta": {"type": "text_delta", "text": "hi"},
            },
        ),
        ("content_block_stop", {"type": "content_block_stop", "index": 0}),
        (
            "message_delta",
            {
                "type": "message_delta",
                "delta": {"stop_reason": "end_turn", "stop_sequence": None},
                "usage": {"output_tokens": USAGE_ANTHROPIC["output_tokens"]},
            },
        ),
        ("message_stop", {"type": "message_stop"}),
    ]
    return web.Response(body=_sse(events), content_type="text/event-stream")


class FakeProviders:
    """Runs the app on a free port in a background thread."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.ready = threading.Event()
        self.port = 0
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()
        self.ready.wait(10)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def _serve(self) -> None:
        asyncio.set_event_loop(self.loop)
        app = web.Application()
        app.router.add_post("/v1/chat/completions", chat)
        app.router.add_post("/v1/responses", responses)
        app.router.add_post("/v1/messages", messages)
        self.runner = web.AppRunner(app)
        self.loop.run_until_complete(self.runner.setup())
        site = web.TCPSite(self.runner, "127.0.0.1", 0)
        self.loop.run_until_complete(site.start())
        self.port = site._server.sockets[0].getsockname()[1]
        self.ready.set()
        self.loop.run_forever()

    def stop(self) -> None:
        asyncio.run_coroutine_threadsafe(self.runner.cleanup(), self.loop).result(10)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)
