"""Typed keys for what the application object carries (aiohttp's web.AppKey)."""

from __future__ import annotations

from aiohttp import web
from psycopg_pool import AsyncConnectionPool

from keelwave.server.http.auth import KeyStore
from keelwave.server.http.metrics import Metrics
from keelwave.server.ingest.pricing import PriceTable
from keelwave.server.store.writer import IngestWriter
from keelwave.settings import Settings

SETTINGS = web.AppKey("settings", Settings)
CONNINFO = web.AppKey("conninfo", str)
POOL = web.AppKey("pool", AsyncConnectionPool)
WRITER = web.AppKey("writer", IngestWriter)
KEYSTORE = web.AppKey("keystore", KeyStore)
PRICES = web.AppKey("prices", PriceTable)
METRICS = web.AppKey("metrics", Metrics)
