"""Daily copies of the rollups, so a month is read in days, not in hours.

agent_run_rollups counts by (hour a run started, agent), agent_duration_rollups
and agent_tool_rollups by (hour, agent or tool, duration bin): a row an agent an
hour, and about 150 bins an agent or tool an hour, so 30 days of a busy project
are 100,000 run rows for 150 agents and 500,000 to 750,000 histogram rows, and
summing them was most of what summary, health and tools cost (docs/benchmarks.md,
"Ten times the data"). Each has a daily twin, ``…_daily``, keyed by the UTC day
instead of the hour, holding at all times the sum of that day's hourly rows:
every write that changes an hourly row changes its day's row by the same
amount in the same statement (:func:`merge`), and retention, which
deletes hourly rows whole, takes what it deletes of a kept day out of that
day's row (:func:`retire_hours`). Readers take whole UTC days from the daily
table and the hours of the window's first and last day from the hourly one
(:func:`hour_ranges`, :func:`read_rows`), so every answer is what the hourly
rows alone give, from about 24 times fewer rows.

The histograms go one level further: with 150 agents (or 400 tools) a day holds
about 100 bins each, so a month of daily rows is still 450,000 (a million) rows,
and summing them was most of what health (tools) cost. The weekly twin,
``…_weekly``, keyed by the UTC week (Monday 00:00), holds the sum of its week's
daily rows, kept by the same statements as the daily one; a week holds hardly
more bins than a day, so the whole weeks of a month are read from about a fifth
of the rows. The run counters, a row an agent a day, need no weekly level.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any, NamedTuple

from keelwave.server.store import run_rollups, tool_rollups
from keelwave.server.store.rollup_shards import SHARD, delete_emptied

HOUR = timedelta(hours=1)
DAY = timedelta(days=1)
WEEK = timedelta(days=7)
_DAY_OF = "date_trunc('day', {}, 'UTC')"
_WEEK_OF = "date_trunc('week', {}, 'UTC')"  # (PostgreSQL's weeks start on Monday)


class Rollup(NamedTuple):
    """An hourly rollup and its daily twin."""

    hourly: str
    daily: str
    stage: str  # the session-local table writers stage changes in (statements.py)
    keys: tuple[str, ...]  # besides project_id and the time column
    counters: tuple[str, ...]
    counts_something: str  # the counter that is 0 exactly when the row counts nothing
    sharded: bool = False  # its tables' keys end with a shard (rollup_shards.py)
    weekly: str | None = None  # its weekly twin (module docstring), for the histograms


RUNS = Rollup(
    "agent_run_rollups", "agent_run_rollups_daily", "kw_stage_rollups",
    ("agent_name",), run_rollups.COUNTERS, "runs", sharded=True,
)  # fmt: skip
DURATIONS = Rollup(
    "agent_duration_rollups", "agent_duration_rollups_daily", "kw_stage_durations",
    ("agent_name", "duration_bin"), ("runs",), "runs",
    weekly="agent_duration_rollups_weekly",
)  # fmt: skip
# The project's run durations whatever the agent, for the summary's percentiles: the
# agents' histograms of a month are 450,000 rows with 150 agents (migration 0024).
PROJECT_DURATIONS = Rollup(
    "project_duration_rollups", "project_duration_rollups_daily", "kw_stage_durations",
    ("duration_bin",), ("runs",), "runs", sharded=True,
)  # fmt: skip
TOOLS = Rollup(
    "agent_tool_rollups", "agent_tool_rollups_daily", "kw_stage_tools",
    ("tool_name", "duration_bin"), tool_rollups.COUNTERS, "calls", sharded=True,
    weekly="agent_tool_rollups_weekly",
)  # fmt: skip
# In the order statements.py's rule 3 fixes.
ROLLUPS = (RUNS, DURATIONS, PROJECT_DURATIONS, TOOLS)


def _cols(names: tuple[str, ...]) -> str:
    return ", ".join(names)


def daily_keys(table: Rollup) -> tuple[str, ...]:
    return ("project_id", "day", *table.keys)


def _with_shard(table: Rollup, keys: tuple[str, ...]) -> tuple[str, ...]:
    """A row's whole primary key: ``keys``, and its shard where the table has them."""
    return (*keys, "shard") if table.sharded else keys


def weekly_keys(table: Rollup) -> tuple[str, ...]:
    return ("project_id", "week", *table.keys)


def add_to_days(table: Rollup, rows: str, sign: str = "", shard: str = SHARD) -> str:
    """INSERT … ON CONFLICT adding ``sign`` times the hourly-keyed ``rows`` (a FROM item
    with project_id, bucket, the keys and counters) to their days, in key order (to
    the ``shard`` of each, this backend's unless told, in a sharded table); ``{where}``
    is left for the caller to fill."""
    return _add_to(table, table.daily, daily_keys(table), _DAY_OF, rows, sign, shard)


def add_to_weeks(table: Rollup, rows: str, sign: str = "", shard: str = SHARD) -> str:
    """:func:`add_to_days`, to the rows' weeks in the weekly twin."""
    assert table.weekly, f"{table.hourly} has no weekly twin"
    return _add_to(table, table.weekly, weekly_keys(table), _WEEK_OF, rows, sign, shard)


def _add_to(
    table: Rollup, target: str, keys: tuple[str, ...], period_of: str, rows: str, sign: str,
    shard: str,
) -> str:  # fmt: skip
    counters = table.counters
    positions = _cols(tuple(str(n + 1) for n in range(len(keys))))
    shard = f"{shard}, " if table.sharded else ""
    return f"""
INSERT INTO {target} AS r ({_cols(_with_shard(table, keys))}, {_cols(counters)})
SELECT project_id, {period_of.format("bucket")}, {_cols(table.keys)}, {shard}
       {", ".join(f"{sign}sum({c})" for c in counters)}
FROM {rows} AS rows
{{where}}
GROUP BY {positions}
ORDER BY {positions}
ON CONFLICT ({_cols(_with_shard(table, keys))}) DO UPDATE SET
{", ".join(f"{c} = r.{c} + excluded.{c}" for c in counters)}
"""


def add_to_hours(table: Rollup, where: str, shard: str = SHARD) -> str:
    """INSERT … ON CONFLICT adding ``table.stage``'s rows (with ``where``) to the hourly
    rows, in key order (to the ``shard`` of each, this backend's unless told, in a
    sharded table)."""
    keys = ("project_id", "bucket", *table.keys)
    shard = f", {shard}" if table.sharded else ""
    return f"""
INSERT INTO {table.hourly} AS r ({_cols(_with_shard(table, keys))}, {_cols(table.counters)})
SELECT {_cols(keys)}{shard}, {", ".join(f"sum({c})" for c in table.counters)}
FROM {table.stage}
{where}
GROUP BY {_cols(keys)}
ORDER BY {_cols(keys)}
ON CONFLICT ({_cols(_with_shard(table, keys))}) DO UPDATE SET
{", ".join(f"{c} = r.{c} + excluded.{c}" for c in table.counters)}
"""


def merge(*tables: Rollup, shard: str = SHARD) -> str:
    """One statement adding each table's staged rows (``table.stage``) to its hourly rows
    and then to their days (and weeks), table after table (to ``shard`` of each, this
    backend's unless told, in a sharded table).

    One statement, so the writer's prepared statements and every caller of
    statements.MERGE_ROLLUPS keep the daily rows without a change of their own.
    Each upsert but the last is a CTE that the next one's one-time filter counts out
    before it reads a row, so a transaction locks the tables' rows in the order
    given, each in key order: statements.py's rule 3, with each daily table
    straight after its hourly one, and its weekly table after that.
    """
    upserts: list[str] = []
    for table in tables:
        upserts.append(add_to_hours(table, _after(len(upserts)), shard))
        days = add_to_days(table, table.stage, shard=shard)
        upserts.append(days.format(where=_after(len(upserts))))
        if table.weekly:
            weeks = add_to_weeks(table, table.stage, shard=shard)
            upserts.append(weeks.format(where=_after(len(upserts))))
    *first, last = upserts
    done = ",\n".join(f"u{n} AS ({sql.strip()}\nRETURNING 1)" for n, sql in enumerate(first))
    return f"WITH {done}{last}"


def _after(upserts: int) -> str:
    """The WHERE that makes upsert number ``upserts`` wait for the one before it."""
    return f"WHERE (SELECT count(*) FROM u{upserts - 1}) >= 0" if upserts else ""


def drop_emptied(table: Rollup) -> str:
    """Delete the daily (and weekly) rows whose days ``table.stage`` staged changes for
    and that now count nothing (erasure does this for the hourly rows too: a tool
    name is data)."""
    statements = [_drop_emptied(table, table.daily, daily_keys(table), _DAY_OF)]
    if table.weekly:
        statements.append(_drop_emptied(table, table.weekly, weekly_keys(table), _WEEK_OF))
    return ";\n".join(statements)


def _drop_emptied(table: Rollup, target: str, keys: tuple[str, ...], period_of: str) -> str:
    staged = (
        f"SELECT DISTINCT project_id, {period_of.format('bucket')} AS {keys[1]}, "
        f"{_cols(table.keys)} FROM {table.stage}"
    )
    return delete_emptied(target, keys, staged, table.counts_something, table.sharded)


def retire_hours(table: Rollup) -> str:
    """Retention: delete up to %(limit)s hourly rows of the project from %(day)s (the
    cutoff's day) to %(before)s (the cutoff's hour), taking them out of that day's
    daily rows (and its week's); SELECTs how many went.

    The upserts are CTEs the main query does not read, which PostgreSQL runs after
    the main query, so the hourly rows are locked first (rule 3); the weekly one
    waits for the daily one.
    """
    keys = _cols(_with_shard(table, ("project_id", "bucket", *table.keys)))
    subtract = add_to_days(table, "gone", sign="-").format(where="")
    weeks = ""
    if table.weekly:
        weeks_too = add_to_weeks(table, "gone", sign="-")
        subtract += "RETURNING 1"
        weeks = f", weeks AS ({weeks_too.format(where='WHERE (SELECT count(*) FROM days) >= 0')})"
    return f"""
WITH gone AS (
    DELETE FROM {table.hourly} WHERE ({keys}) IN (
        SELECT {keys} FROM {table.hourly}
        WHERE project_id = %(project)s AND bucket >= %(day)s AND bucket < %(before)s
        ORDER BY {keys} LIMIT %(limit)s)
    RETURNING *
), days AS ({subtract}){weeks}
SELECT count(*) FROM gone
"""


def drop_emptied_day(table: Rollup) -> tuple[str, ...]:
    """Retention: delete the daily rows of %(day)s, and the weekly ones of its week, that
    count nothing after retire_hours and retire_days (a statement each)."""
    staged = (
        f"SELECT DISTINCT {_cols(daily_keys(table))} FROM {table.daily} "
        "WHERE project_id = %(project)s AND day = %(day)s"
    )
    statements = [
        delete_emptied(
            table.daily, daily_keys(table), staged, table.counts_something, table.sharded
        )
    ]
    if table.weekly:
        staged = (
            f"SELECT DISTINCT {_cols(weekly_keys(table))} FROM {table.weekly} "
            f"WHERE project_id = %(project)s AND week = {_WEEK_OF.format('%(day)s::timestamptz')}"
        )
        statements.append(
            delete_emptied(
                table.weekly, weekly_keys(table), staged, table.counts_something, table.sharded
            )
        )
    return tuple(statements)


def retire_days(table: Rollup) -> str:
    """Retention, for a table with a weekly twin: delete up to %(limit)s daily rows of
    the project from the cutoff's week to %(day)s (the cutoff's day), taking them out
    of that week's rows, as retire_hours does with hours; SELECTs how many went."""
    keys = _cols(_with_shard(table, daily_keys(table)))
    rows = "(SELECT *, day AS bucket FROM gone)"
    subtract = add_to_weeks(table, rows, sign="-").format(where="")
    return f"""
WITH gone AS (
    DELETE FROM {table.daily} WHERE ({keys}) IN (
        SELECT {keys} FROM {table.daily}
        WHERE project_id = %(project)s
          AND day >= {_WEEK_OF.format("%(day)s::timestamptz")} AND day < %(day)s
        ORDER BY {keys} LIMIT %(limit)s)
    RETURNING *
), weeks AS ({subtract})
SELECT count(*) FROM gone
"""


def delete_days(table: Rollup) -> str:
    """Retention: up to %(limit)s daily rows of the days wholly before %(day)s, in key order."""
    keys = _cols(_with_shard(table, daily_keys(table)))
    return f"""
DELETE FROM {table.daily} WHERE ({keys}) IN (
    SELECT {keys} FROM {table.daily} WHERE project_id = %(project)s AND day < %(day)s
    ORDER BY {keys} LIMIT %(limit)s)
"""


def delete_weeks(table: Rollup) -> str:
    """Retention: up to %(limit)s weekly rows of the weeks wholly before %(day)s's week."""
    keys = _cols(_with_shard(table, weekly_keys(table)))
    return f"""
DELETE FROM {table.weekly} WHERE ({keys}) IN (
    SELECT {keys} FROM {table.weekly} WHERE project_id = %(project)s
      AND week < {_WEEK_OF.format("%(day)s::timestamptz")}
    ORDER BY {keys} LIMIT %(limit)s)
"""


def floor_day(moment: datetime) -> datetime:
    """The start of the UTC day ``moment`` falls in."""
    return moment.astimezone(UTC).replace(hour=0, minute=0, second=0, microsecond=0)


def floor_week(moment: datetime) -> datetime:
    """The start of the UTC week (Monday) ``moment`` falls in."""
    day = floor_day(moment)
    return day - day.weekday() * DAY


# What reading a day of a histogram's daily rows costs, in hours of its hourly rows: a
# day holds about 100 bins an agent (150 agents: as many rows as 5 hours), or 86 a tool
# (400 tools: as many as 1.7 hours); bins fill up over a day.
DAY_IN_HOURS = 3


def hour_ranges(
    hours_from: datetime,
    hours_to: datetime,
    name: str,
    days: bool = True,
    now: datetime | None = None,
    stored_from: datetime | None = None,
) -> dict[str, Any]:
    """Query parameters that :func:`read_rows` ``name`` reads the whole hours
    [hours_from, hours_to) with.

    Run counters: the whole UTC days inside from the daily table
    (``{name}_days_from``/``_days_to``, empty if there is no whole day, or if not
    ``days``: rows to be told apart by hour), the hours before and after them from
    the hourly one.

    Histograms (tables with a weekly twin, whose counters are integers, so rows can
    be taken out again exactly): the whole UTC weeks from the weekly table, the other
    whole days from the daily one, and each day cut by an edge whichever way reads
    fewer rows: its hours inside from the hourly table, or its daily rows less its
    hours outside (hours after ``now`` hold no rows yet, so the last day of a window
    ending now is its daily rows less the current hour's; nor do hours before
    ``stored_from``, the first hour the table has rows of, as after retention or
    when the project is younger than the window). ``{name}_h_…``: the days (and
    weeks), the hourly rows added at each end, and those taken out."""
    days_from = _first_whole(hours_from, floor_day, DAY)
    days_to = floor_day(hours_to)
    if days_from >= days_to or not days:
        days_from = days_to = hours_to
    ranges = {
        f"{name}_from": hours_from,
        f"{name}_to": hours_to,
        f"{name}_days_from": days_from,
        f"{name}_days_to": days_to,
    }
    return ranges | _histogram_ranges(hours_from, hours_to, name, days, now, stored_from)


def _histogram_ranges(
    hours_from: datetime,
    hours_to: datetime,
    name: str,
    days: bool,
    now: datetime | None,
    stored_from: datetime | None,
) -> dict[str, Any]:
    """:func:`hour_ranges`' ranges for the histograms."""
    first_day, last_day = floor_day(hours_from), floor_day(hours_to)
    # By default every hour from the hourly rows, no day, nothing taken out.
    h_days_from = h_days_to = hours_to
    head_to, tail_from = hours_to, hours_to  # hourly rows added: [from, head_to), [tail_from, to)
    less = [(hours_to, hours_to), (hours_to, hours_to)]  # hourly rows taken out
    if days and first_day < last_day:
        h_days_from, h_days_to = first_day, last_day  # and then the edges:
        head_to, tail_from = hours_from, hours_to  # (empty unless a cut day is read by hour)
        if first_day < hours_from:  # the first day is cut: its hours inside, or the day less
            inside = (first_day + DAY - hours_from) / HOUR
            stored = max(first_day, stored_from or first_day)
            outside = max(hours_from - stored, timedelta(0)) / HOUR
            if DAY_IN_HOURS + outside < inside:
                less[0] = (first_day, hours_from)
            else:
                h_days_from = head_to = first_day + DAY
        if last_day < hours_to:  # the last day is cut
            day_end = last_day + DAY
            stored_to = min(day_end, _floor_hour(now or datetime.now(UTC)) + HOUR)
            outside = max(stored_to - hours_to, timedelta(0)) / HOUR
            if DAY_IN_HOURS + outside < (hours_to - last_day) / HOUR:
                h_days_to = day_end
                less[1] = (hours_to, day_end)
            else:
                tail_from = last_day
    weeks_from = _first_whole(h_days_from, floor_week, WEEK)
    weeks_to = floor_week(h_days_to)
    if weeks_from >= weeks_to:
        weeks_from = weeks_to = h_days_to
    return {
        f"{name}_h_head_to": head_to,
        f"{name}_h_days_from": h_days_from,
        f"{name}_h_weeks_from": weeks_from,
        f"{name}_h_weeks_to": weeks_to,
        f"{name}_h_days_to": h_days_to,
        f"{name}_h_tail_from": tail_from,
        f"{name}_h_less0_from": less[0][0],
        f"{name}_h_less0_to": less[0][1],
        f"{name}_h_less1_from": less[1][0],
        f"{name}_h_less1_to": less[1][1],
    }


def first_hour_sql(table: Rollup) -> str:
    """The first hour ``table`` has rows of for %(project)s (:func:`hour_ranges`'
    ``stored_from``): one probe of its primary key."""
    return f"SELECT min(bucket) FROM {table.hourly} WHERE project_id = %(project)s"


def _first_whole(
    moment: datetime, floor: Callable[[datetime], datetime], unit: timedelta
) -> datetime:
    """The start of the first whole day (``floor``, ``unit``) or week from ``moment`` on."""
    start = floor(moment)
    return start if start == moment else start + unit


def _floor_hour(moment: datetime) -> datetime:
    return moment.astimezone(UTC).replace(minute=0, second=0, microsecond=0)


def read_rows(table: Rollup, columns: str, name: str, where: str = "") -> str:
    """SELECT ``columns`` of the project's rows covering the hours of :func:`hour_ranges`
    ``name``: one arm per range, each a plain range scan of a primary key. ``{time}``
    in ``columns`` is a row's hour, or its day (rows told apart by time are read as
    the run counters are, never from a weekly twin); ``where`` is added to each arm's
    WHERE (``AND …``). A histogram's counters in ``columns`` are plain column names:
    the arms that take rows out negate them."""
    project = f"project_id = %(project)s {where}"
    hourly, daily = columns.format(time="bucket"), columns.format(time="day")

    def arm(selected: str, source: str, time: str, lo: str, hi: str) -> str:
        return f"""
    SELECT {selected} FROM {source}
    WHERE {project} AND {time} >= %({name}_{lo})s AND {time} < %({name}_{hi})s"""

    if not table.weekly or "{time}" in columns:
        arms = [
            arm(hourly, table.hourly, "bucket", "from", "days_from"),
            arm(daily, table.daily, "day", "days_from", "days_to"),
            arm(hourly, table.hourly, "bucket", "days_to", "to"),
        ]
    else:
        less = _negated(hourly, table.counters)
        arms = [
            arm(hourly, table.hourly, "bucket", "from", "h_head_to"),
            arm(less, table.hourly, "bucket", "h_less0_from", "h_less0_to"),
            arm(daily, table.daily, "day", "h_days_from", "h_weeks_from"),
            arm(daily, table.weekly, "week", "h_weeks_from", "h_weeks_to"),
            arm(daily, table.daily, "day", "h_weeks_to", "h_days_to"),
            arm(hourly, table.hourly, "bucket", "h_tail_from", "to"),
            arm(less, table.hourly, "bucket", "h_less1_from", "h_less1_to"),
        ]
    return "\n    UNION ALL".join(arms)


def _negated(columns: str, counters: tuple[str, ...]) -> str:
    """``columns`` (a comma-separated list) with each counter among them negated."""
    items = [item.strip() for item in columns.split(",")]
    assert any(item in counters for item in items), f"no counter in {columns!r}"
    return ", ".join(f"-{item}" if item in counters else item for item in items)
