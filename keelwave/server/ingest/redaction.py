"""Secrets never reach storage, whoever sent them: the server's redaction.

The SDKs redact before sending (keelwave.sdk's Redaction); data that does not
come through them (OTLP from a framework, curl) gets the same built-in rules
here, before it is stored: values under keys that look secret and values that
look like credentials become ``"[REDACTED]"``.

- **Native ingest**: the fingerprint of a step is computed on the bytes as sent,
  before redaction (ingest/routes.py), so two calls that differ only in a secret
  are still told apart exactly, while the secret itself is never stored.
- **OTLP**: the spans are kept (otlp_spans) and mapped again as more of a trace
  arrives, so they are redacted when they are first stored, and every later
  mapping reads the redacted spans: an OTLP step's fingerprint covers its
  redacted input.

A payload without anything that could be a secret (the common case) is passed
on as the very bytes that came in: a screen over the text decides that, without
parsing it.
"""

from __future__ import annotations

import json
from typing import Any

import msgspec

from keelwave.sdk import Redaction

SERVER = Redaction()  # the built-in set


def json_payload(raw: msgspec.Raw | bytes | None) -> msgspec.Raw | bytes | None:
    """A JSON payload as it may be stored: ``raw`` itself, or its redacted text."""
    if raw is None:
        return None
    text = bytes(raw).decode("utf-8", "surrogatepass")
    redacted = SERVER.redact_json(text)
    return raw if redacted is text else redacted.encode("utf-8", "surrogatepass")


def json_text(text: str | None) -> str | None:
    """The same for a payload held as text (a finish's output)."""
    return SERVER.redact_json(text) if text is not None else None


def text(value: str | None) -> str | None:
    """Free text (an error, a thought) with credentials in it replaced."""
    return SERVER.redact_text(value) if value else value


def attributes(values: dict[str, Any]) -> dict[str, Any]:
    """A span's attributes with secrets replaced: by key, and inside string values
    (JSON text is redacted as JSON, other text as text)."""
    clean: dict[str, Any] = {}
    for key, value in values.items():
        clean[key] = _value(key, value)
    return clean


def _value(key: str, value: Any) -> Any:
    if SERVER.secret_key(key.rsplit(".", 1)[-1]):
        return "[REDACTED]"
    if isinstance(value, str):
        stripped = value.lstrip()
        if stripped[:1] in ("{", "["):
            try:
                json.loads(value)
            except ValueError:
                return SERVER.redact_text(value)
            return SERVER.redact_json(value)
        return SERVER.redact_text(value)
    if isinstance(value, dict | list):
        return json.loads(SERVER.redact_json(json.dumps(value)))
    return value
