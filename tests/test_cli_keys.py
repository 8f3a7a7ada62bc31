"""`keelwave keys` and `keelwave migrate` through typer's CliRunner, on a real database."""

from __future__ import annotations

import json
import uuid

from conftest import query
from typer.testing import CliRunner

from keelwave.cli import app
from keelwave.db import keys as key_store

runner = CliRunner()


def invoke(*args: str):
    return runner.invoke(app, list(args))


def test_create_list_revoke(db_url: str) -> None:
    project = f"cli-{uuid.uuid4().hex[:8]}"
    result = invoke(
        "keys",
        "create",
        "--project",
        project,
        "--name",
        "ci",
        "--scope",
        "ingest",
        "--json",
        "--database-url",
        db_url,
    )
    assert result.exit_code == 0, result.output
    created = json.loads(result.stdout)
    assert set(created) == {"id", "key", "project_id", "project", "scope"}
    assert created["key"].startswith("kw_") and created["scope"] == "ingest"
    assert created["project"] == project  # created on the fly
    [(stored_hash,)] = query(
        db_url, "SELECT key_hash FROM api_keys WHERE id = %s", (created["id"],)
    )
    assert stored_hash == key_store.hash_key(created["key"])

    result = invoke("keys", "list", "--project", project, "--database-url", db_url)
    assert result.exit_code == 0
    assert created["id"][:8] in result.stdout and created["key"] not in result.stdout
    assert "active" in result.stdout

    result = invoke("keys", "revoke", created["id"][:8], "--database-url", db_url)
    assert result.exit_code == 0, result.output
    listed = json.loads(
        invoke("keys", "list", "--project", project, "--json", "--database-url", db_url).stdout
    )
    assert listed[0]["revoked_at"] is not None
    assert "key" not in listed[0]


def test_text_output_shows_the_key_once(db_url: str) -> None:
    result = invoke("keys", "create", "--project", "text-out", "--database-url", db_url)
    assert result.exit_code == 0
    assert "shown only this once" in result.stdout
    assert result.stdout.count("kw_") == 1


def test_revoking_an_unknown_key_is_a_clear_error(db_url: str) -> None:
    for key_id in (str(uuid.uuid4()), "zzz"):
        result = invoke("keys", "revoke", key_id, "--database-url", db_url)
        assert result.exit_code == 1
        assert "error:" in result.output
        assert "Traceback" not in result.output


def test_bad_scope_is_rejected(db_url: str) -> None:
    result = invoke("keys", "create", "--scope", "admin", "--database-url", db_url)
    assert result.exit_code == 2
    assert "admin" in result.output


def test_migrate_history_needs_no_database() -> None:
    result = invoke("migrate", "history")
    assert result.exit_code == 0
    assert "0001" in result.output and "0002" in result.output


def test_migrate_upgrade_and_downgrade(fresh_db_url: str) -> None:
    assert invoke("migrate", "--database-url", fresh_db_url).exit_code == 0
    [(head,)] = query(fresh_db_url, "SELECT version_num FROM alembic_version")
    assert invoke("migrate", "current", "--database-url", fresh_db_url).output.startswith(head)
    assert invoke("migrate", "downgrade", "base", "--database-url", fresh_db_url).exit_code == 0
    assert query(fresh_db_url, "SELECT count(*) FROM alembic_version") == [(0,)]
    assert invoke("migrate", "upgrade", "--database-url", fresh_db_url).exit_code == 0
    result = invoke("migrate", "upgrade", "nonexistent", "--database-url", fresh_db_url)
    assert result.exit_code == 1 and "error:" in result.output
