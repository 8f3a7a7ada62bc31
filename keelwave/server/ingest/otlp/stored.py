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


def encode(span: Span, rules: ServerRedaction = BUILTIN) -> bytes:
    """The stored form of ``span``, its secrets redacted by the project's ``rules``
    (server/redaction.py); raises
    OverflowError or TypeError for values msgpack cannot hold (an integer beyond 64
    bits)."""
    if span.parent_span_id is not None and c.role(span) == c.OTHER:
        events = [event for event in span.events if event.name == "exception"]
        span = dataclasses.replace(span, attributes={}, events=events)
    span = dataclasses.replace(
        span,
        attributes=rules.attributes(span.attributes),
        events=[
            dataclasses.replace(event, attributes=rules.attributes(event.attributes))
            for event in span.events
        ],
        status_message=rules.text(span.status_message) or "",
        resource=rules.attributes(span.resource),
    )
    return _encoder.encode(span)


def decode(blob: bytes) -> Span:
    return _decoder.decode(blob)
