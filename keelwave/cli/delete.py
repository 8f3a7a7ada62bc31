"""``keelwave runs delete``: delete one run (with its child runs), or every run that matches
an agent, metadata or a start time, over the HTTP API, after asking.

Registered on the ``runs`` group (commands.py), so it takes the endpoint and key the
way ``keelwave runs`` does; deleting needs a key of scope ``all``.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta
from typing import Annotated, Any

import typer

from keelwave.cli.common import fail, stdout
from keelwave.cli.query import ApiKey, Endpoint, Json, api_for, print_json

DELETE_TIMEOUT_SECONDS = 3600.0
_AGO = re.compile(r"^(\d{1,5})(m|h|d)$")
_UNITS = {"m": "minutes", "h": "hours", "d": "days"}


def before_time(text: str, flag: str = "--before") -> str:
    """``--before`` (or ``flag``): an ISO 8601 time, or an age such as ``30d`` (started
    30 days ago)."""
    if match := _AGO.match(text.strip()):
        moment = datetime.now(UTC) - timedelta(**{_UNITS[match.group(2)]: int(match.group(1))})
        return moment.isoformat()
    try:
        moment = datetime.fromisoformat(text.strip().replace("Z", "+00:00"))
    except ValueError:
        fail(f"{flag} takes an ISO 8601 time or an age such as 30d, not {text!r}")
    return (moment if moment.tzinfo else moment.replace(tzinfo=UTC)).isoformat()


def metadata_pairs(pairs: list[str]) -> dict[str, str]:
    found: dict[str, str] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            fail(f"--metadata takes key=value, not {pair!r}")
        found[key] = value
    return found


def _counts(data: dict[str, int]) -> str:
    def plural(n: int, word: str) -> str:
        return f"{n} {word}{'' if n == 1 else 's'}"

    return (
        f"{plural(data['runs'], 'run')}, {plural(data['steps'], 'step')} and "
        f"{plural(data['model_calls'], 'model call')}"
    )


def delete(
    ctx: typer.Context,
    run_ref: Annotated[
        str | None,
        typer.Argument(metavar="RUN_ID", help="A run id or a unique start of one."),
    ] = None,
    children: Annotated[
        bool, typer.Option("--children", help="With RUN_ID: its child runs too, and theirs.")
    ] = False,
    agent: Annotated[
        str | None, typer.Option("--agent", help="Every run of this agent.", show_default=False)
    ] = None,
    metadata: Annotated[
        list[str] | None,
        typer.Option(
            "--metadata",
            metavar="KEY=VALUE",
            help="Runs whose metadata has this string value (repeat: all must match). "
            "An erasure request: --metadata user_id=u-42.",
            show_default=False,
        ),
    ] = None,
    before: Annotated[
        str | None,
        typer.Option(
            "--before",
            metavar="TIME",
            help="Runs that started before TIME: ISO 8601, or an age such as 30d.",
            show_default=False,
        ),
    ] = None,
    yes: Annotated[bool, typer.Option("--yes", "-y", help="Do not ask for confirmation.")] = False,
    as_json: Json = False,
    endpoint: Endpoint = None,
    api_key: ApiKey = None,
) -> None:
    """Delete runs with their steps, model calls and findings; this cannot be undone.

    Either one run (RUN_ID, with --children for the runs it started) or every run that
    matches all of --agent, --metadata and --before given. Needs a key of scope all.
    """
    selector: dict[str, Any] = {}
    if agent is not None:
        selector["agent_name"] = agent
    if metadata:
        selector["metadata"] = metadata_pairs(metadata)
    if before is not None:
        selector["before"] = before_time(before)
    if run_ref is not None and selector:
        fail("give either a RUN_ID or --agent/--metadata/--before, not both")
    if run_ref is None and not selector:
        fail("give a RUN_ID, or at least one of --agent, --metadata and --before")
    if children and run_ref is None:
        fail("--children goes with a RUN_ID")
    parent = ctx.obj or {}
    with api_for(endpoint or parent.get("endpoint"), api_key or parent.get("api_key")) as api:
        if run_ref is not None:
            run_id = api.resolve_run(run_ref)
            run = api.agent(f"/runs/{run_id}")["data"]
            what = (
                f"run {run_id} ({run['agent_name']}, {run['step_count']} steps, started "
                f"{run['started_at']})"
            )
            if children:
                what += " and every run under it"
            path = f"/v1/projects/{api.project}/agent/runs/{run_id}"
            call = ("DELETE", path + ("?children=true" if children else ""), None)
        else:
            what = "every run " + _described(selector)
            call = ("POST", f"/v1/projects/{api.project}/agent/runs/delete", selector)
        if not yes:
            typer.confirm(f"Delete {what}, with its steps and model calls?", abort=True)
        # The server answers once every matching run is gone: minutes for millions.
        data = api.send(*call, timeout=DELETE_TIMEOUT_SECONDS)["data"]
    if as_json:
        print_json(data)
        return
    stdout.print(f"Deleted {_counts(data)}.")


def _described(selector: dict[str, Any]) -> str:
    parts = []
    if "agent_name" in selector:
        parts.append(f"of agent {selector['agent_name']!r}")
    if "metadata" in selector:
        pairs = ", ".join(f"{k}={v}" for k, v in selector["metadata"].items())
        parts.append(f"with metadata {pairs}")
    if "before" in selector:
        parts.append(f"started before {selector['before']}")
    return " ".join(parts)
