"""Migrations: every revision walks up and down; the shipped wheel can migrate."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
import zipfile
from pathlib import Path

import psycopg
import pytest
from alembic.config import Config
from alembic.script import ScriptDirectory

from keelwave.db import migrate
from keelwave.server.store import histogram

TABLES = {"projects", "api_keys", "agent_runs", "agent_steps", "ai_traces"}
REPO = Path(__file__).resolve().parent.parent


def tables(url: str) -> set[str]:
    with psycopg.connect(url) as conn:
        rows = conn.execute(
            "SELECT tablename FROM pg_tables WHERE schemaname = 'public'"
        ).fetchall()
    return {name for (name,) in rows} - {"alembic_version"}


def revisions() -> list[tuple[str, str]]:
    config = Config()
    config.set_main_option("script_location", str(migrate.migrations_dir()))
    script = ScriptDirectory.from_config(config)
    ordered = list(reversed(list(script.walk_revisions("base", "heads"))))
    return [(rev.revision, rev.down_revision or "base") for rev in ordered]


def test_every_revision_walks_up_and_down(fresh_db_url: str) -> None:
    assert revisions(), "no migrations found"
    for revision, previous in revisions():
        migrate.upgrade(fresh_db_url, revision)
        migrate.downgrade(fresh_db_url, previous)
        migrate.upgrade(fresh_db_url, revision)
    assert tables(fresh_db_url) >= TABLES
    migrate.downgrade(fresh_db_url, "base")
    assert tables(fresh_db_url) == set()


def test_upgrades_fill_the_rollups_from_data_stored_before_them(fresh_db_url: str) -> None:
    """Runs stored by the first schema are counted by every rollup added later."""
    migrate.upgrade(fresh_db_url, "0001")
    project, finished, going = uuid.uuid4(), uuid.uuid4(), uuid.uuid4()
    with psycopg.connect(fresh_db_url) as conn:
        conn.execute("INSERT INTO projects (id, name) VALUES (%s, 'old')", (project,))
        conn.execute(
            "INSERT INTO agent_runs (project_id, id, agent_name, started_at, ended_at, "
            "termination_reason) VALUES (%s, %s, 'a', '2026-01-01T10:15Z', "
            "'2026-01-01T10:15:02Z', 'clean'), (%s, %s, 'a', '2026-01-01T10:20Z', NULL, NULL)",
            (project, finished, project, going),
        )
        for run_id, index, query in ((finished, 1, "x"), (finished, 2, "x"), (going, 1, "y")):
            conn.execute(
                "INSERT INTO agent_steps (project_id, run_id, step_index, step_type, tool_name, "
                "input_fingerprint, started_at, duration_ms) "
                "VALUES (%s, %s, %s, 'tool_call', 'grep', %s, '2026-01-01T10:16Z', 40)",
                (project, run_id, index, query.encode()),
            )
    migrate.upgrade(fresh_db_url)
    with psycopg.connect(fresh_db_url) as conn:
        runs = conn.execute("SELECT runs, finished_runs, steps FROM agent_run_rollups").fetchall()
        durations = conn.execute("SELECT duration_bin, runs FROM agent_duration_rollups").fetchall()
        tools = conn.execute(
            "SELECT calls, runs, repeated_calls FROM agent_tool_rollups"
        ).fetchall()
    assert runs == [(2, 1, 3)]
    [(duration_bin, count)] = durations  # the finished run, 2 s long
    assert count == 1
    assert histogram.bin_value(duration_bin) == pytest.approx(2000, rel=histogram.ACCURACY)
    assert tools == [(2, 1, 1)]  # finished runs only; the one going is read from its steps


def test_upgrade_is_idempotent(fresh_db_url: str) -> None:
    migrate.upgrade(fresh_db_url)
    migrate.upgrade(fresh_db_url)
    with psycopg.connect(fresh_db_url) as conn:
        [(version,)] = conn.execute("SELECT version_num FROM alembic_version").fetchall()
    assert version == revisions()[-1][0]


def test_hypertables_where_timescaledb_is_available(fresh_db_url: str) -> None:
    with psycopg.connect(fresh_db_url) as conn:
        available = conn.execute(
            "SELECT 1 FROM pg_available_extensions WHERE name = 'timescaledb'"
        ).fetchone()
        preloaded = (
            "timescaledb"
            in conn.execute("SELECT current_setting('shared_preload_libraries')").fetchone()[0]
        )
    if not (available and preloaded):
        pytest.skip("TimescaleDB is not installed and preloaded on this PostgreSQL")
    migrate.upgrade(fresh_db_url)
    with psycopg.connect(fresh_db_url) as conn:
        rows = conn.execute(
            "SELECT hypertable_name, compression_enabled FROM timescaledb_information.hypertables"
        ).fetchall()
        segments = conn.execute(
            "SELECT hypertable_name, array_agg(attname ORDER BY segmentby_column_index) "
            "FROM timescaledb_information.compression_settings "
            "WHERE segmentby_column_index IS NOT NULL GROUP BY 1"
        ).fetchall()
    # Runs are one mutable row each: a plain table (migration 0005 says why).
    assert dict(rows) == {"agent_steps": True, "ai_traces": True}
    assert dict(segments) == {
        "agent_steps": ["project_id", "run_id"],
        "ai_traces": ["project_id", "run_id"],
    }


def test_migrations_run_from_the_built_wheel(tmp_path: Path, fresh_db_url: str) -> None:
    """Build the wheel, unpack it away from the checkout, and migrate with it."""
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--no-deps",
            "--no-build-isolation",
            "-q",
            "-w",
            str(tmp_path),
            str(REPO),
        ],
        check=True,
    )
    [wheel] = tmp_path.glob("keelwave-*.whl")
    with zipfile.ZipFile(wheel) as archive:
        names = archive.namelist()
        assert "keelwave/migrations/env.py" in names
        assert any(name.startswith("keelwave/migrations/versions/0001") for name in names)
        archive.extractall(tmp_path / "site")
    script = (
        "import sys, keelwave.db.migrate as m; "
        "assert m.migrations_dir().is_relative_to(sys.argv[1]), m.migrations_dir(); "
        "m.upgrade(sys.argv[2])"
    )
    env = {**os.environ, "PYTHONPATH": str(tmp_path / "site")}
    subprocess.run(
        [sys.executable, "-c", script, str(tmp_path / "site"), fresh_db_url],
        check=True,
        cwd=tmp_path,
        env=env,
    )
    assert tables(fresh_db_url) >= TABLES


def test_large_values_are_compressed_with_lz4_where_the_server_has_it(fresh_db_url: str) -> None:
    """Migration 0018: a step's large tool output, stored by a session after the upgrade,
    is compressed with lz4 (far cheaper than pglz for the database) where PostgreSQL
    was built with it; elsewhere the upgrade goes through and values stay pglz."""
    migrate.upgrade(fresh_db_url)
    with psycopg.connect(fresh_db_url, autocommit=True) as conn:
        [values] = conn.execute(
            "SELECT enumvals FROM pg_settings WHERE name = 'default_toast_compression'"
        ).fetchone()
        conn.execute(
            "INSERT INTO agent_steps (project_id, run_id, step_index, step_type, started_at, "
            "tool_output) "
            "VALUES (gen_random_uuid(), gen_random_uuid(), 1, 'tool_call', now(), %s::json)",
            (json.dumps({"rows": ["the same line of output"] * 500}),),
        )
        [(method,)] = conn.execute("SELECT pg_column_compression(tool_output) FROM agent_steps")
    assert method == ("lz4" if "lz4" in values else "pglz")
