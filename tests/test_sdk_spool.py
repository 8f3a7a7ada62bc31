"""The spool directory: events a process could not send before it ended wait on disk,
and the next client started with the same directory sends them, each exactly once.

The server really is down (nothing listens on the port), then really started on
that port; the database says what arrived and the server's metrics how many
rows it was sent, so a file sent twice would show.
"""

from __future__ import annotations

import json
import logging
import os
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import httpx
import pytest
from conftest import make_project, query
from serve_process import ServeProcess, free_port

from keelwave import Keelwave


@pytest.fixture
def keys(db_url: str):
    return make_project(db_url)


@pytest.fixture
def port() -> int:
    return free_port()


@pytest.fixture
def start_server(db_url: str, port: int, tmp_path: Path):
    """Start `keelwave serve` on ``port`` when the test says so; returns its metrics port."""
    started: list[ServeProcess] = []
    metrics = free_port()

    def start() -> int:
        started.append(
            ServeProcess(
                "--database-url",
                db_url,
                "--port",
                str(port),
                env={"KEELWAVE_METRICS_PORT": str(metrics), "KEELWAVE_WORKERS": "1"},
                log=tmp_path / "serve.log",
                port=None,
            )
        )
        return metrics

    yield start
    for process in started:
        process.stop()
        process.kill()


def rows_received(metrics_port: int) -> dict[str, int]:
    """Rows the server was sent and committed, duplicates included, per table.

    Each server process has its own metrics port (a worker process at the next
    one), so both are asked and their counts added up.
    """
    counts: Counter[str] = Counter()
    for port in (metrics_port, metrics_port + 1):
        try:
            text = httpx.get(f"http://127.0.0.1:{port}/metrics").text
        except httpx.HTTPError:
            continue
        for line in text.splitlines():
            if line.startswith("keelwave_ingest_rows_total{"):
                table = line.split('table="')[1].split('"')[0]
                counts[table] += int(float(line.rsplit(" ", 1)[1]))
    return dict(counts)


def total(db_url: str, table: str, project_id: str) -> int:
    sql = f"SELECT count(*) FROM {table} WHERE project_id = %s"
    return query(db_url, sql, (project_id,))[0][0]


def offline_client(keys, port: int, spool: Path, **options) -> Keelwave:
    return Keelwave(
        api_key=keys.keys["ingest"],
        endpoint=f"http://127.0.0.1:{port}",
        spool_dir=spool,
        flush_at_exit=False,
        **options,
    )


def record(sdk: Keelwave, steps: int = 30, name: str = "offline") -> str:
    with sdk.run(name, tags=["spooled"]) as run:
        for i in range(steps):
            run.tool_call("search", input={"q": i % 3})  # repeats: the same fingerprints
        run.llm_call("openai", "gpt-4o-mini", input_tokens=100, output_tokens=5)
        run.llm_call("anthropic", "claude-3-5-haiku", input_tokens=50, output_tokens=5)
    return run.id


def spool_files(spool: Path) -> list[Path]:
    return sorted(path for path in spool.iterdir() if not path.name.startswith("."))


def test_events_wait_in_the_spool_and_are_sent_once(
    keys, db_url: str, port: int, tmp_path: Path, start_server, caplog
) -> None:
    caplog.set_level(logging.WARNING, logger="keelwave")
    spool = tmp_path / "spool"
    sdk = offline_client(keys, port, spool)
    run_id = record(sdk)
    sdk.shutdown(timeout=0.5)

    [written] = spool_files(spool)
    assert written.suffix == ".jsonl"
    lines = [json.loads(line) for line in written.read_text().splitlines()]
    assert Counter(line["kind"] for line in lines) == {"run": 1, "step": 30, "ai": 2, "finish": 1}
    assert str(spool) in caplog.text  # the log says where they are

    metrics = start_server()
    later = offline_client(keys, port, spool)
    try:
        assert later.flush(timeout=30)
        assert spool_files(spool) == []  # acknowledged, so deleted
    finally:
        later.shutdown()
    again = offline_client(keys, port, spool)  # nothing left to send
    assert again.flush(timeout=30)
    again.shutdown()

    assert total(db_url, "agent_runs", keys.id) == 1
    assert total(db_url, "agent_steps", keys.id) == 30
    assert total(db_url, "ai_traces", keys.id) == 2
    assert rows_received(metrics) == {"agent_runs": 1, "agent_steps": 30, "ai_traces": 2}
    [(reason, tags)] = query(
        db_url, "SELECT termination_reason, tags FROM agent_runs WHERE id = %s", (run_id,)
    )
    assert (reason, tags) == ("clean", ["spooled"])
    # tool_input came back byte for byte: the server's fingerprints still find the repeats
    loops = query(
        db_url,
        "SELECT count(DISTINCT input_fingerprint) FROM agent_steps WHERE run_id = %s",
        (run_id,),
    )
    assert loops == [(3,)]


AT_EXIT = """
from keelwave import Keelwave
client = Keelwave()
with client.run("exiting") as run:
    for i in range(10):
        run.tool_call("t", input={"i": i})
print(run.id)
"""


def test_the_spool_is_written_at_interpreter_exit(
    keys, db_url: str, port: int, tmp_path: Path, start_server
) -> None:
    spool = tmp_path / "spool"
    env = {
        **os.environ,
        "KEELWAVE_API_KEY": keys.keys["ingest"],
        "KEELWAVE_ENDPOINT": f"http://127.0.0.1:{port}",
        "KEELWAVE_SPOOL_DIR": str(spool),
    }
    result = subprocess.run(
        [sys.executable, "-c", AT_EXIT], env=env, capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 0, result.stderr
    assert str(spool) in result.stderr
    [written] = spool_files(spool)
    run_id = result.stdout.strip()

    start_server()
    later = Keelwave(
        api_key=keys.keys["ingest"], endpoint=f"http://127.0.0.1:{port}", flush_at_exit=False
    )  # KEELWAVE_SPOOL_DIR is not set here: nothing is resent
    assert later.flush(timeout=30) and written.exists()
    later.shutdown()
    env_client = subprocess.run(
        [sys.executable, "-c", "from keelwave import Keelwave; assert Keelwave().flush(30)"],
        env={**env, "KEELWAVE_ENDPOINT": f"http://127.0.0.1:{port}"},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert env_client.returncode == 0, env_client.stderr
    assert spool_files(spool) == []
    steps = query(db_url, "SELECT count(*) FROM agent_steps WHERE run_id = %s", (run_id,))
    assert steps == [(10,)]


def test_clients_started_together_never_send_the_same_file(
    keys, db_url: str, port: int, tmp_path: Path, start_server
) -> None:
    spool = tmp_path / "spool"
    processes = [offline_client(keys, port, spool) for _ in range(6)]  # alive at once
    for number, sdk in enumerate(processes):
        record(sdk, steps=10, name=f"process-{number}")
    for sdk in processes:
        sdk.shutdown(timeout=0.2)  # each writes a file of its own
    assert len(spool_files(spool)) == 6

    metrics = start_server()
    clients = [offline_client(keys, port, spool) for _ in range(3)]
    try:
        assert all(client.flush(timeout=30) for client in clients)
    finally:
        for client in clients:
            client.shutdown()
    assert spool_files(spool) == []
    assert total(db_url, "agent_steps", keys.id) == 60
    assert rows_received(metrics) == {"agent_runs": 6, "agent_steps": 60, "ai_traces": 12}


def test_a_spool_of_another_key_is_left_alone(
    keys, db_url: str, port: int, tmp_path: Path, start_server
) -> None:
    spool = tmp_path / "spool"
    sdk = offline_client(keys, port, spool)
    record(sdk, steps=3)
    sdk.shutdown(timeout=0.2)
    other = make_project(db_url)
    start_server()
    stranger = offline_client(other, port, spool)  # same directory, another project's key
    assert stranger.flush(timeout=30)
    stranger.shutdown()
    assert len(spool_files(spool)) == 1
    assert total(db_url, "agent_steps", other.id) == 0


def test_the_spool_is_bounded_and_keeps_the_newest(keys, port: int, tmp_path: Path, caplog) -> None:
    caplog.set_level(logging.WARNING, logger="keelwave")
    spool = tmp_path / "spool"
    processes = [offline_client(keys, port, spool, spool_max_bytes=30_000) for _ in range(6)]
    run_ids = [record(sdk, steps=40) for sdk in processes]
    for sdk in processes:  # about 11 kB each, one after the other
        sdk.shutdown(timeout=0.2)
    files = spool_files(spool)
    assert sum(path.stat().st_size for path in files) <= 30_000
    assert 0 < len(files) < 6
    kept = {json.loads(line)["body"] for path in files for line in path.read_text().splitlines()}
    kept_runs = {json.loads(body).get("id") for body in kept if '"agent_name"' in body}
    assert run_ids[-1] in kept_runs and run_ids[0] not in kept_runs
    assert "deleted" in caplog.text and "30000" in caplog.text


CLAIMING = """
import time
from keelwave import Keelwave
client = Keelwave()  # claims the spool file, then cannot send it: the server is down
time.sleep(600)
"""


def test_a_file_claimed_by_a_process_that_died_is_taken_over_once_old(
    keys, db_url: str, port: int, tmp_path: Path, start_server
) -> None:
    spool = tmp_path / "spool"
    sdk = offline_client(keys, port, spool)
    run_id = record(sdk, steps=8)
    sdk.shutdown(timeout=0.2)
    [unclaimed] = spool_files(spool)

    env = {
        **os.environ,
        "KEELWAVE_API_KEY": keys.keys["ingest"],
        "KEELWAVE_ENDPOINT": f"http://127.0.0.1:{port}",
        "KEELWAVE_SPOOL_DIR": str(spool),
    }
    claimer = subprocess.Popen([sys.executable, "-c", CLAIMING], env=env)
    try:
        deadline = time.monotonic() + 60
        while unclaimed.exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not unclaimed.exists()  # renamed: claimed
    finally:
        claimer.send_signal(signal.SIGKILL)  # dies mid-resend, leaving its claim
        claimer.wait()
    [claimed] = spool_files(spool)

    start_server()
    fresh = offline_client(keys, port, spool)  # a recent claim may belong to a live process
    assert fresh.flush(timeout=30)
    fresh.shutdown()
    assert claimed.exists()
    assert total(db_url, "agent_steps", keys.id) == 0

    an_hour_ago = time.time() - 3600
    os.utime(claimed, (an_hour_ago, an_hour_ago))
    later = offline_client(keys, port, spool)
    assert later.flush(timeout=30)
    later.shutdown()
    assert spool_files(spool) == []
    steps = query(db_url, "SELECT count(*) FROM agent_steps WHERE run_id = %s", (run_id,))
    assert steps == [(8,)]
