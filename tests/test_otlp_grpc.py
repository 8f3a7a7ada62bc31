"""OTLP/gRPC (TraceService/Export) against a real server and database, driven by the real
OpenTelemetry gRPC exporter: the same runs and steps as OTLP/HTTP, the same guarantees
answered in gRPC's words, on every worker of `keelwave serve`, and off unless asked for."""

from __future__ import annotations

import asyncio
import json
import logging
import os
import subprocess
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

import aiohttp
import grpc
import psycopg
import pytest
from aiohttp import web
from conftest import Api, Project, make_project, make_settings, query
from google.rpc import error_details_pb2, status_pb2
from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2_grpc import TraceServiceStub
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import (
    BatchSpanProcessor,
    SimpleSpanProcessor,
    SpanExportResult,
)
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from otlp_exports import document, spans_of, to_protobuf
from serve_process import ServeProcess, free_port, keelwave
from test_otlp_ingest import send, stored

from keelwave.server.app import create_app
from keelwave.server.http import appkeys
from keelwave.server.ingest.otlp import export
from keelwave.server.ingest.otlp import routes as otlp
from keelwave.server.ingest.otlp.grpc_service import EXPORT

LIMIT = 1 << 20  # the message limit of these tests' server (otlp_max_body_bytes)


@dataclass
class Served:
    """A keelwave server with OTLP/gRPC on, its app object, and HTTP to query it."""

    app: web.Application
    target: str  # host:port of the gRPC server
    api: Api


@pytest.fixture
async def served(db_url: str, aiohttp_server):
    port = free_port()
    app = create_app(make_settings(otlp_max_body_bytes=LIMIT, otlp_grpc_port=port), db_url)
    server = await aiohttp_server(app)
    async with aiohttp.ClientSession() as session:
        yield Served(app, f"127.0.0.1:{port}", Api(str(server.make_url("")).rstrip("/"), session))


@pytest.fixture
async def stub(served: Served):
    """The exporter's own stub, on an asyncio channel: the server shares this event loop."""
    async with grpc.aio.insecure_channel(served.target) as channel:
        yield TraceServiceStub(channel)


def bearer(key: str) -> tuple[tuple[str, str], ...]:
    return (("authorization", f"Bearer {key}"),)


def request_of(name: str) -> ExportTraceServiceRequest:
    return ExportTraceServiceRequest.FromString(to_protobuf(document(name)))


async def refused(call) -> grpc.aio.AioRpcError:
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await call
    return caught.value


def looping_agent(tracer) -> None:
    """An agent calling one tool with the same arguments three times: a loop at step 1."""
    agent = {"gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": "weather_agent"}
    tool = {
        "gen_ai.operation.name": "execute_tool",
        "gen_ai.tool.name": "get_weather",
        "gen_ai.tool.call.arguments": json.dumps({"city": "Paris"}),
    }
    with tracer.start_as_current_span("invoke_agent weather_agent", attributes=agent):
        for _ in range(3):
            with tracer.start_as_current_span("execute_tool get_weather", attributes=tool):
                time.sleep(0.001)  # distinct start times: steps are numbered by them


def recorded_spans(make=looping_agent) -> list[ReadableSpan]:
    memory = InMemorySpanExporter()
    provider = TracerProvider(resource=Resource.create({"service.name": "grpc-agent"}))
    provider.add_span_processor(SimpleSpanProcessor(memory))
    make(provider.get_tracer("keelwave-tests"))
    return list(memory.get_finished_spans())


async def runs_of(api: Api, project: Project) -> list[dict]:
    status, body, _ = await api.get(
        f"/v1/projects/{project.name}/agent/runs", headers=project.auth()
    )
    assert status == 200, body
    return body["data"]


# -- storing ----------------------------------------------------------------------


async def test_an_sdk_exporting_over_grpc_gets_its_looping_agent_as_one_run(
    served: Served, project: Project, monkeypatch
) -> None:
    """A TracerProvider with the real OTLP/gRPC exporter, configured only by the
    variables a user sets (insecure because the endpoint says http)."""
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", f"http://{served.target}")
    monkeypatch.setenv(
        "OTEL_EXPORTER_OTLP_HEADERS", f"Authorization=Bearer {project.keys['ingest']}"
    )
    provider = TracerProvider(resource=Resource.create({"service.name": "grpc-agent"}))
    provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))
    looping_agent(provider.get_tracer("keelwave-tests"))
    # The exporter is synchronous, and this event loop runs the server: flush elsewhere.
    assert await asyncio.to_thread(provider.force_flush, 20_000)
    await asyncio.to_thread(provider.shutdown)
    [run] = await runs_of(served.api, project)
    assert run["agent_name"] == "weather_agent" and run["status"] == "finished"
    assert run["step_count"] == 3 and run["loop_detected"] and run["loop_step_index"] == 1
    status, loops, _ = await served.api.get(
        f"/v1/projects/{project.name}/agent/runs/{run['id']}/loops", headers=project.auth()
    )
    assert status == 200
    assert [group["step_indices"] for group in loops["data"]] == [[1, 2, 3]]


@pytest.mark.parametrize(
    "name", ["pydanticai_loop", "openaiagents_handoff", "langgraph_nested", "smolagents_nested"]
)
async def test_a_replayed_trace_stores_what_it_stores_over_http(
    served: Served, stub: TraceServiceStub, db_url: str, name: str
) -> None:
    over_http, over_grpc = make_project(db_url), make_project(db_url)
    status, body = await send(served.api, over_http.keys["ingest"], document(name), True)
    assert status == 200, body
    answer = await stub.Export(request_of(name), metadata=bearer(over_grpc.keys["ingest"]))
    assert not answer.HasField("partial_success")
    expected, got = stored(db_url, over_http.id), stored(db_url, over_grpc.id)
    assert expected["runs"] and expected["steps"]
    assert got == expected


async def test_a_retried_export_is_answered_alike_and_stores_nothing_twice(
    served: Served, stub: TraceServiceStub, project: Project, db_url: str
) -> None:
    request = request_of("openaiagents_loop")
    for _ in range(3):
        answer = await stub.Export(request, metadata=bearer(project.keys["ingest"]))
        assert not answer.HasField("partial_success")  # a retry is not a rejection
    data = stored(db_url, project.id)
    assert len(data["runs"]) == 1 and len(data["steps"]) == 3
    [(spans,)] = query(
        db_url, "SELECT count(*) FROM otlp_spans WHERE project_id = %s", (uuid.UUID(project.id),)
    )
    assert spans == len(spans_of(document("openaiagents_loop")))
    assert data["run_rollups"][0][2] == 1  # one run in the rollups, not three


async def test_spans_that_cannot_be_stored_are_a_partial_success(
    served: Served, stub: TraceServiceStub, project: Project
) -> None:
    doc = document("pydanticai_loop")
    doc["resourceSpans"][0]["scopeSpans"][0]["spans"][0]["traceId"] = "0" * 32
    request = ExportTraceServiceRequest.FromString(to_protobuf(doc))
    answer = await stub.Export(request, metadata=bearer(project.keys["ingest"]))
    assert answer.partial_success.rejected_spans == 1
    assert "traceId" in answer.partial_success.error_message
    assert len(await runs_of(served.api, project)) == 1  # the rest were kept


async def test_gzip_from_the_exporter_is_undone(served: Served, project: Project) -> None:
    exporter = OTLPSpanExporter(
        endpoint=served.target,
        insecure=True,
        headers={"authorization": f"Bearer {project.keys['ingest']}"},
        compression=grpc.Compression.Gzip,
    )
    try:
        result = await asyncio.to_thread(exporter.export, recorded_spans())
    finally:
        exporter.shutdown()
    assert result == SpanExportResult.SUCCESS
    [run] = await runs_of(served.api, project)
    assert run["step_count"] == 3


# -- refusals ---------------------------------------------------------------------


async def test_no_key_an_unknown_key_or_a_read_key_is_refused(
    served: Served, stub: TraceServiceStub, project: Project
) -> None:
    request = request_of("strands_loop")
    error = await refused(stub.Export(request))
    assert error.code() == grpc.StatusCode.UNAUTHENTICATED and "Bearer" in error.details()
    error = await refused(stub.Export(request, metadata=(("authorization", "Basic abc"),)))
    assert error.code() == grpc.StatusCode.UNAUTHENTICATED
    error = await refused(stub.Export(request, metadata=bearer("kw_" + "x" * 43)))
    assert error.code() == grpc.StatusCode.UNAUTHENTICATED and "unknown" in error.details()
    error = await refused(stub.Export(request, metadata=bearer(project.keys["read"])))
    assert error.code() == grpc.StatusCode.PERMISSION_DENIED and "ingest" in error.details()
    assert await runs_of(served.api, project) == []
    # The real exporter gives up at once on these (no retry).
    exporter = OTLPSpanExporter(
        endpoint=served.target, insecure=True, headers=bearer(project.keys["read"])
    )
    try:
        started = time.monotonic()
        result = await asyncio.to_thread(exporter.export, recorded_spans())
    finally:
        exporter.shutdown()
    assert result == SpanExportResult.FAILURE and time.monotonic() - started < 5


async def test_a_message_that_is_not_an_export_is_invalid_argument(
    served: Served, project: Project, caplog
) -> None:
    """As OTLP/HTTP's 400, and only once the key is checked; nothing for the error log."""
    async with grpc.aio.insecure_channel(served.target) as channel:
        raw = channel.unary_unary(EXPORT)  # bytes in, bytes out
        error = await refused(raw(b"\xff\xff\xff"))
        assert error.code() == grpc.StatusCode.UNAUTHENTICATED
        with caplog.at_level(logging.WARNING):
            error = await refused(raw(b"\xff\xff\xff", metadata=bearer(project.keys["ingest"])))
    assert error.code() == grpc.StatusCode.INVALID_ARGUMENT and "protobuf" in error.details()
    assert not [record for record in caplog.records if record.levelno >= logging.ERROR]


def oversized(size: int) -> ExportTraceServiceRequest:
    """One span whose attribute is ``size`` bytes of one letter (it gzips to almost nothing)."""
    request = request_of("strands_loop")
    span = request.resource_spans[0].scope_spans[0].spans[0]
    attribute = span.attributes.add()
    attribute.key = "padding"
    attribute.value.string_value = "x" * size
    return request


async def test_a_message_over_the_limit_is_resource_exhausted_even_gzipped(
    served: Served, stub: TraceServiceStub, project: Project
) -> None:
    metadata = bearer(project.keys["ingest"])
    error = await refused(stub.Export(oversized(LIMIT), metadata=metadata))
    assert error.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    # 4 MiB that gzip to a few KiB: the limit counts what they unpack to.
    error = await refused(
        stub.Export(oversized(4 * LIMIT), metadata=metadata, compression=grpc.Compression.Gzip)
    )
    assert error.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    assert await runs_of(served.api, project) == []
    # Just under the limit, gzipped, is fine.
    answer = await stub.Export(
        oversized(LIMIT // 2), metadata=metadata, compression=grpc.Compression.Gzip
    )
    assert not answer.HasField("partial_success")
    assert len(await runs_of(served.api, project)) == 1


def retry_delays(error: grpc.aio.AioRpcError) -> list[float]:
    """The RetryInfo delays a failure carries, in both places exporters read them."""
    trailers = dict(error.trailing_metadata())
    own = error_details_pb2.RetryInfo.FromString(trailers["google.rpc.retryinfo-bin"])
    status = status_pb2.Status.FromString(trailers["grpc-status-details-bin"])
    assert status.code == error.code().value[0] and status.message == error.details()
    [detail] = status.details
    in_status = error_details_pb2.RetryInfo()
    assert detail.Unpack(in_status)
    return [info.retry_delay.seconds + info.retry_delay.nanos / 1e9 for info in (own, in_status)]


async def test_a_database_that_cannot_store_says_when_to_retry(
    served: Served, stub: TraceServiceStub, project: Project, monkeypatch
) -> None:
    ingest = served.app[otlp.INGEST_KEY]
    metadata = bearer(project.keys["ingest"])
    outcomes = [
        (export.Unavailable("the database is unavailable; retry shortly", 3), "UNAVAILABLE"),
        (export.Overloaded("too many exports are waiting", 1), "RESOURCE_EXHAUSTED"),
    ]
    for raised, code in outcomes:

        async def failing(*args, raised=raised) -> None:
            raise raised

        monkeypatch.setattr(ingest, "store", failing)
        error = await refused(stub.Export(request_of("strands_loop"), metadata=metadata))
        assert error.code() == getattr(grpc.StatusCode, code)
        assert error.details() == str(raised)
        assert retry_delays(error) == [raised.retry_after] * 2

    async def keys_unreachable(*args) -> None:
        raise psycopg.OperationalError("connection refused")

    monkeypatch.setattr(served.app[appkeys.KEYSTORE], "authenticate", keys_unreachable)
    error = await refused(stub.Export(request_of("strands_loop"), metadata=metadata))
    assert error.code() == grpc.StatusCode.UNAVAILABLE
    assert retry_delays(error) == [1, 1]  # retry_after_seconds
    monkeypatch.undo()

    async def rejecting(*args) -> None:
        raise export.Rejected("the database rejected this export: invalid byte sequence")

    monkeypatch.setattr(ingest, "store", rejecting)
    error = await refused(stub.Export(request_of("strands_loop"), metadata=metadata))
    assert error.code() == grpc.StatusCode.INVALID_ARGUMENT and "rejected" in error.details()
    assert "google.rpc.retryinfo-bin" not in dict(error.trailing_metadata())


async def test_the_exporter_retries_after_the_delay_it_was_given(
    served: Served, project: Project, db_url: str, monkeypatch
) -> None:
    """Unavailable once, with a 2 s RetryInfo (the exporter's own first backoff is
    about 1 s): the exporter waits that long, retries, and the export is stored."""
    ingest = served.app[otlp.INGEST_KEY]
    real_store = ingest.store
    calls = []

    async def unavailable_once(*args) -> None:
        calls.append(time.monotonic())
        if len(calls) == 1:
            raise export.Unavailable("the database is unavailable; retry shortly", 2)
        await real_store(*args)

    monkeypatch.setattr(ingest, "store", unavailable_once)
    exporter = OTLPSpanExporter(
        endpoint=served.target, insecure=True, headers=bearer(project.keys["ingest"])
    )
    try:
        result = await asyncio.to_thread(exporter.export, recorded_spans())
    finally:
        exporter.shutdown()
    assert result == SpanExportResult.SUCCESS
    assert len(calls) == 2 and calls[1] - calls[0] >= 1.9
    [run] = await runs_of(served.api, project)
    assert run["step_count"] == 3


async def test_a_bug_is_an_internal_error_logged_and_the_server_goes_on(
    served: Served, stub: TraceServiceStub, project: Project, monkeypatch, caplog
) -> None:
    ingest = served.app[otlp.INGEST_KEY]
    real_store = ingest.store

    async def buggy(*args) -> None:
        raise RuntimeError("a bug in keelwave")

    monkeypatch.setattr(ingest, "store", buggy)
    metadata = bearer(project.keys["ingest"])
    with caplog.at_level(logging.ERROR, logger="keelwave.otlp"):
        error = await refused(stub.Export(request_of("strands_loop"), metadata=metadata))
    assert error.code() == grpc.StatusCode.INTERNAL
    assert "bug" not in error.details()  # no internals in the answer…
    [record] = [r for r in caplog.records if r.name == "keelwave.otlp"]
    assert record.exc_info and "a bug in keelwave" in str(record.exc_info[1])  # …but logged
    monkeypatch.setattr(ingest, "store", real_store)
    await stub.Export(request_of("strands_loop"), metadata=metadata)
    assert len(await runs_of(served.api, project)) == 1


async def test_stopping_lets_an_export_in_flight_commit_and_be_answered(
    db_url: str, project: Project
) -> None:
    port = free_port()
    app = create_app(make_settings(otlp_max_body_bytes=LIMIT, otlp_grpc_port=port), db_url)
    runner = web.AppRunner(app)
    await runner.setup()
    ingest = app[otlp.INGEST_KEY]
    real_store = ingest.store
    storing = asyncio.Event()

    async def slow(*args) -> None:
        storing.set()
        await asyncio.sleep(1)
        await real_store(*args)

    ingest.store = slow
    target = f"127.0.0.1:{port}"
    async with grpc.aio.insecure_channel(target) as channel:
        call = asyncio.ensure_future(
            TraceServiceStub(channel).Export(
                request_of("strands_loop"), metadata=bearer(project.keys["ingest"])
            )
        )
        await storing.wait()
        await runner.cleanup()  # the gRPC server stops first, then the writer and the pool
        answer = await call
    assert not answer.HasField("partial_success")
    [(runs,)] = query(
        db_url, "SELECT count(*) FROM agent_runs WHERE project_id = %s", (uuid.UUID(project.id),)
    )
    assert runs == 1
    async with grpc.aio.insecure_channel(target) as channel:  # and nothing listens any more
        error = await refused(TraceServiceStub(channel).Export(request_of("strands_loop")))
    assert error.code() == grpc.StatusCode.UNAVAILABLE


# -- keelwave serve ---------------------------------------------------------------


def tcp_sockets(pid: int, port: int, state: str) -> int:
    """How many sockets of process ``pid`` on local ``port`` are in ``state`` (/proc/net/tcp:
    0A listening, 01 established)."""
    inodes = set()
    for fd in Path(f"/proc/{pid}/fd").iterdir():
        try:
            target = os.readlink(fd)
        except OSError:
            continue
        if target.startswith("socket:["):
            inodes.add(target[8:-1])
    count = 0
    for table in ("tcp", "tcp6"):
        for line in Path(f"/proc/{pid}/net/{table}").read_text().splitlines()[1:]:
            fields = line.split()
            local_port = int(fields[1].rsplit(":", 1)[1], 16)
            if local_port == port and fields[3] == state and fields[9] in inodes:
                count += 1
    return count


def listening_ports(pid: int) -> set[int]:
    ports = set()
    for table in ("tcp", "tcp6"):
        for line in Path(f"/proc/{pid}/net/{table}").read_text().splitlines()[1:]:
            fields = line.split()
            if fields[3] == "0A":
                ports.add(int(fields[1].rsplit(":", 1)[1], 16))
    return {port for port in ports if tcp_sockets(pid, port, "0A")}


def server_processes(served: ServeProcess) -> list[int]:
    """The processes of a `keelwave serve` that serve HTTP (not multiprocessing's helpers)."""
    http_port = int(served.url.rsplit(":", 1)[1])
    children = subprocess.run(
        ["pgrep", "-P", str(served.process.pid)], capture_output=True, text=True
    ).stdout.split()
    pids = [served.process.pid, *map(int, children)]
    return [pid for pid in pids if tcp_sockets(pid, http_port, "0A")]


def test_grpc_is_off_by_default(server: ServeProcess, monkeypatch) -> None:
    """`keelwave serve` as configured by default: every process listens on its HTTP
    port and nothing else."""
    monkeypatch.delenv("KEELWAVE_OTLP_GRPC_PORT", raising=False)
    assert make_settings().otlp_grpc_port is None
    http_port = int(server.url.rsplit(":", 1)[1])
    processes = server_processes(server)
    assert processes
    assert all(listening_ports(pid) == {http_port} for pid in processes)
    assert "OTLP/gRPC" not in server.stderr()


def test_keelwave_serve_takes_grpc_on_every_worker(db_url: str, tmp_path: Path) -> None:
    port = free_port()
    served = ServeProcess(
        "--database-url", db_url, "--workers", "2", "--otlp-grpc-port", str(port),
        log=tmp_path / "serve.log",
    )  # fmt: skip
    exporters: list[OTLPSpanExporter] = []
    try:
        http_port = int(served.url.rsplit(":", 1)[1])
        processes = server_processes(served)
        assert len(processes) == 2
        for pid in processes:  # each process says so, in the server's log
            said = f"OTLP/gRPC listening on 127.0.0.1:{port} (process {pid})"
            assert served.stderr().count(said) == 1, served.stderr()
        # Both processes listen on the one port (SO_REUSEPORT),…
        assert all(listening_ports(pid) == {http_port, port} for pid in processes)
        project = make_project(db_url)
        # …and the kernel spreads connections over them: those of 20 exporters, each on a
        # connection of its own (grpc would share one between the channels of a process).
        for _ in range(20):
            exporter = OTLPSpanExporter(
                endpoint=f"127.0.0.1:{port}",
                insecure=True,
                headers=bearer(project.keys["ingest"]),
                channel_options=(("grpc.use_local_subchannel_pool", 1),),
            )
            exporters.append(exporter)
            assert exporter.export(recorded_spans()) == SpanExportResult.SUCCESS
        held = {pid: tcp_sockets(pid, port, "01") for pid in processes}
        assert all(held.values()), held
        [(runs,)] = query(
            db_url,
            "SELECT count(*) FROM agent_runs WHERE project_id = %s AND step_count = 3",
            (uuid.UUID(project.id),),
        )
        assert runs == 20
    finally:
        for exporter in exporters:
            exporter.shutdown()
        code, _ = served.stop()
        served.kill()
    assert code == 0


def test_serve_without_grpcio_says_what_to_install(db_url: str, tmp_path: Path) -> None:
    """grpcio is an optional extra: asked for gRPC without it, serve says the fix in one
    line, before it starts anything."""
    shadow = tmp_path / "no-grpc"
    (shadow / "grpc").mkdir(parents=True)
    (shadow / "grpc" / "__init__.py").write_text("raise ImportError('no grpcio here')\n")
    path = os.pathsep.join(filter(None, [str(shadow), os.environ.get("PYTHONPATH")]))
    result = keelwave(
        "serve", "--database-url", db_url, "--otlp-grpc-port", str(free_port()),
        env={"PYTHONPATH": path}, timeout=60,
    )  # fmt: skip
    assert result.returncode == 1, result.stdout + result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "pip install 'keelwave[grpc]'" in lines[0], result.stderr
    assert "Traceback" not in result.stderr and "listening" not in result.stdout


def test_serve_on_a_busy_grpc_port_refuses_to_start(db_url: str) -> None:
    import socket

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        result = keelwave(
            "serve", "--database-url", db_url, "--otlp-grpc-port", str(port), timeout=60
        )
    assert result.returncode == 1, result.stdout + result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and str(port) in lines[0] and "in use" in lines[0], result.stderr


def test_a_grpc_stop_that_never_finishes_does_not_hang_the_shutdown(monkeypatch) -> None:
    """grpc.aio's server.stop has been seen never to finish (a test's teardown hung on
    it). The shutdown waits for it a bounded time and goes on; a stop that does not
    even end when cancelled (asyncio.wait_for would wait for that) cannot hold it."""
    import threading

    from keelwave.server.ingest.otlp import grpc_service

    class Stubborn:
        def add_insecure_port(self, address: str) -> int:
            return 4317

        async def start(self) -> None:
            pass

        async def stop(self, grace: float | None) -> None:
            while True:
                try:
                    await asyncio.sleep(3600)
                except asyncio.CancelledError:
                    continue

    monkeypatch.setattr(grpc_service.grpc.aio, "server", lambda options: Stubborn())
    monkeypatch.setattr(grpc_service, "_register", lambda service, server: None)
    monkeypatch.setattr(grpc_service, "GRACE_SECONDS", 0.1)

    async def serve_and_stop() -> None:
        async with grpc_service.serving(None, "127.0.0.1", 4317, 1024):  # type: ignore[arg-type]
            pass

    loop = asyncio.new_event_loop()  # (never closed: the stubborn stop stays pending)
    thread = threading.Thread(target=loop.run_until_complete, args=(serve_and_stop(),))
    thread.daemon = True
    thread.start()
    thread.join(60)
    assert not thread.is_alive(), "the shutdown waited for a stop that never finishes"
