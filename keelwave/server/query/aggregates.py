"""Aggregates over a time window: summary, per-agent health, time series, terminations.

Runs are counted in the window their start falls in. Counters come from the
rollups for the whole hours inside the window (whole UTC days from their daily
copy, daily_rollups.py) and from agent_runs for the partial hours at its edges,
so a month reads ~30 daily and ~24 hourly rollup rows per agent plus at most
two hours of runs, and the numbers are exact. Run-duration
percentiles are exact (percentile_cont over the finished runs) while the
window holds at most ``exact_percentiles_up_to`` (a setting) finished runs;
beyond that they come from the duration histograms the same way, within
``histogram.ACCURACY`` (whole UTC days from their daily copy, the other hours
from the hourly rows: daily_rollups.py). Token and cost totals are those of the
window's runs.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from aiohttp import web
from psycopg import AsyncConnection

from keelwave.protocol import TERMINATION_REASONS
from keelwave.server.findings import KINDS as FINDING_KINDS
from keelwave.server.http import appkeys, params
from keelwave.server.http.operations import ApiRoutes, Param
from keelwave.server.http.params import Window
from keelwave.server.http.responses import respond
from keelwave.server.query.schemas import (
    HealthResponse,
    SummaryResponse,
    TerminationsResponse,
    TimeseriesResponse,
)
from keelwave.server.store import daily_rollups, histogram
from keelwave.server.store.statements import ROLLUP_COUNTERS

routes = ApiRoutes("query")

HOUR = timedelta(hours=1)
MAX_BUCKETS = 2000

# How each rollup counter is computed from one agent_runs row.
_FROM_RUN = {
    "runs": "1",
    "finished_runs": "(ended_at IS NOT NULL)::int",
    "loop_runs": "loop_detected::int",
    "error_runs": "(termination_reason IS NOT DISTINCT FROM 'error')::int",
    "steps": "step_count",
    "llm_calls": "llm_calls",
    "input_tokens": "input_tokens",
    "output_tokens": "output_tokens",
    "cost_usd": "cost_usd",
    "duration_ms_sum": "coalesce(duration_ms, 0)",
    **{
        f"term_{reason}": f"(termination_reason IS NOT DISTINCT FROM '{reason}')::int"
        for reason in TERMINATION_REASONS
    },
    "detected_loop_runs": "detected_loop::int",
    **{f"{kind}_runs": f"('{kind}' = ANY(findings))::int" for kind in FINDING_KINDS},
}


def _floor(moment: datetime, step: timedelta) -> datetime:
    epoch = int(moment.timestamp())
    size = int(step.total_seconds())
    return datetime.fromtimestamp(epoch - epoch % size, UTC)


def _ceil(moment: datetime, step: timedelta) -> datetime:
    floored = _floor(moment, step)
    return floored if floored == moment else floored + step


def floor_hour(moment: datetime) -> datetime:
    return _floor(moment, HOUR)


def range_args(project_id: str, window: Window, whole_hours: bool = True) -> dict[str, Any]:
    """Query parameters for ``window``: project, since, until, and full_from/full_to,
    the whole hours inside it that rollups answer for (an empty range at its end if
    there are none, or if not ``whole_hours``); the edges are read from runs."""
    full_from, full_to = _ceil(window.since, HOUR), _floor(window.until, HOUR)
    if full_from >= full_to or not whole_hours:
        full_from = full_to = window.until
    return {
        "project": project_id,
        "since": window.since,
        "until": window.until,
        "full_from": full_from,
        "full_to": full_to,
    }


async def window_counters(
    conn: AsyncConnection,
    project_id: str,
    window: Window,
    group: str = "",
    agent_name: str | None = None,
    bucket: timedelta | None = None,
    names: tuple[str, ...] = ROLLUP_COUNTERS,
) -> list[tuple]:
    """Sum the rollup counters ``names`` over ``window``, grouped by ``group``
    (agent_name, t, or nothing).

    With ``group='t'`` rows are grouped into ``bucket``-sized time buckets (from
    the epoch, so a day is a UTC day); if a bucket is not a whole number of hours
    the rollups cannot be split into it, and agent_runs is read for the whole
    window. A month of hourly buckets reads a rollup row per agent an hour
    (108,000 for 150 agents): asking for only the counters needed halves that.
    """
    agent_filter = "AND agent_name = %(agent)s" if agent_name else ""
    columns = f"agent_name, {{time}} AS t, {', '.join(names)}"
    from_runs = ", ".join(f"{_FROM_RUN[name]} AS {name}" for name in names)
    key = {
        "": "",
        "agent_name": "agent_name",
        "t": "date_bin(%(bucket)s, t, timestamptz 'epoch')",
    }[group]
    select_key = f"{key} AS key, " if key else ""
    group_by = "GROUP BY 1" if key else ""
    sql = f"""
    WITH parts AS ({daily_rollups.read_rows(daily_rollups.RUNS, columns, "full", agent_filter)}
        UNION ALL
        SELECT agent_name, started_at AS t, {from_runs} FROM agent_runs
        WHERE project_id = %(project)s {agent_filter}
          AND ((started_at >= %(since)s AND started_at < %(full_from)s)
               OR (started_at >= %(full_to)s AND started_at < %(until)s))
    )
    SELECT {select_key}{", ".join(f"sum({c})" for c in names)}
    FROM parts {group_by}
    """
    args = {
        # Buckets that cut hours cannot be made of hourly rollups, nor those that cut
        # days of daily ones.
        **range_args(project_id, window, whole_hours=not (bucket and bucket % HOUR)),
        "agent": agent_name,
        "bucket": bucket or HOUR,
    }
    days = not (bucket and bucket % daily_rollups.DAY)
    args |= daily_rollups.hour_ranges(args["full_from"], args["full_to"], "full", days)
    return await (await conn.execute(sql, args)).fetchall()


def counters(row: tuple | None, names: tuple[str, ...] = ROLLUP_COUNTERS) -> dict[str, float]:
    """The counters ``names`` of a row of :func:`window_counters` by name."""
    values = row or (None,) * len(names)
    # sum() of bigint is numeric in PostgreSQL: back to int (or float for money).
    return {
        name: float(value or 0) if name in ("cost_usd", "duration_ms_sum") else int(value or 0)
        for name, value in zip(names, values, strict=True)
    }


def rate(part: float, whole: float) -> float | None:
    return round(part / whole, 6) if whole else None


_EXACT_PERCENTILES = """
SELECT {key}, percentile_cont(0.5) WITHIN GROUP (ORDER BY duration_ms),
       percentile_cont(0.95) WITHIN GROUP (ORDER BY duration_ms)
FROM agent_runs
WHERE project_id = %(project)s AND started_at >= %(since)s AND started_at < %(until)s
  AND duration_ms IS NOT NULL
GROUP BY 1
"""

# (key, duration bin, runs), from the histograms of the whole hours (the whole days
# among them from the daily copy) and the finished runs of the edges, like
# window_counters: the agents' histograms, or with key NULL the project's own (the
# agents' are 450,000 rows a month with 150 agents). Unordered: sorting 25,000 rows
# by text in the database took as long as summing them; Python sorts them quicker. (The
# sums as bigint: the numeric of sum(bigint) arrives as a Decimal, a microsecond a row.)
_DURATION_HISTOGRAM = f"""
SELECT {{key}}, duration_bin, sum(runs)::bigint
FROM ({{rollup_rows}}
    UNION ALL
    SELECT agent_name, {histogram.bin_sql("duration_ms")}, 1 FROM agent_runs
    WHERE project_id = %(project)s AND duration_ms IS NOT NULL
      AND ((started_at >= %(since)s AND started_at < %(full_from)s)
           OR (started_at >= %(full_to)s AND started_at < %(until)s))
) AS parts
GROUP BY 1, 2
"""


async def duration_percentiles(
    conn: AsyncConnection,
    request: web.Request,
    project_id: str,
    window: Window,
    finished_runs: int,
    per_agent: bool = False,
    median: bool = True,
) -> dict[str | None, tuple[float | None, float | None]]:
    """p50 and p95 of the durations of the window's ``finished_runs`` finished runs.

    Keyed by agent name with ``per_agent``, else one entry under None. Exact
    up to the setting ``exact_percentiles_up_to`` runs in all (the cost is one
    sort of them all), from the histograms above; there, without ``median``,
    the p50 is not worked out (None): health shows each agent's p95 alone.
    """
    key = "agent_name" if per_agent else "NULL::text"
    args = range_args(project_id, window)
    if finished_runs <= request.app[appkeys.SETTINGS].exact_percentiles_up_to:
        rows = await (await conn.execute(_EXACT_PERCENTILES.format(key=key), args)).fetchall()
        return {name: (p50, p95) for name, p50, p95 in rows}
    table = daily_rollups.DURATIONS if per_agent else daily_rollups.PROJECT_DURATIONS
    stored_from = None
    if table.weekly:  # (what its edge days cost depends on where its rows start)
        first_hour = await conn.execute(daily_rollups.first_hour_sql(table), args)
        (stored_from,) = await first_hour.fetchone()
    args |= daily_rollups.hour_ranges(
        args["full_from"], args["full_to"], "full", stored_from=stored_from
    )
    bins: dict[str | None, list[tuple[int, int]]] = {}
    columns = "agent_name, duration_bin, runs" if per_agent else "NULL, duration_bin, runs"
    rollup_rows = daily_rollups.read_rows(table, columns, "full")
    sql = _DURATION_HISTOGRAM.format(key=key, rollup_rows=rollup_rows)
    for name, duration_bin, runs in await (await conn.execute(sql, args)).fetchall():
        bins.setdefault(name, []).append((duration_bin, runs))
    found = {}
    for name, counts in bins.items():
        counts.sort()  # bins ascending
        p50 = histogram.percentile(counts, 0.5) if median else None
        found[name] = (p50, histogram.percentile(counts, 0.95))
    return found


_STALLED = """
SELECT {key} count(*) FROM agent_runs
WHERE project_id = %(project)s AND ended_at IS NULL
  AND last_activity_at < now() - %(stall)s
  AND started_at >= %(since)s AND started_at < %(until)s
{group}
"""


def verdicts(totals: dict[str, Any]) -> dict[str, Any]:
    """The server's view beside the SDK's: runs it found looping, and per kind of finding."""
    return {
        "detected_loop_runs": totals["detected_loop_runs"],
        "detected_loop_rate": rate(totals["detected_loop_runs"], totals["runs"]),
        "findings": {kind: totals[f"{kind}_runs"] for kind in FINDING_KINDS},
    }


async def _summary_of(
    conn: AsyncConnection, request: web.Request, project_id: str, window: Window
) -> dict[str, Any]:
    [row] = await window_counters(conn, project_id, window)
    totals = counters(row)
    args = {
        "project": project_id,
        "since": window.since,
        "until": window.until,
        "stall": params.stall_after(request),
    }
    percentiles = await duration_percentiles(
        conn, request, project_id, window, totals["finished_runs"]
    )
    p50, p95 = percentiles.get(None, (None, None))
    (stalled,) = await (await conn.execute(_STALLED.format(key="", group=""), args)).fetchone()
    runs = totals["runs"]
    return {
        **window.bounds(),
        "runs": runs,
        "loop_runs": totals["loop_runs"],
        "loop_rate": rate(totals["loop_runs"], runs),
        **verdicts(totals),
        "error_runs": totals["error_runs"],
        "error_rate": rate(totals["error_runs"], runs),
        "stalled_runs": stalled,
        "finished_runs": totals["finished_runs"],
        "p50_duration_ms": p50,
        "p95_duration_ms": p95,
        "avg_steps": rate(totals["steps"], runs),
        "llm_calls": totals["llm_calls"],
        "input_tokens": totals["input_tokens"],
        "output_tokens": totals["output_tokens"],
        "cost_usd": round(totals["cost_usd"], 6),
    }


@routes.get(
    "/v1/projects/{project_id}/agent/summary",
    summary="Summary",
    response=SummaryResponse,
    query=params.WINDOW_QUERY,
)
async def summary(request: web.Request) -> web.Response:
    """Runs, loop and error rates, durations, tokens and cost in the window and in the
    window of the same length before it."""
    project_id = await params.read_project(request)
    window = params.window(request)
    async with request.app[appkeys.POOL].connection() as conn:
        current = await _summary_of(conn, request, project_id, window)
        previous = await _summary_of(conn, request, project_id, window.previous())
    return respond(SummaryResponse, {"data": {"current": current, "previous": previous}})


# Each agent's latest start in the window: one probe of agent_runs_agent_idx per
# agent, all in one statement (a project may have hundreds of agents).
_LAST_RUNS = """
SELECT a.agent_name, (
    SELECT started_at FROM agent_runs
    WHERE project_id = %(project)s AND agent_name = a.agent_name
      AND started_at >= %(since)s AND started_at < %(until)s
    ORDER BY started_at DESC LIMIT 1)
FROM unnest(%(agents)s::text[]) AS a (agent_name)
"""


@routes.get(
    "/v1/projects/{project_id}/agent/health",
    summary="Health per agent",
    response=HealthResponse,
    query=params.WINDOW_QUERY,
)
async def health(request: web.Request) -> web.Response:
    """Each agent's runs, loop and error rates, stalls, durations and cost in the window,
    the highest loop rate first."""
    project_id = await params.read_project(request)
    window = params.window(request)
    args = {
        "project": project_id,
        "since": window.since,
        "until": window.until,
        "stall": params.stall_after(request),
    }
    async with request.app[appkeys.POOL].connection() as conn:
        rows = await window_counters(conn, project_id, window, group="agent_name")
        finished = sum(counters(tuple(values))["finished_runs"] for _, *values in rows)
        percentiles = await duration_percentiles(
            conn, request, project_id, window, finished, per_agent=True, median=False
        )
        stalled = dict(
            await (
                await conn.execute(
                    _STALLED.format(key="agent_name,", group="GROUP BY agent_name"), args
                )
            ).fetchall()
        )
        totals_of = {name: counters(tuple(values)) for name, *values in rows}
        totals_of = {name: totals for name, totals in totals_of.items() if totals["runs"]}
        last_runs = dict(
            await (await conn.execute(_LAST_RUNS, {**args, "agents": list(totals_of)})).fetchall()
        )
        agents = []
        for agent_name, totals in totals_of.items():
            agents.append(
                {
                    "agent_name": agent_name,
                    "runs": totals["runs"],
                    "loop_runs": totals["loop_runs"],
                    "loop_rate": rate(totals["loop_runs"], totals["runs"]),
                    **verdicts(totals),
                    "error_runs": totals["error_runs"],
                    "error_rate": rate(totals["error_runs"], totals["runs"]),
                    "stalled_runs": stalled.get(agent_name, 0),
                    "p95_duration_ms": percentiles.get(agent_name, (None, None))[1],
                    "avg_steps": rate(totals["steps"], totals["runs"]),
                    "input_tokens": totals["input_tokens"],
                    "output_tokens": totals["output_tokens"],
                    "cost_usd": round(totals["cost_usd"], 6),
                    "last_run_at": last_runs[agent_name],
                }
            )
    agents.sort(key=lambda agent: (-(agent["loop_rate"] or 0), -agent["runs"], agent["agent_name"]))
    return respond(HealthResponse, {"data": agents, **window.bounds()})


_SERIES_COUNTERS = (
    "runs", "loop_runs", "detected_loop_runs", "error_runs", "finished_runs", "steps",
    "input_tokens", "output_tokens", "cost_usd",
)  # fmt: skip


@routes.get(
    "/v1/projects/{project_id}/agent/runs/timeseries",
    summary="Runs over time",
    response=TimeseriesResponse,
    query=(
        *params.WINDOW_QUERY,
        Param("bucket", params.Duration, "Bucket size, whole minutes: 1m…1d (default 1h)."),
        Param("agent_name", str, "Only this agent."),
    ),
)
async def timeseries(request: web.Request) -> web.Response:
    """Counters per time bucket (runs, loops, errors, steps, tokens, cost), every bucket
    of the window present."""
    project_id = await params.read_project(request)
    window = params.window(request)
    size = params.duration(request.query.get("bucket", "1h"), "bucket")
    if int(size.total_seconds()) % 60:
        raise params.invalid("bucket", "must be whole minutes")
    if window.span / size > MAX_BUCKETS:
        raise params.invalid("bucket", f"too small for this window (at most {MAX_BUCKETS} buckets)")
    agent_name = params.text(request, "agent_name")
    async with request.app[appkeys.POOL].connection() as conn:
        rows = await window_counters(
            conn, project_id, window, "t", agent_name, size, _SERIES_COUNTERS
        )
    by_start = {start: counters(tuple(values), _SERIES_COUNTERS) for start, *values in rows}
    buckets = []
    start = _floor(window.since, size)
    while start < window.until:
        totals = by_start.get(start) or counters(None, _SERIES_COUNTERS)
        buckets.append({"start": start, **totals, "cost_usd": round(totals["cost_usd"], 6)})
        start += size
    return respond(
        TimeseriesResponse,
        {"data": buckets, "bucket_seconds": int(size.total_seconds()), **window.bounds()},
    )


@routes.get(
    "/v1/projects/{project_id}/agent/runs/terminations",
    summary="Termination reasons",
    response=TerminationsResponse,
    query=params.WINDOW_QUERY,
)
async def terminations(request: web.Request) -> web.Response:
    """How many of the window's runs ended for each reason; null counts the unfinished."""
    project_id = await params.read_project(request)
    window = params.window(request)
    async with request.app[appkeys.POOL].connection() as conn:
        [row] = await window_counters(conn, project_id, window)
    totals = counters(row)
    data: list[dict[str, Any]] = [
        {"termination_reason": reason, "count": totals[f"term_{reason}"]}
        for reason in TERMINATION_REASONS
    ]
    data.append({"termination_reason": None, "count": totals["runs"] - totals["finished_runs"]})
    return respond(TerminationsResponse, {"data": data, **window.bounds()})
