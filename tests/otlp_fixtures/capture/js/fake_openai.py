#!/usr/bin/env python3
"""Fake OpenAI API (Chat Completions + Responses) for local tests.

The system prompt / instructions must contain <<SCRIPT:[...]>> (a JSON list). Each
request that carries the same system prompt takes the next entry (state per system
prompt). Entry forms:
  {"calls": [{"name": "search", "args": {"q": "x"}}, ...]}   -> tool calls
  {"text": "final answer"}                                     -> plain answer
  optional "finish": "length" on a text entry
After the script is exhausted: the last entry is repeated ("repeat": true on the list's
last element) or the answer "done".
Every answer is logged to fake_openai.log.jsonl (key, turn, usage, answer).
"""

import hashlib
import json
import os
import re
import sys
import threading
import time
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

STATE = {}
LOCK = threading.Lock()
LOG = open(os.environ.get("FAKE_LOG", "fake_openai.log.jsonl"), "a")  # noqa: SIM115 (for the process)


def find_script(text):
    m = re.search(r"<<SCRIPT:(\[.*?\])>>", text, re.S)
    return json.loads(m.group(1)) if m else None


def next_entry(system_text, model):
    script = find_script(system_text) or [{"text": "done"}]
    key = hashlib.sha1(system_text.encode()).hexdigest()[:10]
    with LOCK:
        turn = STATE.get(key, 0)
        STATE[key] = turn + 1
    if turn < len(script):
        e = script[turn]
    elif script[-1].get("repeat"):
        e = script[-1]
    else:
        e = {"text": "done"}
    usage = {"in": 100 + 10 * turn, "out": 20 + turn}
    return key, turn, e, usage


def text_of(content):
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return " ".join(p.get("text", "") for p in content if isinstance(p, dict))
    return ""


class H(BaseHTTPRequestHandler):
    def log_message(self, *a):
        pass

    def send_json(self, obj, code=200):
        b = json.dumps(obj).encode()
        self.send_response(code)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(b)))
        self.end_headers()
        self.wfile.write(b)

    def do_POST(self):
        body = json.loads(self.rfile.read(int(self.headers.get("content-length", 0))) or b"{}")
        model = body.get("model", "gpt-4o-mini")
        if os.environ.get("FAKE_DEBUG"):
            with open(os.environ.get("FAKE_LAST", "fake_last_request.json"), "w") as last:
                last.write(json.dumps(body))
        if self.path.endswith("/chat/completions"):
            sys_text = " ".join(
                text_of(m.get("content"))
                for m in body.get("messages", [])
                if m.get("role") in ("system", "developer")
                or "<<SCRIPT:" in text_of(m.get("content"))
            )
            key, turn, e, u = next_entry(sys_text, model)
            if "error" in e:
                self.send_json(
                    {
                        "error": {
                            "message": e["error"],
                            "type": "invalid_request_error",
                            "code": e.get("code"),
                        }
                    },
                    e.get("status", 400),
                )
                LOG.write(json.dumps({"api": "chat", "key": key, "turn": turn, "entry": e}) + "\n")
                LOG.flush()
                return
            msg = {"role": "assistant", "content": None}
            finish = "stop"
            if "calls" in e:
                msg["tool_calls"] = [
                    {
                        "id": "call_" + uuid.uuid4().hex[:12],
                        "type": "function",
                        "function": {"name": c["name"], "arguments": json.dumps(c["args"])},
                    }
                    for c in e["calls"]
                ]
                finish = "tool_calls"
            else:
                msg["content"] = e["text"]
                finish = e.get("finish", "stop")
            resp = {
                "id": "chatcmpl-" + uuid.uuid4().hex,
                "object": "chat.completion",
                "created": int(time.time()),
                "model": model,
                "choices": [
                    {"index": 0, "message": msg, "finish_reason": finish, "logprobs": None}
                ],
                "usage": {
                    "prompt_tokens": u["in"],
                    "completion_tokens": u["out"],
                    "total_tokens": u["in"] + u["out"],
                },
            }
            if body.get("stream"):
                self.stream_chat(resp)
            else:
                self.send_json(resp)
            LOG.write(
                json.dumps(
                    {
                        "api": "chat",
                        "key": key,
                        "turn": turn,
                        "model": model,
                        "usage": u,
                        "entry": e,
                    }
                )
                + "\n"
            )
            LOG.flush()
        elif self.path.endswith("/responses"):
            sys_text = body.get("instructions") or ""
            inp = body.get("input")
            if isinstance(inp, list):
                sys_text += " ".join(
                    text_of(i.get("content"))
                    for i in inp
                    if isinstance(i, dict) and i.get("role") in ("system", "developer")
                )
            key, turn, e, u = next_entry(sys_text, model)
            out = []
            if "calls" in e:
                for c in e["calls"]:
                    cid = "call_" + uuid.uuid4().hex[:12]
                    out.append(
                        {
                            "type": "function_call",
                            "id": "fc_" + uuid.uuid4().hex[:12],
                            "call_id": cid,
                            "name": c["name"],
                            "arguments": json.dumps(c["args"]),
                            "status": "completed",
                        }
                    )
            else:
                out.append(
                    {
                        "type": "message",
                        "id": "msg_" + uuid.uuid4().hex[:12],
                        "role": "assistant",
                        "status": "completed",
                        "content": [{"type": "output_text", "text": e["text"], "annotations": []}],
                    }
                )
            resp = {
                "id": "resp_" + uuid.uuid4().hex,
                "object": "response",
                "created_at": int(time.time()),
                "status": "completed",
                "model": model,
                "output": out,
                "parallel_tool_calls": True,
                "tool_choice": "auto",
                "tools": [],
                "error": None,
                "incomplete_details": None,
                "usage": {
                    "input_tokens": u["in"],
                    "output_tokens": u["out"],
                    "total_tokens": u["in"] + u["out"],
                    "input_tokens_details": {"cached_tokens": 0},
                    "output_tokens_details": {"reasoning_tokens": 0},
                },
            }
            if body.get("stream"):
                self.stream_responses(resp)
            else:
                self.send_json(resp)
            LOG.write(
                json.dumps(
                    {
                        "api": "responses",
                        "key": key,
                        "turn": turn,
                        "model": model,
                        "usage": u,
                        "entry": e,
                    }
                )
                + "\n"
            )
            LOG.flush()
        else:
            self.send_json({"error": {"message": "unknown path " + self.path}}, 404)

    def sse(self, events):
        self.send_response(200)
        self.send_header("content-type", "text/event-stream")
        self.end_headers()
        for ev in events:
            self.wfile.write(ev.encode())
        self.wfile.flush()

    def stream_chat(self, resp):
        msg = resp["choices"][0]["message"]
        base = {k: resp[k] for k in ("id", "created", "model")}
        base["object"] = "chat.completion.chunk"
        evs = []
        delta = {"role": "assistant"}
        if msg.get("content"):
            delta["content"] = msg["content"]
        if msg.get("tool_calls"):
            delta["tool_calls"] = [dict(tc, index=i) for i, tc in enumerate(msg["tool_calls"])]
        evs.append(
            "data: "
            + json.dumps(dict(base, choices=[{"index": 0, "delta": delta, "finish_reason": None}]))
            + "\n\n"
        )
        evs.append(
            "data: "
            + json.dumps(
                dict(
                    base,
                    choices=[
                        {
                            "index": 0,
                            "delta": {},
                            "finish_reason": resp["choices"][0]["finish_reason"],
                        }
                    ],
                )
            )
            + "\n\n"
        )
        evs.append("data: " + json.dumps(dict(base, choices=[], usage=resp["usage"])) + "\n\n")
        evs.append("data: [DONE]\n\n")
        self.sse(evs)

    def stream_responses(self, resp):
        evs = []
        r0 = dict(resp, status="in_progress", output=[])
        evs.append(
            "event: response.created\ndata: "
            + json.dumps({"type": "response.created", "response": r0, "sequence_number": 0})
            + "\n\n"
        )
        n = 1
        for i, item in enumerate(resp["output"]):
            evs.append(
                "event: response.output_item.added\ndata: "
                + json.dumps(
                    {
                        "type": "response.output_item.added",
                        "output_index": i,
                        "item": item,
                        "sequence_number": n,
                    }
                )
                + "\n\n"
            )
            n += 1
            evs.append(
                "event: response.output_item.done\ndata: "
                + json.dumps(
                    {
                        "type": "response.output_item.done",
                        "output_index": i,
                        "item": item,
                        "sequence_number": n,
                    }
                )
                + "\n\n"
            )
            n += 1
        evs.append(
            "event: response.completed\ndata: "
            + json.dumps({"type": "response.completed", "response": resp, "sequence_number": n})
            + "\n\n"
        )
        self.sse(evs)


if __name__ == "__main__":
    port = int(sys.argv[1]) if len(sys.argv) > 1 else 18990
    ThreadingHTTPServer(("127.0.0.1", port), H).serve_forever()
