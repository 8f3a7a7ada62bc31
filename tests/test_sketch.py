"""The near-duplicate sketch: equal near keys must have equal sketches, or the detector
would miss near-duplicates; and the sketch must spare the normaliser most inputs.

The property is checked as the sketch module states it: the sketch of an input equals
the words read back from its near key (``of_key(near_key(raw))``), on the findings
corpus, on the detector tests' inputs, and on generated inputs built to sit where the
normaliser masks, folds, decodes and falls back.
"""

from __future__ import annotations

import json
import random
import string
import sys
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

sys.path.insert(0, str(Path(__file__).parent))
from findings_corpus import corpus, render  # noqa: E402

from keelwave.server.findings import StepView, findings, normalise  # noqa: E402
from keelwave.server.findings.sketch import (  # noqa: E402
    near_fine_sketch,
    near_sketch,
    of_key,
    sketch_number,
    sketch_text,
    stored_sketch,
)


def slow_sketch(raw: bytes | None) -> str:
    return of_key(normalise.near_key.__wrapped__(raw))


def slow_fine_sketch(raw: bytes | None) -> str:
    return of_key(normalise.near_key.__wrapped__(raw), fine=True)


fast_sketch = near_sketch.__wrapped__
fast_fine_sketch = near_fine_sketch.__wrapped__


def test_the_sketch_is_read_from_the_near_key_on_the_corpus(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    raws = {
        raw
        for seed in (19, 20)
        for trajectory in corpus(seed)
        for step in trajectory.steps
        for raw in (step.tool_input, step.tool_output)
        if raw is not None
    }
    assert len(raws) > 1000
    mismatched = [raw for raw in raws if fast_sketch(raw) != slow_sketch(raw)]
    assert mismatched == []
    mismatched = [raw for raw in raws if fast_fine_sketch(raw) != slow_fine_sketch(raw)]
    assert mismatched == []
    # …and read from the input itself, not from its near key (the slow way), nearly always.
    slow = []
    monkeypatch.setattr(normalise, "near_key", lambda raw: slow.append(raw) or "")
    for raw in raws:
        near_sketch.__wrapped__(raw)
    assert len(slow) < len(raws) / 50


# Strings where near_key does something: volatile shapes, dates, case, spacing, URLs,
# JSON inside a string, words at the lengths the sketch draws its lines at.
FRAGMENTS = [
    "weather",
    "in",
    "Paris",
    "PARIS",
    "the",
    "May",
    "GMT",
    "Wed,",
    "straße",
    "ﬁle",
    "Kelvin",
    "abcdefghijk",
    "abcdefghijkl",
    "HeLLoWoRLDxYz",
    "aBcDeFgHiJkLmN",
    "aBcDeFgHiJkL",
    "req_8fK2mQ9xLp3Z",
    "4bf92f3577b34da6a3ce929d0e0e4736",
    "abcdefab-abcd-abcd-abcd-abcdefabcdef",
    "0c6f2a52-0f0e-4c55-a6b1-8a2b9c3d4e5f",
    "2024-05-01T10:22:33Z",
    "2024-05-01 10:22:33",
    "2024-05-01T10:22:00",
    "2024-05-01",
    "Wed, 01 May 2024 10:22:33 GMT",
    "01 May 2024 10:00:00 UTC",
    "1714558953",
    "1714558953123",
    "10:30:00",
    "(see",
    "it)",
    "x\u00a0y",
    "a\x1cb",
    "\t\n",
    " ",
    "",
    "https://x.com/a?q=b",
    "https://x.com/a?q=hello+big+world",
    "https://x.com/a?q=%20a%20b",
    "http://x.com/p a b",
    "HTTP://X.com/a b",
    'https://x.com/?q=["a\\u0020b"]',
    '{"q": "Hello World"}',
    '["a b", "c"]',
    "[TRUE]",
    "{not json}",
    "\u2400raw:x",
    # Case folding outside ASCII that yields ASCII letters (a ligature, the Kelvin sign,
    # a long s), and separators str.split() takes for whitespace.
    "\ufb01le Kelvin \u212a \u017ftop",
    "word\x1cword\x1fnext\u00a0end\u2003x",
    "\u0130stanbul \u03a3\u0391\u03a3",
    # Number words, and the dates and clock readings whose digits near_key masks or keeps.
    "17",
    "3",
    "007",
    "123456789",
    "1234567890",
    "page 2 of 10",
    "1 May 2024 10:22:33",
    "01 May 2024 10:22",
    "Wed, 1 May 2024 10:22:33 +0200",
    "2024-05-01 10:22 UTC",
    "10:22:33 17",
    "\u0663 \uff11\uff12 \u00b2",  # digits outside ASCII: never number words
]
KEYS = [
    "q",
    "query",
    "page",
    "cursor",
    "since",
    "request_id",
    "traceId",
    "ts",
    "timestamp",
    "created_at",
    "id",
    "customer_id",
    "path",
    "url",
    "rq",
    "",
    "_",
]
texts = (
    st.lists(st.sampled_from(FRAGMENTS), min_size=0, max_size=6).map(lambda parts: " ".join(parts))
    | st.sampled_from(FRAGMENTS)
    | st.text(max_size=20)
)
# Numbers near_key treats apart: clock readings in seconds, milliseconds and
# microseconds (masked) and minute-aligned ones (kept), integral floats (read as ints
# below 2^53), negative zero.
NUMBERS = [1764633600, 1764633645, 1764633645123, 1764633600000, 1764633645.25, 1764633645123456,
           1.0, -0.0, 2.5, 1e20, 2.0**53, 2.0**53 + 2, 9007199254740993, -3]  # fmt: skip
scalars = (
    texts
    | st.integers(-(10**19), 10**19)
    | st.floats(allow_nan=False)
    | st.sampled_from(NUMBERS)
    | st.booleans()
    | st.none()
)
values = st.recursive(
    scalars,
    lambda inner: (
        st.lists(inner, max_size=4)
        | st.dictionaries(st.sampled_from(KEYS) | st.text(max_size=8), inner, max_size=5)
        | inner.map(lambda v: json.dumps(v))
    ),  # JSON sent as a string
    max_leaves=20,
)


@settings(max_examples=1500, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(value=values, style=st.sampled_from(("python", "compact", "sorted", "pretty")))
def test_the_sketch_is_read_from_the_near_key_on_generated_inputs(value: Any, style: str) -> None:
    raw = render(value, style)
    assert fast_sketch(raw) == slow_sketch(raw)
    assert fast_fine_sketch(raw) == slow_fine_sketch(raw)


@pytest.mark.parametrize(
    "raw",
    [
        None,
        b"",
        b"not json at all",
        b'{"a":"x\x01y"}',
        b"[NaN]",
        b"\xef\xbb\xbf" + b'{"q": "Hello"}',
        b'["\\ud800 hello"]',
        b'{"q": "\xff hello"}',
        b"[" * 300 + b"]" * 300,
        json.dumps([[[[[["deep words here"]]]]]] * 3).encode(),
        json.dumps({"q": "x", "n": 10**30}).encode(),
        '{"q": "caf\u00e9 ol\u00e9"}'.encode("utf-16"),
    ],
)
def test_the_sketch_is_read_from_the_near_key_on_odd_bytes(raw: bytes | None) -> None:
    assert fast_sketch(raw) == slow_sketch(raw)
    assert fast_fine_sketch(raw) == slow_fine_sketch(raw)


@pytest.mark.parametrize(
    ("raw", "fine"),
    [
        (b'{"q": "query 17 3"}', "17 3 query"),
        (b'{"q": "Page 2 of 10", "n": 5}', "10 2 5 of page"),
        # an HTTP date's digits are masked when it is a clock reading, kept when aligned
        (b'{"q": "at Wed, 01 May 2024 10:22:33 GMT please"}', "at please"),
        (b'{"q": "at Wed, 01 May 2024 10:22 GMT please"}', "01 2024 at please"),
        (b'{"ts": "17", "q": "x 17"}', "17 x"),  # under a time key: a clock reading
        (b'{"page": "17"}', ""),  # under a kept key: compared exactly, not sketched
        (b'{"q": "1714558953 1234567890 123456789"}', "123456789"),
    ],
)
def test_the_fine_sketch_holds_the_number_words_near_key_keeps(raw: bytes, fine: str) -> None:
    assert fast_fine_sketch(raw) == slow_fine_sketch(raw) == fine


def test_near_duplicates_with_the_sketch_are_those_without_it() -> None:
    """On generated runs that mix near-duplicates of every kind among distinct calls."""
    rng = random.Random(5)
    words = ["alpha", "beta", "gamma", "delta", "omega", "Paris", "report", "shoes"]
    for _ in range(60):
        steps = []
        for index in range(1, 40):
            query = " ".join(rng.sample(words, 2))
            if rng.random() < 0.5:  # a number word: calls a sketch alone cannot tell apart
                query += f" {rng.choice((1, 2, 17))}"
            given_: dict[str, Any] = {"q": rng.choice((query, query.upper(), f" {query}  "))}
            if rng.random() < 0.5:
                given_["request_id"] = "".join(rng.choices(string.ascii_letters, k=12))
            if rng.random() < 0.3:
                given_["ts"] = f"2024-05-01T10:22:{rng.randint(0, 59):02d}Z"
            tool = rng.choice(("search", "search", "fetch"))
            steps.append(StepView(index, tool, render(given_, rng.choice(("python", "compact")))))
        assert findings(steps) == findings_without_sketch(steps)


def findings_without_sketch(steps: list[StepView]) -> list:
    import keelwave.server.findings.detectors as detectors

    original = detectors.near_sketch, detectors.near_fine_sketch
    detectors.near_sketch = detectors.near_fine_sketch = lambda raw: ""  # a tool's calls, one group
    try:
        return findings(steps)
    finally:
        detectors.near_sketch, detectors.near_fine_sketch = original


def test_a_run_of_distinct_calls_normalises_none_of_them() -> None:
    """The cost the sketch is for: 300 calls of three tools with different questions."""
    rng = random.Random(3)
    vocabulary = [
        "".join(rng.choices(string.ascii_lowercase, k=rng.randint(4, 9))) for _ in range(400)
    ]
    steps = [
        StepView(
            index,
            rng.choice(("web_search", "read_docs", "ask_user")),
            json.dumps(
                {"query": " ".join(rng.sample(vocabulary, 6)), "max_results": 5, "step": index}
            ).encode(),
        )
        for index in range(1, 301)
    ]
    normalise.near_key.cache_clear()
    assert [f.kind for f in findings(steps)] == []
    assert normalise.near_key.misses == 0
    # …and a near-duplicate among them is still found, its calls alone normalised.
    first = json.loads(steps[0].tool_input)
    alike = [
        StepView(index, steps[0].tool_name, json.dumps({**first, "query": query}).encode())
        for index, query in ((301, f"  {first['query']} "), (302, first["query"].upper()))
    ]
    found = findings([*steps, *alike])
    assert [(f.kind, f.step_indices) for f in found if f.kind == "near_duplicate"] == [
        ("near_duplicate", (1, 301, 302))
    ]
    assert normalise.near_key.misses == 3


def test_calls_that_differ_in_a_number_of_their_text_are_not_normalised() -> None:
    """Their sketches are one (digits in a text are not plain words), their fine
    sketches are not: 60 calls like bench/peer_phoenix.py's ``{"q": "query 17 3"}``."""
    steps = [
        StepView(index, "search", json.dumps({"q": f"query {index} {index % 7}"}).encode())
        for index in range(1, 61)
    ]
    assert len({near_sketch(step.tool_input) for step in steps}) == 1
    normalise.near_key.cache_clear()
    assert findings(steps) == []
    assert normalise.near_key.misses == 0
    # …and three calls alike but for their case and spacing are still one finding.
    alike = [
        StepView(61, "search", b'{"q": "QUERY 5 5"}'),
        StepView(62, "search", b'{"q": "  query 5   5 "}'),
    ]
    found = findings([*steps, *alike])
    assert [(f.kind, f.step_indices) for f in found] == [("near_duplicate", (5, 61, 62))]


@pytest.mark.parametrize(
    ("raw", "number"),
    [
        (b'{"q": "weather in paris"}', -6115962730996342319),
        (b'{"path": "/srv/a.py", "start_line": 3}', -7051202129513837055),
        (b"[]", -1970711489451281740),
    ],
)
def test_sketch_numbers_are_the_ones_stored_steps_hold(raw: bytes, number: int) -> None:
    """agent_steps.input_sketch keeps these numbers: computing them another way must give
    the same ones (or a migration must reset the stored sketches)."""
    assert sketch_number(sketch_text(raw)) == number
    assert stored_sketch("search", raw) == number
