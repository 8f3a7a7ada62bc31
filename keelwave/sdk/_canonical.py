"""Tool inputs as canonical JSON text, and their fingerprints.

The text is ``json.dumps(value, sort_keys=True)`` (Python's default
separators and ASCII escaping), as the product documents specify, so the
TypeScript SDK can produce the same bytes. The SDK sends exactly this text as
``tool_input``; the server hashes the bytes it receives, so the server's
fingerprint of an SDK step equals the SDK's.

Values JSON cannot encode never raise into the agent. They are replaced,
deterministically (the same value always gives the same text):

* dataclasses and pydantic models → their fields;
* sets and frozensets → sorted lists (sorted by their canonical text);
* bytes → ``{"$bytes": "<base64>"}``;
* dates, times, UUIDs, decimals, paths, enums → ``str(value)``;
* NaN and ±infinity → the strings ``"NaN"``, ``"Infinity"``, ``"-Infinity"``;
* dictionary keys that are not strings → ``str(key)``;
* a container that contains itself → ``"<cycle>"``;
* anything else → ``"<TypeName>"`` (never its repr, which may hold a memory address).
"""

from __future__ import annotations

import base64
import dataclasses
import datetime
import decimal
import enum
import hashlib
import json
import math
import pathlib
import uuid
from json.encoder import encode_basestring_ascii  # type: ignore[attr-defined]
from typing import Any

try:  # CPython's accelerated encoder; other interpreters use the pure-Python one
    from _json import make_encoder as c_make_encoder
except ImportError:  # pragma: no cover
    c_make_encoder = None

_STR_LIKE = (datetime.date, datetime.time, datetime.timedelta, uuid.UUID, decimal.Decimal,
             pathlib.PurePath)  # fmt: skip


def _replace(value: Any) -> Any:
    """json's ``default`` hook: a JSON-encodable stand-in for ``value``."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {field.name: getattr(value, field.name) for field in dataclasses.fields(value)}
    model_dump = getattr(value, "model_dump", None)
    if callable(model_dump) and not isinstance(value, type):
        try:
            return model_dump(mode="json")
        except Exception:  # a model that cannot dump itself: fall through to its type name
            pass
    if isinstance(value, (set, frozenset)):
        return sorted(value, key=canonical_json)
    if isinstance(value, (bytes, bytearray, memoryview)):
        return {"$bytes": base64.b64encode(bytes(value)).decode("ascii")}
    if isinstance(value, enum.Enum):
        return str(value.value) if isinstance(value.value, (str, int, float)) else value.name
    if isinstance(value, _STR_LIKE):
        return str(value)
    return f"<{type(value).__name__}>"


# json.dumps(value, sort_keys=True) with the fallbacks, built once: constructing
# an encoder per call costs more than the encoding. Where CPython's C encoder is
# there it is called directly (json.dumps makes one per call); without circular
# checks, since a cycle ends in RecursionError and the slow path anyway.
_ENCODER = json.JSONEncoder(sort_keys=True, allow_nan=False, default=_replace)
_C_ENCODER = (
    c_make_encoder(None, _replace, encode_basestring_ascii, None, ": ", ", ", True, False, False)
    if c_make_encoder is not None
    else None
)


def canonical_json(value: Any) -> str:
    """The canonical JSON text of ``value``; never raises."""
    try:
        if _C_ENCODER is not None:
            return "".join(_C_ENCODER(value, 0))
        return _ENCODER.encode(value)
    except (TypeError, ValueError, RecursionError):
        return json.dumps(_sanitise(value, set()), sort_keys=True, allow_nan=False)


def _sanitise(value: Any, seen: set[int]) -> Any:
    """The slow path, for what the fast one refused: odd keys, NaN, cycles, deep nesting."""
    if isinstance(value, float):
        if math.isnan(value):
            return "NaN"
        if math.isinf(value):
            return "Infinity" if value > 0 else "-Infinity"
        return value
    if value is None or isinstance(value, (str, int, bool)):
        return value
    if len(seen) > 500:
        return "<too deep>"
    if id(value) in seen:
        return "<cycle>"
    if isinstance(value, dict):
        seen.add(id(value))
        result = {str(key): _sanitise(item, seen) for key, item in value.items()}
        seen.discard(id(value))
        return result
    if isinstance(value, (list, tuple)):
        seen.add(id(value))
        result = [_sanitise(item, seen) for item in value]
        seen.discard(id(value))
        return result
    replaced = _replace(value)
    if isinstance(replaced, str):
        return replaced
    seen.add(id(value))
    result = _sanitise(replaced, seen)
    seen.discard(id(value))
    return result


def fingerprint(tool_name: str, input_json: str) -> bytes:
    """``sha256(tool_name || 0x00 || tool_input)``, as the server computes it."""
    digest = hashlib.sha256(tool_name.encode("utf-8"))
    digest.update(b"\x00")
    digest.update(input_json.encode("utf-8"))
    return digest.digest()
