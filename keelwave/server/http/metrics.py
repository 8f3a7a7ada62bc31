"""Prometheus metrics, served off the public port.

With ``KEELWAVE_METRICS_PORT`` set, each server process answers ``GET
/metrics`` on 127.0.0.1 at that port (the N-th worker at port + N - 1): the
public port never shows them, and every process reports its own counters, so
a scrape is always consistent. Counters are kept in plain dicts: the event
loop is single-threaded, and the text format is simple enough to write out.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import AsyncIterator, Awaitable, Callable

from aiohttp import web

FLUSH_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, float("inf"))


class Metrics:
    def __init__(self) -> None:
        self.requests: dict[tuple[str, str, int], int] = defaultdict(int)
        self.ingest_rows: dict[str, int] = defaultdict(int)
        self.database_errors: dict[str, int] = defaultdict(int)
        self.flush_buckets = [0] * len(FLUSH_BUCKETS)
        self.flush_sum = 0.0
        self.flush_count = 0
        self.buffer_rows: Callable[[], int] = lambda: 0

    def request(self, route: str, method: str, status: int) -> None:
        self.requests[(route, method, status)] += 1

    def flushed(self, seconds: float, rows_by_table: dict[str, int]) -> None:
        self.flush_sum += seconds
        self.flush_count += 1
        for number, bound in enumerate(FLUSH_BUCKETS):
            if seconds <= bound:
                self.flush_buckets[number] += 1
        for table, rows in rows_by_table.items():
            self.ingest_rows[table] += rows

    def database_error(self, kind: str) -> None:
        self.database_errors[kind] += 1

    def render(self) -> str:
        lines = [
            "# HELP keelwave_http_requests_total HTTP requests by route, method and status.",
            "# TYPE keelwave_http_requests_total counter",
        ]
        for (route, method, status), count in sorted(self.requests.items()):
            lines.append(
                f'keelwave_http_requests_total{{route="{_escape(route)}",method="{method}",'
                f'status="{status}"}} {count}'
            )
        lines += [
            "# HELP keelwave_ingest_rows_total Rows committed by the ingest writer, per table.",
            "# TYPE keelwave_ingest_rows_total counter",
        ]
        lines += [f'keelwave_ingest_rows_total{{table="{t}"}} {n}'
                  for t, n in sorted(self.ingest_rows.items())]  # fmt: skip
        lines += [
            "# HELP keelwave_ingest_buffer_rows Rows waiting for commit.",
            "# TYPE keelwave_ingest_buffer_rows gauge",
            f"keelwave_ingest_buffer_rows {self.buffer_rows()}",
            "# HELP keelwave_ingest_flush_seconds Time to commit one ingest batch.",
            "# TYPE keelwave_ingest_flush_seconds histogram",
        ]
        for bound, count in zip(FLUSH_BUCKETS, self.flush_buckets, strict=True):
            label = "+Inf" if bound == float("inf") else repr(bound)
            lines.append(f'keelwave_ingest_flush_seconds_bucket{{le="{label}"}} {count}')
        lines += [
            f"keelwave_ingest_flush_seconds_sum {self.flush_sum:.6f}",
            f"keelwave_ingest_flush_seconds_count {self.flush_count}",
            "# HELP keelwave_database_errors_total Database failures, by kind.",
            "# TYPE keelwave_database_errors_total counter",
        ]
        lines += [f'keelwave_database_errors_total{{kind="{k}"}} {n}'
                  for k, n in sorted(self.database_errors.items())]  # fmt: skip
        return "\n".join(lines) + "\n"


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"')


def middleware(metrics: Metrics) -> Callable:
    """Count every request by its route template (never the raw path: ids would explode it)."""

    @web.middleware
    async def count(
        request: web.Request, handler: Callable[[web.Request], Awaitable[web.StreamResponse]]
    ) -> web.StreamResponse:
        response = await handler(request)
        route = request.match_info.route.resource
        template = route.canonical if route is not None else "unmatched"
        metrics.request(template, request.method, response.status)
        return response

    return count


async def serve(metrics: Metrics, port: int) -> AsyncIterator[None]:
    """Answer GET /metrics on 127.0.0.1:port while the main app runs."""

    async def handler(request: web.Request) -> web.Response:
        return web.Response(text=metrics.render(), content_type="text/plain",
                            charset="utf-8", headers={"Cache-Control": "no-store"})  # fmt: skip

    app = web.Application()
    app.router.add_get("/metrics", handler)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", port).start()
    try:
        yield
    finally:
        await runner.cleanup()
