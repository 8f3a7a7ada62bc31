"""What a trace's shape says of its spans beyond what each says alone.

conventions.role reads one span. Some spans are what they are only by their place
in the trace: an agent span with nothing in it whose work hangs beside it, an
agent span that is one step of the agent around it, a LangGraph graph invoked in
a tool, a workflow with model calls of its own, a model span that wraps the
client's call, a tool span inside another of the same call. Each function here
corrects the roles (or the tree) mapping.py starts from, for one trace's spans;
all of them depend only on the set of spans, never on the order they came in.
"""

from __future__ import annotations

import dataclasses

from keelwave.server.ingest.otlp import conventions as c
from keelwave.server.ingest.otlp.decode import Span

# Ancestor chains longer than this are cut (a cycle of parent ids in bad input).
MAX_DEPTH = 10_000


def work_beside_agents(unique: dict[bytes, Span], roles: dict[bytes, str]) -> None:
    """An agent span with nothing inside it whose work hangs beside it, in a span of
    its parent named for the agent (OpenLLMetry's LangChain instrumentation: a graph
    called in a tool is ``invoke_agent X`` and, next to it, ``execute_task X`` with the
    graph's nodes). That span is taken as the agent's child, so its work is the run's.
    (By the span's name, which storage keeps of plumbing spans; copies, re-parented:
    the spans themselves are shared with the memo.)"""
    parents = {span.parent_span_id for span in unique.values()}
    empty = [
        span_id
        for span_id, role in roles.items()
        if role == c.AGENT and span_id not in parents and unique[span_id].parent_span_id
    ]
    if not empty:  # (the common case: every agent has its work inside it)
        return
    children: dict[bytes | None, list[bytes]] = {}
    for span in unique.values():
        children.setdefault(span.parent_span_id, []).append(span.span_id)
    for span_id in empty:
        span = unique[span_id]
        name = c.agent_name(span)
        for sibling in children.get(span.parent_span_id, ()):
            other = unique[sibling]
            if (
                roles[sibling] == c.OTHER
                and sibling in children
                and name is not None
                and other.name in (f"execute_task {name}", f"{name}.task")
            ):
                unique[sibling] = dataclasses.replace(other, parent_span_id=span_id)


def parts_of_agents(unique: dict[bytes, Span], roles: dict[bytes, str]) -> None:
    """Agent spans that are a part of some agent's work, not agents of their own:

    - an ``invoke_agent`` naming no agent inside another agent (OpenLIT's spans of the
      OpenAI Agents SDK's turns, of each step of CrewAI's agent executor): its spans
      belong to the agent around it. (Outside every agent, a nameless one still makes
      a run: the wrapper rule of mapping._run_spans.)
    - OpenLIT's LangChain ``invoke_agent`` with no tool call inside: one run of a
      graph's node whose name has "agent" in it (create_react_agent's "agent" node,
      which only calls the model; OpenLIT takes any such name for an agent). The
      graph's own span has the node runs and the tool calls beside them inside it."""
    agents = {span_id for span_id, role in roles.items() if role == c.AGENT}
    children: dict[bytes, list[bytes]] | None = None
    for span_id in agents:
        span = unique[span_id]
        if c.unnamed_invocation(span):
            parent, depth = span.parent_span_id, 0
            while parent in unique and parent not in agents and depth < MAX_DEPTH:
                parent, depth = unique[parent].parent_span_id, depth + 1
            if parent in agents:
                roles[span_id] = c.OTHER
        elif span.scope == c.OPENLIT_LANGCHAIN:
            if children is None:
                children = {}
                for other in unique.values():
                    if other.parent_span_id is not None:
                        children.setdefault(other.parent_span_id, []).append(other.span_id)
            stack, tool = list(children.get(span_id, ())), False
            while stack and not tool:
                below = stack.pop()
                tool = roles[below] == c.TOOL
                stack.extend(children.get(below, ()))
            if not tool:
                roles[span_id] = c.OTHER


def graphs_in_tools(unique: dict[bytes, Span], roles: dict[bytes, str]) -> None:
    """A LangGraph graph invoked inside a tool (OpenInference): its span inherits the
    calling node's metadata, langgraph_step and all, so role() takes it for part of
    that node (and storage keeps only its place in the tree). The tool and model calls
    inside it tell: their langgraph_checkpoint_ns extends the tool's with "|". The
    graph is the span just below the tool on their way up: an agent of its own."""
    for span in unique.values():
        inner = c.graph_namespace(span) if roles[span.span_id] != c.OTHER else None
        if inner is None or "|" not in inner:
            continue
        below, parent, depth = span, span.parent_span_id, 0
        while parent in unique and roles[parent] != c.AGENT and depth < MAX_DEPTH:
            if roles[parent] == c.TOOL:
                outer = c.graph_namespace(unique[parent])
                if outer and inner.startswith(outer + "|") and roles[below.span_id] == c.OTHER:
                    roles[below.span_id] = c.AGENT
                break
            below, parent, depth = unique[parent], unique[parent].parent_span_id, depth + 1


def workflows_with_work(unique: dict[bytes, Span], roles: dict[bytes, str]) -> None:
    """A GenAI ``invoke_workflow`` span outside every agent, with model or tool calls of
    its own outside its agents, in a trace that has agents: a run (OpenTelemetry's
    LangChain instrumentation draws a LangGraph graph so, and a supervisor graph's router
    node calls the model beside the agent it runs). Without it those calls would belong
    to no run, and be lost. A workflow that only holds agents stays plumbing (Google ADK's
    around its root agent, a handoff's agents side by side): its agents are the runs."""
    agents = {span_id for span_id, role in roles.items() if role == c.AGENT}
    if not agents:
        return  # (a trace without agents is one run from its root anyway)
    workflows = [
        span_id
        for span_id, span in unique.items()
        if roles[span_id] == c.OTHER
        and span.attributes.get("gen_ai.operation.name") == "invoke_workflow"
    ]
    if not workflows:
        return
    children: dict[bytes, list[bytes]] = {}
    for span in unique.values():
        if span.parent_span_id is not None:
            children.setdefault(span.parent_span_id, []).append(span.span_id)
    for span_id in workflows:
        parent, depth = unique[span_id].parent_span_id, 0
        while parent in unique and parent not in agents and depth < MAX_DEPTH:
            parent, depth = unique[parent].parent_span_id, depth + 1
        if parent in agents:
            continue  # (inside an agent: part of its work, which has a run)
        stack, work = list(children.get(span_id, ())), False
        while stack and not work:
            below = stack.pop()
            if below in agents:
                continue
            work = roles[below] in (c.TOOL, c.RETRIEVER, c.MODEL)
            stack.extend(children.get(below, ()))
        if work:
            roles[span_id] = c.AGENT
            agents.add(span_id)


def model_wrappers(unique: dict[bytes, Span], roles: dict[bytes, str]) -> None:
    """A model span with another model span inside it wraps the call, and is not one
    itself: a framework's LLM span around the provider client's (OpenInference's
    LangChain and OpenAI instrumentors together), LlamaIndex's ``predict_and_call``
    around its ``chat``. Only the innermost is counted, or every call would be two."""
    for span in unique.values():
        if roles[span.span_id] != c.MODEL:
            continue
        parent, depth = span.parent_span_id, 0
        while parent in unique and roles[parent] not in (c.AGENT, c.TOOL) and depth < MAX_DEPTH:
            if roles[parent] == c.MODEL:
                roles[parent] = c.OTHER
            parent, depth = unique[parent].parent_span_id, depth + 1


def tool_wrappers(unique: dict[bytes, Span], roles: dict[bytes, str]) -> dict[bytes, Span]:
    """A tool span inside a tool span of the same tool is the same call, seen by two
    instrumentations (AutoGen's own ``execute_tool`` inside OpenInference's span, which
    has the arguments): one step, the outer. Returns outer span id -> the inner span,
    which is no step of its own."""
    wrapped: dict[bytes, Span] = {}
    for span in unique.values():
        if roles[span.span_id] != c.TOOL:
            continue
        parent, depth = span.parent_span_id, 0
        while parent in unique and roles[parent] not in (c.AGENT, c.TOOL) and depth < MAX_DEPTH:
            parent, depth = unique[parent].parent_span_id, depth + 1
        same_call = parent in unique and roles[parent] == c.TOOL
        if same_call and c.tool_name(unique[parent]) == c.tool_name(span):
            roles[span.span_id] = c.OTHER
            wrapped[parent] = span
    return wrapped
