"""Events checked where they are made, against the protocol's vocabulary and limits.

The server refuses a whole request for one bad element, and the sender can
only find the bad one by splitting the request; the developer, meanwhile,
hears about it from a log line far from the code that made it. Checking here
puts the message next to its cause and keeps the bad event out of the batch.

Two kinds of mistake, treated differently:

* **Wrong in the code itself**: a step type or termination reason outside the
  vocabulary, a name or tags given to a decorator. These are wrong on every
  call, so they raise ``ValueError`` where they are written (decorators at
  decoration time), naming the argument and what it accepts.
* **Wrong in a value that arrives at run time**: a tool name built from data,
  a NaN duration, too many tags. The agent must not crash for its
  telemetry: the one event is dropped (never altered, since names are part of
  fingerprints and of what the developer searches for), or the one field is
  left out when leaving it out means "unknown" (durations, latencies, costs:
  the server then prices the call itself). Each kind of problem is logged
  once per client, so a bad value in a loop does not flood the log.

Tags are the one fix-up: they only filter runs, so a bad tag is dropped and
the run kept, rather than losing the whole run for a label.
"""

from __future__ import annotations

import logging
import math
import re
import uuid
from collections.abc import Callable, Iterable
from typing import Any

from keelwave.protocol import AMOUNT_MAX, MAX_TAGS, NAME_MAX_LENGTH, STEP_INDEX_MAX, TOKEN_COUNT_MAX

log = logging.getLogger("keelwave")

# How a run or an adapter reports a problem: (kind, message). The client's
# Problems.warn; a kind is said once.
Report = Callable[[str, str], None]


class Problems:
    """Logs each kind of problem once: the first time says it all, repeats say nothing.

    No lock: two threads racing on a new kind may both log it, which is
    harmless, and a lock held by another thread at a fork would hang the child.
    """

    def __init__(self) -> None:
        self._seen: set[str] = set()

    def warn(self, kind: str, message: str) -> None:
        if kind not in self._seen:
            self._seen.add(kind)
            log.warning("keelwave: %s", message)

    def log(self, message: str) -> None:
        """Say it every time (news, not a repeated problem)."""
        log.warning("keelwave: %s", message)


_default = Problems()  # for runs made by hand, without a client


def default_report(kind: str, message: str) -> None:
    _default.warn(kind, message)


def kind(field: str, problem: str) -> str:
    """The kind of a problem, for saying it once: the field and what is wrong, numbers aside."""
    return f"{field}: {re.sub(r'[0-9]+', '#', problem)}"


def shown(value: Any, limit: int = 40) -> str:
    """A value for a log line: its repr, cut short (a 10 kB name helps nobody)."""
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 1] + "…"


def refuse(report: Report, field: str, value: Any, problem: str, outcome: str) -> None:
    """Report a bad value once per kind of problem, saying what becomes of its event."""
    report(kind(field, problem), f"{field}={shown(value)} {problem}; {outcome}")


# -- what is wrong with a value (None: nothing) ----------------------------------


def name_problem(value: Any) -> str | None:
    """Why ``value`` cannot be a name (agent, tool, provider, model, tag), or None."""
    if not isinstance(value, str):
        return f"must be a string, not {type(value).__name__}"
    if not value:
        return "must not be empty"
    if len(value) > NAME_MAX_LENGTH:
        return f"is {len(value)} characters long; the limit is {NAME_MAX_LENGTH}"
    if "\x00" in value:
        return "contains a NUL character"
    if not value.isascii():
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            return "contains a lone surrogate (not valid Unicode text)"
    return None


def amount_problem(value: Any) -> str | None:
    """Why ``value`` cannot be a cost or a duration, or None."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return f"must be a number, not {type(value).__name__}"
    if not math.isfinite(value) or not 0 <= value <= AMOUNT_MAX:
        return f"must be a finite number from 0 to {AMOUNT_MAX:g}"
    return None


def token_problem(value: Any) -> str | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return f"must be an integer, not {type(value).__name__}"
    if isinstance(value, float) and not (math.isfinite(value) and value.is_integer()):
        return "must be a whole number"
    if not 0 <= value <= TOKEN_COUNT_MAX:
        return f"must be from 0 to {TOKEN_COUNT_MAX}"
    return None


def step_index_problem(value: Any) -> str | None:
    if isinstance(value, bool) or not isinstance(value, int):
        return f"must be an integer, not {type(value).__name__}"
    if not 0 <= value <= STEP_INDEX_MAX:
        return f"must be from 0 to {STEP_INDEX_MAX}"
    return None


def as_uuid(value: Any) -> str | None:
    """``value`` as a canonical UUID string, or None when it is not a UUID."""
    if isinstance(value, uuid.UUID):
        return str(value)
    try:
        return str(uuid.UUID(str(value)))
    except ValueError:
        return None


# -- wrong in the code: raise ----------------------------------------------------


def vocabulary(value: Any, accepted: tuple[str, ...], argument: str) -> str:
    if value not in accepted:
        raise ValueError(f"{argument} must be one of {', '.join(accepted)}, not {value!r}")
    return value


def name(value: Any, argument: str) -> str:
    problem = name_problem(value)
    if problem is not None:
        raise ValueError(f"{argument} {shown(value)} {problem}")
    return value


def tags(values: Iterable[Any] | None, argument: str = "tags") -> list[str] | None:
    if values is None:
        return None
    values = list(values)
    if len(values) > MAX_TAGS:
        raise ValueError(f"{argument}: {len(values)} tags; the limit is {MAX_TAGS}")
    for value in values:
        problem = name_problem(value)
        if problem is not None:
            raise ValueError(f"{argument}: the tag {shown(value)} {problem}")
    return values


# -- wrong in a value at run time: report, and drop or leave out ------------------


def clean_tags(values: Iterable[Any] | None, report: Report) -> list[str] | None:
    """The tags that can be stored: bad ones and those beyond MAX_TAGS are left off."""
    if not values:
        return None
    kept = []
    for value in values:
        problem = name_problem(value)
        if problem is not None:
            report(kind("tag", problem), f"tags: the tag {shown(value)} {problem}; it is left "
                   "off the run")  # fmt: skip
        else:
            kept.append(value)
    if len(kept) > MAX_TAGS:
        report("tags", f"tags: a run has {len(kept)} tags; the limit is {MAX_TAGS}, so only the "
                       f"first {MAX_TAGS} are kept")  # fmt: skip
        kept = kept[:MAX_TAGS]
    return kept or None


def optional_amount(value: Any, field: str, what: str, report: Report) -> float | None:
    """``value`` as a float, or None (the field left out) when it cannot be stored."""
    if value is None:
        return None
    problem = amount_problem(value)
    if problem is not None:
        refuse(report, field, value, problem, f"the {what} is sent without it")
        return None
    return float(value)


_SURROGATE = re.compile("[\ud800-\udfff]")


def free_text(text: str) -> str:
    """Free text (errors, thoughts) without lone surrogates, which the server's JSON
    parser refuses (they come with file names that are not UTF-8): each becomes U+FFFD,
    as the server stores a NUL in free text."""
    if text.isascii():
        return text
    return _SURROGATE.sub("\ufffd", text)
