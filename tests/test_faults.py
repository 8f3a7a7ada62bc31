"""Faults on purpose: kill -9 under load, and the embedded database after a crash."""

from __future__ import annotations

import signal
import threading
import uuid
from pathlib import Path

import httpx
import psycopg
from serve_process import ServeProcess, free_port

from keelwave import Keelwave


def test_kill_9_under_load_loses_nothing_acknowledged(fresh_db_url: str, tmp_path: Path) -> None:
    """Every step acknowledged before the crash is stored, exactly once; the SDK's
    resends after the restart add no duplicates."""
    port = free_port()
    server = ServeProcess(
        "--database-url", fresh_db_url, "--port", str(port), port=None, log=tmp_path / "first.log"
    )
    key = server.printed_key
    run_id = str(uuid.uuid4())
    acknowledged: set[int] = set()
    stop = threading.Event()

    def client(offset: int) -> None:
        with httpx.Client(
            base_url=server.url, headers={"Authorization": f"Bearer {key}"}, timeout=5
        ) as http:
            index = offset
            while not stop.is_set():
                batch = [
                    {"run_id": run_id, "step_index": i, "tool_name": "t", "tool_input": {"i": i}}
                    for i in range(index, index + 10)
                ]
                try:
                    response = http.post("/v1/ingest/agent/steps", json=batch)
                except httpx.HTTPError:
                    return
                if response.status_code == 200:
                    acknowledged.update(range(index, index + 10))
                index += 80

    threads = [threading.Thread(target=client, args=(n * 10,)) for n in range(8)]
    for thread in threads:
        thread.start()
    while len(acknowledged) < 2000:
        threading.Event().wait(0.01)
    server.process.send_signal(signal.SIGKILL)  # no goodbye, no flush
    server.process.wait()
    stop.set()
    for thread in threads:
        thread.join()

    def stored() -> list[int]:
        with psycopg.connect(fresh_db_url) as conn:
            return [
                row[0]
                for row in conn.execute(
                    "SELECT step_index FROM agent_steps WHERE run_id = %s", (run_id,)
                )
            ]

    after_crash = stored()
    assert acknowledged <= set(after_crash)
    assert len(after_crash) == len(set(after_crash))  # nothing twice

    # The SDK resends a whole run (as after a restart): nothing is stored twice.
    restarted = ServeProcess(
        "--database-url", fresh_db_url, "--port", str(port), port=None, log=tmp_path / "second.log"
    )
    try:
        sdk = Keelwave(api_key=key, endpoint=restarted.url, flush_at_exit=False)
        with sdk.run("resender", run_id=run_id) as run:
            for index in sorted(acknowledged)[:200]:
                run._send_step(index, "tool_call", "t", f'{{"i": {index}}}', None, None, None, None)
        assert sdk.flush(30)
        sdk.shutdown()
        final = stored()
        assert len(final) == len(set(final)) == len(after_crash)
    finally:
        restarted.stop()
        restarted.kill()


def test_embedded_database_restarts_cleanly_after_kill_9(tmp_path: Path) -> None:
    env = {"KEELWAVE_DATA_DIR": str(tmp_path / "data")}
    first = ServeProcess("--workers", "1", env=env, log=tmp_path / "first.log")
    key = first.printed_key
    httpx.post(
        first.url + "/v1/ingest/agent/runs",
        json={"agent_name": "survivor"},
        headers={"Authorization": f"Bearer {key}"},
    ).raise_for_status()
    first.process.send_signal(signal.SIGKILL)  # PostgreSQL keeps running, orphaned
    first.process.wait()
    second = ServeProcess("--workers", "1", env=env, log=tmp_path / "second.log")
    try:
        assert second.printed_key is None
        runs = httpx.get(second.url + "/v1/me", headers={"Authorization": f"Bearer {key}"})
        project = runs.json()["data"]["project_id"]
        listed = httpx.get(
            f"{second.url}/v1/projects/{project}/agent/runs",
            headers={"Authorization": f"Bearer {key}"},
        ).json()["data"]
        assert [run["agent_name"] for run in listed] == ["survivor"]
        code, _ = second.stop()
        assert code == 0
    finally:
        second.kill()


def test_keys_never_reach_the_logs(fresh_db_url: str, tmp_path: Path) -> None:
    log = tmp_path / "serve.log"
    server = ServeProcess("--database-url", fresh_db_url, "--log-level", "debug", log=log)
    key = server.printed_key
    try:
        headers = {"Authorization": f"Bearer {key}"}
        httpx.get(server.url + "/v1/me", headers=headers).raise_for_status()
        httpx.post(server.url + "/v1/ingest/agent/steps", headers=headers, content=b"{oops")
        httpx.get(server.url + "/v1/me", headers={"Authorization": "Bearer kw_" + "w" * 43})
    finally:
        server.stop()
        server.kill()
    text = log.read_text()
    assert "kw_" not in text


def test_postgres_stopped_for_a_while_under_load(tmp_path: Path) -> None:
    """A private PostgreSQL, stopped for ~8 s while an agent keeps working: 503s (never
    500), not ready; then recovery on its own, and every step arrives exactly once."""
    from keelwave.db import keys as key_store
    from keelwave.db import migrate
    from keelwave.db.embedded import EmbeddedPostgres

    pg = EmbeddedPostgres(tmp_path / "pg")
    conninfo = pg.start()
    migrate.upgrade(conninfo)
    with psycopg.connect(conninfo, autocommit=True) as conn:
        key = key_store.create_key(conn, "outage", "all").key
    server = ServeProcess("--database-url", conninfo, "--workers", "1", log=tmp_path / "serve.log")
    sdk = Keelwave(api_key=key, endpoint=server.url, flush_at_exit=False)
    stop = threading.Event()
    recorded: list[int] = []

    def agent() -> None:
        with sdk.run("patient-agent") as run:
            while not stop.is_set():
                recorded.append(run.tool_call("work", input={"n": len(recorded)}))
                threading.Event().wait(0.01)
            run_ids.append(run.id)

    run_ids: list[str] = []
    worker = threading.Thread(target=agent)
    headers = {"Authorization": f"Bearer {key}"}
    try:
        worker.start()
        threading.Event().wait(1.5)
        pg._run(["pg_ctl", "-D", str(pg.pgdata), "-m", "fast", "-w", "stop"])
        statuses = set()
        for _ in range(16):  # ~8 s without a database
            response = httpx.post(
                server.url + "/v1/ingest/agent/steps",
                headers=headers,
                json={"run_id": str(uuid.uuid4()), "step_index": 1},
            )
            statuses.add(response.status_code)
            assert httpx.get(server.url + "/readyz").status_code == 503
            threading.Event().wait(0.5)
        assert statuses <= {503}, statuses  # never a 500, never an acknowledgement
        pg._pg_ctl_start()
        threading.Event().wait(1.0)
        stop.set()
        worker.join()
        assert sdk.flush(timeout=60)  # the SDK delivers what it kept
        with psycopg.connect(conninfo) as conn:
            stored = [
                row[0]
                for row in conn.execute(
                    "SELECT step_index FROM agent_steps WHERE run_id = %s", (run_ids[0],)
                )
            ]
        assert sorted(stored) == sorted(recorded)  # every step, exactly once
        assert httpx.get(server.url + "/readyz").status_code == 200
    finally:
        stop.set()
        sdk.shutdown(timeout=1)
        server.stop()
        server.kill()
        pg.stop()
