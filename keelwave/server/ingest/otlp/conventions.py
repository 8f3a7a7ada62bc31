"""What a span says, in any of the conventions agent frameworks use.

Three families of attributes describe agent work: OpenTelemetry's GenAI
conventions (``gen_ai.*``: pydantic-ai, Strands, OpenLLMetry's newer
instrumentations), OpenInference (``openinference.span.kind``, ``tool.name``,
``input.value``, ``llm.*``: Arize's instrumentations) and OpenLLMetry's own
(``traceloop.*``). Each reader here tries them in that order and returns one
answer (model_calls.py reads an inference span's model call); mapping.py decides
what the answers make of a trace. The fixtures in
tests/otlp_fixtures show what each framework really sends; docs/otlp.md has
the table.
"""

from __future__ import annotations

import ast
import json
import re
from typing import Any

import msgspec

from keelwave.sdk import canonical_json
from keelwave.server.ingest.otlp.decode import Event, Span

AGENT, TOOL, RETRIEVER, MODEL, OTHER = "agent", "tool", "retriever", "model", "other"
MODEL_OPERATIONS = ("chat", "text_completion", "generate_content", "embeddings")
# Spans that wrap a framework's run of agents without being one (the OpenAI Agents SDK).
WORKFLOW_NAMES = ("Agent workflow", "Agent Workflow")
# Agents that OpenInference's instrumentors draw as chains, by span name: DSPy's ReAct
# and CodeAct modules, Haystack's Agent component.
CHAIN_AGENTS = frozenset((
    "ReAct.forward", "ReAct.aforward", "CodeAct.forward", "CodeAct.aforward",
    "Agent.run", "Agent.run_async",
))  # fmt: skip
# The Vercel AI SDK's own spans (``ai`` 3–6, its experimental_telemetry), by their
# ai.operationId: a generateText or streamText call is a run (its tool loop), each
# request to the model in it a model call, each tool it runs a step. (``ai`` 7 sends
# GenAI spans instead.)
AI_SDK_RUNS = frozenset(
    ("ai.generateText", "ai.streamText", "ai.generateObject", "ai.streamObject")
)
AI_SDK_MODEL_CALLS = frozenset((
    "ai.generateText.doGenerate", "ai.streamText.doStream", "ai.generateObject.doGenerate",
    "ai.streamObject.doStream", "ai.embed.doEmbed", "ai.embedMany.doEmbed",
))  # fmt: skip
AI_SDK_TOOL = "ai.toolCall"
# OpenLIT's LangGraph instrumentation: an ``invoke_agent`` span for each run of a graph's
# node (LangChain's spans, under its LangChain scope, show the same work).
OPENLIT = "openlit.instrumentation."
OPENLIT_LANGGRAPH = "openlit.instrumentation.langgraph"
OPENLIT_LANGCHAIN = "openlit.instrumentation.langchain"
OPENLIT_GOOGLE_ADK = "openlit.instrumentation.google_adk"
OPENLIT_PYDANTIC_AI = "openlit.instrumentation.pydantic_ai"
OPENLIT_SMOLAGENTS = "openlit.instrumentation.smolagents"
# The OpenAI client's POST /responses/input_tokens (CrewAI asks before every model call),
# which OpenInference's OpenAI instrumentor draws as an LLM span named for its answer.
TOKEN_COUNT_REQUEST = "InputTokenCountResponse"
# LiteLLM's own OpenTelemetry callback, with USE_OTEL_LITELLM_REQUEST_SPAN: a span a call.
LITELLM, LITELLM_REQUEST = "litellm", "litellm_request"
# Mastra's OpenTelemetry exporter (@mastra/otel-exporter): GenAI spans of its own.
MASTRA = "@mastra/otel-exporter"
# OpenLLMetry's MCP client instrumentation: a tool call's input is {"tool_name", "arguments"}.
OPENLLMETRY_MCP = "opentelemetry.instrumentation.mcp"
# LangChain's metadata naming a graph: LangGraph's own, and LangChain 1's create_agent.
GRAPHS = ("langgraph", "langchain_create_agent")
# What LangChain's call-limit middleware answers for the model when it ends a run
# (ModelCallLimitMiddleware, ToolCallLimitMiddleware with exit_behavior="end").
# And Microsoft Agent Framework's, at its function_invocation_configuration's
# max_iterations or max_function_calls (agent_framework/_tools.py), the agent span OK.
LIMIT_ANSWERS = (
    b"Model call limits exceeded: ",
    b" call limit reached: ",
    b"Function invocation limit reached before a final answer could be produced.",
)
# What CrewAI tells the model when an agent reaches its max_iter: answer, no more tools.
FORCED_FINAL_ANSWER = b"MUST give your absolute best final answer"
# A run's own output saying a step limit stopped it (Haystack's Agent: exit_reason), or
# its own finish reason (smolagents under OpenTelemetry's instrumentation: max_steps).
LIMIT_EXITS = ("max_agent_steps", "max_steps", "max_iterations", "max_turns")
# LlamaIndex (OpenInference) gives every method of an LLM class a span of kind LLM, this
# one too, though it only prepares the arguments of the chat call that follows it.
LLAMAINDEX_REQUEST_BUILDER = "._prepare_chat_with_tools"
# What a run stopped by a step limit says (exception types and messages, lowercased).
STEP_LIMITS = (
    "maxturnsexceeded", "max turns", "max_turns", "graphrecursionerror", "recursion limit",
    "maxstepserror", "max steps", "max_steps",
    # pydantic-ai's UsageLimitExceeded at its request_limit or tool_calls_limit ("The next
    # request would exceed the request_limit of 2", older "Exceeded the request_limit of
    # 2"). Its token and cost budgets raise the same exception ("Exceeded the
    # total_tokens_limit of…", "…the `cost_limit` of…"): a budget, no step limit, and no
    # model's context either: those runs end in error.
    "exceed the request_limit of", "exceed the tool_calls_limit of",
    "not able to resolve the task in",  # BeeAI's AgentError at its max_iterations
    "maximum number of turns",  # the Claude Agent SDK's ResultError at its max_turns
    "llmcallslimitexceedederror",  # Google ADK's RunConfig(max_llm_calls=N)
    "max iterations of",  # LlamaIndex's WorkflowRuntimeError: "Max iterations of 3 reached!"
)  # fmt: skip
# What a run stopped by its model's token limit says (exception types and messages,
# lowercased): Strands' MaxTokensReachedException (its last answer was cut off; its
# TypeScript SDK's MaxTokensError, "Model reached maximum token limit"), OpenAI's
# context_length_exceeded (the prompt no longer fits), and the Responses API's incomplete
# answer, which the OpenAI Agents SDK raises on ("incomplete_details=IncompleteDetails(
# reason='max_output_tokens')"). openai 3.x puts only the error's message in its
# exception ("This model's maximum context length is 128000 tokens…": Agent Framework,
# Semantic Kernel), Anthropic's says "prompt is too long".
CONTEXT_LIMITS = (
    "maxtokensreachedexception", "context_length_exceeded", "max_output_tokens",
    "maximum context length", "prompt is too long", "maxtokenserror",
)  # fmt: skip
# Google ADK's span after a turn's parallel tool calls, ``execute_tool (merged)``: its
# record of the calls it merged into one answer (each has a span of its own), no call.
ADK_MERGED_TOOLS = "(merged tools)"
ADK = "gcp.vertex.agent"  # Google ADK's instrumentation scope
ADK_CALL_LLM = "call_llm"


def _metadata(span: Span) -> dict[str, Any]:
    """LangChain's ``metadata`` attribute, a JSON object in a string."""
    raw = span.attributes.get("metadata")
    if isinstance(raw, str) and raw.startswith("{"):
        try:
            parsed = json.loads(raw)
        except ValueError:
            return {}
        return parsed if isinstance(parsed, dict) else {}
    return raw if isinstance(raw, dict) else {}


def role(span: Span) -> str:
    """agent, tool, retriever, model or other. (``create_agent`` spans define an agent
    without running it: other.)"""
    attributes = span.attributes
    operation = attributes.get("gen_ai.operation.name")
    openinference = str(attributes.get("openinference.span.kind") or "").upper()
    if operation is None and "ai.operationId" in attributes:
        ai_sdk = attributes["ai.operationId"]
        if ai_sdk in AI_SDK_RUNS:
            return AGENT
        if ai_sdk == AI_SDK_TOOL:
            return TOOL
        return MODEL if ai_sdk in AI_SDK_MODEL_CALLS else OTHER
    if "metadata.path" in attributes and "metadata.class_name" not in attributes:
        # BeeAI's event spans ("final_answer", "error"…) inherit the kind of the agent
        # or tool that emitted them; only that agent's or tool's own span names a class.
        return OTHER
    traceloop = str(attributes.get("traceloop.span.kind") or "").lower()
    metadata = _metadata(span) if "metadata" in attributes else {}
    if openinference == "CHAIN" and span.name in CHAIN_AGENTS:
        return AGENT
    if traceloop == "workflow" and "agno.team.name" in attributes:
        return AGENT  # an Agno team (OpenLLMetry): the run its members' runs hang off
    if openinference == "AGENT" and "ag2.sender.name" in attributes:
        return OTHER  # one agent's reply in an AG2 chat; the chat (initiate_chat) is the run
    if span.scope.startswith(OPENLIT):
        openlit = _openlit_role(span, operation)
        if openlit is not None:
            return openlit
    if openinference == "LLM" and span.name == TOKEN_COUNT_REQUEST:
        return OTHER  # the OpenAI client counting a prompt's tokens: no model call
    if span.name == LITELLM_REQUEST and span.scope == LITELLM:
        return MODEL  # (its gen_ai.operation.name is left out with message capture off)
    if operation == "invoke_agent" or openinference == "AGENT" or traceloop == "agent":
        # LangGraph marks each run of its node named "agent" as an AGENT too; the
        # agent is the graph, whose span has no langgraph_step.
        return OTHER if "langgraph_step" in metadata else AGENT
    if metadata.get("ls_integration") in GRAPHS and "langgraph_step" not in metadata:
        return AGENT  # a LangGraph graph (OpenInference calls it AGENT only by its name)
    if attributes.get("gen_ai.tool.name") == ADK_MERGED_TOOLS:
        return OTHER  # (its schema 1 gives it the input "N/A": every one would look alike)
    if operation == "execute_tool" or openinference == "TOOL" or traceloop == "tool":
        return TOOL
    if traceloop == "task" and "tool.name" in attributes:
        return TOOL  # OpenLLMetry's LlamaIndex: the agent's call_tool step, a task
    if openinference == "RETRIEVER" or traceloop == "retriever":
        return RETRIEVER
    if openinference == "LLM" and span.name.endswith(LLAMAINDEX_REQUEST_BUILDER):
        return OTHER  # builds the request; the call is the chat span next to it
    if operation in MODEL_OPERATIONS or openinference in ("LLM", "EMBEDDING"):
        return MODEL
    if span.name == ADK_CALL_LLM and span.scope == ADK and "gen_ai.request.model" in attributes:
        # Google ADK's turn: a model call of its own in ADK for TypeScript, which sends no
        # span inside it for the call; in ADK for Python, one around its generate_content
        # span (structure.model_wrappers: only the inner one counts).
        return MODEL
    if traceloop == "llm" or span.name.endswith(".chat"):
        return MODEL
    return OTHER


def _openlit_role(span: Span, operation: Any) -> str | None:
    """What OpenLIT's spans are where its words mislead (None: the conventions say)."""
    attributes = span.attributes
    if operation == "invoke_agent" and (
        span.scope == OPENLIT_LANGGRAPH  # one run of a graph's node (LangChain's spans too)
        or "gen_ai.smolagents.step_number" in attributes  # one step of a smolagents agent
        or (span.scope == OPENLIT_GOOGLE_ADK and "gen_ai.execution.mode" in attributes)
    ):  # (the last: ADK's Runner, named for the app, around the agent's own spans)
        return OTHER
    if span.scope == OPENLIT_PYDANTIC_AI:
        if operation == "execute_task" and attributes.get("gen_ai.agent.name"):
            return AGENT  # an agent's run
        if operation == "execute_tool":
            return OTHER  # one a turn, named for the model: the calls are its requests
    if operation == "invoke_workflow" and "gen_ai.agno.team.agents" in attributes:
        return AGENT  # an Agno team: its members' runs are its children
    if operation == "chat" and attributes.get("gen_ai.provider.name") == "ag2":
        return OTHER  # an AG2 agent's reply, with guessed tokens: the model spans are inside
    if (
        span.scope == OPENLIT_SMOLAGENTS
        and operation is None
        and span.status_code == 2
        and span.name.startswith("execute_tool ")
    ):  # (storage keeps a failed span's status and name: it stays a tool there too)
        return TOOL  # a smolagents tool that raised: only its name and error are left
    return None


def first_of(attributes: dict[str, Any], *names: str) -> Any:
    """The first of these attributes the span has, not empty; None if none."""
    for name in names:
        value = attributes.get(name)
        if value not in (None, ""):
            return value
    return None


# Attributes that name an agent. (An AG2 chat is named for the agent it was started
# with, not by whom: "user".)
AGENT_NAMES = (
    "ag2.recipient.name", "gen_ai.agent.name", "agent.name", "agent_name",
    "ai.telemetry.functionId", "agno.team.name",
)  # fmt: skip


def unnamed_invocation(span: Span) -> bool:
    """A GenAI ``invoke_agent`` span with no attribute naming an agent: inside another
    agent, a part of its work, not an agent of its own (OpenLIT draws the OpenAI
    Agents SDK's turns so, and each step of CrewAI's agent executor)."""
    attributes = span.attributes
    return (
        attributes.get("gen_ai.operation.name") == "invoke_agent"
        and first_of(attributes, *AGENT_NAMES, "traceloop.entity.name") is None
    )


def run_name(span: Span) -> str | None:
    """The name of a run made from a trace's root that is no agent: its workflow's
    name (OpenLIT's ``gen_ai.workflow.name``), else its agent name, if it says."""
    name = first_of(span.attributes, "gen_ai.workflow.name", *AGENT_NAMES)
    return str(name) if name is not None else None


def agent_name(span: Span) -> str | None:
    """The agent's own name, when the span gives one (a workflow span may not)."""
    name = first_of(span.attributes, *AGENT_NAMES)
    if name is None and str(span.attributes.get("traceloop.span.kind")) == "agent":
        name = first_of(span.attributes, "traceloop.entity.name")
    if name is None and span.name.startswith("invoke_agent "):
        name = span.name.removeprefix("invoke_agent ")
    if name is None:
        name = first_of(span.attributes, "gen_ai.workflow.name")  # (OpenLIT's Agno team)
    if name is None and span.name in CHAIN_AGENTS:
        name = span.name.partition(".")[0]  # the module's or component's class: "ReAct"
    if name is None and span.name not in WORKFLOW_NAMES:
        kind = span.attributes.get("openinference.span.kind")
        if kind == "AGENT" or "ls_integration" in _metadata(span):
            # OpenInference names an agent's node in the graph it draws (AutoGen's
            # span name is the method, "weather_agent.on_messages_stream"), which its
            # handoffs' graph.node.parent_id refer to.
            node = span.attributes.get("graph.node.id") if kind == "AGENT" else None
            name = node if isinstance(node, str) and node else span.name.removesuffix(".run")
    return str(name) if name is not None else None


def handed_off_by(span: Span) -> str | None:
    """The agent that handed off to this one (OpenInference's OpenAI Agents
    ``graph.node.parent_id``, on the agent span a handoff starts), if any."""
    name = span.attributes.get("graph.node.parent_id")
    return str(name) if name not in (None, "") else None


def graph_namespace(span: Span) -> str | None:
    """LangGraph's ``langgraph_checkpoint_ns`` of the span: ``node:id``, and
    ``outer|inner`` for the nodes of a graph that runs inside another's node."""
    if "metadata" not in span.attributes:
        return None
    namespace = _metadata(span).get("langgraph_checkpoint_ns")
    return namespace if isinstance(namespace, str) and namespace else None


# What a tool span's name adds to the tool's: its method (DSPy's ``search.__call__``).
_TOOL_METHODS = (".tool", ".__call__", ".acall")


def tool_name(span: Span) -> str:
    name = first_of(
        span.attributes,
        "gen_ai.tool.name", "tool.name", "traceloop.entity.name", "ai.toolCall.name",
    )  # fmt: skip
    if name is None:
        name = span.name.removeprefix("execute_tool ")
        for method in _TOOL_METHODS:
            name = name.removesuffix(method)
    return str(name)


# A Python object's default repr, ``<workflows.context.context.Context object at 0x7f…>``:
# what an instrumentation writes for an object the framework passed to a tool itself.
_OBJECT_REPR = re.compile(r"<[A-Za-z_][\w.]* object at 0x[0-9a-fA-F]+>")


def _sent(kwargs: Any) -> Any:
    """Keyword arguments without those the framework injected (LlamaIndex hands its
    handoff tool the workflow's ``ctx``): an object's repr is no argument the model
    sent, and its address differs on every call."""
    if not isinstance(kwargs, dict):
        return kwargs
    return {
        key: value
        for key, value in kwargs.items()
        if not (isinstance(value, str) and _OBJECT_REPR.fullmatch(value))
    }


def _envelope(value: Any, parameters: Any = None) -> Any:
    """The call's own arguments out of an instrumentation's wrapping, or None if none;
    ``parameters``: the tool span's ``tool.parameters``, if it has them (positional
    arguments are named by them: :func:`parameter_names`)."""
    if isinstance(value, dict):
        if "inputs" in value and ("input_str" in value or "kwargs" in value):
            return value["inputs"]  # OpenLLMetry's LangChain callback envelope
        if set(value) == {"kwargs"} and isinstance(value["kwargs"], dict):
            return _sent(value["kwargs"])  # LlamaIndex's tool call (OpenInference)
        if "kwargs" in value and "args" in value and set(value) <= {
            "args", "kwargs", "sanitize_inputs_outputs"
        }:  # fmt: skip
            named = _named(value["args"], value["kwargs"], parameters)
            return _sent(named) if named is not None else {
                "args": value["args"], "kwargs": _sent(value["kwargs"])
            }  # fmt: skip
        if set(value) == {"input", "options"} and isinstance(value["input"], dict):
            return value["input"]  # BeeAI's tool call (OpenInference)
    return None


def _named(args: Any, kwargs: Any, parameters: Any) -> dict | None:
    """smolagents' positional ``args`` and ``kwargs`` as one dict of keyword arguments:
    the args named by the tool's ``parameters`` (read only here, where there are any
    positional ones: :func:`parameter_names`), so that
    ``f("Paris", "C")``, ``f("Paris", unit="C")`` and ``f(city="Paris", unit="C")`` are
    the same call; None when they cannot be named (more args than names, a name given
    twice, no names)."""
    if not isinstance(args, list) or not isinstance(kwargs, dict):
        return None
    if not args:
        return kwargs
    names = parameter_names(parameters)
    if names is None or len(args) > len(names):
        return None
    named = dict(zip(names, args, strict=False))
    if any(key in named for key in kwargs):
        return None
    return {**named, **kwargs}


def parameter_names(raw: Any) -> list[str] | None:
    """The tool's parameter names in signature order, from OpenInference's
    ``tool.parameters`` (smolagents: ``{"city": {"type": …}, …}``; or a JSON schema's
    ``properties``), or None."""
    value = _parsed(raw) if isinstance(raw, str) else raw
    if not isinstance(value, dict):
        return None
    properties = value.get("properties")
    if value.get("type") == "object" and isinstance(properties, dict):
        value = properties
    names = [str(key) for key in value]
    return names or None


def tool_call_id(span: Span) -> str | None:
    """The id of the model's request a tool span ran (``gen_ai.tool.call.id``)."""
    value = first_of(span.attributes, "gen_ai.tool.call.id", "tool_call.id", "ai.toolCall.id")
    return str(value) if value is not None else None


def tool_input(span: Span) -> bytes | None:
    """The tool call's arguments as JSON bytes, for the fingerprint.

    A JSON string is kept exactly as the framework sent it (the fingerprint of
    record covers the bytes, as for native steps); a structured value, or
    arguments unwrapped from an instrumentation's envelope, become canonical
    JSON (sorted keys, the Python SDK's form), so that the same call gives the
    same bytes every time. A plain string that is not JSON (LangChain sends a
    lone string argument bare) becomes a JSON string.
    """
    attributes = span.attributes
    raw = first_of(
        attributes,
        "gen_ai.tool.call.arguments", "tool_call.function.arguments", "input.value",
        "traceloop.entity.input", "tool.arguments", "ai.toolCall.args",
    )  # fmt: skip
    if raw is None:
        raw = _event_attribute(span, "gen_ai.tool.message", "content", "arguments")
    if raw is None:
        raw = _adk_legacy(attributes, ADK_ARGUMENTS)
    if span.scope.startswith(OPENLLMETRY_MCP):
        raw = _mcp_arguments(raw)
    # (OpenLIT's LangChain tool spans write the arguments as a Python dict's repr)
    return arguments_json(
        raw,
        python_dicts=span.scope == OPENLIT_LANGCHAIN,
        parameters=attributes.get("tool.parameters"),
    )


PYTHON_LITERAL_MAX = 65_536  # characters: longer ones stay text


def _python_dict(text: str) -> dict | None:
    """``text`` read as a Python dict literal (``{'city': 'Paris'}``) where it is one:
    a literal only, no code runs."""
    if not text.startswith("{") or len(text) > PYTHON_LITERAL_MAX:
        return None
    try:
        value = ast.literal_eval(text)
    except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
        return None
    return value if isinstance(value, dict) else None


def _mcp_arguments(raw: Any) -> Any:
    """The call's own arguments out of an MCP client span's ``{"tool_name", "arguments"}``
    (only there: a tool of one's own may well take exactly those two parameters)."""
    parsed = _parsed(raw) if isinstance(raw, str) else raw
    if isinstance(parsed, dict) and set(parsed) == {"tool_name", "arguments"}:
        return parsed["arguments"]
    return raw


def arguments_json(raw: Any, python_dicts: bool = False, parameters: Any = None) -> bytes | None:
    """A tool call's arguments, however sent, as the bytes keelwave fingerprints
    (tool_input's rules); with ``python_dicts``, text that is no JSON but a Python
    dict's repr as that dict; ``parameters`` (the span's ``tool.parameters``) name
    positional arguments (_envelope)."""
    if raw is None:
        return None
    if not isinstance(raw, str):
        inner = _envelope(raw, parameters)
        return canonical_json(raw if inner is None else inner).encode()
    parsed = _parsed(raw)
    if parsed is _NOT_JSON:
        value = _python_dict(raw) if python_dicts else None
        return canonical_json(raw).encode() if value is None else arguments_json(value)
    inner = _envelope(parsed, parameters)
    if inner is not None:
        return canonical_json(inner).encode()
    return raw.encode()


def tool_output(span: Span) -> bytes | None:
    raw = first_of(
        span.attributes, "gen_ai.tool.call.result", "output.value", "traceloop.entity.output",
        "ai.toolCall.result",
    )  # fmt: skip
    if raw is None:
        raw = _event_attribute(span, "gen_ai.choice", "message", "content")
    if raw is None:
        raw = _adk_legacy(span.attributes, ADK_RESULT)
    if raw is None:
        return None
    if isinstance(raw, str):
        parsed = _parsed(raw)
        if parsed is _NOT_JSON:
            return canonical_json(raw).encode()
        if isinstance(parsed, dict) and set(parsed) >= {"output"} and "kwargs" in parsed:
            return canonical_json(_message_content(parsed["output"])).encode()
        if (
            isinstance(parsed, dict)
            and len(parsed) == 1
            and _is_serialized_message(parsed.get("output"))
        ):  # (LangChain.js through OpenInference: the serialized message, in an envelope)
            return canonical_json(parsed["output"]["kwargs"]["content"]).encode()
        if _is_serialized_message(parsed):
            return canonical_json(parsed["kwargs"]["content"]).encode()
        if _is_tool_call_result(parsed):
            return canonical_json(parsed["tool_output"]).encode()
        return raw.encode()
    return canonical_json(raw).encode()


def _is_serialized_message(value: Any) -> bool:
    """LangChain's serialization of a message (``{"lc": 1, "type": "constructor", "id":
    ["langchain", "schema", "messages", "ToolMessage"], "kwargs": {"content": …}}``), which
    OpenLLMetry writes as a LangGraph tool's output: the tool's answer is its content."""
    if not isinstance(value, dict) or value.get("type") != "constructor" or "lc" not in value:
        return False
    path, kwargs = value.get("id"), value.get("kwargs")
    return (
        isinstance(path, list)
        and bool(path)
        and str(path[-1]).endswith("Message")
        and isinstance(kwargs, dict)
        and "content" in kwargs
    )


def _message_content(value: Any) -> Any:
    """A LangChain message's content where ``value`` is one serialized, else ``value``."""
    return value["kwargs"]["content"] if _is_serialized_message(value) else value


def _is_tool_call_result(value: Any) -> bool:
    """LlamaIndex's ToolCallResult (OpenLLMetry's output of its call_tool step): the
    call's name and arguments around the tool's own output."""
    return isinstance(value, dict) and {"tool_name", "tool_kwargs", "tool_output"} <= set(value)


def step_error(span: Span) -> str | None:
    """Why a tool call failed: what AG2 returned to the model (its span says only "tool
    execution failed"), else the span's error, else a failure kept in its output."""
    output = span.attributes.get("output.value")
    if span.status_code == 2 and isinstance(output, str) and output.startswith("[false,"):
        parsed = _parsed(output)  # (AG2: [success, {"content": what the model was told}])
        if isinstance(parsed, list) and len(parsed) == 2 and isinstance(parsed[1], dict):
            content = parsed[1].get("content")
            if isinstance(content, str) and content:
                return content
    return error(span) or tool_failure(span)


def tool_failure(span: Span) -> str | None:
    """A tool that failed without failing its span: LlamaIndex hands a tool's exception
    to the model as an output marked ``is_error`` (OpenLLMetry keeps only that); Agno
    catches it into a FunctionExecutionResult, whose printed form OpenLLMetry keeps."""
    raw = span.attributes.get("traceloop.entity.output")
    if isinstance(raw, str) and raw.startswith(_AGNO_FAILURE):
        said = _AGNO_ERROR.search(raw)
        return said.group(1) if said else "the tool failed"
    if not isinstance(raw, str) or '"is_error"' not in raw:  # (most outputs: no parse)
        return None
    parsed = _parsed(raw)
    output = parsed.get("tool_output") if _is_tool_call_result(parsed) else parsed
    if not isinstance(output, dict) or output.get("is_error") is not True:
        return None
    message = output.get("raw_output")
    return str(message) if message not in (None, "") else "the tool failed"


_AGNO_FAILURE = "status='failure'"
_AGNO_ERROR = re.compile(r"\berror='((?:[^'\\]|\\.)*)'")

# Google ADK's own schema of before ADK 2 (ADK_TELEMETRY_SCHEMA_VERSION_OPT_IN=1): a tool
# span's arguments and result as JSON strings. With content capture off it writes "{}"
# in both, which says nothing of the call: read as no input (an unknown one), not as
# an empty object, or every such run would look like a loop. (ADK 2's schema uses
# gen_ai.tool.call.arguments, and leaves it out when content capture is off.)
ADK_ARGUMENTS = "gcp.vertex.agent.tool_call_args"
ADK_RESULT = "gcp.vertex.agent.tool_response"
ADK_NO_RESULT = '{"result": "<not specified>"}'  # what it writes when the tool answered nothing


def _adk_legacy(attributes: dict[str, Any], key: str) -> Any:
    value = attributes.get(key)
    if (
        value == ADK_NO_RESULT
        or attributes.get(ADK_ARGUMENTS) == attributes.get(ADK_RESULT) == "{}"
    ):
        return None
    return value


_NOT_JSON = object()


def _parsed(text: str) -> Any:
    """``text`` parsed as JSON that PostgreSQL's json type accepts too (strict: no NaN,
    and encodable as UTF-8, which a lone surrogate is not), else _NOT_JSON."""
    try:
        return msgspec.json.decode(text.encode())
    except (msgspec.DecodeError, UnicodeEncodeError):
        return _NOT_JSON


def as_json(raw: Any) -> bytes | None:
    """A payload attribute as JSON bytes: a JSON string as sent, anything else (a plain
    string, a structured value) as canonical JSON."""
    if raw is None:
        return None
    if isinstance(raw, str) and _parsed(raw) is not _NOT_JSON:
        return raw.encode()
    return canonical_json(raw).encode()


RUN_INPUTS = (
    "gen_ai.input.messages", "input.value", "traceloop.entity.input", "gen_ai.prompt", "ai.prompt",
    "mastra.agent_run.input", "gen_ai.workflow.input",
)  # fmt: skip
RUN_OUTPUTS = (
    "gen_ai.output.messages", "output.value", "traceloop.entity.output", "final_result",
    "gen_ai.completion", "ai.response.text", "mastra.agent_run.output", "gen_ai.workflow.output",
)  # fmt: skip
# What is read into a run's own fields, or is bulky content: not repeated in metadata.
_NOT_METADATA = (
    *RUN_INPUTS, *RUN_OUTPUTS, "gen_ai.agent.name", "agent.name", "agent_name",
    "gen_ai.operation.name", "openinference.span.kind", "traceloop.span.kind",
    "traceloop.entity.name", "all_messages_events", "pydantic_ai.all_messages",
    "logfire.json_schema", "logfire.msg", "logfire.msg_template", "gen_ai.system_instructions",
    "gen_ai.tool.definitions", "llm.input_messages", "llm.output_messages", "input.mime_type",
    "output.mime_type",
)  # fmt: skip


def run_input(span: Span) -> bytes | None:
    said = first_of(span.attributes, *RUN_INPUTS)
    if said is None and span.events:  # (the older GenAI event form: Strands' default)
        said = _event_attribute(span, "gen_ai.user.message", "content")
    return as_json(said)


def run_output(span: Span) -> bytes | None:
    said = first_of(span.attributes, *RUN_OUTPUTS)
    if said is None and span.events:
        said = _event_attribute(span, "gen_ai.choice", "message", "content")
    return as_json(said)


def resource_metadata(span: Span) -> dict[str, Any]:
    """The resource's attributes (service.name, SDK versions, deployment)."""
    return dict(span.resource)


def provisional_metadata(member: Span, run_span_id: bytes) -> dict[str, Any]:
    """The metadata of a run whose agent span has not arrived, read from one of its
    members: the resource's attributes and where the run comes from, its trace and the
    id of the span it waits for (what run_metadata gives once that span is in; the
    API's ``from_spans`` reads ``otel.trace_id``)."""
    kept = resource_metadata(member)
    kept["otel.trace_id"] = member.trace_id.hex()
    kept["otel.span_id"] = run_span_id.hex()
    return kept


def run_metadata(span: Span) -> dict[str, Any]:
    """A run's metadata: its resource's attributes, then its span's attributes that
    are not mapped onto a field of their own, and where it came from."""
    kept = resource_metadata(span)
    for key, value in span.attributes.items():
        if key in _NOT_METADATA or key.startswith(("llm.input_messages.", "llm.output_messages.")):
            continue
        kept[key] = _metadata(span) if key == "metadata" else value
    kept["otel.trace_id"] = span.trace_id.hex()
    kept["otel.span_id"] = span.span_id.hex()
    if span.scope:
        kept["otel.scope"] = span.scope
    return kept


def _event_attribute(span: Span, event_name: str, *keys: str) -> Any:
    for event in span.events:
        if event.name == event_name:
            for key in keys:
                if event.attributes.get(key) not in (None, ""):
                    return event.attributes[key]
    return None


def _failure(event: Event, span: Span) -> bool:
    """Whether an event is an exception that failed the span. A task cancelled while the
    span was still open (AutoGen's agent stream, closed when the event loop shuts
    down) is not the agent failing, unless the span's status says it failed."""
    if event.name != "exception":
        return False
    kind = str(event.attributes.get("exception.type") or "")
    return span.status_code == 2 or not kind.endswith(_CANCELLATIONS)


_CANCELLATIONS = ("CancelledError", "GeneratorExit")
# LangGraph's control flow, raised through the spans of the node and tool it leaves
# (its GraphBubbleUp family): interrupt() pausing the graph for a human, a Command sent
# to the parent graph. The graph paused or moved on; nothing failed.
_GRAPH_CONTROL_FLOW = ("GraphInterrupt", "NodeInterrupt", "ParentCommand", "GraphBubbleUp")


def control_flow(span: Span) -> bool:
    """Whether the span's exception, or its ``error.type``, is LangGraph's control flow
    (an interrupt), which instrumentations record as an error."""
    kinds = [event.attributes.get("exception.type") for event in span.events]
    kinds.append(span.attributes.get("error.type"))
    return any(isinstance(kind, str) and kind.endswith(_GRAPH_CONTROL_FLOW) for kind in kinds)


def error(span: Span) -> str | None:
    """What went wrong, if the span failed: its exception, else its status message.
    (None for LangGraph's interrupts: control_flow.)"""
    if (span.status_code == 2 or span.events) and control_flow(span):
        return None
    for event in span.events:
        if _failure(event, span):
            # (a type left empty, as MLflow records the OpenAI Agents SDK's errors: the
            # message alone)
            kind = event.attributes.get("exception.type")
            message = event.attributes.get("exception.message") or ""
            if not kind:
                return str(message) if message else "Exception"
            return f"{kind}: {message}" if message else str(kind)
    if span.status_code == 2:
        kind = span.attributes.get("error.type")
        kind = None if kind == "_OTHER" else kind  # (GenAI's "no better type known")
        if span.status_message:
            return f"{kind}: {span.status_message}" if kind else span.status_message
        return str(kind) if kind else "error"
    return None


def stopped_at_limit(span: Span) -> bool:
    """Whether the agent span's own output says a step limit stopped it."""
    output = span.attributes.get("output.value")
    if not isinstance(output, str) or "exit_reason" not in output:
        return False
    parsed = _parsed(output)
    reason = parsed.get("exit_reason") if isinstance(parsed, dict) else None
    return isinstance(reason, str) and reason.lower() in LIMIT_EXITS


def exception_types(span: Span) -> list[str]:
    """What the span's exceptions say: their types and messages (BeeAI's step limit is
    a plain AgentError whose message tells), and an ERROR status's message."""
    types = [
        f"{event.attributes.get('exception.type') or ''}: "
        f"{event.attributes.get('exception.message') or ''}"
        for event in span.events
        if event.name == "exception"
    ]
    if span.status_code == 2 and span.status_message:
        types.append(span.status_message)
    return types


def stacktrace(span: Span) -> str | None:
    """The traceback of the span's exception event (``exception.stacktrace``), if any."""
    if span.events and control_flow(span):
        return None
    for event in span.events:
        if _failure(event, span):
            trace = event.attributes.get("exception.stacktrace")
            if isinstance(trace, str) and trace:
                return trace
    return None


def json_value(value: Any) -> Any:
    """An attribute that holds JSON text (a message's content, often) as its value."""
    if isinstance(value, str) and value[:1] in ("{", "["):
        parsed = _parsed(value)
        if parsed is not _NOT_JSON:
            return parsed
    return value
