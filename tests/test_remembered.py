"""The detectors' remembered keys (findings/remembered.py): bounded by memory, not by
a count of entries, whatever the size of the payloads; and still remembered.

Memory is measured with tracemalloc around the real detectors: what stays allocated
after the runs are judged and dropped is what the caches keep.
"""

from __future__ import annotations

import gc
import json
import sys
import threading
import tracemalloc
from collections.abc import Iterator

import pytest

from keelwave.server.findings import StepView, findings, normalise
from keelwave.server.findings.remembered import ENTRY_OVERHEAD, Remembered

CACHES = (normalise.canonical, normalise.near_key, normalise.formatting_key)


@pytest.fixture
def traced() -> Iterator[None]:
    for cache in CACHES:
        cache.cache_clear()
    tracemalloc.start()
    try:
        yield
    finally:
        tracemalloc.stop()
        for cache in CACHES:
            cache.cache_clear()


def _kept_since(baseline: int) -> int:
    gc.collect()
    return tracemalloc.get_traced_memory()[0] - baseline


def test_large_payloads_are_remembered_within_the_budget(traced: None) -> None:
    # 300 runs, each one tool called 3 times (so near_key normalises every input) with
    # inputs of 32 KiB: 29 MiB of inputs, which an lru_cache of entries kept twice.
    gc.collect()
    baseline = tracemalloc.get_traced_memory()[0]
    for run in range(300):
        steps = [
            StepView(
                index,
                "write_file",
                json.dumps({"path": f"/srv/{run}/{index}.txt", "content": "x" * 32_000}).encode(),
                b'{"bytes_written": 32000}',
            )
            for index in (1, 2, 3)
        ]
        assert findings(steps) == []
    kept = _kept_since(baseline)
    budget = normalise.KEY_CACHE_BYTES
    assert kept < 1.1 * budget, f"{kept / 2**20:.1f} MiB kept for a budget of {budget / 2**20} MiB"
    assert normalise.near_key.bytes_kept <= budget


def test_the_budget_counts_what_entries_take(traced: None) -> None:
    """Small payloads: the accounting (the text and ENTRY_OVERHEAD) is within 25% of
    what tracemalloc sees the entries take, so the budget is one in bytes."""
    gc.collect()
    baseline = tracemalloc.get_traced_memory()[0]
    for number in range(20_000):
        normalise.near_key(json.dumps({"q": f"find order {number}", "page": number % 7}).encode())
    kept = _kept_since(baseline)
    assert normalise.near_key.entries == 20_000
    assert 0.75 * kept < normalise.near_key.bytes_kept < 1.25 * kept


def test_keys_are_remembered_and_the_least_recent_forgotten() -> None:
    computed: list[bytes | None] = []

    def key(raw: bytes | None) -> str:
        computed.append(raw)
        return (raw or b"").decode().upper() * 10

    remembered = Remembered(key, budget=16 * 1024)
    payloads = [f'{{"n": {n}}}'.encode() for n in range(200)]
    assert remembered(payloads[0]) == '{"N": 0}' * 10
    assert remembered(bytearray(payloads[0])) == '{"N": 0}' * 10  # the same bytes
    assert remembered(memoryview(payloads[0])) == '{"N": 0}' * 10
    assert (remembered.hits, remembered.misses, len(computed)) == (2, 1, 1)
    for payload in payloads:
        remembered(payload)
        remembered(payloads[0])  # kept in use: never the least recent
    assert remembered.bytes_kept <= remembered.budget
    assert 0 < remembered.entries < len(payloads)  # the budget forgot some
    computed.clear()
    remembered(payloads[0])
    remembered(payloads[1])  # long unused: forgotten, computed again
    assert computed == [payloads[1]]
    assert remembered(None) == "" and computed[-1] is None  # None is not remembered


def test_a_payload_larger_than_a_sixteenth_of_the_budget_is_not_kept() -> None:
    remembered = Remembered(lambda raw: (raw or b"").decode(), budget=16 * 1024)
    assert remembered(b"y" * 4096) == "y" * 4096
    assert remembered.entries == 0
    assert remembered(b"small") == "small" and remembered.entries == 1


def test_threads_share_the_cache() -> None:
    """The verdicts judge in a worker thread while requests may run detectors in the
    event loop: the accounting stays exact."""
    remembered = Remembered(lambda raw: (raw or b"").decode() * 4, budget=64 * 1024)
    payloads = [f"payload {n}".encode() for n in range(2_000)]

    def work(offset: int) -> None:
        for n in range(len(payloads)):
            remembered(payloads[(n + offset) % len(payloads)])

    threads = [threading.Thread(target=work, args=(offset,)) for offset in (0, 500, 1000, 1500)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert remembered.bytes_kept <= remembered.budget
    assert remembered.bytes_kept == sum(
        sys.getsizeof(name) + sys.getsizeof(key) + ENTRY_OVERHEAD
        for name, key in remembered._keys.items()  # noqa: SLF001
    )
