"""The redaction screen in one pass: Hyperscan, where it is installed.

Every payload the server stores is screened for what a secret leaves in the text
(server/redaction.py): the built-in screen is about ten searches with Python's
``re``, which all scan the text, each with its own call. They cost about 3.5 µs
for a 330-byte payload, two payloads a step: the largest single function in the
server's profile of native ingest. Hyperscan finds all the same patterns in a
fraction of the time, and a whole request's payloads in one call
(:meth:`OnePassScreen.suspects`).

It looks for exactly what the ``re`` screen looks for (keelwave.sdk._redact,
whose plain patterns both are built from), the same way:

- the value rules' fragments and an escape that could hide one, in the text as
  it arrived (no decoding to ``str`` first);
- the secret keys' fragments in the text's *compact* form (ASCII letters
  lowercased, ``-_. `` dropped), as literals. (Searching the text itself for a
  fragment's letters with any run of the dropped characters between them finds
  the same, but Hyperscan runs such patterns at a tenth of the speed of
  literals: 350 MB/s against 4 GB/s, more than the translation costs.)

``tests/test_sdk_redaction.py`` checks that the two agree on every text.
Hyperscan has no wheel for some platforms (Linux on ARM), and needs SSSE3 on x86:
where it is missing or refuses the machine, :func:`builtin_screen` is None and the
server screens with the SDK's ``re`` searches, as before.
"""

from __future__ import annotations

import bisect
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

_SEPARATOR = b"\x00"  # between a request's payloads: JSON text never holds a raw NUL


def _stop(*_match: object) -> bool:
    return True  # one match is enough: Hyperscan stops scanning


def _ends_into(ends: list[int]) -> Callable[..., None]:
    """A match handler that collects where the matches end, scanning on."""

    def seen(_id: int, _start: int, end: int, _flags: int, _context: object) -> None:
        ends.append(end)

    return seen


class OnePassScreen:
    """The built-in screen: called with UTF-8 bytes, True when redaction might change
    them."""

    def __init__(self, values: hyperscan.Database, keys: hyperscan.Database) -> None:
        self._values = values  # over the text
        self._keys = keys  # over its compact form
        self._prototypes = (hyperscan.Scratch(values), hyperscan.Scratch(keys))
        self._local = threading.local()  # a scratch space serves one scan at a time

    def _scratch(self) -> tuple[hyperscan.Scratch, hyperscan.Scratch]:
        try:
            return self._local.scratch
        except AttributeError:
            values, keys = self._prototypes
            self._local.scratch = scratch = (values.clone(), keys.clone())
            return scratch

    def __call__(self, data: bytes | memoryview) -> bool:
        values, keys = self._scratch()
        try:
            self._values.scan(data, match_event_handler=_stop, scratch=values)
            compact = bytes(data).translate(_redact._LOWER_BYTES, _redact._DROPPED_BYTES)
            self._keys.scan(compact, match_event_handler=_stop, scratch=keys)
        except hyperscan.ScanTerminated:
            return True
        return False

    def suspects(self, payloads: Sequence[bytes | memoryview | None]) -> set[int]:
        """The positions of the ``payloads`` (JSON texts; None for none) that the screen
        does not clear, from one scan of them all run together: every match of a
        pattern lies inside one payload (none holds the separator) or spans a
        separator, which at worst makes its payload a suspect for nothing."""
        joined = _SEPARATOR.join([payload or b"" for payload in payloads])
        if joined.count(_SEPARATOR) != len(payloads) - 1:  # a NUL inside: not JSON text
            return {n for n, payload in enumerate(payloads) if payload and self(payload)}
        compact = joined.translate(_redact._LOWER_BYTES, _redact._DROPPED_BYTES)
        found: set[int] = set()
        for database, text, scratch in zip(
            (self._values, self._keys), (joined, compact), self._scratch(), strict=True
        ):
            ends: list[int] = []
            database.scan(text, match_event_handler=_ends_into(ends), scratch=scratch)
            if ends:  # (the separators survive the translation: they divide both texts)
                separators = [at.start() for at in re.finditer(_SEPARATOR, text)]
                found.update(bisect.bisect_left(separators, end) for end in ends)
        return found


def builtin_screen() -> OnePassScreen | None:
    """The built-in rules' screen over UTF-8 bytes, or None without Hyperscan."""
    if hyperscan is None:
        return None
    values = [
        *(pattern.encode("ascii") for pattern in _redact.SCREEN_VALUE_PATTERNS),
        _redact.ESCAPED_ASCII_PATTERN.encode("ascii"),
    ]
    keys = [re.escape(fragment).encode("ascii") for fragment in _redact.KEY_FRAGMENTS]
    try:
        databases = []
        for patterns in (values, keys):
            database = hyperscan.Database(mode=hyperscan.HS_MODE_BLOCK)
            database.compile(
                expressions=patterns, ids=list(range(len(patterns))), elements=len(patterns),
            )  # fmt: skip
            databases.append(database)
        return OnePassScreen(*databases)
    except hyperscan.HyperscanError as error:  # e.g. a CPU it does not support
        log.info("redaction screens with Python's re: Hyperscan refused (%s)", error)
        return None
