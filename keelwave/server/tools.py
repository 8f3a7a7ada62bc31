"""``GET /tools``: per tool, its calls, runs, repeats, failures and durations over a window.

Tool calls count in the window their run started in, like every aggregate
(so a run's calls are never split between two windows, and "repeated earlier
in the same run" is decided over the whole run). Whole hours come from
agent_tool_rollups, which holds finished runs; the partial hours at the
window's edges and the runs still going are read from their steps, so the
counts are exact. Duration percentiles are exact (percentile_cont over the
steps) while the window holds at most ``tools_exact_calls`` (a setting)
calls; beyond that they come from the rollups' histogram, within
``tool_rollups.ACCURACY``.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any

from aiohttp import web

from keelwave.server import appkeys, params, tool_rollups
from keelwave.server.aggregates import rate, whole_hours
from keelwave.server.responses import json_response

routes = web.RouteTableDef()

_RAW_RUNS = """
    SELECT project_id, id, started_at FROM agent_runs
    WHERE project_id = %(project)s
      AND ((started_at >= %(since)s AND started_at < %(full_from)s)
           OR (started_at >= %(full_to)s AND started_at < %(until)s)
           OR (ended_at IS NULL AND started_at >= %(full_from)s AND started_at < %(full_to)s))
"""
_RAW_STATS = tool_rollups.stats_of_steps(f"({tool_rollups.steps_of_runs('raw_runs')})")
_COUNTERS = ", ".join(tool_rollups.COUNTERS)

# (tool, duration bin, calls, runs, repeated calls, failed calls), bins ascending.
_HISTOGRAM = f"""
WITH raw_runs AS ({_RAW_RUNS})
SELECT tool_name, duration_bin, {", ".join(f"sum({c})" for c in tool_rollups.COUNTERS)}
FROM (
    SELECT tool_name, duration_bin, {_COUNTERS} FROM agent_tool_rollups
    WHERE project_id = %(project)s AND bucket >= %(full_from)s AND bucket < %(full_to)s
    UNION ALL
    SELECT tool_name, duration_bin, {_COUNTERS} FROM ({_RAW_STATS}) AS raw
) AS parts
GROUP BY 1, 2
ORDER BY 1, 2
"""

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


@routes.get("/v1/projects/{project_id}/agent/tools")
async def tools(request: web.Request) -> web.Response:
    project_id = await params.read_project(request)
    window = params.window(request)
    full_from, full_to = whole_hours(window)
    args = {
        "project": project_id,
        "since": window.since,
        "until": window.until,
        "full_from": full_from,
        "full_to": full_to,
    }
    totals: dict[str, list[int]] = defaultdict(lambda: [0, 0, 0, 0])
    histograms: dict[str, list[tuple[int, int]]] = defaultdict(list)
    async with request.app[appkeys.POOL].connection() as conn:
        for name, duration_bin, *counters in await (
            await conn.execute(_HISTOGRAM, args)
        ).fetchall():
            total = totals[name]
            for position, value in enumerate(counters):
                total[position] += int(value)
            if duration_bin != tool_rollups.NO_DURATION and counters[0]:
                histograms[name].append((duration_bin, int(counters[0])))
        totals = {name: total for name, total in totals.items() if total[0] > 0}
        exact_up_to = request.app[appkeys.SETTINGS].tools_exact_calls
        if sum(total[0] for total in totals.values()) <= exact_up_to:
            rows = await (await conn.execute(_EXACT_PERCENTILES, args)).fetchall()
            percentiles = {name: (p50, p95) for name, p50, p95 in rows}
        else:
            percentiles = {
                name: (tool_rollups.percentile(bins, 0.5), tool_rollups.percentile(bins, 0.95))
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
    return json_response({"data": data, **window.as_json()})
