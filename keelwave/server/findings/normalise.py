"""When two tool inputs are "the same call", and when two outputs are the same result.

``canonical(raw)`` is canonical JSON (keys sorted at every depth, no spaces,
``1.0`` written ``1`` as JavaScript does): what ``no_progress`` compares outputs
with. Nothing is masked there: the contract says "identical".

``near_key(raw)`` is the key ``near_duplicate`` groups inputs by. On top of
canonical JSON it trims strings, collapses runs of whitespace, folds case, decodes
JSON sent as a string (frameworks double-encode arguments), sorts URL query
parameters, and masks values that look volatile. What decides "volatile" is the
key a value sits under first, and its shape only when the key says nothing:

- *kept exactly* (never masked, not even case-folded): pagination and ranges,
  ``page``, ``offset``, ``cursor``, ``page_token``, ``after``, ``since``,
  ``start_time``… A changing cursor is an agent making progress, however random
  the token looks; a ``since`` that advances is polling that works.
- *masked whatever the value*: keys that name a per-call value, ``request_id``,
  ``trace_id``, ``nonce``, ``idempotency_key``, ``tool_call_id``, ``_`` (a
  cache-buster)…; under time keys (``ts``, ``timestamp``, ``*_at``) any value
  with a digit, unless it is minute-aligned (below).
- *never masked by shape* (still trimmed and folded): keys that name the thing
  acted on, ``id``, ``*_id``, ``customerId``, ``path``, ``sha``, ``email``,
  ``selector``, ``document``, ``order``… Eighteen lookups of eighteen customers
  are a batch, even when the ids are random tokens.
- *any other key, or no key*: masked by shape. A whole value, or a word of free
  text, that is an ISO 8601 (or HTTP-date) date-time with seconds, a UUID, 16+
  hex characters, or a random-looking token (a segment of 10+ characters mixing
  digits with letters and changing character class at least every 4 characters;
  without digits, 12+ changing case every 3), and a number (or a 10/13-digit
  word of text) that is an epoch time in s, ms, µs or ns (2001–2039).
- URLs: scheme and host folded, the path kept, the query parameters sorted and
  each judged by its name as above (``?_=1715…`` and ``&rid=…`` are masked).

What is never volatile: dates (``2024-05-01``), minute-aligned times
(``10:30:00``, an epoch that is a multiple of 60 s: a meeting slot, a range
boundary; a clock reading has seconds, 59 times in 60), integers below 10⁹ (a page
number, a small id), short words, file names, URL paths (``/docs/3f9a…`` names a
document). And if masking by shape would leave nothing of an input (``{"q":
"<uuid>"}``), the shape was the call's content, not noise: the input is compared
unmasked.
"""

from __future__ import annotations

import json
import re
from functools import lru_cache
from typing import Any
from urllib.parse import parse_qsl, urlsplit

import msgspec

from keelwave.server.findings.remembered import remembered

MASK_ID = "\u2400id"
MASK_TIME = "\u2400time"
_RAW = "\u2400raw:"  # prefix for bytes that are not JSON: never equal to a JSON text


def _words(text: str) -> tuple[str, ...]:
    return tuple(text.split())


_KEEP = "keep"  # pagination and ranges: compared exactly
_VOLATILE = "volatile"  # per-call values: always masked
_TIME = "time"  # clock readings: masked unless minute-aligned
_SUBJECT = "subject"  # the thing acted on: normalised, never masked
_FREE = "free"  # anything else: masked by shape

_KEEP_KEYS = frozenset(
    _words(
        "page pagenumber pageno pagenum pageindex pagetoken nextpagetoken pagecursor cursor "
        "nextcursor next nexttoken continuation continuationtoken offset skip start startindex "
        "startat from to end marker scrollid startingafter endingbefore after before since until "
        "startdate enddate starttime endtime mintime maxtime gt gte lt lte newerthan olderthan "
        "range daterange window token nextpage pagekey lastkey exclusivestartkey lastevaluatedkey "
        "searchafter resumetoken"
    )
)
_KEEP_SUFFIXES = ("after", "before", "since", "until", "cursor", "pagetoken", "offset")
_VOLATILE_KEYS = frozenset(
    _words(
        "requestid reqid rid xrequestid clientrequestid requestuuid traceid spanid parentspanid "
        "correlationid nonce idempotencykey clienttoken cachebuster cachebust cb nocache bust rand "
        "random salt invocationid toolcallid callid"
    )
)
_VOLATILE_SUFFIXES = ("requestid", "traceid", "spanid", "correlationid", "nonce", "callid")
_TIME_KEYS = frozenset(
    _words(
        "ts t timestamp time now datetime clienttime requesttime currenttime localtime sentat "
        "requestedat epoch unixtime"
    )
)
_SUBJECT_KEYS = frozenset(
    _words(
        "id ids key sha commit commitsha ref rev revision hash digest path file filename filepath "
        "dir directory url uri href link selector xpath table tablename email phone username user "
        "account sku isbn name document doc customer order ticket invoice item product record "
        "resource target entity repo project issue message thread channel job"
    )
)
_SUBJECT_SUFFIXES = ("number", "path", "url", "uri", "sha")
_SUBJECT_ID = re.compile(r"(?:^|[_\-.])ids?$|[a-z0-9]Ids?$|ID$")

_WS = re.compile(r"\s+")
_ISO = re.compile(
    r"\b\d{4}-\d{2}-\d{2}[T ]\d{2}:(\d{2})(?::(\d{2})(\.\d+)?)?(?:Z|[+-]\d{2}(?::?\d{2})?)?\b",
    re.IGNORECASE,
)
_RFC_DATE = re.compile(  # "Wed, 01 May 2024 10:22:33 GMT", as in HTTP headers
    r"\b(?:[A-Z][a-z]{2}, )?\d{1,2} [A-Z][a-z]{2} \d{4} \d{2}:(\d{2})(?::(\d{2})(\.\d+)?)?"
    r"(?: (?:GMT|UTC|[+-]\d{4}))?"
)
_DATE = re.compile(r"\d{4}-\d{2}-\d{2}")
_UUID = re.compile(r"\b[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}\b", re.I)
_EPOCH_IN_TEXT = re.compile(r"\b1\d{9}(?:\d{3})?\b")
_TOKEN_LENGTH = 10  # the shortest random-looking token (looks_random)
_TOKEN = re.compile(r"[A-Za-z0-9_\-+/=.:]{10,}")
_DIGIT = re.compile(r"\d")
_MAYBE_RANDOM = re.compile(r"\d|[A-Z].*[A-Z]")
_SEPARATORS = re.compile(r"[_\-+/=.:]+")
_HEX = re.compile(r"[0-9a-fA-F]{16,}")
_WORD_PUNCTUATION = "()[]{}<>,;\"'`!?"
# Epoch ranges (2001-09-09 to 2039-09-18) and the unit's "minute" for alignment.
_EPOCHS = ((10**9, 60), (10**12, 60_000), (10**15, 60_000_000), (10**18, 60_000_000_000))


def _parse_float(text: str) -> int | float:
    value = float(text)
    return int(value) if value.is_integer() and abs(value) < 2**53 else value


_DECODER = json.JSONDecoder(parse_float=_parse_float)


def parse(raw: bytes | None) -> Any:
    """The JSON value, with integral floats as ints; bytes that are not JSON become a marked
    string, so they still compare (only) equal to the same bytes."""
    if raw is None:
        return None
    try:
        # As json.loads(raw, parse_float=…) does it, without making a decoder each time.
        return _DECODER.decode(raw.decode(json.detect_encoding(raw), "surrogatepass"))
    except (ValueError, UnicodeDecodeError, RecursionError):
        return opaque(raw)


NO_JSON = object()


def json_in(text: str) -> Any:
    """The object or array a (stripped) string holds, as frameworks double-encode
    arguments; NO_JSON if it holds none."""
    if text[:1] in ("{", "[") and text[-1:] in ("}", "]"):
        try:
            return _DECODER.decode(text)
        except ValueError:
            pass
    return NO_JSON


def opaque(raw: bytes) -> str:
    """Bytes compared as they are: not JSON, or nested too deep to walk (a payload of
    100,000 brackets is valid JSON and would exhaust the interpreter's stack)."""
    return _RAW + raw.decode("utf-8", "replace")


# Canonical JSON: keys sorted, no spaces, UTF-8 as is (json.dumps with sort_keys, but
# ten times faster). The keys are only ever compared with each other.
_ENCODER = msgspec.json.Encoder(order="sorted")


def dumps(value: Any) -> str:
    try:
        return _ENCODER.encode(value).decode("utf-8")
    except UnicodeEncodeError:  # a lone surrogate ("\ud800" in the JSON): the slow way
        return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


# The keys below are pure functions of the payload's bytes, and the server judges a
# run again each time it grows (store/verdicts.py): the same inputs and outputs come
# back, so each process remembers the latest keys it computed, within a budget of
# bytes per function (remembered.py: a count of entries is no bound on memory).
KEY_CACHE_BYTES = 8 * 1024 * 1024


@remembered(KEY_CACHE_BYTES)
def canonical(raw: bytes | None) -> str | None:
    """Canonical JSON of a payload, None when there is none."""
    if raw is None:
        return None
    try:
        return dumps(parse(raw))
    except RecursionError:
        return opaque(raw)


@remembered(KEY_CACHE_BYTES)
def near_key(raw: bytes | None) -> str:
    """The input with formatting removed and volatile values masked (module docstring)."""
    value = parse(raw)
    try:
        masked = _Normaliser(mask=True)
        result = masked.value(value, _FREE)
        if masked.shape_masked and not masked.kept and not masked.key_masked:
            result = _Normaliser(mask=False).value(value, _FREE)
        return dumps(result)
    except RecursionError:
        return opaque(raw or b"")


@remembered(KEY_CACHE_BYTES)
def formatting_key(raw: bytes | None) -> str:
    """The input with formatting removed but nothing masked: says, for a near-duplicate,
    whether only formatting differed."""
    try:
        return dumps(_Normaliser(mask=False).value(parse(raw), _FREE))
    except RecursionError:
        return opaque(raw or b"")


@lru_cache(maxsize=4096)
def _role(key: str) -> str:
    compact = re.sub(r"[^a-z0-9]", "", key.lower())
    if compact in _KEEP_KEYS or compact.endswith(_KEEP_SUFFIXES):
        return _KEEP
    if not compact or compact in _VOLATILE_KEYS or compact.endswith(_VOLATILE_SUFFIXES):
        return _VOLATILE
    if compact.startswith("idempotency"):
        return _VOLATILE
    if compact in _TIME_KEYS or compact.endswith("timestamp") or re.search(r"_at$|[a-z]At$", key):
        return _TIME
    if compact in _SUBJECT_KEYS or compact.endswith(_SUBJECT_SUFFIXES) or _SUBJECT_ID.search(key):
        return _SUBJECT
    return _FREE


def _text(value: str) -> str:
    return _WS.sub(" ", value).strip().casefold()


def _iso_is_clock(match: re.Match[str]) -> bool:
    """A date-time with seconds that are not :00 (or a fraction): a clock reading."""
    seconds, fraction = match.group(2), match.group(3)
    if seconds is None:
        return False
    return seconds != "00" or (fraction is not None and fraction.strip(".0") != "")


def _epoch_is_clock(number: int | float) -> bool:
    for low, minute in _EPOCHS:
        if low <= abs(number) < 2.2 * low:
            return not float(number).is_integer() or int(number) % minute != 0
    return False


def looks_random(token: str) -> bool:
    """A long hex string, or a segment of 10+ characters that mixes digits with letters
    and changes class (digit, lower, upper) at least every 4 characters; without
    digits, 12+ characters changing case at least every 3."""
    if not _MAYBE_RANDOM.search(token) or not _TOKEN.fullmatch(token):
        return False  # (every branch below needs a digit, or two capitals)
    for segment in _SEPARATORS.split(token):
        if len(segment) < 10:
            continue
        digits = sum(c.isdigit() for c in segment)
        if _HEX.fullmatch(segment) and digits and digits < len(segment):
            return True
        upper = sum(c.isupper() for c in segment)
        lower = sum(c.islower() for c in segment)
        classes = ["d" if c.isdigit() else "u" if c.isupper() else "l" for c in segment]
        changes = sum(a != b for a, b in zip(classes, classes[1:], strict=False))
        mixed_case = upper >= 2 and lower >= 2
        if digits >= 2 or (digits == 1 and mixed_case):
            if changes >= max(3, len(segment) // 4):
                return True
        # Base62 without a digit (1 in 17 of them): only the case changes tell; a
        # camelCase name changes case once a word, a random token every other letter.
        elif digits == 0 and mixed_case and len(segment) >= 12 and changes >= len(segment) / 3:
            return True
    return False


class _Normaliser:
    """One pass over a JSON value. Counts what it kept and what it masked (by key, by
    shape), so ``near_key`` can tell an input that was all noise from one that had
    content."""

    def __init__(self, mask: bool) -> None:
        self.mask = mask
        self.kept = 0
        self.key_masked = 0
        self.shape_masked = 0

    def value(self, value: Any, role: str) -> Any:
        if isinstance(value, dict):
            if role == _KEEP:
                self.kept += 1
                return value
            return {str(k): self.value(v, _role(str(k))) for k, v in value.items()}
        if isinstance(value, list):
            return [self.value(item, role) for item in value]
        if isinstance(value, str):
            return self.string(value, role)
        if isinstance(value, bool) or value is None:
            return value
        return self.number(value, role)

    def number(self, number: int | float, role: str) -> Any:
        if self.mask and role == _VOLATILE:
            self.key_masked += 1
            return MASK_ID
        if self.mask and role in (_TIME, _FREE) and _epoch_is_clock(number):
            self.shape_masked += role == _FREE
            self.key_masked += role == _TIME
            return MASK_TIME
        self.kept += 1
        return number

    def string(self, text: str, role: str) -> Any:
        if role == _KEEP:
            self.kept += bool(text)
            return text
        stripped = text.strip()
        decoded = json_in(stripped)
        if decoded is not NO_JSON:
            return self.value(decoded, role)
        if not stripped:
            return ""
        if self.mask and role == _VOLATILE:
            self.key_masked += 1
            return MASK_ID
        if stripped.startswith(("http://", "https://")):
            return self.url(stripped)
        if not self.mask or role == _SUBJECT:
            self.kept += 1
            return _text(stripped)
        if role == _TIME:
            # Any value with a digit under a time key is a clock reading, unless it is a
            # date or a minute-aligned date-time: those are parameters.
            iso = _ISO.fullmatch(stripped) or _RFC_DATE.fullmatch(stripped)
            aligned = (iso is not None and not _iso_is_clock(iso)) or _DATE.fullmatch(stripped)
            if any(c.isdigit() for c in stripped) and not aligned:
                self.key_masked += 1
                return MASK_TIME
            self.kept += 1
            return _text(stripped)
        return self.free_text(stripped)

    def free_text(self, text: str) -> str:
        """Mask clock readings, UUIDs, epochs and random tokens in free text."""
        masked = 0

        def iso(match: re.Match[str]) -> str:
            nonlocal masked
            if _iso_is_clock(match):
                masked += 1
                return MASK_TIME
            return match.group(0)

        def epoch(match: re.Match[str]) -> str:
            nonlocal masked
            if _epoch_is_clock(int(match.group(0))):
                masked += 1
                return MASK_TIME
            return match.group(0)

        def uuid(match: re.Match[str]) -> str:
            nonlocal masked
            masked += 1
            return MASK_ID

        # Dates, times, epochs and UUIDs all have digits; most text has none.
        if _DIGIT.search(text):
            text = _RFC_DATE.sub(iso, _ISO.sub(iso, text))
            text = _UUID.sub(uuid, _EPOCH_IN_TEXT.sub(epoch, text))
        words = text.split()
        # No word shorter than a random token's 10 characters looks random; most text
        # has none that long, and the lengths are measured in C (a regex for a run of
        # 10 non-spaces would try it at every position).
        if max(map(len, words), default=0) >= _TOKEN_LENGTH:
            for position, word in enumerate(words):
                if len(word) < _TOKEN_LENGTH:
                    continue
                core = word.strip(_WORD_PUNCTUATION)
                if core and looks_random(core):
                    masked += 1
                    words[position] = word.replace(core, MASK_ID)
        self.shape_masked += masked
        rest = " ".join(words)
        left = rest.replace(MASK_ID, "").replace(MASK_TIME, "") if masked else rest
        if left.strip(" " + _WORD_PUNCTUATION):
            self.kept += 1
        return rest.casefold()

    def url(self, url: str) -> str:
        """Scheme and host folded, path kept (it names the resource), query parameters
        sorted and each judged by its name like a JSON key."""
        try:
            parts = urlsplit(url)
            params = parse_qsl(parts.query, keep_blank_values=True)
        except ValueError:
            self.kept += 1
            return _text(url)
        self.kept += 1
        query = sorted((k, dumps(self.value(v, _role(k)))) for k, v in params)
        base = f"{parts.scheme.lower()}://{parts.netloc.lower()}{parts.path or '/'}"
        rendered = "&".join(f"{k}={v}" for k, v in query)
        fragment = "#" + parts.fragment if parts.fragment else ""
        return base + ("?" + rendered if rendered else "") + fragment
