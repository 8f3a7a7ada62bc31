"""Secrets taken out of what the SDK sends, before it leaves the agent's process.

Agents hand their tools API keys, passwords and bearer tokens, and tools echo
them back; keelwave stores inputs and outputs, so without this they would end
up in the database, the spool directory and everyone's terminal. Two rules,
both on by default (``Keelwave(redact=...)`` changes them):

* **Keys that look secret.** In a JSON object, at any depth, the value of a
  key such as ``password``, ``api_key``, ``access_token``, ``Authorization``
  or ``Set-Cookie`` becomes ``"[REDACTED]"`` (a whole object or list under
  it too). Keys are compared in their *compact* form: ASCII letters
  lowercased, ``-``, ``_``, ``.`` and spaces dropped, so ``apiKey``,
  ``X-Api-Key`` and ``API_KEY`` all read ``…apikey``. Counts and settings that
  only *mention* tokens (``max_tokens``, ``token_count``, ``tokenizer``,
  ``eos_token``, ``next_page_token``) are not secrets: hiding them would make
  different calls look alike to loop detection. ``null``, ``true``/``false``
  and ``""`` under a secret key stay: they hold no secret, and "the token was
  empty" is just what one debugs. The same rule covers name/value pairs
  (``{"name": "Authorization", "value": "…"}``, as HTTP header lists and HAR
  files write them) and ``name=value`` parameters inside strings (URL queries,
  form bodies, ``key=value`` connection strings).
* **Values that look like credentials**, wherever they are, also inside longer
  text (only the credential is replaced): ``Bearer <token>``, ``sk-…`` keys
  (OpenAI, Anthropic), AWS access key ids, GitHub and Slack tokens, Google API
  keys, JWTs, PEM private-key blocks, keelwave keys, and the password of a
  ``scheme://user:password@host`` URL.

Redaction works on the canonical JSON text (``_canonical``) the SDK sends and
fingerprints, so the text sent, the SDK's fingerprint and the server's (over
the bytes it receives) all see the same redacted input. The TypeScript SDK
(``sdks/typescript/src/redact.ts``) has the same rules, and for the same input
writes the same bytes (``tests/vectors/redaction.json``).

Cost: most payloads hold no secret, so a screen looks first for the few
literal fragments every rule needs (``pass``, ``token"``, ``sk-``, ``eyJ``…):
about ten regex searches that each skip ahead to one literal character, a few
microseconds for a 500-byte payload. Only when one is there is the text
parsed, walked and written again, and when nothing was redacted after all the
original text is kept, byte for byte (the very object: redacting twice is
free).
"""

from __future__ import annotations

import json
import re
import string
from collections.abc import Callable, Iterable
from typing import Any

from keelwave.sdk._canonical import canonical_json
from keelwave.sdk._validate import Problems

REDACTED = "[REDACTED]"
REDACTED_JSON = json.dumps(REDACTED)

# -- keys --------------------------------------------------------------------------

# The compact form of a key: ASCII letters lowercased (never others: the TypeScript
# SDK must agree, and the screen only sees ASCII), "-", "_", "." and " " dropped.
_COMPACT = str.maketrans(string.ascii_uppercase, string.ascii_lowercase, "-_. ")

# A key is secret when its compact form contains one of these…
SECRET_KEY_PARTS = ("password", "passwd", "passphrase", "secret", "authorization", "cookie",
                    "credential", "apikey", "privatekey", "accesskey", "signingkey",
                    "sessionkey")  # fmt: skip
# … or ends with one of these (accessToken, x-auth-token, id_token; basic_auth, oauth)…
SECRET_KEY_ENDINGS = ("token", "auth")
# … or is one of these.
SECRET_KEYS = ("pass", "bearer")
# Keys ending in "token" that are not credentials: pagination cursors (two pages of
# results must not look like one repeated call), tokenizer settings, and limits.
NOT_SECRET_TOKEN_ENDINGS = ("pagetoken", "nexttoken", "continuationtoken", "paginationtoken",
                            "resumetoken", "synctoken", "cursortoken", "eostoken", "bostoken",
                            "padtoken", "unktoken", "septoken", "clstoken", "masktoken",
                            "stoptoken", "specialtoken", "starttoken", "endtoken", "maxtoken",
                            "mintoken", "numtoken", "totaltoken")  # fmt: skip


def compact_key(key: str) -> str:
    """``key`` as the rules compare it: ``X-Api-Key`` → ``xapikey``."""
    return key.translate(_COMPACT)


def _builtin_secret_key(compact: str) -> bool:
    if compact in SECRET_KEYS or any(part in compact for part in SECRET_KEY_PARTS):
        return True
    return compact.endswith(SECRET_KEY_ENDINGS) and not compact.endswith(NOT_SECRET_TOKEN_ENDINGS)


# What the screen looks for in the compact text (the whole JSON text lowercased, with
# the same characters dropped): a fragment that every secret key, in an object, a
# name/value pair or a name=value parameter, leaves there. A key ending in "token"
# ends a JSON string (token") or names a parameter (token=).
KEY_FRAGMENTS = ("pass", "secret", "auth", "cookie", "credential", "key", 'token"', "token=",
                 "bearer")  # fmt: skip
_LOWER_BYTES = bytes.maketrans(string.ascii_uppercase.encode(), string.ascii_lowercase.encode())
_DROPPED_BYTES = b"-_. "

# -- values ------------------------------------------------------------------------

# Each rule: the literal fragments a match must contain (a cheap substring search
# decides whether the pattern runs at all), the pattern, what replaces a match. The
# patterns use only what Python's re and JavaScript's RegExp read alike: explicit
# ASCII classes (no \w, \d, \s, \b), lookarounds, [\s\S] for "anything".
_BEFORE_TOKEN = "(?<![A-Za-z0-9])"  # not in the middle of a word ("task-…" holds no sk- key)

VALUE_RULES: tuple[tuple[tuple[str, ...], str, str], ...] = (
    # A PEM private key, whole, or to the end of the text when its END line was cut off.
    (
        ("-----BEGIN",),
        r"-----BEGIN[A-Z0-9 ]*PRIVATE KEY[A-Z ]*-----[\s\S]*?"
        r"(?:-----END[A-Z0-9 ]*PRIVATE KEY[A-Z ]*-----|(?![\s\S]))",
        REDACTED,
    ),
    # A JWT: three base64url parts, the first a JSON header ("eyJ" is '{"').
    (
        ("eyJ",),
        _BEFORE_TOKEN + r"eyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]*",
        REDACTED,
    ),
    # "Bearer <token>": the token goes, the word stays. Not when what follows is a
    # plain word ("Bearer authentication", "bearer tokens"), which is prose.
    (
        ("earer", "EARER"),
        r"(?<![A-Za-z0-9])((?:Bearer|bearer|BEARER)[ \t]+)(?![A-Z]?[a-z]+(?![A-Za-z0-9._~+/=-]))"
        r"[A-Za-z0-9._~+/-]+=*",
        r"\1" + REDACTED,
    ),
    # OpenAI and Anthropic keys: sk-…, sk-proj-…, sk-ant-api03-…
    (("sk-",), _BEFORE_TOKEN + r"sk-[A-Za-z0-9_-]{20,}", REDACTED),
    # AWS access key ids (long-lived AKIA, temporary ASIA).
    (("AKIA", "ASIA"), r"(?<![A-Za-z0-9])(?:AKIA|ASIA)[A-Z0-9]{16}(?![A-Za-z0-9])", REDACTED),
    # GitHub tokens: personal, OAuth, user-to-server, server-to-server, refresh; fine-grained.
    (
        ("gh", "github_pat_"),
        _BEFORE_TOKEN + r"(?:gh[pousr]_[A-Za-z0-9]{30,}|github_pat_[A-Za-z0-9_]{30,})",
        REDACTED,
    ),
    # Slack tokens: bot, app, user, refresh, legacy.
    (("xox",), _BEFORE_TOKEN + r"xox[baprs]-[A-Za-z0-9-]{10,}", REDACTED),
    # Google API keys.
    (("AIza",), _BEFORE_TOKEN + r"AIza[0-9A-Za-z_-]{30,}", REDACTED),
    # keelwave's own keys: kw_ and 43 characters of URL-safe base64.
    (("kw_",), _BEFORE_TOKEN + r"kw_[A-Za-z0-9_-]{40,}", REDACTED),
    # The password in scheme://user:password@host (database URLs, git remotes).
    (("://",), r"(://[^:/?#@ \t\r\n\"'<>]*:)[^/?#@ \t\r\n\"'<>]+(@)", r"\1" + REDACTED + r"\2"),
)
# name=value inside text (URL queries, form bodies, "host=db password=x" connection
# strings): the value goes when the name is a secret key. Its replacement is decided
# per match, by the key rule.
PARAMETER_PATTERN = r"((?:^|[?&;, \t\r\n])([A-Za-z0-9_.-]+)=)([^&#;, \t\r\n\"'<>]+)"

_VALUE_RULES = tuple((fragments, re.compile(pattern), replacement)
                     for fragments, pattern, replacement in VALUE_RULES)  # fmt: skip
_PARAMETER = re.compile(PARAMETER_PATTERN)
# -- the screen ----------------------------------------------------------------------

# Characters from the rarest to the commonest in JSON text. A screen regex starts
# with one literal character, which re finds as fast as str.find does; the rarer it
# is, the fewer places where the rest (lookbehinds and a literal tail) is tried.
_RARITY = "JZQXKVYIGBAzqjxkvbpygfwmucldrhsnioate"


def _screen_patterns(fragments: Iterable[str]) -> list[str]:
    """Regexes that together find any of ``fragments`` (one per starting character).

    One regex per fragment would cost a search each, and one alternation of them
    all is slower still: re tries every branch at every position. Grouping them by
    their rarest character gives a few searches that each skip ahead to it:
    ``secret`` and ``credential`` become ``c(?:(?<=sec)ret|redential)``.
    """
    groups: dict[str, list[str]] = {}
    for fragment in dict.fromkeys(fragments):  # each once, in order
        anchor = min(range(len(fragment)), key=lambda i: _rank(fragment[i]))
        before, after = fragment[: anchor + 1], fragment[anchor + 1 :]
        lookbehind = f"(?<={re.escape(before)})" if len(before) > 1 else ""
        groups.setdefault(fragment[anchor], []).append(lookbehind + re.escape(after))
    return [f"{re.escape(anchor)}(?:{'|'.join(tails)})" for anchor, tails in groups.items()]


def _rank(character: str) -> int:
    index = _RARITY.find(character)
    return index if index >= 0 else len(_RARITY)  # signs: after the letters


# What the screen looks for, as plain regular expressions without lookaround, so that
# any engine reads them: each value rule's literal fragments, and an escape that could
# hide one (below). The searches that follow are these, arranged for Python's re; the
# server may run these through a multi-pattern engine instead (keelwave/server/screen.py).
SCREEN_VALUE_PATTERNS = ("eyJ", "AKIA", "ASIA", "AIza", "kw_", "gh[pousr]_", "github_pat_",
                         "sk-", "xox[baprs]-", "-----BEGIN", '://[^/?#@ "]*@')  # fmt: skip
ESCAPED_ASCII_PATTERN = r"\\(?:/|u00[2-7][0-9A-Fa-f])"

# The value rules' screen over the whole JSON text: whatever a value pattern can match
# contains a match of one of these. (Their characters are never escaped in JSON, so
# they show in the text as in the string. "Bearer" is left to the key screen, which
# sees it as "bearer"; so is a parameter, whose name it sees.) Written by hand, by
# where they can start: one regex per literal first character.
_VALUE_SCREEN_PATTERNS = (
    "eyJ",  # JWTs
    "A(?:KIA|SIA|Iza)",  # AWS access key ids, Google API keys
    "_(?:(?<=kw_)|(?<=gh[pousr]_)|(?<=github_pat_))",  # keelwave keys, GitHub tokens
    "-(?:(?<=sk-)|(?<=xox[baprs]-)|----BEGIN)",  # sk- keys, Slack tokens, PEM blocks
    r'://[^/?#@ "]*@',  # a password in a URL: "://" with an "@" before the host ends
)
# Bound once: a screen is a few calls, and each call counts.
_VALUE_SCREEN = tuple(re.compile(pattern).search for pattern in _VALUE_SCREEN_PATTERNS)
# Short texts are screened with one alternation of the same patterns instead: re
# tries it at every position, which below some 80 characters costs less than the
# fixed price of several searches (tiny tool inputs and outputs are the common ones).
_SHORT_TEXT = 80
_VALUE_IN_SHORT = re.compile("|".join(_VALUE_SCREEN_PATTERNS)).search
# For one string of the walk, "Bearer" too (the key screen sees it in a whole text).
_CREDENTIAL_IN_SHORT = re.compile("|".join((*_VALUE_SCREEN_PATTERNS, "earer", "EARER"))).search

# JSON may write any character as an escape, and some encoders do where the SDKs never
# would (PHP writes "/" as "\/", Go writes "&" as "\u0026"): an escape of a printable
# ASCII character can hide a fragment from the screen, so text with one is walked, where
# the escapes are read. (The usual escapes, \" \\ \n \t and the like, hide none.)
_ESCAPED_ASCII = re.compile(ESCAPED_ASCII_PATTERN).search

Callback = Callable[[Any], Any]


class Redaction:
    """What the SDK hides before sending: ``Keelwave(redact=Redaction(...))``.

    ``Redaction()`` is the built-in set, what ``redact=True`` (the default) means.

    * ``keys``: more key names to hide, compared as the built-in ones are
      (compact, anywhere in the key: ``"ssn"`` also hides ``customer_SSN``).
    * ``patterns``: more regular expressions (strings or compiled); what they
      match in any string becomes ``[REDACTED]``.
    * ``callback``: called last, with each payload as plain JSON data (dicts,
      lists, strings, numbers; a string for error texts and thoughts) after the
      rules above, and what it returns is sent instead. If it raises, that
      field is sent as ``"[REDACTED]"`` (and the log says so, once).
    * ``builtin=False`` leaves out the built-in rules: only yours apply.

    ``patterns`` and ``callback`` run on every payload (no screen can tell in
    advance what they match): a few microseconds a step.
    """

    def __init__(
        self,
        *,
        keys: Iterable[str] = (),
        patterns: Iterable[str | re.Pattern[str]] = (),
        callback: Callback | None = None,
        builtin: bool = True,
    ) -> None:
        if isinstance(keys, str) or isinstance(patterns, str):
            raise ValueError("keys and patterns are lists (of names, of regular expressions)")
        self.keys = tuple(_extra_key(key) for key in keys)
        self.patterns = tuple(
            pattern if isinstance(pattern, re.Pattern) else re.compile(pattern)
            for pattern in patterns
        )
        if callback is not None and not callable(callback):
            raise ValueError(f"callback must be a function, not {type(callback).__name__}")
        self.callback = callback
        self.builtin = bool(builtin)
        # As the keys show in canonical JSON text: anything not ASCII is escaped there.
        key_fragments = (KEY_FRAGMENTS if self.builtin else ()) + tuple(
            json.dumps(key)[1:-1].lower() for key in self.keys
        )
        self._key_screen = tuple(
            re.compile(pattern.encode("ascii")).search
            for pattern in _screen_patterns(key_fragments)
        )
        self._key_in_short = re.compile(
            "|".join(re.escape(fragment) for fragment in key_fragments).encode("ascii") or b"(?!)"
        ).search
        self._walk_always = bool(self.patterns) or callback is not None
        self._verdicts: dict[str, bool] = {}  # key → secret?; agents use few keys
        self._problems = Problems()

    def __repr__(self) -> str:
        patterns = [pattern.pattern for pattern in self.patterns]
        return (f"Redaction(keys={list(self.keys)!r}, patterns={patterns!r}, "
                f"callback={self.callback!r}, builtin={self.builtin!r})")  # fmt: skip

    # -- what the SDK calls --------------------------------------------------------

    def canonical_json(self, value: Any) -> str:
        """The canonical JSON text of ``value``, redacted: what the SDK sends as a step's
        ``tool_input`` and fingerprints (``fingerprint(name, redaction.canonical_json(x))``)."""
        return self.redact_json(canonical_json(value))

    def redact_json(self, text: str) -> str:
        """Canonical JSON text → the same, redacted; ``text`` itself when nothing was."""
        if not (self._walk_always or self._may_hold_secret(text)):
            return text
        try:
            return self._redact_parsed(text)
        except Exception as error:  # noqa: BLE001 — never send what could not be checked
            self._failed(error)
            return REDACTED_JSON

    def redact_text(self, text: str) -> str:
        """Free text (an error, a thought, a tag) → the same, redacted."""
        try:
            redacted = self._string(text)
            if self.callback is not None:
                result = self.callback(redacted)
                redacted = result if isinstance(result, str) else canonical_json(result)
            return redacted
        except Exception as error:  # noqa: BLE001
            self._failed(error)
            return REDACTED

    # -- the screen --------------------------------------------------------------------

    def may_hold_secret(self, text: str) -> bool:
        """False only when redacting ``text`` (JSON, or plain text) would change nothing:
        no rule can match in it. The server screens span attributes with this."""
        return self._walk_always or self._may_hold_secret(text)

    def _may_hold_secret(self, text: str) -> bool:
        """False only when no rule can match anywhere in ``text`` (JSON text)."""
        if "\\" in text and _ESCAPED_ASCII(text) is not None:
            return True
        short = len(text) < _SHORT_TEXT
        if self.builtin:
            if short:
                if _VALUE_IN_SHORT(text) is not None:
                    return True
            else:
                for search in _VALUE_SCREEN:
                    if search(text) is not None:
                        return True
        # Canonical JSON is ASCII (the rest is escaped), so this is the compact form of
        # every key and string in it, run together.
        squeezed = text.encode("utf-8", "surrogatepass").translate(_LOWER_BYTES, _DROPPED_BYTES)
        if short:
            return self._key_in_short(squeezed) is not None
        for search in self._key_screen:  # noqa: SIM110 — any() and a generator cost more
            if search(squeezed) is not None:
                return True
        return False

    # -- the walk ----------------------------------------------------------------------

    def _redact_parsed(self, text: str) -> str:
        tree = json.loads(text)
        redacted = self._walk(tree)
        if self.callback is not None:
            return canonical_json(self.callback(redacted))
        if redacted is tree:
            return text  # nothing found after all: the very bytes that came in
        return canonical_json(redacted)

    def _walk(self, value: Any) -> Any:
        """``value`` redacted; ``value`` itself (the same object) when nothing was."""
        if isinstance(value, str):
            return self._string(value)
        if isinstance(value, list):
            copy = None
            for position, item in enumerate(value):
                redacted = self._walk(item)
                if redacted is not item:
                    if copy is None:
                        copy = list(value)
                    copy[position] = redacted
            return value if copy is None else copy
        if isinstance(value, dict):
            copy = None
            names_a_secret = "value" in value and self._names_a_secret(value)
            for key, item in value.items():
                if self.secret_key(key) or (names_a_secret and key == "value"):
                    redacted = item if _holds_nothing(item) or item == REDACTED else REDACTED
                else:
                    redacted = self._walk(item)
                if redacted is not item:
                    if copy is None:
                        copy = dict(value)
                    copy[key] = redacted
            return value if copy is None else copy
        return value

    def _names_a_secret(self, pair: dict[str, Any]) -> bool:
        """``{"name": "Authorization", "value": …}`` (or ``"key"``): HTTP header lists, HAR."""
        for field in ("name", "key"):
            name = pair.get(field)
            if isinstance(name, str) and self.secret_key(name):
                return True
        return False

    def secret_key(self, key: str) -> bool:
        """Whether the value under ``key`` is hidden."""
        verdict = self._verdicts.get(key)
        if verdict is None:
            compact = compact_key(key)
            verdict = (self.builtin and _builtin_secret_key(compact)) or any(
                extra in compact for extra in self.keys
            )
            if len(self._verdicts) >= 4096:  # a client sending endless distinct keys
                self._verdicts.clear()
            self._verdicts[key] = verdict
        return verdict

    def _string(self, original: str) -> str:
        """``original`` redacted; ``original`` itself when that changed nothing, so that
        redacting redacted text again is a no-op (the server redacts what it receives)."""
        text = original
        if self.builtin and _may_hold_credential(text):
            for fragments, pattern, replacement in _VALUE_RULES:
                for fragment in fragments:
                    if fragment in text:
                        text = pattern.sub(replacement, text)
                        break
        if (self.builtin or self.keys) and "=" in text:
            text = _PARAMETER.sub(self._parameter, text)
        for pattern in self.patterns:
            text = pattern.sub(REDACTED, text)
        return original if text == original else text

    def _parameter(self, match: re.Match[str]) -> str:
        return match.group(1) + REDACTED if self.secret_key(match.group(2)) else match.group(0)

    def _failed(self, error: Exception) -> None:
        self._problems.warn(
            "redaction",
            f"redaction failed ({type(error).__name__}: {error}); what it failed on is sent as "
            f'"{REDACTED}"',
        )


def _may_hold_credential(text: str) -> bool:
    """False only when no value rule can match in ``text`` (the screen, for one string)."""
    if len(text) < _SHORT_TEXT:
        return _CREDENTIAL_IN_SHORT(text) is not None
    for search in _VALUE_SCREEN:
        if search(text) is not None:
            return True
    return "earer" in text or "EARER" in text  # Bearer, bearer, BEARER


def _holds_nothing(value: Any) -> bool:
    """null, true, false and "" under a secret key: nothing to hide, and worth seeing."""
    return value is None or value is True or value is False or value == ""


def _extra_key(key: Any) -> str:
    if not isinstance(key, str) or not compact_key(key):
        raise ValueError(f"keys: {key!r} is not a key name")
    return compact_key(key)


DEFAULT = Redaction()  # what redact=True means, and what runs made by hand use


def from_option(option: bool | Redaction | None) -> Redaction | None:
    """``Keelwave(redact=...)``: True (the default) → the built-in rules; False → none."""
    if option is True or option is None:
        return DEFAULT
    if option is False:
        return None
    if isinstance(option, Redaction):
        return option
    raise ValueError(f"redact must be True, False or a Redaction, not {option!r}")
