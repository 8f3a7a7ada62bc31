"""Spans as otlp_spans keeps them: msgpack of the decoded form, lean where it can be.

A trace is re-mapped from its stored spans every time more of it arrives, so
what is kept must map exactly as the span did when it came. Spans that are
neither agent, tool nor model call (chains, HTTP clients, framework plumbing)
only matter for their place in the tree, their name, how they ended and their
resource: their attributes, often the bulkiest part (prompts), are dropped,
except on a trace's root, which names a run of a trace without agent spans.
Secrets in what is kept are redacted before it is stored.
"""

from __future__ import annotations

import dataclasses

import msgspec

from keelwave.server.ingest.otlp import conventions as c
from keelwave.server.ingest.otlp.decode import Span
from keelwave.server.redaction import BUILTIN, ServerRedaction

_encoder = msgspec.msgpack.Encoder()
_decoder = msgspec.msgpack.Decoder(Span)


def encode(
    span: Span, rules: ServerRedaction = BUILTIN, resources: dict[int, dict] | None = None
) -> bytes:
    """The stored form of ``span``, its secrets redacted by the project's ``rules``
    (server/redaction.py); raises OverflowError or TypeError for values msgpack cannot
    hold (an integer beyond 64 bits). ``resources``: the redacted resources of this
    export so far, by the id of the decoded one (every span of a resource shares it):
    redacted once, not once a span. Only for the spans of one export, while they live."""
    events = span.events
    attributes = span.attributes
    if span.parent_span_id is not None and c.role(span) == c.OTHER:
        events = [event for event in events if event.name == "exception"]
        attributes = {}
    resource = None if resources is None else resources.get(id(span.resource))
    if resource is None:
        resource = rules.attributes(span.resource)
        if resources is not None:
            resources[id(span.resource)] = resource
    span = dataclasses.replace(
        span,
        attributes=rules.attributes(attributes),
        events=[
            dataclasses.replace(event, attributes=rules.attributes(event.attributes))
            for event in events
        ],
        status_message=rules.text(span.status_message) or "",
        resource=resource,
    )
    return _encoder.encode(span)


def decode(blob: bytes) -> Span:
    return _decoder.decode(blob)
