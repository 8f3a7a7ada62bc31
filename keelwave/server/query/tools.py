"""``GET /tools``: per tool, its calls, runs, repeats, failures and durations over a window.

Tool calls count in the window their run started in, like every aggregate
(so a run's calls are never split between two windows, and "repeated earlier
in the same run" is decided over the whole run). Whole hours come from
agent_tool_rollups, which holds finished runs (whole UTC days from its daily
copy, daily_rollups.py); the runs still going, and the
finished runs that make up the difference between the window's edges and
whole hours, are read from their steps, so the counts are exact; except that
over a week or more an edge hour too busy to read that way is counted whole
or not at all (ROUND_EDGES_FROM), and the answer's counted_since and
counted_until say what was counted. Duration
percentiles are exact (percentile_cont over the steps) while the window
holds at most ``exact_percentiles_up_to`` (a setting) calls; beyond that they
come from the rollups' histogram, within ``histogram.ACCURACY``.
"""

from __future__ import annotations

from collections import defaultdict
from datetime import datetime, timedelta
from typing import Any

from aiohttp import web
from psycopg import AsyncConnection

from keelwave.server.http import appkeys, params
from keelwave.server.http.operations import ApiRoutes
from keelwave.server.http.params import Window
from keelwave.server.http.responses import respond
from keelwave.server.query.aggregates import HOUR, floor_hour, rate
from keelwave.server.query.schemas import ToolsResponse
from keelwave.server.store import daily_rollups, histogram, pending_tools, tool_rollups

routes = ApiRoutes("query")

# Runs read from their steps: every unfinished run of the window, plus the
# finished runs of the edge ranges (sign +1: inside the window but outside the
# rollup hours; sign -1: inside a rollup hour but outside the window).
_RAW_RUNS = """
    SELECT project_id, id, started_at, 1 AS sign FROM agent_runs
    WHERE project_id = %(project)s AND ended_at IS NULL
      AND started_at >= %(since)s AND started_at < %(until)s
{edges}
""".format(
    # One arm per edge (an unused edge is an empty range), with plain bounds the
    # planner sees, so each is an index range scan of agent_runs.
    edges="".join(
        f"""
    UNION ALL
    SELECT project_id, id, started_at, %(edge{n}_sign)s::int FROM agent_runs
    WHERE project_id = %(project)s AND ended_at IS NOT NULL
      AND started_at >= %(edge{n}_from)s AND started_at < %(edge{n}_to)s"""
        for n in range(2)
    )
)
_RAW_STATS = tool_rollups.stats_of_steps(f"({tool_rollups.steps_of_runs('raw_runs', 'r.sign')})")
_COUNTERS = ", ".join(tool_rollups.COUNTERS)
# Summed as float8, which is exact for whole numbers below 2^53: sum(bigint) keeps a
# 128-bit state for each group, which 36,000 groups of four counters pay for (a sixth of
# the query with 400 tools). Returned as bigint, not the numeric sum() makes of bigint:
# a Decimal a counter of 36,000 rows is 10-20 ms of Python.
_BIGINT_SUMS = ", ".join(f"sum({c}::float8)::bigint AS {c}" for c in tool_rollups.COUNTERS)
_ROLLUP_ROWS = daily_rollups.read_rows(
    daily_rollups.TOOLS, f"tool_name, duration_bin, {_COUNTERS}", "hours"
)


def _histogram(rollup_rows: str) -> str:
    """(tool, duration bin, calls, runs, repeated calls, failed calls), unordered (as in
    aggregates.py, Python sorts them far quicker), from ``rollup_rows`` and the raw runs:
    one GROUP BY over both (grouping the rollups first and then again with the raw
    runs took twice as long: 400 tools make 36,000 groups from 260,000 rows a month)."""
    return f"""
WITH raw_runs AS ({_RAW_RUNS})
SELECT tool_name, duration_bin, {_BIGINT_SUMS}
FROM ({rollup_rows}
    UNION ALL
    SELECT tool_name, duration_bin, {_COUNTERS} FROM ({_RAW_STATS}) AS raw
) AS parts
GROUP BY 1, 2
"""


_HISTOGRAM = _histogram(_ROLLUP_ROWS)
# With the rows the rollup hours still have pending (store/pending_tools.py).
_HISTOGRAM_WITH_PENDING = _histogram(f"{_ROLLUP_ROWS}\n    UNION ALL{pending_tools.READ}")


# The sums of a month's histogram rows are grouped in memory, not spilled to disk in
# batches: a hash aggregate may use twice work_mem (hash_mem_multiplier), and 400
# tools' 36,000 groups take 22 MB, where PostgreSQL's default work_mem (4 MB) allows 8.
GROUPING_MEMORY = "32MB"

# Over a window this long, an hour cut by its edge whose cheaper part still holds more
# than EXACT_EDGE_RUNS finished runs is counted whole or not at all (the nearer way),
# and the answer says so (counted_since/counted_until): reading those runs' steps is
# most of what a month's answer would cost (bench/scale.py: ~1,000 runs, 20,000 steps,
# 7,600 buffers for half an hour), for at most half an hour in 168 or more.
ROUND_EDGES_FROM = timedelta(days=7)
EXACT_EDGE_RUNS = 200

# Finished runs in each part of the hours cut by the window's edges.
_EDGE_RUNS = "SELECT " + ", ".join(
    f"""(SELECT count(*) FROM agent_runs WHERE project_id = %(project)s AND ended_at IS NOT NULL
         AND started_at >= %(cut{n}_from)s AND started_at < %(cut{n}_to)s)"""
    for n in range(4)
)


async def _ranges(
    conn: AsyncConnection, project_id: str, window: Window
) -> tuple[dict[str, Any], Window]:
    """Which rollup hours to read, which edge ranges of finished runs to add or take out,
    and the range that is counted (the window, unless an edge is rounded).

    An hour cut by the window's edge is read whichever way touches fewer runs:
    its part inside the window from the steps, or the hour's rollup minus its
    part outside. A window ending now thus reads its last hour from the rollup
    (nothing of it lies after now). Over ROUND_EDGES_FROM or more, see above.
    """
    since, until = window.since, window.until
    first, last = floor_hour(since), floor_hour(until)
    if first == last:  # inside one hour: all from the steps
        return _args(first, first, [(since, until, 1)]), window
    first_hour = await conn.execute(
        daily_rollups.first_hour_sql(daily_rollups.TOOLS), {"project": project_id}
    )
    (stored_from,) = await first_hour.fetchone()
    cuts = [(first, since), (since, first + HOUR), (last, until), (until, last + HOUR)]
    counts = [0, 0, 0, 0]
    if since > first or until > last:
        parts = {f"cut{n}_{end}": moment for n, cut in enumerate(cuts) for end, moment in
                 zip(("from", "to"), cut, strict=True)}  # fmt: skip
        counts = list(
            await (await conn.execute(_EDGE_RUNS, {"project": project_id, **parts})).fetchone()
        )
    may_round = window.span >= ROUND_EDGES_FROM
    edges: list[tuple[datetime, datetime, int]] = []
    hours_from, hours_to = first, last
    counted_since, counted_until = since, until
    if since > first:
        outside, inside = counts[0], counts[1]
        if may_round and min(inside, outside) > EXACT_EDGE_RUNS:
            hours_from = counted_since = first if inside >= outside else first + HOUR
        elif inside <= outside:
            hours_from = first + HOUR
            edges.append((since, hours_from, 1))
        else:
            edges.append((first, since, -1))
    if until > last:
        inside, outside = counts[2], counts[3]
        if may_round and min(inside, outside) > EXACT_EDGE_RUNS:
            hours_to = counted_until = last + HOUR if inside >= outside else last
        elif inside <= outside:
            edges.append((last, until, 1))
        else:
            hours_to = last + HOUR
            edges.append((until, hours_to, -1))
    return _args(hours_from, hours_to, edges, stored_from), Window(counted_since, counted_until)


def _args(
    hours_from: datetime, hours_to: datetime, edges: list, stored_from: datetime | None = None
) -> dict[str, Any]:
    args = daily_rollups.hour_ranges(hours_from, hours_to, "hours", stored_from=stored_from)
    unused = (hours_from, hours_from, 1)
    for n, (since, until, sign) in enumerate([*edges, unused, unused][:2]):
        args |= {f"edge{n}_from": since, f"edge{n}_to": until, f"edge{n}_sign": sign}
    return args


_EXACT_PERCENTILES = """
SELECT s.tool_name,
       percentile_cont(0.5) WITHIN GROUP (ORDER BY s.duration_ms),
       percentile_cont(0.95) WITHIN GROUP (ORDER BY s.duration_ms)
FROM agent_runs r
JOIN agent_steps s ON s.project_id = r.project_id AND s.run_id = r.id
WHERE r.project_id = %(project)s AND r.started_at >= %(since)s AND r.started_at < %(until)s
  AND s.tool_name IS NOT NULL
GROUP BY 1
"""


@routes.get(
    "/v1/projects/{project_id}/agent/tools",
    summary="Tool statistics",
    response=ToolsResponse,
    query=params.WINDOW_QUERY,
)
async def tools(request: web.Request) -> web.Response:
    """Per tool: calls, runs, repeated calls, errors and duration percentiles, the most
    called first."""
    project_id = await params.read_project(request)
    window = params.window(request)
    totals: dict[str, list[int]] = defaultdict(lambda: [0, 0, 0, 0])
    histograms: dict[str, list[tuple[int, int]]] = defaultdict(list)
    async with request.app[appkeys.POOL].connection() as conn:
        ranges, counted = await _ranges(conn, project_id, window)
        args = {"project": project_id, "since": counted.since, "until": counted.until, **ranges}
        pending = request.app.get(appkeys.PENDING_TOOL_ROLLUPS, True)
        histogram_sql = _HISTOGRAM_WITH_PENDING if pending else _HISTOGRAM
        async with conn.transaction():
            await conn.execute(f"SET LOCAL work_mem = '{GROUPING_MEMORY}'")
            rows = await (await conn.execute(histogram_sql, args)).fetchall()
        # (36,000 rows with 400 tools: each counter by name, not in a loop of its own)
        for name, duration_bin, calls, runs, repeated, errors in rows:
            total = totals[name]
            total[0] += calls
            total[1] += runs
            total[2] += repeated
            total[3] += errors
            histograms[name].append((duration_bin, calls))
        totals = {name: total for name, total in totals.items() if total[0] > 0}
        exact_up_to = request.app[appkeys.SETTINGS].exact_percentiles_up_to
        if sum(total[0] for total in totals.values()) <= exact_up_to:
            rows = await (await conn.execute(_EXACT_PERCENTILES, args)).fetchall()
            percentiles = {name: (p50, p95) for name, p50, p95 in rows}
        else:
            for bins in histograms.values():
                bins.sort()  # bins ascending
            percentiles = {
                name: (histogram.percentile(bins, 0.5), histogram.percentile(bins, 0.95))
                for name, bins in histograms.items()
            }
    data: list[dict[str, Any]] = []
    for name, (calls, runs, repeated, errors) in totals.items():
        p50, p95 = percentiles.get(name, (None, None))
        data.append(
            {
                "tool_name": name,
                "calls": calls,
                "runs": runs,
                "repeated_calls": repeated,
                "repeat_rate": rate(repeated, calls),
                "error_calls": errors,
                "error_rate": rate(errors, calls),
                "p50_duration_ms": p50,
                "p95_duration_ms": p95,
            }
        )
    data.sort(key=lambda row: (-row["calls"], row["tool_name"]))
    body = {"data": data, **window.bounds()}
    body |= {"counted_since": counted.since, "counted_until": counted.until}
    return respond(ToolsResponse, body)
