"""The package's shape: the SDK import stays light; settings come from KEELWAVE_*."""

from __future__ import annotations

import json
import subprocess
import sys

from keelwave.settings import Settings


def test_sdk_import_does_not_pull_in_the_server() -> None:
    script = (
        "import json, sys; from keelwave import Keelwave; "
        "print(json.dumps(sorted(m for m in sys.modules if m.split('.')[0] in "
        "('aiohttp', 'psycopg', 'textual', 'alembic', 'sqlalchemy', 'typer') "
        "or m.startswith(('keelwave.server', 'keelwave.tui', 'keelwave.cli', 'keelwave.db')))))"
    )
    output = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, check=True
    ).stdout
    assert json.loads(output) == []


def test_settings_read_the_environment(monkeypatch, tmp_path) -> None:
    monkeypatch.setenv("KEELWAVE_DATABASE_URL", "postgresql://u@h/db")
    monkeypatch.setenv("KEELWAVE_DATA_DIR", str(tmp_path))
    monkeypatch.setenv("KEELWAVE_HOST", "0.0.0.0")
    monkeypatch.setenv("KEELWAVE_PORT", "9000")
    settings = Settings()
    assert (settings.database_url, settings.data_dir, settings.host, settings.port) == (
        "postgresql://u@h/db",
        tmp_path,
        "0.0.0.0",
        9000,
    )
    assert Settings(port=1234).port == 1234  # a flag beats the environment
