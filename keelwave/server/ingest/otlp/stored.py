"""Spans as otlp_spans keeps them: msgpack of the decoded form, lean where it can be.

A trace is re-mapped from its stored spans every time more of it arrives, so
what is kept must map exactly as the span did when it came. Spans that are
neither agent, tool nor model call (chains, HTTP clients, framework plumbing)
only matter for their place in the tree, their name, how they ended and their
resource: their attributes, often the bulkiest part (prompts), are dropped,
except on a trace's root, which names a run of a trace without agent spans, and
those saying who handed off to whom (``gen_ai.handoff.*``). Secrets in what is
kept are redacted before it is stored.
"""

from __future__ import annotations

import dataclasses

import msgspec

from keelwave.server.ingest.otlp import conventions as c
from keelwave.server.ingest.otlp.decode import Event, Span
from keelwave.server.redaction import BUILTIN, ServerRedaction

_KEPT_OF_OTHERS = "gen_ai.handoff."
_encoder = msgspec.msgpack.Encoder()
_decoder = msgspec.msgpack.Decoder(Span)


def encode(
    span: Span, rules: ServerRedaction = BUILTIN, resources: dict[int, dict] | None = None
) -> bytes:
    """The stored form of ``span`` (:func:`kept`), as msgpack; raises OverflowError or
    TypeError for values msgpack cannot hold (an integer beyond 64 bits)."""
    return encode_kept(kept(span, rules, resources))


def encode_kept(span: Span) -> bytes:
    """A span :func:`kept` made already, as msgpack."""
    return _encoder.encode(span)


def kept(
    span: Span,
    rules: ServerRedaction = BUILTIN,
    resources: dict[int, dict] | None = None,
    role: str | None = None,
) -> Span:
    """What is kept of ``span``: lean where it can be, its secrets redacted by the
    project's ``rules`` (server/redaction.py); ``span`` itself when that changes
    nothing, the common case. ``decode(encode(x))`` equals ``kept(x)``, so the spans an
    export brings can be projected as they are, without a round trip through msgpack.
    ``resources``: the redacted resources of this export so far, by the id of the
    decoded one (every span of a resource shares it): redacted once, not once a span.
    Only for the spans of one export, while they live. ``role``: ``c.role(span)``,
    if the caller knows it already."""
    if span.parent_span_id is not None and role is None:
        role = c.role(span)
    resource = None if resources is None else resources.get(id(span.resource))
    if resource is None:
        resource = rules.attributes(span.resource)
        if resources is not None:
            resources[id(span.resource)] = resource
    if not span.events and not span.status_message and role != c.OTHER:
        # (most tool and model spans: only their attributes and resource to redact)
        attributes = rules.attributes(span.attributes)
        if attributes is span.attributes and resource is span.resource:
            return span
        return dataclasses.replace(span, attributes=attributes, events=[], resource=resource)
    events = span.events
    attributes = span.attributes
    if span.parent_span_id is not None and role == c.OTHER:
        events = [event for event in events if event.name == "exception"]
        # (but who handed off to whom: mapping's handoffs, the OpenAI Agents SDK's v2)
        attributes = {k: v for k, v in attributes.items() if k.startswith(_KEPT_OF_OTHERS)}
    redacted_events = [_event(event, rules) for event in events]
    changed = events is not span.events or any(
        new is not old for new, old in zip(redacted_events, events, strict=True)
    )
    redacted = rules.attributes(attributes)
    status = rules.text(span.status_message) or ""
    if (
        not changed
        and redacted is span.attributes
        and resource is span.resource
        and status == span.status_message
    ):
        return span
    return dataclasses.replace(
        span, attributes=redacted, events=redacted_events, status_message=status,
        resource=resource,
    )  # fmt: skip


def _event(event: Event, rules: ServerRedaction) -> Event:
    attributes = rules.attributes(event.attributes)
    return (
        event
        if attributes is event.attributes
        else dataclasses.replace(event, attributes=attributes)
    )


def decode(blob: bytes) -> Span:
    return _decoder.decode(blob)
