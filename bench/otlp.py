"""OTLP ingest as users have it: OpenTelemetry's SDK and exporter against `keelwave serve`,
next to Arize Phoenix fed the same spans and keelwave's own SDK sending the same steps.

    pip install -e '.[peer]'                      # the OpenTelemetry SDK and exporter
    python -m venv /tmp/phx && /tmp/phx/bin/pip install arize-phoenix asyncpg
    python bench/otlp.py --phoenix /tmp/phx/bin/phoenix [--repeat 3] [--quick]
    pip install py-spy                            # optional: --py-spy profiles the server

The workload is a fleet of agents: ``--processes`` client processes, each with
``--agents`` agents running ``--runs`` runs one after the other. A run is an
``invoke_agent`` span (GenAI conventions: gen_ai.operation.name, gen_ai.agent.name)
with about 20 children, ``chat`` model spans (model, provider, tokens) alternating
with ``execute_tool`` spans (gen_ai.tool.call.arguments, a JSON string of a few
hundred bytes; gen_ai.tool.call.result, a few hundred bytes to a few KB); one run in
four repeats a tool call with the same arguments (a loop). The timeline is simulated
(seconds-long model and tool calls, agents overlapping), so each process's
BatchSpanProcessor exports the spans in the order they ended, 512 at a time, with
the traces of all its agents interleaved, children before their agent, a run cut
over several exports, as a real fleet sends them.

Spans are made with the real SDK (TracerProvider) before the clock starts and
handed, when it starts, to a BatchSpanProcessor (defaults, except a queue large
enough to drop nothing) with the real OTLPSpanExporter (protobuf over HTTP): the
clock measures the exporter's encoding and sending and the server, not the agents'
own span creation (``--live`` makes the spans in the clock too). The same runs go to:

1. keelwave OTLP: a real ``keelwave serve`` on a fresh database, ``POST /v1/traces``;
2. keelwave native: the same steps and model calls through keelwave's Python SDK
   (runs started, steps and model calls batched by its sender, finishes), from the
   same number of processes and agents (threads);
3. Arize Phoenix (``phoenix serve`` on a fresh PostgreSQL database), the same OTLP.

A step counts once it is queryable: its row is in agent_steps (Phoenix: its span
in ``spans``), polled every 50 ms. Throughput is steps from the first export (or
SDK request) to the last step queryable. CPU is the server's process tree and the
PostgreSQL backends connected to its database (the poller's own excluded), from
the moment the clock starts to everything being committed, per committed step.

Also, in this process: decode cost per span (``decode.from_protobuf`` of a
512-span export) against the native JSON decode of the same steps and calls, and
where the OTLP store's time goes (``traces.store_export`` driven directly on its
own database, each stage timed, then cProfile's top functions), the span write
alone, both ways the store has; with ``--py-spy``, a sampling profile of
the real server during one more OTLP run and one more native run, grouped by stage.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import cProfile
import dataclasses
import functools
import io
import json
import multiprocessing as mp
import os
import pstats
import random
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import timeit
import urllib.request
import uuid
from dataclasses import dataclass, field
from pathlib import Path

import psutil
import psycopg

sys.path.insert(0, os.path.dirname(__file__))
from ingest import ADMIN_URL, RssSampler, drop_database  # noqa: E402

SYSTEMS = ("otlp", "native", "phoenix")
PHOENIX_PORT, PHOENIX_GRPC_PORT = "6207", "4618"
POLL_SECONDS = 0.05
# The watcher counts stored rows, which costs the database CPU on the same two cores as
# what is measured (at every 50 ms, a quarter of a core by the end of a keelwave round):
# it looks every half second until most rows are in, and every 50 ms for the rest, so
# the end is timed as closely as before.
COARSE_POLL_SECONDS = 0.5
FINE_POLL_FROM = 0.85  # of the rows expected

# -- the workload --------------------------------------------------------------------

AGENTS = (
    "research-agent",
    "support-triage",
    "code-reviewer",
    "data-analyst",
    "travel-planner",
    "sre-oncall",
)
TOOLS = ("web_search", "read_file", "run_sql", "http_get", "lookup_ticket")
MODELS = (("openai", "gpt-4o-mini"), ("openai", "gpt-4o"), ("anthropic", "claude-sonnet-4-5"))
WORDS = (  # noqa: SIM905 (a list literal of 140 words reads worse)
    "agent answer api archive audit backlog balance billing branch budget cache calendar "
    "change channel checkout claim client cluster commit config contract cost customer "
    "dashboard data deadline deploy design detail device discount draft error escalation "
    "estimate event export failure feature field file filter flight forecast gateway graph "
    "hotel incident index invoice issue itinerary job latency ledger limit log market "
    "merge metric migration model monitor network note offer order outage owner package "
    "page partner payment pipeline plan policy price priority product queue quota rate "
    "record refund region release report request retry review revenue risk route runbook "
    "sales schema search segment server service session shipment signal sprint status "
    "storage subscription summary supplier support table team test ticket timeline token "
    "traffic trend update upgrade usage user vendor version volume warehouse window "
    "workflow quarterly weekly recent missing delayed failed pending latest regional"
).split()
DOMAINS = (
    "docs.example.com",
    "status.example.org",
    "wiki.internal",
    "news.example.net",
    "support.example.com",
    "github.com",
)


@dataclass(slots=True)
class Child:
    kind: str  # "chat" or "tool"
    start_ns: int
    end_ns: int
    name: str  # the tool, or the model
    provider: str = ""
    args: dict | None = None
    args_json: str = ""
    result: dict | None = None
    result_json: str = ""
    input_tokens: int = 0
    output_tokens: int = 0
    final: bool = False


@dataclass(slots=True)
class RunPlan:
    agent_slot: int  # which of the process's agents runs it
    agent_name: str
    start_ns: int
    end_ns: int
    loops: bool
    children: list[Child] = field(default_factory=list)


def _sentence(rng: random.Random, low: int, high: int) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(rng.randint(low, high)))


def _arguments(rng: random.Random, tool: str) -> dict:
    reason = _sentence(rng, 12, 30)
    if tool == "web_search":
        return {
            "query": _sentence(rng, 5, 12),
            "max_results": rng.choice((5, 10)),
            "recency_days": rng.choice((7, 30, 365)),
            "locale": "en-US",
            "sites": rng.sample(DOMAINS, rng.randint(0, 3)),
            "safe_search": True,
            "reason": reason,
        }
    if tool == "read_file":
        start = rng.randint(1, 900)
        return {
            "path": f"/srv/repo/src/{rng.choice(WORDS)}/{rng.choice(WORDS)}_{rng.choice(WORDS)}.py",
            "start_line": start,
            "end_line": start + rng.randint(20, 200),
            "encoding": "utf-8",
            "reason": reason,
        }
    if tool == "run_sql":
        table, column = rng.choice(WORDS), rng.choice(WORDS)
        return {
            "database": "analytics",
            "timeout_s": 30,
            "reason": reason,
            "query": f"SELECT {column}, count(*) AS n, sum(amount) AS total FROM {table}s "
            f"WHERE created_at > now() - interval '{rng.randint(1, 90)} days' "
            f"AND {column} IS NOT NULL GROUP BY {column} ORDER BY n DESC LIMIT 100",
        }
    if tool == "http_get":
        return {
            "url": f"https://api.example.com/v2/{rng.choice(WORDS)}s/{rng.randint(1, 99999)}",
            "headers": {"Accept": "application/json", "X-Request-Source": "agent"},
            "timeout_s": 10,
            "reason": reason,
        }
    return {
        "ticket_id": f"TCK-{rng.randint(1000, 99999)}",
        "include_history": True,
        "fields": rng.sample(["status", "owner", "priority", "comments", "sla", "tags"], 3),
        "reason": reason,
    }


def _result(rng: random.Random) -> dict:
    items = [
        {
            "title": _sentence(rng, 3, 9),
            "snippet": _sentence(rng, 10, 45),
            "url": f"https://{rng.choice(DOMAINS)}/{rng.choice(WORDS)}/{rng.randint(1, 9999)}",
            "score": round(rng.random(), 4),
        }
        for _ in range(rng.choice((1, 1, 2, 3, 4, 6, 8, 12)))
    ]
    return {"status": "ok", "elapsed_ms": rng.randint(5, 3000), "items": items}


def plan(seed: int, agents: int, runs: int) -> list[RunPlan]:
    """The runs of one client process: ``agents`` agents, ``runs`` runs each, on a
    simulated timeline ending about now (so the server sees recent runs)."""
    rng = random.Random(seed)
    plans: list[RunPlan] = []
    for slot in range(agents):
        t = int(rng.uniform(0, 20) * 1e9)
        for _ in range(runs):
            run = RunPlan(slot, rng.choice(AGENTS), t, 0, rng.random() < 0.25)
            calls = [rng.choice(TOOLS) for _ in range(rng.randint(8, 11))]
            arguments = [_arguments(rng, tool) for tool in calls]
            if run.loops:  # the same call, twice more
                at = rng.randrange(len(calls))
                calls[at + 1 : at + 1] = [calls[at]] * 2
                arguments[at + 1 : at + 1] = [arguments[at]] * 2
            t += 5_000_000
            provider, model = rng.choice(MODELS)
            tokens = rng.randint(600, 2000)
            for number, (tool, args) in enumerate(
                [*zip(calls, arguments, strict=True), (None, None)]
            ):
                end = t + int(rng.uniform(0.4, 2.5) * 1e9)
                tokens += rng.randint(200, 900)
                run.children.append(
                    Child(
                        "chat",
                        t,
                        end,
                        model,
                        provider,
                        input_tokens=tokens,
                        output_tokens=rng.randint(20, 400),
                        final=number == len(calls),
                    )
                )
                t = end + 1_000_000
                if args is None:
                    break
                result = _result(rng)
                end = t + int(rng.uniform(0.05, 1.5) * 1e9)
                run.children.append(
                    Child(
                        "tool",
                        t,
                        end,
                        tool,
                        args=args,
                        args_json=json.dumps(args),
                        result=result,
                        result_json=json.dumps(result),
                    )
                )
                t = end + 1_000_000
            run.end_ns = t + 2_000_000
            plans.append(run)
            t = run.end_ns + int(rng.uniform(0, 2) * 1e9)
    shift = time.time_ns() - max(run.end_ns for run in plans)
    for run in plans:
        run.start_ns += shift
        run.end_ns += shift
        for child in run.children:
            child.start_ns += shift
            child.end_ns += shift
    return plans


def counts(plans: list[RunPlan]) -> dict[str, int]:
    return {
        "runs": len(plans),
        "steps": sum(c.kind == "tool" for run in plans for c in run.children),
        "calls": sum(c.kind == "chat" for run in plans for c in run.children),
        "spans": sum(1 + len(run.children) for run in plans),
        "loops": sum(run.loops for run in plans),
    }


def emit(tracer, plans: list[RunPlan]) -> None:
    """Start and end every span of ``plans`` in timeline order (so the span
    processor gets them in the order they ended, agents interleaved)."""
    from opentelemetry import trace
    from opentelemetry.trace import SpanKind

    events = []
    for r, run in enumerate(plans):
        events.append((run.start_ns, 0, r, -1))
        events.append((run.end_ns, 3, r, -1))
        for c, child in enumerate(run.children):
            events.append((child.start_ns, 1, r, c))
            events.append((child.end_ns, 2, r, c))
    events.sort()
    agents: dict[int, object] = {}
    open_spans: dict[tuple[int, int], object] = {}
    for when, phase, r, c in events:
        run = plans[r]
        if phase == 0:
            agents[r] = tracer.start_span(
                f"invoke_agent {run.agent_name}",
                kind=SpanKind.INTERNAL,
                start_time=when,
                attributes={
                    "gen_ai.operation.name": "invoke_agent",
                    "gen_ai.agent.name": run.agent_name,
                    "gen_ai.provider.name": run.children[0].provider,
                    "gen_ai.conversation.id": f"conv-{r}-{run.start_ns}",
                },
            )
        elif phase == 1:
            child = run.children[c]
            context = trace.set_span_in_context(agents[r])
            if child.kind == "chat":
                attributes = {
                    "gen_ai.operation.name": "chat",
                    "gen_ai.provider.name": child.provider,
                    "gen_ai.request.model": child.name,
                    "gen_ai.response.model": child.name,
                    "gen_ai.usage.input_tokens": child.input_tokens,
                    "gen_ai.usage.output_tokens": child.output_tokens,
                    "gen_ai.response.finish_reasons": ("stop",) if child.final else ("tool_calls",),
                    "server.address": "api.example.com",
                }
                name, kind = f"chat {child.name}", SpanKind.CLIENT
            else:
                attributes = {
                    "gen_ai.operation.name": "execute_tool",
                    "gen_ai.tool.name": child.name,
                    "gen_ai.tool.type": "function",
                    "gen_ai.tool.call.id": f"call_{r}_{c}",
                    "gen_ai.tool.call.arguments": child.args_json,
                    "gen_ai.tool.call.result": child.result_json,
                }
                name, kind = f"execute_tool {child.name}", SpanKind.INTERNAL
            open_spans[r, c] = tracer.start_span(
                name, context=context, kind=kind, start_time=when, attributes=attributes
            )
        elif phase == 2:
            open_spans.pop((r, c)).end(end_time=when)
        else:
            agents.pop(r).end(end_time=when)


# -- client processes ----------------------------------------------------------------


def client_main(conn, spec: dict) -> None:
    """One client process: build, say ready, send on "go", say when all was sent."""
    plans = plan(spec["seed"], spec["agents"], spec["runs"])
    warm = plan(spec["seed"] + 10_000, 1, 1)
    if spec["kind"] == "native":
        _native_client(conn, spec, plans, warm)
    else:
        _otlp_client(conn, spec, plans, warm)


def _otlp_client(conn, spec: dict, plans: list[RunPlan], warm: list[RunPlan]) -> None:
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import SpanProcessor, TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExportResult

    class Hold(SpanProcessor):
        def __init__(self) -> None:
            self.spans: list = []

        def on_end(self, span) -> None:
            self.spans.append(span)

    class Exporter(OTLPSpanExporter):
        """The real exporter; it notes when it first exported and what failed."""

        first: float | None = None
        failed = 0
        exports = 0

        def export(self, spans):  # type: ignore[override]
            if self.first is None:
                self.first = time.monotonic()
            result = super().export(spans)
            self.exports += 1
            if result is not SpanExportResult.SUCCESS:
                self.failed += len(spans)
            return result

    headers = {"Authorization": f"Bearer {spec['key']}"} if spec.get("key") else None
    resource = Resource.create(
        {"service.name": f"agent-fleet-{spec['number']}", "deployment.environment": "bench"}
    )

    def made(runs: list[RunPlan]) -> list:
        hold = Hold()
        provider = TracerProvider(resource=resource)
        provider.add_span_processor(hold)
        emit(provider.get_tracer("agent-fleet"), runs)
        return hold.spans

    exporter = Exporter(endpoint=spec["endpoint"], headers=headers, timeout=spec["timeout"])
    exporter.export(made(warm))  # connections, prepared statements: not in the clock
    exporter.first, exporter.exports = None, 0
    spans = None if spec["live"] else made(plans)
    processor = BatchSpanProcessor(exporter, max_queue_size=1_000_000)
    conn.send(("ready", counts(plans), counts(warm)))
    conn.recv()
    cpu = time.process_time()
    if spans is None:
        provider = TracerProvider(resource=resource)
        provider.add_span_processor(processor)
        emit(provider.get_tracer("agent-fleet"), plans)
    else:
        for span in spans:
            processor.on_end(span)
    processor.force_flush()
    conn.send(
        ("sent", exporter.first, exporter.failed, exporter.exports, time.process_time() - cpu)
    )
    conn.recv()
    processor.shutdown()


def _native_client(conn, spec: dict, plans: list[RunPlan], warm: list[RunPlan]) -> None:
    from keelwave import Keelwave
    from keelwave.sdk import _delivery

    first: list[float] = []
    post = _delivery.Poster.post

    def noted(self, path: str, body: bytes):
        if not first:
            first.append(time.monotonic())
        return post(self, path, body)

    _delivery.Poster.post = noted
    client = Keelwave(api_key=spec["key"], endpoint=spec["endpoint"], flush_at_exit=False)

    def agent(runs: list[RunPlan]) -> None:
        for plan_ in runs:
            with client.run(plan_.agent_name) as run:
                for child in plan_.children:
                    millis = (child.end_ns - child.start_ns) / 1e6
                    if child.kind == "chat":
                        run.llm_call(
                            child.provider,
                            child.name,
                            input_tokens=child.input_tokens,
                            output_tokens=child.output_tokens,
                            latency_ms=millis,
                        )
                    else:
                        run.tool_call(
                            child.name, input=child.args, output=child.result, duration_ms=millis
                        )
                        run.check_fingerprint(child.name, child.args)  # as @observe does

    agent(warm)
    client.flush(120)
    first.clear()
    by_agent: dict[int, list[RunPlan]] = {}
    for run in plans:
        by_agent.setdefault(run.agent_slot, []).append(run)
    threads = [threading.Thread(target=agent, args=(runs,)) for runs in by_agent.values()]
    conn.send(("ready", counts(plans), counts(warm)))
    conn.recv()
    cpu = time.process_time()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    stored = client.flush(spec["timeout"] * 20)
    conn.send(
        ("sent", first[0] if first else None, 0 if stored else -1, None, time.process_time() - cpu)
    )
    conn.recv()
    client.shutdown()


# -- measuring -----------------------------------------------------------------------


def _tree_cpu(pid: int) -> float:
    try:
        root = psutil.Process(pid)
        procs = [root, *root.children(recursive=True)]
    except psutil.NoSuchProcess:
        return 0.0
    total = 0.0
    for proc in procs:
        with contextlib.suppress(psutil.NoSuchProcess):
            times = proc.cpu_times()
            total += times.user + times.system
    return total


def _machine_busy() -> float:
    """CPU seconds the whole machine has been busy (all cores, everything on it)."""
    times = psutil.cpu_times()
    return sum(times) - times.idle - getattr(times, "iowait", 0.0)


def _backend_cpu(conn: psycopg.Connection) -> dict[int, float]:
    pids = [
        row[0]
        for row in conn.execute(
            "SELECT pid FROM pg_stat_activity WHERE datname = current_database() "
            "AND pid <> pg_backend_pid()"
        )
    ]
    found = {}
    for pid in pids:
        with contextlib.suppress(psutil.NoSuchProcess, psutil.AccessDenied):
            times = psutil.Process(pid).cpu_times()
            found[pid] = times.user + times.system
    return found


@dataclass
class Target:
    """Where a workload goes and how to see it stored."""

    system: str
    endpoint: str
    key: str | None
    db_url: str
    server_pid: int
    # SQL giving (steps, everything) counters to compare with the expected ones
    count_sql: str
    kind: str = "otlp"


def measure(target: Target, args: argparse.Namespace, runs: int) -> dict:
    """Run the workload against ``target``; its figures."""
    context = mp.get_context("spawn")
    clients = []
    for number in range(args.processes):
        parent, child = context.Pipe()
        spec = {
            "kind": target.kind,
            "endpoint": target.endpoint,
            "key": target.key,
            "seed": 1000 * number + 7,
            "agents": args.agents,
            "runs": runs,
            "number": number,
            "live": args.live,
            "timeout": 30,
        }
        process = context.Process(target=client_main, args=(child, spec), daemon=True)
        process.start()
        clients.append((process, parent))
    expected = {"runs": 0, "steps": 0, "calls": 0, "spans": 0, "loops": 0}
    warm = dict.fromkeys(expected, 0)
    for _, pipe in clients:
        if not pipe.poll(600):
            raise SystemExit(f"{target.system}: a client did not get ready")
        _, mine, warmed = pipe.recv()
        for name in expected:
            expected[name] += mine[name]
            warm[name] += warmed[name]
    with psycopg.connect(target.db_url, autocommit=True) as conn:
        # The warm-up runs are stored (Phoenix stores after it answers: wait for them).
        settle = time.monotonic() + 60
        while True:
            base_steps, base_all = conn.execute(target.count_sql).fetchone()
            warm_all = (
                warm["spans"]
                if target.system == "phoenix"
                else warm["steps"] + warm["calls"] + warm["runs"]
            )
            if base_steps >= warm["steps"] and base_all >= warm_all:
                break
            if time.monotonic() > settle:
                break
            time.sleep(POLL_SECONDS)
        want_steps = base_steps + expected["steps"]
        want_all = base_all + (
            expected["spans"]
            if target.system == "phoenix"
            else expected["steps"] + expected["calls"] + expected["runs"]
        )
        server0, backends0 = _tree_cpu(target.server_pid), _backend_cpu(conn)
        clients0 = sum(_tree_cpu(p.pid) for p, _ in clients)
        machine0 = _machine_busy()
        rss = RssSampler(target.server_pid).start()  # the server's memory, once a second
        go = time.monotonic()
        for _, pipe in clients:
            pipe.send("go")
        steps_at = done_at = None
        sent: list[tuple] = []
        progress_at, last = go, (base_steps, base_all)
        steps, everything = base_steps, base_all
        while done_at is None:
            near = everything - base_all >= FINE_POLL_FROM * (want_all - base_all)
            time.sleep(POLL_SECONDS if near else COARSE_POLL_SECONDS)
            now = time.monotonic()
            steps, everything = conn.execute(target.count_sql).fetchone()
            if steps_at is None and steps >= want_steps:
                steps_at = now
            if steps >= want_steps and everything >= want_all:
                done_at = now
            for _, pipe in clients:
                while pipe.poll():
                    sent.append(pipe.recv())
            if (steps, everything) != last:
                progress_at, last = now, (steps, everything)
            elif len(sent) == len(clients) and now - progress_at > args.stall:
                break  # everything was sent and nothing more arrives: report what did
        ended = done_at or time.monotonic()
        server1, backends1 = _tree_cpu(target.server_pid), _backend_cpu(conn)
        clients1 = sum(_tree_cpu(p.pid) for p, _ in clients)
        machine1 = _machine_busy()
        rss.stop()
        steps, everything = conn.execute(target.count_sql).fetchone()
        check = _check_runs(conn, target, expected) if target.system != "phoenix" else {}
    deadline = time.monotonic() + 600
    while len(sent) < len(clients) and time.monotonic() < deadline:
        for _, pipe in clients:
            if pipe.poll(0.1):
                sent.append(pipe.recv())
    for _, pipe in clients:
        pipe.send("quit")
    for process, _ in clients:
        process.join(60)
        if process.is_alive():
            process.kill()
    firsts = [message[1] for message in sent if message[1] is not None]
    start = min(firsts) if firsts else go
    stored_steps = steps - base_steps
    pg = sum(cpu - backends0.get(pid, 0.0) for pid, cpu in backends1.items())
    result = {
        "system": target.system,
        "expected": expected,
        "warm": warm,
        "stored_steps": stored_steps,
        "complete": done_at is not None,
        "seconds": (steps_at or ended) - start,
        "all_seconds": ended - start,
        "steps_per_s": stored_steps / ((steps_at or ended) - start),
        "server_cpu_s": server1 - server0,
        "pg_cpu_s": pg,
        "client_cpu_s": clients1 - clients0,
        "machine_busy_s": machine1 - machine0,
        "failed_spans": sum(max(0, m[2]) for m in sent),
        "exports": sum(m[3] or 0 for m in sent),
        "check": check,
        "rss_mib": rss.samples,
    }
    # What everything else on the machine (other people's tests) took meanwhile.
    result["others_cpu_s"] = result["machine_busy_s"] - (
        result["server_cpu_s"] + result["pg_cpu_s"] + result["client_cpu_s"]
    )
    result["cpu_us_per_step"] = (
        1e6 * (result["server_cpu_s"] + result["pg_cpu_s"]) / max(1, stored_steps)
    )
    return result


def _check_runs(conn: psycopg.Connection, target: Target, expected: dict) -> dict:
    """What was stored, to set next to what was sent (the warm-up run included)."""
    runs, finished, loops, calls = conn.execute(
        "SELECT count(*), count(ended_at), count(*) FILTER (WHERE loop_detected), "
        "(SELECT count(*) FROM ai_traces) FROM agent_runs"
    ).fetchone()
    return {"runs": runs, "finished": finished, "loops": loops, "calls": calls}


KEELWAVE_COUNT = (
    "SELECT steps, steps + (SELECT count(*) FROM ai_traces) "
    "+ (SELECT count(*) FROM agent_runs WHERE ended_at IS NOT NULL) "
    "FROM (SELECT count(*) AS steps FROM agent_steps) counted"
)
PHOENIX_COUNT = "SELECT count(*) FILTER (WHERE name LIKE 'execute_tool %'), count(*) FROM spans"


def scratch(name: str) -> str:
    with psycopg.connect(ADMIN_URL, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        conn.execute(f'CREATE DATABASE "{name}"')
    return ADMIN_URL.rsplit("/", 1)[0] + "/" + name


def stop(process: subprocess.Popen) -> None:
    process.terminate()
    try:
        process.wait(30)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()


def start_server(db_url: str, attempts: int = 3) -> tuple[subprocess.Popen, str, str]:
    """`keelwave serve` on ``db_url``, as bench/ingest.py starts it (the interpreter
    running this script, default workers), but with its stderr kept: on a machine
    shared with other test suites a start now and then failed, silently; now the
    reason is printed and it is tried again."""
    for attempt in range(attempts):
        log = tempfile.TemporaryFile("w+")  # noqa: SIM115 (the server writes it while it runs)
        command = [sys.executable, "-m", "keelwave.cli", "serve", "--port", "0",
                   "--log-level", "warning", "--database-url", db_url]  # fmt: skip
        process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=log, text=True)
        key = url = None
        for line in process.stdout:
            if match := re.search(r"\b(kw_[A-Za-z0-9_-]{40,})", line):
                key = match.group(1)
            if match := re.search(r"listening on (http://\S+)", line):
                url = match.group(1)
                break
        if url and key:
            threading.Thread(target=process.stdout.read, daemon=True).start()  # keep it drained
            return process, url, key
        stop(process)
        log.seek(0)
        print(f"keelwave serve did not start (attempt {attempt + 1}):\n{log.read()[-2000:]}")
        # a second start on the same database prints no key: start from a fresh one
        name = db_url.rsplit("/", 1)[1]
        db_url = scratch(name)
    raise SystemExit("keelwave serve did not start")


def run_keelwave(system: str, args: argparse.Namespace, spy: Path | None = None) -> dict:
    name = f"kw_bench_otlp_{system}"
    db_url = scratch(name)
    process, url, key = start_server(db_url)
    profiler = None
    try:
        endpoint = url + "/v1/traces" if system == "otlp" else url
        target = Target(
            system,
            endpoint,
            key,
            db_url,
            process.pid,
            KEELWAVE_COUNT,
            "otlp" if system == "otlp" else "native",
        )
        if spy is not None:
            profiler = subprocess.Popen(
                [
                    "py-spy",
                    "record",
                    "--pid",
                    str(process.pid),
                    "--subprocesses",
                    "--nonblocking",
                    "--rate",
                    "250",
                    "--format",
                    "raw",
                    "--output",
                    str(spy),
                ],
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )
            time.sleep(2)  # py-spy attaches
        result = measure(target, args, args.runs)
    finally:
        if profiler is not None:
            profiler.send_signal(signal.SIGINT)
            profiler.wait(60)
        stop(process)
        drop_database(name)
    return result


def run_phoenix(args: argparse.Namespace) -> dict:
    name = "kw_bench_otlp_phoenix"
    db_url = scratch(name)
    env = {
        **os.environ,
        "PHOENIX_SQL_DATABASE_URL": db_url,
        "PHOENIX_PORT": PHOENIX_PORT,
        "PHOENIX_GRPC_PORT": PHOENIX_GRPC_PORT,
        "PHOENIX_TELEMETRY_ENABLED": "false",
    }
    server = subprocess.Popen(
        [args.phoenix, "serve"], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    try:
        for _ in range(240):
            try:
                urllib.request.urlopen(f"http://127.0.0.1:{PHOENIX_PORT}/", timeout=1)
                break
            except OSError:
                time.sleep(0.5)
        else:
            raise SystemExit("phoenix serve did not start")
        target = Target(
            "phoenix",
            f"http://127.0.0.1:{PHOENIX_PORT}/v1/traces",
            None,
            db_url,
            server.pid,
            PHOENIX_COUNT,
        )
        return measure(target, args, args.phoenix_runs)
    finally:
        stop(server)
        drop_database(name)


# -- decode cost, in this process ------------------------------------------------------


def export_bodies(seed: int, agents: int, runs: int, number: int = 0) -> tuple[list, list]:
    """One client's spans as its BatchSpanProcessor would export them: the runs, and
    the protobuf bodies of 512 spans each."""
    from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import SpanProcessor, TracerProvider

    class Hold(SpanProcessor):
        def __init__(self) -> None:
            self.spans: list = []

        def on_end(self, span) -> None:
            self.spans.append(span)

    plans = plan(seed, agents, runs)
    hold = Hold()
    provider = TracerProvider(resource=Resource.create({"service.name": f"agent-fleet-{number}"}))
    provider.add_span_processor(hold)
    emit(provider.get_tracer("agent-fleet"), plans)
    bodies = [
        encode_spans(hold.spans[i : i + 512]).SerializePartialToString()
        for i in range(0, len(hold.spans), 512)
    ]
    return plans, bodies


def _best(statement, number: int, repeat: int = 5) -> float:
    return min(timeit.repeat(statement, number=number, repeat=repeat)) / number


def decode_cost() -> dict:
    """µs per span for decode.from_protobuf of a 512-span export, against the native
    JSON decode of the same steps and model calls (the SDK's own bodies)."""
    from keelwave.sdk import canonical_json
    from keelwave.sdk._run import _render_step, model_call_event
    from keelwave.server.ingest.otlp import decode, export
    from keelwave.server.ingest.routes import CALLS_BODY, STEPS_BODY
    from keelwave.server.ingest.schemas import decode as decode_json

    plans, bodies = export_bodies(7, 25, 4)
    body = bodies[1]  # a full one from mid-stream
    spans = decode.from_protobuf(body)
    tools = [s for s in spans if s.attributes.get("gen_ai.operation.name") == "execute_tool"]
    chats = [s for s in spans if s.attributes.get("gen_ai.operation.name") == "chat"]
    by_id = {}
    for run in plans:
        for child in run.children:
            if child.kind == "tool":
                by_id[child.args_json] = child
    run_id = str(uuid.uuid4())
    steps_json = []
    for index, span in enumerate(tools, start=1):
        child = by_id[span.attributes["gen_ai.tool.call.arguments"]]
        steps_json.append(
            _render_step(
                run_id,
                index,
                "tool_call",
                child.name,
                canonical_json(child.args),
                canonical_json(child.result),
                None,
                (child.end_ns - child.start_ns) / 1e6,
                None,
                child.start_ns / 1e9,
            )
        )
    calls_json = []
    for span in chats:
        event, _ = model_call_event(
            run_id,
            span.attributes["gen_ai.provider.name"],
            span.attributes["gen_ai.request.model"],
            input_tokens=span.attributes["gen_ai.usage.input_tokens"],
            output_tokens=span.attributes["gen_ai.usage.output_tokens"],
            latency_ms=1234.5,
        )
        calls_json.append(event.text())
    steps_body = ("[" + ",".join(steps_json) + "]").encode()
    calls_body = ("[" + ",".join(calls_json) + "]").encode()
    protobuf = _best(lambda: decode.from_protobuf(body), 20)
    check = _best(lambda: export.check(spans), 20)
    steps = _best(lambda: decode_json(steps_body, STEPS_BODY), 200)
    calls = _best(lambda: decode_json(calls_body, CALLS_BODY), 200)
    return {
        "spans": len(spans),
        "steps": len(tools),
        "calls": len(chats),
        "bytes": len(body),
        "steps_bytes": len(steps_body),
        "calls_bytes": len(calls_body),
        "protobuf_us_per_span": 1e6 * protobuf / len(spans),
        "protobuf_us_per_step": 1e6 * protobuf / len(tools),
        "check_us_per_span": 1e6 * check / len(spans),
        "check_us_per_step": 1e6 * check / len(tools),
        "native_steps_us_per_step": 1e6 * steps / len(tools),
        "native_calls_us_per_call": 1e6 * calls / len(chats),
        "native_us_per_step": 1e6 * (steps + calls) / len(tools),
    }


# -- where the OTLP store's time goes, in this process ----------------------------------


class Clock:
    """Wall time per stage, accumulated by wrappers put around the store's functions."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = {}
        self.calls: dict[str, int] = {}

    def add(self, stage: str, seconds: float) -> None:
        self.seconds[stage] = self.seconds.get(stage, 0.0) + seconds
        self.calls[stage] = self.calls.get(stage, 0) + 1

    def sync(self, stage: str, function):
        @functools.wraps(function)
        def timed(*a, **k):
            started = time.perf_counter()
            try:
                return function(*a, **k)
            finally:
                self.add(stage, time.perf_counter() - started)

        return timed

    def coroutine(self, stage, function):
        @functools.wraps(function)
        async def timed(*a, **k):
            started = time.perf_counter()
            try:
                return await function(*a, **k)
            finally:
                name = stage(*a, **k) if callable(stage) else stage
                self.add(name, time.perf_counter() - started)

        return timed


def _statement(self, query, *a, **k) -> str:
    text = str(query).strip()
    from keelwave.server.store import statements, traces

    named = {
        traces.INSERT_SPANS.strip(): "SQL: INSERT otlp_spans ... RETURNING",
        traces.STAGE_SHARES.strip(): "SQL: stage rollup shares (twice)",
        traces.DELETE_STEPS.strip(): "SQL: DELETE changed steps",
        traces.DELETE_CALLS.strip(): "SQL: DELETE changed calls",
        traces.UPSERT_RUNS.strip(): "SQL: upsert runs",
        traces.READ_DIGESTS.strip(): "SQL: read stored digests",
        traces.COUNT_SPANS.strip(): "SQL: count the traces' spans",
        traces.READ_STORED_OF_EXPORT.strip(): "SQL: which spans are stored",
        traces.SAVE_DIGESTS.strip(): "SQL: save digests (otlp_runs)",
        statements.MERGE_ROLLUPS.strip(): "SQL: merge rollups",
    }
    if text in named:
        return named[text]
    if "pg_advisory_xact_lock(%s, key)" in text:
        return "SQL: trace locks"
    if text.startswith("SELECT trace_id, span FROM otlp_spans"):
        return "SQL: read the traces' spans"
    if "advisory" in text:
        return "SQL: run locks"
    if "kw_stage" in text and "CREATE" in text.upper():
        return "SQL: BEGIN's staging tables"
    return "SQL: other: " + text.splitlines()[0][:40]


async def _profile_store(
    db_url: str,
    exports: list[bytes],
    clock: Clock | None,
    concurrency: int,
    profiler: cProfile.Profile | None = None,
) -> tuple[float, int]:
    """Decode, check and store every export as the route does; seconds and new spans."""
    from psycopg_pool import AsyncConnectionPool

    from keelwave.db import keys as key_store
    from keelwave.db import migrate
    from keelwave.server.app import _configure_connection
    from keelwave.server.ingest.otlp import decode, export
    from keelwave.server.ingest.otlp.projection import projection
    from keelwave.server.ingest.pricing import PriceTable
    from keelwave.server.store import traces

    migrate.upgrade(db_url)
    with psycopg.connect(db_url, autocommit=True) as conn:
        project_id = uuid.UUID(key_store.create_key(conn, "bench", "all").project_id)
    prices = PriceTable.load()
    pool = AsyncConnectionPool(
        db_url,
        min_size=concurrency,
        max_size=concurrency,
        kwargs={"autocommit": True, "prepare_threshold": 5},
        configure=_configure_connection,
        open=False,
    )
    await pool.open(wait=True)
    queue = list(reversed(exports))
    stored = 0

    async def worker() -> None:
        nonlocal stored
        while queue:
            body = queue.pop()
            if clock is not None:
                started = time.perf_counter()
                spans = decode.from_protobuf(body)
                clock.add("decode.from_protobuf", time.perf_counter() - started)
                started = time.perf_counter()
                accepted = export.check(spans)
                clock.add("export.check (stored.encode)", time.perf_counter() - started)
                started = time.perf_counter()
            else:
                accepted = export.check(decode.from_protobuf(body))
            stored += await traces.store_export(
                pool,
                project_id,
                accepted.spans,
                projection(project_id, prices, accepted.kept, accepted.roles),
            )
            if clock is not None:
                clock.add("traces.store_export (all of it)", time.perf_counter() - started)

    try:
        if profiler is not None:
            profiler.enable()
        started = time.perf_counter()
        await asyncio.gather(*(worker() for _ in range(concurrency)))
        seconds = time.perf_counter() - started
        if profiler is not None:
            profiler.disable()
        return seconds, stored
    finally:
        await pool.close()


@contextlib.contextmanager
def _instrumented(clock: Clock):
    """Wrap the store's stages with ``clock`` (undone on exit)."""
    from keelwave.server.ingest.otlp import mapping, projection, stored
    from keelwave.server.store import statements, traces

    saved = []

    def wrap(owner, name, wrapper):
        saved.append((owner, name, getattr(owner, name)))
        setattr(owner, name, wrapper(getattr(owner, name)))

    wrap(stored, "decode", lambda f: clock.sync("projection: stored.decode (msgpack)", f))
    wrap(mapping, "map_trace", lambda f: clock.sync("projection: mapping.map_trace", f))
    wrap(projection, "_row", lambda f: clock.sync("projection: projection._row", f))
    wrap(traces, "_compare", lambda f: clock.sync("compare digests (traces._compare)", f))
    wrap(traces, "_digest_columns", lambda f: clock.sync("digest columns", f))
    wrap(traces, "_copy", lambda f: clock.coroutine(lambda cur, table, *a: f"COPY {table}", f))
    wrap(psycopg.AsyncCursor, "execute", lambda f: clock.coroutine(_statement, f))
    wrap(psycopg.AsyncCursor, "fetchall", lambda f: clock.coroutine("SQL: fetchall", f))
    original = statements.transaction

    @contextlib.asynccontextmanager
    async def transaction(conn):
        started = None
        async with original(conn):
            yield
            started = time.perf_counter()
        if started is not None:
            clock.add("SQL: COMMIT", time.perf_counter() - started)

    saved.append((statements, "transaction", original))
    statements.transaction = transaction
    try:
        yield
    finally:
        for owner, name, value in reversed(saved):
            setattr(owner, name, value)


def profile_store(args: argparse.Namespace) -> dict:
    """The exports of the workload (round robin over the clients, as the server gets
    them), stored one at a time by traces.store_export on a fresh database: each
    stage timed; then again under cProfile for the top functions. The garbage
    collector is tuned as the server tunes it: with Python's default thresholds, full
    collections over the decoded spans held would take about half the time."""
    from keelwave.server.app import tune_garbage_collector
    from keelwave.server.ingest.otlp import decode

    tune_garbage_collector()
    exports_by_client = [
        export_bodies(1000 * n + 7, args.agents, args.runs, n)[1] for n in range(args.processes)
    ]
    exports = [body for group in _round_robin(exports_by_client) for body in group]
    spans = sum(len(decode.from_protobuf(body)) for body in exports)
    result: dict = {"exports": len(exports), "spans": spans}
    name = "kw_bench_otlp_profile"
    try:
        seconds, stored, steps, clock = _timed_store(name, exports)
        result.update(
            seconds=seconds, stored=stored, steps=steps, stages=clock.seconds, calls=clock.calls
        )
        db_url = scratch(name)
        profiler = cProfile.Profile()
        asyncio.run(_profile_store(db_url, exports, None, 1, profiler))
        out = io.StringIO()
        stats = pstats.Stats(profiler, stream=out)
        stats.sort_stats("tottime").print_stats(25)
        result["cprofile"] = out.getvalue()
        out = io.StringIO()
        pstats.Stats(profiler, stream=out).sort_stats("cumulative").print_stats("keelwave", 30)
        result["cprofile_keelwave"] = out.getvalue()
    finally:
        drop_database(name)
    return result


def _timed_store(name: str, exports: list[bytes]) -> tuple[float, int, int, Clock]:
    """Store ``exports`` one after the other on a fresh database ``name``, each stage
    timed: seconds, spans stored, steps stored, the stages' clock."""
    clock = Clock()
    db_url = scratch(name)
    with _instrumented(clock):
        seconds, stored = asyncio.run(_profile_store(db_url, exports, clock, 1))
    with psycopg.connect(db_url) as conn:
        steps = conn.execute("SELECT count(*) FROM agent_steps").fetchone()[0]
    return seconds, stored, steps, clock


def _round_robin(groups: list[list[bytes]]) -> list[list[bytes]]:
    longest = max(len(g) for g in groups)
    return [[g[i] for g in groups if i < len(g)] for i in range(longest)]


def insert_variants() -> dict:
    """The span write of traces.store_export alone, both ways it has: COPY straight into
    otlp_spans (what an export of new spans does), and COPY into a staging table then
    INSERT … ON CONFLICT DO NOTHING (the way an export goes again when another server
    stored some of its spans meanwhile): client and PostgreSQL CPU per span (one
    connection)."""
    from keelwave.db import migrate
    from keelwave.server.ingest.otlp import decode, export
    from keelwave.server.store import traces
    from keelwave.server.store.pgscript import copy_data

    accepted = [export.check(decode.from_protobuf(b)) for b in export_bodies(7, 25, 10)[1]]
    name = "kw_bench_otlp_insert"
    found = {}
    try:
        db_url = scratch(name)
        migrate.upgrade(db_url)
        with psycopg.connect(db_url, autocommit=True) as conn:
            backend = psutil.Process(conn.execute("SELECT pg_backend_pid()").fetchone()[0])
            # (the C dumper of bytes for bytea, as the server registers it)
            conn.adapters.register_dumper(
                bytes, psycopg.adapters.get_dumper(bytes, psycopg.adapt.PyFormat.BINARY)
            )
            conn.execute(traces.STAGE_SPANS_DDL)
            types = ("uuid", "bytea", "bytea", "bytea")
            for variant, table in (
                ("COPY (as shipped)", "otlp_spans"),
                ("COPY + INSERT (staged)", "kw_stage_spans"),
            ):
                conn.execute("TRUNCATE otlp_spans")
                conn.execute("CHECKPOINT")  # (not the previous variant's to write)
                project = uuid.uuid4()
                spans = 0
                pg, client, wall = backend.cpu_times(), time.process_time(), time.perf_counter()
                for one in accepted:
                    rows = ((project, trace, span_id, span) for trace, span_id, span in one.spans)
                    with conn.transaction(), conn.cursor() as cur:
                        with cur.copy(
                            f"COPY {table} (project_id, trace_id, span_id, span) "
                            "FROM STDIN (FORMAT BINARY)"
                        ) as copy:
                            for chunk in copy_data(conn, types, rows):
                                copy.write(chunk)
                        if table != "otlp_spans":
                            cur.execute(traces.INSERT_SPANS)
                            cur.fetchall()
                    spans += len(one.spans)
                after = backend.cpu_times()
                found[variant] = {
                    "client_us": 1e6 * (time.process_time() - client) / spans,
                    "pg_us": 1e6 * (after.user + after.system - pg.user - pg.system) / spans,
                    "wall_us": 1e6 * (time.perf_counter() - wall) / spans,
                }
    finally:
        drop_database(name)
    return found


def print_insert(found: dict) -> None:
    print("\nthe span write alone, per span (one client's exports, one connection):")
    for variant, cost in found.items():
        print(
            f"  {variant:<26} client {cost['client_us']:5.1f} µs, PostgreSQL "
            f"{cost['pg_us']:5.1f} µs, wall {cost['wall_us']:6.1f} µs"
        )


# -- one long run, export after export ------------------------------------------------


def long_run_cost(steps: int, per_export: int) -> dict:
    """One run of about ``steps`` tool calls (and their model calls), its spans sent as
    a batch exporter sends a run still going: in the order they end, ``per_export`` a
    time, its agent span last. Each export decoded, checked and stored by
    traces.store_export on a fresh database, one after the other: the store's time a
    step, and how the exports' time grows with the run (a trace is projected again
    by every export that brings more of it)."""
    from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import SpanProcessor, TracerProvider

    from keelwave.server.app import tune_garbage_collector

    tune_garbage_collector()
    [run] = plan(3, 1, 1)
    pattern, length, children = run.children, run.end_ns - run.start_ns, []
    while sum(child.kind == "tool" for child in children) < steps:
        shift = length * (len(children) // len(pattern))
        children += [
            dataclasses.replace(child, start_ns=child.start_ns + shift,
                                end_ns=child.end_ns + shift, final=False)
            for child in pattern
        ]  # fmt: skip
    run.children, run.end_ns = children, children[-1].end_ns + 1

    class Hold(SpanProcessor):
        def __init__(self) -> None:
            self.spans: list = []

        def on_end(self, span) -> None:
            self.spans.append(span)

    hold = Hold()
    provider = TracerProvider(resource=Resource.create({"service.name": "long-runner"}))
    provider.add_span_processor(hold)
    emit(provider.get_tracer("long-run"), [run])
    spans = hold.spans
    bodies = [
        encode_spans(spans[i : i + per_export]).SerializePartialToString()
        for i in range(0, len(spans), per_export)
    ]
    name = "kw_bench_otlp_long"
    try:
        seconds, _, stored, clock = _timed_store(name, bodies)
    finally:
        drop_database(name)
    return {
        "steps": stored, "spans": len(spans), "exports": len(bodies), "seconds": seconds,
        "us_per_step": 1e6 * seconds / max(1, stored), "stages": clock.seconds,
    }  # fmt: skip


def print_long(found: dict) -> None:
    print(
        f"\none run of {found['steps']:,} steps ({found['spans']:,} spans) in "
        f"{found['exports']} exports, stored one after the other: {found['seconds']:.2f} s, "
        f"{found['us_per_step']:,.0f} µs a step"
    )
    for stage, seconds in sorted(found["stages"].items(), key=lambda item: -item[1])[:8]:
        print(f"  {stage:<46}{seconds:7.2f} s")


# -- py-spy's samples of the real server, by stage ----------------------------------------

# (stage, file, functions): the deepest frame of a sample that matches one of keelwave's
# names its stage; a sample with none of keelwave's frames goes by its deepest library one.
STAGES = (
    ("decode (from_protobuf)", "otlp/decode.py", ("from_protobuf", "_pb_attributes", "_pb_value")),
    ("check + stored.encode", "otlp/export.py", ("check", "_problem")),
    ("check + stored.encode", "otlp/stored.py", ("encode",)),
    ("projection: stored.decode", "otlp/stored.py", ("decode",)),
    ("projection: mapping", "otlp/mapping.py", None),
    ("projection: mapping", "otlp/conventions.py", None),
    ("projection: rows", "otlp/projection.py", None),
    (
        "compare + digests",
        "store/traces.py",
        ("_compare", "digest", "row_digest", "_digest_columns", "<listcomp>", "<genexpr>"),
    ),
    ("COPY (traces._copy)", "store/traces.py", ("_copy",)),
    ("SQL statements (psycopg, client side)", "store/traces.py", None),
    ("SQL statements (psycopg, client side)", "store/statements.py", None),
    ("verdicts (store/verdicts.py, findings/)", "store/verdicts.py", None),
    ("verdicts (store/verdicts.py, findings/)", "server/findings/", None),
    ("route + auth", "otlp/routes.py", None),
    ("route + auth", "http/auth.py", None),
    ("native: routes, JSON decode, fingerprints", "ingest/routes.py", None),
    ("native: routes, JSON decode, fingerprints", "ingest/schemas.py", None),
    ("native: routes, JSON decode, fingerprints", "ingest/fingerprint.py", None),
    ("native: group-commit writer", "store/writer.py", None),
    ("native: group-commit writer", "store/lane.py", None),
    ("native: group-commit writer", "store/pgscript.py", None),
    ("native: finishes", "store/lifecycle.py", None),
)
LIBRARIES = (
    ("aiohttp (HTTP)", "aiohttp/"),
    ("psycopg outside the store (pool, keys)", "psycopg"),
    ("event loop", "asyncio/"),
    ("event loop", "selectors.py"),
)
# Within the SQL statements: psycopg turning the parameters into text (arrays of bytea).
DUMPING = "SQL parameters: psycopg dumping arrays"


def _frame(text: str) -> tuple[str, str]:
    """py-spy's "function (path:line)" as (function, path)."""
    name, _, where = text.rpartition(" (")
    return (name or text), where.rsplit(":", 1)[0]


def _stage(frames: list[tuple[str, str]]) -> str:
    stage = library = None
    dumping = False
    for function, where in frames:  # root first: the deepest match wins
        for name, file, functions in STAGES:
            if file in where and (functions is None or function in functions):
                stage, dumping = name, False
                break
        else:
            for name, file in LIBRARIES:
                if file in where:
                    library = name
                    break
            dumping = dumping or "psycopg/types/" in where
    if stage == "SQL statements (psycopg, client side)" and dumping:
        return DUMPING
    return stage or library or "other"


def spy_stages(path: Path) -> dict:
    """Samples by stage, and the top functions by own samples (the event loop's
    waits in epoll left out: py-spy samples the whole run, idle moments too)."""
    by_stage: dict[str, int] = {}
    own: dict[str, int] = {}
    total = idle = 0
    for line in path.read_text().splitlines():
        stack, _, count = line.rpartition(" ")
        if not count.isdigit():
            continue
        samples = int(count)
        frames = [_frame(f) for f in stack.split(";") if " (" in f]
        if not frames:
            continue
        function, where = frames[-1]
        if (
            (function.endswith("select") and where.endswith("selectors.py"))
            or (function == "_worker" and where.endswith("futures/thread.py"))
            or (function == "Condition.wait" and where.endswith("threading.py"))
        ):
            # The event loop waiting, or an idle thread of a pool waiting for work
            # (py-spy cannot always tell).
            idle += samples
            continue
        total += samples
        stage = _stage(frames)
        by_stage[stage] = by_stage.get(stage, 0) + samples
        leaf = f"{function} ({'/'.join(where.split('/')[-2:])})"
        own[leaf] = own.get(leaf, 0) + samples
    return {
        "samples": total,
        "idle": idle,
        "stages": by_stage,
        "own": sorted(own.items(), key=lambda item: -item[1])[:20],
    }


# -- the report ------------------------------------------------------------------------


def _spread(values: list[float], digits: int = 0) -> str:
    if not values:
        return "n/a"
    median = statistics.median(values)
    if len(values) == 1:
        return f"{median:,.{digits}f}"
    return f"{median:,.{digits}f} ({min(values):,.{digits}f}–{max(values):,.{digits}f})"


def report(rounds: list[dict], args: argparse.Namespace) -> dict:
    print(
        f"\npython {sys.version.split()[0]} ({sys.executable}), {os.cpu_count()} cores; "
        f"{args.processes} client processes × {args.agents} agents; keelwave: {args.runs} "
        f"runs per agent, Phoenix: {args.phoenix_runs}"
        f"{'; spans made in the clock (--live)' if args.live else ''}"
    )
    header = (
        f"{'round':<6}{'system':<9}{'steps':>8}{'steps/s':>10}{'s':>7}{'all s':>7}"
        f"{'server s':>10}{'pg s':>7}{'client s':>9}{'others s':>9}{'µs/step':>9}  stored"
    )
    print(header)
    for number, found in enumerate(rounds, start=1):
        for system in SYSTEMS:
            if system not in found:
                continue
            r = found[system]
            check = r["check"]
            sent = {k: r["expected"][k] + r["warm"][k] for k in r["expected"]}
            stored = (
                f"runs {check['runs']}/{sent['runs']} (finished {check['finished']}, "
                f"loops {check['loops']}/{sent['loops']}), calls {check['calls']}/"
                f"{sent['calls']}"
                if check
                else ""
            )
            if not r["complete"]:
                stored += f"  INCOMPLETE ({r['failed_spans']} spans failed to export)"
            print(
                f"{number:<6}{system:<9}{r['stored_steps']:>8}{r['steps_per_s']:>10,.0f}"
                f"{r['seconds']:>7.2f}{r['all_seconds']:>7.2f}{r['server_cpu_s']:>10.2f}"
                f"{r['pg_cpu_s']:>7.2f}{r['client_cpu_s']:>9.2f}{r['others_cpu_s']:>9.2f}"
                f"{r['cpu_us_per_step']:>9.0f}"
                f"  {stored}"
            )
    summary: dict = {}

    def ratio(a: str, b: str) -> list[float]:
        return [f[a]["steps_per_s"] / f[b]["steps_per_s"] for f in rounds if a in f and b in f]

    for system in SYSTEMS:
        rates = [f[system]["steps_per_s"] for f in rounds if system in f]
        cpu = [f[system]["cpu_us_per_step"] for f in rounds if system in f]
        if rates:
            summary[system] = {"steps_per_s": rates, "cpu_us_per_step": cpu}
            print(
                f"{system:<8} steps/s {_spread(rates)}; server+PostgreSQL CPU per step "
                f"{_spread(cpu)} µs"
            )
    if vs_phoenix := ratio("otlp", "phoenix"):
        summary["otlp_vs_phoenix"] = vs_phoenix
        print(f"keelwave OTLP / Phoenix = {_spread(vs_phoenix, 1)}× (target ≥ 100×)")
    if vs_native := ratio("otlp", "native"):
        summary["otlp_vs_native"] = vs_native
        print(f"keelwave OTLP / native = {_spread(vs_native, 2)} (target ≥ 0.5)")
    cpu_ratio = [
        f["otlp"]["cpu_us_per_step"] / f["native"]["cpu_us_per_step"]
        for f in rounds
        if "otlp" in f and "native" in f
    ]
    if cpu_ratio:
        summary["otlp_vs_native_cpu"] = cpu_ratio
        print(f"CPU per step, OTLP / native = {_spread(cpu_ratio, 2)}")
    for system in SYSTEMS:
        samples = [f[system]["rss_mib"] for f in rounds if f.get(system, {}).get("rss_mib")]
        if samples:
            summary.setdefault(system, {})["rss_mib"] = samples
            shown = "; ".join(f"{s[0]:.0f} .. {max(s):.0f} .. {s[-1]:.0f}" for s in samples)
            print(f"{system:<8} server memory, MiB (first .. largest .. last sample): {shown}")
    return summary


def print_decode(found: dict) -> None:
    print(
        f"\ndecode, one export of {found['spans']} spans ({found['bytes']:,} bytes: "
        f"{found['steps']} tool spans, {found['calls']} chat spans), best of 5:"
    )
    print(
        f"  decode.from_protobuf      {found['protobuf_us_per_span']:6.2f} µs/span  "
        f"{found['protobuf_us_per_step']:6.2f} µs/step"
    )
    print(
        f"  export.check              {found['check_us_per_span']:6.2f} µs/span  "
        f"{found['check_us_per_step']:6.2f} µs/step"
    )
    print(
        f"  native steps (STEPS_BODY) {found['native_steps_us_per_step']:6.2f} µs/step "
        f"({found['steps_bytes']:,} bytes)"
    )
    print(
        f"  native calls (CALLS_BODY) {found['native_calls_us_per_call']:6.2f} µs/call "
        f"({found['calls_bytes']:,} bytes)"
    )
    print(f"  native, steps + calls     {found['native_us_per_step']:6.2f} µs/step")


def print_profile(found: dict) -> None:
    steps = max(1, found["steps"])
    print(
        f"\ntraces.store_export driven directly, one export at a time: {found['exports']} "
        f"exports, {found['spans']} spans, {found['steps']} steps, "
        f"{found['seconds']:.2f} s = {found['steps'] / found['seconds']:,.0f} steps/s"
    )
    total = found["stages"].get("traces.store_export (all of it)", 0.0)
    total += found["stages"].get("decode.from_protobuf", 0.0)
    total += found["stages"].get("export.check (stored.encode)", 0.0)
    print(f"  {'stage':<44}{'s':>8}{'% ':>6}{'µs/step':>9}{'calls':>7}")
    for stage, seconds in sorted(found["stages"].items(), key=lambda item: -item[1]):
        print(
            f"  {stage:<44}{seconds:>8.3f}{100 * seconds / total:>5.0f}%"
            f"{1e6 * seconds / steps:>9.1f}{found['calls'][stage]:>7}"
        )
    print("  (stages nest: the SQL, COPY and projection lines are inside store_export)")
    print("\ncProfile of the same, top functions by own time:")
    print("\n".join(found["cprofile"].splitlines()[:45]))
    print("\ncProfile, keelwave's functions by cumulative time:")
    print("\n".join(found["cprofile_keelwave"].splitlines()[:50]))


def print_spy(system: str, run: dict, found: dict) -> None:
    total = max(1, found["samples"])
    print(
        f"\npy-spy, the server's processes during one {system} run ({found['samples']} "
        f"samples at 250/s, {found['idle']} more in epoll left out; that run: "
        f"{run['steps_per_s']:,.0f} steps/s, {run['server_cpu_s']:.2f} s of server CPU, "
        f"shared out by samples):"
    )
    for stage, samples in sorted(found["stages"].items(), key=lambda item: -item[1]):
        share = samples / total
        print(
            f"  {stage:<44}{100 * share:>5.1f}%  "
            f"{1e6 * share * run['server_cpu_s'] / max(1, run['stored_steps']):6.1f} µs/step"
        )
    print("  top functions by own samples:")
    for function, samples in found["own"]:
        print(f"    {100 * samples / total:5.1f}%  {function}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--phoenix", default="phoenix", help="the `phoenix` command to run")
    parser.add_argument("--processes", type=int, default=8, help="client processes")
    parser.add_argument("--agents", type=int, default=25, help="agents per client process")
    parser.add_argument("--runs", type=int, default=10, help="runs per agent (keelwave)")
    parser.add_argument("--phoenix-runs", type=int, default=1, help="runs per agent (Phoenix)")
    parser.add_argument("--repeat", type=int, default=3, help="rounds of the three systems")
    parser.add_argument("--live", action="store_true", help="make the spans in the clock")
    parser.add_argument(
        "--stall", type=float, default=30, help="give up this long after the last row arrived"
    )
    parser.add_argument(
        "--skip",
        nargs="*",
        default=[],
        choices=[*SYSTEMS, "decode", "profile", "insert", "long"],
    )
    parser.add_argument(
        "--long-steps", type=int, default=4000, help="steps of the long run (stage long)"
    )
    parser.add_argument(
        "--py-spy",
        action="store_true",
        help="also profile the server (py-spy) during one more OTLP and native run",
    )
    parser.add_argument("--quick", action="store_true", help="a small run of everything")
    parser.add_argument("--json", help="also write the results to this file")
    args = parser.parse_args()
    if args.quick:
        args.processes, args.agents, args.runs, args.phoenix_runs = 4, 5, 2, 1
        args.repeat = 1
        args.stall = 10
        args.long_steps = 300
    skip = set(args.skip)
    if "phoenix" not in skip and shutil.which(args.phoenix) is None:
        print(f"no {args.phoenix!r} command: Phoenix is skipped (see the module's docstring)")
        skip.add("phoenix")

    results: dict = {"args": vars(args)}
    if "decode" not in skip:
        results["decode"] = decode_cost()
        print_decode(results["decode"])
    if "profile" not in skip:
        results["profile"] = profile_store(args)
        print_profile(results["profile"])
    if "insert" not in skip:
        results["insert"] = insert_variants()
        print_insert(results["insert"])
    if "long" not in skip:
        results["long"] = long_run_cost(args.long_steps, 10)
        print_long(results["long"])
    rounds = []
    for number in range(args.repeat):
        found = {}
        for system in SYSTEMS:
            if system in skip:
                continue
            print(f"round {number + 1}: {system} ...", flush=True)
            found[system] = run_phoenix(args) if system == "phoenix" else run_keelwave(system, args)
        rounds.append(found)
    if rounds and any(rounds):
        results["rounds"] = rounds
        results["summary"] = report(rounds, args)
    if args.py_spy:
        with tempfile.TemporaryDirectory() as scratch_dir:
            for system in ("otlp", "native"):
                # py-spy's raw samples (collapsed stacks) are kept next to --json
                spy = (
                    Path(args.json).with_suffix(f".{system}.pyspy.txt")
                    if args.json
                    else Path(scratch_dir) / f"{system}.txt"
                )
                run = run_keelwave(system, args, spy)
                results[f"py_spy_{system}_run"] = run
                results[f"py_spy_{system}"] = found = spy_stages(spy)
                print_spy(system, run, found)
    if args.json:
        Path(args.json).write_text(json.dumps(results, default=str))


if __name__ == "__main__":
    main()
