"""OpenAI: ``chat.completions.create`` and ``responses.create``, sync or async, streamed or not.

Usage is translated into keelwave's convention: ``prompt_tokens`` /
``input_tokens`` already include cached tokens, and ``completion_tokens`` /
``output_tokens`` already include reasoning tokens. A streamed chat
completion reports usage only when asked with
``stream_options={"include_usage": True}``; without it the call is recorded
with zero tokens (and no cost).
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
    usage.input_tokens = number(
        field(usage_obj, "prompt_tokens") or field(usage_obj, "input_tokens")
    )
    usage.output_tokens = number(
        field(usage_obj, "completion_tokens") or field(usage_obj, "output_tokens")
    )
    usage.cache_read_tokens = number(
        field(usage_obj, "prompt_tokens_details", "cached_tokens")
        or field(usage_obj, "input_tokens_details", "cached_tokens")
    )
    usage.reasoning_tokens = number(
        field(usage_obj, "completion_tokens_details", "reasoning_tokens")
        or field(usage_obj, "output_tokens_details", "reasoning_tokens")
    )


def _read_response(response: Any, usage: Usage) -> None:
    usage.model = field(response, "model") or usage.model
    _read_usage(field(response, "usage"), usage)
    if usage.capture:
        choices = field(response, "choices")
        if choices is not None:  # a chat completion: each choice's message
            usage.output_messages = [field(choice, "message") for choice in choices]
        elif field(response, "output") is not None:  # the Responses API's output items
            usage.output_messages = field(response, "output")


def _read_chat_chunk(chunk: Any, usage: Usage) -> None:
    usage.model = field(chunk, "model") or usage.model
    _read_usage(field(chunk, "usage"), usage)
    for choice in field(chunk, "choices") or ():
        usage.stream_text(field(choice, "delta", "content"))


def _read_response_event(event: Any, usage: Usage) -> None:
    # Responses API streams typed events; the final one carries the whole response.
    response = field(event, "response")
    if response is not None:
        _read_response(response, usage)
    elif field(event, "type") == "response.output_text.delta":
        usage.stream_text(field(event, "delta"))


def _chat_request(arguments: dict[str, Any]) -> Any:
    return arguments.get("messages")


def _responses_request(arguments: dict[str, Any]) -> Any:
    """The Responses API's prompt: its instructions (a system message) and its input."""
    prompt = arguments.get("input")
    instructions = arguments.get("instructions")
    if isinstance(prompt, str):
        prompt = [{"role": "user", "content": prompt}]
    if instructions:
        return [{"role": "system", "content": instructions}, *(prompt or [])]
    return prompt


def wrap_openai(
    send: Send | None,
    openai_client: Any,
    report: Report = default_report,
    redaction: Redaction | None = DEFAULT_REDACTION,
    capture_content: bool = False,
) -> Any:
    """Patch ``chat.completions`` and ``responses`` of ``openai_client`` in place and return it.

    ``send`` queues the recorded calls (None: record nothing); ``report`` says a
    problem with one (a model name the server would refuse) once; ``redaction``
    hides secrets in a failed call's error (and in its messages); with
    ``capture_content`` the prompt and the response are sent too. The object
    itself is returned, not a proxy, so the agent keeps using the type it knows.
    """
    chat = field(openai_client, "chat", "completions")
    if chat is not None:
        patch(send, report, chat, "create", "openai", _read_response, _read_chat_chunk,
              redaction, _chat_request if capture_content else None)  # fmt: skip
    responses = field(openai_client, "responses")
    if responses is not None:
        patch(send, report, responses, "create", "openai", _read_response, _read_response_event,
              redaction, _responses_request if capture_content else None)  # fmt: skip
    return openai_client
