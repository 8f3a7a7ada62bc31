"""The export format: a project's runs, steps and model calls as JSON lines, and back.

One JSON object a line (``keelwave export``, ``GET /v1/projects/{p}/export``):

* a header, ``{"keelwave_export": 1, "project": …, "exported_at": …, "since": …, "until": …}``;
* ``{"kind": "run", …}``: a run's columns, the finish included once it ended;
* ``{"kind": "step", …}``: a step, with the ``input_fingerprint`` the server computed
  when it came (standard base64), so that an import finds the very loops the export
  had even where the stored input is redacted;
* ``{"kind": "model_call", …}``;
* a trailer, ``{"kind": "end", "runs": n, "steps": n, "model_calls": n}``, which tells
  an import that nothing was cut off.

Runs come in batches by start time, each batch followed by its steps and then its
model calls (model calls sent without a run last). The fields of each kind are the
columns the writer stores (store/statements.py): a column added there is exported
and imported without a change here. JSON payloads are copied as the very text that
is stored, whitespace and key order included.
"""

from __future__ import annotations

import base64
import dataclasses
import uuid
from collections.abc import Sequence
from datetime import datetime
from typing import Any

import msgspec

from keelwave.server.ingest.redaction import ServerRedaction
from keelwave.server.store import statements
from keelwave.server.store.lifecycle import Finish

FORMAT_VERSION = 1
KINDS = ("run", "step", "model_call")

Columns = Sequence[tuple[str, str]]  # (name, PostgreSQL type), as statements.py lists them

# The finish lives on the run row; its fields are the run's column names.
FINISH_COLUMNS: tuple[tuple[str, str], ...] = tuple(
    (field.name, {"ended_at": "timestamptz", "loop_detected": "bool",
                  "loop_step_index": "int4", "output": "json"}.get(field.name, "text"))
    for field in dataclasses.fields(Finish)
)  # fmt: skip


def _without_project(columns: Columns) -> tuple[tuple[str, str], ...]:
    return tuple(column for column in columns if column[0] != "project_id")


COLUMNS: dict[str, tuple[tuple[str, str], ...]] = {
    "run": _without_project(statements.RUN_COLUMNS) + FINISH_COLUMNS,
    "step": _without_project(statements.STEP_COLUMNS),
    "model_call": _without_project(statements.TRACE_COLUMNS),
}
TABLES = {"run": "agent_runs", "step": "agent_steps", "model_call": "ai_traces"}
# How each kind is read for export, in what order within a batch.
ORDER = {"run": "started_at, id", "step": "run_id, step_index", "model_call": "started_at, id"}


def select_sql(kind: str, where: str) -> str:
    """The SELECT that reads ``kind`` for export: JSON as its stored text, so it is copied
    byte for byte."""
    columns = ", ".join(
        f"{name}::text" if sql_type == "json" else name for name, sql_type in COLUMNS[kind]
    )
    return f"SELECT {columns} FROM {TABLES[kind]} WHERE {where} ORDER BY {ORDER[kind]}"


_encoder = msgspec.json.Encoder()


def header(project_id: str, name: str, since: datetime | None, until: datetime | None) -> bytes:
    return _line(
        {
            "keelwave_export": FORMAT_VERSION,
            "project": {"id": project_id, "name": name},
            "exported_at": datetime.now().astimezone(),
            "since": since,
            "until": until,
        }
    )


def trailer(counts: dict[str, int]) -> bytes:
    return _line({"kind": "end", "runs": counts["run"], "steps": counts["step"],
                  "model_calls": counts["model_call"]})  # fmt: skip


def encode(kind: str, row: Sequence[Any]) -> bytes:
    """One exported line from a row of select_sql(kind)."""
    record: dict[str, Any] = {"kind": kind}
    for (name, sql_type), value in zip(COLUMNS[kind], row, strict=True):
        if value is None:
            record[name] = None
        elif sql_type == "json":
            record[name] = msgspec.Raw(value.encode("utf-8", "surrogatepass"))
        elif sql_type == "bytea":
            record[name] = base64.b64encode(value).decode()
        else:
            record[name] = value
    if kind == "run" and record.get("ended_at") is None:
        for name, _ in FINISH_COLUMNS:  # not finished: no finish to carry
            record.pop(name, None)
    return _line(record)


def _line(record: dict[str, Any]) -> bytes:
    return _encoder.encode(record) + b"\n"


# -- import --------------------------------------------------------------------------


class BadRecord(ValueError):
    """A line that cannot be imported; the message names the line and the field."""


@dataclasses.dataclass
class Batch:
    """Rows for the writer (in statements.py's column order) and finishes, from lines."""

    runs: list[tuple] = dataclasses.field(default_factory=list)
    steps: list[tuple] = dataclasses.field(default_factory=list)
    traces: list[tuple] = dataclasses.field(default_factory=list)
    finishes: list[tuple[uuid.UUID, Finish]] = dataclasses.field(default_factory=list)
    ended: dict[str, int] | None = None  # the trailer's counts, when the batch holds it

    def __len__(self) -> int:
        return len(self.runs) + len(self.steps) + len(self.traces)


_raw_fields = msgspec.json.Decoder(dict[str, msgspec.Raw])


def decode_lines(
    lines: Sequence[bytes], first_line: int, project: uuid.UUID, rules: ServerRedaction
) -> Batch:
    """Rows from exported lines numbered from ``first_line``; raises BadRecord.

    Payloads go through the project's redaction rules, as everything stored does; a
    step keeps the fingerprint it was exported with (taken over its input as first
    sent), so the imported runs have the loops the exported ones had."""
    batch = Batch()
    for number, line in enumerate(lines, first_line):
        if not line.strip():
            continue
        try:
            fields = _raw_fields.decode(line)
        except msgspec.DecodeError as error:
            raise BadRecord(f"line {number}: not a JSON object ({error})") from None
        if "keelwave_export" in fields:
            _check_version(fields, number)
            continue
        kind = _plain(fields, "kind", number)
        if kind == "end":
            batch.ended = {key: _plain(fields, key, number) for key in ("runs", "steps",
                                                                         "model_calls")}  # fmt: skip
            continue
        if kind not in KINDS:
            raise BadRecord(
                f"line {number}: kind must be one of {', '.join(KINDS)} or end, not {kind!r}"
            )
        values = _values(kind, fields, number, rules)
        if kind == "run":
            run = values[: len(values) - len(FINISH_COLUMNS)]
            batch.runs.append((project, *run))
            finish = dict(zip((n for n, _ in FINISH_COLUMNS), values[len(run) :], strict=True))
            if finish["ended_at"] is not None:
                if finish["termination_reason"] is None:
                    raise BadRecord(f"line {number}: termination_reason: needed with ended_at")
                if finish["output"] is not None:
                    finish["output"] = bytes(finish["output"]).decode("utf-8", "surrogatepass")
                batch.finishes.append((run[0], Finish(**finish)))
        elif kind == "step":
            batch.steps.append((project, *values))
        else:
            batch.traces.append((project, *values))
    return batch


def _check_version(fields: dict[str, msgspec.Raw], number: int) -> None:
    version = _plain(fields, "keelwave_export", number)
    if version != FORMAT_VERSION:
        raise BadRecord(
            f"line {number}: this is export format {version!r}; "
            f"this server reads format {FORMAT_VERSION}"
        )


def _plain(fields: dict[str, msgspec.Raw], name: str, number: int) -> Any:
    if name not in fields:
        raise BadRecord(f"line {number}: {name} is missing")
    return msgspec.json.decode(fields[name])


_TEXT_RULES = {"content", "error", "error_traceback"}  # free text the rules redact as text


# What a field left out (or null) means, where the table does not take NULL: what
# ingest assumes when a client leaves it out.
DEFAULTS: dict[str, dict[str, Any]] = {
    "run": {"tags": []},
    "step": {},
    "model_call": {"input_tokens": 0, "output_tokens": 0, "cache_read_tokens": 0,
                   "reasoning_tokens": 0, "status": "ok"},
}  # fmt: skip


def _values(
    kind: str, fields: dict[str, msgspec.Raw], number: int, rules: ServerRedaction
) -> list[Any]:
    values = []
    defaults = DEFAULTS[kind]
    for name, sql_type in COLUMNS[kind]:
        raw = fields.get(name)
        if raw is None or bytes(raw) == b"null":
            value = defaults.get(name)
        else:
            try:
                value = _column(sql_type, raw)
            except (ValueError, TypeError, msgspec.ValidationError) as error:
                raise BadRecord(f"line {number}: {name}: {error}") from None
            if sql_type == "json":
                value = rules.json_payload(value)
            elif name in _TEXT_RULES:
                value = rules.text(value)
        values.append(value)
    required = {"run": ("id", "agent_name", "started_at"),
                "step": ("run_id", "step_index", "step_type", "started_at"),
                "model_call": ("id", "provider", "model", "started_at")}[kind]  # fmt: skip
    for name in required:
        if values[[n for n, _ in COLUMNS[kind]].index(name)] is None:
            raise BadRecord(f"line {number}: {name} is missing")
    return values


_TYPES: dict[str, type] = {"int4": int, "int8": int, "float8": float, "bool": bool, "text": str}


def _column(sql_type: str, raw: msgspec.Raw) -> Any:
    if sql_type == "json":
        return bytes(raw)  # as exported: the writer stores these bytes
    if sql_type == "uuid":
        return uuid.UUID(msgspec.json.decode(raw, type=str))
    if sql_type == "timestamptz":
        moment = msgspec.json.decode(raw, type=datetime)
        if moment.tzinfo is None:
            raise ValueError("a time needs its offset (exports write one)")
        return moment
    if sql_type == "bytea":
        return base64.b64decode(msgspec.json.decode(raw, type=str), validate=True)
    if sql_type == "text[]":
        return msgspec.json.decode(raw, type=list[str])
    if sql_type in _TYPES:
        return msgspec.json.decode(raw, type=_TYPES[sql_type])
    raise TypeError(f"cannot import a column of type {sql_type}")
