"""JSON responses: what PostgreSQL hands back (Decimal, datetime, UUID) as JSON."""

from __future__ import annotations

import json
import uuid
from datetime import datetime
from decimal import Decimal
from typing import Any

from aiohttp import web


def _default(value: Any) -> Any:
    if isinstance(value, Decimal):
        return int(value) if value == value.to_integral_value() else float(value)
    if isinstance(value, datetime):
        return value.isoformat()
    if isinstance(value, uuid.UUID):
        return str(value)
    raise TypeError(f"cannot encode {type(value).__name__} as JSON")


def dumps(body: Any) -> str:
    return json.dumps(body, default=_default, ensure_ascii=False, allow_nan=False)


def json_response(
    body: Any, status: int = 200, headers: dict[str, str] | None = None
) -> web.Response:
    return web.json_response(body, status=status, headers=headers, dumps=dumps)
