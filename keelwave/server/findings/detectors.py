"""Findings on a run: where an agent repeated itself, and how.

``findings(steps)`` is a pure function of the run's steps (any order; sorted by
``step_index``), standard library only. Four kinds, as issue 19's contract
defines them, each with its threshold and the reason for it:

``exact_loop``
    The same tool with byte-identical input, 2 or more times: exactly the
    ``/loops`` groups (the spec's loop), also where a cycle covers them. The key
    is the fingerprint of record, ``sha256(tool_name || 0x00 || tool_input)`` over
    the bytes *as sent*, when the step has one (every stored step does): the
    stored input may be redacted, and two calls that differed only in a secret
    are two calls, as ``/loops`` says. Without one (steps built by hand), the
    bytes themselves, ``(tool_name, tool_input or b"")``, the same grouping
    without hashing. Steps without a tool are never part of one.

``cycle``
    k ≥ 2 distinct calls (by fingerprint) repeated back to back at least twice,
    ``A B A B`` or ``A B C A B C``; period at most 8 (``cycles.MAX_PERIOD``).
    Steps without a tool are skipped when judging "back to back": an agent that
    thinks between its calls is still cycling. Reported: the maximal region, whole
    repetitions only, with its smallest period. Two repetitions are enough,
    because each call in them is byte-identical to its twin: no batch or page walk
    produces the same *sequence* of inputs twice. The one healthy pattern that
    does is a poll with a constant input split over two tools (``check_status``
    then ``sleep``, again and again): it is reported as a cycle, as the contract's
    definition says; outputs are deliberately not consulted (a cycle whose outputs
    vary is still a cycle to the contract, and gating on them would miss cycles
    through tools that answer with fresh noise each time).

``near_duplicate``
    One tool, 3 or more calls whose inputs are equal after ``normalise.near_key``
    (canonical JSON, strings trimmed, whitespace collapsed, case folded, volatile
    values masked) while at least two of them differ byte-wise. Three, not two:
    two calls that look alike after masking are common in healthy runs (a
    retry, a re-check after an edit); a third is an agent that does not notice it
    is asking again. What is masked, and above all what is not (page numbers,
    cursors, entity ids, paths, dates), is in ``normalise``.

``no_progress``
    Consecutive calls to one tool (steps without a tool skipped) whose outputs are
    identical as canonical JSON (nothing masked: the contract says identical), with
    at least 3 different inputs among them (a
    byte-identical retry inside the stretch neither breaks it nor counts; the same
    input again and again with the same answer is an exact loop, not this). Three
    for the same reason as above. Outputs that carry no result are
    not evidence: a missing output, ``null``, ``""``, ``{}``, a bare boolean, or an
    acknowledgement (``{"ok": true}``, ``{"status": "saved"}``, ``"OK"``): eighteen
    writes of eighteen files all answer ``{"ok": true}``, and that is a batch. For
    the same reason the answer of a tool named for a change (``write_file``,
    ``create_issue``, ``saveDraft``: first word write, save, create, update, delete…)
    counts only when it is a failure (an ``error`` key, ``ok``/``success`` false, a
    status ≥ 400): a receipt such as ``{"bytes_written": 120}`` may repeat.
    An empty result (``[]``, ``{"results": []}``, "no results") is evidence: it is
    the classic way of being stuck, rephrasing a search that finds nothing.

Findings are ordered by ``began_at_step``, the first step of the pattern (as for
``loop_step_index``), then by kind in the order above.

Cost: linear in the number of steps. Grouping is in dictionaries; the cycle search
compares integers, O(n · 8); the input of each call of a tool called 3+ times is
sketched (``sketch.near_sketch``: its plain words; the store keeps each step's
sketch, ``StepView.sketch``), sketched finely (``near_fine_sketch``: its number
words too) when three calls share a sketch, and normalised only when three share that;
an output is parsed once per distinct output inside a block of 3+ consecutive calls
to one tool (nothing else can be a near-duplicate or a stretch without progress).
``bench/findings_quality.py`` measures it: a few tens of µs per step on CPython
where nothing is kept, so the server keeps the sketches of stored steps and
remembers the near keys (``normalise.near_key``) rather than recompute them.
"""

from __future__ import annotations

import re
from collections import Counter, defaultdict
from collections.abc import Hashable, Sequence
from dataclasses import dataclass
from operator import attrgetter
from typing import Any

from keelwave.server.findings import normalise
from keelwave.server.findings.cycles import repeated_regions
from keelwave.server.findings.sketch import near_fine_sketch, near_sketch, sketch_number

KINDS = ("exact_loop", "cycle", "near_duplicate", "no_progress")
NEAR_DUPLICATE_MIN_CALLS = 3
NO_PROGRESS_MIN_CALLS = 3


def _words(text: str) -> frozenset[str]:
    return frozenset(text.split())


_ACK_WORDS = _words(
    "ok okay success succeeded successful done saved written created updated deleted removed "
    "sent accepted completed applied stored true"
)
_MUTATING_VERBS = _words(
    "write save create update delete remove upload insert put set store append edit patch mkdir "
    "move copy rename"
)
_FIRST_WORD = re.compile(r"[A-Za-z][a-z]*")


# (Not frozen: a frozen dataclass costs three times as much to make, and the verdict
# keeper makes one per stored call it reads. Nothing changes a view once made.)
@dataclass(slots=True)
class StepView:
    """What the detectors read of a stored step: payloads as the bytes sent."""

    step_index: int
    tool_name: str | None
    tool_input: bytes | None = None
    tool_output: bytes | None = None
    # sha256(tool_name || 0x00 || tool_input as sent): which calls are the same call.
    # The stores leave tool_input out where no detector reads it (store/verdicts.py).
    fingerprint: bytes | None = None
    # False for a call whose input nobody recorded (a stored tool step without a
    # fingerprint: an OpenTelemetry tool span without its arguments). It is like no
    # other call, as /loops leaves it out: never in an exact loop, a cycle or a
    # near-duplicate, nor a different input in a stretch without progress.
    input_known: bool = True
    # The input's sketch number (sketch.py) as the store computed it when the step came;
    # None: computed here from tool_input.
    sketch: int | None = None


@dataclass(frozen=True, slots=True)
class Finding:
    """One repetition pattern on a run, in the shape of the API's finding object."""

    kind: str
    began_at_step: int
    step_indices: tuple[int, ...]
    tool_names: tuple[str, ...]
    hits: int
    detail: str

    def as_dict(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "began_at_step": self.began_at_step,
            "step_indices": list(self.step_indices),
            "tool_names": list(self.tool_names),
            "hits": self.hits,
            "detail": self.detail,
        }


def findings(steps: Sequence[StepView]) -> list[Finding]:
    """Every finding on the run, ordered by where it began (module docstring)."""
    calls = sorted((s for s in steps if s.tool_name is not None), key=lambda s: s.step_index)
    inputs = [_bytes(s.tool_input) for s in calls]
    # Which calls are the same call: by fingerprint (as sent), else by the bytes; a call
    # whose input is unknown is the same as no other (an object equal only to itself).
    same = [
        (s.fingerprint if s.fingerprint is not None else raw) if s.input_known else object()
        for s, raw in zip(calls, inputs, strict=True)
    ]
    found = [
        *exact_loops(calls, same),
        *cycles(calls, same),
        *near_duplicates(calls, inputs, same),
        *no_progress(calls, same),
    ]
    found.sort(key=lambda f: (f.began_at_step, KINDS.index(f.kind), f.step_indices))
    return found


_TOOL_NAME = attrgetter("tool_name")


def _bytes(payload: bytes | bytearray | memoryview | None) -> bytes:
    return b"" if payload is None else bytes(payload)


def exact_loops(calls: Sequence[StepView], inputs: Sequence[Hashable]) -> list[Finding]:
    """The ``/loops`` groups: one per (tool, input bytes) seen twice or more."""
    keys = list(zip(map(_TOOL_NAME, calls), inputs, strict=True))
    # Counted first, in C: most runs repeat few calls, and only those need their indices.
    repeated = {key for key, count in Counter(keys).items() if count >= 2}
    if not repeated:
        return []
    groups: dict[tuple[str, Hashable], list[int]] = defaultdict(list)
    for call, key in zip(calls, keys, strict=True):
        if key in repeated:
            groups[key].append(call.step_index)
    return [
        Finding(
            "exact_loop",
            indices[0],
            tuple(indices),
            (tool,),
            len(indices),
            f"{tool} called {len(indices)} times with the same input",
        )
        for (tool, _), indices in groups.items()
        if len(indices) >= 2
    ]


def cycles(calls: Sequence[StepView], inputs: Sequence[Hashable]) -> list[Finding]:
    """Back-to-back repetitions of k ≥ 2 distinct calls (``cycles.repeated_regions``)."""
    keys = list(zip(map(_TOOL_NAME, calls), inputs, strict=True))
    numbering = {key: number for number, key in enumerate(dict.fromkeys(keys))}
    ids = list(map(numbering.__getitem__, keys))  # each distinct call's number, in order
    found = []
    for region in repeated_regions(ids):
        members = calls[region.start : region.end]
        period = [call.tool_name for call in members[: region.period]]
        found.append(
            Finding(
                "cycle",
                members[0].step_index,
                tuple(call.step_index for call in members),
                tuple(dict.fromkeys(period)),
                region.repetitions,
                f"{' → '.join(period)}, {region.repetitions} times",
            )
        )
    return found


def near_duplicates(
    calls: Sequence[StepView], inputs: Sequence[bytes], same: Sequence[Hashable] | None = None
) -> list[Finding]:
    """Three or more calls of one tool with the same normalised input, not all the same
    call (``same``: which calls are, by fingerprint; default: by input bytes)."""
    same = inputs if same is None else same
    keys: dict[bytes, str] = {}
    groups: dict[tuple[str, str], list[int]] = defaultdict(list)
    per_tool: dict[str, list[int]] = defaultdict(list)
    for position, call in enumerate(calls):
        if call.input_known:  # an unknown input is like no other, however normalised
            per_tool[call.tool_name].append(position)
    candidates = sorted(
        p
        for positions in per_tool.values()
        if len(positions) >= NEAR_DUPLICATE_MIN_CALLS
        for p in positions
    )
    # Equal near keys need equal sketches (sketch.py), three to five times cheaper: only the
    # calls whose sketch three or more of the tool's calls share are worth normalising.
    alike: dict[tuple[str, int], list[int]] = defaultdict(list)
    for position in candidates:
        call = calls[position]
        sketch = call.sketch
        if sketch is None:
            sketch = sketch_number(near_sketch(inputs[position] or None))
        alike[(call.tool_name, sketch)].append(position)
    # Calls that share a sketch often differ in a number of their text (``"page 17"``):
    # the fine sketch (its number words too, a third of a near key's cost) tells those
    # apart before any is normalised.
    finer: dict[tuple[str, str], list[int]] = defaultdict(list)
    for (tool, _), positions in alike.items():
        if len(positions) >= NEAR_DUPLICATE_MIN_CALLS:
            for position in positions:
                finer[(tool, near_fine_sketch(inputs[position] or None))].append(position)
    for (tool, _), positions in finer.items():
        if len(positions) < NEAR_DUPLICATE_MIN_CALLS:
            continue
        for position in positions:
            raw = inputs[position]
            key = keys.get(raw)
            if key is None:
                key = keys[raw] = normalise.near_key(raw or None)
            groups[(tool, key)].append(position)
    found = []
    for (tool, _), positions in groups.items():
        if len(positions) < NEAR_DUPLICATE_MIN_CALLS:
            continue
        if len({same[p] for p in positions}) < 2:
            continue
        distinct = {inputs[p] for p in positions}
        if len(distinct) == 1:  # alike as stored: what told them apart was redacted
            how = "values that were redacted (secrets)"
        elif len({normalise.formatting_key(raw or None) for raw in distinct}) == 1:
            how = "whitespace, key order or case"
        else:
            how = "volatile values (timestamps, ids, tokens) or formatting"
        found.append(
            Finding(
                "near_duplicate",
                calls[positions[0]].step_index,
                tuple(calls[p].step_index for p in positions),
                (tool,),
                len(positions),
                f"{tool} called {len(positions)} times with inputs that differ only in {how}",
            )
        )
    return found


def no_progress(calls: Sequence[StepView], inputs: Sequence[Hashable]) -> list[Finding]:
    """Stretches of consecutive calls of one tool with the same result, for 3+ inputs
    (``inputs``: what tells calls apart, fingerprints or bytes)."""
    outputs: dict[tuple[bytes, bool], str | None] = {}
    found: list[Finding] = []
    run: list[int] = []  # positions in ``calls``: one tool, one (informative) output
    run_output: str | None = None

    def close() -> None:
        if len(run) < NO_PROGRESS_MIN_CALLS:  # (most calls: no stretch to judge)
            return
        distinct = len({inputs[p] for p in run if calls[p].input_known})
        if distinct >= NO_PROGRESS_MIN_CALLS:
            tool = calls[run[0]].tool_name
            found.append(
                Finding(
                    "no_progress",
                    calls[run[0]].step_index,
                    tuple(calls[p].step_index for p in run),
                    (tool,),
                    len(run),
                    f"{tool} called {len(run)} times in a row with {distinct} different "
                    "inputs, same output each time",
                )
            )

    # Only calls inside a block of 3+ consecutive calls to one tool can be part of a
    # stretch: the others' outputs need not be parsed.
    in_block = [False] * len(calls)
    start = 0
    for end in range(1, len(calls) + 1):
        if end == len(calls) or calls[end].tool_name != calls[start].tool_name:
            if end - start >= NO_PROGRESS_MIN_CALLS:
                in_block[start:end] = [True] * (end - start)
            start = end
    for position, call in enumerate(calls):
        raw = call.tool_output if in_block[position] else None
        output = None
        if raw is not None:
            key = (bytes(raw), _is_mutation(call.tool_name))
            if key not in outputs:
                outputs[key] = _result(*key)
            output = outputs[key]
        same_tool = bool(run) and call.tool_name == calls[run[-1]].tool_name
        if same_tool and output is not None and output == run_output:
            run.append(position)
            continue
        close()
        run = [position] if output is not None else []
        run_output = output
    close()
    return found


def _result(raw: bytes, mutation: bool) -> str | None:
    """The output's canonical JSON, or None when it carries no result: an ack, or what a
    mutation answers when it did not fail."""
    value = normalise.parse(raw)
    try:
        if _is_acknowledgement(value) or (mutation and not _is_failure(value)):
            return None
        return normalise.dumps(value)
    except RecursionError:
        return normalise.opaque(raw)


def _is_mutation(tool: str) -> bool:
    """A tool named for a change (write_file, save, createIssue…): what it answers is a
    receipt (``{"bytes_written": 120}``), and two writes may well get the same one."""
    first = _FIRST_WORD.match(tool)
    return first is not None and first.group(0).casefold() in _MUTATING_VERBS


def _is_failure(value: Any) -> bool:
    """An error the same way each time is a result: the agent is not getting through."""
    if isinstance(value, str):
        return value.strip().casefold().startswith(("error", "failed", "permission denied"))
    if not isinstance(value, dict):
        return False
    lowered = {str(k).casefold(): v for k, v in value.items()}
    if any(lowered.get(k) for k in ("error", "errors", "exception", "failure")):
        return True
    status = lowered.get("status")
    return (
        lowered.get("ok") is False
        or lowered.get("success") is False
        or (isinstance(status, int) and not isinstance(status, bool) and status >= 400)
    )


def _is_acknowledgement(value: Any, top: bool = True) -> bool:
    """Nothing but "done": null, "", {}, a bare boolean, a success word or code, or an
    object of those (where ``false`` is a failure, and repeated failures are a result)."""
    if value is None or value is True or value in ("", {}):
        return True
    if value is False:
        return top
    if isinstance(value, str):
        return value.strip().strip(".!").casefold() in _ACK_WORDS
    if isinstance(value, int | float):
        return value in (200, 201, 202, 204)
    if isinstance(value, dict):
        return all(_is_acknowledgement(v, top=False) for v in value.values())
    return False
