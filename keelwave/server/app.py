"""The aiohttp application: ``create_app`` builds what ``keelwave serve`` runs and
what the tests run, from the same settings and a database conninfo.

Resources (connection pool, ingest writer, key listener, the OTLP/gRPC server
when on) are opened and closed in ``cleanup_ctx``, in order, so a shutdown
commits buffered writes before the pool goes away.
"""

from __future__ import annotations

import gc
import logging
from collections.abc import AsyncIterator
from datetime import timedelta

import psycopg
from aiohttp import web
from psycopg_pool import AsyncConnectionPool

from keelwave.server.alerts import routes as alerts
from keelwave.server.alerts.delivery import DELIVERER, Deliverer
from keelwave.server.alerts.destinations import dashboard_url
from keelwave.server.alerts.evaluator import Evaluator
from keelwave.server.http import appkeys, dashboard, health, metrics, openapi
from keelwave.server.http.auth import KeyStore
from keelwave.server.http.errors import error_middleware
from keelwave.server.http.metrics import Metrics
from keelwave.server.ingest import routes as ingest
from keelwave.server.ingest.otlp import routes as otlp
from keelwave.server.ingest.otlp.export import TraceIngest
from keelwave.server.ingest.pricing import PriceTable
from keelwave.server.lifecycle import routes as lifecycle
from keelwave.server.lifecycle import transfer
from keelwave.server.query import aggregates, finding_counts, loops, runs, tools
from keelwave.server.store import citus, connection_check, pooling, refusals, timescale
from keelwave.server.store.citus.lane import CitusLane
from keelwave.server.store.citus.partitions import PartitionKeeper
from keelwave.server.store.lane import Lane
from keelwave.server.store.pending_tools import Folder
from keelwave.server.store.reaper import Reaper
from keelwave.server.store.retention import Enforcer
from keelwave.server.store.uncounted import UncountedWatch
from keelwave.server.store.verdicts import VerdictKeeper
from keelwave.server.store.writer import IngestWriter
from keelwave.settings import Settings

log = logging.getLogger("keelwave.server")

RECONNECT_SECONDS = 5.0

# Every API route, by resource. Order matters where paths overlap: aggregates
# before runs, so /runs/timeseries and /runs/terminations are not /runs/{run_id}.
ROUTE_TABLES = (
    health.routes,
    ingest.routes,
    otlp.routes,
    alerts.routes,
    loops.routes,
    openapi.routes,
    aggregates.routes,
    finding_counts.routes,
    runs.routes,
    tools.routes,
    lifecycle.routes,
    transfer.routes,
)


def api_document() -> dict:
    """The OpenAPI document of every route (served at /v1/openapi.json, committed as
    docs/openapi.json)."""
    return openapi.document(ROUTE_TABLES)


def tune_garbage_collector() -> None:
    """Collect young objects less often, and leave what startup made out of every pass.

    Ingest allocates a few objects per field of every step (structs, UUIDs,
    datetimes, row tuples) that live until their batch commits; with the
    default threshold (700 allocations) the collector ran several times per
    request and walked the whole heap of waiting rows each time. Nothing
    here builds reference cycles on the hot path, so fewer passes lose nothing.
    """
    gc.freeze()
    gc.set_threshold(50_000, 20, 20)


def create_app(
    settings: Settings, conninfo: str, prices: PriceTable | None = None
) -> web.Application:
    """Build the application. Raises PriceTableError for an unusable prices_file."""
    recorder = Metrics()
    # What the database refuses for good, told by the writer and the error
    # middleware alike, and asked by /readyz.
    reporter = refusals.Reporter()
    app = web.Application(
        client_max_size=settings.max_body_bytes,
        # Outermost first: the metrics see the status the error middleware settled on.
        middlewares=[
            metrics.middleware(recorder),
            error_middleware(
                settings.retry_after_seconds,
                lambda: recorder.database_error("unavailable"),
                reporter,
            ),
        ],
    )
    app[appkeys.METRICS] = recorder
    app[appkeys.REFUSALS] = reporter
    app[appkeys.GENERIC_RUN_PLANS] = False  # until the database says it is TimescaleDB
    app[appkeys.SETTINGS] = settings
    app[appkeys.CONNINFO] = conninfo
    app.cleanup_ctx.append(_database)
    if settings.otlp_grpc_port is not None:
        app.cleanup_ctx.append(_otlp_grpc)  # after _database: it stores with its pool
    if settings.metrics_port:
        app.cleanup_ctx.append(lambda app: metrics.serve(recorder, settings.metrics_port))
    app[ingest.PRICES] = prices or PriceTable.load(settings.prices_file)
    for table in ROUTE_TABLES:
        app.add_routes(table)
    app[openapi.DOCUMENT] = api_document()
    dashboard.setup(app)  # last: it answers every path the API does not
    return app


async def _database(app: web.Application) -> AsyncIterator[None]:
    settings = app[appkeys.SETTINGS]
    conninfo = app[appkeys.CONNINFO]
    # libpq's connect_timeout is whole seconds, at least 2.
    connect_timeout = max(2, round(settings.database_timeout_seconds))
    pooled = await pooling.transaction_pooling(settings.database_pooling, conninfo, connect_timeout)
    pool = AsyncConnectionPool(
        conninfo,
        min_size=1,
        max_size=settings.pool_max_size,
        kwargs={
            "autocommit": True,
            "connect_timeout": connect_timeout,
            # psycopg prepares a query run five times on its connection; behind a
            # transaction pooler the next run may land on a session without it.
            "prepare_threshold": None if pooled else 5,
        },
        check=connection_check.check_unless_just_used,  # drop those that died in an outage
        timeout=settings.database_timeout_seconds,
        # psycopg_pool doubles its retry delay without bound while the database is
        # down; giving up early and retrying on demand keeps recovery within seconds.
        reconnect_timeout=RECONNECT_SECONDS,
        open=False,
        name="keelwave",
        configure=_configure_pooled if pooled else _configure_connection,
    )
    # wait=False: serve (and answer /readyz with 503) even if the database is down.
    await pool.open(wait=False)
    if not pooled:
        app[appkeys.GENERIC_RUN_PLANS] = await _on_timescaledb(conninfo, connect_timeout)
    verdicts = VerdictKeeper(pool)
    distributed = await _on_citus(conninfo, connect_timeout)
    writer = IngestWriter(
        conninfo,
        settings.flush_max_rows,
        settings.buffer_max_rows,
        connect_timeout,
        lanes=settings.writer_lanes or 2,
        metrics=app[appkeys.METRICS],
        transaction_pooling=pooled,
        refusal_reporter=app[appkeys.REFUSALS],
        steps_committed=verdicts.wake,
        lane_class=CitusLane if distributed else Lane,
    )
    writer.start()
    if settings.server_verdicts:
        verdicts.start()
    # (one a server, as the keeper: the first worker)
    watch = UncountedWatch(pool) if settings.server_verdicts else None
    if watch is not None:
        watch.start()
    app[appkeys.METRICS].buffer_rows = lambda: writer.waiting_rows
    keystore = KeyStore(pool, conninfo, settings.key_cache_seconds)
    keystore.start()
    reaper = Reaper(pool, settings.timeout_after_seconds, settings.stall_after_seconds)
    reaper.start()
    # The writer and OTLP ingest leave finished runs' tool calls pending, except on
    # Citus (its lane merges them at once): every process folds them in.
    app[appkeys.PENDING_TOOL_ROLLUPS] = not distributed
    folder = Folder(pool) if not distributed else None
    if folder is not None:
        folder.start()
    maintenance = timescale.Maintenance(pool)
    maintenance.start()
    # Every process has one; the lease in the database lets one work at a time.
    retention = Enforcer(pool, settings.retention_every_seconds)
    retention.start()
    # On Citus: the days of steps and model calls ahead, and closed ones compressed.
    compress_after = timedelta(days=settings.citus_compress_after_days) or None
    partition_keeper = PartitionKeeper(pool, compress_after=compress_after) if distributed else None
    if partition_keeper is not None:
        partition_keeper.start()
    app[appkeys.POOL] = pool
    app[appkeys.WRITER] = writer
    app[appkeys.KEYSTORE] = keystore
    app[otlp.INGEST_KEY] = TraceIngest(
        pool,
        app[ingest.PRICES],
        app[appkeys.REFUSALS],
        settings.retry_after_seconds,
        stored=verdicts.wake,
        pending_tools=app[appkeys.PENDING_TOOL_ROLLUPS],
    )
    # Every process sends what is in the alert outbox (leases keep sends apart).
    deliverer = Deliverer(pool, allow_private=settings.alerts_allow_private_destinations)
    deliverer.start()
    app[DELIVERER] = deliverer
    evaluator = Evaluator(
        pool, settings.stall_after_seconds, dashboard_url(settings), fired=deliverer.wake
    )
    evaluator.start()
    try:
        yield
    finally:
        await evaluator.stop()
        await writer.close()
        await verdicts.stop()
        if watch is not None:
            await watch.stop()
        await reaper.stop()
        if folder is not None:
            await folder.stop()
        await maintenance.stop()
        await retention.stop()
        if partition_keeper is not None:
            await partition_keeper.stop()
        await keystore.stop()
        await deliverer.stop()  # its last sends are recorded while the pool is open
        await pool.close()


async def _otlp_grpc(app: web.Application) -> AsyncIterator[None]:
    """OTLP/gRPC on its own port, storing as POST /v1/traces does. Stopped before the
    pool closes (cleanup runs in reverse), so exports in flight still commit."""
    # Imported only when on: grpcio is an optional extra (keelwave[grpc]).
    from keelwave.server.ingest.otlp import grpc_service

    settings = app[appkeys.SETTINGS]
    service = grpc_service.TraceService(
        app[appkeys.KEYSTORE], app[otlp.INGEST_KEY], settings.retry_after_seconds
    )
    async with grpc_service.serving(
        service, settings.host, settings.otlp_grpc_port, settings.otlp_max_body_bytes
    ):
        yield


async def _on_timescaledb(conninfo: str, connect_timeout: int) -> bool:
    try:
        async with await psycopg.AsyncConnection.connect(
            conninfo, autocommit=True, connect_timeout=connect_timeout
        ) as conn:
            return await timescale.has_timescaledb(conn)
    except psycopg.Error:  # the database is down: plan as on plain PostgreSQL
        return False


async def _on_citus(conninfo: str, connect_timeout: int) -> bool:
    """Whether the database holds the distributed schema (store/citus/), checked once
    at start: the ingest writer's lanes are chosen by it."""
    try:
        async with await psycopg.AsyncConnection.connect(
            conninfo, autocommit=True, connect_timeout=connect_timeout
        ) as conn:
            return await citus.on_citus(conn)
    except psycopg.Error:  # the database is down: the plain writer (a restart finds out)
        log.warning("could not tell whether the database is Citus; writing as to PostgreSQL")
        return False


async def _configure_connection(conn: psycopg.AsyncConnection) -> None:
    """Every pooled connection answers times in UTC, and plans as queries need."""
    await conn.execute("SET TIME ZONE 'UTC'")
    # Requests are short queries; JIT compilation would cost more than it saves.
    await conn.execute("SET jit = off")
    # Always plan with the real parameters: a time window of a week and an empty
    # one need different plans, and a generic plan would scan for both.
    await conn.execute("SET plan_cache_mode = force_custom_plan")


async def _configure_pooled(conn: psycopg.AsyncConnection) -> None:
    """Behind a transaction pooler only what the pooler keeps per client is set: the
    time zone (PgBouncer restores it on every session it hands this client); other
    SETs would stay on a server session that other clients then get."""
    await conn.execute("SET TIME ZONE 'UTC'")
