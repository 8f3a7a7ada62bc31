"""What an inference span says of its model call, in any of the conventions.

Provider, model, tokens (keelwave's convention: input includes cached input,
output includes reasoning), finish reasons, and the prompt and response as JSON,
read from GenAI's, OpenInference's or OpenLLMetry's attributes, or the older
GenAI events. conventions.py reads the rest of a span; mapping.py makes
model calls of what these return.
"""

from __future__ import annotations

from typing import Any

from keelwave.server.ingest.otlp.conventions import as_json, first_of, json_value
from keelwave.server.ingest.otlp.decode import Span


def integer(attributes: dict[str, Any], *names: str) -> int:
    value = first_of(attributes, *names)
    try:
        return max(0, int(value)) if value is not None else 0
    except (TypeError, ValueError):
        return 0


# Whose a model is, by its name, for the spans that do not say (AutoGen's and CrewAI's
# OpenInference instrumentors): the families whose names are their makers' own.
_MODEL_FAMILIES = (
    (("gpt-", "chatgpt", "o1", "o3", "o4", "text-embedding-", "davinci", "babbage"), "openai"),
    (("claude",), "anthropic"),
    (("gemini", "gemma"), "google"),
    (("mistral", "mixtral", "codestral", "ministral", "magistral", "pixtral"), "mistral"),
    (("command",), "cohere"),
    (("deepseek",), "deepseek"),
    (("grok",), "xai"),
)


# What some frameworks write where the provider goes: their own name (Google ADK's
# call_llm span, Strands'), not the model's maker.
_FRAMEWORKS = frozenset(("gcp.vertex.agent", "strands-agents"))


def provider_of(model: str) -> str:
    """The maker of ``model`` when its name tells (``gpt-4o-mini-2024-07-18``: openai),
    else "unknown"."""
    name = model.lower().rpartition("/")[2]  # ("models/gemini-2.5-pro", "openai/gpt-4o")
    for prefixes, provider in _MODEL_FAMILIES:
        if name.startswith(prefixes):
            return provider
    return "unknown"


def model_call(span: Span) -> dict[str, Any]:
    """Provider, model, tokens (input includes cached input, output includes reasoning,
    keelwave's convention) and finish reasons of an inference span."""
    a = span.attributes
    finish = first_of(
        a, "gen_ai.response.finish_reasons", "gen_ai.response.finish_reason", "llm.finish_reason"
    )
    if finish is None:
        finish = _answers_finish_reasons(span)
    model = str(
        first_of(a, "gen_ai.response.model", "gen_ai.request.model", "llm.model_name")
        or _invoked_model(a)
        or "unknown"
    )
    provider = first_of(a, "gen_ai.provider.name", "gen_ai.system", "llm.provider", "llm.system")
    if provider in _FRAMEWORKS:
        provider = None  # (the model's family says)
    return {
        # (lowercased, as the conventions write them: OpenLLMetry's Haystack sends "OpenAI")
        "provider": str(provider).lower() if provider is not None else provider_of(model),
        "model": model,
        "input_tokens": integer(
            a, "gen_ai.usage.input_tokens", "llm.token_count.prompt", "gen_ai.usage.prompt_tokens"
        ),
        "output_tokens": integer(
            a,
            "gen_ai.usage.output_tokens",
            "llm.token_count.completion",
            "gen_ai.usage.completion_tokens",
        ),
        "cache_read_tokens": integer(
            a,
            "gen_ai.usage.cache_read.input_tokens",
            "llm.token_count.prompt_details.cache_read",
            "gen_ai.usage.details.cache_read_tokens",  # pydantic-ai's older name for it
            # The Vercel AI SDK's (6; 5's older name), part of its input tokens
            "ai.usage.inputTokenDetails.cacheReadTokens",
            "ai.usage.cachedInputTokens",
        ),
        "reasoning_tokens": integer(
            a,
            "gen_ai.usage.reasoning.output_tokens",
            "llm.token_count.completion_details.reasoning",
            "gen_ai.usage.reasoning_tokens",  # OpenLLMetry's (OpenAI's: part of the output)
            # pydantic-ai's (its usage details: OpenAI's completion_tokens_details), part
            # of its output tokens too
            "gen_ai.usage.details.reasoning_tokens",
            # The Vercel AI SDK's (6; 5's older name), part of its output tokens
            "ai.usage.outputTokenDetails.reasoningTokens",
            "ai.usage.reasoningTokens",
        ),
        "finish_reasons": finish_reasons(finish),
    }


def _invoked_model(attributes: dict[str, Any]) -> str | None:
    """The model named in OpenInference's ``llm.invocation_parameters`` (JSON text), for a
    span that does not name it otherwise: a call that failed before any answer (the
    OpenAI instrumentor takes ``llm.model_name`` from the response)."""
    raw = attributes.get("llm.invocation_parameters")
    if not isinstance(raw, str) or '"model"' not in raw:
        return None
    parameters = json_value(raw)
    model = parameters.get("model") if isinstance(parameters, dict) else None
    return model if isinstance(model, str) and model else None


def finish_reasons(value: Any) -> list[str]:
    """A model call's finish reasons, lowercased, however the instrumentation wrote
    them: an array (the convention), one string, an array as JSON text (Microsoft Agent
    Framework: ``'["length"]'``), or an enum's name (Semantic Kernel:
    ``FinishReason.LENGTH``)."""
    if isinstance(value, str) and value.startswith("["):
        parsed = json_value(value)
        value = parsed if isinstance(parsed, list) else value
    items = value if isinstance(value, list) else [value] if value else []
    return [str(item).lower().rpartition("finishreason.")[2] for item in items if item]


def _answers_finish_reasons(span: Span) -> list[Any]:
    """The finish reasons written only beside the answer, not as an attribute of their
    own (Strands): each ``gen_ai.choice`` event's ``finish_reason``, else each message
    of ``gen_ai.output.messages``."""
    reasons = [
        event.attributes["finish_reason"]
        for event in span.events
        if event.name == "gen_ai.choice" and event.attributes.get("finish_reason")
    ]
    if reasons:
        return reasons
    answer = json_value(span.attributes.get("gen_ai.output.messages"))
    messages = answer if isinstance(answer, list) else []
    return [
        message["finish_reason"]
        for message in messages
        if isinstance(message, dict) and message.get("finish_reason")
    ]


# Finish reasons of a model call stopped by its token limit: OpenAI's, Anthropic's and
# Bedrock's, Google's; and Anthropic's for a full context window.
LENGTH_REASONS = frozenset(("length", "max_tokens", "model_context_window_exceeded"))


# The older event form of a model call's messages: one event per message of the
# prompt (its role in the name), one gen_ai.choice per choice of the response.
_PROMPT_EVENTS = {
    "gen_ai.system.message": "system",
    "gen_ai.user.message": "user",
    "gen_ai.assistant.message": "assistant",
    "gen_ai.tool.message": "tool",
}


def indexed(attributes: dict[str, Any], prefix: str) -> list[dict[str, Any]] | None:
    """A flattened list of messages, ``prefix.<i>.message.<field>`` (OpenInference) or
    ``prefix.<i>.<field>`` (OpenLLMetry), as a list of {field: value} (nested fields
    kept as their dotted path), by index; None if there is none."""
    messages: dict[int, dict[str, Any]] = {}
    for key, value in attributes.items():
        if not key.startswith(prefix):
            continue
        number, _, rest = key[len(prefix) :].partition(".")
        if not number.isdigit() or not rest:
            continue
        messages.setdefault(int(number), {})[rest.removeprefix("message.")] = value
    return [messages[n] for n in sorted(messages)] if messages else None


def _as_payload(value: Any) -> bytes | None:
    return None if value is None else as_json(value)


def messages(span: Span) -> tuple[bytes | None, bytes | None]:
    """A model call's prompt and response as JSON bytes, from whichever form the span
    carries them in: the current semantic conventions' ``gen_ai.input.messages`` and
    ``gen_ai.output.messages`` attributes, the older events (``gen_ai.user.message``…,
    ``gen_ai.choice``), or OpenInference's ``llm.input_messages.<i>.…``."""
    attributes = span.attributes
    prompt = _as_payload(attributes.get("gen_ai.input.messages") or None)
    response = _as_payload(attributes.get("gen_ai.output.messages") or None)
    if prompt is None:
        events = [
            {"role": event.attributes.get("role") or role,
             **{k: json_value(v) for k, v in event.attributes.items() if k != "role"}}
            for event in span.events
            if (role := _PROMPT_EVENTS.get(event.name)) is not None
        ]  # fmt: skip
        prompt = _as_payload(events or indexed(attributes, "llm.input_messages."))
    if response is None:
        choices = [
            {k: json_value(v) for k, v in event.attributes.items()}
            for event in span.events
            if event.name == "gen_ai.choice"
        ]
        response = _as_payload(choices or indexed(attributes, "llm.output_messages."))
    return prompt, response
