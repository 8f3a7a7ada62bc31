"""The TypeScript SDK (sdks/typescript): built, then its node:test suite run
against a real `keelwave serve`, and its fingerprints compared with Python's."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import psycopg
import pytest
from serve_process import ServeProcess

from keelwave.db import keys as key_store
from keelwave.sdk.canonical import canonical_json, fingerprint

SDK = Path(__file__).resolve().parent.parent / "sdks" / "typescript"
VECTORS = Path(__file__).resolve().parent / "vectors" / "fingerprints.json"


def test_python_agrees_with_the_shared_vectors() -> None:
    import base64

    for vector in json.loads(VECTORS.read_text())["vectors"]:
        text = canonical_json(vector["input"])
        assert text == vector["canonical"], vector["tool_name"]
        digest = base64.b64encode(fingerprint(vector["tool_name"], text)).decode()
        assert digest == vector["fingerprint"]


@pytest.fixture(scope="module")
def built_sdk() -> Path:
    if not shutil.which("node") or not shutil.which("npm"):
        pytest.skip("node and npm are needed for the TypeScript SDK")
    for command in (["npm", "install", "--no-audit", "--no-fund"], ["npm", "run", "build"]):
        result = subprocess.run(command, cwd=SDK, capture_output=True, text=True, timeout=300)
        assert result.returncode == 0, result.stdout + result.stderr
    return SDK


def test_node_suite_against_a_real_server(built_sdk: Path, db_url: str, tmp_path: Path) -> None:
    with psycopg.connect(db_url, autocommit=True) as conn:
        ingest = key_store.create_key(conn, "typescript", "ingest").key
        read = key_store.create_key(conn, "typescript", "read").key
    server = ServeProcess("--database-url", db_url, log=tmp_path / "serve.log")
    try:
        env = {
            **os.environ,
            "KEELWAVE_TEST_ENDPOINT": server.url,
            "KEELWAVE_TEST_INGEST_KEY": ingest,
            "KEELWAVE_TEST_READ_KEY": read,
        }
        result = subprocess.run(
            ["node", "--test", "test/"],
            cwd=built_sdk,
            env=env,
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert result.returncode == 0, result.stdout[-6000:] + result.stderr[-3000:]
        assert "# fail 0" in result.stdout
        assert "# skipped 0" in result.stdout  # the server tests really ran
    finally:
        server.stop()
        server.kill()
