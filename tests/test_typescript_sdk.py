"""The TypeScript SDK (sdks/typescript): built, then its node:test suite run
against a real `keelwave serve`, and its fingerprints compared with Python's."""

from __future__ import annotations

import json
import os
import random
import re
import shutil
import subprocess
from pathlib import Path

import psycopg
import pytest
from serve_process import ServeProcess, free_port

from keelwave import Keelwave, protocol
from keelwave.db import keys as key_store
from keelwave.sdk import canonical_json, fingerprint

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
    # One that takes bodies of up to 64 KiB only, for the SDK to split its batches for.
    small = ServeProcess(
        "--database-url",
        db_url,
        env={"KEELWAVE_MAX_BODY_BYTES": str(64 * 1024)},
        log=tmp_path / "small.log",
    )
    try:
        env = {
            **os.environ,
            "KEELWAVE_TEST_ENDPOINT": server.url,
            "KEELWAVE_TEST_SMALL_ENDPOINT": small.url,
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
        for process in (server, small):
            process.stop()
            process.kill()


def test_protocol_constants_match_the_python_module(built_sdk: Path) -> None:
    # The built module, as a package user gets it: names and values both, so a
    # constant added, dropped or changed on one side alone fails here.
    script = "const p = await import('./dist/protocol.js'); console.log(JSON.stringify({...p}));"
    result = subprocess.run(
        ["node", "--input-type=module", "-e", script],
        cwd=built_sdk,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr
    typescript = json.loads(result.stdout)
    assert set(typescript) == set(protocol.__all__)
    for name in protocol.__all__:
        value = getattr(protocol, name)
        expected = list(value) if isinstance(value, tuple) else value
        assert typescript[name] == expected, name


def test_the_package_exports_the_protocol(built_sdk: Path) -> None:
    script = (
        "const sdk = await import('./dist/index.js');"
        "const p = await import('./dist/protocol.js');"
        "process.stdout.write(JSON.stringify(Object.keys(p).filter((k) => sdk[k] !== p[k])));"
    )
    result = subprocess.run(
        ["node", "--input-type=module", "-e", script],
        cwd=built_sdk,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout) == []


TYPESCRIPT_OFFLINE = """
import { Keelwave } from "./dist/index.js";
const client = new Keelwave();  // KEELWAVE_SPOOL_DIR: it takes the Python client's file
const id = await client.run("from-typescript", (run) => {
  for (let i = 0; i < 5; i++) run.toolCall("t", { input: { i } });
  return run.id;
});
console.log(id);
"""


def test_the_two_sdks_resend_each_others_spool(
    built_sdk: Path, db_url: str, tmp_path: Path
) -> None:
    """One format, one protocol: a mixed fleet shares a spool directory. Python's file
    is claimed by a TypeScript process that cannot send it either and writes it out
    again with its own events at exit; a Python client sends them all."""
    with psycopg.connect(db_url, autocommit=True) as conn:
        key = key_store.create_key(conn, "spools", "ingest")
    port, spool = free_port(), tmp_path / "spool"
    endpoint = f"http://127.0.0.1:{port}"
    python = Keelwave(api_key=key.key, endpoint=endpoint, spool_dir=spool, flush_at_exit=False)
    with python.run("from-python") as run:
        for i in range(7):
            run.tool_call("t", input={"i": i})
    python.shutdown(timeout=0.2)
    env = {**os.environ, "KEELWAVE_API_KEY": key.key, "KEELWAVE_ENDPOINT": endpoint,
           "KEELWAVE_SPOOL_DIR": str(spool)}  # fmt: skip
    result = subprocess.run(
        ["node", "--input-type=module", "-e", TYPESCRIPT_OFFLINE],
        cwd=built_sdk,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr
    [written] = [path for path in spool.iterdir() if not path.name.startswith(".")]
    assert written.suffix == ".jsonl"

    server = ServeProcess(
        "--database-url", db_url, "--port", str(port), log=tmp_path / "serve.log", port=None
    )
    try:
        later = Keelwave(api_key=key.key, endpoint=endpoint, spool_dir=spool, flush_at_exit=False)
        assert later.flush(timeout=30)
        later.shutdown()
    finally:
        server.stop()
        server.kill()
    assert list(spool.iterdir()) == []
    with psycopg.connect(db_url) as conn:
        rows = conn.execute(
            "SELECT r.agent_name, r.termination_reason, count(s.step_index) FROM agent_runs r "
            "JOIN agent_steps s ON s.project_id = r.project_id AND s.run_id = r.id "
            "WHERE r.project_id = %s "
            "GROUP BY 1, 2 ORDER BY 1",
            (key.project_id,),
        ).fetchall()
    assert rows == [("from-python", "clean", 7), ("from-typescript", "clean", 5)]


# -- redaction: the same rules, the same bytes ---------------------------------------------


def test_the_redaction_rules_match_the_python_module(built_sdk: Path) -> None:
    from keelwave.sdk import _redact

    script = "const r = await import('./dist/redact.js'); console.log(JSON.stringify({...r}));"
    result = subprocess.run(
        ["node", "--input-type=module", "-e", script],
        cwd=built_sdk,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr
    typescript = json.loads(result.stdout)
    for name in ("SECRET_KEY_PARTS", "SECRET_KEY_ENDINGS", "SECRET_KEYS",
                 "NOT_SECRET_TOKEN_ENDINGS", "KEY_FRAGMENTS", "PARAMETER_PATTERN",
                 "REDACTED"):  # fmt: skip
        value = getattr(_redact, name)
        assert typescript[name] == (list(value) if isinstance(value, tuple) else value), name
    # The patterns character for character; replacements in each language's syntax.
    python_rules = [
        [list(fragments), pattern, re.sub(r"\\(\d)", r"$\1", replacement)]
        for fragments, pattern, replacement in _redact.VALUE_RULES
    ]
    assert typescript["VALUE_RULES"] == python_rules


def random_payloads(count: int, seed: int) -> list:
    """JSON values both languages read alike (no floats: 3.0 is 3 in JavaScript),
    full of the fragments the rules and the screens look for."""
    pieces = ["pa_ss", "Password", "to_ken", "Token", "api.key", "X-Api-Key", "auth", "o_auth",
              "max_tokens", "page_token", "Bearer x1y2z3w4", "bearer", "sk-", "sk-" + "a" * 20,
              "AKIA" + "A" * 16, "ghp_" + "b" * 30, "xoxb-" + "1" * 10, "AIza" + "d" * 30,
              "eyJ" + "e" * 8 + ".e" + "f" * 8 + ".", "kw_" + "g" * 40, "://u:p@h", "?password=x",
              "&token=y", " secret=z", "-----BEGIN EC PRIVATE KEY-----", "caf\u00e9", "\u212a",
              "\U0001f600", "\ud800", "\n", "\t", '"', "\\", "=", "@", "_", "-", " ", "name",
              "key", "value", "cookie"]  # fmt: skip
    rng = random.Random(seed)

    def text() -> str:
        return "".join(rng.choice(pieces) for _ in range(rng.randint(1, 4)))

    def value(depth: int) -> object:
        kind = rng.randrange(2 if depth > 2 else 4)
        if kind == 0:
            return text()
        if kind == 1:
            return rng.choice([None, True, False, rng.randint(-1000, 1000)])
        if kind == 2:
            return [value(depth + 1) for _ in range(rng.randrange(4))]
        return {rng.choice([text(), "name", "key", "value"]): value(depth + 1)
                for _ in range(rng.randint(1, 4))}  # fmt: skip

    return [value(0) for _ in range(count)]


REDACT_EACH = """
import { Redaction } from "./dist/index.js";
import { readFileSync } from "node:fs";
const redaction = new Redaction();
const payloads = JSON.parse(readFileSync(process.argv[1], "utf8"));
process.stdout.write(JSON.stringify(payloads.map((p) => redaction.canonicalJson(p))));
"""


def test_the_two_sdks_redact_random_payloads_alike(built_sdk: Path, tmp_path: Path) -> None:
    from keelwave.sdk._redact import DEFAULT

    payloads = random_payloads(2000, seed=22)
    path = tmp_path / "payloads.json"
    path.write_text(json.dumps(payloads))
    result = subprocess.run(
        ["node", "--input-type=module", "-e", REDACT_EACH, str(path)],
        cwd=built_sdk,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    typescript = json.loads(result.stdout)
    python = [DEFAULT.canonical_json(payload) for payload in payloads]
    differing = [(p, t) for p, t in zip(python, typescript, strict=True) if p != t]
    assert not differing, differing[:3]
    assert sum("[REDACTED]" in text for text in python) > len(python) // 4  # secrets were there
