"""The fingerprint of record for a step: how loops are recognised.

``sha256(tool_name || 0x00 || tool_input)``, where ``tool_input`` is the raw
JSON bytes of that field exactly as the client sent them: whitespace and key
order count. Two steps share a fingerprint only if the same tool got
byte-identical input. The zero byte cannot occur in a tool name (ingest
rejects it), so the name/input boundary is unambiguous.
"""

from __future__ import annotations

import hashlib

# The hash state after "tool_name || 0x00", per tool name: copying it is cheaper
# than starting a hash (OpenSSL looks the algorithm up every time). Agents use a
# handful of tools; the cache is emptied if a client sends a great many names.
_PREFIXES: dict[str, hashlib._Hash] = {}
_MAX_PREFIXES = 1024


def fingerprint(tool_name: str | None, tool_input: bytes | memoryview | None) -> bytes | None:
    """The 32-byte digest, or None for a step without a tool (think, replan)."""
    if tool_name is None:
        return None
    prefix = _PREFIXES.get(tool_name)
    if prefix is None:
        if len(_PREFIXES) >= _MAX_PREFIXES:
            _PREFIXES.clear()
        prefix = _PREFIXES[tool_name] = hashlib.sha256(tool_name.encode() + b"\x00")
    digest = prefix.copy()
    if tool_input:
        digest.update(tool_input)
    return digest.digest()
