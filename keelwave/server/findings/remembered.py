"""The keys the detectors computed last, bounded by the memory they take.

The server judges a run again each time it grows (store/verdicts.py), so the same
tool inputs and outputs come back, and their normalised keys (normalise.py) are
worth remembering. A bound on the number of entries is no bound on memory: a
payload may be as large as a request body (10 MiB), and an ``lru_cache`` of
32,768 of them kept each payload twice (the bytes as the key, the key's text as
the value): 23 MiB of the judging server process under bench/sdk_load.py's
inputs of a few hundred bytes, 55 MiB after 900 inputs of 32 KiB
(tests/test_remembered.py), 2 GiB once 32,768 of them came. So what is kept is
counted in bytes, and the least recently used keys are forgotten once it passes
``budget``; a payload of more than SMALL_PAYLOAD bytes is remembered by a digest
of it, not kept a second time as the key.
"""

from __future__ import annotations

import functools
import hashlib
import sys
import threading
from collections import OrderedDict
from collections.abc import Callable
from typing import Any

# Payloads up to this many bytes are remembered by themselves, larger ones by a digest.
SMALL_PAYLOAD = 128
# What an entry takes beyond its name and its key's text (sys.getsizeof counts their
# headers): the ordered dict's slot, share of its hash table and link node. Checked
# by tests/test_remembered.py against what tracemalloc sees.
ENTRY_OVERHEAD = 80
_digest = hashlib.blake2b


class Remembered:
    """``function`` of a payload's bytes, remembered for the payloads seen last; called
    from the event loop and from the verdicts' worker thread alike."""

    def __init__(self, function: Callable[[bytes | None], Any], budget: int) -> None:
        functools.update_wrapper(self, function)
        self._function = function
        self.budget = budget
        self._keys: OrderedDict[bytes, Any] = OrderedDict()
        self._bytes = 0
        self._lock = threading.Lock()
        self.hits = self.misses = 0

    def __call__(self, raw: bytes | bytearray | memoryview | None) -> Any:
        if raw is None:
            return self._function(None)
        # Small payloads are their own key (exact, and hashing them is cheaper than a
        # digest); larger ones are remembered by a digest, not kept a second time.
        name = bytes(raw) if len(raw) <= SMALL_PAYLOAD else _digest(raw, digest_size=16).digest()
        key = self._keys.get(name, _MISSING)
        if key is not _MISSING:
            try:  # (no lock: another thread may have forgotten it since; then it is kept)
                self._keys.move_to_end(name)
            except KeyError:
                pass
            self.hits += 1  # (not exact across threads: a statistic)
            return key
        self.misses += 1
        key = self._function(raw if isinstance(raw, bytes) else bytes(raw))
        size = _size(name, key)
        if size > self.budget // 16:  # one payload must not push out a thousand others
            return key
        with self._lock:  # what is kept is counted exactly
            if name not in self._keys:  # (another thread may have computed it too)
                self._keys[name] = key
                self._bytes += size
                while self._bytes > self.budget:
                    forgotten, its_key = self._keys.popitem(last=False)
                    self._bytes -= _size(forgotten, its_key)
        return key

    def cache_clear(self) -> None:
        with self._lock:
            self._keys.clear()
            self._bytes = 0
            self.hits = self.misses = 0

    @property
    def entries(self) -> int:
        return len(self._keys)

    @property
    def bytes_kept(self) -> int:
        """What the entries take, as counted against the budget."""
        return self._bytes


_MISSING = object()


def _size(name: bytes, key: Any) -> int:
    return sys.getsizeof(name) + sys.getsizeof(key) + ENTRY_OVERHEAD


def remembered(budget: int) -> Callable[[Callable[[bytes | None], Any]], Remembered]:
    """Decorator: ``function`` remembered within ``budget`` bytes."""
    return lambda function: Remembered(function, budget)
