"""Daily and weekly rollups: summary, health, terminations, daily time series, cost by
agent and tools read whole UTC days from the daily copies of the run counters and the
duration and tool histograms, and whole UTC weeks from the weekly copies of the
histograms, and answer exactly as the hourly rows alone do, for windows of half a day
to four days, and of six days to two weeks and a half, with edges on, before and after
midnight (and Monday's); after late steps into runs of earlier days, re-finishes, the
reaper, deletion and retention. The daily rows are always the sum of their day's hourly
rows, and the weekly ones the sum of their week's daily rows."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta

import aiohttp
import psycopg
import pytest
from conftest import Api, make_project, make_settings, query
from lifecycle_data import Run, aggregates, judged, send
from psycopg_pool import AsyncConnectionPool

from keelwave.db import migrate
from keelwave.server.app import create_app
from keelwave.server.store import daily_rollups, retention

DAY = timedelta(days=1)
NOW = datetime.now(UTC).replace(microsecond=0)
MIDNIGHT = daily_rollups.floor_day(NOW)
DAILY_PATHS = (
    "/summary",
    "/health",
    "/tools",
    "/runs/terminations",
    "/runs/timeseries?bucket=1d",
    "/cost?group_by=agent&bucket=day",
)


@pytest.fixture
async def api(db_url: str, aiohttp_server, monkeypatch):
    """A real server whose percentiles always come from the histograms (never exact),
    which times silent runs out after 2 s, and whose retention runs only when asked."""
    monkeypatch.setattr(retention, "FIRST_AFTER_SECONDS", 3600.0)
    settings = make_settings(
        exact_percentiles_up_to=0,
        stall_after_seconds=1,
        timeout_after_seconds=2,
        retention_every_seconds=3600,
    )
    server = await aiohttp_server(create_app(settings, db_url))
    async with aiohttp.ClientSession() as session:
        yield Api(str(server.make_url("")).rstrip("/"), session)


# Runs of every 47 minutes over four days, windows of half a day to four days; or runs
# of every 5 hours over 17 days (two weeks and more: weekly rows), windows of six days
# to two weeks and a half. (name: days of runs, minutes between runs, window spans)
SPANS = {
    "days": (4, 47, (DAY / 2, DAY, 1.5 * DAY, 2 * DAY, 3 * DAY, 4 * DAY)),
    "weeks": (17, 300, (6 * DAY, 7 * DAY, 8.5 * DAY, 14 * DAY, 16 * DAY + timedelta(hours=5))),
}


def runs_over(days: int, minutes: int) -> list[Run]:
    """Runs of two agents every ``minutes`` over ``days`` days and a bit, so some start
    just before and just after midnights; every fifth one left running."""
    runs = []
    started = NOW - days * DAY - timedelta(hours=3)
    n = 0
    while started < NOW - timedelta(minutes=2):
        runs.append(
            Run(
                started=started,
                agent=("alpha", "beta")[n % 2],
                reason=None if n % 5 == 4 else ("clean", "error", "max_steps_reached")[n % 3],
                steps=n % 6,
                calls=n % 2,
                looping=n % 7 == 0,
            )
        )
        started += timedelta(minutes=minutes, seconds=n % 13)
        n += 1
    # Two runs a second either side of a midnight.
    for offset in (-1, 0):
        runs.append(Run(started=MIDNIGHT - DAY + timedelta(seconds=offset), steps=3))
    return runs


def windows(days: int, spans: tuple[timedelta, ...]) -> list[tuple[datetime, datetime]]:
    """Windows of each span, starting on a midnight, half an hour before one, an hour
    after one and at an odd minute."""
    found = []
    for span in spans:
        for offset in (
            timedelta(0),
            -timedelta(minutes=30),
            timedelta(hours=1),
            timedelta(hours=13, minutes=17, seconds=31),
        ):
            since = MIDNIGHT - days * DAY + offset
            while since + span <= NOW + timedelta(hours=1):
                found.append((since, since + span))
                since += 1.5 * DAY
    return found


def hourly_only(
    hours_from: datetime, hours_to: datetime, name: str, days: bool = True, **_plan
) -> dict:
    """daily_rollups.hour_ranges as if there were no daily or weekly rows to read: every
    hour from the hourly table, as before the daily copies, and nothing taken out."""
    empty = ("days_from", "days_to", "h_head_to", "h_days_from", "h_weeks_from", "h_weeks_to",
             "h_days_to", "h_tail_from", "h_less0_from", "h_less0_to", "h_less1_from",
             "h_less1_to")  # fmt: skip
    return {f"{name}_from": hours_from, f"{name}_to": hours_to} | {
        f"{name}_{part}": hours_to for part in empty
    }


async def answers(api: Api, project, monkeypatch, spans: str) -> tuple[dict, dict]:
    """The aggregates for every window, read with the daily and weekly rows and without."""
    new, old = {}, {}
    days, _, lengths = SPANS[spans]
    for since, until in windows(days, lengths):
        found = await aggregates(api, project, since, until)
        new[since, until] = {path: found[path] for path in DAILY_PATHS}
    with monkeypatch.context() as patch:
        patch.setattr(daily_rollups, "hour_ranges", hourly_only)
        for since, until in windows(days, lengths):
            found = await aggregates(api, project, since, until)
            old[since, until] = {path: found[path] for path in DAILY_PATHS}
    return new, old


def _off(db_url: str, project_id: str, table, fine: str, coarse: str, period: str) -> list:
    """Rows of ``coarse`` (keyed by UTC ``period``) that differ from the sum of their
    period's rows in ``fine`` (rows counting nothing are left out on both sides; the
    tool rollups' rows are in shards: keys are summed)."""
    keys = ", ".join(table.keys)
    sums = ", ".join(f"sum({c})::bigint" for c in table.counters)
    time = "bucket" if fine == table.hourly else "day"
    return query(
        db_url,
        f"""
        WITH fine AS (
            SELECT date_trunc('{period}', {time}, 'UTC') AS {period}, {keys}, {sums}
            FROM {fine} WHERE project_id = %(p)s GROUP BY 1, {keys}
            HAVING sum({table.counts_something}) <> 0
        ), coarse AS (
            SELECT {period}, {keys}, {sums} FROM {coarse}
            WHERE project_id = %(p)s GROUP BY 1, {keys}
            HAVING sum({table.counts_something}) <> 0
        )
        SELECT '{coarse}', * FROM ((TABLE fine EXCEPT ALL TABLE coarse)
            UNION ALL (TABLE coarse EXCEPT ALL TABLE fine)) AS differ
        """.replace("%(p)s", "%s"),
        (project_id,) * 2,
    )


def twins_off(db_url: str, project_id: str) -> list[tuple]:
    """Daily rows that differ from the sum of their day's hourly rows, and weekly rows
    that differ from the sum of their week's daily rows."""
    found = []
    for table in daily_rollups.ROLLUPS:
        found += _off(db_url, project_id, table, table.hourly, table.daily, "day")
        if table.weekly:
            found += _off(db_url, project_id, table, table.daily, table.weekly, "week")
    return found


async def finished_by_reaper(db_url: str, project_id: str) -> None:
    for _ in range(200):
        if query(
            db_url,
            "SELECT count(*) FROM agent_runs WHERE project_id = %s AND ended_at IS NULL",
            (project_id,),
        ) == [(0,)]:
            return
        await asyncio.sleep(0.1)
    raise AssertionError("the reaper left runs unfinished")


async def late_steps(api: Api, project, run: Run) -> None:
    """Steps for a run that finished days ago: its tool calls move in the rollups."""
    more = Run(started=run.started, steps=run.steps + 3, id=run.id).step_bodies()[run.steps :]
    status, body, _ = await api.post(
        "/v1/ingest/agent/steps", json=more, headers=project.auth("ingest")
    )
    assert status == 200, body


async def refinish(api: Api, project, run: Run, seconds: float) -> None:
    """Finish a finished run again with another duration: it moves between bins."""
    finish = {
        "termination_reason": "error",
        "ended_at": (run.started + timedelta(seconds=seconds)).isoformat(),
    }
    status, body, _ = await api.post(
        f"/v1/ingest/agent/runs/{run.id}/finish", json=finish, headers=project.auth("ingest")
    )
    assert status == 200, body


@pytest.mark.parametrize(("spans", "retention_days"), [("days", 2), ("weeks", 9)])
async def test_daily_rollups_answer_as_the_hourly_ones(
    api: Api, db_url: str, monkeypatch, spans: str, retention_days: int
):
    project = make_project(db_url)
    days, minutes, _ = SPANS[spans]
    runs = runs_over(days, minutes)
    await send(api, project, runs)
    finished = [run for run in runs if run.reason and run.steps]
    await late_steps(api, project, finished[1])  # days ago
    await late_steps(api, project, finished[len(finished) // 2])
    await refinish(api, project, finished[2], seconds=4321.5)
    await refinish(api, project, finished[-3], seconds=0.25)
    await finished_by_reaper(db_url, project.id)
    # The verdicts too (they move the findings' counters): the answers with and without
    # the daily rows are read one after the other, and must see the same counts.
    await judged(db_url, project.id, timeout=120)
    # Every run has ended by now (the reaper timed the rest out): each day a run started
    # on has its row, and each week.
    started = {daily_rollups.floor_day(run.started) for run in runs}
    assert query(
        db_url,
        "SELECT count(DISTINCT day) FROM agent_duration_rollups_daily WHERE project_id = %s",
        (project.id,),
    ) == [(len(started),)]
    assert query(
        db_url,
        "SELECT count(DISTINCT week) FROM agent_duration_rollups_weekly WHERE project_id = %s",
        (project.id,),
    ) == [(len({daily_rollups.floor_week(day) for day in started}),)]
    assert twins_off(db_url, project.id) == []
    new, old = await answers(api, project, monkeypatch, spans)
    assert new == old
    some = new[max(new, key=lambda window: window[1] - window[0])]  # the longest window
    assert some["/summary"]["data"]["current"]["p95_duration_ms"] is not None
    assert some["/tools"]["data"], "the tools answer is not empty"

    # Deletion takes the runs out of the days (and weeks) too.
    for run in (finished[3], runs[-1]):
        status, body, _ = await api.request(
            "DELETE", f"/v1/projects/{project.id}/agent/runs/{run.id}", headers=project.auth()
        )
        assert status == 200, body
    assert twins_off(db_url, project.id) == []
    new, old = await answers(api, project, monkeypatch, spans)
    assert new == old

    # Retention: the cutoff falls inside a day (and, over weeks, inside a week), whose
    # daily (weekly) rows keep only what its kept hours (days) count.
    status, body, _ = await api.request(
        "PATCH",
        f"/v1/projects/{project.id}",
        json={"retention_days": retention_days},
        headers=project.auth(),
    )
    assert status == 200, body
    async with AsyncConnectionPool(db_url, kwargs={"autocommit": True}, open=False) as pool:
        summary = None
        while summary is None:
            summary = await retention.enforce(pool)
    [tally] = [p for p in summary["projects"] if p["project"] == project.name]
    cutoff_day = daily_rollups.floor_day(tally["cutoff"])
    assert tally["rollup_rows"] > 0
    assert twins_off(db_url, project.id) == []
    for table in daily_rollups.ROLLUPS:
        assert query(
            db_url,
            f"SELECT count(*) FROM {table.daily} WHERE project_id = %s AND day < %s",
            (project.id, cutoff_day),
        ) == [(0,)]
        if table.weekly:
            assert query(
                db_url,
                f"SELECT count(*) FROM {table.weekly} WHERE project_id = %s AND week < %s",
                (project.id, daily_rollups.floor_week(cutoff_day)),
            ) == [(0,)]
    new, old = await answers(api, project, monkeypatch, spans)
    assert new == old


def test_hour_ranges_split_whole_days_from_the_edge_hours() -> None:
    day = datetime(2026, 3, 10, tzinfo=UTC)
    hour = timedelta(hours=1)
    ranges = daily_rollups.hour_ranges(day - 3 * hour, day + 2 * DAY + 5 * hour, "x")
    assert (ranges["x_days_from"], ranges["x_days_to"]) == (day, day + 2 * DAY)
    ranges = daily_rollups.hour_ranges(day, day + DAY, "x")
    assert (ranges["x_days_from"], ranges["x_days_to"]) == (day, day + DAY)
    # No whole day inside: everything from the hourly rows.
    ranges = daily_rollups.hour_ranges(day + hour, day + DAY + hour, "x")
    assert ranges["x_days_from"] == ranges["x_days_to"] == day + DAY + hour
    ranges = daily_rollups.hour_ranges(day, day, "x")
    assert ranges["x_days_from"] == ranges["x_days_to"] == day


def histogram_plan(ranges: dict) -> dict:
    """What the histograms' arms read, by name, as (from, to), empty ranges left out."""
    arms = {
        "hours+": (ranges["x_from"], ranges["x_h_head_to"]),
        "hours-": (ranges["x_h_less0_from"], ranges["x_h_less0_to"]),
        "days": (ranges["x_h_days_from"], ranges["x_h_weeks_from"]),
        "weeks": (ranges["x_h_weeks_from"], ranges["x_h_weeks_to"]),
        "days ": (ranges["x_h_weeks_to"], ranges["x_h_days_to"]),
        "hours +": (ranges["x_h_tail_from"], ranges["x_to"]),
        "hours -": (ranges["x_h_less1_from"], ranges["x_h_less1_to"]),
    }
    return {arm: bounds for arm, bounds in arms.items() if bounds[0] < bounds[1]}


def test_hour_ranges_read_histograms_by_week_and_each_cut_day_the_cheaper_way() -> None:
    monday = datetime(2026, 3, 9, tzinfo=UTC)
    hour = timedelta(hours=1)
    later = monday + 60 * DAY  # "now", long after: every hour is stored
    # Cut days of 1 hour inside: those hours; weeks and the other whole days.
    ranges = daily_rollups.hour_ranges(
        monday - 2 * DAY - hour, monday + 15 * DAY + hour, "x", now=later
    )
    assert histogram_plan(ranges) == {
        "hours+": (monday - 2 * DAY - hour, monday - 2 * DAY),
        "days": (monday - 2 * DAY, monday),
        "weeks": (monday, monday + 14 * DAY),
        "days ": (monday + 14 * DAY, monday + 15 * DAY),
        "hours +": (monday + 15 * DAY, monday + 15 * DAY + hour),
    }
    # Cut days of 20 hours inside: the day, less its 4 hours outside.
    ranges = daily_rollups.hour_ranges(
        monday + 4 * hour, monday + 8 * DAY + 20 * hour, "x", now=later
    )
    assert histogram_plan(ranges) == {
        "hours-": (monday, monday + 4 * hour),
        "weeks": (monday, monday + 7 * DAY),
        "days ": (monday + 7 * DAY, monday + 9 * DAY),
        "hours -": (monday + 8 * DAY + 20 * hour, monday + 9 * DAY),
    }
    # A window ending now, 10 hours into the day: the hours after now hold nothing yet,
    # so the day less the current hour is cheaper than its 10 hours.
    now = monday + 8 * DAY + 10 * hour + timedelta(minutes=17)
    ranges = daily_rollups.hour_ranges(monday, monday + 8 * DAY + 10 * hour, "x", now=now)
    assert histogram_plan(ranges) == {
        "weeks": (monday, monday + 7 * DAY),
        "days ": (monday + 7 * DAY, monday + 9 * DAY),
        "hours -": (monday + 8 * DAY + 10 * hour, monday + 9 * DAY),
    }
    # …but not 2 hours into the day.
    ranges = daily_rollups.hour_ranges(monday, monday + 7 * DAY + 2 * hour, "x", now=now)
    assert histogram_plan(ranges) == {
        "weeks": (monday, monday + 7 * DAY),
        "hours +": (monday + 7 * DAY, monday + 7 * DAY + 2 * hour),
    }
    # A first day cut 16 hours in, where rows start 2 hours before the cut (retention,
    # a young project): the day less those 2 hours, not its 8 hours inside.
    ranges = daily_rollups.hour_ranges(
        monday + 16 * hour, monday + 7 * DAY, "x", now=later, stored_from=monday + 14 * hour
    )
    assert histogram_plan(ranges) == {
        "hours-": (monday, monday + 16 * hour),
        "weeks": (monday, monday + 7 * DAY),
    }
    ranges = daily_rollups.hour_ranges(monday + 16 * hour, monday + 7 * DAY, "x", now=later)
    assert histogram_plan(ranges) == {
        "hours+": (monday + 16 * hour, monday + DAY),
        "days": (monday + DAY, monday + 7 * DAY),
    }
    # Seven whole days that are no whole week: all from the daily rows.
    ranges = daily_rollups.hour_ranges(monday + DAY, monday + 8 * DAY, "x", now=later)
    assert histogram_plan(ranges) == {"days": (monday + DAY, monday + 8 * DAY)}
    # Inside one day, or read by the hour: all from the hourly rows.
    ranges = daily_rollups.hour_ranges(monday + hour, monday + 23 * hour, "x", now=later)
    assert histogram_plan(ranges) == {"hours+": (monday + hour, monday + 23 * hour)}
    ranges = daily_rollups.hour_ranges(monday, monday + 14 * DAY, "x", days=False, now=later)
    assert histogram_plan(ranges) == {"hours+": (monday, monday + 14 * DAY)}


def test_the_migration_fills_the_days_from_the_hours(fresh_db_url: str) -> None:
    """A database with history gets daily rows that are its hourly rows summed by day
    (the histograms' from 0014, the run counters' from 0023, the project's durations
    from 0024), and weekly rows of the histograms that are the days summed by week
    (0027)."""
    migrate.upgrade(fresh_db_url, "0013")
    with psycopg.connect(fresh_db_url) as conn:
        conn.execute("INSERT INTO projects (id, name) VALUES (gen_random_uuid(), 'old')")
        for hour, agent, bin_, runs in ((22, "a", 40, 2), (23, "a", 40, 3), (25, "a", 41, 1)):
            conn.execute(
                "INSERT INTO agent_duration_rollups SELECT id, %s, %s, %s, %s FROM projects",
                (datetime(2026, 1, 1, tzinfo=UTC) + timedelta(hours=hour), agent, bin_, runs),
            )
            conn.execute(
                "INSERT INTO agent_tool_rollups SELECT id, %s, 'grep', %s, %s, 1, 0, 1 "
                "FROM projects",
                (datetime(2026, 1, 1, tzinfo=UTC) + timedelta(hours=hour), bin_, runs * 2),
            )
            conn.execute(
                "INSERT INTO agent_run_rollups (project_id, agent_name, bucket, runs, steps, "
                "cost_usd) SELECT id, %s, %s, %s, 10, 0.25 FROM projects",
                (agent, datetime(2026, 1, 1, tzinfo=UTC) + timedelta(hours=hour), runs),
            )
    migrate.upgrade(fresh_db_url)
    with psycopg.connect(fresh_db_url) as conn:
        durations = conn.execute(
            "SELECT day, agent_name, duration_bin, runs FROM agent_duration_rollups_daily "
            "ORDER BY 1, 3"
        ).fetchall()
        tools = conn.execute(
            "SELECT day, duration_bin, calls, runs, repeated_calls, error_calls "
            "FROM agent_tool_rollups_daily ORDER BY 1, 2"
        ).fetchall()
        project = conn.execute(
            "SELECT day, duration_bin, runs FROM project_duration_rollups_daily ORDER BY 1"
        ).fetchall()
        project_hours = conn.execute(
            "SELECT count(*), sum(runs) FROM project_duration_rollups"
        ).fetchone()
        runs = conn.execute(
            "SELECT day, agent_name, shard, runs, steps, cost_usd, finished_runs "
            "FROM agent_run_rollups_daily ORDER BY 1"
        ).fetchall()
        weekly_durations = conn.execute(
            "SELECT week, agent_name, duration_bin, runs FROM agent_duration_rollups_weekly "
            "ORDER BY 3"
        ).fetchall()
        weekly_tools = conn.execute(
            "SELECT week, duration_bin, calls, runs, repeated_calls, error_calls "
            "FROM agent_tool_rollups_weekly ORDER BY 2"
        ).fetchall()
    first, second = datetime(2026, 1, 1, tzinfo=UTC), datetime(2026, 1, 2, tzinfo=UTC)
    week = datetime(2025, 12, 29, tzinfo=UTC)  # the Monday before
    assert weekly_durations == [(week, "a", 40, 5), (week, "a", 41, 1)]
    assert weekly_tools == [(week, 40, 10, 2, 0, 2), (week, 41, 2, 1, 0, 1)]
    assert durations == [(first, "a", 40, 5), (second, "a", 41, 1)]
    assert tools == [(first, 40, 10, 2, 0, 2), (second, 41, 2, 1, 0, 1)]
    assert runs == [(first, "a", 0, 5, 20, 0.5, 0), (second, "a", 0, 1, 10, 0.25, 0)]
    assert project == [(first, 40, 5), (second, 41, 1)] and project_hours == (3, 6)
    migrate.downgrade(fresh_db_url, "0013")
    with psycopg.connect(fresh_db_url) as conn:
        assert conn.execute("SELECT to_regclass('agent_tool_rollups_daily')").fetchone() == (None,)
        assert conn.execute("SELECT to_regclass('agent_run_rollups_daily')").fetchone() == (None,)
        for table in ("agent_duration_rollups_weekly", "agent_tool_rollups_weekly"):
            assert conn.execute("SELECT to_regclass(%s)", (table,)).fetchone() == (None,)


async def test_tools_over_a_week_count_a_busy_edge_hour_whole(
    api: Api, db_url: str, monkeypatch
) -> None:
    """Over 7 days or more, an edge hour whose cheaper part holds more than
    EXACT_EDGE_RUNS finished runs goes in whole or not at all, and counted_since says
    which; a shorter window, or a quiet edge, is counted exactly as asked."""
    from keelwave.server.query import tools

    monkeypatch.setattr(tools, "EXACT_EDGE_RUNS", 2)
    project = make_project(db_url)
    hour = daily_rollups.floor_day(NOW) - 6 * DAY + timedelta(hours=5)
    minutes = (5, 10, 15, 35, 40, 45, 50)  # 3 runs before :30 and 4 after
    runs = [Run(started=hour + timedelta(minutes=m), steps=3) for m in minutes]
    runs.append(Run(started=hour + 3 * DAY, steps=4))
    await send(api, project, runs)
    path = f"/v1/projects/{project.id}/agent/tools"

    async def tools_over(since: datetime, until: datetime) -> dict:
        window = {"since": since.isoformat(), "until": until.isoformat()}
        status, body, _ = await api.get(path, params=window, headers=project.auth("read"))
        assert status == 200, body
        return body

    def calls(body: dict) -> int:
        return sum(row["calls"] for row in body["data"])

    until = NOW + timedelta(minutes=1)
    week = await tools_over(until - 8 * DAY, until)
    assert week["counted_since"] == week["since"]  # the edge is a quiet hour: exact
    cut = hour + timedelta(minutes=30)
    rounded = await tools_over(cut, cut + 8 * DAY)
    assert rounded["since"] == cut.isoformat().replace("+00:00", "Z")
    # 4 runs inside the hour against 3 outside: the hour counts whole.
    assert rounded["counted_since"] == hour.isoformat().replace("+00:00", "Z")
    assert calls(rounded) == calls(week)
    assert rounded["data"] == (await tools_over(hour, cut + 8 * DAY))["data"]
    short = await tools_over(cut, cut + 5 * DAY)
    assert short["counted_since"] == short["since"]
    assert calls(short) == calls(week) - 3 * 3  # the 3 runs before :30 are out
