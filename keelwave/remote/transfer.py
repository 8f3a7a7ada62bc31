"""Moving a project's runs between servers over the API: an export read as a stream,
an import sent in parts.

An export can hold millions of steps, so neither side holds it whole: the export
is copied from the response to a file as it comes, and an import reads its file a
part at a time (a few thousand lines, a few MiB: below any server's body limit),
a few parts in flight, each answered once committed. Every part can be sent again without
storing anything twice, so an import that failed half-way is simply run again.
"""

from __future__ import annotations

import json
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, as_completed, wait
from dataclasses import dataclass
from typing import IO, Any

from keelwave.remote.api import Api, ApiError, error_message

PART_LINES = 2000
PART_BYTES = 4 * 1024 * 1024
PARALLEL = 4  # parts in flight
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


def import_from(
    api: Api,
    lines: Iterable[bytes],
    progress: Callable[[ImportTotals], None] | None = None,
    parallel: int = PARALLEL,
) -> ImportTotals:
    """Send an export's lines in parts, ``parallel`` at a time (the server commits
    concurrent parts together, as it does concurrent agents' batches), reading the
    next part only when one is answered: memory holds ``parallel`` parts at most.

    Parts may be stored in any order, as ingest may come in any order: a part's runs
    and their finishes travel together, and steps and model calls may come before
    their run. The first part that fails stops the import (ApiError naming its line)."""
    totals = ImportTotals()
    path = f"/v1/projects/{api.project}/import"

    def send(first_line: int, part: list[bytes]) -> tuple[int, int, dict]:
        url = f"{path}?first_line={first_line}"
        answer = _json(_open(api, "POST", url, b"".join(part), "application/x-ndjson"))
        return first_line, len(part), answer["data"]

    def count(future: Future) -> None:
        first_line, size, answer = future.result()  # raises the part's ApiError
        totals.runs += answer["runs"]
        totals.steps += answer["steps"]
        totals.model_calls += answer["model_calls"]
        totals.finished += answer["finished"]
        totals.complete = totals.complete or answer["complete"]
        totals.lines = max(totals.lines, first_line + size - 1)
        if progress is not None:
            progress(totals)

    with ThreadPoolExecutor(max_workers=parallel) as pool:
        pending: set[Future] = set()
        try:
            for first_line, part in _parts(lines):
                if len(pending) >= parallel:
                    done, pending = wait(pending, return_when=FIRST_COMPLETED)
                    for future in done:
                        count(future)
                pending.add(pool.submit(send, first_line, part))
            for future in as_completed(pending):
                count(future)
        except BaseException:
            for future in pending:
                future.cancel()
            raise
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
    headers = {**api.authorization(), "Accept-Encoding": "identity"}
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
