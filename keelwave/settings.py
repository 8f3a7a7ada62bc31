"""Server settings: one place for every knob, read from ``KEELWAVE_*`` variables.

The CLI turns its flags into keyword arguments of :class:`Settings`, so a flag
beats the environment, which beats the default. Tests build ``Settings`` the
same way the CLI does.
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

import platformdirs
from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict

from keelwave import protocol


def default_data_dir() -> Path:
    """The platform's per-user data directory, e.g. ``~/.local/share/keelwave``."""
    return Path(platformdirs.user_data_dir("keelwave", appauthor=False))


class Settings(BaseSettings):
    """Configuration of a keelwave server and of the commands that talk to its database."""

    model_config = SettingsConfigDict(env_prefix="KEELWAVE_", extra="ignore")

    database_url: str | None = Field(
        default=None,
        description="PostgreSQL or TimescaleDB URL (postgresql://user:pass@host:5432/db). "
        "Unset: keelwave runs an embedded PostgreSQL in data_dir.",
    )
    data_dir: Path = Field(
        default_factory=default_data_dir,
        description="Where the embedded database keeps its files.",
    )
    host: str = Field(default="127.0.0.1", description="Interface the HTTP server binds to.")
    port: int = Field(default=8080, ge=0, le=65535, description="HTTP port (0 picks a free one).")

    workers: int | None = Field(
        default=None,
        ge=1,
        le=64,
        description="Server processes sharing the port; unset: one per core.",
    )
    event_loop: Literal["auto", "asyncio"] = Field(
        default="auto",
        description="The server processes' event loop. 'auto': uvloop where it is installed "
        "(the server extra installs it, except on Windows), else asyncio's own. 'asyncio': "
        "the standard loop always.",
    )
    max_body_bytes: int = Field(
        default=protocol.DEFAULT_MAX_BODY_BYTES,
        ge=1024,
        description="Largest request body accepted; larger bodies get 413.",
    )
    otlp_max_body_bytes: int = Field(
        default=64 * 1024 * 1024,
        ge=1024,
        description="Largest OTLP trace export accepted, after decompression (HTTP and gRPC); "
        "larger ones get 413. Above max_body_bytes: an instrumentation that records every "
        "model call's whole conversation sends batches of 512 spans of tens of MB, and an "
        "exporter drops a batch it is refused.",
    )
    flush_max_rows: int = Field(
        default=5000,
        ge=1,
        description="Most rows written in one group-commit transaction.",
    )
    writer_lanes: int | None = Field(
        default=None,
        ge=1,
        le=16,
        description="Connections per server process committing ingest batches in parallel. "
        "Default: 2 for a single process, 1 each when several share the machine (more "
        "writers than cores only add contention).",
    )
    buffer_max_rows: int = Field(
        default=200_000,
        ge=1,
        description="Rows waiting for commit before ingest answers 503 (backpressure).",
    )
    database_pooling: Literal["auto", "session", "transaction"] = Field(
        default="auto",
        description="How connections reach PostgreSQL. 'session': directly, or through a "
        "pooler in session mode (prepared statements and session settings are kept). "
        "'transaction': through PgBouncer or another pooler in transaction mode (nothing is "
        "kept in a session between transactions). 'auto' finds out at start.",
    )
    pool_max_size: int = Field(
        default=8, ge=1, description="Most database connections for queries and finishes."
    )
    key_cache_seconds: float = Field(
        default=60.0,
        ge=0,
        description="How long a checked API key is trusted without asking the database. "
        "Revocations reach running servers at once through LISTEN/NOTIFY; this is the fallback.",
    )
    database_timeout_seconds: float = Field(
        default=5.0,
        gt=0,
        description="How long a request waits for a database connection before answering 503.",
    )
    stall_after_seconds: float = Field(
        default=600,
        gt=0,
        description="A run with no finish and no activity for this long is shown as stalled.",
    )
    timeout_after_seconds: float = Field(
        default=3600,
        gt=0,
        description="A run silent for this long is finished with termination_reason 'timeout'.",
    )
    exact_percentiles_up_to: int = Field(
        default=50_000,
        ge=0,
        description="Duration percentiles over at most this many values (tool calls, or "
        "finished runs) are computed exactly; beyond, from hourly histograms (within 2%).",
    )
    prices_file: Path | None = Field(
        default=None,
        description="A JSON price table that extends or overrides the shipped one "
        "(see docs/api.md, 'Cost').",
    )
    metrics_port: int | None = Field(
        default=None,
        ge=1,
        le=65535,
        description="Serve Prometheus metrics at http://127.0.0.1:PORT/metrics (worker N at "
        "PORT + N - 1); unset: no metrics. Never on the public port.",
    )
    otlp_grpc_port: int | None = Field(
        default=None,
        ge=1,
        le=65535,
        description="Also take OTLP/gRPC trace exports on this port, on the HTTP host (every "
        "worker serves it). Needs the grpc extra; unset: off (OTLP/HTTP is always on).",
    )
    alerts_allow_private_destinations: bool = Field(
        default=False,
        description="Let alert destinations resolve to loopback, private, link-local or "
        "metadata addresses (an internal Slack proxy; a local test receiver). Off: refused, "
        "when a destination is made and again at each delivery.",
    )
    public_url: str | None = Field(
        default=None,
        description="The dashboard's address as people reach it (https://keelwave.example.com), "
        "for the links in alerts. Unset: http://HOST:PORT.",
    )
    server_verdicts: bool = Field(
        default=True,
        description="Judge runs with the server's own detectors (detected loops, findings) as "
        "their steps arrive. Off: this server only ingests, and another one (any server on "
        "the same database) judges.",
    )
    retention_every_seconds: float = Field(
        default=600,
        gt=0,
        description="How often retention is enforced (projects' retention_days; one server "
        "at a time does it); also soon after start.",
    )
    citus_compress_after_days: float = Field(
        default=7,
        ge=0,
        description="On Citus: convert days of steps and model calls older than this to the "
        "columnar access method (and only once retention has deleted what it would there); "
        "0: never. See docs/scale-out.md, 'Compression'.",
    )
    retry_after_seconds: int = Field(
        default=1, ge=1, description="Retry-After sent with 503 answers."
    )

    @property
    def embedded(self) -> bool:
        return not self.database_url
