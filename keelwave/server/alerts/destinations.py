"""Where alerts may go, and what a destination receives.

Where: an alert is an HTTP POST to a URL someone typed in; left unchecked, that
is a way to make the server call its own network (SSRF): the database's admin
page, a cloud's metadata service handing out credentials. So a destination
must be http or https, carry no credentials, and (unless
``KEELWAVE_ALERTS_ALLOW_PRIVATE_DESTINATIONS`` is on) reach only public
addresses: :func:`check_url` when the destination is made, and
:class:`GuardedResolver` again at each delivery, on the addresses the
connection is actually made to, so that a name answering a public address
first and a private one later (DNS rebinding) gets nowhere. Redirects are
never followed (delivery.py), so a public receiver cannot bounce a delivery
inward either.

What: :func:`render_body` turns an event (the webhook JSON object) into the
bytes stored in the outbox and sent on every attempt: the JSON itself for a
webhook, a Slack incoming-webhook message (``text`` plus Block Kit blocks) for
Slack. :func:`signature` signs those bytes with the destination's secret.
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import ipaddress
import socket
from datetime import datetime
from typing import Any

import msgspec
from aiohttp.abc import AbstractResolver, ResolveResult
from aiohttp.resolver import ThreadedResolver
from yarl import URL

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address

ALLOW_HINT = "set KEELWAVE_ALERTS_ALLOW_PRIVATE_DESTINATIONS=true to allow private destinations"
JSON = "application/json"

# Cloud metadata services (AWS, GCP, Azure, ECS, Alibaba, Oracle): most are link-local
# or private anyway, and are named here so that the refusal says what they are.
METADATA_ADDRESSES = frozenset(
    ipaddress.ip_address(address)
    for address in (
        "169.254.169.254", "169.254.170.2", "169.254.169.253", "100.100.100.200",
        "192.0.0.192", "fd00:ec2::254", "fd00:ec2::23",
    )
)  # fmt: skip
METADATA_HOSTS = frozenset(
    {"metadata", "metadata.google.internal", "metadata.goog", "instance-data",
     "instance-data.ec2.internal"}
)  # fmt: skip
SHARED = ipaddress.ip_network("100.64.0.0/10")  # carrier-grade NAT (RFC 6598)
NAT64 = ipaddress.ip_network("64:ff9b::/96")  # IPv4 addresses reached through NAT64


class DestinationRefused(ValueError):
    """A destination URL alerts may not go to; the message says why, for the API's 422."""


# --- where -------------------------------------------------------------------------


def address_refusal(address: IPAddress) -> str | None:
    """Why alerts may not go to ``address`` ("a loopback address"), or None if it is public."""
    if address in METADATA_ADDRESSES:
        return "a cloud metadata address"
    if isinstance(address, ipaddress.IPv6Address):
        # An IPv4 address inside an IPv6 one reaches the IPv4 address: judge that.
        embedded = address.ipv4_mapped or address.sixtofour
        if embedded is None and address in NAT64:
            embedded = ipaddress.IPv4Address(int(address) & 0xFFFFFFFF)
        if embedded is not None:
            inner = address_refusal(embedded)
            return f"an IPv6 address holding {embedded}, {inner}" if inner else None
    if address.is_unspecified:
        return "the unspecified address"
    if address.is_loopback:
        return "a loopback address"
    if address.is_link_local:
        return "a link-local address"
    if address.is_multicast:
        return "a multicast address"
    if isinstance(address, ipaddress.IPv4Address) and address in SHARED:
        return "a shared carrier-grade NAT address"
    if address.is_private:
        return "a private address"
    if address.is_reserved:
        return "a reserved address"
    if not address.is_global:
        return "not a public address"
    return None


def check_url_form(url: str, allow_private: bool) -> URL:
    """Check what needs no DNS: the scheme, the host, no credentials, and a host that
    is a literal address. Return the parsed URL; raise DestinationRefused."""
    try:
        parsed = URL(url)
        parsed.port  # noqa: B018 (yarl checks the port when asked)
    except (ValueError, TypeError) as error:
        raise DestinationRefused(f"url: not a usable URL ({error})") from None
    if parsed.scheme not in ("http", "https"):
        given = f"not {parsed.scheme}" if parsed.scheme else "and this URL has no scheme"
        raise DestinationRefused(f"url: alerts are sent over http or https, {given}")
    if not parsed.raw_host:
        raise DestinationRefused("url: has no host")
    if parsed.raw_user is not None or parsed.raw_password is not None:
        raise DestinationRefused(
            "url: may not carry credentials (user:password@); give the destination a secret "
            "and check the X-Keelwave-Signature header instead"
        )
    if not allow_private:
        host = parsed.raw_host
        if host.rstrip(".").lower() in METADATA_HOSTS:
            raise DestinationRefused(
                f"url: alerts may not go to {host} (a cloud metadata service); {ALLOW_HINT}"
            )
        if (literal := _literal(host)) is not None:
            _refuse_if_private(host, [literal])
    return parsed


def check_url(url: str, allow_private: bool) -> None:
    """Raise DestinationRefused unless alerts may go to ``url``. Resolves the host
    (blocking); on the event loop use :func:`check_url_async`."""
    parsed = check_url_form(url, allow_private)
    if allow_private or _literal(parsed.raw_host) is not None:
        return
    try:
        infos = socket.getaddrinfo(parsed.raw_host, parsed.port, type=socket.SOCK_STREAM)
    except (socket.gaierror, UnicodeError):
        return  # not resolvable from here now: judged again, resolved, at each delivery
    _refuse_if_private(parsed.raw_host, [_address(info[4][0]) for info in infos])


async def check_url_async(url: str, allow_private: bool) -> None:
    """:func:`check_url`, resolving on the event loop's executor (the request path)."""
    parsed = check_url_form(url, allow_private)
    if allow_private or _literal(parsed.raw_host) is not None:
        return
    loop = asyncio.get_running_loop()
    try:
        infos = await loop.getaddrinfo(parsed.raw_host, parsed.port, type=socket.SOCK_STREAM)
    except (socket.gaierror, UnicodeError):
        # Not resolvable from here now (a server without outside DNS, a name not yet
        # published): accepted, and judged again, resolved, at each delivery.
        return
    _refuse_if_private(parsed.raw_host, [_address(info[4][0]) for info in infos])


class GuardedResolver(AbstractResolver):
    """aiohttp's resolver, refusing (unless allowed) a name that resolves to any private
    address: the check at delivery time, on the very addresses connected to. Literal
    addresses never reach a resolver; :func:`check_url_form` checks those."""

    def __init__(self, allow_private: bool, inner: AbstractResolver | None = None) -> None:
        self._allow_private = allow_private
        self._inner = inner or ThreadedResolver()

    async def resolve(
        self, host: str, port: int = 0, family: socket.AddressFamily = socket.AF_INET
    ) -> list[ResolveResult]:
        if not self._allow_private and host.rstrip(".").lower() in METADATA_HOSTS:
            raise DestinationRefused(
                f"url: alerts may not go to {host} (a cloud metadata service); {ALLOW_HINT}"
            )
        results = await self._inner.resolve(host, port, family)
        if not self._allow_private:
            _refuse_if_private(host, [_address(result["host"]) for result in results])
        return results

    async def close(self) -> None:
        await self._inner.close()


def _literal(host: str) -> IPAddress | None:
    try:
        return ipaddress.ip_address(host)
    except ValueError:
        return None


def _address(text: str) -> IPAddress | None:
    """A resolved address (None for something that is not one: refused, never guessed)."""
    try:
        return ipaddress.ip_address(text)
    except ValueError:
        return None


def _refuse_if_private(host: str, addresses: list[IPAddress | None]) -> None:
    # Every address must be public: a connection may be made to any of them.
    for address in addresses:
        reason = "not an address" if address is None else address_refusal(address)
        if reason is None:
            continue
        where = host if str(address) == host else f"{host}, which resolves to {address}"
        raise DestinationRefused(f"url: alerts may not go to {where} ({reason}); {ALLOW_HINT}")
    if not addresses:
        raise _unresolved(host, "no address")


def _unresolved(host: str, error: object) -> DestinationRefused:
    return DestinationRefused(f"url: the host {host} does not resolve ({error})")


# --- what --------------------------------------------------------------------------

HEADER_MAX = 150  # Slack: a header block's plain_text
SECTION_MAX = 3000  # Slack: a section block's text
FIELD_MAX = 100  # what we show of one user-given name (rule, agent, project, value)


def dashboard_url(settings: Any) -> str:
    """Where people open the dashboard (KEELWAVE_PUBLIC_URL, else the server's own
    address), for the links in alerts."""
    if settings.public_url:
        return settings.public_url.rstrip("/")
    host = "localhost" if settings.host in ("0.0.0.0", "::", "") else settings.host
    return f"http://{host}:{settings.port}"


def render_body(kind: str, event: dict[str, Any]) -> tuple[bytes, str]:
    """The body stored for an event and sent on every attempt, and its content type.

    ``event`` is the webhook JSON object: {"id", "rule": {"id", "name"}, "state",
    "project", "agent_name", "run_id"?, "metric", "value", "threshold", "at", "url"}.
    """
    if kind == "webhook":
        return msgspec.json.encode(event), JSON
    if kind == "slack":
        return msgspec.json.encode(slack_message(event)), JSON
    raise ValueError(f"unknown destination kind {kind!r}")


def signature(secret: str, body: bytes) -> str:
    """The X-Keelwave-Signature header: HMAC-SHA256 of the raw body, in hex."""
    return "sha256=" + hmac.new(secret.encode("utf-8"), body, hashlib.sha256).hexdigest()


def slack_message(event: dict[str, Any]) -> dict[str, Any]:
    """A Slack incoming-webhook message: ``text`` (the notification, and the fallback
    where blocks are not shown) and Block Kit blocks: a header, a section with the
    details and the dashboard link, a context line with the time."""
    firing = event.get("state") == "firing"
    emoji, state = (":rotating_light:", "Firing") if firing else (":white_check_mark:", "Resolved")
    rule = _short((event.get("rule") or {}).get("name") or "alert")
    agent = _short(event.get("agent_name")) if event.get("agent_name") else "every agent"
    metric = _short(str(event.get("metric") or ""))
    reading = f"{metric} {_short(_value(event.get('value')))}"
    if event.get("threshold") is not None:
        reading += f" (threshold {_short(_value(event.get('threshold')))})"
    text = f"{emoji} {state}: {_escape(rule)} ({_escape(agent)}): {_escape(reading)}"

    lines = [
        f"*{state}:* {_escape(rule)}",
        f"*Agent:* {_escape(agent)}",
        f"*{_escape(metric)}:* {_escape(_short(_value(event.get('value'))))}"
        + (
            f" (threshold {_escape(_short(_value(event.get('threshold'))))})"
            if event.get("threshold") is not None
            else ""
        ),
    ]
    if event.get("run_id"):
        lines.append(f"*Run:* `{_escape(_short(str(event['run_id'])))}`")
    link = event.get("url")
    if isinstance(link, str) and link.startswith(("http://", "https://")):
        lines.append(f"<{_link_target(link)}|Open in keelwave>")
    section = "\n".join(lines)[:SECTION_MAX]

    context = []
    if event.get("project"):
        context.append(f"project {_escape(_short(str(event['project'])))}")
    context.append(_slack_time(event.get("at")))
    header = _cut(f"{emoji} {state}: {rule}", HEADER_MAX)
    return {
        "text": text,
        "blocks": [
            {"type": "header", "text": {"type": "plain_text", "text": header, "emoji": True}},
            {"type": "section", "text": {"type": "mrkdwn", "text": section}},
            {"type": "context", "elements": [{"type": "mrkdwn", "text": " · ".join(context)}]},
        ],
    }


def _escape(text: str) -> str:
    # Slack reads &, < and > as control characters in mrkdwn: a name like
    # "<!channel>" must show as text, never notify a whole channel.
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def _link_target(url: str) -> str:
    return _escape(url).replace("|", "%7C")


def _cut(text: str, most: int) -> str:
    return text if len(text) <= most else text[: most - 1] + "…"


def _short(text: str) -> str:
    return _cut(text, FIELD_MAX)


def _value(value: Any) -> str:
    if value is None:
        return "–"
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, float):
        return f"{value:.6g}"
    if isinstance(value, list | tuple):
        return ", ".join(_value(item) for item in value)
    if isinstance(value, dict):
        return msgspec.json.encode(value).decode()
    return str(value)


def _slack_time(at: Any) -> str:
    """Slack's date token shows the time in the reader's own time zone; the ISO text
    is its fallback."""
    if isinstance(at, datetime):
        moment, at = at, at.isoformat()
    elif isinstance(at, str):
        try:
            moment = datetime.fromisoformat(at)
        except ValueError:
            return _escape(_short(at))
    else:
        return "–"
    if moment.tzinfo is None:
        return _escape(_short(at))
    return f"<!date^{int(moment.timestamp())}^{{date_short_pretty}} at {{time_secs}}|{_escape(at)}>"
