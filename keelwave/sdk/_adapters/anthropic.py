"""Anthropic: ``messages.create``, sync or async, streamed or not.

Anthropic counts cached input apart (``cache_read_input_tokens``,
``cache_creation_input_tokens``) from ``input_tokens``; keelwave's
``input_tokens`` is their sum, with ``cache_read_tokens`` the cached part.
Output tokens include extended thinking.
"""

from __future__ import annotations

from typing import Any

from keelwave.sdk._adapters.recording import Usage, field, number, patch
from keelwave.sdk._delivery import Send
from keelwave.sdk._redact import DEFAULT as DEFAULT_REDACTION
from keelwave.sdk._redact import Redaction
from keelwave.sdk._validate import Report, default_report


def _read_usage(usage_obj: Any, usage: Usage) -> None:
    if usage_obj is None:
        return
    uncached = field(usage_obj, "input_tokens")
    cache_read = field(usage_obj, "cache_read_input_tokens")
    cache_write = field(usage_obj, "cache_creation_input_tokens")
    if uncached is not None or cache_read is not None:
        usage.cache_read_tokens = number(cache_read)
        usage.input_tokens = number(uncached) + number(cache_read) + number(cache_write)
    output = field(usage_obj, "output_tokens")
    if output is not None:
        usage.output_tokens = number(output)  # message_delta reports the running total


def _read_response(message: Any, usage: Usage, streamed: bool = False) -> None:
    usage.model = field(message, "model") or usage.model
    _read_usage(field(message, "usage"), usage)
    if usage.capture and not streamed:
        role = field(message, "role") or "assistant"
        usage.output_messages = [{"role": role, "content": field(message, "content")}]


def _read_event(event: Any, usage: Usage) -> None:
    kind = field(event, "type")
    if kind == "message_start":
        _read_response(field(event, "message"), usage, streamed=True)
    elif kind == "message_delta":
        _read_usage(field(event, "usage"), usage)
    elif kind == "content_block_delta":
        usage.stream_text(field(event, "delta", "text"))


def _request(arguments: dict[str, Any]) -> Any:
    """The prompt: the system prompt (a message of its own here) and the messages."""
    messages = list(arguments.get("messages") or ())
    system = arguments.get("system")
    return [{"role": "system", "content": system}, *messages] if system else messages


def wrap_anthropic(
    send: Send | None,
    anthropic_client: Any,
    report: Report = default_report,
    redaction: Redaction | None = DEFAULT_REDACTION,
    capture_content: bool = False,
) -> Any:
    """Patch ``messages`` of ``anthropic_client`` in place and return it.

    ``send`` queues the recorded calls (None: record nothing); ``report`` says a
    problem with one (a model name the server would refuse) once; ``redaction``
    hides secrets in a failed call's error (and in its messages); with
    ``capture_content`` the prompt and the response are sent too. The object
    itself is returned, not a proxy, so the agent keeps using the type it knows.
    """
    messages = field(anthropic_client, "messages")
    if messages is not None:
        patch(send, report, messages, "create", "anthropic", _read_response, _read_event,
              redaction, _request if capture_content else None)  # fmt: skip
    return anthropic_client
