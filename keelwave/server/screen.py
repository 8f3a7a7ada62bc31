"""The redaction screen in one pass: Hyperscan, where it is installed.

Every payload the server stores is screened for what a secret leaves in the text
(server/redaction.py): the built-in screen is about ten searches with Python's
``re``, which all scan the text, each with its own call. They cost about 3.5 µs
for a 330-byte payload, two payloads a step: the largest single function in the
server's profile of native ingest. Hyperscan finds all the same patterns in a
fraction of the time, and a whole request's payloads in one call
(:meth:`OnePassScreen.suspects`).

It looks for exactly what the ``re`` screen looks for (keelwave.sdk._redact,
whose plain patterns both are built from):

- the value rules' fragments and an escape that could hide one, in the text as
  it arrived (no decoding to ``str`` first);
- the secret keys' fragments in the text's *compact* form (ASCII letters
  lowercased, ``-_. `` dropped). A short text is scanned once, for the
  fragments' letters with any run of the dropped characters between them
  (the same thing, in the text itself); a longer one, or a whole request's
  payloads, is translated to its compact form and scanned for the fragments as
  literals, which Hyperscan runs ten times as fast (:data:`SPREAD_UP_TO`).

``tests/test_sdk_redaction.py`` checks that the two agree on every text.
Hyperscan has no wheel for some platforms (Linux on ARM), and needs SSSE3 on x86:
where it is missing or refuses the machine, :func:`builtin_screen` is None and the
server screens with the SDK's ``re`` searches, as before.
"""

from __future__ import annotations

import bisect
import itertools
import logging
import re
import threading
from collections.abc import Callable, Sequence

from keelwave.sdk import _redact

try:  # an optional dependency (pyproject.toml): not every platform has a wheel
    import hyperscan
except ImportError:  # pragma: no cover — the re screen takes over
    hyperscan = None

log = logging.getLogger("keelwave.redaction")

# Below this many bytes, one scan of the text with the key fragments spread out
# (``p[-_. ]*a[-_. ]*s[-_. ]*s``) costs less than making the compact form and scanning
# twice; above, the compact form's literals win (Hyperscan runs spread patterns at
# about 400 MB/s, literals at 4 GB/s, and the translation costs about 1 ns a byte).
SPREAD_UP_TO = 1024
_SEPARATOR = b"\x00"  # between a request's payloads (JSON text holds no raw NUL)


def _stop(*_match: object) -> bool:
    return True  # one match is enough: Hyperscan stops scanning


def _ends_into(ends: list[int]) -> Callable[..., None]:
    """A match handler that collects where the matches end, scanning on."""

    def seen(_id: int, _start: int, end: int, _flags: int, _context: object) -> None:
        ends.append(end)

    return seen


class OnePassScreen:
    """The built-in screen: called with UTF-8 bytes, True when redaction might change
    them; :meth:`suspects` screens a request's payloads at once."""

    def __init__(
        self, values: hyperscan.Database, keys: hyperscan.Database, whole: hyperscan.Database
    ) -> None:
        self._values = values  # over the text
        self._keys = keys  # over its compact form
        self._whole = whole  # both over the text, the key fragments spread out
        self._prototypes = tuple(hyperscan.Scratch(db) for db in (values, keys, whole))
        self._local = threading.local()  # a scratch space serves one scan at a time

    def _scratch(self) -> tuple[hyperscan.Scratch, ...]:
        try:
            return self._local.scratch
        except AttributeError:
            self._local.scratch = scratch = tuple(proto.clone() for proto in self._prototypes)
            return scratch

    def __call__(self, data: bytes | memoryview) -> bool:
        values, keys, whole = self._scratch()
        try:
            if len(data) < SPREAD_UP_TO:  # one scan, no compact form to make
                self._whole.scan(data, match_event_handler=_stop, scratch=whole)
            else:
                self._values.scan(data, match_event_handler=_stop, scratch=values)
                self._keys.scan(_compact(data), match_event_handler=_stop, scratch=keys)
        except hyperscan.ScanTerminated:
            return True
        return False

    def suspects(self, payloads: Sequence[bytes | memoryview | None]) -> set[int]:
        """The positions of the ``payloads`` (JSON texts; None for none) that the screen
        does not clear, from one scan of them all run together (and one of their compact
        forms): a match is traced back to the payload it ends in by the payloads'
        lengths. A match that spans a separator makes its payload a suspect for nothing;
        every match inside one payload is found."""
        texts = [bytes(payload) if payload else b"" for payload in payloads]
        compacts = [_compact(text) for text in texts]
        found: set[int] = set()
        for database, parts, scratch in zip(
            (self._values, self._keys), (texts, compacts), self._scratch()[:2], strict=True
        ):
            ends: list[int] = []
            database.scan(_SEPARATOR.join(parts), match_event_handler=_ends_into(ends),
                          scratch=scratch)  # fmt: skip
            if ends:  # where each part ends in the joined text, separator included
                bounds = list(itertools.accumulate(len(part) + 1 for part in parts))
                found.update(bisect.bisect_left(bounds, end) for end in ends)
        return found


def _compact(data: bytes | memoryview) -> bytes:
    """The compact form: ASCII letters lowercased, ``-_. `` dropped (as the SDK's)."""
    return bytes(data).translate(_redact._LOWER_BYTES, _redact._DROPPED_BYTES)


def _spread(fragment: str) -> bytes:
    """A regex finding ``fragment`` of the compact form in the text as it is."""
    return "[-_. ]*".join(re.escape(character) for character in fragment).encode("ascii")


def _database(patterns: list[bytes], flags: list[int]) -> hyperscan.Database:
    database = hyperscan.Database(mode=hyperscan.HS_MODE_BLOCK)
    database.compile(
        expressions=patterns, ids=list(range(len(patterns))), elements=len(patterns),
        flags=flags,
    )  # fmt: skip
    return database


def builtin_screen() -> OnePassScreen | None:
    """The built-in rules' screen over UTF-8 bytes, or None without Hyperscan."""
    if hyperscan is None:
        return None
    values = [
        *(pattern.encode("ascii") for pattern in _redact.SCREEN_VALUE_PATTERNS),
        _redact.ESCAPED_ASCII_PATTERN.encode("ascii"),
    ]
    keys = [re.escape(fragment).encode("ascii") for fragment in _redact.KEY_FRAGMENTS]
    spread = [_spread(fragment) for fragment in _redact.KEY_FRAGMENTS]
    single, caseless = hyperscan.HS_FLAG_SINGLEMATCH, hyperscan.HS_FLAG_CASELESS
    try:
        return OnePassScreen(
            _database(values, [0] * len(values)),
            _database(keys, [0] * len(keys)),
            _database(values + spread, [single] * len(values) + [single | caseless] * len(spread)),
        )
    except hyperscan.HyperscanError as error:  # e.g. a CPU it does not support
        log.info("redaction screens with Python's re: Hyperscan refused (%s)", error)
        return None
