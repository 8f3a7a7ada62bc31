"""What the run screen's inspector shows for the row under the cursor: a step, a model
call, a child run, or the run's own error.

Each function returns one rich renderable for the inspector's Static; the run
screen decides which to call from the node's data (its ``kind``).
"""

from __future__ import annotations

import json
from typing import Any

from rich.console import Group, RenderableType
from rich.syntax import Syntax
from rich.text import Text

from keelwave.remote import format as fmt
from keelwave.remote import verdict
from keelwave.remote.timeline import findings_of
from keelwave.remote.waterfall import offset, when

RUN_ERROR = "run_error"  # the kind of the timeline's last node when the run failed


def _json(value: Any) -> Syntax:
    return Syntax(json.dumps(value, indent=2, ensure_ascii=False), "json", word_wrap=True,
                  background_color="default")  # fmt: skip


def _traceback(text: str) -> Text:
    return Text(text.rstrip(), style="red dim")


def _started(item: dict, run: dict | None) -> Text:
    """``started 14:03:07.250 · +1.0 s`` (into the run)."""
    started = item.get("started_at")
    text = Text(f"started {fmt.clock(started)}", style="dim")
    if run is not None and (after := offset(when(started), run["started_at"])):
        text.append(f" · {after}", style="dim")
    return text


def _ended_the_run(item: dict, run: dict | None) -> bool:
    """The step's error is the run's (the exception escaped it), and the run has a traceback."""
    return bool(item.get("error") and run and run.get("error") == item["error"]
                and run.get("error_traceback"))  # fmt: skip


def step(item: dict, run: dict | None, findings: list[dict]) -> RenderableType:
    parts: list[RenderableType] = [
        Text(
            f"step {item['step_index']} · {item['step_type']} · "
            f"{fmt.duration(item.get('duration_ms'))}",
            style="bold",
        ),  # fmt: skip
        _started(item, run),
    ]
    if item.get("in_loop"):
        parts.append(Text(f"repeated ×{item['loop_hits']} in this run", style="red"))
    for finding in findings_of(item, findings):
        if finding["kind"] == "exact_loop":
            continue  # said just above, from the step itself
        loop = finding["kind"] in verdict.LOOP_KINDS
        parts.append(Text(f"{verdict.LABELS.get(finding['kind'], finding['kind'])}: "
                          f"{finding['detail']}",
                          style="red" if loop else verdict.WARNING_STYLE))  # fmt: skip
    if item.get("error"):
        parts.append(Text(item["error"], style="red"))
    if item.get("error_traceback"):
        parts.append(_traceback(item["error_traceback"]))
    elif _ended_the_run(item, run):
        parts.append(_traceback(run["error_traceback"]))  # type: ignore[index]
    for label, key in (("input", "tool_input"), ("output", "tool_output")):
        if item.get(key) is not None:
            parts.append(Text(label, style="dim"))
            parts.append(_json(item[key]))
    if item.get("content"):
        parts.append(Text(item["content"]))
    if item.get("fingerprint"):
        parts.append(Text(f"fingerprint {item['fingerprint']}", style="dim"))
    return Group(*parts)


def model_call(item: dict, run: dict | None) -> RenderableType:
    failed = item.get("status") == "error"
    title = Text(f"model call · {item.get('provider')} {item.get('model')}", style="bold")
    parts: list[RenderableType] = [title, _started(item, run)]
    linked = item.get("step_index")
    parts.append(Text(f"for step {linked}" if linked is not None else "not linked to a step",
                      style="dim"))  # fmt: skip
    parts.append(Text(
        f"{fmt.tokens(item.get('input_tokens'))} in · {fmt.tokens(item.get('output_tokens'))} "
        f"out · {fmt.money(item.get('cost_usd'))} · {fmt.duration(item.get('latency_ms'))}"
    ))  # fmt: skip
    if failed:
        parts.append(Text(item.get("error") or "failed", style="red"))
    for label, key in (("prompt", "input_messages"), ("response", "output_messages")):
        if item.get(key) is not None:
            parts.append(Text(label, style="dim"))
            parts.append(_json(item[key]))
    if item.get("input_messages") is None and item.get("output_messages") is None:
        parts.append(Text("No prompt or response was sent (content capture is opt-in).",
                          style="dim"))  # fmt: skip
    return Group(*parts)


def child_run(item: dict, run: dict | None) -> RenderableType:
    title = Text(f"child run · {item['agent_name']}", style="bold")
    status = Text("status ", style="dim").append_text(fmt.status(item, short=False))
    if verdict.loops(item):
        status.append("   LOOP", style=verdict.LOOP_STYLE)
    parts: list[RenderableType] = [
        title, Text(item["run_id"], style="dim"), _started(item, run), status,
        Text(f"{fmt.duration(item.get('duration_ms'))} · "
             f"{fmt.plural(item['step_count'], 'step')} · "
             f"{fmt.plural(item['llm_calls'], 'model call')} · {fmt.money(item['cost_usd'])}"),
    ]  # fmt: skip
    if item.get("error"):
        parts.append(Text(item["error"], style="red"))
    parts.append(Text("enter: open this run", style="dim"))
    return Group(*parts)


def run_error(run: dict) -> RenderableType:
    parts: list[RenderableType] = [
        Text("the run's error", style="bold"),
        Text(f"ended {fmt.moment(run.get('ended_at'))}", style="dim"),
        Text(run.get("error") or "", style="red"),
    ]
    if run.get("error_traceback"):
        parts.append(_traceback(run["error_traceback"]))
    else:
        parts.append(Text("No traceback was sent.", style="dim"))
    return Group(*parts)
