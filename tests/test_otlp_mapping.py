"""Traces captured from real frameworks (tests/otlp_fixtures) mapped onto runs, steps
and model calls: loops at the right step indices, nesting, errors, tokens counted
once, and a result that does not depend on the order or repetition of spans."""

from __future__ import annotations

import dataclasses
import json
import random
from pathlib import Path

import pytest

from keelwave.sdk import fingerprint
from keelwave.server.ingest.otlp import conventions, decode, dialects, mapping

FIXTURES = Path(__file__).resolve().parent / "otlp_fixtures"
LOOPS = [
    "pydanticai_loop", "openaiagents_loop", "openaiagents_chatcompletions",
    "openaiagents_openllmetry_loop", "langgraph_loop", "langgraph_openllmetry_loop",
    "smolagents_loop", "strands_loop", "strands_latest_loop", "googleadk_loop",
    "googleadk_legacy_loop", "pydanticai_openinference_loop", "langgraph_genai_loop",
    "openaiagents_genai_loop", "agentframework_loop", "openaiagents_v2_loop",
    "openaiagents_v2_chatcompletions", "vercelai_loop", "vercelai_stream", "vercelai_agent",
    "openai_client_handloop_root", "openai_client_handloop_agent", "strands_openinference_loop",
    "agentframework_openinference_loop", "agno_openllmetry_loop", "agno_genai_loop",
    "openai_client_genai_handloop_root", "openai_client_genai_handloop_agent",
    "llamaindex_genai_loop", "ag2_loop", "logfire_openaiagents_loop",
    "logfire_openaiagents_loop_with_openai", "logfire_openaiagents_chatcompletions_with_openai",
    "logfire_langgraph_loop", "logfire_openai_loop", "mlflow_openaiagents_loop",
    "mlflow_handloop_loop", "mlflow_langgraph_loop", "mlflow_genai_handloop_loop",
    "openlit_openaiagents_loop", "openlit_langgraph_loop", "openlit_crewai_loop", "crewai_loop",
    "crewai_events_loop", "crewai_openllmetry_loop", "autogen_loop",
    "mlflow_genai_openaiagents_loop", "mastra_loop", "mastra_stream", "litellm_loop",
    "litellm_loop_root", "litellm_openllmetry_loop", "litellm_otel_request_span_loop",
    "litellm_otel_genai_loop", "smolagents_litellm_loop", "langchain_openinference_loop",
    "langchain_openllmetry_loop", "langchain_genai_loop", "langchain_openlit_loop",
    "openlit_smolagents_loop", "openlit_pydanticai_loop", "openlit_agno_loop",
    "openlit_autogen_loop", "openlit_strands_loop", "smolagents_genai_loop",
    "anthropic_client_handloop_agent", "anthropic_client_openllmetry_handloop_agent",
    "anthropic_client_genai_handloop_agent", "openaiagents_mcp_loop",
    "google_genai_handloop_agent", "pydanticai_v2_loop",
]  # fmt: skip
NESTED = ["pydanticai_nested", "pydanticai_openinference_nested", "langgraph_genai_nested",
          "strands_nested", "strands_latest_nested", "smolagents_nested",
          "openaiagents_agent_as_tool", "openaiagents_genai_agent_as_tool",
          "agentframework_nested", "semantickernel_nested", "dspy_nested", "haystack_nested",
          "beeai_nested", "openaiagents_v2_agent_as_tool", "claudeagentsdk_nested",
          "claudeagentsdk_nested_background", "vercelai_nested", "strands_openinference_nested",
          "agentframework_openinference_nested", "agno_openllmetry_nested",
          "agno_genai_nested", "dspy_genai_nested", "logfire_openaiagents_nested",
          "logfire_langgraph_nested", "mlflow_openaiagents_nested", "mlflow_handloop_nested",
          "mlflow_langgraph_nested", "mlflow_genai_handloop_nested",
          "openlit_openaiagents_nested", "openlit_crewai_nested",
          "openlit_langgraph_nested_agent_names", "crewai_events_nested",
          "crewai_events_hierarchical", "crewai_openllmetry_nested",
          "crewai_openllmetry_hierarchical", "autogen_nested", "autogen_native_nested",
          "mlflow_genai_openaiagents_nested", "mastra_nested", "mastra_nested_tool",
          "litellm_nested", "litellm_openllmetry_nested", "litellm_otel_request_span_nested",
          "litellm_otel_genai_nested", "langchain_openinference_nested",
          "langchain_openllmetry_nested", "langchain_genai_nested",
          "langgraph_openllmetry_nested", "openlit_smolagents_nested",
          "openlit_pydanticai_nested", "openlit_agno_nested", "openlit_googleadk_nested",
          "openlit_autogen_nested", "openlit_strands_nested",
          "smolagents_genai_nested"]  # fmt: skip
# Frameworks whose loops are not get_weather in a "weather_agent": (fixture, agent, tool).
OTHER_LOOPS = [("dspy_loop", "ReAct", "search"), ("haystack_loop", "Agent", "get_weather"),
               ("beeai_loop", "assistant", "get_weather"),
               ("semantickernel_loop", "weather_agent", "WeatherPlugin-get_weather"),
               ("claudeagentsdk_loop", "ClaudeAgentSDK.query", "mcp__weather__get_weather"),
               ("dspy_genai_loop", "dspy.ReAct", "search")]  # fmt: skip
# (DSPy's OpenInference instrumentor records no tokens; with the GenAI one DSPy's fifth
# model call, its answer's extraction, is counted: 600 input tokens.)
LOOP_INPUT_TOKENS = {"dspy_loop": 0, "dspy_genai_loop": 600}


def runs_of(name: str, spans: list | None = None) -> list[mapping.MappedRun]:
    spans = (
        spans if spans is not None else decode.from_json((FIXTURES / f"{name}.json").read_bytes())
    )
    runs = []
    for trace in sorted({span.trace_id for span in spans}):
        runs += mapping.map_trace([span for span in spans if span.trace_id == trace])
    return runs


@pytest.mark.parametrize("name", LOOPS)
def test_a_looping_agent_is_one_run_whose_repeats_share_a_fingerprint(name: str) -> None:
    [run] = runs_of(name)
    calls = [step for step in run.steps if step.tool_name == "get_weather"]
    assert [step.step_index for step in calls] == [1, 2, 3]
    prints = {fingerprint(step.tool_name, (step.tool_input or b"").decode()) for step in calls}
    assert len(prints) == 1 and calls[0].tool_input
    assert run.agent_name == "weather_agent"
    assert run.termination_reason == "clean" and run.ended_ns
    if run.calls and any(call.input_tokens for call in run.calls):
        # 4 model calls of 100, 110, 120, 130 input tokens: the agent span's totals
        # (smolagents, Strands) are not counted again.
        assert sum(call.input_tokens for call in run.calls) == 460


def test_tool_spans_without_their_arguments_have_no_input_and_make_no_loop() -> None:
    """Google ADK 2 records a tool call's arguments only with content capture on
    (OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT=SPAN_ONLY); its schema 1 writes
    "{}" for them when content capture is off. Either way the input is unknown: no
    fingerprint, and three calls of the tool are no loop."""
    for name in ("googleadk_nocontent_loop", "googleadk_legacy_loop"):
        spans = decode.from_json((FIXTURES / f"{name}.json").read_bytes())
        if name == "googleadk_legacy_loop":  # as ADK writes it with content capture off
            for span in spans:
                for key in ("gcp.vertex.agent.tool_call_args", "gcp.vertex.agent.tool_response"):
                    if key in span.attributes:
                        span.attributes[key] = "{}"
        [run] = runs_of(name, spans)
        assert [(s.step_index, s.tool_name) for s in run.steps] == [
            (i, "get_weather") for i in (1, 2, 3)
        ]
        assert all(step.tool_input is None for step in run.steps)
        assert run.loop_step_index is None
        assert sum(call.input_tokens for call in run.calls) == 460


@pytest.mark.parametrize(
    ("name", "root"),
    [
        ("llamaindex_loop", "FunctionAgent.run"),
        ("llamaindex_openllmetry_loop", "FunctionAgent.workflow"),
    ],
)
def test_llamaindex(name: str, root: str) -> None:
    """No agent span in either instrumentation: the trace's root is the run.
    OpenInference: tool arguments come as {"kwargs": {...}}, the call's own once
    unwrapped; of its two LLM spans a turn, the one that only builds the request is no
    model call. OpenLLMetry: every span is a "task", the tool calls those with tool.name."""
    [run] = runs_of(name)
    assert run.agent_name == root and run.termination_reason == "clean"
    assert [(s.step_index, s.tool_name, s.tool_input) for s in run.steps] == [
        (i, "get_weather", b'{"city": "Paris", "unit": "celsius"}') for i in (1, 2, 3)
    ]
    assert run.loop_step_index == 1
    assert [(c.input_tokens, c.output_tokens) for c in run.calls] == [
        (100, 20), (110, 21), (120, 22), (130, 23)
    ]  # fmt: skip


def test_a_tool_error_llamaindex_kept_in_its_output_fails_the_step_however_spaced() -> None:
    spans = decode.from_json((FIXTURES / "llamaindex_openllmetry_tool_error.json").read_bytes())
    for span in spans:
        output = span.attributes.get("traceloop.entity.output")
        if "tool.name" in span.attributes and isinstance(output, str):
            span.attributes["traceloop.entity.output"] = json.dumps(
                json.loads(output), separators=(",", ":")
            )
    [run] = runs_of("llamaindex_openllmetry_tool_error", spans)
    [step] = run.steps
    assert step.error == "connection refused: https://example.com/"


def test_a_model_span_around_another_is_not_a_second_call() -> None:
    """A framework's LLM span around the provider client's (OpenInference's LangChain
    and OpenAI instrumentors on together): one call, the innermost, not two."""
    doc = json.loads((FIXTURES / "pydanticai_loop.json").read_text())
    spans = doc["resourceSpans"][0]["scopeSpans"][0]["spans"]
    for number, chat in enumerate([s for s in spans if s["name"].startswith("chat ")]):
        spans.append(
            {
                **chat,
                "spanId": f"{0xC0DE0000 + number:016x}",
                "parentSpanId": chat["spanId"],
                "name": "ChatCompletion",
                "attributes": [
                    {"key": "openinference.span.kind", "value": {"stringValue": "LLM"}},
                    {"key": "llm.model_name", "value": {"stringValue": "fake-loop-model"}},
                    *[a for a in chat["attributes"] if a["key"].startswith("gen_ai.usage.")],
                ],
            }
        )
    [run] = runs_of("pydanticai_loop", decode.from_json(json.dumps(doc).encode()))
    [plain] = runs_of("pydanticai_loop")
    assert len(run.calls) == len(plain.calls) == 4
    assert sum(c.input_tokens for c in run.calls) == sum(c.input_tokens for c in plain.calls)


@pytest.mark.parametrize("name", NESTED)
def test_a_nested_agent_is_a_child_run(name: str) -> None:
    runs = runs_of(name)
    assert len(runs) == 2
    outer, inner = sorted(runs, key=lambda run: run.started_ns)
    assert outer.parent_run_id is None and inner.parent_run_id == outer.run_id
    assert not any(step.tool_name == "lookup" for step in outer.steps)


@pytest.mark.parametrize(
    ("name", "reason", "step_failed"),
    [
        ("pydanticai_tool_error", "error", True),
        ("pydanticai_openinference_tool_error", "error", True),
        ("pydanticai_v2_tool_error", "error", True),
        # pydantic-ai's UsageLimitExceeded: its request_limit is a step limit, its
        # total_tokens_limit a budget (no step limit, nor the model's context): error
        ("pydanticai_request_limit", "max_steps_reached", False),
        ("pydanticai_token_limit", "error", False),
        ("openaiagents_tool_error", "clean", True),  # the model was told, and answered
        ("openaiagents_tool_error_fatal", "error", True),
        ("langgraph_tool_error", "error", True),
        ("langgraph_tool_error_handled", "clean", True),
        ("langgraph_genai_tool_error", "error", True),
        ("langgraph_genai_tool_error_handled", "clean", True),
        ("strands_tool_error", "clean", True),
        ("googleadk_tool_error", "error", True),
        ("googleadk_legacy_tool_error", "error", True),
        ("llamaindex_tool_error", "clean", True),  # the agent told the model, which answered
        ("llamaindex_openllmetry_tool_error", "clean", True),  # (is_error in its output)
        ("openaiagents_max_turns", "max_steps_reached", False),
        ("openaiagents_openllmetry_max_turns", "max_steps_reached", False),
        ("openaiagents_genai_max_turns", "max_steps_reached", False),
        ("openaiagents_genai_tool_error", "clean", True),
        ("openaiagents_genai_tool_error_fatal", "error", True),
        ("agentframework_tool_error", "clean", True),
        ("agentframework_tool_error_says_max_steps", "clean", True),  # its own limit
        ("agentframework_model_error", "error", False),
        ("semantickernel_tool_error", "clean", True),
        ("semantickernel_model_error", "error", False),
        ("dspy_tool_error", "clean", True),
        ("beeai_tool_error", "clean", True),
        ("beeai_step_limit", "max_steps_reached", False),  # AgentError: "not able to resolve"
        ("haystack_step_limit", "max_steps_reached", False),  # exit_reason in its output
        ("openaiagents_v2_tool_error", "clean", True),
        ("openaiagents_v2_tool_error_fatal", "error", True),
        ("openaiagents_v2_max_turns", "max_steps_reached", False),
        ("claudeagentsdk_tool_error", "clean", True),
        ("claudeagentsdk_max_turns", "max_steps_reached", False),  # "maximum number of turns"
        ("vercelai_tool_error", "clean", True),
        ("vercelai_step_limit", "max_steps_reached", False),  # stopWhen: stepCountIs(2)
        ("strands_openinference_tool_error", "clean", True),
        ("agentframework_openinference_tool_error", "clean", True),
        ("agno_openllmetry_tool_error", "clean", True),  # the error only in its output's text
        ("agno_genai_tool_error", "clean", True),
        ("googleadk_openinference_tool_error", "error", True),
        ("dspy_genai_tool_error", "clean", True),
        ("llamaindex_genai_tool_error", "clean", True),
        ("ag2_tool_error", "clean", True),
        ("logfire_openaiagents_tool_error", "clean", True),
        ("logfire_openaiagents_tool_error_fatal", "error", True),
        ("logfire_openaiagents_max_turns", "max_steps_reached", False),  # (its error attribute)
        ("logfire_langgraph_tool_error", "error", True),
        ("logfire_langgraph_tool_error_handled", "clean", True),
        ("mlflow_openaiagents_tool_error", "clean", True),
        ("mlflow_openaiagents_tool_error_fatal", "error", True),
        ("mlflow_openaiagents_max_turns", "max_steps_reached", False),
        ("mlflow_handloop_tool_error", "clean", True),
        ("mlflow_handloop_tool_error_fatal", "error", True),
        ("mlflow_langgraph_tool_error", "error", True),
        ("openlit_openaiagents_tool_error", "clean", True),
        ("openlit_openaiagents_max_turns", "max_steps_reached", False),
        ("openlit_langgraph_tool_error", "error", True),
        ("openlit_crewai_max_turns", "max_steps_reached", False),  # told to answer now
        ("crewai_tool_error", "clean", True),
        ("crewai_events_tool_error", "clean", True),
        ("crewai_max_iter", "max_steps_reached", False),
        ("crewai_events_max_iter", "max_steps_reached", False),
        ("crewai_openllmetry_max_iter", "max_steps_reached", False),
        ("autogen_tool_error", "clean", True),
        ("autogen_native_tool_error", "clean", True),
        ("mastra_tool_error", "clean", True),
        ("mastra_max_steps", "max_steps_reached", False),  # maxSteps: tools ran, unseen
        ("litellm_tool_error", "clean", True),
        ("litellm_openllmetry_tool_error", "clean", True),
        ("litellm_otel_request_span_tool_error", "clean", True),
        ("litellm_otel_genai_tool_error", "clean", True),
        ("openlit_smolagents_tool_error", "clean", True),  # (its tool span: name, error)
        ("openlit_pydanticai_tool_error", "error", False),  # (no tool spans: the asked call)
        ("openlit_agno_tool_error", "clean", True),
        ("openlit_googleadk_tool_error", "error", True),
        ("openlit_autogen_tool_error", "clean", True),
        ("openlit_strands_tool_error", "clean", True),
        ("langchain_openinference_tool_error", "error", True),
        ("langchain_openinference_tool_error_handled", "clean", True),
        ("langchain_openinference_step_limit", "max_steps_reached", False),
        ("langchain_openinference_step_limit_recursion", "max_steps_reached", False),
        ("langchain_openllmetry_tool_error", "error", True),
        ("langchain_openllmetry_tool_error_handled", "clean", True),
        ("langchain_openllmetry_step_limit", "max_steps_reached", False),
        ("langchain_openllmetry_step_limit_recursion", "max_steps_reached", False),
        ("langchain_genai_tool_error", "error", True),
        ("langchain_genai_tool_error_handled", "clean", True),
        ("langchain_genai_step_limit", "max_steps_reached", False),
        ("langchain_genai_step_limit_recursion", "max_steps_reached", False),
        ("langchain_openlit_tool_error", "error", True),
        ("langchain_openlit_tool_error_handled", "clean", True),
        ("langchain_openlit_step_limit", "max_steps_reached", False),
        ("langchain_openlit_step_limit_recursion", "max_steps_reached", False),
        # (no tool spans, and smolagents' prompt names no call for a failed step)
        ("smolagents_genai_tool_error", "clean", False),
        ("smolagents_genai_max_steps", "max_steps_reached", False),  # its finish reason
        # Google ADK's RunConfig(max_llm_calls=3): LlmCallsLimitExceededError
        ("googleadk_max_calls", "max_steps_reached", False),
        ("googleadk_legacy_max_calls", "max_steps_reached", False),
        ("googleadk_openinference_max_calls", "max_steps_reached", False),
        # LlamaIndex's "Max iterations of 3 reached!", raised in parse_agent_output
        ("llamaindex_max_iter", "max_steps_reached", False),
        # Strands' MaxTokensReachedException fails the run: its last answer was cut off
        ("strands_max_tokens", "context_limit", False),
        ("strands_latest_max_tokens", "context_limit", False),
    ],
)
def test_errors_and_step_limits(name: str, reason: str, step_failed: bool) -> None:
    [run] = runs_of(name)
    assert run.termination_reason == reason
    assert any(step.error for step in run.steps) == step_failed


HANDOFFS = ["openaiagents_handoff", "agentframework_handoff", "openaiagents_v2_handoff",
            "agentframework_openinference_handoff", "logfire_openaiagents_handoff",
            "mlflow_openaiagents_handoff", "autogen_handoff", "googleadk_transfer",
            "googleadk_legacy_transfer", "googleadk_openinference_transfer", "strands_swarm",
            "strands_latest_swarm"]  # fmt: skip
# Google ADK's parallel calls, each turn followed by its "execute_tool (merged)" span.
ADK_PARALLEL = ["googleadk_parallel", "googleadk_nocontent_parallel", "googleadk_legacy_parallel",
                "googleadk_openinference_parallel"]  # fmt: skip
ORDERED = LOOPS + NESTED + HANDOFFS + ADK_PARALLEL + [name for name, _, _ in OTHER_LOOPS]


@pytest.mark.parametrize("name", [*ORDERED, "langgraph_arg_shapes"])
def test_order_and_repetition_of_spans_change_nothing(name: str) -> None:
    spans = decode.from_json((FIXTURES / f"{name}.json").read_bytes())
    expected = runs_of(name, spans)
    rng = random.Random(7)
    for _ in range(5):
        again = spans + rng.sample(spans, k=len(spans) // 2)  # a retried export, in part
        rng.shuffle(again)
        assert runs_of(name, again) == expected


def test_wrapped_arguments_are_unwrapped_to_the_calls_own() -> None:
    """smolagents sends {"args": [], "kwargs": {...}} and OpenLLMetry's LangChain an
    envelope that differs on every call: both fingerprint as the call's arguments."""
    [smol] = runs_of("smolagents_loop")
    [langchain] = runs_of("langgraph_openllmetry_loop")
    assert smol.steps[0].tool_input == b'{"city": "Paris", "unit": "celsius"}'  # canonical
    assert langchain.steps[0].tool_input == smol.steps[0].tool_input
    [openai] = runs_of("openaiagents_loop")  # a JSON string: kept byte for byte
    assert openai.steps[0].tool_input == b'{"city": "Paris",  "unit": "celsius"}'


def test_an_object_the_framework_injected_is_no_argument_of_the_call() -> None:
    """LlamaIndex hands its handoff tool the workflow's Context, which OpenInference
    writes among the arguments as its repr, "<workflows.context.context.Context object
    at 0x7f…>": a new address on every call. Left out, the same handoff is the same
    call (as OpenLLMetry, which leaves it out itself, shows it)."""
    [run] = runs_of("llamaindex_handoff")
    assert [(s.step_index, s.tool_name, s.tool_input) for s in run.steps] == [
        (i, "handoff", b'{"reason": "needs expert", "to_agent": "expert"}' if i % 2
         else b'{"reason": "back", "to_agent": "triage"}')
        for i in range(1, 6)
    ]  # fmt: skip
    assert run.loop_step_index == 1
    envelope = {"kwargs": {"n": "<not an object at 0x1>", "o": "<a.B object at 0x7f0a>"}}
    assert conventions.arguments_json(envelope) == b'{"n": "<not an object at 0x1>"}'


def test_positional_arguments_are_named_by_the_tools_parameters() -> None:
    """smolagents' CodeAgent (OpenInference) calls get_weather("Paris", "C") as the
    code says: {"args": ["Paris", "C"], ...}, with tool.parameters naming the
    parameters in signature order. Named, f("Paris", "C"), f(city="Paris", unit="C")
    and f("Paris", unit="C") are one call, and make a loop."""
    parameters = json.dumps({"city": {"type": "string"}, "unit": {"type": "string"}})
    envelopes = [
        {"args": ["Paris", "C"], "sanitize_inputs_outputs": False, "kwargs": {}},
        {"args": [], "sanitize_inputs_outputs": False, "kwargs": {"city": "Paris", "unit": "C"}},
        {"args": ["Paris"], "sanitize_inputs_outputs": False, "kwargs": {"unit": "C"}},
    ]
    spans = [span(1, None, "CodeAgent.run", {"openinference.span.kind": "AGENT"})] + [
        span(n, 1, "SimpleTool", {
            "openinference.span.kind": "TOOL", "tool.name": "get_weather",
            "tool.parameters": parameters, "input.value": json.dumps(envelope),
        })
        for n, envelope in enumerate(envelopes, start=2)
    ]  # fmt: skip
    [run] = mapping.map_trace(spans)
    assert [step.tool_input for step in run.steps] == [b'{"city": "Paris", "unit": "C"}'] * 3
    assert run.loop_step_index == 1
    schema = {"type": "object", "properties": {"city": {}, "unit": {}}}
    named = decode.Span(**{**dataclasses.asdict(spans[1]), "attributes": {
        "tool.name": "get_weather", "tool.parameters": schema,
        "input.value": json.dumps(envelopes[0]),
    }})  # fmt: skip
    assert conventions.tool_input(named) == b'{"city": "Paris", "unit": "C"}'
    # More args than names, a name given twice, no names: the envelope stays.
    for envelope, names in [
        ({"args": ["Paris", "C", 1], "kwargs": {}}, parameters),
        ({"args": ["Paris"], "kwargs": {"city": "Rome"}}, parameters),
        ({"args": ["Paris"], "kwargs": {}}, None),
    ]:
        attributes = {"input.value": json.dumps(envelope)} | (
            {"tool.parameters": names} if names else {}
        )
        kept = conventions.tool_input(dataclasses.replace(spans[1], attributes=attributes))
        assert json.loads(kept or b"") == envelope


@pytest.mark.parametrize("name", ADK_PARALLEL)
def test_google_adks_merged_span_after_parallel_calls_is_no_step(name: str) -> None:
    """Each turn of parallel calls (get_weather and lookup at once, twice) ends with ADK's
    "execute_tool (merged)" span, gen_ai.tool.name "(merged tools)": its bookkeeping of
    the calls, not a call. No step, so the later steps keep their places, each model
    call keeps the step it asked for, and its schema 1's input "N/A", the same every
    time, makes no loop."""
    [run] = runs_of(name)
    assert [(s.step_index, s.tool_name) for s in run.steps] == [
        (1, "get_weather"), (2, "lookup"), (3, "get_weather"), (4, "lookup")
    ]  # fmt: skip
    assert run.loop_step_index is None and run.termination_reason == "clean"
    if name == "googleadk_openinference_parallel":  # (one model call: known gaps)
        assert [call.step_index for call in run.calls] == [1]
    else:
        assert [call.step_index for call in run.calls] == [1, 3, None]


@pytest.mark.parametrize("name", LOOPS + NESTED)
def test_spans_arriving_children_first_fill_the_run_that_will_hold_them(name: str) -> None:
    """As a batch exporter sends them, spans come in the order they end. Before the
    agent span arrives its tool calls already form a run (provisional, unfinished)
    with the id the finished run will have, and the last export gives the same
    result as the whole trace at once."""
    spans = decode.from_json((FIXTURES / f"{name}.json").read_bytes())
    spans.sort(key=lambda span: span.end_ns)
    final = {run.run_id: run for run in runs_of(name, spans)}
    for count in range(1, len(spans) + 1):
        for run in runs_of(name, spans[:count]):
            if run.ended_ns is None:
                assert run.termination_reason is None
        if count == len(spans):
            assert {run.run_id: run for run in runs_of(name, spans[:count])} == final
    if name in LOOPS:
        # (the first tool span; in a trace with none, the first model call asking for one)
        roles = [mapping.c.role(s) for s in spans]
        step_role = mapping.c.TOOL if mapping.c.TOOL in roles else mapping.c.MODEL
        first_tool = roles.index(step_role)
        early = [run for run in runs_of(name, spans[: first_tool + 1]) if run.steps]
        assert early and all(run.provisional and run.ended_ns is None for run in early)


@pytest.mark.parametrize("name", LOOPS)
def test_the_loop_began_at_the_first_of_the_repeated_calls(name: str) -> None:
    [run] = runs_of(name)
    first = next(step.step_index for step in run.steps if step.tool_name == "get_weather")
    assert run.loop_step_index == first


@pytest.mark.parametrize("name", ["pydanticai_loop", "openaiagents_loop", "strands_loop"])
def test_each_model_call_belongs_to_the_tool_call_it_asked_for(name: str) -> None:
    [run] = runs_of(name)
    linked = [call.step_index for call in run.calls]
    # 4 model calls: three asked for get_weather (steps 1..3), the last answered.
    assert linked[:3] == [1, 2, 3] and linked[3] is None


def span(span_id: int, parent: int | None, name: str, attributes: dict) -> decode.Span:
    return decode.Span(
        trace_id=b"t" * 16, span_id=span_id.to_bytes(8, "big"),
        parent_span_id=parent.to_bytes(8, "big") if parent else None, name=name, kind=1,
        start_ns=span_id * 1000, end_ns=10_000 - span_id, status_code=0, status_message="",
        attributes=attributes, resource={"service.name": "billing"},
    )  # fmt: skip


def test_the_call_of_a_turn_still_open_joins_the_run_of_the_turn_before() -> None:
    """Mid-run, the OpenAI Agents SDK (turn), Strands (execute_event_loop_cycle) and
    smolagents (Step N) keep the current turn's span open while its tool runs: the
    call that asked for the tool arrives under a missing span that is not the agent's.
    It joins the provisional run of the turn before (the id the finished run has), not
    a second run; one that has nothing before it, or a step of its own, stays its own.
    (The spans /tmp/check_r2b's strands/smol midflush and r2a's oai mid dumps had.)"""
    llm = {"openinference.span.kind": "LLM", "llm.token_count.prompt": 100}
    tool = {"openinference.span.kind": "TOOL", "tool.name": "search", "input.value": "{}"}
    turn = {"openinference.span.kind": "CHAIN"}
    agent = {"openinference.span.kind": "AGENT", "agent.name": "a"}
    # agent 1 > turn 2 > (call 3, tool 4); turn 5 (open) > (call 6, tool 7 running)
    whole = [span(1, None, "a", agent), span(2, 1, "turn", turn), span(3, 2, "response", llm),
             span(4, 2, "search", tool), span(5, 1, "turn", turn),
             span(6, 5, "response", llm), span(7, 5, "search", tool)]  # fmt: skip
    final = {run.run_id: run for run in mapping.map_trace(whole)}
    mid = [whole[i] for i in (1, 2, 3, 5)]  # (agent, turn 5 and its tool still open)
    for spans in (mid, mid[::-1]):
        [run] = mapping.map_trace(spans)
        assert run.provisional and run.run_id in final
        assert [call.span_id for call in run.calls] == [whole[2].span_id, whole[5].span_id]
        assert [step.step_index for step in run.steps] == [1]
    # The first turn's call, with nothing before it, is a run of its own still.
    [first] = mapping.map_trace([whole[2]])
    assert first.provisional and first.run_id not in final
    # A group with a step of its own, or an agent, is never joined to another's run.
    other = [span(8, 20, "search", tool), span(9, 21, "b", agent), span(10, 9, "r", llm)]
    runs = mapping.map_trace(mid + other)
    assert len(runs) == 3 and sum(len(run.calls) for run in runs) == 3
    assert [len(r.calls) for r in runs if r.run_id in final] == [2]
    later = mapping.map_trace(mid + [span(11, 5, "response", llm)])
    assert [len(run.calls) for run in later] == [3]


def test_a_trace_without_agent_spans_is_one_run_and_one_of_plain_http_spans_is_none() -> None:
    http = [span(1, None, "GET /", {}), span(2, 1, "SELECT", {})]
    assert mapping.map_trace(http) == []
    tool = span(3, 1, "lookup", {"gen_ai.operation.name": "execute_tool"})
    [run] = mapping.map_trace([*http, tool])
    assert run.agent_name == "GET /" and [s.tool_name for s in run.steps] == ["lookup"]
    assert run.termination_reason == "clean" and not run.provisional
    [early] = mapping.map_trace([tool])  # before its root arrives: the same run, provisional
    assert early.run_id == run.run_id and early.provisional and early.agent_name == "billing"


def test_retrievals_are_custom_steps_numbered_with_the_tool_calls() -> None:
    agent = span(1, None, "research", {"openinference.span.kind": "AGENT"})
    search = {"openinference.span.kind": "RETRIEVER", "input.value": "what is keelwave"}
    tool = {"openinference.span.kind": "TOOL", "tool.name": "fetch", "input.value": "{}"}
    spans = [agent, span(2, 1, "retrieve", search), span(3, 1, "fetch", tool),
             span(4, 1, "retrieve", search)]  # fmt: skip
    [run] = mapping.map_trace(spans)
    assert [(s.step_index, s.step_type, s.tool_name) for s in run.steps] == [
        (1, "custom", "retrieve"), (2, "tool_call", "fetch"), (3, "custom", "retrieve")
    ]  # fmt: skip
    assert run.steps[0].fingerprint == run.steps[2].fingerprint and run.loop_step_index == 1


def test_a_failed_span_says_its_error_type() -> None:
    failed = span(
        1, None, "agent", {"gen_ai.operation.name": "invoke_agent", "error.type": "Timeout"}
    )
    failed.status_code = 2
    [run] = mapping.map_trace([failed])
    assert run.termination_reason == "error" and run.error == "Timeout"


def _autogen_turn(tool_error: bool = False, cancelled: bool = False) -> list[decode.Span]:
    """An AutoGen AgentChat agent's turn as autogen-core's own GenAI spans and
    OpenInference's AutoGen instrumentor send it together (autogen-agentchat 0.7.5,
    openinference-instrumentation-autogen-agentchat 0.1.22): ``invoke_agent`` around the
    instrumentor's agent span, named after the method, and each tool call twice, the
    instrumentor's span (with the arguments) around ``execute_tool`` (without)."""
    agent = {"openinference.span.kind": "AGENT", "graph.node.id": "weather_agent",
             "graph.node.parent_id": "start"}  # fmt: skip
    spans = [
        span(1, None, "invoke_agent weather_agent",
             {"gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": "weather_agent"}),
        span(2, 1, "weather_agent.on_messages_stream", agent),
    ]  # fmt: skip
    for n in range(3):
        outer, inner = 10 + 2 * n, 11 + 2 * n
        spans += [
            span(outer, 2, "weather_agent.get_weather",
                 {"openinference.span.kind": "TOOL", "tool.name": "get_weather",
                  "input.value": '{"city": "Paris"}', "output.value": "Sunny"}),
            span(inner, outer, "execute_tool get_weather",
                 {"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": "get_weather"}),
        ]  # fmt: skip
    if tool_error:  # the outer span stays OK; autogen-core's fails, with its exception
        spans[-1].status_code, spans[-1].status_message = 2, "connection refused"
        spans[-1].events = [decode.Event("exception", 0, {
            "exception.type": "RuntimeError", "exception.message": "connection refused",
            "exception.escaped": "False"})]  # fmt: skip
    if cancelled:  # the agent's stream closed when asyncio.run() shut the loop down
        spans[1].events = [decode.Event("exception", 0, {
            "exception.type": "asyncio.exceptions.CancelledError",
            "exception.escaped": "False", "exception.stacktrace": "Traceback ..."})]  # fmt: skip
    return spans


def test_autogen_agent_with_both_instrumentations_is_one_run_and_one_step_a_call() -> None:
    [run] = mapping.map_trace(_autogen_turn())
    assert run.agent_name == "weather_agent"
    assert [(s.step_index, s.tool_name, s.tool_input) for s in run.steps] == [
        (i, "get_weather", b'{"city": "Paris"}') for i in (1, 2, 3)
    ]
    assert run.loop_step_index == 1 and run.termination_reason == "clean"
    # in any order, and before the outer tool spans have arrived
    spans = _autogen_turn()
    random.Random(3).shuffle(spans)
    assert mapping.map_trace(spans) == [run]


def test_autogen_tool_error_on_the_inner_span_fails_the_step() -> None:
    [run] = mapping.map_trace(_autogen_turn(tool_error=True))
    assert [s.error for s in run.steps] == [None, None, "RuntimeError: connection refused"]
    assert run.termination_reason == "clean"  # the agent went on: AutoGen told the model
    # The inner span in a later export than the outer: the step mapped (and remembered)
    # without it takes its error once it arrives.
    spans, memo = _autogen_turn(tool_error=True), {}
    mapping.map_trace(spans[:-1], memo)
    assert mapping.map_trace(spans, memo) == [run]


def test_a_cancellation_left_on_an_ok_span_is_not_an_error() -> None:
    """AutoGen's agent stream, left open by AgentChat's run(), is closed when the event
    loop shuts down: a CancelledError event on a span that ends OK. The agent did not
    fail; a span whose status says it failed still does."""
    [run] = mapping.map_trace(_autogen_turn(cancelled=True))
    assert (run.termination_reason, run.error, run.error_traceback) == ("clean", None, None)
    spans = _autogen_turn(cancelled=True)
    spans[1].status_code = 2
    [run] = mapping.map_trace(spans)
    assert run.termination_reason == "error"
    assert run.error == "asyncio.exceptions.CancelledError"


def test_an_agent_that_started_after_its_enclosing_agent_ended_is_a_run_of_its_own() -> None:
    """Agno's OpenInference instrumentor leaves a team's context attached once the team
    has run: the thread's next agent runs arrive as children of the finished team's
    span. An agent cannot have been started by one that had already ended."""
    team = span(1, None, "Team.run", {"openinference.span.kind": "AGENT", "agent.name": "team"})
    member = span(2, 1, "Agent.run", {"openinference.span.kind": "AGENT", "agent.name": "member"})
    later = span(3, 1, "Agent.run", {"openinference.span.kind": "AGENT", "agent.name": "later"})
    team.end_ns, member.end_ns = 5_000, 4_000
    later.start_ns, later.end_ns = 6_000, 7_000
    runs = {run.agent_name: run for run in mapping.map_trace([team, member, later])}
    assert runs["member"].parent_run_id == runs["team"].run_id
    assert runs["later"].parent_run_id is None


def test_graph_parent_is_a_handoff_only_when_the_agent_before_handed_off() -> None:
    """OpenInference's graph.node.parent_id names the agent that ran before this one:
    the agent that handed off (OpenAI Agents, AutoGen's Swarm), or only the previous
    speaker (an AutoGen round-robin chat, a CrewAI crew). A child run only for the
    first: the agent before shows the handoff, a span named for it."""

    def turns(handoff: bool) -> list[decode.Span]:
        chain = span(1, None, "RoundRobin.run_stream", {"openinference.span.kind": "CHAIN"})
        writer = span(
            2,
            1,
            "writer.on_messages_stream",
            {"openinference.span.kind": "AGENT", "graph.node.id": "writer"},
        )
        reviewer = span(5, 1, "reviewer.on_messages_stream",
                        {"openinference.span.kind": "AGENT", "graph.node.id": "reviewer",
                         "graph.node.parent_id": "writer"})  # fmt: skip
        writer.end_ns, reviewer.start_ns = 4_500, 5_000
        spans = [chain, writer, reviewer]
        if handoff:
            handoff_tool = {"openinference.span.kind": "TOOL", "tool.name": "transfer_to_reviewer",
                            "input.value": "{}"}  # fmt: skip
            spans.append(span(3, 2, "writer.transfer_to_reviewer", handoff_tool))
        return spans

    runs = {run.agent_name: run for run in mapping.map_trace(turns(handoff=False))}
    assert runs["reviewer"].parent_run_id is None
    runs = {run.agent_name: run for run in mapping.map_trace(turns(handoff=True))}
    assert runs["reviewer"].parent_run_id == runs["writer"].run_id


@pytest.mark.parametrize(
    ("model", "provider"),
    [("gpt-4o-mini-2024-07-18", "openai"), ("o3-mini", "openai"),
     ("claude-sonnet-4-5", "anthropic"), ("models/gemini-2.5-pro", "google"),
     ("openai/gpt-4o", "openai"), ("llama-3.1-70b", "unknown"), ("unknown", "unknown")],
)  # fmt: skip
def test_a_model_call_without_a_provider_is_credited_to_its_model_family(model, provider) -> None:
    """AutoGen's and CrewAI's OpenInference instrumentors name the model, not its maker."""
    call = span(2, 1, "OpenAIChatCompletionClient.create",
                {"openinference.span.kind": "LLM", "llm.model_name": model,
                 "llm.token_count.prompt": 10, "llm.token_count.completion": 2})  # fmt: skip
    agent = span(1, None, "agent", {"openinference.span.kind": "AGENT", "agent.name": "a"})
    [run] = mapping.map_trace([agent, call])
    assert [c.provider for c in run.calls] == [provider]
    named = span(2, 1, "chat", {**call.attributes, "llm.provider": "azure"})
    [run] = mapping.map_trace([agent, named])
    assert [c.provider for c in run.calls] == ["azure"]


def test_a_failed_call_the_agent_recovered_from_does_not_end_the_run_whatever_it_says() -> None:
    """Microsoft Agent Framework puts tool and model spans right under the agent's: a
    tool whose error message says "max steps" (its own limit) told the model, which
    answered. The run ended clean; a step-limit exception on the agent's own machinery
    (a wrapper, a turn) still counts."""
    agent = span(1, None, "invoke_agent crawler", {"gen_ai.operation.name": "invoke_agent",
                                                   "gen_ai.agent.name": "crawler"})  # fmt: skip
    crawl = {"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": "crawl",
             "gen_ai.tool.call.arguments": '{"url": "a"}'}  # fmt: skip
    tool = span(2, 1, "execute_tool crawl", crawl)
    tool.status_code, tool.status_message = 2, "RuntimeError('crawler stopped: max steps (50)')"
    [run] = mapping.map_trace([agent, tool])
    assert run.termination_reason == "clean" and run.steps[0].error
    turn = span(3, 1, "turn", {})
    turn.status_code, turn.status_message = 2, "MaxTurnsExceeded: Max turns (3) exceeded"
    [run] = mapping.map_trace([agent, tool, turn])
    assert run.termination_reason == "max_steps_reached"


@pytest.mark.parametrize(
    "attributes",
    [
        {"gen_ai.response.finish_reasons": ["length"]},
        {"gen_ai.response.finish_reasons": '["length"]'},  # Agent Framework: JSON text
        {"gen_ai.response.finish_reason": "FinishReason.LENGTH"},  # Semantic Kernel
        {"llm.finish_reason": "max_tokens"},  # Anthropic's word for it
        {"gen_ai.response.finish_reasons": ["MAX_TOKENS"]},  # Google's
    ],
)
def test_a_last_model_call_cut_off_at_its_token_limit_is_a_context_limit(attributes) -> None:
    agent = span(1, None, "invoke_agent writer", {"gen_ai.operation.name": "invoke_agent"})
    call = span(2, 1, "chat gpt-4o", {"gen_ai.operation.name": "chat",
                                      "gen_ai.request.model": "gpt-4o", **attributes})  # fmt: skip
    [run] = mapping.map_trace([agent, call])
    assert run.termination_reason == "context_limit"
    stop = span(2, 1, "chat gpt-4o", {"gen_ai.operation.name": "chat",
                                      "gen_ai.response.finish_reasons": '["stop"]'})  # fmt: skip
    [run] = mapping.map_trace([agent, stop])
    assert run.termination_reason == "clean"


@pytest.mark.parametrize("name", ["agentframework_length", "semantickernel_length"])
def test_a_run_whose_last_answer_ran_out_of_tokens_hit_its_context_limit(name: str) -> None:
    """Agent Framework writes finish reasons as JSON text, Semantic Kernel one reason as
    its enum's name (``FinishReason.LENGTH``)."""
    [run] = runs_of(name)
    assert run.termination_reason == "context_limit"


@pytest.mark.parametrize(("name", "agent", "tool"), OTHER_LOOPS)
def test_more_frameworks_loops(name: str, agent: str, tool: str) -> None:
    """DSPy's ReAct and Haystack's Agent are chains to OpenInference, agents here; DSPy's
    tool spans are named for the method (``search.__call__``); BeeAI wraps the
    arguments (``{"input": …, "options": …}``); Haystack makes no tool spans at all, so
    its steps are the calls its model asked for."""
    [run] = runs_of(name)
    assert run.agent_name == agent and run.termination_reason == "clean"
    calls = [step for step in run.steps if step.tool_name == tool]
    assert [step.step_index for step in calls] == [1, 2, 3]
    assert len({step.fingerprint for step in calls}) == 1 and calls[0].fingerprint
    assert run.loop_step_index == 1
    assert b'"input"' not in calls[0].tool_input and b"kwargs" not in calls[0].tool_input
    assert sum(call.input_tokens for call in run.calls) == LOOP_INPUT_TOKENS.get(name, 460)


def test_steps_asked_for_by_the_model_are_linked_to_the_call_that_asked() -> None:
    [run] = runs_of("haystack_loop")
    assert [call.step_index for call in run.calls] == [1, 2, 3, None]
    assert all(step.tool_output is None and step.duration_ms is None for step in run.steps)
    assert len({step.started_ns for step in run.steps}) == 3


def test_a_model_request_in_a_trace_with_tool_spans_is_no_step_of_its_own() -> None:
    """Where an instrumentation makes tool spans, a call the model asked for with no
    span was not run as a tool (a handoff, a structured answer)."""
    runs = {run.agent_name: run for run in runs_of("agentframework_handoff")}
    assert runs["triage_agent"].steps == []


def test_beeai_event_spans_are_neither_runs_nor_steps() -> None:
    """BeeAI's instrumentor gives an agent's or tool's events ("final_answer", "error")
    spans of their own, of their emitter's kind."""
    [run] = runs_of("beeai_tool_error")
    assert [s.tool_name for s in run.steps] == ["fetch_page", "final_answer"]
    assert run.steps[0].error and run.steps[0].tool_input == b'{"url": "https://example.com/"}'


@pytest.mark.parametrize(
    ("name", "source", "target"),
    [("agentframework_handoff", "triage_agent", "refund_agent"),
     ("agentframework_openinference_handoff", "triage_agent", "refund_agent"),
     ("openaiagents_v2_handoff", "triage_agent", "weather_specialist"),
     ("logfire_openaiagents_handoff", "triage_agent", "weather_specialist"),
     ("mlflow_openaiagents_handoff", "triage_agent", "weather_specialist"),
     ("autogen_handoff", "triage_agent", "weather_agent"),
     ("googleadk_transfer", "coordinator", "weather_expert"),
     ("googleadk_legacy_transfer", "coordinator", "weather_expert"),
     ("googleadk_openinference_transfer", "coordinator", "weather_expert"),
     ("strands_swarm", "triage", "expert"),
     ("strands_latest_swarm", "triage", "expert")],
)  # fmt: skip
def test_a_handoff_makes_the_target_a_child_of_the_agent_that_handed_off(name, source, target):
    """Both run their agents as siblings (under Agent Framework's workflow, the Agents
    SDK's, ADK's invoke_workflow, Strands' invoke_swarm); what shows the handoff is a
    model call asking for handoff_to_<target>, which Agent Framework answers without a
    tool span, the v2 instrumentor's agent_handoff span (gen_ai.handoff.to_agent), or a
    call of a handoff tool naming its target in an argument: ADK's
    transfer_to_agent(agent_name=...), Strands Swarm's handoff_to_agent(agent_name=...)."""
    runs = {run.agent_name: run for run in runs_of(name)}
    assert set(runs) == {source, target}
    assert runs[target].parent_run_id == runs[source].run_id
    assert runs[target].steps


def test_steps_a_model_asked_for_give_way_to_tool_spans_that_arrive_later() -> None:
    """An export carrying a trace's model calls before its tool spans: until a tool span
    arrives the calls the model asked for are the steps (same tools, same arguments as
    the model sent them), after it the tool spans are, as for the whole trace."""
    spans = decode.from_json((FIXTURES / "agentframework_loop.json").read_bytes())
    early = [span for span in spans if not span.name.startswith("execute_tool")]
    [run] = mapping.map_trace(early)
    assert [s.tool_name for s in run.steps] == ["get_weather"] * 3 and run.loop_step_index == 1
    assert run.steps[0].tool_input == b'{"city": "Paris",  "unit": "celsius"}'  # the model's
    [whole] = runs_of("agentframework_loop")
    assert [s.span_id for s in whole.steps] != [s.span_id for s in run.steps]
    assert mapping.map_trace(early + [s for s in spans if s not in early]) == [whole]


_ODD_VALUES = [
    None, "", "x", "[", "[]", '["length"]', '{"a": 1}', 1, 2.5, float("nan"), True, [1, "a"],
    {"k": [1]}, '[{"role": "assistant", "parts": [{"type": "tool_call", "name": "t"}]}]',
    '[{"role": "assistant", "parts": 3}]', '[{"parts": [{"type": "tool_call", "name": null}]}]',
    '{"exit_reason": "max_agent_steps"}', '{"exit_reason": 5}', "handoff_to_b",
    '{"input": {"a": 1}, "options": null}', "tool", "call_0",
    '[{"role": "tool", "parts": [{"type": "tool_call_response", "id": "call_0"}]}]',
    '[{"role": "tool", "parts": [{"type": "tool_call_response", "id": [1], "response": 2}]}]',
    '"MUST give your absolute best final answer"', '"AGENT"', '{"message": 3}',
    '{"input_tokens": "x"}', "max_steps", '["max_turns"]', '{"tool_name": "t", "arguments": 5}',
    "{'city': 'Paris'}", "{'a': {1, 2}, 'b': 1e999, 'c': b'x'}", "{'a': __import__('os')}",
    "{'a': " + "[" * 3000 + "]" * 3000 + "}",
    '[{"role": "MessageRole.ASSISTANT", "parts": '
    '[{"content": "Calling tools:\\n[{\'id\': \'call_0\'}]"}]},'
    ' {"role": "user", "parts": [{"content": "Observation:\\n"}, {"content": 5}]}]',
]  # fmt: skip
_ODD_KEYS = [
    "gen_ai.output.messages", "llm.output_messages.0.message.tool_calls.0.tool_call.function.name",
    "llm.output_messages.0.message.tool_calls.0.tool_call.function.arguments",
    "gen_ai.completion.0.tool_calls.1.name", "gen_ai.response.finish_reasons",
    "gen_ai.response.finish_reason", "gen_ai.handoff.to_agent", "output.value", "input.value",
    "metadata.path", "metadata.class_name", "gen_ai.agent.name", "tool.name",
    "graph.node.parent_id", "gen_ai.input.messages", "llm.input_messages.0.message.role",
    "llm.input_messages.0.message.tool_call_id", "llm.input_messages.0.message.content",
    "llm.output_messages.0.message.tool_calls.0.tool_call.id", "gen_ai.operation.name",
    "mlflow.spanType", "mlflow.chat.tokenUsage", "error", "logfire.msg_template",
    "langsmith.span.kind", "langsmith.metadata.langgraph_checkpoint_ns", "name",
    "traceloop.entity.input", "traceloop.span.kind",
]  # fmt: skip
# Scopes whose spans are rewritten (dialects.py) or read by scope (OpenLIT's).
_ODD_SCOPES = [
    "", "mlflow.tracing.provider", "logfire.openai_agents", "langsmith",
    "openlit.instrumentation.langchain", "openlit.instrumentation.langgraph",
    "opentelemetry.instrumentation.mcp.instrumentation",
]  # fmt: skip


OPENINFERENCE_KINDS = ["AGENT", "TOOL", "LLM", "CHAIN"]


def test_odd_attribute_values_never_break_the_mapping_nor_make_it_order_dependent() -> None:
    """Attributes are whatever a client sends: of any type, JSON or not, where the
    conventions expect messages, reasons or names. (A model span whose message parts
    were a number once failed its whole export.)"""
    rng = random.Random(5)
    kinds = ["invoke_agent", "execute_tool", "chat", "agent_handoff"]
    names = ["ReAct.forward", "Agent.run", "x.__call__", "handoff to b", "invoke_agent a"]
    for _ in range(3000):
        spans = []
        for number in range(1, rng.randint(2, 7)):
            attributes = {key: rng.choice(_ODD_VALUES) for key in rng.sample(_ODD_KEYS, 4)}
            attributes["gen_ai.operation.name"] = rng.choice(kinds)
            if rng.random() < 0.3:
                attributes["openinference.span.kind"] = rng.choice(OPENINFERENCE_KINDS)
            made = span(number, rng.randint(1, number - 1) if number > 1 else None,
                        rng.choice(names), attributes)  # fmt: skip
            made.start_ns, made.end_ns = rng.randint(1, 99), rng.choice([0, rng.randint(100, 200)])
            made.status_code = rng.choice([0, 2])
            made.scope = rng.choice(_ODD_SCOPES)
            choice = {"tool_calls": rng.choice(_ODD_VALUES)}
            failed = {"exception.message": rng.choice(["x", "E('m')Traceback (most recent", 3])}
            made.events = [decode.Event("gen_ai.choice", 0, choice),
                           decode.Event("exception", 0, failed)]  # fmt: skip
            spans.append(made)
        dialects.rewrite(spans)
        assert mapping.map_trace(spans) == mapping.map_trace(spans[::-1])


def test_a_trace_without_model_spans_counts_what_its_agent_span_sums_up() -> None:
    """The Claude Agent SDK's instrumentor makes no model spans: the run's tokens and
    model are on its agent span, and become one model call. Where model spans exist, an
    agent span's totals are never counted again (pydantic-ai: 4 calls, 460 tokens)."""
    [run] = runs_of("claudeagentsdk_loop")
    [call] = run.calls
    assert (call.provider, call.model, call.input_tokens) == ("anthropic", "claude-fake-model", 460)
    [pydantic] = runs_of("pydanticai_loop")
    assert len(pydantic.calls) == 4 and sum(c.input_tokens for c in pydantic.calls) == 460


def test_a_vercel_ai_run_that_paused_for_a_client_side_tool_is_no_step_limit() -> None:
    """A generateText whose last model call asked for a tool with no execute function
    ends on "tool-calls" too, but ran no tool after it: clean, not a step limit."""
    spans = decode.from_json((FIXTURES / "vercelai_step_limit.json").read_bytes())
    # (the last call's: every span of it started in the same millisecond)
    [run] = mapping.map_trace([s for s in spans if s.attributes.get("ai.toolCall.id") != "call_1"])
    assert run.termination_reason == "clean" and len(run.steps) == 1


def test_agno_teams_and_failed_tools_through_openllmetry() -> None:
    """OpenLLMetry's Agno instrumentor marks a team a "workflow" (with agno.team.name):
    it is the run its members' runs are children of. A tool's exception, which Agno
    catches, shows only in the printed result it keeps as the output."""
    runs = {run.agent_name: run for run in runs_of("agno_openllmetry_nested")}
    assert runs["weather_expert"].parent_run_id == runs["coordinator"].run_id
    assert [s.tool_name for s in runs["coordinator"].steps] == ["delegate_task_to_member"]
    [run] = runs_of("agno_openllmetry_tool_error")
    assert run.steps[0].error == "connection refused: https://example.com/"
    [genai] = runs_of("agno_genai_tool_error")  # GenAI's error.type "_OTHER" says nothing
    assert genai.steps[0].error == "connection refused: https://example.com/"


def test_an_ag2_chat_is_one_run_named_for_the_agent_it_was_started_with() -> None:
    """OpenInference's AG2 instrumentor makes every reply of either agent an AGENT span
    (with ag2.sender.name) under the chat's: they are the chat's turns, not runs. The
    tool's arguments are its own (not the {"name", "arguments"} of its input), and its
    error what the model was told, not "tool execution failed"."""
    [run] = runs_of("ag2_tool_error")
    assert run.agent_name == "browser_agent"
    assert run.steps[0].tool_input == b'{"url": "https://example.com/"}'
    assert run.steps[0].error == "Error: connection refused: https://example.com/"


def test_model_calls_with_nothing_around_them_are_runs_of_their_own() -> None:
    """OpenLLMetry's Haystack instrumentor wraps only the OpenAI generator: every model
    call is a trace, and a run, of its own (docs/otlp.md: wrap the loop in a span). Its
    provider, "OpenAI", is written as the conventions write it."""
    runs = runs_of("haystack_openllmetry_loop")
    assert len(runs) == 4 and all(len(run.calls) == 1 and not run.steps for run in runs)
    assert {call.provider for run in runs for call in run.calls} == {"openai"}


def test_a_chain_of_handoffs_makes_each_agent_the_child_of_the_one_before() -> None:
    """Siblings under a nameless workflow span, each handing off to the next
    (gen_ai.handoff.to_agent): each is the child of the one that handed off to it, not
    of an earlier agent that handed off to someone else."""
    workflow = span(1, None, "Agent workflow", {"gen_ai.operation.name": "invoke_agent"})
    spans, number = [workflow], 2
    for k in range(20):
        agent = {"gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": f"agent{k}"}
        spans.append(span(number, 1, f"invoke_agent agent{k}", agent))
        handoff = {
            "gen_ai.operation.name": "agent_handoff",
            "gen_ai.handoff.to_agent": f"agent{k + 1}",
        }
        spans.append(span(number + 1, number, "agent_handoff", handoff))
        spans[-2].start_ns, spans[-1].start_ns = k * 100, k * 100 + 10
        number += 2
    runs = {run.agent_name: run for run in mapping.map_trace(spans)}
    assert len(runs) == 20 and runs["agent0"].parent_run_id is None
    assert all(
        runs[f"agent{k}"].parent_run_id == runs[f"agent{k - 1}"].run_id for k in range(1, 20)
    )


def test_a_handoff_attribute_names_its_target_exactly() -> None:
    """gen_ai.handoff.to_agent names one agent: "agent10" is not "agent1", though the
    one holds the other. (A span's name that mentions a handoff is read loosely.)"""
    workflow = span(1, None, "Agent workflow", {"gen_ai.operation.name": "invoke_agent"})
    spans = [workflow]
    for number, (name, target, start) in enumerate(
        [("agent0", "agent1", 0), ("router", "agent10", 100), ("agent1", None, 200)], start=2
    ):
        agent = {"gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": name}
        spans.append(span(number * 10, 1, f"invoke_agent {name}", agent))
        spans[-1].start_ns = start
        if target:
            handoff = {"gen_ai.operation.name": "agent_handoff", "gen_ai.handoff.to_agent": target}
            spans.append(span(number * 10 + 1, number * 10, "agent_handoff", handoff))
            spans[-1].start_ns = start + 10
    runs = {run.agent_name: run for run in mapping.map_trace(spans)}
    assert runs["agent1"].parent_run_id == runs["agent0"].run_id


def test_a_handoff_tool_that_takes_its_target_as_an_argument_hands_off_to_it() -> None:
    """Google ADK's transfer_to_agent and Strands Swarm's handoff_to_agent name their
    target in agent_name, not in the tool's name: a1 hands off to a2, a2 back to a1
    (a run of its own again), the second a1 to "agent", an agent so named; "agent" is
    no target of the others, whose tools' names end in it. Whatever the order."""
    workflow = span(1, None, "invoke_swarm", {"gen_ai.operation.name": "invoke_swarm"})
    spans = [workflow]
    hops = [("a1", "handoff_to_agent", "a2"), ("a2", "transfer_to_agent", "a1"),
            ("a1", "handoff_to_agent", "agent"), ("agent", None, None)]  # fmt: skip
    for number, (name, tool, target) in enumerate(hops, start=1):
        agent = {"gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": name}
        spans.append(span(number * 10, 1, f"invoke_agent {name}", agent))
        spans[-1].start_ns = number * 100
        if tool:
            call = {"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": tool,
                    "gen_ai.tool.call.arguments": json.dumps({"agent_name": target})}  # fmt: skip
            spans.append(span(number * 10 + 1, number * 10, f"execute_tool {tool}", call))
            spans[-1].start_ns = number * 100 + 10
    expected = mapping.map_trace(spans)
    names = {run.run_id: run.agent_name for run in expected}
    assert [(run.agent_name, names.get(run.parent_run_id)) for run in expected] == [
        ("a1", None), ("a2", "a1"), ("a1", "a2"), ("agent", "a1")
    ]  # fmt: skip
    rng = random.Random(3)
    for _ in range(5):
        rng.shuffle(spans)
        assert mapping.map_trace(spans) == expected


def test_an_operation_details_event_is_read_as_the_spans_own_attributes() -> None:
    """The GenAI conventions' gen_ai.client.inference.operation.details event (Strands
    sends it) carries what the span's own attributes would: read so, the messages of a
    trace without tool spans give the same steps, results and model calls as they do
    as attributes. The span's own attributes win over the event's."""
    call = {"type": "tool_call", "id": "c1", "name": "search", "arguments": {"q": "keel"}}
    result = {"type": "tool_call_response", "id": "c1", "response": "found"}
    asked = [{"role": "assistant", "parts": [call]}]
    answered = [{"role": "tool", "parts": [result]}]

    def trace(as_event: bool) -> list[decode.Span]:
        agent = {"gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": "detbot"}
        spans = [span(1, None, "invoke_agent detbot", agent)]
        for number, (key, value) in enumerate(
            [("gen_ai.output.messages", asked), ("gen_ai.input.messages", answered)], start=2
        ):
            chat = {"gen_ai.operation.name": "chat", "gen_ai.request.model": "gpt-4o",
                    "gen_ai.usage.input_tokens": 3, "gen_ai.usage.output_tokens": 2}  # fmt: skip
            spans.append(span(number, 1, "chat", chat if as_event else {**chat, key: value}))
            if as_event:
                details = decode.Event(dialects.OPERATION_DETAILS, 0, {key: value})
                spans[-1].events = [details]
        return dialects.rewrite(spans)

    [run] = mapping.map_trace(trace(as_event=True))
    assert run == mapping.map_trace(trace(as_event=False))[0]
    assert [(s.tool_name, s.tool_input, s.tool_output) for s in run.steps] == [
        ("search", b'{"q": "keel"}', b'"found"')
    ]
    own = span(9, None, "chat", {"gen_ai.operation.name": "chat", "gen_ai.output.messages": "[]"})
    own.events = [decode.Event(dialects.OPERATION_DETAILS, 0, {"gen_ai.output.messages": "[1]"})]
    [read] = dialects.rewrite([own])
    assert read.attributes["gen_ai.output.messages"] == "[]" and not read.events


# -- instrumentations with words of their own (dialects.py) ------------------------------

DIALECTS = ["logfire_openaiagents_nested", "logfire_openaiagents_handoff",
            "logfire_openaiagents_max_turns", "logfire_langgraph_nested",
            "logfire_langgraph_tool_error", "mlflow_openaiagents_handoff",
            "mlflow_langgraph_nested", "mlflow_openaiagents_loop"]  # fmt: skip


@pytest.mark.parametrize("name", DIALECTS)
def test_dialects_are_rewritten_once_and_stored_as_rewritten(name: str) -> None:
    """What is stored is the rewritten span: decoding it again (a later export of the
    trace maps the stored spans) and rewriting it again change nothing."""
    from keelwave.server.ingest.otlp import dialects, stored

    kept = [
        stored.kept(span) for span in decode.from_json((FIXTURES / f"{name}.json").read_bytes())
    ]
    again = [stored.decode(stored.encode_kept(span)) for span in kept]
    assert dialects.rewrite(again) == kept
    assert runs_of(name, again) == runs_of(name, kept)


def test_mlflow_spans_by_their_span_type() -> None:
    """MLflow Tracing JSON-encodes every value (a string keeps its quotes) and says
    what a span is in mlflow.spanType; its Agents SDK runner span only wraps the runs."""
    [run] = runs_of("mlflow_openaiagents_loop")
    assert run.agent_name == "weather_agent" and run.parent_run_id is None
    assert run.steps[0].tool_input == b'{"city": "Paris", "unit": "celsius"}'
    assert run.steps[0].tool_output == b'"18 degrees celsius in Paris"'
    # The SDK's Response span wraps the client's call (the one with the tokens): one call.
    assert [(c.input_tokens, c.output_tokens) for c in run.calls] == [
        (100, 20), (110, 21), (120, 22), (130, 23)
    ]  # fmt: skip
    [limited] = runs_of("mlflow_openaiagents_max_turns")
    assert limited.error == "Max turns exceeded"  # (its exception.type is empty)
    [graph] = runs_of("mlflow_langgraph_loop")
    assert {(c.provider, c.model) for c in graph.calls} == {("openai", "fake-loop-model")}


def test_logfire_agents_spans_by_their_message_template() -> None:
    """Logfire's OpenAI Agents spans are named by template ("Agent run: {name!r}"); the
    agent's and tool's names are in ``name``, a failure in an ``error`` attribute."""
    runs = {run.agent_name: run for run in runs_of("logfire_openaiagents_nested")}
    assert set(runs) == {"orchestrator", "weather_expert"}
    assert runs["orchestrator"].steps[0].tool_input == b'{"input":"Weather in Oslo?"}'
    [limited] = runs_of("logfire_openaiagents_max_turns")
    assert limited.error == "Max turns exceeded"
    [failed] = runs_of("logfire_openaiagents_tool_error_fatal")
    assert failed.error == (
        "Error in agent run: Error running tool fetch_page: connection refused: "
        "https://example.com/"
    )


def test_langsmith_spans_have_their_metadata_and_errors_read() -> None:
    """LangSmith's OpenTelemetry mode flattens LangChain's metadata into
    langsmith.metadata.*, and sends an error as repr + traceback in one message."""
    [run] = runs_of("logfire_langgraph_tool_error")
    assert run.agent_name == "fetch_agent"
    assert run.error == "RuntimeError: connection refused: https://example.com/"
    assert run.steps[0].error == run.error and run.steps[0].error_traceback
    assert run.steps[0].tool_input == b'{"url":"https://example.com/"}'


# -- OpenLIT, CrewAI, AutoGen (captured) --------------------------------------------------


def test_openlit_spans_of_an_agents_work_are_not_agents_of_their_own() -> None:
    """OpenLIT draws the OpenAI Agents SDK's task and turns, and each step of CrewAI's
    agent executor, as invoke_agent spans naming no agent; and create_react_agent's
    "agent" node as an invoke_agent of LangChain's (twice: LangGraph's scope too)."""
    for name, agent, steps in (
        ("openlit_openaiagents_loop", "weather_agent", 3),
        ("openlit_crewai_loop", "weather_agent", 3),
        ("openlit_langgraph_loop", "weather_agent", 3),
    ):
        [run] = runs_of(name)
        assert (run.agent_name, len(run.steps), len(run.calls)) == (agent, steps, 4), name
    # Graphs without "agent" in their names get no agent span from OpenLIT: one run,
    # from the root, named for its workflow; the inner graph's steps are in it.
    [run] = runs_of("openlit_langgraph_nested")
    assert run.agent_name == "coordinator"
    assert [step.tool_name for step in run.steps] == ["ask_researcher", "lookup"]


def test_a_token_count_request_is_no_model_call() -> None:
    """CrewAI asks OpenAI's /responses/input_tokens before each call; OpenInference's
    OpenAI instrumentor draws each as an LLM span without a model or tokens."""
    [run] = runs_of("crewai_loop")
    assert [c.input_tokens for c in run.calls] == [100, 110, 120, 130]


def test_crewai_told_to_answer_at_its_max_iter_is_a_step_limit() -> None:
    """CrewAI records no error at max_iter: it tells the model to answer without tools.
    The same words in an earlier call (a user's prompt quoting them) end nothing."""
    [run] = runs_of("crewai_max_iter")
    assert run.termination_reason == "max_steps_reached"
    assert run.calls[-1].input_messages and b"absolute best final answer" in (
        run.calls[-1].input_messages
    )
    [clean] = runs_of("crewai_loop")
    assert clean.termination_reason == "clean"


def test_autogen_without_openinference_has_no_arguments_so_no_loop() -> None:
    """AutoGen's own spans name the tool but record neither arguments nor model calls:
    steps without fingerprints, and no loop (docs/otlp.md: add OpenInference's)."""
    [run] = runs_of("autogen_native_loop")
    assert [s.tool_name for s in run.steps] == ["get_weather"] * 3
    assert all(s.fingerprint is None for s in run.steps) and run.loop_step_index is None


def test_steps_a_model_asked_for_get_what_the_tool_returned_from_the_next_prompt() -> None:
    """Without tool spans, a tool's result is only in the prompt of the model call after
    it, by the call's id: a GenAI tool_call_response part, or OpenInference's flattened
    tool message."""
    for name, output in (
        ("openai_client_handloop_agent", b'"18 degrees"'),  # OpenInference
        ("openai_client_genai_handloop_agent", b'"18 degrees"'),  # GenAI
        ("crewai_openllmetry_loop", b'"18 degrees celsius in Paris"'),
        ("openlit_crewai_loop", b'"18 degrees celsius in Paris"'),
        # Anthropic's tool_result blocks, by tool_use_id, in all three instrumentations
        ("anthropic_client_handloop_agent", b'"18 degrees"'),
        ("anthropic_client_openllmetry_handloop_agent", b'"18 degrees"'),
        ("anthropic_client_genai_handloop_agent", b'"18 degrees"'),
    ):
        [run] = runs_of(name)
        assert [step.tool_output for step in run.steps] == [output] * 3, name
    for prefix in ("anthropic_client", "anthropic_client_openllmetry", "anthropic_client_genai"):
        [run] = runs_of(f"{prefix}_handloop_tool_error")
        assert [step.tool_output for step in run.steps] == [
            b'"connection refused"',
            b'"18 degrees"',
            b'"18 degrees"',
        ]
    [failed] = runs_of("crewai_openllmetry_tool_error")
    assert failed.steps[0].tool_output.startswith(b'"Error executing tool: connection refused')


def test_a_tool_result_is_its_own_calls_where_call_ids_repeat() -> None:
    """OpenTelemetry's Google Gen AI instrumentation names each function call by its tool
    and its place in the model's answer (Gemini's calls carry no id): three calls of one
    tool, each alone in its answer, are all ``get_weather_0``. A step's result is the one
    the next prompt added for it, not the last one sent under that id."""
    [run] = runs_of("google_genai_handloop_tool_error")
    assert [step.tool_output for step in run.steps] == [
        b'{"error": "connection refused"}', b'{"result": "18 degrees"}', b'{"result": "18 degrees"}'
    ]  # fmt: skip
    [run] = runs_of("google_genai_handloop_agent")
    assert [step.tool_output for step in run.steps] == [b'{"result": "18 degrees"}'] * 3


def test_a_tool_span_without_arguments_takes_those_of_the_call_that_asked_it() -> None:
    """Where call ids repeat, a tool span that records only the id takes the arguments of
    the model call that asked for it: the last to start before the tool did."""
    spans = decode.from_json((FIXTURES / "google_genai_handloop_agent.json").read_bytes())
    chats = sorted(
        (s for s in spans if s.name.startswith("generate_content")), key=lambda s: s.start_ns
    )
    tools = []
    for number, (chat, city) in enumerate(zip(chats, ("Paris", "Lyon", "Nice"), strict=False)):
        chat.attributes["gen_ai.output.messages"] = json.dumps([{"role": "assistant", "parts": [
            {"type": "tool_call", "id": "get_weather_0", "name": "get_weather",
             "arguments": {"city": city}}]}])  # fmt: skip
        tools.append(dataclasses.replace(
            chat, span_id=bytes([9, 9, 9, 9, 9, 9, 9, number]), name="execute_tool get_weather",
            start_ns=chat.end_ns + 1, end_ns=chat.end_ns + 2, events=[],
            attributes={"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": "get_weather",
                        "gen_ai.tool.call.id": "get_weather_0"},
        ))  # fmt: skip
    [run] = runs_of("google_genai_handloop_agent", spans + tools)
    assert [step.tool_input for step in run.steps] == [
        b'{"city": "Paris"}',
        b'{"city": "Lyon"}',
        b'{"city": "Nice"}',
    ]
    assert run.loop_step_index is None


def test_smolagents_tool_results_are_read_from_its_observations() -> None:
    """smolagents writes a step into the prompt as text: "Calling tools:" with the calls
    (a Python list naming their ids), then "Observation:" with the result. A step of one
    call gets that result; a step of several calls shares one observation, which is
    nobody's alone."""
    [run] = runs_of("smolagents_genai_loop")
    assert [step.tool_output for step in run.steps[:3]] == [b'"18 degrees celsius in Paris"'] * 3
    outer, inner = sorted(runs_of("smolagents_genai_nested"), key=lambda run: run.started_ns)
    assert outer.steps[0].tool_name == "researcher"
    assert b"a keel is the backbone" in outer.steps[0].tool_output.lower()
    assert inner.steps[0].tool_output == b'"keel: the structural backbone of a ship"'

    spans = decode.from_json((FIXTURES / "smolagents_genai_loop.json").read_bytes())
    chats = sorted((s for s in spans if s.name.startswith("chat")), key=lambda s: s.start_ns)
    both = [
        {
            "role": "assistant",
            "parts": [
                {
                    "type": "tool_call",
                    "id": call,
                    "name": "get_weather",
                    "arguments": {"city": city},
                }
            ],
        }  # fmt: skip
        for call, city in (("call_a", "Paris"), ("call_b", "Lyon"))
    ]
    chats[0].attributes["gen_ai.output.messages"] = json.dumps(
        [{"role": "assistant", "parts": both[0]["parts"] + both[1]["parts"]}]
    )
    calling = "Calling tools:\n[{'id': 'call_a', 'type': 'function'}, {'id': 'call_b'}]"
    chats[1].attributes["gen_ai.input.messages"] = json.dumps([
        {"role": "MessageRole.ASSISTANT", "parts": [{"type": "text", "content": calling}]},
        {"role": "MessageRole.USER", "parts": [{"type": "text", "content": "Observation:\nboth"}]},
    ])  # fmt: skip
    [run] = runs_of("smolagents_genai_loop", spans)
    assert [step.tool_output for step in run.steps[:2]] == [None, None]


@pytest.mark.parametrize("name", [*LOOPS, "crewai_openllmetry_tool_error", "haystack_loop"])
def test_mapping_again_with_what_was_remembered_gives_the_same_runs(name: str) -> None:
    """The server maps a trace again each time an export brings more of it, reusing what
    it remembered of the spans it saw (mapping.Memo): the result is the fresh one."""
    spans = decode.from_json((FIXTURES / f"{name}.json").read_bytes())
    memos: dict[bytes, mapping.Memo] = {}
    seen: list[decode.Span] = []
    for part in (spans[: len(spans) // 3], spans[len(spans) // 3 : -2], spans[-2:]):
        seen += part
        runs = []
        for trace in sorted({span.trace_id for span in seen}):
            memo = memos.setdefault(trace, {})
            runs += mapping.map_trace([s for s in seen if s.trace_id == trace], memo)
    assert runs == runs_of(name)


def test_mastra_runs_have_their_input_and_output() -> None:
    """Mastra's exporter keeps a run's prompt and answer in mastra.agent_run.*."""
    [run] = runs_of("mastra_loop")
    assert run.input == b'"Weather in Paris?"'
    assert run.output == b'{"text":"It is 18 degrees in Paris.","files":[]}'


def test_langchain_create_agent_and_its_call_limits() -> None:
    """LangChain 1's create_agent is a graph whose metadata says so
    (ls_integration=langchain_create_agent); its ModelCallLimitMiddleware ends a run
    with an answer of its own, which says why."""
    [run] = runs_of("langchain_openinference_loop")
    assert run.agent_name == "weather_agent" and run.parent_run_id is None
    for name in ("langchain_openinference_step_limit", "langchain_genai_step_limit"):
        [limited] = runs_of(name)
        assert limited.termination_reason == "max_steps_reached"
        assert b"Model call limits exceeded" in limited.output


def test_an_agent_whose_work_hangs_beside_it_has_that_work() -> None:
    """OpenLLMetry draws a graph called in a tool as an empty invoke_agent span, with
    the graph's nodes in an execute_task span beside it: the nodes are that agent's.
    Storage keeps only the name of such a span, which is what the rule reads."""
    from keelwave.server.ingest.otlp import stored

    for name, inner, tool in (
        ("langchain_openllmetry_nested", "weather_expert", "get_weather"),
        ("langgraph_openllmetry_nested", "researcher", "lookup"),
    ):
        spans = decode.from_json((FIXTURES / f"{name}.json").read_bytes())
        for form in (spans, [stored.decode(stored.encode(span)) for span in spans]):
            runs = {run.agent_name: run for run in runs_of(name, form)}
            assert [step.tool_name for step in runs[inner].steps] == [tool], name
            assert len(runs[inner].calls) == 2


def test_openlit_words_that_mislead() -> None:
    """OpenLIT's spans of smolagents' steps, of Google ADK's Runner, of pydantic-ai's
    turns (an execute_tool named for the model) and of AG2's replies (chat spans with
    guessed tokens) are none of what they say; pydantic-ai's execute_task and Agno's
    team workflow are agents."""
    [smol] = runs_of("openlit_smolagents_loop")
    assert smol.agent_name == "weather_agent" and len(smol.calls) == 4
    [adk] = runs_of("openlit_googleadk_loop")
    assert adk.agent_name == "weather_agent" and adk.parent_run_id is None
    [pydantic] = runs_of("openlit_pydanticai_loop")
    assert [s.tool_name for s in pydantic.steps] == ["get_weather"] * 3
    [ag2] = runs_of("openlit_ag2_loop")
    assert [c.input_tokens for c in ag2.calls] == [100, 110, 120, 130]
    team = {run.agent_name: run for run in runs_of("openlit_agno_nested")}
    assert team["researcher"].parent_run_id == team["coordinator"].run_id


def test_a_tool_span_without_arguments_takes_those_the_model_asked_for_by_call_id() -> None:
    """AutoGen's own tool spans record the call's id, not its arguments; the model span
    that asked has both. Fresh, and with the model span arriving after the tools'."""
    [run] = runs_of("openlit_autogen_loop")
    assert [s.tool_input for s in run.steps] == [b'{"city": "Paris", "unit": "celsius"}'] * 3
    assert run.loop_step_index == 1
    spans = decode.from_json((FIXTURES / "openlit_autogen_loop.json").read_bytes())
    tools = [s for s in spans if s.name.startswith("execute_tool")]
    others = [s for s in spans if not s.name.startswith("execute_tool")]
    memo: mapping.Memo = {}
    [early] = mapping.map_trace(tools + [s for s in others if not s.name.startswith("chat")], memo)
    assert all(step.tool_input is None for step in early.steps)
    assert mapping.map_trace(tools + others, memo) == [run]


@pytest.mark.parametrize("name", sorted(path.stem for path in FIXTURES.glob("*.json")))
def test_a_span_as_stored_is_what_it_was(name: str) -> None:
    """Storage keeps only the name, place and ending of a span that is neither agent,
    tool nor model call: every rule must read it the same way stored, or a trace mapped
    again from storage (the next export of it) would change its runs."""
    from keelwave.server.ingest.otlp import conventions, stored

    for span in decode.from_json((FIXTURES / f"{name}.json").read_bytes()):
        again = stored.decode(stored.encode(span))
        assert conventions.role(again) == conventions.role(span), span.name


def test_an_mcp_tool_call_is_one_step_with_the_calls_own_arguments() -> None:
    """OpenLLMetry's MCP client span sits inside the Agents SDK's own tool span: one step,
    not two. Where no framework span wraps it (an agent of one's own), it is the step,
    its {"tool_name", "arguments"} input unwrapped to the call's arguments."""
    [run] = runs_of("openaiagents_mcp_loop")
    assert [step.tool_name for step in run.steps] == ["get_weather"] * 3
    spans = decode.from_json((FIXTURES / "openaiagents_mcp_loop.json").read_bytes())
    by_id = {span.span_id: span for span in spans}
    alone = []
    for span in spans:
        if span.name == "get_weather" and span.scope.startswith("openinference"):
            continue  # (the framework's tool span gone: the MCP call's parent is the turn)
        if span.name == "get_weather.tool":
            span.parent_span_id = by_id[span.parent_span_id].parent_span_id
        alone.append(span)
    [run] = [run for run in runs_of("openaiagents_mcp_loop", alone) if run.steps]
    assert [step.tool_input for step in run.steps] == [b'{"city": "Paris", "unit": "celsius"}'] * 3
    assert run.loop_step_index == 1


def test_openlit_langchain_arguments_written_as_python_are_read_as_the_dict_they_are() -> None:
    """OpenLIT's LangChain tool spans write a call's arguments as a Python dict's repr:
    they are stored and fingerprinted as the canonical JSON of that dict (read as a
    literal only: no code runs), the same bytes as the structured arguments of others."""
    for name in ("langchain_openlit_loop", "openlit_langgraph_loop"):
        [run] = runs_of(name)
        assert [step.tool_input for step in run.steps] == [
            b'{"city": "Paris", "unit": "celsius"}'
        ] * 3, name
    spans = decode.from_json((FIXTURES / "langchain_openlit_loop.json").read_bytes())
    [tool, *_] = [span for span in spans if span.name.startswith("execute_tool")]
    for raw in ("{'a': __import__('os')}", "{'a': " + "[" * 3000 + "]" * 3000 + "}", "['x']"):
        tool.attributes["gen_ai.tool.call.arguments"] = raw
        assert conventions.tool_input(tool) == json.dumps(raw).encode()  # kept as text


def test_an_openai_agents_run_that_raised_on_its_last_model_call_is_not_clean() -> None:
    """The OpenAI Agents SDK raises out of Runner.run when the Responses API answers
    "incomplete" (reason max_output_tokens) and leaves its agent and workflow spans OK;
    only the model span failed. The run ended there, on the model's token limit:
    context_limit, with that call's error. (OpenLLMetry's and v2's instrumentations.)"""
    for name in ("openaiagents_openllmetry_length", "openaiagents_v2_length"):
        [run] = runs_of(name)
        assert run.termination_reason == "context_limit", name
        assert "max_output_tokens" in (run.error or ""), name
        assert [call.status for call in run.calls] == ["ok", "error"], name
        assert [step.error for step in run.steps] == [None], name
    # A failed model call the agent went on from (a step started after it) is not how the
    # run ended: it stays clean, as before.
    spans = decode.from_json((FIXTURES / "openaiagents_openllmetry_length.json").read_bytes())
    [failed] = [span for span in spans if span.status_code == 2]
    [tool] = [span for span in spans if span.name == "get_weather.tool"]
    failed.start_ns, failed.end_ns = tool.start_ns - 2, tool.start_ns - 1
    [run] = runs_of("openaiagents_openllmetry_length", spans)
    assert (run.termination_reason, run.error) == ("clean", None)


def test_openllmetrys_openai_agents_reasoning_tokens_are_read() -> None:
    """OpenLLMetry writes reasoning tokens as gen_ai.usage.reasoning_tokens; they are part
    of the output tokens (OpenAI counts them so, as keelwave does)."""
    [run] = runs_of("openaiagents_openllmetry_length")
    assert [(c.output_tokens, c.reasoning_tokens) for c in run.calls] == [(20, 7), (0, 0)]


def test_a_tripped_input_guardrail_fails_the_run() -> None:
    """The v2 instrumentation leaves invoke_agent OK when an input guardrail trips; the
    SDK's own span right under it (named "unknown") is ERROR, and the run ended there.
    OpenLLMetry's instrumentation sends no sign of it at all (docs/otlp.md, known gaps)."""
    [run] = runs_of("openaiagents_v2_guardrail")
    assert run.termination_reason == "error"
    assert run.error == "Guardrail tripwire triggered: {'guardrail': 'block_everything'}"
    [run] = runs_of("openaiagents_openllmetry_guardrail")
    assert (run.agent_name, run.termination_reason) == ("guarded_agent", "clean")


def test_a_langgraph_workflow_with_model_calls_of_its_own_is_a_run() -> None:
    """A supervisor StateGraph whose router node calls the model, then runs a ReAct agent:
    OpenTelemetry's GenAI instrumentation draws the graph as invoke_workflow, with the
    router's chat span right in it. That workflow is a run (the router's call is its),
    the agent its child, as OpenLLMetry's spans give. A workflow holding only the agent
    (no router call) is no run: the agent's run is the trace's."""
    for name in ("langgraph_genai_supervisor_llm", "langgraph_openllmetry_supervisor_llm"):
        supervisor, researcher = runs_of(name)
        assert (supervisor.agent_name, researcher.agent_name) == ("supervisor", "researcher")
        assert researcher.parent_run_id == supervisor.run_id, name
        assert [call.input_tokens for call in supervisor.calls] == [100], name
        assert [call.input_tokens for call in researcher.calls] == [100, 110], name
        assert [step.tool_name for step in researcher.steps] == ["lookup"], name
    [researcher] = runs_of("langgraph_genai_supervisor")
    assert (researcher.agent_name, researcher.parent_run_id) == ("researcher", None)
    supervisor, researcher = runs_of("langgraph_openllmetry_supervisor")
    assert researcher.parent_run_id == supervisor.run_id and not supervisor.calls


def test_a_langgraph_interrupt_is_no_failure() -> None:
    """interrupt() pauses the graph for a human: the instrumentations record its
    GraphInterrupt as the tool's (and its node's) error, but nothing failed."""
    for name in ("langgraph_genai_interrupt", "langgraph_openllmetry_interrupt"):
        [run] = runs_of(name)
        assert [(s.tool_name, s.error, s.error_traceback) for s in run.steps] == [
            ("approve", None, None)
        ], name
        assert (run.termination_reason, run.error) == ("clean", None), name


def test_openllmetrys_langgraph_tool_output_is_the_messages_content() -> None:
    """OpenLLMetry writes a LangGraph tool's output as LangChain's serialized ToolMessage
    ({"lc": 1, "type": "constructor", …, "kwargs": {"content": …}}): the step's output is
    its content, as OpenTelemetry's GenAI instrumentation gives it."""
    [run] = runs_of("langgraph_openllmetry_loop")
    assert [step.tool_output for step in run.steps] == [b'"18 degrees celsius in Paris"'] * 3
    [genai] = runs_of("langgraph_genai_loop")
    assert [step.tool_output for step in genai.steps] == [step.tool_output for step in run.steps]


def test_a_provisional_run_says_where_it_comes_from() -> None:
    """A run whose agent span has not arrived (OpenLLMetry's LlamaIndex never sends it
    when the run raises) has the trace and the awaited span in its metadata, as it will
    once that span is in (the API's from_spans reads otel.trace_id)."""
    spans = decode.from_json((FIXTURES / "pydanticai_loop.json").read_bytes())
    [agent] = [span for span in spans if span.parent_span_id is None]
    [early] = mapping.map_trace([span for span in spans if span is not agent])
    assert early.provisional and early.ended_ns is None
    [finished] = mapping.map_trace(spans)
    for key in ("otel.trace_id", "otel.span_id", "service.name"):
        assert early.metadata[key] == finished.metadata[key], key


def test_pydantic_ais_reasoning_tokens_are_read_from_its_usage_details() -> None:
    """pydantic-ai writes OpenAI's completion_tokens_details as gen_ai.usage.details.*;
    its output tokens already include the reasoning ones (as OpenAI counts them)."""
    [run] = runs_of("pydanticai_reasoning")
    assert [c.reasoning_tokens for c in run.calls] == [7, 7]
    assert [c.output_tokens for c in run.calls] == [20, 21]
    assert [c.cache_read_tokens for c in run.calls] == [0, 5]
    assert [c.provider for c in run.calls] == ["openai", "openai"]


def test_pydantic_ais_version_2_tool_spans_have_their_arguments_and_results() -> None:
    """InstrumentationSettings(version=2): "running tool" spans with tool_arguments and
    tool_response. The same calls fingerprint as in the default version."""
    [v2], [v5] = runs_of("pydanticai_v2_loop"), runs_of("pydanticai_loop")
    assert [s.tool_output for s in v2.steps] == [b'"18 degrees celsius in Paris"'] * 3
    assert [s.tool_input for s in v2.steps] == [s.tool_input for s in v5.steps]
    [failed] = runs_of("pydanticai_v2_tool_error")
    assert failed.steps[0].tool_output == b'"timeout, try again"'


def test_a_failed_call_is_credited_to_the_model_of_its_invocation_parameters() -> None:
    """OpenInference's OpenAI instrumentor takes llm.model_name from the response: a call
    that failed (HTTP 500, under CrewAI) names its model only in llm.invocation_parameters."""
    agent = span(1, None, "Crew.kickoff", {"openinference.span.kind": "AGENT", "agent.name": "a"})
    parameters = '{"model": "gpt-4o-mini", "tool_choice": "auto"}'
    call = span(2, 1, "ChatCompletion", {"openinference.span.kind": "LLM", "llm.system": "openai",
                                         "llm.invocation_parameters": parameters})  # fmt: skip
    call.status_code, call.status_message = 2, "InternalServerError: Error code: 500"
    [run] = mapping.map_trace([agent, call])
    assert [(c.model, c.provider, c.status) for c in run.calls] == [
        ("gpt-4o-mini", "openai", "error")
    ]
    named = span(2, 1, "ChatCompletion", {**call.attributes, "llm.model_name": "gpt-4o"})
    [run] = mapping.map_trace([agent, named])
    assert [c.model for c in run.calls] == ["gpt-4o"]  # (the response's own word first)
    odd = span(2, 1, "ChatCompletion", {**call.attributes, "llm.invocation_parameters": "{"})
    [run] = mapping.map_trace([agent, odd])
    assert [c.model for c in run.calls] == ["unknown"]


@pytest.mark.parametrize(
    ("written", "provider"),
    [("base_component", "openai"), ("openai_llm", "openai"), ("custom_llm", "openai"),
     ("anthropic", "anthropic"), ("gcp.vertex_ai", "gcp.vertex_ai")],
)  # fmt: skip
def test_openllmetrys_llamaindex_provider_that_is_a_class_name_gives_way(written, provider):
    """OpenLLMetry's LlamaIndex instrumentation writes the LLM class's LlamaIndex
    class_name() as gen_ai.provider.name (base_component for one that does not name
    itself): the model's family says more."""
    agent = span(1, None, "FunctionAgent.workflow", {"traceloop.span.kind": "workflow",
                                                     "traceloop.entity.name": "agent"})  # fmt: skip
    call = span(2, 1, "ScriptLLM.task", {
        "traceloop.span.kind": "task", "gen_ai.operation.name": "chat",
        "gen_ai.provider.name": written, "gen_ai.response.model": "gpt-4o-mini",
        "gen_ai.usage.input_tokens": 1000, "gen_ai.usage.output_tokens": 50})  # fmt: skip
    spans = [agent, call]
    for one in spans:
        one.scope = "opentelemetry.instrumentation.llamaindex"
    [run] = mapping.map_trace(dialects.rewrite(spans))
    assert [c.provider for c in run.calls] == [provider]
    assert dialects.rewrite(spans) == spans  # (idempotent)


@pytest.mark.parametrize(
    "message",
    [
        # openai 3.x puts only the error's message in the exception (Agent Framework's
        # ChatClientException, Semantic Kernel's ServiceResponseException)
        "ChatClientException: service failed to complete the prompt: Error code: 400 - "
        "This model's maximum context length is 128000 tokens. However, your messages "
        "resulted in 131072 tokens.",
        "BadRequestError: prompt is too long: 210000 tokens > 200000 maximum",  # Anthropic
    ],
)
def test_a_run_failed_by_its_prompt_outgrowing_the_context_is_context_limit(message) -> None:
    agent = span(1, None, "invoke_agent a", {"gen_ai.operation.name": "invoke_agent",
                                             "gen_ai.agent.name": "a"})  # fmt: skip
    agent.status_code, agent.status_message = 2, message
    tool = span(2, 1, "execute_tool search", {"gen_ai.operation.name": "execute_tool",
                                               "gen_ai.tool.name": "search"})  # fmt: skip
    [run] = mapping.map_trace([agent, tool])
    assert run.termination_reason == "context_limit"
    assert run.error is not None and message in run.error


def test_agent_frameworks_answer_at_its_function_invocation_limit_is_a_step_limit() -> None:
    """Microsoft Agent Framework's max_iterations / max_function_calls end the run with
    a fixed answer (agent_framework/_tools.py), the agent span OK."""
    said = ("[{\"role\":\"assistant\",\"parts\":[{\"type\":\"text\",\"content\":\"Function "
            "invocation limit reached before a final answer could be produced.\"}]}]")  # fmt: skip
    agent = span(1, None, "invoke_agent a", {"gen_ai.operation.name": "invoke_agent",
                                             "gen_ai.agent.name": "a",
                                             "gen_ai.output.messages": said})  # fmt: skip
    tool = span(2, 1, "execute_tool search", {"gen_ai.operation.name": "execute_tool",
                                               "gen_ai.tool.name": "search"})  # fmt: skip
    [run] = mapping.map_trace([agent, tool])
    assert run.termination_reason == "max_steps_reached"


def test_vercel_ai_cached_and_reasoning_tokens_are_read() -> None:
    """ai 6 writes them as ``ai.usage.inputTokenDetails.cacheReadTokens`` and
    ``ai.usage.outputTokenDetails.reasoningTokens`` (5: ``ai.usage.cachedInputTokens``,
    ``ai.usage.reasoningTokens``), parts of its input and output tokens."""
    [run] = runs_of("vercelai_tied_loop")
    first = run.calls[0]
    assert (first.input_tokens, first.cache_read_tokens) == (1000, 400)
    assert (first.output_tokens, first.reasoning_tokens) == (50, 30)


@pytest.mark.parametrize(
    ("name", "queries", "reason"),
    [("vercelai_tied_loop", ["hull", "keel", "keel", "keel"], "clean"),
     ("vercelai_tied_parallel_loop", ["keel", "b", "keel", "b"], "clean"),
     ("vercelai_tied_step_limit", ["x0", "x1", "x2"], "max_steps_reached"),
     ("vercelai_tied_length", ["a"], "context_limit")],
)  # fmt: skip
def test_spans_that_started_in_the_same_millisecond_keep_the_order_they_ran_in(
    name: str, queries: list[str], reason: str
) -> None:
    """JavaScript's clocks tell milliseconds: with an instant model the AI SDK's tool
    calls start with the model call that asked for them, parallel ones with each other.
    A model call comes before the tools it asked for, in the order it asked, and after
    those whose results its prompt holds; whatever the span ids."""
    spans = decode.from_json((FIXTURES / f"{name}.json").read_bytes())
    for ordered in (spans, spans[::-1]):
        [run] = runs_of(name, ordered)
        assert [json.loads(step.tool_input)["q"] for step in run.steps] == queries
        assert run.termination_reason == reason
        assert [call.step_index for call in run.calls][: len(queries)] == list(
            range(1, len(queries) + 1)
        ) or name == "vercelai_tied_parallel_loop"


# TypeScript frameworks, each through its instrumentation and the JavaScript
# OpenTelemetry SDK (tests/otlp_fixtures/capture/js): an agent "looper" calls search with
# the same arguments three times, then one more tool, with a fake model.
JS_LOOPS = ["openaiagentsjs_loop", "langgraphjs_loop", "openllmetryjs_loop",
            "openaijs_genai_tools_loop", "beeaijs_loop"]  # fmt: skip


@pytest.mark.parametrize("name", JS_LOOPS)
def test_javascript_frameworks_loops_and_the_calls_that_asked_for_each_step(name: str) -> None:
    """JavaScript's spans start in whole milliseconds: a quick tool starts in the
    millisecond of the model call after it, and where no call id tells them apart the
    one that ended first ran first. LangChain.js sends a tool's result as a serialized
    message in an envelope; BeeAI's TypeScript instrumentation a span for every event."""
    [run] = runs_of(name)
    assert [step.tool_name for step in run.steps][:3] == ["search"] * 3 and len(run.steps) == 4
    assert run.loop_step_index == 1 and run.termination_reason == "clean"
    outputs = {step.tool_output for step in run.steps[:3]}
    assert len(outputs) == 1 and b"results for weather in Paris" in outputs.pop()
    assert b'"lc"' not in (run.steps[0].tool_output or b"")
    assert [call.step_index for call in run.calls][:4] == [1, 2, 3, 4]
    # (the hand-written agent span says only its answer; the workflow span of the OpenAI
    # Agents SDK, which wraps its agent, says what the agent was asked and answered)
    assert run.output is not None and (run.input is not None or name.startswith("openaijs"))


def test_a_run_whose_parent_span_is_missing_and_holds_no_work_has_no_parent_yet() -> None:
    """The OpenAI Agents SDK for JavaScript never sends its workflow span when the run
    raised: the agent's parent would be a run that never exists. It has none; if the
    missing span comes and is an agent, the run is its child."""
    [run] = runs_of("openaiagentsjs_max_turns")
    assert run.parent_run_id is None and run.termination_reason == "max_steps_reached"
    outer = span(1, None, "invoke_agent outer", {"gen_ai.operation.name": "invoke_agent",
                                                 "gen_ai.agent.name": "outer"})  # fmt: skip
    inner = span(2, 1, "invoke_agent inner", {"gen_ai.operation.name": "invoke_agent",
                                              "gen_ai.agent.name": "inner"})  # fmt: skip
    tool = span(3, 2, "execute_tool t", {"gen_ai.operation.name": "execute_tool",
                                         "gen_ai.tool.name": "t"})  # fmt: skip
    [alone] = mapping.map_trace([inner, tool])
    assert alone.agent_name == "inner" and alone.parent_run_id is None
    both = {run.agent_name: run for run in mapping.map_trace([outer, inner, tool])}
    assert both["inner"].parent_run_id == both["outer"].run_id


def test_google_adk_for_typescript_model_calls_are_its_call_llm_spans() -> None:
    """ADK for TypeScript sends no span for the model call inside its ``call_llm``
    turn, which carries the model, the tokens and the finish reasons (and names ADK,
    not the model's maker, as the system)."""
    [run] = runs_of("adkjs_loop")
    assert [step.step_index for step in run.steps] == [1, 2, 3] and run.loop_step_index == 1
    assert [call.step_index for call in run.calls] == [1, 2, 3, None]
    assert sum(call.input_tokens for call in run.calls) == 460
    assert {(call.provider, call.model) for call in run.calls} == {("google", "gemini-2.5-flash")}
    [cut] = runs_of("adkjs_length")  # (its last call finished at "max_tokens")
    assert cut.termination_reason == "context_limit"
    nested = {run.agent_name: run for run in runs_of("adkjs_nested")}
    parent = nested["coordinator"].run_id
    assert nested["helper"].parent_run_id == nested["billing"].parent_run_id == parent
    assert all(len(run.calls) == 2 for run in nested.values())


def test_strands_for_typescript() -> None:
    """Its MaxTokensError is a context limit; its default dialect says a run's input and
    output in span events; its Swarm hands off by a structured answer naming the next
    agent (``agentId``)."""
    for name in ("strandsjs_length", "strandsjs_latest_length"):
        [run] = runs_of(name)
        assert run.termination_reason == "context_limit", name
    [run] = runs_of("strandsjs_loop")
    assert run.input == b'[{"text":"what is keelwave?"}]'
    assert run.output == b'"final: keelwave is a tool"'
    assert {call.provider for call in run.calls} == {"openai"}
    swarm = {run.agent_name: run for run in runs_of("strandsjs_swarm")}
    assert swarm["billing"].parent_run_id == swarm["triage"].run_id
