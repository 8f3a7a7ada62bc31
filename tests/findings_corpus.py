"""A labelled corpus of agent trajectories for the findings detectors (issue 19).

``corpus(seed)`` builds, deterministically, 240 trajectories shaped like real
agents in five domains (research, coding, support, SQL, browsing): a few steps
of ordinary work, sometimes a think step between calls, then one pattern, then
maybe more work. Half are stuck (an exact loop, a cycle of period 2–4, a
near-duplicate made of whitespace/case/key-order changes, timestamps, epochs,
request ids or double-encoded arguments, no progress, or two of these); half are
legitimately repetitive (pagination by page/offset/cursor, batches of distinct
calls, polling whose result changes, alternating tools with changing inputs,
and near misses for the masking: dates, minute-aligned slots, entity ids,
a single reformatted retry). Each trajectory's payloads are serialised the way
one framework would (``json.dumps`` defaults, compact, sorted, indented).

Labels are what the generator put there, not what the detectors say: the
scenario adds ``(kind, began_at_step)`` where it builds a pattern; exact loops,
which the spec defines mechanically, are labelled by grouping the bytes here.
"""

from __future__ import annotations

import json
import random
import string
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from findings_domains import DOMAINS, Call, Domain, choices

from keelwave.server.findings import StepView

STYLES = ("python", "compact", "sorted", "pretty")
# Near-duplicates twice: they come in the most variants (what differs, and where).
STUCK = ("exact", "cycle", "near", "near", "no_progress", "mixed")
LEGIT = ("pagination", "batch", "polling", "alternating", "near_miss")


@dataclass(frozen=True)
class Trajectory:
    """One run: its steps, whether it is stuck, and the (kind, began_at_step) to find."""

    name: str
    stuck: bool
    steps: tuple[StepView, ...]
    labels: frozenset[tuple[str, int]]


def render(value: Any, style: str) -> bytes:
    if style == "python":
        return json.dumps(value).encode()
    if style == "compact":
        return json.dumps(value, separators=(",", ":")).encode()
    if style == "sorted":
        return json.dumps(value, sort_keys=True, separators=(",", ":")).encode()
    return json.dumps(value, indent=2).encode()


class Builder:
    """One trajectory: steps appended in order, labels beside them."""

    def __init__(self, rng: random.Random, domain: Domain) -> None:
        self.rng = rng
        self.domain = domain
        self.style = rng.choice(STYLES)
        self.think_rate = rng.choice((0.0, 0.0, 0.15, 0.3))
        self.outputs = True  # some frameworks record no tool output at all
        self.steps: list[StepView] = []
        self.labels: set[tuple[str, int]] = set()

    def think(self) -> None:
        thought = render({"thought": self.rng.choice(THOUGHTS)}, self.style)
        self.steps.append(StepView(len(self.steps) + 1, None, thought, None))

    def maybe_think(self) -> None:
        if self.rng.random() < self.think_rate:
            self.think()

    def call(self, call: Call, *, raw_input: bytes | None = None) -> int:
        self.maybe_think()
        tool, args, output = call
        tool_input = raw_input if raw_input is not None else render(args, self.style)
        tool_output = render(output, self.style) if self.outputs else None
        self.steps.append(StepView(len(self.steps) + 1, tool, tool_input, tool_output))
        return len(self.steps)

    def work(self, low: int, high: int, fixed: bool = True) -> None:
        """Ordinary calls; ``fixed=False`` leaves out calls with a constant input
        (``screenshot {}``), which could close a cycle with a repeated call."""
        for _ in range(self.rng.randint(low, high)):
            self.call(self.domain.work(fixed=fixed))

    def trajectory(self, name: str, stuck: bool) -> Trajectory:
        groups: dict[tuple[str, bytes], list[int]] = {}
        for step in self.steps:
            if step.tool_name is not None:
                key = (step.tool_name, step.tool_input or b"")
                groups.setdefault(key, []).append(step.step_index)
        exact = {("exact_loop", g[0]) for g in groups.values() if len(g) >= 2}
        return Trajectory(name, stuck, tuple(self.steps), frozenset(self.labels | exact))


THOUGHTS = (
    "That did not answer it; let me try again.",
    "I should check the result before going on.",
    "Next, look at the details.",
    "Let me re-plan: the previous approach is not converging.",
)


# --- stuck ---------------------------------------------------------------------------


def exact(b: Builder) -> None:
    call = b.domain.work(fixed=False)
    if b.rng.random() < 0.5:  # back to back, as a retry loop does
        for _ in range(b.rng.randint(2, 5)):
            b.call(call)
    else:  # the same call again after other work
        for _ in range(b.rng.randint(2, 4)):
            b.call(call)
            b.work(1, 2, fixed=False)


def cycle(b: Builder) -> None:
    period = [b.domain.work(fixed=False) for _ in range(b.rng.randint(2, 4))]
    first = None
    for _ in range(b.rng.randint(2, 5)):
        for call in period:
            index = b.call(call)
            first = first or index
    if b.rng.random() < 0.3:  # caught in the middle of the next repetition
        b.call(period[0])
    b.labels.add(("cycle", first))


def near(b: Builder) -> None:
    tool, args, output, text_key = b.domain.near_call()
    usable = [
        k
        for k in VARIANTS
        if (text_key or k not in TEXT_VARIANTS) and ("url" in args or k != "url_buster")
    ]
    kinds = b.rng.sample(usable, b.rng.choice((1, 1, 2)))
    if kinds == ["double_encoded"]:  # only two encodings of one value: vary the format too
        kinds.append("format")
    count = b.rng.randint(3, 5)
    inputs = variants(b, args, text_key, kinds, count)
    echo = b.rng.random() < 0.25 and any(k.startswith("rq_") for k in kinds)
    together = b.rng.random() < 0.5
    first = None
    for n, raw in enumerate(inputs):
        out = {**output, "request": n} if echo else output
        index = b.call((tool, args, out), raw_input=raw)
        first = first or index
        if not together and n < count - 1:
            b.work(1, 2)
    b.labels.add(("near_duplicate", first))
    if together and not echo:
        b.labels.add(("no_progress", first))


def no_progress(b: Builder) -> None:
    calls = b.domain.stuck_calls(b.rng.randint(3, 6))
    first = None
    for call in calls:
        index = b.call(call)
        first = first or index
    b.labels.add(("no_progress", first))


def mixed(b: Builder) -> None:
    one, two = b.rng.sample((exact, cycle, near, no_progress), 2)
    one(b)
    b.work(1, 3)
    two(b)


# --- legitimately repetitive ---------------------------------------------------------


def pagination(b: Builder) -> None:
    for call in b.domain.pages(b.rng.randint(3, 8)):
        b.call(call)


def batch(b: Builder) -> None:
    for call in b.domain.batch(b.rng.randint(5, 18)):
        b.call(call)


def polling(b: Builder) -> None:
    for call in b.domain.poll(b.rng.randint(3, 7)):
        b.call(call)


def alternating(b: Builder) -> None:
    for call in b.domain.alternate(b.rng.randint(3, 6)):
        b.call(call)


def near_miss(b: Builder) -> None:
    """Calls that look alike but are not the same call, or a single reformatted retry."""
    if b.rng.random() < 0.3:
        tool, args, output, _ = b.domain.near_call()
        b.call((tool, args, output))
        b.work(0, 1)
        b.call((tool, args, output), raw_input=render(args, other_style(b)))
        return
    for call in b.domain.look_alikes(b.rng.randint(3, 8)):
        b.call(call)


SCENARIOS: dict[str, Callable[[Builder], None]] = {
    "exact": exact,
    "cycle": cycle,
    "near": near,
    "no_progress": no_progress,
    "mixed": mixed,
    "pagination": pagination,
    "batch": batch,
    "polling": polling,
    "alternating": alternating,
    "near_miss": near_miss,
}


# --- near-duplicate inputs -----------------------------------------------------------

VARIANTS = choices(
    "spacing|case|text_stamp|format|double_encoded|ts_iso|ts_epoch|ts_epoch_ms|rq_uuid|rq_hex|"
    "rq_token|rq_nested|rq_shape|url_buster"
)
TEXT_VARIANTS = ("spacing", "case", "text_stamp")
TIME_KEYS = ("timestamp", "ts", "requested_at", "sentAt", "client_time", "now")
ID_KEYS = choices(
    "request_id|requestId|x-request-id|trace_id|idempotency_key|nonce|client_request_id|"
    "correlation_id|tool_call_id"
)
SHAPE_KEYS = ("rq", "op_ref", "meta_tag")  # names that say nothing: the value's shape tells


def other_style(b: Builder) -> str:
    return b.rng.choice([s for s in STYLES if s != b.style])


def clock(rng: random.Random) -> datetime:
    """A clock reading: never on a whole minute (a real one is, once in 60 readings)."""
    moment = datetime(2024, rng.randint(1, 12), rng.randint(1, 28), tzinfo=UTC)
    moment += timedelta(seconds=rng.randint(0, 86_000))
    return moment.replace(
        second=rng.randint(1, 59), microsecond=rng.choice((0, rng.randint(1, 999_999)))
    )


def token(rng: random.Random, length: int = 16) -> str:
    return "".join(rng.choice(string.ascii_letters + string.digits) for _ in range(length))


def uuid4(rng: random.Random) -> str:
    hexits = f"{rng.getrandbits(128):032x}"
    return f"{hexits[:8]}-{hexits[8:12]}-4{hexits[13:16]}-a{hexits[17:20]}-{hexits[20:]}"


def variants(b: Builder, args: dict, text_key: str | None, kinds: list[str], count: int) -> list:
    """``count`` byte-distinct inputs that are the same call after normalisation."""
    rng = b.rng
    start = clock(rng)
    time_key, id_key, shape_key = (
        rng.choice(TIME_KEYS),
        rng.choice(ID_KEYS),
        rng.choice(SHAPE_KEYS),
    )
    buster = rng.choice(("_", "cb", "ts"))
    seen: set[bytes] = set()
    out: list[bytes] = []
    for n in range(count * 20):
        if len(out) == count:
            break
        value = json.loads(json.dumps(args))
        style = b.style
        now = start + timedelta(seconds=n * rng.randint(3, 40), microseconds=rng.randint(1, 999))
        if now.second == 0:
            now = now.replace(second=7)
        for kind in sorted(kinds, key=lambda k: k == "double_encoded"):  # encoding comes last
            if kind == "spacing":
                words = value[text_key].split()
                gaps = [rng.choice((" ", " ", "  ", "\t", "\n")) for _ in words]
                value[text_key] = rng.choice(("", " ")) + "".join(
                    w + g for w, g in zip(words, gaps, strict=True)
                ).strip(" ")
            elif kind == "case":
                text = value[text_key]
                cased = rng.choice(
                    (text, text.lower(), text.upper(), text.title(), text.capitalize())
                )
                value[text_key] = rng.choice(("", " ")) + cased + rng.choice(("", " ", "\n"))
            elif kind == "text_stamp":
                value[text_key] = f"{value[text_key]} (as of {now.isoformat()})"
            elif kind == "format":
                style = rng.choice(STYLES)
                items = list(value.items())
                rng.shuffle(items)
                value = dict(items)
            elif kind == "double_encoded":
                if rng.random() < 0.5:
                    value = json.dumps(value)  # arguments as a JSON string, OpenAI style
            elif kind == "ts_iso":
                text = now.isoformat() if rng.random() < 0.5 else now.strftime("%Y-%m-%dT%H:%M:%SZ")
                value[time_key] = text
            elif kind == "ts_epoch":
                value[time_key] = (
                    int(now.timestamp()) if rng.random() < 0.7 else round(now.timestamp(), 3)
                )
            elif kind == "ts_epoch_ms":
                value[time_key] = int(now.timestamp()) * 1000 + rng.randint(1, 999)
            elif kind == "rq_uuid":
                value[id_key] = uuid4(rng)
            elif kind == "rq_hex":
                value[id_key] = f"{rng.getrandbits(128):032x}"
            elif kind == "rq_token":
                value[id_key] = rng.choice(("req_", "rid-", "")) + token(rng)
            elif kind == "rq_nested":
                value["metadata"] = {"sent_at": now.isoformat(), "request_id": uuid4(rng)}
            elif kind == "url_buster":  # a cache-busting query parameter
                value["url"] += f"?{buster}={int(now.timestamp()) * 1000 + n + 1}"
            elif kind == "rq_shape":
                value[shape_key] = rng.choice((uuid4(rng), "op_" + token(rng, 20)))
        raw = value.encode() if isinstance(value, bytes) else render(value, style)
        if raw not in seen:
            seen.add(raw)
            out.append(raw)
    assert len(out) == count, (kinds, args)
    return out


# --- the corpus ----------------------------------------------------------------------


def build(rng: random.Random, number: int, scenario: str, stuck: bool) -> Trajectory:
    domain = DOMAINS[number % len(DOMAINS)](random.Random(rng.getrandbits(64)))
    builder = Builder(rng, domain)
    if scenario in ("exact", "cycle", *LEGIT):  # labels that do not depend on outputs
        builder.outputs = rng.random() > 0.15
    builder.work(1, 5)
    SCENARIOS[scenario](builder)
    builder.work(0, 4)
    return builder.trajectory(f"{number:03d}-{domain.name}-{scenario}", stuck)


def corpus(seed: int = 19, size: int = 240) -> list[Trajectory]:
    """``size`` trajectories, half stuck and half legitimately repetitive, from ``seed``."""
    rng = random.Random(seed)
    trajectories = []
    for number in range(size):
        stuck = number % 2 == 0
        names = STUCK if stuck else LEGIT
        scenario = names[(number // 2 // len(DOMAINS)) % len(names)]
        trajectories.append(build(rng, number, scenario, stuck))
    return trajectories
