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
word of a string value that, case-folded, is 1–2 or 4–11 ASCII letters; and of its
*plain numbers*: a JSON number that is not a clock reading (``_epoch_is_clock``),
written as ``normalise.parse`` reads it (an integral float below 2^53 as an int).
Values under keys whose text ``near_key`` keeps exactly (pagination, ranges:
``_KEEP``) or masks whole (per-call ids: ``_VOLATILE``; clock readings: a ``_TIME``
value with a digit) give none. (Numbers matter: calls that differ only in a line
number, a limit or a step counter are common, and their near keys differ.)

Why the property holds: the sketch equals ``of_key(near_key(raw))``, the same words
read from the near key's own value (roles from its keys, which are the input's),
because ``near_key`` keeps every plain word as its case-folded self:

- no mask touches one: a date, epoch or UUID has digits or dashes; the words of an
  HTTP date without digits are three letters (``May``, ``GMT``), left out; a
  random-looking token without digits has 12 or more characters;
- ``near_key`` keeps every plain number as the number it is (it masks a number only
  under a per-call key, or one that looks like a clock reading, in either pass), and
  the number read back from its text is the one ``normalise.parse`` reads;
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

Each stored step keeps its input's sketch as a number (``sketch_number``, in
``agent_steps.input_sketch``), computed once when the step is stored: the verdict
keeper then groups a run's calls without reading their inputs back, and reads only
the inputs of calls whose sketch three or more share (store/verdicts.py). Two
different sketches may hash to one number; that only makes a group larger, and the
near keys still decide. Sketches computed here for steps stored without one are
remembered like normalise.py's keys: a run still receiving steps (above all one sent
as OpenTelemetry spans, export after export) is judged again and again.
"""

from __future__ import annotations

import functools
import hashlib
import math
import re
import struct
from typing import Any

import msgspec

from keelwave.server.findings import normalise
from keelwave.server.findings.normalise import (
    _DIGIT,
    _FREE,
    _KEEP,
    _RFC_DATE,
    _SUBJECT,
    _TIME,
    _VOLATILE,
    NO_JSON,
    _epoch_is_clock,
    _role,
    json_in,
)
from keelwave.server.findings.remembered import remembered

LONGEST_PLAIN_WORD = 11  # a word of 12+ letters may be a random token (looks_random)
LONGEST_NUMBER_WORD = 9  # a word of 10+ digits may be an epoch; integers below 10^9 never are
MAX_DEPTH = 64  # deeper than this, the slow way (near_key's own recursion has a limit)
_URL_SCHEMES = ("http://", "https://")  # (_string looks at the first letter first)
_TOP = msgspec.json.Decoder()
# What a URL's query decoding can turn into whitespace: "+", "%20", "\\u0020" in a JSON
# value, and characters outside ASCII (spaces other than " ").
_MAY_SPACE_OUT = re.compile(r"[+%\\]|[^\x00-\x7f]")


class _SlowWay(Exception):
    """This input is outside what the fast reading is sure of."""


def _plain_words(text: str, words: list[str]) -> None:
    folded = text.casefold()
    if folded.isascii():  # (the common case: then every word is, and isalpha means a-z)
        words += [word for word in folded.split() if 3 != len(word) <= LONGEST_PLAIN_WORD
                  and word.isalpha()]  # fmt: skip
    else:
        words += [word for word in folded.split() if 3 != len(word) <= LONGEST_PLAIN_WORD
                  and word.isalpha() and word.isascii()]  # fmt: skip


def sketch_text(raw: bytes | memoryview | None, fine: bool = False) -> str:
    """The sorted plain words of the input (module docstring): equal near keys imply
    equal sketches. ``fine``: the number words of its texts too (:func:`fine_text`)."""
    if raw is None:
        return of_key(normalise.near_key(None), fine)
    # The walk gathers the texts whose plain words count, and the numbers' words. The
    # texts are read for words at once, joined by a space: folding is per character and
    # keeps whitespace, so the words are the same, for one call instead of one a text.
    texts: list[str] = []
    words: list[str] = []
    try:
        _walk(_TOP.decode(raw), _FREE, texts, words, 0)
    except (_SlowWay, msgspec.MsgspecError, RecursionError):
        return of_key(normalise.near_key(bytes(raw)), fine)
    if texts:
        joined = " ".join(texts)
        _plain_words(joined, words)
        if fine and _DIGIT.search(joined):
            if _RFC_DATE.search(joined):
                return of_key(normalise.near_key(bytes(raw)), fine)
            _number_words(joined, words)
    words.sort()
    return " ".join(words)


near_sketch = remembered(normalise.KEY_CACHE_BYTES)(sketch_text)


def fine_text(raw: bytes | memoryview | None) -> str:
    """The sketch with the *number words* of its texts too: a whitespace-separated word
    of 1-9 ASCII digits (``"page 17 of 3"``). Equal near keys imply equal fine sketches.

    Not stored: the keeper reads the inputs of calls whose stored sketches three share,
    and this tells most of them apart before any is normalised (``{"q": "query 17
    3"}`` and ``{"q": "query 18 3"}`` share a sketch, not a fine one).

    Why the property holds, beyond the sketch's own reasons: ``near_key`` masks no
    such word outside an HTTP date. Each of its other masks touches only words with a
    dash or a colon (ISO date-times, UUIDs), of 10 or more characters (epochs, random
    tokens), or under a time key (left out here, as in the sketch). An input with text
    that holds an HTTP date is sketched the slow way, from its near key."""
    return sketch_text(raw, fine=True)


near_fine_sketch = remembered(normalise.KEY_CACHE_BYTES)(fine_text)


def _number_words(text: str, words: list[str]) -> None:
    words += [word for word in text.split() if len(word) <= LONGEST_NUMBER_WORD
              and word.isdigit() and word.isascii()]  # fmt: skip


# Stored sketches were computed by this module as it was then: a change to what a
# sketch holds needs a migration that sets agent_steps.input_sketch to NULL (the keeper
# then sketches those steps' inputs itself), or old and new sketches of equal inputs
# would differ.
def sketch_number(sketch: str) -> int:
    """A sketch as the signed 64-bit integer agent_steps.input_sketch stores: the first
    8 bytes of its BLAKE2b, big-endian, signed."""
    return _SIGNED_64(_BLAKE2B_8(sketch.encode("utf-8", "surrogatepass")).digest())[0]


# (bound once: a step's sketch number is computed in the request path, and the keyword
# arguments and int.from_bytes cost a third of the hash itself)
_BLAKE2B_8 = functools.partial(hashlib.blake2b, digest_size=8)
_SIGNED_64 = struct.Struct(">q").unpack


def stored_sketch(tool_name: str | None, stored_input: bytes | memoryview | None) -> int | None:
    """What a step stores as its input_sketch: the sketch number of its input as stored
    (redacted), for a tool call; None for a step without a tool."""
    return None if tool_name is None else sketch_number(sketch_text(stored_input))


def _walk(value: Any, role: str, texts: list[str], words: list[str], depth: int) -> None:
    """``normalise._Normaliser.value``'s walk, keeping the texts whose plain words count
    and the plain numbers' words instead of a value."""
    if depth > MAX_DEPTH:
        raise _SlowWay
    kind = type(value)
    if kind is dict:
        if role != _KEEP:
            for key, item in value.items():
                kind = type(item)
                if kind is str:  # most values: no call to _walk for them
                    _string(item, _role(key), texts, words, depth + 1)
                elif kind is int and -_NOT_A_CLOCK < item < _NOT_A_CLOCK:  # counts, limits
                    if _role(key) not in _NO_NUMBER_WORD:
                        words.append(repr(item))
                elif kind in _NUMBERS:
                    _number(item, _role(key), words)
                elif kind in _CONTAINERS:
                    _walk(item, _role(key), texts, words, depth + 1)
    elif kind is list:
        for item in value:
            _walk(item, role, texts, words, depth + 1)
    elif kind is str:
        _string(value, role, texts, words, depth)
    elif kind in _NUMBERS:
        _number(value, role, words)
    # booleans and null are left out


_CONTAINERS = (dict, list)
_NUMBERS = (int, float)  # (not bool: type() is exact)
_NO_NUMBER_WORD = (_KEEP, _VOLATILE)
_NOT_A_CLOCK = min(low for low, _ in normalise._EPOCHS)  # _epoch_is_clock is False below


def _number(value: float, role: str, words: list[str]) -> None:
    """A plain number's word, written as normalise.parse reads the number."""
    if role in _NO_NUMBER_WORD:
        return
    if type(value) is float:
        if not math.isfinite(value):
            return  # (near_key writes it as null)
        if value.is_integer() and abs(value) < 2**53:
            value = int(value)
    if role != _SUBJECT and _epoch_is_clock(value):
        return  # masked as a clock reading, or kept by the unmasked fallback only
    words.append(repr(value))


def _string(value: str, role: str, texts: list[str], words: list[str], depth: int) -> None:
    """``normalise._Normaliser.string``'s decisions, in its order."""
    if role == _KEEP:
        return
    stripped = value.strip()
    first = stripped[:1]
    if first == "{" or first == "[":  # (what json_in looks for first)
        decoded = json_in(stripped)
        if decoded is not NO_JSON:
            _walk(decoded, role, texts, words, depth + 1)
            return
    if not stripped or role == _VOLATILE:
        return
    if first == "h" and stripped.startswith(_URL_SCHEMES):
        if _MAY_SPACE_OUT.search(stripped) or len(stripped.split()) > 1:
            raise _SlowWay  # its normalised query may hold words
        return
    if role == _TIME and any(c.isdigit() for c in stripped):
        return  # masked, or a date (its words have digits or three letters)
    texts.append(stripped)


def of_key(key: str, fine: bool = False) -> str:
    """The sketch read from a near key itself: the plain words of its string values
    (``fine``: and their number words, but under a time key)."""
    words: list[str] = []
    if key.startswith(normalise._RAW):  # bytes near_key kept as they are
        _plain_words(key, words)
        if fine:
            _number_words(key, words)
    else:
        value = normalise.parse(key.encode("utf-8", "surrogatepass"))
        _key_words(value, _FREE, words, fine)
    words.sort()
    return " ".join(words)


def _key_words(value: Any, role: str, words: list[str], fine: bool) -> None:
    if isinstance(value, str):
        if role != _KEEP:
            _plain_words(value, words)
            if fine and role != _TIME:
                _number_words(value, words)
    elif type(value) in _NUMBERS:
        _number(value, role, words)
    elif isinstance(value, dict):
        if role != _KEEP:
            for key, item in value.items():
                _key_words(item, _role(str(key)), words, fine)
    elif isinstance(value, list):
        for item in value:
            _key_words(item, role, words, fine)
