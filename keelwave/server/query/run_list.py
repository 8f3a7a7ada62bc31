"""``GET /runs``: a project's runs, filtered and sorted, a page at a time.

Sorted by ``sort`` (started_at unless asked otherwise), newest or largest first
unless ``order=asc``; ties are broken by started_at and then id in the same
direction, so the order is total. ``next_cursor`` holds the last row's place
in that order (its sort value, started_at and id) and the sort it belongs to,
so pages neither repeat nor skip runs while new ones arrive. Runs without a
value (duration_ms of a run still going) come last in either order.

Every sort reads its page in the order of an index, forwards or backwards:
started_at agent_runs_recent_idx, cost_usd and agent_name theirs. The indexes of
duration, steps and tokens hold only some runs (migration 0028: the writes of runs
still going would pay for them otherwise), so their pages are read in two parts
(SPLIT_SORTS), as the runs with a duration (those that ended) and those without:
by duration, those with one, then, once they are all listed, those without; by steps
or tokens, the ended runs' page off the index merged with the page of the runs
still going, which are sorted (the reaper ends runs silent for an hour, by
default, so they are not many).
"""

from __future__ import annotations

import json
import uuid
from typing import Annotated, Any, Literal, NamedTuple

from aiohttp import web
from msgspec import Meta
from psycopg import AsyncCursor
from psycopg.rows import dict_row

from keelwave.protocol import NAME_MAX_LENGTH, TERMINATION_REASONS
from keelwave.server.findings import KINDS as FINDING_KINDS
from keelwave.server.http import appkeys, params
from keelwave.server.http.operations import ApiRoutes, Param
from keelwave.server.http.responses import respond
from keelwave.server.query import run_containment, run_search, run_streams, run_tools
from keelwave.server.query.fields import RUN_FIELDS, TRACE_ID
from keelwave.server.query.schemas import (
    RUN_STATUSES,
    FindingKind,
    RunListResponse,
    RunStatus,
    TerminationReason,
)

routes = ApiRoutes("query")

# sort -> (SQL expression, its type, whether it can be NULL)
SORTS: dict[str, tuple[str, str, bool]] = {
    "started_at": ("started_at", "timestamptz", False),
    "duration_ms": ("duration_ms", "float8", True),
    "cost_usd": ("cost_usd", "float8", False),
    "step_count": ("step_count", "int8", False),
    "tokens": ("(input_tokens + output_tokens)", "int8", False),
    "agent_name": ("agent_name", "text", False),
}
# The sorts an index of agent_runs reads in order for every run (0002, 0012).
INDEXED_SORTS = ("started_at", "cost_usd", "agent_name")
NEWEST_FIRST = "started_at DESC, id DESC"  # (agent_runs_recent_idx's order)
# The sorts whose index (0028) holds only the runs with a duration: their pages are
# read as those runs and the others. Ended runs have a duration; the runs without one
# are those still going (found by agent_runs_unfinished_idx) and any that ended without
# one (loaded by hand, say: few, in an index of their own). Not ended runs: the writer
# looks runs up by id among ended ones (is this run over?), and the planner would take
# an index of ended runs for that lookup (0028's docstring).
SPLIT_SORTS = ("duration_ms", "step_count", "tokens")
WITH_DURATION = "duration_ms IS NOT NULL"
WITHOUT_DURATION = (
    "duration_ms IS NULL AND ended_at IS NULL",
    "duration_ms IS NULL AND ended_at IS NOT NULL",
)

ORDERS = ("desc", "asc")
SortName = Literal[tuple(SORTS)]  # type: ignore[valid-type]

LIST_QUERY = (
    Param("agent_name", str, "Only this agent."),
    Param("status", RunStatus, "Only runs in this status."),
    Param("termination_reason", TerminationReason, "Only runs that ended for this reason."),
    Param("loop_detected", bool, "Only runs the SDK reported looping (true) or not (false)."),
    Param("detected_loop", bool, "Only runs the server found looping (true) or not (false)."),
    Param("finding", FindingKind, "Only runs with a finding of this kind."),
    Param("loop", bool, "Only runs that loop by either account (true), or by neither (false)."),
    Param("q", str, "A run id prefix or part of the agent name."),
    Param("tag", list[str], "Only runs with this tag; repeated: with every one of them."),
    Param(
        "metadata",
        list[Annotated[str, Meta(pattern="^[^=]+=")]],
        "KEY=VALUE: only runs whose metadata has this top-level string value; repeatable.",
    ),
    Param("tool", str, "Only runs with a step of this tool_name."),
    Param("root", bool, "true: only runs without a parent run; false: only child runs."),
    Param("parent_run_id", uuid.UUID, "Only the child runs of this run."),
    Param("sort", SortName, "What to sort by (default started_at); tokens: input + output."),
    Param("order", Literal[ORDERS], "desc (default) or asc; runs without the value come last."),
    Param("limit", Annotated[int, Meta(ge=1, le=500)], "Page size (default 50)."),
    params.CURSOR_QUERY,
    *params.WINDOW_QUERY,
)


def _names(request: web.Request, name: str) -> list[str]:
    """Every value of a repeatable parameter, checked like a name."""
    values = [value for value in request.query.getall(name, []) if value != ""]
    for value in values:
        if len(value) > NAME_MAX_LENGTH or "\x00" in value:
            raise params.invalid(name, f"must be at most {NAME_MAX_LENGTH} characters, without NUL")
    return values


def _metadata(request: web.Request) -> list[str] | None:
    """``KEY=VALUE`` pairs as the jsonb each run's metadata must contain (each once);
    None if two of them give one key different values, which no run's metadata holds
    (a top-level value is one string): PostgreSQL would read both values' runs to
    find none."""
    wanted: dict[str, str] = {}
    for pair in _names(request, "metadata"):
        key, equals, value = pair.partition("=")
        if not equals or not key:
            raise params.invalid("metadata", f"expected KEY=VALUE; got {pair!r}")
        if wanted.setdefault(key, value) != value:
            return None
    return [json.dumps({key: value}) for key, value in wanted.items()]


def _uuid(request: web.Request, name: str) -> uuid.UUID | None:
    text = request.query.get(name)
    if not text:
        return None
    try:
        return uuid.UUID(text)
    except ValueError:
        raise params.invalid(name, f"expected a run id (a UUID); got {text!r}") from None


def filters(
    request: web.Request,
    args: dict[str, Any],
    q_agents: list[str] | None = None,
    tool_runs: list[uuid.UUID] | None = None,
) -> list[str]:
    """The WHERE conditions the query parameters ask for; their values go into ``args``.
    ``q_agents``: the project's agent names that hold ``q`` (run_search.AGENT_NAMES);
    ``tool_runs``: the runs that called ``tool``, if few (run_tools.runs_calling)."""
    where = [run_containment.PROJECT]
    if agent := params.text(request, "agent_name"):
        where.append(run_streams.AGENT)
        args["agent"] = agent
    status = params.choice(request, "status", RUN_STATUSES)
    if status == "finished":
        where.append(run_streams.FINISHED)
    elif status == "stalled":
        where.append("ended_at IS NULL AND last_activity_at < now() - %(stall)s")
    elif status == "running":
        where.append("ended_at IS NULL AND last_activity_at >= now() - %(stall)s")
    if reason := params.choice(request, "termination_reason", TERMINATION_REASONS):
        where.append(run_streams.REASON)
        args["reason"] = reason
    if (looping := params.boolean(request, "loop_detected")) is not None:
        where.append(run_streams.REPORTED_LOOP)
        args["looping"] = looping
    if (detected := params.boolean(request, "detected_loop")) is not None:
        where.append(run_streams.DETECTED_LOOP)
        args["detected"] = detected
    if (either := params.boolean(request, "loop")) is not None:
        where.append(run_streams.EITHER_LOOP)
        args["either"] = either
    if kind := params.choice(request, "finding", FINDING_KINDS):
        where.append(run_streams.FINDING)
        args["kind"] = kind
    if (window := params.window(request, default=None)) is not None:
        where.append(run_streams.WINDOW)
        args.update(since=window.since, until=window.until)
    if q := params.text(request, "q"):
        where.append(run_search.condition(q, q_agents or [], args, agent or None))
    if tags := _names(request, "tag"):
        where.append(run_containment.TAGS)
        args["tags"] = tags
    if (metadata := _metadata(request)) is None:
        where.append("FALSE")
    for number, wanted in enumerate(metadata or ()):
        where.append(run_containment.metadata(number))
        args[f"metadata{number}"] = wanted
    if tool := params.text(request, "tool"):
        where.append(run_tools.condition(tool, tool_runs, args))
    if (root := params.boolean(request, "root")) is not None:
        where.append(run_streams.ROOT if root else run_streams.CHILD)
    if (parent := _uuid(request, "parent_run_id")) is not None:
        where.append("parent_run_id = %(parent)s")
        args["parent"] = parent
    return where


_PARSERS = {
    "timestamptz": lambda text: params.timestamp(text, "cursor"),
    "uuid": uuid.UUID,
    "float8": float,
    "int8": int,
    "text": str,
}


def _checked(text: str, kind: str) -> str:
    """A cursor's value, refused (422) unless it is of its column's type: a cursor
    edited by hand must not reach PostgreSQL as a cast that fails."""
    try:
        _PARSERS[kind](text)
    except ValueError:
        raise params.invalid(
            "cursor", "not a cursor from this API (use next_cursor as given)"
        ) from None
    return text


class After(NamedTuple):
    """The condition for the runs after a cursor: among all runs, and among each part of
    a split sort (WITH_DURATION, WITHOUT_DURATION), where it can be said without an OR that
    would keep the index from starting at the cursor."""

    whole: str
    indexed: str
    rest: str


class Order:
    """The order of one request's runs: the ORDER BY, and the keyset after a cursor."""

    def __init__(self, sort: str, direction: str) -> None:
        self.sort, self.direction = sort, direction
        self.expression, self.type, self.nullable = SORTS[sort]
        self.split = sort in SPLIT_SORTS
        # started_at is its own tie-breaker.
        self.keys = ("started_at", "id") if sort == "started_at" else ("value", "started_at", "id")

    def order_by(self, sort_value: str | None = None) -> str:
        """The ORDER BY; ``sort_value``: the name the sort's value goes by, where the
        rows are a subquery's."""
        way = self.direction.upper()
        if self.sort == "started_at":
            return f"started_at {way}, id {way}"
        nulls = " NULLS LAST" if self.nullable else ""
        return f"{sort_value or self.expression} {way}{nulls}, started_at {way}, id {way}"

    def by_value(self) -> str:
        """The ORDER BY of runs that all have a value, as their index reads it (its
        NULLS FIRST, backwards NULLS LAST, says nothing then)."""
        way = self.direction.upper()
        return f"{self.expression} {way}, started_at {way}, id {way}"

    def after(self, cursor: list[str], args: dict[str, Any]) -> After:
        """The condition for rows after the cursor, whose values go into ``args``."""
        tag, value, started, run_id = cursor
        if tag != f"{self.sort}:{self.direction}":
            raise params.invalid(
                "cursor", "this cursor belongs to another sort or order; start from the first page"
            )
        args.update(c_started=_checked(started, "timestamptz"), c_id=_checked(run_id, "uuid"))
        beyond = "<" if self.direction == "desc" else ">"
        ties = f"(started_at, id) {beyond} (%(c_started)s::timestamptz, %(c_id)s::uuid)"
        if self.sort == "started_at":
            return After(ties, ties, ties)
        if value == "null":  # the cursor is among the runs without a value: the last ones
            return After(f"({self.expression} IS NULL AND {ties})", "FALSE", ties)
        args["c_value"] = _checked(value.removeprefix("v:"), self.type)
        later = (
            f"({self.expression}, started_at, id) {beyond} "
            f"(%(c_value)s::{self.type}, %(c_started)s::timestamptz, %(c_id)s::uuid)"
        )
        if self.nullable:  # (then every run without a value comes after the cursor)
            return After(f"({later} OR {self.expression} IS NULL)", later, "TRUE")
        return After(later, later, later)

    def cursor_of(self, row: dict[str, Any]) -> str:
        value = row["sort_value"]
        if value is not None and self.sort == "started_at":
            value = value.isoformat()
        encoded = "null" if value is None else f"v:{value}"
        return params.encode_cursor(
            f"{self.sort}:{self.direction}", encoded, row["started_at"].isoformat(), row["id"]
        )


def _select(order: Order, where: list[str], order_by: str) -> str:
    """The first %(limit)s runs that pass ``where``, in ``order_by``."""
    return (
        f"SELECT {RUN_FIELDS}, metadata, {order.expression} AS sort_value FROM agent_runs "
        f"WHERE {' AND '.join(where)} ORDER BY {order_by} LIMIT %(limit)s"
    )


def _merged(order: Order, parts: list[list[str]], inner: str, outer: str) -> str:
    """The first %(limit)s runs of the ``parts`` (each a WHERE, read in ``inner``
    order), together in ``outer`` order."""
    if len(parts) == 1:
        return _select(order, parts[0], inner)
    selects = " UNION ALL ".join(f"({_select(order, part, inner)})" for part in parts)
    return f"SELECT * FROM ({selects}) AS agent_runs ORDER BY {outer} LIMIT %(limit)s"


def page_statements(order: Order, where: list[str], after: After | None) -> list[str]:
    """The statements that read the page of the runs that pass ``where`` (and come
    after the cursor, if ``after``), in ``order``: each one's rows follow the last's,
    and the next is needed only while the page is short."""
    if not order.split:
        return [_select(order, where + ([after.whole] if after else []), order.order_by())]
    indexed = [*where, WITH_DURATION, *([after.indexed] if after else [])]
    rest = [[*where, part, *([after.rest] if after else [])] for part in WITHOUT_DURATION]
    if order.nullable:  # duration: the rest's is NULL, last in either order, by start
        way = order.direction.upper()
        by_start = f"started_at {way}, id {way}"
        return [_select(order, indexed, order.by_value()), _merged(order, rest, by_start, by_start)]
    return [_merged(order, [indexed, *rest], order.by_value(), order.order_by("sort_value"))]


def _cursored(where: list[str], after: After | None) -> tuple[str | None, list[str]]:
    """The condition for the runs after the cursor (if any), and ``where`` with it."""
    whole = after.whole if after else None
    return whole, where + ([whole] if whole else [])


async def _read_page(
    cur: AsyncCursor, order: Order, where: list[str], after: After | None, args: dict[str, Any]
) -> list[dict[str, Any]]:
    """The first %(limit)s runs that pass ``where`` (and come after the cursor, if
    ``after``), in ``order``."""
    whole, cursored = _cursored(where, after)
    conn = cur.connection
    passing = None  # the ids of the runs the page is among, if found another way
    if run_containment.correlated(where, args):  # tags or metadata among other conditions
        # (a walk in the list's order is cheap where an index reads every run in it;
        # in the other sorts, a walk of the newest runs only tells what is rare)
        in_order = order.sort in INDEXED_SORTS
        walk = order.order_by() if in_order else NEWEST_FIRST
        passing = await run_containment.passing_runs(conn, cursored, whole, walk, args, in_order)
    elif order.sort == "started_at":  # two conditions with ordered indexes or more
        passing = await run_streams.passing_runs(conn, cursored, whole, order.direction, args)
    return await _page_among(cur, order, where, after, args, passing)


async def _page_among(
    cur: AsyncCursor,
    order: Order,
    where: list[str],
    after: After | None,
    args: dict[str, Any],
    passing: list[uuid.UUID] | None,
) -> list[dict[str, Any]]:
    """The page, read by page_statements: among the runs ``passing`` (ids), if given."""
    if passing == []:
        return []
    if passing is not None:
        where = [*where, "id = ANY(%(passing)s)"]
        args = {**args, "passing": passing}
    rows: list[dict[str, Any]] = []
    for sql in page_statements(order, where, after):
        rows += await (await cur.execute(sql, args)).fetchall()
        if len(rows) >= args["limit"]:
            break
    return rows


async def _agent_by_agent(
    cur: AsyncCursor, order: Order, where: list[str], after: After | None, args: dict[str, Any]
) -> list[dict[str, Any]]:
    """The page of a list sorted by agent name where ``q`` names several agents: each
    agent's runs in turn, in the sort's order, until the page is whole. PostgreSQL 15
    reads ``agent_name = ANY(…)`` in that order as a filter over every run of the
    project, read one by one: ``q=agent-1&tag=staging&termination_reason=clean``
    sorted by agent took 5.3 s on 2.5 million runs. Each agent's list is one agent's,
    read like any other (run_search.condition's equality for one agent); the cursor's
    condition leaves out the agents before it (an index range with nothing in it).
    Unless few runs pass the list's tags or metadata with the rest: then their ids,
    read by run_containment.py, are the page's source; agent by agent, each agent's
    list would look for them anew (``tag=canary&finding=no_progress&q=agent-1``: 62
    agents, 3 s)."""
    if run_containment.correlated(where, args):
        whole, cursored = _cursored(where, after)
        passing = await run_containment.passing_runs(
            cur.connection, cursored, whole, NEWEST_FIRST, {**args}, in_list_order=False
        )
        if passing is not None:
            return await _page_among(cur, order, where, after, args, passing)
    found = await cur.execute(
        f"SELECT name FROM unnest(%(q_agents)s::text[]) AS name ORDER BY name {order.direction}",
        args,
    )
    agents = [row["name"] for row in await found.fetchall()]
    own_where = [run_streams.Q_AGENT if c == run_search.AGENTS else c for c in where]
    rows: list[dict[str, Any]] = []
    for agent in agents:
        own = {**args, "q_agent": agent, "limit": args["limit"] - len(rows)}
        rows += await _read_page(cur, order, own_where, after, own)
        if len(rows) >= args["limit"]:
            break
    return rows


@routes.get(
    "/v1/projects/{project_id}/agent/runs",
    summary="List runs",
    response=RunListResponse,
    query=LIST_QUERY,
)
async def list_runs(request: web.Request) -> web.Response:
    """Runs newest first (or by ``sort``), filtered, a page at a time (keyset pagination)."""
    project_id = await params.read_project(request)
    limit = params.integer(request, "limit", 50, 1, 500)
    order = Order(
        params.choice(request, "sort", tuple(SORTS)) or "started_at",
        params.choice(request, "order", ORDERS) or "desc",
    )
    args: dict[str, Any] = {
        "project": project_id,
        "stall": params.stall_after(request),
        "limit": limit + 1,
    }
    q_agents = tool_runs = None
    q, tool = params.text(request, "q"), params.text(request, "tool")
    if q or tool:
        async with request.app[appkeys.POOL].connection() as conn:
            if q:
                pattern = run_search.like_pattern(q)
                found = await conn.execute(
                    run_search.AGENT_NAMES, {"project": project_id, "q_name": pattern}
                )
                q_agents = [name for (name,) in await found.fetchall()]
            if tool:
                tool_runs = await run_tools.runs_calling(conn, project_id, tool)
    where = filters(request, args, q_agents, tool_runs)
    after = None
    if (cursor := params.decode_cursor(request, 4)) is not None:
        after = order.after(cursor, args)
    async with (
        request.app[appkeys.POOL].connection() as conn,
        conn.cursor(row_factory=dict_row) as cur,
    ):
        if order.sort == "agent_name" and run_search.AGENTS in where:
            rows = await _agent_by_agent(cur, order, where, after, args)
        else:
            rows = await _read_page(cur, order, where, after, args)
    next_cursor = None
    if len(rows) > limit:
        rows = rows[:limit]
        next_cursor = order.cursor_of(rows[-1])
    for row in rows:
        # fields.FROM_SPANS, read from the metadata psycopg parsed anyway: in SQL it would
        # make every list query one PostgreSQL plans without parallel workers (0026).
        metadata = row.pop("metadata")
        row["from_spans"] = isinstance(metadata, dict) and metadata.get(TRACE_ID) is not None
        del row["sort_value"]
    return respond(RunListResponse, {"data": rows, "next_cursor": next_cursor})
