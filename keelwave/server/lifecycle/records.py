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
import re
import uuid
from collections.abc import Sequence
from datetime import datetime
from typing import Annotated, Any

import msgspec
from msgspec import Meta

from keelwave.server.findings.sketch import stored_sketch
from keelwave.server.ingest.routes import stored_traceback
from keelwave.server.redaction import ServerRedaction
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


# Columns an export leaves out: the project (an import names its own), and what the
# server derives from the other columns when it stores a row (an import derives it
# again, as ingest does).
NOT_EXPORTED = ("project_id", "input_sketch")


def _exported(columns: Columns) -> tuple[tuple[str, str], ...]:
    return tuple(column for column in columns if column[0] not in NOT_EXPORTED)


COLUMNS: dict[str, tuple[tuple[str, str], ...]] = {
    "run": _exported(statements.RUN_COLUMNS) + FINISH_COLUMNS,
    "step": _exported(statements.STEP_COLUMNS),
    "model_call": _exported(statements.TRACE_COLUMNS),
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


_TYPES: dict[str, Any] = {
    "uuid": uuid.UUID, "timestamptz": Annotated[datetime, Meta(tz=True)], "json": msgspec.Raw,
    "bytea": bytes, "text[]": list[str], "int4": int, "int8": int, "float8": float,
    "bool": bool, "text": str,
}  # fmt: skip


def _record_type(kind: str) -> type[msgspec.Struct]:
    """A Struct with every column of ``kind``, all optional: one decode reads a line (a
    bytea column is base64 in JSON, which msgspec reads as bytes)."""
    fields = [
        (name, _TYPES[sql_type] | None if sql_type != "json" else msgspec.Raw, None)
        for name, sql_type in COLUMNS[kind]
    ]
    return msgspec.defstruct(kind.title().replace("_", ""), fields, tag=kind, tag_field="kind")


class _End(msgspec.Struct, tag="end", tag_field="kind"):
    runs: int
    steps: int
    model_calls: int


_RECORD_TYPES = {kind: _record_type(kind) for kind in KINDS}
_line_decoder = msgspec.json.Decoder(
    _RECORD_TYPES["run"] | _RECORD_TYPES["step"] | _RECORD_TYPES["model_call"] | _End  # type: ignore[operator]
)
_header_decoder = msgspec.json.Decoder(dict[str, Any])
_PATH = re.compile(r" - at `\$\.([A-Za-z_]+)`$")


def decode_lines(
    lines: Sequence[bytes], first_line: int, project: uuid.UUID, rules: ServerRedaction
) -> Batch:
    """Rows from exported lines numbered from ``first_line``; raises BadRecord.

    Payloads go through the project's redaction rules, as everything stored does; a
    step keeps the fingerprint it was exported with (taken over its input as first
    sent), so the imported runs have the loops the exported ones had."""
    batch = Batch()
    finish_at = len(COLUMNS["run"]) - len(FINISH_COLUMNS)
    for number, line in enumerate(lines, first_line):
        if not line.strip():
            continue
        try:
            record = _line_decoder.decode(line)
        except msgspec.ValidationError as error:
            if b'"keelwave_export"' in line[:40]:
                _check_version(line, number)
                continue
            raise _bad(number, str(error)) from None
        except msgspec.DecodeError as error:
            raise BadRecord(f"line {number}: not a JSON object ({error})") from None
        if isinstance(record, _End):
            batch.ended = {"runs": record.runs, "steps": record.steps,
                           "model_calls": record.model_calls}  # fmt: skip
            continue
        kind = type(record).__struct_config__.tag
        values = _values(kind, record, number, rules)
        if kind == "run":
            batch.runs.append((project, *values[:finish_at]))
            if values[finish_at + _ENDED_AT] is not None:
                batch.finishes.append((values[0], _finish(values[finish_at:], number)))
        elif kind == "step":
            sketch = stored_sketch(values[_TOOL_NAME], values[_TOOL_INPUT])
            batch.steps.append((project, *values, sketch))
        else:
            batch.traces.append((project, *values))
    return batch


_STEP_NAMES = [name for name, _ in COLUMNS["step"]]
_TOOL_NAME, _TOOL_INPUT = _STEP_NAMES.index("tool_name"), _STEP_NAMES.index("tool_input")
# (a step row is the exported columns, then the sketch: the order statements.py lists)
assert statements.STEP_COLUMNS[-1][0] == "input_sketch"
_FINISH_NAMES = tuple(name for name, _ in FINISH_COLUMNS)
_ENDED_AT = _FINISH_NAMES.index("ended_at")


def _finish(values: list[Any], number: int) -> Finish:
    finish = dict(zip(_FINISH_NAMES, values, strict=True))
    if finish["termination_reason"] is None:
        raise BadRecord(f"line {number}: termination_reason: needed with ended_at")
    if finish["output"] is not None:
        finish["output"] = bytes(finish["output"]).decode("utf-8", "surrogatepass")
    return Finish(**finish)


def _bad(number: int, message: str) -> BadRecord:
    """msgspec's "Expected `int`, got `str` - at `$.step_index`" as "line 3: step_index:
    expected `int`, got `str`"."""
    if match := _PATH.search(message):
        field, message = match.group(1), message[: match.start()]
        if field == "kind":
            return BadRecord(
                f"line {number}: kind must be one of {', '.join(KINDS)} or end ({message})"
            )
        return BadRecord(f"line {number}: {field}: {message[:1].lower()}{message[1:]}")
    if "missing required field `kind`" in message:
        return BadRecord(f"line {number}: kind is missing (one of {', '.join(KINDS)} or end)")
    return BadRecord(f"line {number}: {message}")


def _check_version(line: bytes, number: int) -> None:
    try:
        version = _header_decoder.decode(line).get("keelwave_export")
    except msgspec.DecodeError as error:
        raise BadRecord(f"line {number}: not a JSON object ({error})") from None
    if version != FORMAT_VERSION:
        raise BadRecord(
            f"line {number}: this is export format {version!r}; "
            f"this server reads format {FORMAT_VERSION}"
        )


_TEXT_RULES = {"content", "error"}  # free text the rules redact as text

# What a field left out (or null) means, where the table does not take NULL: what
# ingest assumes when a client leaves it out.
DEFAULTS: dict[str, dict[str, Any]] = {
    "run": {"tags": []},
    "step": {},
    "model_call": {"input_tokens": 0, "output_tokens": 0, "cache_read_tokens": 0,
                   "reasoning_tokens": 0, "status": "ok"},
}  # fmt: skip
REQUIRED = {
    "run": ("id", "agent_name", "started_at"),
    "step": ("run_id", "step_index", "step_type", "started_at"),
    "model_call": ("id", "provider", "model", "started_at"),
}
# Per kind, the positions (in column order) that need more than the decoded value:
# JSON payloads and free text to redact, defaults to fill in, fields that must be there.
_JSON = {kind: [i for i, (_, t) in enumerate(COLUMNS[kind]) if t == "json"] for kind in KINDS}
_TEXT = {kind: [i for i, (n, _) in enumerate(COLUMNS[kind]) if n in _TEXT_RULES] for kind in KINDS}
_TRACEBACKS = {
    kind: [i for i, (n, _) in enumerate(COLUMNS[kind]) if n == "error_traceback"] for kind in KINDS
}
_DEFAULTS = {
    kind: [(i, DEFAULTS[kind][n]) for i, (n, _) in enumerate(COLUMNS[kind]) if n in DEFAULTS[kind]]
    for kind in KINDS
}
_REQUIRED = {
    kind: [(i, n) for i, (n, _) in enumerate(COLUMNS[kind]) if n in REQUIRED[kind]]
    for kind in KINDS
}


def _values(kind: str, record: Any, number: int, rules: ServerRedaction) -> list[Any]:
    values = list(msgspec.structs.astuple(record))  # in column order, decoded
    for index, name in _REQUIRED[kind]:
        if values[index] is None:
            raise BadRecord(f"line {number}: {name} is missing")
    for index in _JSON[kind]:
        raw = values[index]
        if raw is not None:
            raw = bytes(raw)
            values[index] = None if raw == b"null" else rules.json_payload(raw)
    for index in _TEXT[kind]:
        if values[index] is not None:
            values[index] = rules.text(values[index])
    for index in _TRACEBACKS[kind]:  # kept as ingest keeps them: bounded, redacted
        values[index] = stored_traceback(values[index], rules)
    for index, default in _DEFAULTS[kind]:
        if values[index] is None:
            values[index] = default
    return values
