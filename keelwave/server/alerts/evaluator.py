"""Deciding what fires: run rules every second, window rules every few seconds.

One evaluator at a time across every worker and server on the database: each
round is one transaction that first takes a lock only evaluators take, without
waiting (``pg_try_advisory_xact_lock``); the others skip the round. What fires
is committed in that transaction, into the outbox (alert_events) with the body
its destination will receive; delivery.py sends it afterwards, so a kill
between the two only delays it.

- **Run rules** look at the runs that changed since the last round (a step, a
  model call, a finish: agent_runs_changed_idx), with a margin for verdicts,
  which land a moment after their steps; and, for conditions that time makes
  true (``stalled``, a running run's ``duration_ms``), at the runs still open.
  A run fires at most once per rule (a unique index, so even two evaluators
  could not send it twice); runs whose last change came before the rule was
  made never fire.
- **Window rules** compute their metric over the runs that started in the last
  15 minutes, hour or day (from the hourly rollups, as the summary does) and
  fire once when it crosses, once more when it resolves (alert_window_state).
- ``cooldown_seconds``: a rule that fired for an agent does not fire for it
  again (resolutions excepted) until the cooldown has passed.
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from typing import Any
from urllib.parse import quote

import msgspec
import psycopg
from psycopg.rows import dict_row
from psycopg_pool import AsyncConnectionPool, PoolTimeout

from keelwave.server.alerts.destinations import render_body
from keelwave.server.alerts.schemas import WINDOWS
from keelwave.server.http.params import Window
from keelwave.server.query.aggregates import counters, rate, window_counters
from keelwave.server.store.periodic import stopped

log = logging.getLogger("keelwave.alerts")

EVALUATORS = 0x6B7B  # pg_try_advisory_xact_lock(int, int) namespace: the one evaluator
EVERY_SECONDS = 1.0
WINDOW_EVERY_SECONDS = 5.0
# Verdicts (findings) are stored a moment after the steps that made them: run rules
# look again at runs that changed this long before the last round.
VERDICT_MARGIN = timedelta(seconds=60)
# Runs open for longer than this are not watched for stalls or duration any more.
OPEN_HORIZON = timedelta(days=2)

RULES = """
SELECT r.id, r.project_id, r.name, r.agent_name, r.condition, r.cooldown_seconds,
       r.created_at, r.destination_id, d.kind, p.name AS project
FROM alert_rules r
JOIN alert_destinations d ON d.id = r.destination_id
JOIN projects p ON p.id = r.project_id
WHERE r.enabled
ORDER BY r.id
"""

# Per run condition: (SQL of the value, SQL of when it fires). Over agent_runs r.
_DURATION = "coalesce(r.duration_ms, extract(epoch FROM now() - r.started_at) * 1000)"
RUN_METRICS = {
    "steps": "r.step_count",
    "cost_usd": "r.cost_usd",
    "tokens": "r.input_tokens + r.output_tokens",
    "duration_ms": _DURATION,
}
_CANDIDATES = """
SELECT r.id, r.agent_name, {value} AS value FROM agent_runs r
WHERE r.project_id = %(project)s {agent}
  AND ({changed})
  AND greatest(r.last_activity_at, r.ended_at) >= %(rule_created)s
  AND ({fires})
  AND NOT EXISTS (SELECT 1 FROM alert_events e WHERE e.rule_id = %(rule)s AND e.run_id = r.id)
ORDER BY r.started_at
LIMIT 1000
"""
_CHANGED = "greatest(r.last_activity_at, r.ended_at) >= %(since)s"
_OPEN = "(r.ended_at IS NULL AND r.last_activity_at >= now() - %(horizon)s)"


class Evaluator:
    """Runs the rounds in the background of ``serve`` (every process; one evaluates)."""

    def __init__(
        self,
        pool: AsyncConnectionPool,
        stall_after: float,
        dashboard_url: str,
        fired: Callable[[], None] = lambda: None,
    ) -> None:
        self._pool = pool
        self._stall_after = timedelta(seconds=stall_after)
        self._dashboard = dashboard_url.rstrip("/")
        self._fired = fired  # the deliverer's wake-up
        self._task: asyncio.Task | None = None
        self._windows_at = 0.0

    def start(self) -> None:
        self._task = asyncio.create_task(self._run(), name="keelwave-alerts")

    async def stop(self) -> None:
        await stopped(self._task)

    async def _run(self) -> None:
        while True:
            try:
                if await self.round():
                    self._fired()
            except (psycopg.Error, PoolTimeout, OSError) as error:
                log.debug("alert evaluation skipped a round: %s", error)
            except Exception:  # never let a bug stop the alerts for good
                log.exception("alert evaluation failed")
            await asyncio.sleep(EVERY_SECONDS)

    async def round(self, windows: bool | None = None) -> int:
        """One round, if no other evaluator is in one; return how many events fired."""
        if windows is None:
            windows = time.monotonic() - self._windows_at >= WINDOW_EVERY_SECONDS
        async with (
            self._pool.connection() as conn,
            conn.transaction(),
            conn.cursor(row_factory=dict_row) as cur,
        ):
            await cur.execute("SELECT pg_try_advisory_xact_lock(%s, 0) AS mine", (EVALUATORS,))
            if not (await cur.fetchone())["mine"]:
                return 0
            await cur.execute("SELECT evaluated_until, now() AS now FROM alert_evaluation")
            mark = await cur.fetchone()
            since, now = mark["evaluated_until"] - VERDICT_MARGIN, mark["now"]
            await cur.execute(RULES)
            fired = 0
            for rule in await cur.fetchall():
                condition = rule["condition"]
                if condition["type"] == "window":
                    if windows:
                        fired += await self._window(cur, rule, condition, now)
                else:
                    fired += await self._runs(cur, rule, condition, since, now)
            await cur.execute("UPDATE alert_evaluation SET evaluated_until = %s", (now,))
        if windows:
            self._windows_at = time.monotonic()
        return fired

    # -- run rules ----------------------------------------------------------------

    async def _runs(
        self, cur: psycopg.AsyncCursor, rule: dict, condition: dict, since: datetime, now: datetime
    ) -> int:
        args: dict[str, Any] = {
            "project": rule["project_id"], "rule": rule["id"], "since": since,
            "rule_created": rule["created_at"], "horizon": OPEN_HORIZON,
            "agent_name": rule["agent_name"],
        }  # fmt: skip
        kind = condition["type"]
        changed = _CHANGED
        if kind == "run":
            value = RUN_METRICS[condition["metric"]]
            fires = f"{value} > %(above)s"
            args["above"] = condition["above"]
            threshold: Any = condition["above"]
            if condition["metric"] == "duration_ms":
                changed = f"{_CHANGED} OR {_OPEN}"  # a long run crosses with no activity
            metric = condition["metric"]
        elif kind == "finding":
            value = "to_jsonb(r.findings)"
            fires = "r.findings && %(kinds)s::text[]"
            args["kinds"] = condition["kinds"]
            threshold, metric = condition["kinds"], "finding"
        elif kind == "termination":
            value = "to_jsonb(r.termination_reason)"
            fires = "r.termination_reason = ANY(%(reasons)s::text[])"
            args["reasons"] = condition["reasons"]
            threshold, metric = condition["reasons"], "termination_reason"
        else:  # stalled
            value = "extract(epoch FROM now() - r.last_activity_at) * 1000"
            fires = "r.ended_at IS NULL AND r.last_activity_at < now() - %(stall)s"
            args["stall"] = self._stall_after
            changed = _OPEN
            threshold, metric = self._stall_after.total_seconds() * 1000, "silent_ms"
        agent = "AND r.agent_name = %(agent_name)s" if rule["agent_name"] else ""
        await cur.execute(
            _CANDIDATES.format(value=value, agent=agent, changed=changed, fires=fires), args
        )
        fired = 0
        cooling: dict[str, bool] = {}
        for run in await cur.fetchall():
            agent_name = run["agent_name"]
            if agent_name not in cooling:
                cooling[agent_name] = await self._cooling(cur, rule, agent_name)
            if cooling[agent_name]:
                continue  # it will fire when the cooldown is over, if it still holds
            value_of = run["value"]
            if isinstance(value_of, float | int | Decimal) and not isinstance(value_of, bool):
                value_of = round(float(value_of), 6)
            inserted = await self._fire(
                cur, rule, "firing", agent_name, run["id"], metric, value_of, threshold, now
            )
            if inserted:
                fired += 1
                if rule["cooldown_seconds"]:
                    cooling[agent_name] = True
        return fired

    async def _cooling(self, cur: psycopg.AsyncCursor, rule: dict, agent: str | None) -> bool:
        if not rule["cooldown_seconds"]:
            return False
        await cur.execute(
            "SELECT EXISTS (SELECT 1 FROM alert_events WHERE rule_id = %s AND state = 'firing' "
            "AND agent_name IS NOT DISTINCT FROM %s "
            "AND fired_at > now() - make_interval(secs => %s)) AS cooling",
            (rule["id"], agent, rule["cooldown_seconds"]),
        )
        return (await cur.fetchone())["cooling"]

    # -- window rules -------------------------------------------------------------

    async def _window(
        self, cur: psycopg.AsyncCursor, rule: dict, condition: dict, now: datetime
    ) -> int:
        span = timedelta(seconds=WINDOWS[condition["window"]])
        value = await window_metric(
            cur.connection, str(rule["project_id"]), rule["agent_name"], condition["metric"],
            Window(now - span, now), self._stall_after,
        )  # fmt: skip
        above, below = condition.get("above"), condition.get("below")
        if value is None:
            crossing = False  # no runs: no rate to judge (runs below N does have a value)
        elif above is not None:
            crossing = value > above
        else:
            crossing = value < below
        threshold = above if above is not None else below
        await cur.execute(
            "SELECT firing FROM alert_window_state WHERE rule_id = %s FOR UPDATE", (rule["id"],)
        )
        state = await cur.fetchone()
        firing = bool(state and state["firing"])
        if crossing == firing:
            return 0
        if crossing and await self._cooling(cur, rule, rule["agent_name"]):
            return 0
        await cur.execute(
            "INSERT INTO alert_window_state (rule_id, firing, value, changed_at) "
            "VALUES (%s, %s, %s::jsonb, now()) ON CONFLICT (rule_id) DO UPDATE SET "
            # excluded's time, not now() again: Citus refuses a function that is not
            # IMMUTABLE in an upsert's SET; the VALUES it evaluates itself.
            "firing = excluded.firing, value = excluded.value, changed_at = excluded.changed_at",
            (rule["id"], crossing, msgspec.json.encode(value).decode()),
        )
        metric = f"{condition['metric']} ({condition['window']})"
        state_name = "firing" if crossing else "resolved"
        await self._fire(
            cur, rule, state_name, rule["agent_name"], None, metric, value, threshold, now
        )
        return 1

    # -- the outbox ---------------------------------------------------------------

    async def _fire(
        self,
        cur: psycopg.AsyncCursor,
        rule: dict,
        state: str,
        agent_name: str | None,
        run_id: uuid.UUID | None,
        metric: str,
        value: Any,
        threshold: Any,
        now: datetime,
    ) -> bool:
        """Commit an event to the outbox with the body its destination gets; False if
        this run already fired this rule."""
        event_id = uuid.uuid4()
        event = {
            "id": str(event_id),
            "rule": {"id": str(rule["id"]), "name": rule["name"]},
            "state": state,
            "project": rule["project"],
            "agent_name": agent_name,
            "run_id": str(run_id) if run_id else None,
            "metric": metric,
            "value": value,
            "threshold": threshold,
            "at": now.astimezone(UTC).isoformat().replace("+00:00", "Z"),
            "url": self._link(run_id, agent_name),
        }
        body, content_type = render_body(rule["kind"], event)
        await cur.execute(
            """
            INSERT INTO alert_events (id, project_id, rule_id, rule_name, destination_id, state,
                agent_name, run_id, metric, value, threshold, fired_at, body, content_type)
            VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s::jsonb, %s::jsonb, %s, %s, %s)
            ON CONFLICT (rule_id, run_id) WHERE run_id IS NOT NULL DO NOTHING
            RETURNING id
            """,
            (
                event_id, rule["project_id"], rule["id"], rule["name"], rule["destination_id"],
                state, agent_name, run_id, metric, msgspec.json.encode(value).decode(),
                msgspec.json.encode(threshold).decode(), now, body, content_type,
            ),
        )  # fmt: skip
        return await cur.fetchone() is not None

    def _link(self, run_id: uuid.UUID | None, agent_name: str | None) -> str:
        if run_id is not None:
            return f"{self._dashboard}/runs/{run_id}"
        if agent_name:
            return f"{self._dashboard}/runs?agent_name={quote(agent_name)}"
        return f"{self._dashboard}/"


_STALLED = """
SELECT count(*) FROM agent_runs
WHERE project_id = %(project)s {agent} AND ended_at IS NULL
  AND last_activity_at < now() - %(stall)s AND started_at >= %(since)s AND started_at < %(until)s
"""
_P95 = """
SELECT percentile_cont(0.95) WITHIN GROUP (ORDER BY duration_ms) FROM agent_runs
WHERE project_id = %(project)s {agent} AND duration_ms IS NOT NULL
  AND started_at >= %(since)s AND started_at < %(until)s
"""


async def window_metric(
    conn: psycopg.AsyncConnection,
    project_id: str,
    agent_name: str | None,
    metric: str,
    window: Window,
    stall_after: timedelta,
) -> float | None:
    """A window rule's metric over the runs that started in ``window`` (None: no runs,
    so no rate)."""
    args = {
        "project": project_id, "agent": agent_name, "since": window.since,
        "until": window.until, "stall": stall_after,
    }  # fmt: skip
    agent = "AND agent_name = %(agent)s" if agent_name else ""
    if metric == "stalled_runs":
        row = await (await conn.execute(_STALLED.format(agent=agent), args)).fetchone()
        return float(row[0])
    if metric == "p95_duration_ms":
        row = await (await conn.execute(_P95.format(agent=agent), args)).fetchone()
        return round(float(row[0]), 3) if row[0] is not None else None
    [row] = await window_counters(conn, project_id, window, agent_name=agent_name)
    totals = counters(row)
    if metric == "runs":
        return float(totals["runs"])
    if metric == "cost_usd":
        return round(totals["cost_usd"], 6)
    part = {"loop_rate": "loop_runs", "detected_loop_rate": "detected_loop_runs",
            "error_rate": "error_runs"}[metric]  # fmt: skip
    return rate(totals[part], totals["runs"])
