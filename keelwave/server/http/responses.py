"""JSON responses, encoded by msgspec.

``respond(kind, body)`` passes the answer through its declared type first:
the dicts that query handlers assemble from database rows become the Structs
the API document is generated from, so an answer that does not match its
documented type is a loud error in the tests, not a silent drift. Ingest
handlers build their Structs directly (no conversion on the hot path).
"""

from __future__ import annotations

from typing import Any, TypeVar

import msgspec
from aiohttp import web

T = TypeVar("T")

# Decimals (sums of bigint columns) as JSON numbers, not strings.
_encoder = msgspec.json.Encoder(decimal_format="number")


def json_response(
    body: Any, status: int = 200, headers: dict[str, str] | None = None
) -> web.Response:
    return web.Response(
        body=_encoder.encode(body), status=status, headers=headers, content_type="application/json"
    )


def respond(
    kind: type[T], body: Any, status: int = 200, headers: dict[str, str] | None = None
) -> web.Response:
    """Answer ``body`` (a dict of rows and values) as the declared type ``kind``."""
    return json_response(msgspec.convert(body, kind), status=status, headers=headers)
