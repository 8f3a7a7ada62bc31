"""The tool calls a model call asked for, read from its response.

Some instrumentations make no span when a tool runs: Haystack's Agent calls its
tools directly, and OpenInference's Haystack instrumentor sees only components;
OpenLLMetry's CrewAI instrumentor has no tool spans either. Their traces still
say which tools were called, with which arguments: in each model call's response.
mapping.py makes those calls the steps of a run, in a trace with no tool span at
all (where a trace has tool spans, a model call's request that has none was not
run as a tool: a handoff, a structured answer).

A response names its tool calls in one of four forms:

- ``gen_ai.output.messages`` (GenAI conventions): messages whose ``parts`` hold
  ``{"type": "tool_call", "name", "arguments"}``;
- OpenInference's flattened list, ``llm.output_messages.<i>.message.tool_calls.<j>.
  tool_call.function.name`` and ``….arguments``;
- OpenLLMetry's, ``gen_ai.completion.<i>.tool_calls.<j>.name`` and ``….arguments``
  (LiteLLM's own spans: OpenAI's older ``gen_ai.completion.<i>.function_call.*``);
- the older ``gen_ai.choice`` event, whose ``tool_calls`` (or ``message.tool_calls``)
  is OpenAI's ``[{"function": {"name", "arguments"}}]``.

What a tool returned is not in the span that asked for it, but in the prompt of the
model call after it, by the call's id (:func:`tool_results`): a GenAI
``tool_call_response`` part, or OpenInference's / OpenLLMetry's flattened ``tool``
message with its ``tool_call_id``. smolagents writes its steps into the prompt as text
of its own: an assistant message ``Calling tools:\n[{'id': 'call_0', …}]`` (a Python
list), then a user message ``Observation:\n<what the tool returned>``; the result of a
step that made one call is read from there (several calls share one observation).
"""

from __future__ import annotations

import re
from typing import Any

from keelwave.server.ingest.otlp import conventions as c
from keelwave.server.ingest.otlp.decode import Span
from keelwave.server.ingest.otlp.model_calls import indexed

# (message index, call index, field) of the flattened forms
_OPENINFERENCE = re.compile(
    r"llm\.output_messages\.(\d+)\.message\.tool_calls\.(\d+)\.tool_call\."
    r"(?:function\.)?(name|arguments|id)"
)
_OPENLLMETRY = re.compile(r"gen_ai\.completion\.(\d+)\.tool_calls\.(\d+)\.(name|arguments|id)")
# LiteLLM's own spans: OpenAI's older function_call form, one call a message, no id
_FUNCTION_CALL = re.compile(r"gen_ai\.completion\.(\d+)\.function_call\.(name|arguments)")
_FLATTENED = ("llm.output_messages.", "gen_ai.completion.")
_FLATTENED_PROMPT = ("llm.input_messages.", "gen_ai.prompt.")
# smolagents' tool steps as prompt text (module docstring)
SMOLAGENTS_CALLS = "Calling tools:\n"
SMOLAGENTS_OBSERVATION = "Observation:\n"
_SMOLAGENTS_ID = re.compile(r"'id': '([^'\\]*)'")
# (tool name, arguments as sent: JSON text or a structured value, the call's id or None)
Call = tuple[str, Any, str | None]


def tool_calls(span: Span) -> list[Call]:
    """The (tool name, arguments) a model span's response asked for, in its order."""
    attributes = span.attributes
    messages = attributes.get("gen_ai.output.messages")
    if messages and (calls := _from_parts(c.json_value(messages))):
        return calls
    # (LiteLLM's messages leave the tool calls out: its flattened form has them)
    flattened = _flattened(attributes)
    if flattened:
        return flattened
    calls = []
    for event in span.events:
        if event.name == "gen_ai.choice":
            choice = {key: c.json_value(value) for key, value in event.attributes.items()}
            message = choice.get("message")
            listed = choice.get("tool_calls")
            if listed is None and isinstance(message, dict):
                listed = message.get("tool_calls")
            calls += _from_openai(listed)
    return calls


def _from_parts(messages: Any) -> list[Call]:
    calls: list[Call] = []
    for message in messages if isinstance(messages, list) else []:
        if not isinstance(message, dict) or message.get("role") not in (None, "assistant"):
            continue
        parts = message.get("parts")
        for part in parts if isinstance(parts, list) else []:
            if isinstance(part, dict) and part.get("type") == "tool_call" and part.get("name"):
                calls.append((str(part["name"]), part.get("arguments"), _id(part.get("id"))))
    return calls


def _id(value: Any) -> str | None:
    return str(value) if value not in (None, "") else None


def _from_openai(listed: Any) -> list[Call]:
    calls: list[Call] = []
    for call in listed if isinstance(listed, list) else []:
        function = call.get("function") if isinstance(call, dict) else None
        if isinstance(function, dict) and function.get("name"):
            calls.append((str(function["name"]), function.get("arguments"), _id(call.get("id"))))
    return calls


def _flattened(attributes: dict[str, Any]) -> list[Call]:
    if not any(key.startswith(_FLATTENED) for key in attributes):
        return []
    found: dict[tuple[int, int], dict[str, Any]] = {}
    for key, value in attributes.items():
        match = _OPENINFERENCE.fullmatch(key) or _OPENLLMETRY.fullmatch(key)
        if match is not None:
            message, call, field = match.groups()
            found.setdefault((int(message), int(call)), {})[field] = value
        elif (match := _FUNCTION_CALL.fullmatch(key)) is not None:
            message, field = match.groups()
            found.setdefault((int(message), -1), {})[field] = value
    return [
        (str(fields["name"]), fields.get("arguments"), _id(fields.get("id")))
        for _, fields in sorted(found.items())
        if fields.get("name")
    ]


def tool_results(span: Span) -> dict[str, Any]:
    """What the tools returned, by the id of the call, as the model span's prompt
    carries them (the answers to the calls an earlier model call asked for); where an
    id repeats in the prompt, the last result under it (the newest call's)."""
    attributes = span.attributes
    messages = attributes.get("gen_ai.input.messages")
    results: dict[str, Any] = {}
    if messages:
        asked: list[str] = []  # the ids of smolagents' "Calling tools" text just before
        parsed = c.json_value(messages)
        for message in parsed if isinstance(parsed, list) else []:
            parts = message.get("parts") if isinstance(message, dict) else None
            for part in parts if isinstance(parts, list) else []:
                if not isinstance(part, dict):
                    continue
                if part.get("type") == "tool_call_response":
                    if (call := _id(part.get("id"))) is not None:
                        results[call] = part.get("response")
                    continue
                text = part.get("content")
                if not isinstance(text, str):
                    continue
                if text.startswith(SMOLAGENTS_CALLS):
                    asked = _SMOLAGENTS_ID.findall(text)
                elif text.startswith(SMOLAGENTS_OBSERVATION) and len(asked) == 1:
                    results[asked.pop()] = text[len(SMOLAGENTS_OBSERVATION) :]
        return results
    # (OpenInference's llm.input_messages.<i>.message.*, OpenLLMetry's gen_ai.prompt.<i>.*)
    for prefix in _FLATTENED_PROMPT:
        for fields in indexed(attributes, prefix) or ():
            call = _id(fields.get("tool_call_id"))
            if fields.get("role") == "tool" and call is not None and "content" in fields:
                results[call] = fields["content"]
    return results


def asked_ids(span: Span) -> list[str]:
    """The ids of the tool calls a model span's answer asked for, in its order: from
    :func:`tool_calls`, else the Vercel AI SDK's ``ai.response.toolCalls``
    (``[{"toolCallId", "toolName", "input"}]``)."""
    ids = [call_id for _, _, call_id in tool_calls(span) if call_id is not None]
    if ids or "ai.response.toolCalls" not in span.attributes:
        return ids
    listed = c.json_value(span.attributes["ai.response.toolCalls"])
    return [
        str(call["toolCallId"])
        for call in (listed if isinstance(listed, list) else [])
        if isinstance(call, dict) and call.get("toolCallId") not in (None, "")
    ]


def answered_ids(span: Span) -> set[str]:
    """The ids of the tool calls whose results a model span's prompt carries: those of
    :func:`tool_results`, and the Vercel AI SDK's ``ai.prompt.messages`` (``tool``
    messages of ``{"type": "tool-result", "toolCallId"}`` parts)."""
    ids = set(tool_results(span))
    prompt = c.json_value(span.attributes.get("ai.prompt.messages"))
    for message in prompt if isinstance(prompt, list) else []:
        parts = message.get("content") if isinstance(message, dict) else None
        for part in parts if isinstance(parts, list) else []:
            if not isinstance(part, dict) or part.get("type") != "tool-result":
                continue
            if (call := _id(part.get("toolCallId"))) is not None:
                ids.add(call)
    return ids
