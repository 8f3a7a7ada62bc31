"""The wire protocol's fixed vocabulary and limits, shared by the SDK and the server.

One place for what both sides must agree on: the accepted termination reasons,
step types and model-call statuses, and the size limits ingest enforces. The
server's request schemas are built from these, so the API document generated
from them states them too; the SDK checks events against them where they are
made. The TypeScript SDK keeps a copy (sdks/typescript/src/protocol.ts) that a
test compares with this module.

Standard library only: the SDK installs without any dependency.
"""

from __future__ import annotations

from typing import Final

# How a run ended. Exactly these six (the spec's contract); anything else is a 4xx.
TERMINATION_REASONS: Final = (
    "clean",
    "max_steps_reached",
    "context_limit",
    "error",
    "loop_detected",
    "timeout",
)
# What a step is. Only steps with a tool_name are fingerprinted, whatever their type.
STEP_TYPES: Final = ("tool_call", "llm_call", "think", "replan", "custom")
DEFAULT_STEP_TYPE: Final = "tool_call"
# How a model call went.
CALL_STATUSES: Final = ("ok", "error")

# Names that identify something (agents, tools, providers, models, tags):
# 1 to NAME_MAX_LENGTH characters, never NUL.
NAME_MAX_LENGTH: Final = 256
# Tags on one run.
MAX_TAGS: Final = 64
# Step indices are PostgreSQL integers; the SDKs count from 1.
STEP_INDEX_MAX: Final = 2**31 - 1
# Token counts: integers a JavaScript number holds exactly.
TOKEN_COUNT_MAX: Final = 2**53
# Costs and durations (cost_usd, duration_ms, latency_ms): finite, 0 to AMOUNT_MAX.
AMOUNT_MAX: Final = 1e15
# The default largest request body the server accepts (KEELWAVE_MAX_BODY_BYTES).
DEFAULT_MAX_BODY_BYTES: Final = 10 * 1024 * 1024
# Tracebacks (error_traceback): the SDKs send at most the last TRACEBACK_SENT_MAX
# characters of one, the server keeps at most TRACEBACK_STORED_MAX, each cut as
# bound_traceback does. Their end is kept: the frame that raised and the exception.
TRACEBACK_SENT_MAX: Final = 8 * 1024
TRACEBACK_STORED_MAX: Final = 16 * 1024

__all__ = [
    "AMOUNT_MAX",
    "CALL_STATUSES",
    "DEFAULT_MAX_BODY_BYTES",
    "DEFAULT_STEP_TYPE",
    "MAX_TAGS",
    "NAME_MAX_LENGTH",
    "STEP_INDEX_MAX",
    "STEP_TYPES",
    "TERMINATION_REASONS",
    "TOKEN_COUNT_MAX",
    "TRACEBACK_SENT_MAX",
    "TRACEBACK_STORED_MAX",
]

# Room kept for the marker line "… (N earlier characters cut)".
_MARKER_ROOM = 64


def bound_traceback(text: str, limit: int) -> str:
    """``text`` if it has at most ``limit`` characters; else its end, from the first line
    that fits, after a line saying how much was cut (the TypeScript SDK's
    boundTraceback does the same)."""
    if len(text) <= limit:
        return text
    tail = text[len(text) - (limit - _MARKER_ROOM) :]
    newline = tail.find("\n")
    if 0 <= newline < len(tail) - 1:
        tail = tail[newline + 1 :]  # from a line's start; one long line is cut inside
    return f"\u2026 ({len(text) - len(tail)} earlier characters cut)\n{tail}"
