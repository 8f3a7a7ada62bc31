"""keelwave and Arize Phoenix side by side: the same agent runs, the same PostgreSQL.

    pip install -e '.[peer]'                      # the OpenTelemetry SDK and exporter
    python -m venv /tmp/phx && /tmp/phx/bin/pip install arize-phoenix asyncpg
    python bench/peer_phoenix.py --phoenix /tmp/phx/bin/phoenix [--runs 500]

Phoenix lives in its own virtual environment (it pins many libraries); this
script starts it on a scratch database with ``phoenix serve`` and feeds it the
workload as OTLP spans with the OpenTelemetry SDK (one trace per agent run: a
root span and one child span per tool call, batched by BatchSpanProcessor).
keelwave gets the same runs through its Python SDK, which batches in the
background as it would in an agent. Each side's throughput counts steps once they are stored:
Phoenix's ``spans`` table, keelwave's ``agent_steps``.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
import urllib.request

import psycopg

sys.path.insert(0, os.path.dirname(__file__))
from ingest import ADMIN_URL, drop_database, start_server  # noqa: E402


def scratch(name: str) -> str:
    with psycopg.connect(ADMIN_URL, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        conn.execute(f'CREATE DATABASE "{name}"')
    return ADMIN_URL.rsplit("/", 1)[0] + "/" + name


def wait_for_rows(db_url: str, sql: str, expected: int, timeout: float = 600) -> float:
    """Seconds until ``sql`` counts ``expected`` rows."""
    deadline = time.perf_counter() + timeout
    with psycopg.connect(db_url, autocommit=True) as conn:
        while time.perf_counter() < deadline:
            if conn.execute(sql).fetchone()[0] >= expected:
                return time.perf_counter()
            time.sleep(0.05)
    raise SystemExit(f"only part of the data arrived within {timeout} s")


def run_phoenix(phoenix: str, runs: int, steps: int) -> float:
    db_url = scratch("kw_bench_phoenix")
    port = "6206"
    env = {**os.environ, "PHOENIX_SQL_DATABASE_URL": db_url, "PHOENIX_PORT": port,
           "PHOENIX_GRPC_PORT": "4617", "PHOENIX_TELEMETRY_ENABLED": "false"}  # fmt: skip
    server = subprocess.Popen([phoenix, "serve"], env=env, stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL)  # fmt: skip
    try:
        for _ in range(120):
            try:
                urllib.request.urlopen(f"http://127.0.0.1:{port}/", timeout=1)
                break
            except OSError:
                time.sleep(0.5)
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
        from opentelemetry.sdk.resources import Resource
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import BatchSpanProcessor

        provider = TracerProvider(resource=Resource.create({"service.name": "bench-agent"}))
        exporter = OTLPSpanExporter(endpoint=f"http://127.0.0.1:{port}/v1/traces")
        provider.add_span_processor(BatchSpanProcessor(exporter, max_export_batch_size=512,
                                                       max_queue_size=200_000))  # fmt: skip
        tracer = provider.get_tracer("bench")
        started = time.perf_counter()
        for number in range(runs):
            with tracer.start_as_current_span("research-agent") as root:
                root.set_attribute("openinference.span.kind", "AGENT")
                for index in range(1, steps + 1):
                    with tracer.start_as_current_span("web_search") as span:
                        span.set_attribute("openinference.span.kind", "TOOL")
                        span.set_attribute("tool.name", "web_search")
                        span.set_attribute(
                            "input.value", json.dumps({"q": f"query {number} {index}"})
                        )
                        span.set_attribute("output.value", json.dumps({"results": ["a", "b"]}))
        provider.force_flush(600_000)
        total = runs * (steps + 1)
        finished = wait_for_rows(db_url, "SELECT count(*) FROM spans", total)
        provider.shutdown()
        return runs * steps / (finished - started)
    finally:
        server.terminate()
        server.wait()
        drop_database("kw_bench_phoenix")


def run_keelwave(runs: int, steps: int) -> float:
    """The same workload through keelwave's Python SDK, as an agent would send it."""
    from keelwave import Keelwave

    db_url = scratch("kw_bench_peer")
    process, url, key = start_server(db_url)
    try:
        client = Keelwave(api_key=key, endpoint=url, flush_at_exit=False)
        started = time.perf_counter()
        for number in range(runs):
            with client.run("research-agent") as run:
                for index in range(1, steps + 1):
                    run.tool_call("web_search", input={"q": f"query {number} {index}"},
                                  output={"results": ["a", "b"]})  # fmt: skip
        client.flush(600)
        finished = wait_for_rows(db_url, "SELECT count(*) FROM agent_steps", runs * steps)
        client.shutdown()
        return runs * steps / (finished - started)
    finally:
        process.terminate()
        process.wait()
        drop_database("kw_bench_peer")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--phoenix", default="phoenix", help="the `phoenix` command to run")
    parser.add_argument("--runs", type=int, default=500)
    parser.add_argument("--steps", type=int, default=20, help="tool calls per run")
    parser.add_argument("--json", help="also write the results to this file (bench/all.py)")
    args = parser.parse_args()
    ours = run_keelwave(args.runs, args.steps)
    theirs = run_phoenix(args.phoenix, args.runs, args.steps)
    print(
        f"{args.runs} runs × {args.steps} tool calls, python {sys.version.split()[0]}, "
        f"{os.cpu_count()} cores, the same PostgreSQL"
    )
    print(f"{'keelwave (stored)':<28}{ours:>10.0f} steps/s")
    print(f"{'Phoenix (stored spans)':<28}{theirs:>10.0f} steps/s")
    print(f"keelwave / Phoenix = {ours / theirs:.1f}x")
    if args.json:
        with open(args.json, "w") as file:
            json.dump({"runs": args.runs, "keelwave": ours, "phoenix": theirs}, file)


if __name__ == "__main__":
    main()
