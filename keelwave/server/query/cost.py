"""``GET /agent/cost``: where the money goes, by model or by agent, in total and over time.

By model, the project's model calls are read (ai_traces, calls without a run
included), each counted in the bucket its own start falls in. By agent, cost
is what the aggregates count: a run's model calls add up on the run, which
counts in the hour it started, so the whole hours of the window come from the
hourly rollups and only its edges from agent_runs (aggregates.range_args), and
a week reads about 170 rollup rows per agent. Buckets are UTC hours or days.

``totals`` has every key, the dearest first; ``series`` the eight dearest keys
per bucket, and the rest summed as ``other``, for buckets with any calls.
"""

from __future__ import annotations

from collections import defaultdict
from datetime import timedelta
from typing import Any

from aiohttp import web

from keelwave.server.http import appkeys, params
from keelwave.server.http.operations import ApiRoutes, Param
from keelwave.server.http.responses import respond
from keelwave.server.query.aggregates import range_args
from keelwave.server.query.explorer_schemas import CostResponse, GroupBy, Unit
from keelwave.server.store import daily_rollups

routes = ApiRoutes("query")

TOP_KEYS = 8
OTHER = "other"
BUCKETS = ("hour", "day")
GROUPS = ("model", "agent")
MAX_BUCKETS = 2000
# Without ``bucket``: hours up to two days, days beyond.
HOURS_UP_TO = timedelta(days=2)

# (key, bucket start, cost, input tokens, output tokens, model calls)
_BY_MODEL = """
SELECT model, date_trunc(%(unit)s, started_at, 'UTC'), coalesce(sum(cost_usd), 0),
       sum(input_tokens), sum(output_tokens), count(*)
FROM ai_traces
WHERE project_id = %(project)s AND started_at >= %(since)s AND started_at < %(until)s
GROUP BY 1, 2
"""

# Whole hours from the run rollups (whole days from their daily copy, daily_rollups.py,
# for daily buckets), the edges from the runs.
_BY_AGENT = f"""
WITH parts AS ({
    daily_rollups.read_rows(
        daily_rollups.RUNS,
        "agent_name, {time} AS t, cost_usd, input_tokens, output_tokens, llm_calls",
        "full",
    )
}
    UNION ALL
    SELECT agent_name, started_at, cost_usd, input_tokens, output_tokens, llm_calls
    FROM agent_runs
    WHERE project_id = %(project)s
      AND ((started_at >= %(since)s AND started_at < %(full_from)s)
           OR (started_at >= %(full_to)s AND started_at < %(until)s))
)
SELECT agent_name, date_trunc(%(unit)s, t, 'UTC'), sum(cost_usd), sum(input_tokens),
       sum(output_tokens), sum(llm_calls)
FROM parts
GROUP BY 1, 2
HAVING sum(llm_calls) > 0 OR sum(cost_usd) > 0
"""


def report(rows: list[tuple]) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """(totals, series) from (key, bucket start, cost, input, output, calls) rows."""
    totals: dict[str, list[float]] = defaultdict(lambda: [0.0, 0, 0, 0])
    for key, _, cost, input_tokens, output_tokens, calls in rows:
        total = totals[key]
        total[0] += float(cost)
        total[1] += int(input_tokens)
        total[2] += int(output_tokens)
        total[3] += int(calls)
    ranked = sorted(totals.items(), key=lambda item: (-item[1][0], item[0]))
    shown = {key for key, _ in ranked[:TOP_KEYS]}
    points: dict[tuple, float] = defaultdict(float)
    for key, start, cost, *_ in rows:
        points[(start, key if key in shown else OTHER)] += float(cost)
    top = {key: position for position, (key, _) in enumerate(ranked)}
    series = [
        {"bucket_start": start, "key": key, "cost_usd": round(cost, 9)}
        for (start, key), cost in sorted(
            points.items(), key=lambda item: (item[0][0], top.get(item[0][1], TOP_KEYS))
        )
    ]
    return [
        {"key": key, "cost_usd": round(cost, 9), "input_tokens": tokens_in,
         "output_tokens": tokens_out, "calls": calls}
        for key, (cost, tokens_in, tokens_out, calls) in ranked
    ], series  # fmt: skip


@routes.get(
    "/v1/projects/{project_id}/agent/cost",
    summary="Cost by model or agent",
    response=CostResponse,
    query=(
        *params.WINDOW_QUERY,
        Param("bucket", Unit, "hour or day (default: hour for up to two days, else day)."),
        Param("group_by", GroupBy, "model (default) or agent."),
    ),
)
async def cost(request: web.Request) -> web.Response:
    """Cost, tokens and model calls per model or per agent in the window, the dearest
    first, and the cost of the top eight (and the rest, as other) per hour or day."""
    project_id = await params.read_project(request)
    window = params.window(request)
    group_by = params.choice(request, "group_by", GROUPS) or "model"
    unit = params.choice(request, "bucket", BUCKETS)
    if unit is None:
        unit = "hour" if window.span <= HOURS_UP_TO else "day"
    if window.span / timedelta(**{f"{unit}s": 1}) > MAX_BUCKETS:
        raise params.invalid("bucket", f"too small for this window (at most {MAX_BUCKETS} buckets)")
    args = {**range_args(project_id, window), "unit": unit}
    args |= daily_rollups.hour_ranges(args["full_from"], args["full_to"], "full", unit == "day")
    async with request.app[appkeys.POOL].connection() as conn:
        sql = _BY_MODEL if group_by == "model" else _BY_AGENT
        rows = await (await conn.execute(sql, args)).fetchall()
    totals, series = report(rows)
    body = {"group_by": group_by, "bucket": unit, **window.bounds(), "totals": totals,
            "series": series}  # fmt: skip
    return respond(CostResponse, {"data": body})
