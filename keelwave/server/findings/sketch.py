"""A cheap test that two tool inputs cannot be near-duplicates, so most are never normalised.

``normalise.near_key`` is the near-duplicate detector's key, and its cost: about
50 µs a few-hundred-byte input on CPython, most of the server's CPU under a load of
long runs whose inputs are all different (docs/benchmarks.md). Yet nearly every
input of a healthy run has no near-duplicate at all. ``near_sketch(raw)`` is a
coarser key, three to five times cheaper, with one property: **two inputs with the
same near key have the same sketch**. So the detector groups a tool's calls by
sketch first and normalises only the calls whose sketch three or more share; the
findings are exactly what they were.

The sketch is the sorted multiset of the input's *plain words*: a whitespace-separated
word of a string value that, case-folded, is 1–2 or 4–11 ASCII letters. Values
under keys whose text ``near_key`` keeps exactly (pagination, ranges: ``_KEEP``) or
masks whole (per-call ids: ``_VOLATILE``; clock readings: a ``_TIME`` value with a
digit) give none. Why the property holds: the sketch equals ``of_key(near_key(raw))``,
the same words read from the near key's own value (roles from its keys, which are
the input's), because ``near_key`` keeps every plain word as its case-folded self:

- no mask touches one: a date, epoch or UUID has digits or dashes; the words of an
  HTTP date without digits are three letters (``May``, ``GMT``), left out; a
  random-looking token without digits has 12 or more characters;
- case folding is idempotent (checked over every code point), so words read from
  the already folded key are the same words; folding never makes whitespace, and
  masks hold none, so the words around a mask stay words;
- a string holding JSON is decoded by both, the same way (``normalise.json_in``);
- the unmasked fallback (an input that would be all mask) leaves plain words as
  they are too, and happens only when no value was masked by its key;
- a URL's normalised form is one word that is not plain, as long as it has no
  whitespace, nor what its query decoding may turn into some (``+``, ``%``, a JSON
  escape, a character outside ASCII).

Where that reasoning does not reach (bytes ``msgspec`` does not read exactly as
``normalise.parse`` does, nesting deeper than ``MAX_DEPTH``, a URL with spaces), the
sketch is computed the slow way, ``of_key(near_key(raw))``: right by construction.
tests/test_sketch.py checks the equality on the findings corpus and generated inputs.

Sketches are remembered like normalise.py's keys: a run still receiving steps (above
all one sent as OpenTelemetry spans, export after export) is judged again and again.
"""

from __future__ import annotations

import re
from typing import Any

import msgspec

from keelwave.server.findings import normalise
from keelwave.server.findings.normalise import (
    _FREE,
    _KEEP,
    _TIME,
    _VOLATILE,
    NO_JSON,
    _role,
    json_in,
)
from keelwave.server.findings.remembered import remembered

LONGEST_PLAIN_WORD = 11  # a word of 12+ letters may be a random token (looks_random)
MAX_DEPTH = 64  # deeper than this, the slow way (near_key's own recursion has a limit)
_URL_SCHEMES = ("http://", "https://")
_TOP = msgspec.json.Decoder()
# What a URL's query decoding can turn into whitespace: "+", "%20", "\\u0020" in a JSON
# value, and characters outside ASCII (spaces other than " ").
_MAY_SPACE_OUT = re.compile(r"[+%\\]|[^\x00-\x7f]")


class _SlowWay(Exception):
    """This input is outside what the fast reading is sure of."""


def _plain_words(text: str, words: list[str]) -> None:
    words += [
        word
        for word in text.casefold().split()
        if 3 != len(word) <= LONGEST_PLAIN_WORD and word.isalpha() and word.isascii()
    ]


@remembered(normalise.KEY_CACHE_BYTES)
def near_sketch(raw: bytes | None) -> str:
    """The sorted plain words of the input (module docstring): equal near keys imply
    equal sketches."""
    if raw is None:
        return of_key(normalise.near_key(None))
    words: list[str] = []
    try:
        _walk(_TOP.decode(raw), _FREE, words, 0)
    except (_SlowWay, msgspec.MsgspecError, RecursionError):
        return of_key(normalise.near_key(raw))
    words.sort()
    return " ".join(words)


def _walk(value: Any, role: str, words: list[str], depth: int) -> None:
    """``normalise._Normaliser.value``'s walk, keeping plain words instead of a value."""
    if depth > MAX_DEPTH:
        raise _SlowWay
    kind = type(value)
    if kind is dict:
        if role != _KEEP:
            for key, item in value.items():
                if type(item) is str:  # most values: no call to _walk for them
                    _string(item, _role(key), words, depth + 1)
                elif type(item) in _CONTAINERS:
                    _walk(item, _role(key), words, depth + 1)
    elif kind is list:
        for item in value:
            _walk(item, role, words, depth + 1)
    elif kind is str:
        _string(value, role, words, depth)
    # numbers, booleans and null hold no words


_CONTAINERS = (dict, list)


def _string(value: str, role: str, words: list[str], depth: int) -> None:
    """``normalise._Normaliser.string``'s decisions, in its order."""
    if role == _KEEP:
        return
    stripped = value.strip()
    decoded = json_in(stripped)
    if decoded is not NO_JSON:
        _walk(decoded, role, words, depth + 1)
        return
    if not stripped or role == _VOLATILE:
        return
    if stripped.startswith(_URL_SCHEMES):
        if _MAY_SPACE_OUT.search(stripped) or len(stripped.split()) > 1:
            raise _SlowWay  # its normalised query may hold words
        return
    if role == _TIME and any(c.isdigit() for c in stripped):
        return  # masked, or a date (its words have digits or three letters)
    _plain_words(stripped, words)


def of_key(key: str) -> str:
    """The sketch read from a near key itself: the plain words of its string values."""
    words: list[str] = []
    if key.startswith(normalise._RAW):  # bytes near_key kept as they are
        _plain_words(key, words)
    else:
        _key_words(normalise.parse(key.encode("utf-8", "surrogatepass")), _FREE, words)
    words.sort()
    return " ".join(words)


def _key_words(value: Any, role: str, words: list[str]) -> None:
    if isinstance(value, str):
        if role != _KEEP:
            _plain_words(value, words)
    elif isinstance(value, dict):
        if role != _KEEP:
            for key, item in value.items():
                _key_words(item, _role(str(key)), words)
    elif isinstance(value, list):
        for item in value:
            _key_words(item, role, words)
