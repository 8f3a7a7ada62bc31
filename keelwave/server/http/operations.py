"""Routes that describe themselves: each handler is registered together with its
request and response types, so the API document is generated from the code.

``ApiRoutes`` is an aiohttp ``RouteTableDef`` whose ``get`` and ``post`` also
record an :class:`Operation`: summary, body type, response type, query
parameters. The types are the msgspec Structs that decode the requests and
build the responses, so what the document says is what the server does
(openapi.py turns the operations into OpenAPI 3.1). A route cannot be added
without saying what it takes and returns.
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from aiohttp import web

Handler = Callable[[web.Request], Any]


@dataclass(frozen=True, slots=True)
class Param:
    """A path or query parameter: its name, its type (a msgspec-known type, constraints
    in ``Annotated[..., Meta(...)]``) and what it means."""

    name: str
    type: Any
    description: str
    required: bool = False


# Path parameters mean the same on every route.
PATH_PARAMS = {
    "project_id": Param("project_id", str, "The key's project, by id or name.", required=True),
    "run_id": Param("run_id", uuid.UUID, "The run's id.", required=True),
    "destination_id": Param(
        "destination_id", uuid.UUID, "The alert destination's id.", required=True
    ),
    "rule_id": Param("rule_id", uuid.UUID, "The alert rule's id.", required=True),
}
_PATH_PARAM = re.compile(r"\{(\w+)\}")


@dataclass(frozen=True, slots=True)
class Operation:
    method: str
    path: str
    operation_id: str
    summary: str
    description: str | None
    tag: str
    # The body of a successful answer: a Struct type, a tuple of them (one of), or
    # None for a document that has no schema of its own (the API document).
    response: Any
    status: int
    body: Any | None = None
    query: tuple[Param, ...] = ()
    secured: bool = True
    # Other answers that carry a body of ``response``'s type (readiness: 503).
    also: tuple[int, ...] = ()
    # A body that is not one JSON Struct (OTLP): media type -> what it holds.
    body_formats: tuple[tuple[str, str], ...] = ()
    # What failures carry, if not the API's Error (OTLP answers google.rpc.Status).
    error: Any | None = None
    # An answer that is not JSON (an export's JSON lines): (media type, what it holds).
    response_format: tuple[str, str] | None = None

    @property
    def path_params(self) -> list[Param]:
        return [PATH_PARAMS[name] for name in _PATH_PARAM.findall(self.path)]


class ApiRoutes(web.RouteTableDef):
    """A route table for one resource whose routes are documented where they are defined."""

    def __init__(self, tag: str) -> None:
        super().__init__()
        self.tag = tag
        self.operations: list[Operation] = []

    def get(self, path: str, **documented: Any) -> Callable[[Handler], Handler]:  # type: ignore[override]
        return self._operation("GET", path, **documented)

    def post(self, path: str, **documented: Any) -> Callable[[Handler], Handler]:  # type: ignore[override]
        return self._operation("POST", path, **documented)

    def patch(self, path: str, **documented: Any) -> Callable[[Handler], Handler]:  # type: ignore[override]
        return self._operation("PATCH", path, **documented)

    def delete(self, path: str, **documented: Any) -> Callable[[Handler], Handler]:  # type: ignore[override]
        return self._operation("DELETE", path, **documented)

    def _operation(
        self,
        method: str,
        path: str,
        *,
        summary: str,
        response: Any,
        status: int = 200,
        body: Any | None = None,
        query: tuple[Param, ...] | list[Param] = (),
        secured: bool = True,
        also: tuple[int, ...] = (),
        body_formats: dict[str, str] | None = None,
        error: Any | None = None,
        response_format: tuple[str, str] | None = None,
    ) -> Callable[[Handler], Handler]:
        def register(handler: Handler) -> Handler:
            # The docstring's first paragraph says what the route does; the rest is
            # for maintainers.
            doc = (handler.__doc__ or "").strip().split("\n\n")[0]
            self.operations.append(
                Operation(
                    method=method,
                    path=path,
                    operation_id=handler.__name__,
                    summary=summary,
                    description=" ".join(doc.split()) or None,
                    tag=self.tag,
                    response=response,
                    status=status,
                    body=body,
                    query=tuple(query),
                    secured=secured,
                    also=also,
                    body_formats=tuple((body_formats or {}).items()),
                    error=error,
                    response_format=response_format,
                )
            )
            self.route(method, path)(handler)
            return handler

        return register
