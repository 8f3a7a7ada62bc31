"""What ``keelwave runs`` accepts, turned into the API's query parameters.

People type what the table shows: ``--status error`` because the status
column says "error", although the API calls that a termination reason; ``--since
2h`` as often as an ISO time. This module maps those words to the list API's
parameters (``status``, ``termination_reason``, ``since``/``until``, ``sort``/
``order``), and refuses anything else with one line naming what it accepts.
Standard library only: typer imports this with every command.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta

# What the status column shows (keelwave.remote.format.status), and the API's own words.
RUN_STATES = ("running", "stalled", "finished")
ENDINGS = {
    "clean": "clean",
    "error": "error",
    "timeout": "timeout",
    "loop": "loop_detected",
    "loop_detected": "loop_detected",
    "max_steps": "max_steps_reached",
    "max_steps_reached": "max_steps_reached",
    "context": "context_limit",
    "context_limit": "context_limit",
}
STATUS_HELP = "running, stalled, finished, or how a run ended as the column shows it: " \
    "clean, error, timeout, loop, max_steps, context."  # fmt: skip
ENDING_HELP = "How runs ended: clean, error, timeout, loop_detected (loop), " \
    "max_steps_reached (max_steps), context_limit (context)."  # fmt: skip

# --sort's words and the API's columns.
SORTS = {"started": "started_at", "duration": "duration_ms", "cost": "cost_usd",
         "steps": "step_count", "tokens": "tokens", "agent": "agent_name"}  # fmt: skip

_AGE = re.compile(r"^(\d{1,5})\s*(s|m|h|d|w)$")
_SECONDS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}
# The API's longest range: `--until` alone asks for everything up to then.
LONGEST_RANGE = timedelta(days=400)


class BadFilter(ValueError):
    """A filter the CLI cannot send; ``str()`` is the one line to print."""


def status_params(status: str | None, ending: str | None) -> dict[str, str]:
    """``--status`` and ``--ending`` as ``status`` and ``termination_reason``."""
    found: dict[str, str] = {}
    if status is not None:
        word = _word(status)
        if word in RUN_STATES:
            found["status"] = word
        elif word in ENDINGS:
            found["termination_reason"] = ENDINGS[word]
        else:
            raise BadFilter(f"--status {status!r}: expected {STATUS_HELP}")
    if ending is not None:
        word = _word(ending)
        if word not in ENDINGS:
            raise BadFilter(f"--ending {ending!r}: expected {ENDING_HELP}")
        if found.get("termination_reason") not in (None, ENDINGS[word]):
            raise BadFilter(f"--status {status!r} and --ending {ending!r} contradict each other")
        found["termination_reason"] = ENDINGS[word]
    return found


def _word(text: str) -> str:
    """``Max steps``, ``max-steps`` and ``max_steps`` are one word: ``max_steps``."""
    return "_".join(text.strip().lower().replace("-", " ").split())


def moment(text: str, flag: str, now: datetime | None = None) -> datetime:
    """An ISO 8601 time (a time without a zone is this machine's local time) or an age
    ending now: ``30d``, ``2h``, ``15m``, ``90s``, ``1w``."""
    text = text.strip()
    if match := _AGE.match(text.lower()):
        return (now or datetime.now(UTC)) - timedelta(
            seconds=int(match.group(1)) * _SECONDS[match.group(2)]
        )
    try:
        value = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        raise BadFilter(
            f"{flag} {text!r}: expected an ISO time (2026-11-30, 2026-11-30T09:00Z) "
            "or an age (30d, 2h, 15m)"
        ) from None
    return value if value.tzinfo else value.astimezone()


def range_params(since: str | None, until: str | None) -> dict[str, str]:
    """``--since``/``--until`` as the API's ``since``/``until`` (UTC, ISO)."""
    now = datetime.now(UTC)
    start = moment(since, "--since", now) if since else None
    end = moment(until, "--until", now) if until else None
    if start is None and end is None:
        return {}
    if start is None:
        start = end - LONGEST_RANGE  # type: ignore[operator]
    if end is not None and start >= end:
        raise BadFilter(f"--since {since!r} is not before --until {until!r}")
    found = {"since": start.astimezone(UTC).isoformat()}
    if end is not None:
        found["until"] = end.astimezone(UTC).isoformat()
    return found


def metadata_params(pairs: list[str]) -> list[str]:
    """``--metadata KEY=VALUE`` as given, once each is checked to have a key."""
    for pair in pairs:
        key, equals, _ = pair.partition("=")
        if not equals or not key.strip():
            raise BadFilter(f"--metadata {pair!r}: expected KEY=VALUE, such as env=prod")
    return pairs


def sort_params(sort: str | None, ascending: bool) -> dict[str, str]:
    """``--sort cost --asc`` as ``sort=cost_usd&order=asc``; newest first by default."""
    if sort is None:
        return {"order": "asc"} if ascending else {}
    word = sort.strip().lower()
    column = SORTS.get(word) or (word if word in SORTS.values() else None)
    if column is None:
        raise BadFilter(f"--sort {sort!r}: expected one of {', '.join(SORTS)}")
    return {"sort": column, "order": "asc" if ascending else "desc"}
