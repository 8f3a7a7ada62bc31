"""Handoffs: which agent handed the work to which, where the trace shows it.

A handoff does not nest the agent it goes to inside the one it comes from: the
frameworks run both under a workflow span, as siblings (the OpenAI Agents SDK,
Microsoft Agent Framework). What shows the handoff differs by instrumentation,
and :func:`collect` gathers all of it for a trace: a span named for it
(OpenInference's "handoff to X", a ``transfer_to_X`` tool), a span with
``gen_ai.handoff.to_agent`` (the Agents SDK's v2 instrumentor), a model call asking
for a ``handoff_to_X`` tool that no tool span runs (Agent Framework), a call of a
handoff tool that takes its target as an argument, ``agent_name`` (Google ADK's
``transfer_to_agent``, Strands Swarm's ``handoff_to_agent``). mapping.py then makes
the target a child of the agent before it that said so.
"""

from __future__ import annotations

from collections.abc import Callable

from keelwave.server.ingest.otlp import conventions as c
from keelwave.server.ingest.otlp import requested
from keelwave.server.ingest.otlp.decode import Span

# What the spans of each run say of handoffs, by the run's key: (the agent a handoff
# names exactly, or None; else a span's name that mentions one), lowercased.
Said = dict[bytes | None, list[tuple[str | None, str]]]
Owner = Callable[[Span], bytes | None]  # the run a span belongs to (mapping.map_trace's)


def handed_off_by(
    span: Span,
    runs: dict[bytes, str],
    unique: dict[bytes, Span],
    owner: Owner,
    said: Said,
) -> bytes | None:
    """The run that handed off to this agent: an agent that started before it, next to
    it in the same enclosing run (handoffs make the agents siblings: under the OpenAI
    Agents SDK's workflow span, Microsoft Agent Framework's workflow), and that shows
    the handoff (:func:`collect`); the latest such. Where OpenInference names the agent
    before this one (``graph.node.parent_id``) only that one may be it: in a CrewAI
    crew or an AutoGen round-robin chat that is only the previous speaker."""
    if not said:
        return None
    named = c.handed_off_by(span)
    home = owner(span)
    target = (runs.get(span.span_id) or span.name).lower()
    candidates = sorted(
        (
            unique[key]
            for key, agent in runs.items()
            if key in said and key != span.span_id and unique[key].start_ns <= span.start_ns
            and owner(unique[key]) == home and (named is None or agent == named)
        ),
        key=lambda other: (other.start_ns, other.span_id),
        reverse=True,
    )  # fmt: skip
    for source in candidates[:1] if named is not None else candidates:
        if any(
            exact == target if exact is not None else target in text
            for exact, text in said[source.span_id]
        ):
            return source.span_id
    return None


def collect(
    unique: dict[bytes, Span], roles: dict[bytes, str], runs: dict[bytes, str], owner: Owner
) -> Said:
    """What the trace's spans say of handoffs, lowercased, with the run that said it:
    a span named for one ("handoff to X", a "transfer_to_X" tool: OpenInference), the
    GenAI ``gen_ai.handoff.to_agent`` (the OpenAI Agents SDK's v2 instrumentor's
    ``agent_handoff`` span), a model call asking for a ``handoff_to_X`` or
    ``transfer_to_X`` tool that no tool span runs (Microsoft Agent Framework), a call
    of ``transfer_to_agent`` / ``handoff_to_agent`` (its tool span, or the model's
    request for it) with the target in its ``agent_name`` argument (Google ADK,
    Strands Swarm)."""
    found: Said = {}
    for span_id, span in unique.items():
        texts: list[tuple[str | None, str]] = []
        name = span.name.lower()
        if roles[span_id] == c.TOOL and c.tool_name(span).lower() in _BY_ARGUMENT:
            # (not by its name: "transfer_to_agent" names no agent, "agent" at most)
            target = _argument_target(c.tool_input(span), c.tool_name(span).lower())
            if target is not None:
                texts.append((target, name))
        elif "handoff" in name or "transfer" in name:
            texts.append((None, name))  # ("handoff to researcher", "transfer_to_billing")
        target = span.attributes.get("gen_ai.handoff.to_agent")
        if target:
            texts.append((str(target).lower(), name))
        if roles[span_id] == c.MODEL and _mentions(span):
            for tool, raw, _ in requested.tool_calls(span):
                tool = tool.lower()
                if tool in _BY_ARGUMENT:
                    target = _argument_target(c.arguments_json(raw), tool)
                    if target is not None:
                        texts.append((target, tool))
                    continue
                for prefix in _TOOL_PREFIXES:
                    if tool.startswith(prefix):
                        texts.append((tool.removeprefix(prefix), tool))
        if texts:
            found.setdefault(span_id if span_id in runs else owner(span), []).extend(texts)
    return found


_TOOL_PREFIXES = ("handoff_to_", "transfer_to_")  # a handoff tool's name before its target's
# Handoff tools that name their target in an argument, not in their name, and that
# argument's names: Google ADK's (Python, TypeScript) and Strands Swarm's (Python; its
# TypeScript Swarm picks the next agent by a structured answer, ``agentId``).
_BY_ARGUMENT = {
    "transfer_to_agent": ("agent_name", "agentName"),
    "handoff_to_agent": ("agent_name", "agentName"),
    "strands_structured_output": ("agentId",),
}


def _argument_target(arguments: bytes | None, tool: str) -> str | None:
    """The agent a handoff tool's arguments name, lowercased."""
    parsed = c.json_value(arguments.decode()) if arguments is not None else None
    if not isinstance(parsed, dict):
        return None
    target = next((parsed[k] for k in _BY_ARGUMENT[tool] if parsed.get(k)), None)
    return target.lower() if isinstance(target, str) else None


def _mentions(span: Span) -> bool:
    """A cheap look before reading a model call's response for a handoff."""
    return any(
        isinstance(value, str) and ("handoff_to_" in value or "transfer_to_" in value)
        for key, value in span.attributes.items()
        if "output" in key or "completion" in key
    )
