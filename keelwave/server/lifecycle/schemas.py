"""What the lifecycle API takes and answers (msgspec types; the API document is made
from them)."""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Annotated, Any

from msgspec import UNSET, Meta, Struct, UnsetType

from keelwave.protocol import NAME_MAX_LENGTH

Time = Annotated[datetime, Meta(tz=True)]
Count = Annotated[int, Meta(ge=0)]
Days = Annotated[int, Meta(ge=1, le=36_500, description="Days, 1 to 36,500")]


class RunSelector(Struct, forbid_unknown_fields=True):
    """Which runs to delete: those matching every criterion given (at least one)."""

    agent_name: (
        Annotated[str, Meta(min_length=1, max_length=NAME_MAX_LENGTH, description="This agent's")]
        | None
    ) = None
    metadata: (
        Annotated[
            dict[str, Any],
            Meta(
                min_length=1,
                description="Runs whose metadata holds these keys with these values "
                '(JSON containment: {"user_id": "u-42"} matches any run whose metadata '
                'has "user_id": "u-42", whatever else it has)',
            ),
        ]
        | None
    ) = None
    before: (
        Annotated[
            datetime,
            Meta(description="Runs that started before this time (ISO 8601; no offset: UTC)"),
        ]
        | None
    ) = None


class Deleted(Struct, kw_only=True):
    """How much went: runs, and their steps and model calls (alert events about them and
    their OTLP spans go too)."""

    runs: Count
    steps: Count
    model_calls: Count


class DeletedResponse(Struct):
    data: Deleted


class ProjectChange(Struct, forbid_unknown_fields=True):
    """What PATCH changes; fields left out stay as they are."""

    retention_days: (
        Annotated[
            Days | None,
            Meta(description="Keep runs this many days after they started; null: forever"),
        ]
        | UnsetType
    ) = UNSET
    redaction_patterns: (
        Annotated[
            list[str],
            Meta(
                max_length=50,
                description="Regular expressions (Python syntax) whose matches are replaced "
                'with "[REDACTED]" in every string of this project\'s payloads before they '
                "are stored, on top of the built-in rules; [] leaves the built-in rules alone",
            ),
        ]
        | UnsetType
    ) = UNSET


class ProjectSettings(Struct, kw_only=True):
    """A project, how long it keeps its data and what it redacts."""

    id: uuid.UUID
    name: str
    created_at: Time
    retention_days: Annotated[
        int | None,
        Meta(description="Runs are deleted this many days after they started; null: never"),
    ]
    retention_enforced_at: Annotated[
        Time | None, Meta(description="When retention was last enforced on this project")
    ]
    redaction_patterns: Annotated[
        list[str],
        Meta(description="The project's own redaction patterns, applied after the built-in rules"),
    ]


class ProjectResponse(Struct):
    data: ProjectSettings
