"""Instrumentations with attribute names of their own, rewritten into the ones
conventions.py reads.

Most instrumentations speak one of three families (GenAI, OpenInference,
OpenLLMetry). A few widely used ones have their own words for the same things:

- **MLflow Tracing** (its OTLP export): ``mlflow.spanType`` (AGENT, TOOL,
  CHAT_MODEL…), ``mlflow.spanInputs`` / ``mlflow.spanOutputs``,
  ``mlflow.chat.tokenUsage``, every value JSON-encoded (a string arrives with its
  quotes);
- **Logfire's OpenAI Agents integration** (``logfire.instrument_openai_agents()``):
  spans told apart by their message template (``Agent run: {name!r}``,
  ``Function: {name}``…), the agent's or tool's ``name``, the call's ``input`` and
  ``output``, and a failure as an ``error`` attribute (the span's status says only
  ERROR);
- **LangSmith's OpenTelemetry mode** (``LANGSMITH_OTEL_ENABLED``, what Logfire
  and others use for LangChain): LangChain's metadata flattened into
  ``langsmith.metadata.<key>``, a tool's arguments and result in ``gen_ai.prompt``
  and ``gen_ai.completion``, an exception's type and traceback inside its message
  (``RuntimeError('…')Traceback (most recent call last): …``);
- **pydantic-ai's data format version 2** (``InstrumentationSettings(version=2)``,
  deprecated but accepted): a tool span ``running tool`` with the call's arguments and
  result in ``tool_arguments`` and ``tool_response`` (version 3 on write
  ``gen_ai.tool.call.arguments`` and ``gen_ai.tool.call.result``);
- **OpenLLMetry's LlamaIndex instrumentation**: ``gen_ai.provider.name`` is the LLM
  class's LlamaIndex ``class_name()`` lowercased (``openai_llm``, ``custom_llm``, and
  ``base_component`` for a class that does not name itself), unless it is one of the
  few class names the instrumentation maps to a provider. Such a name is kept as
  ``llamaindex.llm.class_name``; the provider is then the model's family.

- **OpenInference's BeeAI instrumentation for TypeScript** (beeai-framework 0.1.9 to
  0.1.13): a span for every event a tool, model or agent emits (``target``
  ``tool.dynamic.search.start``, ``….success``, ``….finish``…), each of its emitter's
  kind. The ``success`` or ``error`` event of a tool or model is the call (the tool's
  arguments in ``tool.parameters``, its name only in the target); every other event
  span, and an agent's, is plumbing.

One form belongs to no scope: the GenAI conventions' older event form of an
inference's details, a ``gen_ai.client.inference.operation.details`` event carrying
what the span's own attributes would (``gen_ai.input.messages``,
``gen_ai.output.messages``…; Strands sends it with its latest conventions). Its
attributes become the span's, where the span has none of that name.

:func:`rewrite` moves their attributes to the names the other conventions use, once,
as spans are decoded (decode.py): what is stored, and mapped again as more of a
trace arrives, is already in the common words, so nothing downstream knows about
dialects. It is idempotent: a rewritten span has nothing left to rewrite. Spans of
other scopes are not looked at, but for that event.
"""

from __future__ import annotations

import dataclasses
import re
from typing import TYPE_CHECKING, Any

import msgspec

if TYPE_CHECKING:  # (decode.py calls this module)
    from keelwave.server.ingest.otlp.decode import Event, Span

MLFLOW_SCOPE = "mlflow.tracing.provider"
LOGFIRE_AGENTS_SCOPE = "logfire.openai_agents"
LANGSMITH_SCOPE = "langsmith"
PYDANTIC_AI_SCOPE = "pydantic-ai"
OPENLLMETRY_LLAMAINDEX_SCOPE = "opentelemetry.instrumentation.llamaindex"
# What OpenLLMetry's LlamaIndex instrumentation maps LlamaIndex LLM classes to (its
# _PROVIDER_MAP): providers. Anything else it writes is a class name.
_LLAMAINDEX_PROVIDERS = frozenset((
    "openai", "azure.ai.openai", "anthropic", "cohere", "groq", "mistral_ai", "aws.bedrock",
    "gcp.gemini", "gcp.vertex_ai", "deepseek", "perplexity",
))  # fmt: skip

# MLflow's span types as OpenInference's kinds; the rest (CHAIN, PARSER, RERANKER,
# UNKNOWN…) are chains: they only link their children to a run.
_MLFLOW_KINDS = {
    "AGENT": "AGENT", "TOOL": "TOOL", "CHAT_MODEL": "LLM", "LLM": "LLM",
    "RETRIEVER": "RETRIEVER", "EMBEDDING": "EMBEDDING",
}  # fmt: skip
# MLflow's root span of an OpenAI Agents SDK run (``AgentRunner.run``): it wraps the
# SDK's own agent spans, which are the runs.
_MLFLOW_AGENTS_RUNNER = "mlflow.openai.agent_run_root"
_MLFLOW_AGENTS_RUNNER_NAME = "AgentRunner.run"
_LANGSMITH_METADATA = "langsmith.metadata."
OPERATION_DETAILS = "gen_ai.client.inference.operation.details"


def rewrite(spans: list[Span]) -> list[Span]:
    """``spans`` with every dialect's attributes renamed (in place; see the module)."""
    for span in spans:
        rewriter = _BY_SCOPE.get(span.scope)
        if rewriter is not None:
            rewriter(span)
        if span.events:
            _operation_details(span)
    return spans


def _operation_details(span: Span) -> None:
    """The ``gen_ai.*`` attributes of the span's operation-details events as its own:
    the span's own win, then the first event's (Strands sends the prompt and the answer
    as two events). The events go: what they said is the span's now."""
    if not any(event.name == OPERATION_DETAILS for event in span.events):
        return
    for event in span.events:
        if event.name == OPERATION_DETAILS:
            for key, value in event.attributes.items():
                if key.startswith("gen_ai."):
                    span.attributes.setdefault(key, value)
    span.events = [event for event in span.events if event.name != OPERATION_DETAILS]


def _decoded(value: Any) -> Any:
    """An MLflow attribute's value: JSON text, decoded; the text itself if it is not."""
    if not isinstance(value, str):
        return value
    try:
        return msgspec.json.decode(value.encode())
    except (msgspec.DecodeError, UnicodeEncodeError):
        return value


def _move(attributes: dict[str, Any], old: str, new: str) -> None:
    """Rename ``old`` to ``new``, unless the span has a ``new`` of its own already."""
    if old in attributes:
        value = attributes.pop(old)
        attributes.setdefault(new, value)


def _mlflow(span: Span) -> None:
    attributes = span.attributes
    if "mlflow.spanType" not in attributes:
        # Its GenAI-conventions mode (MLFLOW_ENABLE_OTEL_GENAI_SEMCONV): the same runner
        # span, as an agent named for the method.
        if attributes.get("gen_ai.agent.name") == _MLFLOW_AGENTS_RUNNER_NAME:
            del attributes["gen_ai.agent.name"]
            attributes["gen_ai.operation.name"] = "CHAIN"
        return
    kind = _decoded(attributes.pop("mlflow.spanType"))
    if attributes.pop(_MLFLOW_AGENTS_RUNNER, None) is not None:
        kind = "CHAIN"
    attributes.setdefault("openinference.span.kind", _MLFLOW_KINDS.get(str(kind), "CHAIN"))
    if span.name == "Handoff":  # the OpenAI Agents SDK's handoff: who it went to
        target = _decoded(attributes.get("mlflow.spanOutputs"))
        if isinstance(target, dict) and isinstance(target.get("to_agent"), str):
            attributes.setdefault("gen_ai.handoff.to_agent", target["to_agent"])
    # (JSON text of the value: the arguments object, a tool's result, a prompt.)
    _move(attributes, "mlflow.spanInputs", "input.value")
    _move(attributes, "mlflow.spanOutputs", "output.value")
    for old, new in (
        ("mlflow.llm.model", "llm.model_name"),
        ("mlflow.llm.provider", "llm.provider"),
    ):
        if old in attributes:
            value = _decoded(attributes.pop(old))
            if isinstance(value, str) and value:
                attributes.setdefault(new, value)
    usage = _decoded(attributes.pop("mlflow.chat.tokenUsage", None))
    if isinstance(usage, dict):
        for key, name in (
            ("input_tokens", "llm.token_count.prompt"),
            ("output_tokens", "llm.token_count.completion"),
            ("cache_read_input_tokens", "llm.token_count.prompt_details.cache_read"),
        ):
            if isinstance(usage.get(key), int):
                attributes.setdefault(name, usage[key])


# Logfire's message templates for the OpenAI Agents SDK's span types, as GenAI operations.
_LOGFIRE_OPERATIONS = {
    "Agent run: {name!r}": "invoke_agent",
    "Function: {name}": "execute_tool",
    "Chat completion with {gen_ai.request.model!r}": "chat",
    "Responses API": "chat",
    "Responses API with {gen_ai.request.model!r}": "chat",
}


def _logfire_agents(span: Span) -> None:
    attributes = span.attributes
    template = attributes.get("logfire.msg_template")
    operation = _LOGFIRE_OPERATIONS.get(template) if isinstance(template, str) else None
    if operation is not None:
        attributes.setdefault("gen_ai.operation.name", operation)
    if operation == "invoke_agent":
        _move(attributes, "name", "gen_ai.agent.name")
    elif operation == "execute_tool":
        _move(attributes, "name", "gen_ai.tool.name")
        _move(attributes, "input", "gen_ai.tool.call.arguments")
        _move(attributes, "output", "gen_ai.tool.call.result")
    elif template == "Handoff: {from_agent} → {to_agent}":
        _move(attributes, "to_agent", "gen_ai.handoff.to_agent")
        _move(attributes, "from_agent", "gen_ai.handoff.from_agent")
    # A failure: the span's status is ERROR without a message; what went wrong is in
    # an ``error`` attribute, {"message": "Max turns exceeded", "data": {...}}.
    if span.status_code == 2 and not span.status_message and "error" in attributes:
        said = _decoded(attributes["error"])
        if isinstance(said, dict) and isinstance(said.get("message"), str):
            data = said.get("data")
            detail = data.get("error") if isinstance(data, dict) else None
            message = said["message"]
            span.status_message = f"{message}: {detail}" if isinstance(detail, str) else message


def _langsmith(span: Span) -> None:
    attributes = span.attributes
    if "langsmith.span.kind" not in attributes:
        return
    metadata = {
        key[len(_LANGSMITH_METADATA) :]: attributes.pop(key)
        for key in [key for key in attributes if key.startswith(_LANGSMITH_METADATA)]
    }
    if metadata:  # (LangChain's metadata, as other instrumentations keep it)
        attributes.setdefault("metadata", metadata)
    if attributes["langsmith.span.kind"] == "tool":
        _move(attributes, "gen_ai.prompt", "gen_ai.tool.call.arguments")
        _move(attributes, "gen_ai.completion", "gen_ai.tool.call.result")
    if span.events:
        span.events = [_langsmith_exception(event) for event in span.events]


# LangChain's record of an error, which LangSmith sends as an exception's message under
# the type "Exception": the exception's repr, then its traceback.
_TRACEBACK = "Traceback (most recent call last):"
_REPR = re.compile(r"([A-Za-z_][\w.]*)\((['\"])(.*)\2\)", re.DOTALL)


def _langsmith_exception(event: Event) -> Event:
    message = event.attributes.get("exception.message")
    if event.name != "exception" or not isinstance(message, str) or _TRACEBACK not in message:
        return event
    said, _, trace = message.partition(_TRACEBACK)
    attributes = dict(event.attributes)
    attributes["exception.message"] = said.strip()
    if (shown := _REPR.fullmatch(said.strip())) is not None:
        attributes["exception.type"], attributes["exception.message"] = shown[1], shown[3]
    attributes.setdefault("exception.stacktrace", _TRACEBACK + trace)
    return dataclasses.replace(event, attributes=attributes)


def _pydantic_ai(span: Span) -> None:
    attributes = span.attributes
    if attributes.get("gen_ai.operation.name") == "execute_tool":  # (version 2's words)
        _move(attributes, "tool_arguments", "gen_ai.tool.call.arguments")
        _move(attributes, "tool_response", "gen_ai.tool.call.result")


def _openllmetry_llamaindex(span: Span) -> None:
    attributes = span.attributes
    provider = attributes.get("gen_ai.provider.name")
    if isinstance(provider, str) and provider not in _LLAMAINDEX_PROVIDERS:
        _move(attributes, "gen_ai.provider.name", "llamaindex.llm.class_name")


BEEAI_TS_SCOPE = "@arizeai/openinference-instrumentation-beeai"
_BEEAI_CALLS = frozenset(("TOOL", "LLM"))
_BEEAI_OUTCOMES = frozenset(("success", "error"))


def _beeai_ts(span: Span) -> None:
    attributes = span.attributes
    target = attributes.get("target")
    kind = attributes.get("openinference.span.kind")
    if not isinstance(target, str) or kind is None:
        return  # (the agent's own span, or one rewritten already)
    *path, event = target.split(".")
    if kind in _BEEAI_CALLS and event in _BEEAI_OUTCOMES and path:
        if kind == "TOOL":
            attributes.setdefault("tool.name", path[-1])  # tool.dynamic.<name>
            _move(attributes, "tool.parameters", "input.value")
        return
    attributes["beeai.event.kind"] = attributes.pop("openinference.span.kind")


_BY_SCOPE = {
    BEEAI_TS_SCOPE: _beeai_ts,
    MLFLOW_SCOPE: _mlflow,
    LOGFIRE_AGENTS_SCOPE: _logfire_agents,
    LANGSMITH_SCOPE: _langsmith,
    PYDANTIC_AI_SCOPE: _pydantic_ai,
    OPENLLMETRY_LLAMAINDEX_SCOPE: _openllmetry_llamaindex,
}
