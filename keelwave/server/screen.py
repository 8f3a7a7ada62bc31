"""The redaction screen in one pass: Hyperscan, where it is installed.

Every payload the server stores is screened for what a secret leaves in the text
(server/redaction.py): the built-in screen is about ten searches with Python's
``re``, which all scan the text, each with its own call. They cost about 3.5 µs
for a 330-byte payload, two payloads a step: the largest single function in the
server's profile of native ingest. Hyperscan finds all the same patterns in one scan of the
bytes as they arrived (no decoding to ``str`` first), in about a third of the
time.

It looks for exactly what the ``re`` screen looks for (keelwave.sdk._redact,
whose plain patterns both are built from):

- the value rules' fragments and an escape that could hide one, in the text;
- the secret keys' fragments in the text's *compact* form (ASCII letters
  lowercased, ``-_. `` dropped): a fragment's letters in any case, with any run
  of those dropped characters between them, is the same thing in the text as
  it is.

``tests/test_sdk_redaction.py`` checks that the two agree on every text.
Hyperscan has no wheel for some platforms (Linux on ARM), and needs SSSE3 on x86:
where it is missing or refuses the machine, :func:`builtin_screen` is None and the
server screens with the SDK's ``re`` searches, as before.
"""

from __future__ import annotations

import logging
import re
import threading
from collections.abc import Callable

from keelwave.sdk import _redact

try:  # an optional dependency (pyproject.toml): not every platform has a wheel
    import hyperscan
except ImportError:  # pragma: no cover — the re screen takes over
    hyperscan = None

log = logging.getLogger("keelwave.redaction")

Screen = Callable[[bytes], bool]  # True when redaction might change the text


def _spread(fragment: str) -> bytes:
    """A regex finding ``fragment`` of the compact form in the text as it is."""
    return "[-_. ]*".join(re.escape(character) for character in fragment).encode("ascii")


def _stop(*_match: object) -> bool:
    return True  # one match is enough: Hyperscan stops scanning


def builtin_screen() -> Screen | None:
    """The built-in rules' screen over UTF-8 bytes, or None without Hyperscan."""
    if hyperscan is None:
        return None
    patterns = [
        *(pattern.encode("ascii") for pattern in _redact.SCREEN_VALUE_PATTERNS),
        _redact.ESCAPED_ASCII_PATTERN.encode("ascii"),
    ]
    exact = len(patterns)
    patterns += [_spread(fragment) for fragment in _redact.KEY_FRAGMENTS]
    single = hyperscan.HS_FLAG_SINGLEMATCH
    flags = [single] * exact + [single | hyperscan.HS_FLAG_CASELESS] * (len(patterns) - exact)
    try:
        database = hyperscan.Database(mode=hyperscan.HS_MODE_BLOCK)
        database.compile(
            expressions=patterns, ids=list(range(len(patterns))), elements=len(patterns),
            flags=flags,
        )  # fmt: skip
        prototype = hyperscan.Scratch(database)
    except hyperscan.HyperscanError as error:  # e.g. a CPU it does not support
        log.info("redaction screens with Python's re: Hyperscan refused (%s)", error)
        return None
    local = threading.local()  # a scratch space serves one scan at a time
    scan = database.scan
    terminated = hyperscan.ScanTerminated

    def screen(data: bytes) -> bool:
        try:
            scratch = local.scratch
        except AttributeError:
            scratch = local.scratch = prototype.clone()
        try:
            scan(data, match_event_handler=_stop, scratch=scratch)
        except terminated:
            return True
        return False

    return screen
