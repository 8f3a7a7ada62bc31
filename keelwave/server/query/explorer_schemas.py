"""What the run explorer's routes answer: a run's timeline, two runs compared, cost.

Like schemas.py (whose types these build on), every field is always present,
and the API document is generated from these types.
"""

from __future__ import annotations

import uuid
from typing import Annotated, Literal

from msgspec import Meta, Struct

from keelwave.server.query.schemas import (
    Cost,
    Count,
    FindingKind,
    Millis,
    ModelCallRecord,
    NextCursor,
    RunStatus,
    StepRecord,
    TerminationReason,
    Time,
)

EndedAt = Annotated[Time | None, Meta(description="started_at + duration_ms; null while unknown")]


class TimelineStep(StepRecord, kw_only=True, tag_field="kind", tag="step"):
    """A step of the run, as /steps gives it."""

    ended_at: EndedAt


class TimelineModelCall(ModelCallRecord, kw_only=True, tag_field="kind", tag="model_call"):
    """A model call of the run, as /llm gives it; its duration is its latency."""

    duration_ms: Millis
    ended_at: EndedAt


class TimelineChildRun(Struct, kw_only=True, tag_field="kind", tag="child_run"):
    """A run started by this one (its parent_run_id), with the fields of a runs-list row."""

    run_id: uuid.UUID
    agent_name: str
    parent_run_id: uuid.UUID | None
    status: RunStatus
    started_at: Time
    ended_at: Time | None
    duration_ms: Millis
    termination_reason: TerminationReason | None
    loop_detected: bool
    loop_step_index: int | None
    detected_loop: bool
    detected_loop_step_index: int | None
    findings: list[FindingKind]
    step_count: Count
    input_tokens: Count
    output_tokens: Count
    cost_usd: Cost
    llm_calls: Count
    error: str | None
    tags: list[str]
    last_activity_at: Time
    child_count: Count
    from_spans: bool


TimelineItem = TimelineStep | TimelineModelCall | TimelineChildRun


class TimelineResponse(Struct):
    data: Annotated[
        list[TimelineItem],
        Meta(
            description="By started_at; at one moment steps, then model calls, then child "
            "runs; then by step_index or id"
        ),
    ]
    next_cursor: NextCursor


class RunSummary(Struct, kw_only=True):
    """One side of a comparison."""

    id: uuid.UUID
    agent_name: str
    started_at: Time
    duration_ms: Millis
    termination_reason: TerminationReason | None
    status: RunStatus
    step_count: Count
    input_tokens: Count
    output_tokens: Count
    cost_usd: Cost
    llm_calls: Count


AlignmentStatus = Literal["same", "changed_input", "changed_output", "only_a", "only_b"]


class AlignedStep(Struct, kw_only=True):
    """A step of a, of b, or of both, aligned by (step_type, tool_name)."""

    status: Annotated[
        AlignmentStatus,
        Meta(
            description="same: equal input and output; changed_input: the input differs; "
            "changed_output: only the output differs; only_a / only_b: no counterpart"
        ),
    ]
    a: StepRecord | None
    b: StepRecord | None


class Difference(Struct):
    a: float | None
    b: float | None
    delta: Annotated[float | None, Meta(description="b - a; null when either is")]


class ComparisonTotals(Struct, kw_only=True):
    step_count: Difference
    input_tokens: Difference
    output_tokens: Difference
    cost_usd: Difference
    duration_ms: Difference
    llm_calls: Difference


class Comparison(Struct, kw_only=True):
    a: RunSummary
    b: RunSummary
    aligned: Annotated[
        Literal["lcs", "greedy"],
        Meta(
            description="lcs: a longest common subsequence of the steps' keys; greedy: a "
            "linear alignment, for runs too long for lcs"
        ),
    ]
    steps: list[AlignedStep]
    totals: ComparisonTotals


class ComparisonResponse(Struct):
    data: Comparison


GroupBy = Literal["model", "agent"]
Unit = Literal["hour", "day"]


class CostTotal(Struct, kw_only=True):
    key: Annotated[str, Meta(description="The model or the agent")]
    cost_usd: Cost
    input_tokens: Count
    output_tokens: Count
    calls: Annotated[int, Meta(ge=0, description="Model calls")]


class CostPoint(Struct, kw_only=True):
    bucket_start: Time
    key: Annotated[str, Meta(description="One of the top 8 keys, or other")]
    cost_usd: Cost


class CostReport(Struct, kw_only=True):
    group_by: GroupBy
    bucket: Annotated[Unit, Meta(description="UTC hours or days")]
    since: Time
    until: Time
    totals: Annotated[list[CostTotal], Meta(description="Every key, the highest cost first")]
    series: Annotated[
        list[CostPoint],
        Meta(description="Per bucket with any calls: the top 8 keys, and other for the rest"),
    ]


class CostResponse(Struct):
    data: CostReport
