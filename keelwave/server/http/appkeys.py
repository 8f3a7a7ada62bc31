"""Typed keys for what the application object carries (aiohttp's web.AppKey).

The keys every layer reads are here; a package's own resources keep their key
in that package (the ingest price table in ``ingest.pricing``), so that reading
this module makes query code depend on nothing of ingest.
"""

from __future__ import annotations

from aiohttp import web
from psycopg_pool import AsyncConnectionPool

from keelwave.server.http.auth import KeyStore
from keelwave.server.http.metrics import Metrics
from keelwave.server.store.refusals import Reporter
from keelwave.server.store.writer import IngestWriter
from keelwave.settings import Settings

SETTINGS = web.AppKey("settings", Settings)
CONNINFO = web.AppKey("conninfo", str)
POOL = web.AppKey("pool", AsyncConnectionPool)
WRITER = web.AppKey("writer", IngestWriter)
KEYSTORE = web.AppKey("keystore", KeyStore)
METRICS = web.AppKey("metrics", Metrics)
REFUSALS = web.AppKey("refusals", Reporter)
# Whether tool rollups may have rows pending (store/pending_tools.py): not on Citus.
PENDING_TOOL_ROLLUPS = web.AppKey("pending_tool_rollups", bool)
# Whether one run's queries are prepared with generic plans (query/plans.py).
GENERIC_RUN_PLANS = web.AppKey("generic_run_plans", bool)
