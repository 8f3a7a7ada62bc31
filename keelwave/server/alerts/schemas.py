"""What the alerts API takes and answers (msgspec types; the API document is made from them)."""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Annotated, Any, Literal

from msgspec import UNSET, Meta, Struct, UnsetType

from keelwave.protocol import NAME_MAX_LENGTH, TERMINATION_REASONS
from keelwave.server.findings import KINDS

Name = Annotated[str, Meta(min_length=1, max_length=NAME_MAX_LENGTH)]
Threshold = Annotated[float, Meta(ge=0, le=1e15)]
Time = Annotated[datetime, Meta(tz=True)]
FindingKind = Literal[KINDS]  # type: ignore[valid-type]
TerminationReason = Literal[TERMINATION_REASONS]  # type: ignore[valid-type]
DestinationKind = Literal["webhook", "slack"]
WINDOWS = {"15m": 15 * 60, "1h": 3600, "24h": 86_400}
WINDOW_METRICS = (
    "loop_rate", "detected_loop_rate", "error_rate", "stalled_runs", "cost_usd",
    "p95_duration_ms", "runs",
)  # fmt: skip


# -- destinations -------------------------------------------------------------------


class NewDestination(Struct, forbid_unknown_fields=True):
    name: Name
    kind: DestinationKind
    url: Annotated[str, Meta(min_length=1, max_length=2048)]
    secret: Annotated[str, Meta(min_length=1, max_length=512)] | None = None


class Destination(Struct, kw_only=True):
    """Where alerts go. The secret is never shown again: only whether there is one."""

    id: uuid.UUID
    name: str
    kind: DestinationKind
    url: str
    has_secret: bool
    created_at: Time


class DestinationResponse(Struct):
    data: Destination


class DestinationListResponse(Struct):
    data: list[Destination]


class TestDelivery(Struct, kw_only=True):
    delivered: bool
    status: Annotated[int | None, Meta(description="The HTTP status answered, if any")]
    error: str | None
    duration_ms: float | None


class TestDeliveryResponse(Struct):
    data: TestDelivery


# -- rules --------------------------------------------------------------------------


class RunMetric(Struct, tag="run", tag_field="type", forbid_unknown_fields=True):
    """A run crosses a threshold, while it runs or when it ends."""

    metric: Literal["steps", "cost_usd", "duration_ms", "tokens"]
    above: Threshold


class FindingCondition(Struct, tag="finding", tag_field="type", forbid_unknown_fields=True):
    """The server finds one of these on a run (exact_loop, cycle, …)."""

    kinds: Annotated[list[FindingKind], Meta(min_length=1)]


class Termination(Struct, tag="termination", tag_field="type", forbid_unknown_fields=True):
    """A run ends for one of these reasons."""

    reasons: Annotated[list[TerminationReason], Meta(min_length=1)]


class Stalled(Struct, tag="stalled", tag_field="type", forbid_unknown_fields=True):
    """A run goes silent for stall_after_seconds without finishing."""


class WindowMetric(Struct, tag="window", tag_field="type", forbid_unknown_fields=True):
    """A metric over the runs that started in the last ``window`` crosses a threshold
    (``below`` only for ``runs``: an agent that stopped running)."""

    metric: Literal[WINDOW_METRICS]  # type: ignore[valid-type]
    window: Literal["15m", "1h", "24h"]
    above: Threshold | None = None
    below: Threshold | None = None


Condition = RunMetric | FindingCondition | Termination | Stalled | WindowMetric


class Scope(Struct, forbid_unknown_fields=True, frozen=True):
    agent_name: Name | None = None


class NewRule(Struct, forbid_unknown_fields=True):
    name: Name
    destination_id: uuid.UUID
    condition: Condition
    scope: Scope = Scope()
    cooldown_seconds: Annotated[int, Meta(ge=0, le=30 * 86_400)] = 0
    enabled: bool = True


class RuleChange(Struct, forbid_unknown_fields=True):
    """What PATCH changes; fields left out stay as they are."""

    name: Name | UnsetType = UNSET
    destination_id: uuid.UUID | UnsetType = UNSET
    condition: Condition | UnsetType = UNSET
    scope: Scope | UnsetType = UNSET
    cooldown_seconds: Annotated[int, Meta(ge=0, le=30 * 86_400)] | UnsetType = UNSET
    enabled: bool | UnsetType = UNSET


class Rule(Struct, kw_only=True):
    id: uuid.UUID
    name: str
    destination_id: uuid.UUID
    scope: Scope
    condition: Condition
    cooldown_seconds: int
    enabled: bool
    created_at: Time
    updated_at: Time


class RuleResponse(Struct):
    data: Rule


class RuleListResponse(Struct):
    data: list[Rule]


# -- events -------------------------------------------------------------------------


class Attempt(Struct, kw_only=True):
    attempt: int
    at: Time
    duration_ms: float | None
    status: Annotated[int | None, Meta(description="The HTTP status answered, if any")]
    error: str | None


class Delivery(Struct, kw_only=True):
    state: Literal["pending", "delivered", "failed"]
    attempts: list[Attempt]
    next_attempt_at: Time | None
    delivered_at: Time | None
    last_error: str | None


class Event(Struct, kw_only=True):
    """An alert that fired (or resolved), and how its delivery went."""

    id: Annotated[uuid.UUID, Meta(description="Also the X-Keelwave-Delivery header")]
    rule_id: uuid.UUID | None
    rule_name: str
    destination_id: uuid.UUID | None
    state: Literal["firing", "resolved"]
    agent_name: str | None
    run_id: uuid.UUID | None
    metric: str
    value: Any
    threshold: Any
    fired_at: Time
    delivery: Delivery


class EventListResponse(Struct):
    data: list[Event]
