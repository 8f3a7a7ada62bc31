"""The alerts API, under /v1/projects/{p}/alerts: destinations, rules and events.

Making, changing and deleting need a key of scope ``all``; a ``read`` key may list.
"""

from __future__ import annotations

import uuid
from typing import Any

import msgspec
import psycopg
from aiohttp import web
from psycopg.rows import dict_row

from keelwave.server.alerts import delivery
from keelwave.server.alerts import destinations as dest
from keelwave.server.alerts.schemas import (
    Condition,
    DestinationListResponse,
    DestinationResponse,
    EventListResponse,
    NewDestination,
    NewRule,
    RuleChange,
    RuleListResponse,
    RuleResponse,
    TestDeliveryResponse,
    WindowMetric,
)
from keelwave.server.http import appkeys, params
from keelwave.server.http.auth import ALL, READ
from keelwave.server.http.errors import ApiError, not_found
from keelwave.server.http.operations import ApiRoutes, Param
from keelwave.server.http.responses import respond
from keelwave.server.ingest.schemas import decode_request

routes = ApiRoutes("alerts")
BASE = "/v1/projects/{project_id}/alerts"


def _uuid(request: web.Request, name: str, what: str) -> uuid.UUID:
    text = request.match_info[name]
    try:
        return uuid.UUID(text)
    except ValueError:
        raise not_found(f"{what} {text!r}") from None


async def _one(request: web.Request, sql: str, args: Any) -> dict[str, Any] | None:
    """One row of a statement on the pool, as a dict (None if there is none)."""
    async with (
        request.app[appkeys.POOL].connection() as conn,
        conn.cursor(row_factory=dict_row) as cur,
    ):
        await cur.execute(sql, args)
        return await cur.fetchone()


async def _all(request: web.Request, sql: str, args: Any) -> list[dict[str, Any]]:
    """Every row of a statement on the pool, as dicts."""
    async with (
        request.app[appkeys.POOL].connection() as conn,
        conn.cursor(row_factory=dict_row) as cur,
    ):
        await cur.execute(sql, args)
        return await cur.fetchall()


# -- destinations -------------------------------------------------------------------

_DESTINATION = "id, name, kind, url, secret IS NOT NULL AS has_secret, created_at"


@routes.post(
    f"{BASE}/destinations",
    summary="Make an alert destination",
    body=NewDestination,
    response=DestinationResponse,
    status=201,
)
async def create_destination(request: web.Request) -> web.Response:
    """A webhook (JSON, signed with the secret if one is given) or a Slack incoming webhook.
    Addresses in private networks are refused unless the server allows them."""
    project_id = await params.project_for(request, ALL)
    new: NewDestination = await decode_request(request, NewDestination)
    settings = request.app[appkeys.SETTINGS]
    try:
        await dest.check_url_async(new.url, settings.alerts_allow_private_destinations)
    except dest.DestinationRefused as error:
        raise ApiError(422, "validation_error", str(error), "url") from None
    row = await _one(
        request,
        f"INSERT INTO alert_destinations (project_id, name, kind, url, secret) "
        f"VALUES (%s, %s, %s, %s, %s) RETURNING {_DESTINATION}",
        (project_id, new.name, new.kind, new.url, new.secret),
    )
    return respond(DestinationResponse, {"data": row}, status=201)


@routes.get(
    f"{BASE}/destinations", summary="List alert destinations", response=DestinationListResponse
)
async def list_destinations(request: web.Request) -> web.Response:
    project_id = await params.project_for(request, READ)
    rows = await _all(
        request,
        f"SELECT {_DESTINATION} FROM alert_destinations WHERE project_id = %s "
        "ORDER BY created_at, id",
        (project_id,),
    )
    return respond(DestinationListResponse, {"data": rows})


@routes.delete(
    f"{BASE}/destinations/{{destination_id}}",
    summary="Delete an alert destination (and the rules that send to it)",
    response=DestinationResponse,
)
async def delete_destination(request: web.Request) -> web.Response:
    project_id = await params.project_for(request, ALL)
    destination_id = _uuid(request, "destination_id", "destination")
    row = await _one(
        request,
        f"DELETE FROM alert_destinations WHERE project_id = %s AND id = %s "
        f"RETURNING {_DESTINATION}",
        (project_id, destination_id),
    )
    if row is None:
        raise not_found(f"destination {destination_id}")
    return respond(DestinationResponse, {"data": row})


@routes.post(
    f"{BASE}/destinations/{{destination_id}}/test",
    summary="Send a test alert to a destination",
    response=TestDeliveryResponse,
)
async def test_destination(request: web.Request) -> web.Response:
    """Sends one test alert now, as a real one would go, and says how it went."""
    project_id = await params.project_for(request, ALL)
    destination_id = _uuid(request, "destination_id", "destination")
    row = await _one(
        request,
        "SELECT d.*, p.name AS project FROM alert_destinations d "
        "JOIN projects p ON p.id = d.project_id WHERE d.project_id = %s AND d.id = %s",
        (project_id, destination_id),
    )
    if row is None:
        raise not_found(f"destination {destination_id}")
    settings = request.app[appkeys.SETTINGS]
    result = await delivery.send_test(settings, row, link=dest.dashboard_url(settings))
    return respond(TestDeliveryResponse, {"data": result})


# -- rules --------------------------------------------------------------------------

_RULE = (
    "id, name, destination_id, agent_name, condition, cooldown_seconds, enabled, created_at, "
    "updated_at"
)


def _rule(row: dict[str, Any]) -> dict[str, Any]:
    row = dict(row)
    row["scope"] = {"agent_name": row.pop("agent_name")}
    return row


def _check_condition(condition: Condition) -> None:
    """What the types cannot say: a window rule has exactly one threshold, and ``below``
    is for ``runs`` only."""
    if not isinstance(condition, WindowMetric):
        return
    if (condition.above is None) == (condition.below is None):
        raise ApiError(
            422,
            "validation_error",
            "condition: a window condition needs exactly one of above or below",
            "condition",
        )
    if condition.below is not None and condition.metric != "runs":
        raise ApiError(
            422,
            "validation_error",
            "condition.below: only the runs metric takes below (an agent that stopped running)",
            "condition.below",
        )


async def _check_destination(cur: psycopg.AsyncCursor, project_id: str, destination: uuid.UUID):
    await cur.execute(
        "SELECT 1 FROM alert_destinations WHERE project_id = %s AND id = %s",
        (project_id, destination),
    )
    if await cur.fetchone() is None:
        raise ApiError(
            422,
            "validation_error",
            f"destination_id: no destination {destination} in this project",
            "destination_id",
        )


@routes.post(
    f"{BASE}/rules", summary="Make an alert rule", body=NewRule, response=RuleResponse, status=201
)
async def create_rule(request: web.Request) -> web.Response:
    """A condition on runs (while they run or when they end) or on a window of them,
    sent to a destination; ``cooldown_seconds`` limits repeats per agent."""
    project_id = await params.project_for(request, ALL)
    new: NewRule = await decode_request(request, NewRule)
    _check_condition(new.condition)
    async with (
        request.app[appkeys.POOL].connection() as conn,
        conn.cursor(row_factory=dict_row) as cur,
    ):
        await _check_destination(cur, project_id, new.destination_id)
        await cur.execute(
            f"INSERT INTO alert_rules (project_id, name, destination_id, agent_name, condition, "
            f"cooldown_seconds, enabled) VALUES (%s, %s, %s, %s, %s::jsonb, %s, %s) "
            f"RETURNING {_RULE}",
            (
                project_id, new.name, new.destination_id, new.scope.agent_name,
                msgspec.json.encode(new.condition).decode(), new.cooldown_seconds, new.enabled,
            ),
        )  # fmt: skip
        row = await cur.fetchone()
    return respond(RuleResponse, {"data": _rule(row)}, status=201)


@routes.get(f"{BASE}/rules", summary="List alert rules", response=RuleListResponse)
async def list_rules(request: web.Request) -> web.Response:
    project_id = await params.project_for(request, READ)
    rows = await _all(
        request,
        f"SELECT {_RULE} FROM alert_rules WHERE project_id = %s ORDER BY created_at, id",
        (project_id,),
    )
    return respond(RuleListResponse, {"data": [_rule(row) for row in rows]})


@routes.patch(
    f"{BASE}/rules/{{rule_id}}",
    summary="Change an alert rule (pause, resume, thresholds)",
    body=RuleChange,
    response=RuleResponse,
)
async def change_rule(request: web.Request) -> web.Response:
    project_id = await params.project_for(request, ALL)
    rule_id = _uuid(request, "rule_id", "rule")
    change: RuleChange = await decode_request(request, RuleChange)
    sets: list[str] = []
    values: list[Any] = []
    if change.name is not msgspec.UNSET:
        sets.append("name = %s")
        values.append(change.name)
    if change.condition is not msgspec.UNSET:
        _check_condition(change.condition)
        sets.append("condition = %s::jsonb")
        values.append(msgspec.json.encode(change.condition).decode())
    if change.scope is not msgspec.UNSET:
        sets.append("agent_name = %s")
        values.append(change.scope.agent_name)
    if change.cooldown_seconds is not msgspec.UNSET:
        sets.append("cooldown_seconds = %s")
        values.append(change.cooldown_seconds)
    if change.enabled is not msgspec.UNSET:
        sets.append("enabled = %s")
        values.append(change.enabled)
    async with (
        request.app[appkeys.POOL].connection() as conn,
        conn.cursor(row_factory=dict_row) as cur,
    ):
        if change.destination_id is not msgspec.UNSET:
            await _check_destination(cur, project_id, change.destination_id)
            sets.append("destination_id = %s")
            values.append(change.destination_id)
        await cur.execute(
            f"UPDATE alert_rules SET {', '.join([*sets, 'updated_at = now()'])} "
            f"WHERE project_id = %s AND id = %s RETURNING {_RULE}",
            (*values, project_id, rule_id),
        )
        row = await cur.fetchone()
        if row is not None and change.condition is not msgspec.UNSET:
            # A new condition starts from nothing: no window state carried over.
            await cur.execute("DELETE FROM alert_window_state WHERE rule_id = %s", (rule_id,))
    if row is None:
        raise not_found(f"rule {rule_id}")
    return respond(RuleResponse, {"data": _rule(row)})


@routes.delete(f"{BASE}/rules/{{rule_id}}", summary="Delete an alert rule", response=RuleResponse)
async def delete_rule(request: web.Request) -> web.Response:
    project_id = await params.project_for(request, ALL)
    rule_id = _uuid(request, "rule_id", "rule")
    row = await _one(
        request,
        f"DELETE FROM alert_rules WHERE project_id = %s AND id = %s RETURNING {_RULE}",
        (project_id, rule_id),
    )
    if row is None:
        raise not_found(f"rule {rule_id}")
    return respond(RuleResponse, {"data": _rule(row)})


# -- events -------------------------------------------------------------------------

EVENT_QUERY = (
    Param("rule_id", uuid.UUID, "Only this rule's events."),
    Param("run_id", uuid.UUID, "Only events about this run."),
    Param("limit", int, "At most this many, newest first (default 100, at most 500)."),
)
_EVENTS = """
SELECT e.id, e.rule_id, e.rule_name, e.destination_id, e.state, e.agent_name, e.run_id,
       e.metric, e.value, e.threshold, e.fired_at, e.delivery_state, e.next_attempt_at,
       e.delivered_at, e.last_error,
       coalesce((SELECT json_agg(json_build_object(
                   'attempt', a.attempt, 'at', a.started_at, 'duration_ms', a.duration_ms,
                   'status', a.status, 'error', a.error) ORDER BY a.attempt)
                 FROM alert_attempts a WHERE a.event_id = e.id), '[]') AS attempts
FROM alert_events e
WHERE e.project_id = %(project)s {filters}
ORDER BY e.fired_at DESC, e.id DESC
LIMIT %(limit)s
"""


@routes.get(
    f"{BASE}/events", summary="List alert events", response=EventListResponse, query=EVENT_QUERY
)
async def list_events(request: web.Request) -> web.Response:
    """What fired, when, for which rule and run or agent, the value, and every delivery
    attempt, newest first."""
    project_id = await params.project_for(request, READ)
    args: dict[str, Any] = {
        "project": project_id,
        "limit": params.integer(request, "limit", 100, 1, 500),
    }
    filters = []
    for name in ("rule_id", "run_id"):
        if (text := request.query.get(name)) is not None:
            try:
                args[name] = uuid.UUID(text)
            except ValueError:
                raise params.invalid(name, f"must be a UUID; got {text!r}") from None
            filters.append(f"AND e.{name} = %({name})s")
    async with (
        request.app[appkeys.POOL].connection() as conn,
        conn.cursor(row_factory=dict_row) as cur,
    ):
        await cur.execute(_EVENTS.format(filters=" ".join(filters)), args)
        rows = await cur.fetchall()
    events = []
    for row in rows:
        delivery = {
            "state": row.pop("delivery_state"),
            "attempts": row.pop("attempts"),
            "next_attempt_at": row.pop("next_attempt_at"),
            "delivered_at": row.pop("delivered_at"),
            "last_error": row.pop("last_error"),
        }
        if delivery["state"] != "pending":
            delivery["next_attempt_at"] = None
        events.append({**row, "delivery": delivery})
    return respond(EventListResponse, {"data": events})
