"""What the read API answers, as msgspec Structs.

Handlers build their answers through these types (``responses.respond``), so
a field that changes type or goes missing fails loudly in the tests instead of
drifting, and the API document (docs/openapi.json) is generated from them.
Docstrings and field descriptions here are what readers of that document see.
Every field is always present in an answer: none has a default.
"""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Annotated, Any, Literal

from msgspec import Meta, Struct

from keelwave.protocol import CALL_STATUSES, STEP_TYPES, TERMINATION_REASONS

Time = Annotated[datetime, Meta(tz=True)]
Count = Annotated[int, Meta(ge=0)]
Rate = Annotated[
    float | None,
    Meta(description="part / whole, from 0 to 1; null when the whole is 0"),
]
Cost = Annotated[float, Meta(description="US dollars")]
Millis = Annotated[float | None, Meta(description="milliseconds")]
JSONValue = Annotated[Any, Meta(description="Any JSON value, as it was sent")]
TerminationReason = Literal[TERMINATION_REASONS]  # type: ignore[valid-type]
RunStatus = Literal["running", "stalled", "finished"]

RUN_STATUSES: tuple[str, ...] = ("running", "stalled", "finished")


class Me(Struct):
    """The calling key: its project and scope."""

    project_id: uuid.UUID
    project: str
    scope: Literal["ingest", "read", "all"]
    key_id: uuid.UUID


class LoopGroup(Struct):
    """Steps of a run that share one fingerprint: the same tool with byte-identical input."""

    fingerprint: Annotated[str, Meta(description="The SHA-256 digest, standard base64")]
    hits: Annotated[int, Meta(ge=2, description="How many steps share the fingerprint")]
    step_indices: Annotated[
        list[int], Meta(description="Their step_index values, ascending: the first began it")
    ]
    tool_name: str


FindingKind = Literal["exact_loop", "cycle", "near_duplicate", "no_progress"]


class FindingRecord(Struct):
    """A way the run repeats itself, found by the server from its stored steps."""

    kind: Annotated[
        FindingKind,
        Meta(
            description="exact_loop: one /loops group; cycle: k distinct calls repeated back "
            "to back; near_duplicate: one tool's inputs equal once normalised; no_progress: "
            "one tool's outputs unchanged while its inputs change"
        ),
    ]
    began_at_step: Annotated[int, Meta(description="The first step of the pattern")]
    step_indices: list[int]
    tool_names: list[str]
    hits: Annotated[int, Meta(description="Repetitions (cycle) or calls (the others)")]
    detail: str


class Run(Struct, kw_only=True):
    """A run as listed: one execution of an agent, with its counters."""

    id: uuid.UUID
    agent_name: str
    parent_run_id: uuid.UUID | None
    status: Annotated[
        RunStatus,
        Meta(description="finished once it ended; stalled when silent for stall_after_seconds"),
    ]
    started_at: Time
    ended_at: Time | None
    duration_ms: Millis
    termination_reason: TerminationReason | None
    loop_detected: Annotated[bool, Meta(description="As the SDK reported it at finish")]
    loop_step_index: Annotated[int | None, Meta(description="Where the loop began")]
    detected_loop: Annotated[
        bool,
        Meta(description="The server's verdict: an exact_loop or cycle finding on its steps"),
    ]
    detected_loop_step_index: Annotated[
        int | None, Meta(description="The first step of the earliest such finding")
    ]
    findings: Annotated[
        list[FindingKind], Meta(description="The kinds of the server's findings on the run")
    ]
    step_count: Count
    input_tokens: Count
    output_tokens: Count
    cost_usd: Cost
    llm_calls: Count
    error: str | None
    tags: list[str]
    last_activity_at: Time
    child_count: Annotated[int, Meta(ge=0, description="Runs whose parent_run_id is this run")]
    from_spans: Annotated[
        bool,
        Meta(
            description="The run came as OpenTelemetry spans (POST /v1/traces): no agent "
            "reported loop_detected, the server set it from the stored fingerprints"
        ),
    ]


Traceback = Annotated[
    str | None,
    Meta(
        description="The formatted traceback of the exception, as the SDK or exporter sent "
        "it (at most 16 KiB: earlier lines cut); null when none was sent"
    ),
]


class RunDetail(Run, kw_only=True):
    """One run with its payloads, its loops (from the stored steps) and its child runs."""

    error_traceback: Traceback
    input: JSONValue
    output: JSONValue
    metadata: JSONValue
    loop_groups: list[LoopGroup]
    child_runs: list[uuid.UUID]


class StepRecord(Struct, kw_only=True):
    """A stored step, with the loop it belongs to, if any."""

    step_index: int
    step_type: Literal[STEP_TYPES]  # type: ignore[valid-type]
    tool_name: str | None
    tool_input: JSONValue
    tool_output: JSONValue
    content: str | None
    fingerprint: Annotated[str | None, Meta(description="standard base64; null without tool")]
    in_loop: bool
    loop_hits: Annotated[int, Meta(ge=0, description="Steps sharing its fingerprint, if 2+")]
    started_at: Time
    duration_ms: Millis
    error: str | None
    error_traceback: Traceback


class ModelCallRecord(Struct, kw_only=True):
    """A stored model call, with its cost (as sent, or priced from its tokens)."""

    id: uuid.UUID
    step_index: int | None
    provider: str
    model: str
    input_tokens: Count
    output_tokens: Count
    cache_read_tokens: Count
    reasoning_tokens: Count
    cost_usd: Annotated[float | None, Meta(description="US dollars; null for unknown models")]
    latency_ms: Millis
    status: Literal[CALL_STATUSES]  # type: ignore[valid-type]
    error: str | None
    started_at: Time
    input_messages: Annotated[
        Any, Meta(description="The prompt, as sent (any JSON); null unless content was captured")
    ]
    output_messages: Annotated[
        Any, Meta(description="The response, as sent (any JSON); null unless content was captured")
    ]


class FindingCounts(Struct, kw_only=True):
    """How many runs have a finding of each kind."""

    exact_loop: Count
    cycle: Count
    near_duplicate: Count
    no_progress: Count


class WindowSummary(Struct, kw_only=True):
    """Counters of the runs that started in [since, until)."""

    since: Time
    until: Time
    runs: Count
    loop_runs: Count
    loop_rate: Rate
    detected_loop_runs: Annotated[int, Meta(ge=0, description="Runs the server found looping")]
    detected_loop_rate: Rate
    findings: FindingCounts
    error_runs: Count
    error_rate: Rate
    stalled_runs: Count
    finished_runs: Count
    p50_duration_ms: Millis
    p95_duration_ms: Millis
    avg_steps: Annotated[float | None, Meta(description="null when there are no runs")]
    llm_calls: Count
    input_tokens: Count
    output_tokens: Count
    cost_usd: Cost


class Summary(Struct):
    current: WindowSummary
    previous: Annotated[WindowSummary, Meta(description="The window of the same length before")]


class AgentHealth(Struct, kw_only=True):
    """One agent's runs in the window."""

    agent_name: str
    runs: Count
    loop_runs: Count
    loop_rate: Rate
    detected_loop_runs: Count
    detected_loop_rate: Rate
    findings: FindingCounts
    error_runs: Count
    error_rate: Rate
    stalled_runs: Count
    p95_duration_ms: Millis
    avg_steps: float | None
    input_tokens: Count
    output_tokens: Count
    cost_usd: Cost
    last_run_at: Time


class TimeBucket(Struct, kw_only=True):
    """The runs that started in one bucket of the time series."""

    start: Time
    runs: Count
    loop_runs: Count
    detected_loop_runs: Count
    error_runs: Count
    finished_runs: Count
    steps: Count
    input_tokens: Count
    output_tokens: Count
    cost_usd: Cost


class TerminationCount(Struct):
    termination_reason: Annotated[
        TerminationReason | None, Meta(description="null counts the runs not finished yet")
    ]
    count: Count


class ToolStats(Struct, kw_only=True):
    """One tool's calls in the runs that started in the window."""

    tool_name: str
    calls: Count
    runs: Count
    repeated_calls: Annotated[int, Meta(ge=0, description="Calls repeating an earlier one")]
    repeat_rate: Rate
    error_calls: Count
    error_rate: Rate
    p50_duration_ms: Millis
    p95_duration_ms: Millis


# Answers: what a handler returns, the envelope included.

NextCursor = Annotated[str | None, Meta(description="Pass as cursor for the next page")]


class MeResponse(Struct):
    data: Me


class LoopsResponse(Struct):
    data: list[LoopGroup]


class FindingsResponse(Struct):
    data: list[FindingRecord]


class RunListResponse(Struct):
    data: list[Run]
    next_cursor: NextCursor


class RunDetailResponse(Struct):
    data: RunDetail


class StepListResponse(Struct):
    data: list[StepRecord]
    next_cursor: NextCursor


class ModelCallListResponse(Struct):
    data: list[ModelCallRecord]


class SummaryResponse(Struct):
    data: Summary


class HealthResponse(Struct):
    data: list[AgentHealth]
    since: Time
    until: Time


class TimeseriesResponse(Struct):
    data: list[TimeBucket]
    bucket_seconds: int
    since: Time
    until: Time


class TerminationsResponse(Struct):
    data: list[TerminationCount]
    since: Time
    until: Time


class ToolsResponse(Struct):
    data: list[ToolStats]
    since: Time
    until: Time
    counted_since: Annotated[
        Time,
        Meta(
            description="The start of the range whose runs are counted: since, or over "
            "7 days or more the nearest whole hour when that hour holds over 200 finished runs"
        ),
    ]
    counted_until: Annotated[Time, Meta(description="The same for until")]
