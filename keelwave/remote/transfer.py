"""Moving a project's runs between servers over the API: an export read as a stream,
an import sent in parts.

An export can hold millions of steps, so neither side holds it whole: the export
is copied from the response to a file as it comes, and an import reads its file a
part at a time (a few thousand lines, a few MiB: below any server's body limit),
each part committed before the next is sent. Every part can be sent again without
storing anything twice, so an import that failed half-way is simply run again.
"""

from __future__ import annotations

import json
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import IO, Any

from keelwave.remote.api import Api, ApiError
from keelwave.remote.api import _message as error_message

PART_LINES = 2000
PART_BYTES = 4 * 1024 * 1024
CHUNK = 1 << 16


def export_to(
    api: Api, out: IO[bytes], since: str | None, until: str | None, agent: str | None
) -> dict[str, int]:
    """Copy the project's export to ``out``; the counts of its last line. Raises ApiError
    if the stream ends without that line (the server or the network gave up)."""
    query = {"since": since, "until": until, "agent_name": agent}
    encoded = urllib.parse.urlencode({k: v for k, v in query.items() if v is not None})
    path = f"/v1/projects/{api.project}/export" + ("?" + encoded if encoded else "")
    last = b""
    with _open(api, "GET", path, None, None, timeout=None) as response:
        tail = b""
        while chunk := response.read(CHUNK):
            out.write(chunk)
            tail = (tail + chunk)[-4096:]
        last = tail.rstrip(b"\n").rsplit(b"\n", 1)[-1]
    try:
        end = json.loads(last)
    except ValueError:
        end = {}
    if not isinstance(end, dict) or end.get("kind") != "end":
        raise ApiError("the export was cut off before its end: run it again")
    return {key: end[key] for key in ("runs", "steps", "model_calls")}


@dataclass
class ImportTotals:
    runs: int = 0
    steps: int = 0
    model_calls: int = 0
    finished: int = 0
    lines: int = 0
    complete: bool = False  # the export's last line was read
    parts: list[dict[str, Any]] = field(default_factory=list, repr=False)


def import_from(
    api: Api, lines: Iterable[bytes], progress: Callable[[ImportTotals], None] | None = None
) -> ImportTotals:
    """Send an export's lines in parts, each committed before the next."""
    totals = ImportTotals()
    path = f"/v1/projects/{api.project}/import"
    for first_line, part in _parts(lines):
        data = b"".join(part)
        answer = _json(
            _open(api, "POST", f"{path}?first_line={first_line}", data, "application/x-ndjson")
        )["data"]
        totals.runs += answer["runs"]
        totals.steps += answer["steps"]
        totals.model_calls += answer["model_calls"]
        totals.finished += answer["finished"]
        totals.complete = totals.complete or answer["complete"]
        totals.lines = first_line + len(part) - 1
        if progress is not None:
            progress(totals)
    return totals


def _parts(lines: Iterable[bytes]) -> Iterator[tuple[int, list[bytes]]]:
    part: list[bytes] = []
    size = 0
    first = 1
    number = 0
    for number, line in enumerate(lines, 1):
        if part and (len(part) >= PART_LINES or size + len(line) > PART_BYTES):
            yield first, part
            part, size, first = [], 0, number
        part.append(line if line.endswith(b"\n") else line + b"\n")
        size += len(line)
    if part:
        yield first, part


def _open(
    api: Api,
    method: str,
    path: str,
    data: bytes | None,
    content_type: str | None,
    timeout: float | None = 600.0,
):
    # The key is the client's own: these requests are its, made another way (streamed).
    headers = {"Authorization": f"Bearer {api._key}", "Accept-Encoding": "identity"}  # noqa: SLF001
    if content_type:
        headers["Content-Type"] = content_type
    request = urllib.request.Request(api.endpoint + path, data=data, headers=headers, method=method)
    try:
        return urllib.request.urlopen(request, timeout=timeout)
    except urllib.error.HTTPError as error:
        raise ApiError(error_message(error), error.code) from None
    except (urllib.error.URLError, OSError) as error:
        reason = getattr(error, "reason", error)
        raise ApiError(f"cannot reach keelwave at {api.endpoint}: {reason}") from None


def _json(response) -> Any:
    with response:
        return json.load(response)
