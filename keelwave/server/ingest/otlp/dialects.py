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

- **Firebase Genkit** (JavaScript 1.x, Python 0.12; scope ``genkit-tracer``): only
  ``genkit:*`` attributes. An action's kind is its ``genkit:metadata:subtype``
  (``flow``, ``model``, ``tool``, ``tool.v2``…), its name ``genkit:name``, what it was
  given and returned ``genkit:input`` and ``genkit:output`` (JSON text); a model's
  tokens and finish reason are inside its output, its name is ``plugin/model``; a
  ``tool.v2`` wraps its result in ``{"output": …}``. Genkit for Python marks a failed
  action ``genkit:state`` ``error`` and may leave the span's status unset. A flow is the
  run (the ``generate`` spans between are plumbing);
- **VoltAgent** (``@voltagent/core``): an agent span (``entity.type`` ``agent``; a
  sub-agent's name in ``subagent.name``), tool spans (``span.type`` ``tool``) with the
  call's ``input`` and ``output``, and one ``llm:…`` span per generateText or streamText
  call however many model requests it made, with only the last one's usage. The agent
  span's ``usage.*`` are the run's totals: the trace's model use (as for a trace
  without model spans), and the ``llm:…`` span no model call;
- **Langfuse's SDKs** (``@langfuse/tracing`` 5, Python 3; scope ``langfuse-sdk``):
  ``langfuse.observation.type`` (``agent``, ``tool``, ``generation``…), named by the
  span, with ``langfuse.observation.input`` / ``.output``, ``….model.name`` and
  ``….usage_details`` (JSON; Langfuse's OpenAI wrapper takes the cached and reasoning
  tokens out of ``input`` and ``output``), and a failure as ``….level`` ``ERROR``.

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


GENKIT_SCOPE = "genkit-tracer"
_GENKIT_KINDS = {
    "flow": "AGENT", "model": "LLM", "background-model": "LLM", "tool": "TOOL",
    "tool.v2": "TOOL", "retriever": "RETRIEVER", "embedder": "EMBEDDING",
}  # fmt: skip
# Genkit's model plugins (the part of a model's name before the slash) whose provider
# is known; another plugin's model is left to its name (model_calls.provider_of).
_GENKIT_PROVIDERS = {
    "openai": "openai", "anthropic": "anthropic", "googleai": "gcp.gemini",
    "vertexai": "gcp.vertex_ai", "deepseek": "deepseek", "xai": "x_ai",
    "mistral": "mistral_ai", "groq": "groq",
}  # fmt: skip


def _genkit(span: Span) -> None:
    attributes = span.attributes
    if "openinference.span.kind" in attributes:
        return  # (rewritten already)
    if attributes.get("genkit:state") == "error" and span.status_code != 2:
        # (Genkit for Python: the failure in the action's output, the status unset)
        span.status_code = 2
        span.status_message = (
            _genkit_failure(attributes.get("genkit:output")) or span.status_message
        )
    if _GENKIT_MAX_TURNS in span.status_message or any(
        _GENKIT_MAX_TURNS in str(event.attributes.get("exception.message") or "")
        for event in span.events
    ):  # (its generate's maxTurns; the flow that raised it is the run)
        attributes.setdefault("gen_ai.response.finish_reasons", ["max_turns"])
    kind = _GENKIT_KINDS.get(str(attributes.get("genkit:metadata:subtype")))
    if kind is None:
        return  # (generate, a prompt, a custom action: plumbing between the others)
    attributes["openinference.span.kind"] = kind
    name = attributes.get("genkit:name")
    if kind == "AGENT" and isinstance(name, str):
        attributes.setdefault("gen_ai.agent.name", name)
    elif kind == "TOOL" and isinstance(name, str):
        attributes.setdefault("tool.name", name)
    elif kind == "LLM":
        _genkit_model(attributes, name)
        return  # (its input and output: the whole request and answer, kept as Genkit's)
    _move(attributes, "genkit:input", "input.value")
    output = attributes.pop("genkit:output", None)
    if output is not None:
        if attributes.get("genkit:metadata:subtype") == "tool.v2":
            said = _decoded(output)  # {"output": the tool's result}
            if isinstance(said, dict) and "output" in said and set(said) <= _TOOL_V2_KEYS:
                output = msgspec.json.encode(said["output"]).decode()
        attributes.setdefault("output.value", output)


# What Genkit's generate raises at its maxTurns (JavaScript and Python alike).
_GENKIT_MAX_TURNS = "Exceeded maximum tool call iterations"
_TOOL_V2_KEYS = frozenset(("output", "content", "metadata"))


def _genkit_failure(output: Any) -> str:
    """What an action's output says of its failure: ``{"error": {"status", "message",
    "details": {"reason"}}}`` as "ABORTED: Exceeded maximum tool call iterations (2)
    (MAX_TURNS_EXCEEDED)"."""
    said = _decoded(output)
    failure = said.get("error") if isinstance(said, dict) else None
    if not isinstance(failure, dict):
        return ""
    message = ": ".join(str(failure[key]) for key in ("status", "message") if failure.get(key))
    details = failure.get("details")
    reason = details.get("reason") if isinstance(details, dict) else None
    return f"{message} ({reason})" if reason else message


def _genkit_model(attributes: dict[str, Any], name: Any) -> None:
    if isinstance(name, str) and name:
        plugin, _, model = name.partition("/")
        attributes.setdefault("llm.model_name", model or plugin)
        if model and plugin in _GENKIT_PROVIDERS:
            attributes.setdefault("llm.provider", _GENKIT_PROVIDERS[plugin])
    answer = _decoded(attributes.get("genkit:output"))
    if not isinstance(answer, dict):
        return
    usage = answer.get("usage")
    if isinstance(usage, dict):
        for key, new in (
            ("inputTokens", "llm.token_count.prompt"),
            ("outputTokens", "llm.token_count.completion"),
            ("cachedContentTokens", "llm.token_count.prompt_details.cache_read"),
            ("thoughtsTokens", "llm.token_count.completion_details.reasoning"),
        ):
            if isinstance(usage.get(key), int | float):
                attributes.setdefault(new, int(usage[key]))
    if isinstance(answer.get("finishReason"), str):
        attributes.setdefault("llm.finish_reason", answer["finishReason"])


VOLTAGENT_SCOPE = "@voltagent/core"


def _voltagent(span: Span) -> None:
    attributes = span.attributes
    if "openinference.span.kind" in attributes:
        return  # (rewritten already)
    kind = attributes.get("span.type")
    if kind == "tool":
        attributes["openinference.span.kind"] = "TOOL"
        _move(attributes, "tool.call.id", "gen_ai.tool.call.id")
        # (its tool.parameters is the tool's schema: no names for positional arguments)
        _move(attributes, "tool.parameters", "voltagent.tool.parameters")
        _move(attributes, "input", "input.value")
        _move(attributes, "output", "output.value")
    elif kind is None and attributes.get("entity.type") == "agent":
        attributes["openinference.span.kind"] = "AGENT"
        # (a sub-agent's entity.name is its supervisor's)
        name = attributes.get("subagent.name") or attributes.get("entity.name")
        if isinstance(name, str) and name:
            attributes.setdefault("gen_ai.agent.name", name)
        _move(attributes, "input", "input.value")
        _move(attributes, "output", "output.value")
        # The run's model use, summed (its llm spans say only their last request's).
        for old, new in (
            ("ai.model.name", "llm.model_name"),
            ("usage.prompt_tokens", "llm.token_count.prompt"),
            ("usage.completion_tokens", "llm.token_count.completion"),
            ("usage.cached_tokens", "llm.token_count.prompt_details.cache_read"),
            ("usage.reasoning_tokens", "llm.token_count.completion_details.reasoning"),
            ("ai.response.finish_reason", "llm.finish_reason"),
        ):
            _move(attributes, old, new)
        if attributes.get("voltagent.stopped_by_max_steps") is True:
            attributes.setdefault("gen_ai.response.finish_reasons", ["max_steps"])


LANGFUSE_SCOPE = "langfuse-sdk"
_LANGFUSE_KINDS = {
    "agent": "AGENT", "tool": "TOOL", "generation": "LLM", "embedding": "EMBEDDING",
    "retriever": "RETRIEVER", "chain": "CHAIN",
}  # fmt: skip
_LANGFUSE = "langfuse.observation."


def _langfuse(span: Span) -> None:
    attributes = span.attributes
    if "openinference.span.kind" in attributes:
        return  # (rewritten already)
    if attributes.get(_LANGFUSE + "level") == "ERROR" and span.status_code != 2:
        span.status_code = 2
        span.status_message = str(attributes.get(_LANGFUSE + "status_message") or "")
    kind = _LANGFUSE_KINDS.get(str(attributes.get(_LANGFUSE + "type")))
    if kind is None:
        return  # (a plain span, an event, a guardrail…: plumbing)
    attributes["openinference.span.kind"] = kind
    if kind == "AGENT":
        attributes.setdefault("gen_ai.agent.name", span.name)
    elif kind == "TOOL":
        attributes.setdefault("tool.name", span.name)
    _move(attributes, _LANGFUSE + "input", "input.value")
    _move(attributes, _LANGFUSE + "output", "output.value")
    _move(attributes, _LANGFUSE + "model.name", "llm.model_name")
    usage = _decoded(attributes.pop(_LANGFUSE + "usage_details", None))
    if kind == "LLM" and isinstance(usage, dict):
        counts = {key: int(value) for key, value in usage.items() if isinstance(value, int | float)}
        # Langfuse's usage types add up to its total: the details taken out of input
        # and output (input_cached_tokens, output_reasoning_tokens…) go back in.
        for side, new in (
            ("input", "llm.token_count.prompt"),
            ("output", "llm.token_count.completion"),
        ):
            parts = [
                value for key, value in counts.items() if key == side or key.startswith(side + "_")
            ]
            if parts:
                attributes.setdefault(new, sum(parts))
        cached = counts.get("input_cached_tokens", counts.get("input_cache_read"))
        if cached is not None:
            attributes.setdefault("llm.token_count.prompt_details.cache_read", cached)
        reasoning = counts.get("output_reasoning_tokens")
        if reasoning is not None:
            attributes.setdefault("llm.token_count.completion_details.reasoning", reasoning)


_BY_SCOPE = {
    GENKIT_SCOPE: _genkit,
    VOLTAGENT_SCOPE: _voltagent,
    LANGFUSE_SCOPE: _langfuse,
    BEEAI_TS_SCOPE: _beeai_ts,
    MLFLOW_SCOPE: _mlflow,
    LOGFIRE_AGENTS_SCOPE: _logfire_agents,
    LANGSMITH_SCOPE: _langsmith,
    PYDANTIC_AI_SCOPE: _pydantic_ai,
    OPENLLMETRY_LLAMAINDEX_SCOPE: _openllmetry_llamaindex,
}
