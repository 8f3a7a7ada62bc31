"""Whose word a run's loop rests on: the agent's, the server's, or both.

A run carries two accounts of looping. ``loop_detected``/``loop_step_index`` are
what the SDK reported when the run finished; ``detected_loop``/
``detected_loop_step_index`` are the server's verdict on the stored steps (an
exact loop or a cycle among its ``findings``). A run loops when either says so,
and everything a person reads says which. Shared by the CLI and the TUI; the
dashboard's copy is keelwave/web/app/src/verdict.ts.

Colours mean one thing: red is a loop, yellow (amber) a warning that is not a
loop (near-duplicate calls, calls that make no progress).
"""

from __future__ import annotations

from rich.text import Text

# The server's kinds of finding, in its order (keelwave.server.findings.KINDS; not
# imported from there: the query commands never import the server).
KINDS = ("exact_loop", "cycle", "near_duplicate", "no_progress")
LOOP_KINDS = frozenset({"exact_loop", "cycle"})
WARNING_KINDS = ("near_duplicate", "no_progress")
LABELS = {"exact_loop": "exact loop", "cycle": "cycle", "near_duplicate": "near-duplicate",
          "no_progress": "no progress"}  # fmt: skip
# The mark a step of a warning finding carries in a timeline.
SYMBOLS = {"near_duplicate": "≈", "no_progress": "∅"}

LOOP_STYLE = "bold white on red"
SERVER_LOOP_STYLE = "bold red"
WARNING_STYLE = "yellow"

BADGE_LEGEND = "LOOP reported by the agent · LOOP* detected by the server only"
WARNING_LEGEND = "≈ near-duplicate calls, ∅ no progress: warnings, not loops"


def from_spans(run: dict) -> bool:
    """Whether the run came as OpenTelemetry spans: then no agent reported anything, and
    its ``loop_detected`` is the server's own reading of the spans' fingerprints. The
    server says so in ``from_spans``; a server older than that field, only in the
    metadata of a run's own page (it names the trace)."""
    if "from_spans" in run:
        return bool(run["from_spans"])
    metadata = run.get("metadata")
    return isinstance(metadata, dict) and "otel.trace_id" in metadata


def source(run: dict) -> str | None:
    """``"both"``, ``"agent"``, ``"server"``, or None when neither says the run loops.
    (A run sent as spans has no agent's word: its loop_detected is the server's.)"""
    spans = from_spans(run)
    agent = bool(run.get("loop_detected")) and not spans
    server = bool(run.get("detected_loop")) or (bool(run.get("loop_detected")) and spans)
    if agent and server:
        return "both"
    return "agent" if agent else "server" if server else None


def loops(run: dict) -> bool:
    return source(run) is not None


def began_at(run: dict) -> int | None:
    """The earliest step either account says the loop began at."""
    steps = []
    if run.get("loop_detected") and run.get("loop_step_index") is not None:
        steps.append(run["loop_step_index"])
    if run.get("detected_loop") and run.get("detected_loop_step_index") is not None:
        steps.append(run["detected_loop_step_index"])
    return min(steps) if steps else None


def who(run: dict) -> str:
    """Who says the run loops, as the header's parenthesis: "detected by the server"."""
    agent_step, server_step = run.get("loop_step_index"), run.get("detected_loop_step_index")
    match source(run):
        case "agent":
            return "reported by the agent"
        case "server":
            return "detected by the server"
        case "both" if agent_step is not None and agent_step != server_step:
            return f"reported by the agent at step {agent_step}; the server found it from step " \
                f"{server_step}"  # fmt: skip
        case "both":
            return "reported by the agent and detected by the server"
    return ""


def loop_phrase(run: dict) -> str:
    """``from step 3 (detected by the server)``; empty when the run does not loop."""
    if not loops(run):
        return ""
    step = began_at(run)
    return f"{f'from step {step} ' if step is not None else ''}({who(run)})"


def loop_line(run: dict) -> str:
    """``yes, from step 3 (detected by the server)``, or ``no``."""
    if not loops(run):
        return "no"
    return f"yes{', ' if began_at(run) is not None else ' '}{loop_phrase(run)}"


def kinds(run: dict) -> list[str]:
    """The run's finding kinds, in the server's order."""
    found = set(run.get("findings") or ())
    return [kind for kind in KINDS if kind in found]


def warnings(run: dict) -> list[str]:
    return [kind for kind in kinds(run) if kind in WARNING_KINDS]


def findings_line(run: dict) -> str:
    """``cycle, exact loop``; ``none``."""
    return ", ".join(LABELS[kind] for kind in kinds(run)) or "none"


def findings_text(run: dict) -> Text:
    """The run's finding kinds, red for loops and yellow for warnings; ``none``."""
    found = kinds(run)
    if not found:
        return Text("none")
    text = Text()
    for number, kind in enumerate(found):
        if number:
            text.append(", ")
        text.append(LABELS[kind], style="red" if kind in LOOP_KINDS else WARNING_STYLE)
    return text


def badge(run: dict, pad: str = "") -> Text:
    """The runs table's loop cell: LOOP when the agent reported it (the server may agree),
    LOOP* when only the server found it, ≈ / ∅ for warnings only; empty otherwise."""
    found = source(run)
    if found in ("agent", "both"):
        return Text(f"{pad}LOOP{pad}", style=LOOP_STYLE)
    if found == "server":
        return Text(f"{pad}LOOP*", style=SERVER_LOOP_STYLE)
    marks = "".join(SYMBOLS[kind] for kind in warnings(run))
    return Text(f"{pad}{marks}", style=WARNING_STYLE) if marks else Text("")


def legend(runs: list[dict]) -> list[str]:
    """What the badges in a list of runs mean, the lines that need explaining."""
    lines = []
    if any(source(run) == "server" for run in runs):
        lines.append(BADGE_LEGEND)
    if any(not loops(run) and warnings(run) for run in runs):
        lines.append(WARNING_LEGEND)
    return lines


def loop_rate(runs: list[dict]) -> float | None:
    """The share of ``runs`` that loop by either account."""
    return sum(1 for run in runs if loops(run)) / len(runs) if runs else None
