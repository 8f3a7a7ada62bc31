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

    result = invoke("keys", "revoke", created["id"][:8], "--yes", "--database-url", db_url)
    assert result.exit_code == 0, result.output
    listed = json.loads(
        invoke("keys", "list", "--project", project, "--json", "--database-url", db_url).stdout
    )
    assert listed[0]["revoked_at"] is not None
    assert "key" not in listed[0]


def new_key(db_url: str, scope: str = "all") -> dict:
    project = f"cli-{uuid.uuid4().hex[:8]}"
    result = invoke("keys", "create", "--project", project, "--scope", scope, "--json",
                    "--database-url", db_url)  # fmt: skip
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def is_revoked(db_url: str, key_id: str) -> bool:
    [(revoked,)] = query(db_url, "SELECT revoked_at IS NOT NULL FROM api_keys WHERE id = %s",
                         (key_id,))  # fmt: skip
    return revoked


def test_revoke_asks_first_and_without_a_terminal_refuses(db_url: str) -> None:
    created = new_key(db_url)
    result = invoke("keys", "revoke", created["id"][:8], "--database-url", db_url)
    assert result.exit_code == 2
    assert "without asking" in result.output and "--yes" in result.output
    assert not is_revoked(db_url, created["id"])


def test_revoke_takes_the_prefix_keys_list_prints(db_url: str) -> None:
    created = new_key(db_url)
    listed = invoke("keys", "list", "--project", created["project"], "--database-url", db_url)
    [shown] = [word for word in listed.stdout.split() if word.startswith("kw_")]
    assert shown.endswith("…") and created["key"].startswith(shown[:-1])
    wrong_case = shown[:3] + shown[3:-1].swapcase()
    if wrong_case != shown[:-1]:  # the case is part of the key: another case is another key
        refused = invoke("keys", "revoke", wrong_case, "--yes", "--database-url", db_url)
        assert refused.exit_code == 1 and "no key with key prefix" in refused.output
    result = invoke("keys", "revoke", shown, "--yes", "--database-url", db_url)
    assert result.exit_code == 0, result.output
    assert f"Revoked key {created['id']}" in result.stdout
    assert is_revoked(db_url, created["id"])
    again = invoke("keys", "revoke", shown[:-1], "--database-url", db_url)  # no --yes needed
    assert again.exit_code == 0 and "was already revoked, on " in again.stdout


def test_revoke_asks_on_a_terminal(db_url: str) -> None:
    """The question, answered on a real terminal (a pseudo-terminal): no, then yes."""
    created = new_key(db_url, scope="ingest")
    for answer, revoked in ((b"n\n", False), (b"y\n", True)):
        output = on_a_terminal(["keys", "revoke", created["id"], "--database-url", db_url],
                               answer)  # fmt: skip
        assert f"Revoke {created['key'][:9]}… (ingest key of project " in output
        assert is_revoked(db_url, created["id"]) is revoked
    assert "Revoked key" in output


def on_a_terminal(args: list[str], answer: bytes) -> str:
    """Run keelwave with a pseudo-terminal for its input and output; type ``answer`` once it
    asks (a question ends in ``: ``); everything it printed."""
    import os
    import pty
    import select
    import subprocess
    import sys

    controller, terminal = pty.openpty()
    process = subprocess.Popen([sys.executable, "-m", "keelwave.cli", *args], stdin=terminal,
                               stdout=terminal, stderr=terminal, close_fds=True)  # fmt: skip
    os.close(terminal)
    seen = b""
    answered = False
    while True:
        # Never a hang: a command that waits for input it was not asked for fails here.
        ready, _, _ = select.select([controller], [], [], 60)
        assert ready, f"keelwave {' '.join(args)} printed nothing for 60 s: {seen!r}"
        try:
            chunk = os.read(controller, 4096)
        except OSError:  # the terminal closed: the command is done
            break
        if not chunk:
            break
        seen += chunk
        if not answered and seen.rstrip().endswith(b":"):
            os.write(controller, answer)
            answered = True
    os.close(controller)
    process.wait(timeout=60)
    return seen.decode(errors="replace")


def test_text_output_shows_the_key_once(db_url: str) -> None:
    result = invoke("keys", "create", "--project", "text-out", "--database-url", db_url)
    assert result.exit_code == 0
    assert "shown only this once" in result.stdout
    assert "Created an all key" in result.stdout  # "an", not "a all"
    ingest = invoke("keys", "create", "--project", "text-out", "--scope", "ingest",
                    "--database-url", db_url)  # fmt: skip
    assert "Created an ingest key" in ingest.stdout
    read = invoke("keys", "create", "--project", "text-out", "--scope", "read",
                  "--database-url", db_url)  # fmt: skip
    assert "Created a read key" in read.stdout
    assert result.stdout.count("kw_") == 1


def test_revoking_an_unknown_key_is_a_clear_error(db_url: str) -> None:
    for key_id in (str(uuid.uuid4()), "zzz"):
        result = invoke("keys", "revoke", key_id, "--yes", "--database-url", db_url)
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
