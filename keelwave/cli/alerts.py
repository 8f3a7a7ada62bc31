"""``keelwave alerts``: destinations, rules and what fired, through the HTTP API.

Making and deleting need a key of scope ``all``; listing works with ``read``.
``--json`` prints the API's own data.
"""

from __future__ import annotations

import json
from typing import Annotated, Any

import typer

from keelwave.cli.common import fail, new_app, stdout
from keelwave.cli.query import ApiKey, Endpoint, Json, api_for, print_json

app = new_app(help="Alerts: where they go (destinations), when they fire (rules), what fired.")
destinations_app = new_app(help="Webhooks and Slack incoming webhooks that receive alerts.")
rules_app = new_app(help="When to alert: a condition on runs or on a window of them.")
app.add_typer(destinations_app, name="destinations")
app.add_typer(rules_app, name="rules")


def _path(api: Any, rest: str) -> str:
    return f"/v1/projects/{api.project}/alerts{rest}"


def _table(title: str, columns: tuple[str, ...], rows: list[tuple]) -> None:
    from rich.table import Table  # (imported when a table is shown: `keelwave --help` stays fast)

    table = Table(title=title, title_justify="left")
    for column in columns:
        table.add_column(column, overflow="fold")
    for row in rows:
        table.add_row(*("—" if value is None else str(value) for value in row))
    stdout.print(table)


# -- destinations -------------------------------------------------------------------


@destinations_app.command("list")
def list_destinations(as_json: Json = False, endpoint: Endpoint = None, api_key: ApiKey = None):
    """The project's alert destinations."""
    with api_for(endpoint, api_key) as api:
        data = api.get(_path(api, "/destinations"))["data"]
    if as_json:
        print_json(data)
        return
    rows = [(d["id"], d["name"], d["kind"], d["url"], "yes" if d["has_secret"] else "no")
            for d in data]  # fmt: skip
    _table("alert destinations", ("id", "name", "kind", "url", "signed"), rows)


@destinations_app.command("create")
def create_destination(
    name: Annotated[str, typer.Argument(help="A name to recognise it by.")],
    url: Annotated[str, typer.Option("--url", help="Where to POST alerts.")],
    kind: Annotated[str, typer.Option("--kind", help="webhook or slack.")] = "webhook",
    secret: Annotated[
        str | None,
        typer.Option(
            "--secret", help="Sign webhooks with it (X-Keelwave-Signature).", show_default=False
        ),
    ] = None,  # fmt: skip
    as_json: Json = False,
    endpoint: Endpoint = None,
    api_key: ApiKey = None,
) -> None:
    """Make a destination: a webhook (JSON) or a Slack incoming webhook."""
    body = {"name": name, "kind": kind, "url": url}
    if secret:
        body["secret"] = secret
    with api_for(endpoint, api_key) as api:
        data = api.send("POST", _path(api, "/destinations"), body)["data"]
    if as_json:
        print_json(data)
        return
    stdout.print(f"Made destination [bold]{data['name']}[/] ({data['kind']}): {data['id']}")


@destinations_app.command("delete")
def delete_destination(
    destination_id: Annotated[str, typer.Argument(metavar="ID")],
    as_json: Json = False,
    endpoint: Endpoint = None,
    api_key: ApiKey = None,
) -> None:
    """Delete a destination, and the rules that send to it."""
    with api_for(endpoint, api_key) as api:
        data = api.send("DELETE", _path(api, f"/destinations/{destination_id}"))["data"]
    if as_json:
        print_json(data)
        return
    stdout.print(f"Deleted destination {data['name']} ({data['id']}) and its rules.")


@destinations_app.command("test")
def test_destination(
    destination_id: Annotated[str, typer.Argument(metavar="ID")],
    as_json: Json = False,
    endpoint: Endpoint = None,
    api_key: ApiKey = None,
) -> None:
    """Send a test alert now and say how the destination answered."""
    with api_for(endpoint, api_key) as api:
        data = api.send("POST", _path(api, f"/destinations/{destination_id}/test"))["data"]
    if as_json:
        print_json(data)
        return
    if data["delivered"]:
        stdout.print(f"Delivered: HTTP {data['status']} in {data['duration_ms']:.0f} ms.")
    else:
        fail(f"not delivered: {data['error'] or 'HTTP ' + str(data['status'])}", code=1)


# -- rules --------------------------------------------------------------------------


def _describe(condition: dict) -> str:
    kind = condition["type"]
    if kind == "run":
        return f"a run's {condition['metric']} > {condition['above']:g}"
    if kind == "finding":
        return f"a run has {' or '.join(condition['kinds'])}"
    if kind == "termination":
        return f"a run ends {' or '.join(condition['reasons'])}"
    if kind == "stalled":
        return "a run stalls"
    side, value = (
        ("<", condition["below"])
        if condition.get("below") is not None
        else (">", condition["above"])
    )
    return f"{condition['metric']} over {condition['window']} {side} {value:g}"


@rules_app.command("list")
def list_rules(as_json: Json = False, endpoint: Endpoint = None, api_key: ApiKey = None):
    """The project's alert rules."""
    with api_for(endpoint, api_key) as api:
        data = api.get(_path(api, "/rules"))["data"]
    if as_json:
        print_json(data)
        return
    rows = [
        (r["id"], r["name"], _describe(r["condition"]), r["scope"]["agent_name"] or "every agent",
         "on" if r["enabled"] else "paused", f"{r['cooldown_seconds']} s")
        for r in data
    ]  # fmt: skip
    _table("alert rules", ("id", "name", "when", "agents", "state", "cooldown"), rows)


@rules_app.command("create")
def create_rule(
    name: Annotated[str, typer.Argument(help="A name to recognise it by.")],
    destination: Annotated[str, typer.Option("--destination", help="A destination id.")],
    condition: Annotated[
        str,
        typer.Option(
            "--condition",
            help='JSON, e.g. \'{"type": "run", "metric": "steps", "above": 50}\', '
            '\'{"type": "finding", "kinds": ["cycle"]}\' or \'{"type": "window", "metric": '
            '"error_rate", "window": "1h", "above": 0.2}\' (docs/alerts.md lists them all).',
        ),
    ],
    agent: Annotated[
        str | None, typer.Option("--agent", help="Only this agent.", show_default=False)
    ] = None,
    cooldown: Annotated[int, typer.Option("--cooldown", help="Seconds between repeats.")] = 0,
    as_json: Json = False,
    endpoint: Endpoint = None,
    api_key: ApiKey = None,
) -> None:
    """Make a rule: when its condition holds, an alert goes to the destination."""
    try:
        parsed = json.loads(condition)
    except ValueError as error:
        fail(f"--condition is not JSON: {error}")
    body = {"name": name, "destination_id": destination, "condition": parsed,
            "scope": {"agent_name": agent}, "cooldown_seconds": cooldown}  # fmt: skip
    with api_for(endpoint, api_key) as api:
        data = api.send("POST", _path(api, "/rules"), body)["data"]
    if as_json:
        print_json(data)
        return
    stdout.print(
        f"Made rule [bold]{data['name']}[/] ({_describe(data['condition'])}): {data['id']}"
    )


def _switch(rule_id: str, enabled: bool, as_json: bool, endpoint, api_key) -> None:
    with api_for(endpoint, api_key) as api:
        data = api.send("PATCH", _path(api, f"/rules/{rule_id}"), {"enabled": enabled})["data"]
    if as_json:
        print_json(data)
        return
    stdout.print(f"Rule {data['name']} is {'on' if enabled else 'paused'}.")


@rules_app.command("pause")
def pause_rule(
    rule_id: Annotated[str, typer.Argument(metavar="ID")],
    as_json: Json = False,
    endpoint: Endpoint = None,
    api_key: ApiKey = None,
) -> None:
    """Stop a rule from firing, keeping it."""
    _switch(rule_id, False, as_json, endpoint, api_key)


@rules_app.command("resume")
def resume_rule(
    rule_id: Annotated[str, typer.Argument(metavar="ID")],
    as_json: Json = False,
    endpoint: Endpoint = None,
    api_key: ApiKey = None,
) -> None:
    """Let a paused rule fire again."""
    _switch(rule_id, True, as_json, endpoint, api_key)


@rules_app.command("delete")
def delete_rule(
    rule_id: Annotated[str, typer.Argument(metavar="ID")],
    as_json: Json = False,
    endpoint: Endpoint = None,
    api_key: ApiKey = None,
) -> None:
    """Delete a rule (what it fired stays in the events)."""
    with api_for(endpoint, api_key) as api:
        data = api.send("DELETE", _path(api, f"/rules/{rule_id}"))["data"]
    if as_json:
        print_json(data)
        return
    stdout.print(f"Deleted rule {data['name']} ({data['id']}).")


# -- events -------------------------------------------------------------------------


@app.command("events")
def events(
    rule: Annotated[str | None, typer.Option("--rule", help="Only this rule's.")] = None,
    run: Annotated[str | None, typer.Option("--run", help="Only about this run.")] = None,
    limit: Annotated[int, typer.Option("--limit", help="At most this many.")] = 50,
    as_json: Json = False,
    endpoint: Endpoint = None,
    api_key: ApiKey = None,
) -> None:
    """What fired (and resolved), newest first, and how each delivery went."""
    with api_for(endpoint, api_key) as api:
        data = api.get(_path(api, "/events"), rule_id=rule, run_id=run, limit=limit)["data"]
    if as_json:
        print_json(data)
        return
    rows = []
    for event in data:
        delivery = event["delivery"]
        tries = len(delivery["attempts"])
        how = f"{delivery['state']} ({tries} attempt{'s' if tries != 1 else ''})"
        if delivery["last_error"] and delivery["state"] != "delivered":
            how += f": {delivery['last_error']}"
        rows.append((event["fired_at"][:19].replace("T", " "), event["rule_name"], event["state"],
                     event["agent_name"], (event["run_id"] or "")[:8] or None,
                     f"{event['metric']} = {json.dumps(event['value'])}", how))  # fmt: skip
    _table("alert events", ("at (UTC)", "rule", "state", "agent", "run", "value", "delivery"), rows)
