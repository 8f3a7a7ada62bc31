"""Secrets never reach storage, whoever sent them: the server's redaction.

The SDKs redact before sending (keelwave.sdk's Redaction); data that does not
come through them (OTLP from a framework, curl) gets the same built-in rules
here, before it is stored: values under keys that look secret and values that
look like credentials become ``"[REDACTED]"``. A project may add its own
patterns (``projects.redaction_patterns``, set with ``PATCH /v1/projects/{p}``
or ``keelwave projects set-redaction``): regular expressions whose matches are
replaced in every string of its payloads, on top of the built-in rules.

- **Native ingest**: the fingerprint of a step is computed on the bytes as sent,
  before redaction (ingest/routes.py), so two calls that differ only in a secret
  are still told apart exactly, while the secret itself is never stored.
- **OTLP**: the spans are kept (otlp_spans) and mapped again as more of a trace
  arrives, so they are redacted when they are first stored, and every later
  mapping reads the redacted spans: an OTLP step's fingerprint covers its
  redacted input.

A payload without anything that could be a secret (the common case) is passed
on as the very bytes that came in: a screen over the text decides that, without
parsing it (in one Hyperscan pass over the bytes where Hyperscan is installed:
screen.py). A project's own patterns cannot be screened for, so they run on
every payload of that project (a few microseconds each).

The rules of a project travel with its API key's Principal (http/auth.py), so
they cost no query per request; changing them notifies every server's key
cache, as revoking a key does.
"""

from __future__ import annotations

import functools
import json
import re
from typing import Any

import msgspec

from keelwave.sdk import Redaction
from keelwave.server.screen import OnePassScreen, builtin_screen

MAX_PATTERNS = 50
MAX_PATTERN_LENGTH = 500


class InvalidPattern(ValueError):
    """A project's redaction pattern that cannot be used; the message says why."""


def check_patterns(patterns: list[str]) -> list[str]:
    """``patterns`` as a project may keep them: raises InvalidPattern naming the bad one."""
    if len(patterns) > MAX_PATTERNS:
        raise InvalidPattern(f"at most {MAX_PATTERNS} redaction patterns, not {len(patterns)}")
    for number, pattern in enumerate(patterns):
        if not pattern:
            raise InvalidPattern(f"redaction_patterns[{number}] is empty")
        if len(pattern) > MAX_PATTERN_LENGTH:
            raise InvalidPattern(
                f"redaction_patterns[{number}] is {len(pattern)} characters; "
                f"at most {MAX_PATTERN_LENGTH}"
            )
        try:
            compiled = re.compile(pattern)
        except re.error as error:
            raise InvalidPattern(
                f"redaction_patterns[{number}] is not a regular expression: {error}"
            ) from None
        if compiled.search(""):
            # It would match between every two characters and replace nothing useful.
            raise InvalidPattern(f"redaction_patterns[{number}] matches the empty string")
    return list(dict.fromkeys(patterns))


_SCREEN = builtin_screen()


class ServerRedaction:
    """One project's rules: the built-in set, plus its own patterns."""

    def __init__(
        self, patterns: tuple[str, ...] = (), screen: OnePassScreen | None = _SCREEN
    ) -> None:
        self.patterns = patterns
        self._rules = Redaction(patterns=patterns)
        # Patterns run on every payload: then nothing is screened.
        self._screen = None if patterns else screen
        # Whether an attribute's value is hidden, by the attribute's whole name: spans
        # repeat a few dozen names, each looked at once.
        self._secret_names: dict[str, bool] = {}

    def _may_hold_secret(self, text: str) -> bool:
        if self._screen is not None:
            return self._screen(text.encode("utf-8", "surrogatepass"))
        return self._rules.may_hold_secret(text)

    def json_payload(self, raw: msgspec.Raw | bytes | None) -> msgspec.Raw | bytes | None:
        """A JSON payload as it may be stored: ``raw`` itself, or its redacted text."""
        if raw is None:
            return None
        if self._screen is not None and not self._screen(raw):
            return raw  # screened as the bytes came, without decoding them
        return self._redacted(raw)

    def _redacted(self, raw: msgspec.Raw | bytes) -> msgspec.Raw | bytes:
        text = bytes(raw).decode("utf-8", "surrogatepass")
        redacted = self._rules.redact_json(text)
        return raw if redacted is text else redacted.encode("utf-8", "surrogatepass")

    def json_payloads(self, raws: list[Any]) -> list[Any]:
        """:meth:`json_payload` of each of ``raws`` (a request's tool inputs and
        outputs), screened in one call for them all where Hyperscan screens: a
        screen call costs about as much as the scan itself. Only the payloads the
        screen does not clear are read and redacted."""
        if self._screen is None:
            return [self.json_payload(raw) for raw in raws]
        suspects = self._screen.suspects(raws)
        if not suspects:
            return raws
        return [
            self._redacted(raw) if raw is not None and n in suspects else raw
            for n, raw in enumerate(raws)
        ]

    def json_text(self, text: str | None) -> str | None:
        """The same for a payload held as text (a finish's output)."""
        return self._rules.redact_json(text) if text is not None else None

    def text(self, value: str | None) -> str | None:
        """Free text (an error, a thought) with credentials in it replaced."""
        return self._rules.redact_text(value) if value else value

    def attributes(self, values: dict[str, Any]) -> dict[str, Any]:
        """A span's attributes with secrets replaced: by key, and inside string values
        (JSON text is redacted as JSON, other text as text); ``values`` itself, the same
        dict, when nothing is."""
        if not values or self._clean(values):
            return values
        return {key: self._value(key, value) for key, value in values.items()}

    def _clean(self, values: dict[str, Any]) -> bool:
        """True when no key is secret and no value holds anything to redact, told by one
        screen of all the string values run together instead of one screen each (about
        ten a span): every screen pattern matches inside one string (no anchors, no
        look-around beyond the match's own characters), so what it finds in one value
        it finds in their concatenation. False sends the span down the walk, value by
        value, as before."""
        known, secret_key = self._secret_names, self._secret_attribute
        texts = []
        for key, value in values.items():
            # (known names without a call: a span has about ten attributes)
            secret = known.get(key)
            if secret if secret is not None else secret_key(key):
                return False
            if isinstance(value, str):
                texts.append(value)
            elif isinstance(value, list):
                # An array of strings or numbers (finish reasons, stop sequences): the
                # walk treats each string as free text, as the screen does here.
                for item in value:
                    if isinstance(item, str):
                        texts.append(item)
                    elif isinstance(item, dict | list):
                        return False
            elif isinstance(value, dict):
                return False  # its keys could name secrets: screened as JSON, walked
        return not texts or not self._may_hold_secret("\n".join(texts))

    def _secret_attribute(self, key: str) -> bool:
        """Whether an attribute's value is hidden for its name (``db.password``): by
        its last dotted part, remembered by the whole name."""
        secret = self._secret_names.get(key)
        if secret is None:
            secret = self._rules.secret_key(key.rsplit(".", 1)[-1])
            if len(self._secret_names) >= 4096:  # a client sending endless distinct names
                self._secret_names.clear()
            self._secret_names[key] = secret
        return secret

    def _value(self, key: str, value: Any) -> Any:
        rules = self._rules
        if self._secret_attribute(key):
            return "[REDACTED]"
        if isinstance(value, str):
            if value.lstrip()[:1] in ("{", "["):
                # Prompts and tool arguments: most hold nothing to redact, which the
                # screen tells without parsing them (it is sound for JSON and for text).
                if not self._may_hold_secret(value):
                    return value
                try:
                    json.loads(value)
                except ValueError:
                    return rules.redact_text(value)
                return rules.redact_json(value)
            return rules.redact_text(value)
        if isinstance(value, dict | list):
            text = json.dumps(value)
            return json.loads(rules.redact_json(text)) if self._may_hold_secret(text) else value
        return value


@functools.lru_cache(maxsize=1024)
def for_patterns(patterns: tuple[str, ...]) -> ServerRedaction:
    """The rules for a project with these patterns, compiled once for all its keys.

    Patterns that no longer compile (stored by an older server with other rules)
    are left out rather than making every request of the project fail."""
    usable = []
    for pattern in patterns:
        try:
            re.compile(pattern)
        except re.error:
            continue
        usable.append(pattern)
    return ServerRedaction(tuple(usable))


BUILTIN = for_patterns(())
