"""`keelwave serve` as a user runs it: embedded database, first key, signals, restarts."""

from __future__ import annotations

import http.client
import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path

import httpx
import psycopg
import pytest
from serve_process import ServeProcess, keelwave

from keelwave.db.embedded import EmbeddedPostgres


def post_looping_run(url: str, key: str) -> str:
    headers = {"Authorization": f"Bearer {key}"}
    with httpx.Client(base_url=url, headers=headers) as client:
        run_id = (
            client.post("/v1/ingest/agent/runs", json={"agent_name": "looping-agent"})
            .raise_for_status()
            .json()["data"]["id"]
        )
        steps = [
            {
                "run_id": run_id,
                "step_index": i,
                "tool_name": "web_search",
                "tool_input": {"q": "same"},
            }
            for i in range(1, 6)
        ]
        client.post("/v1/ingest/agent/steps", json=steps).raise_for_status()
        client.post(
            f"/v1/ingest/agent/runs/{run_id}/finish",
            json={
                "termination_reason": "loop_detected",
                "loop_detected": True,
                "loop_step_index": 1,
            },
        ).raise_for_status()
    return run_id


def get_loops(url: str, key: str, run_id: str) -> list[dict]:
    headers = {"Authorization": f"Bearer {key}"}
    with httpx.Client(base_url=url, headers=headers) as client:
        project = client.get("/v1/me").raise_for_status().json()["data"]["project_id"]
        response = client.get(f"/v1/projects/{project}/agent/runs/{run_id}/loops")
        return response.raise_for_status().json()["data"]


def test_embedded_first_start_restart_and_shared_keys(tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    env = {"KEELWAVE_DATA_DIR": str(data_dir)}
    server = ServeProcess(env=env, log=tmp_path / "serve1.log")
    try:
        key = server.printed_key
        assert key, "".join(server.output)
        assert "only this once" in "".join(server.output)
        assert "keelwave demo" in "".join(server.output)  # what to do next, for a newcomer
        assert httpx.get(server.url + "/readyz").json() == {"status": "ready"}
        run_id = post_looping_run(server.url, key)
        assert get_loops(server.url, key, run_id)[0]["step_indices"] == [1, 2, 3, 4, 5]

        # keys commands join the running embedded database
        created = keelwave(
            "keys", "create", "--project", "team-a", "--scope", "read", "--json", env=env
        )
        assert created.returncode == 0, created.stderr
        new_key = json.loads(created.stdout)
        assert set(new_key) == {"id", "key", "project_id", "project", "scope"}
        response = httpx.get(
            server.url + "/v1/me", headers={"Authorization": f"Bearer {new_key['key']}"}
        )
        assert response.json()["data"]["project"] == "team-a"
        listed = keelwave("keys", "list", "--json", env=env)
        assert new_key["key"] not in listed.stdout and key not in listed.stdout
        assert len(json.loads(listed.stdout)) == 2

        code, rest = server.stop(signal.SIGTERM)
        assert code == 0, server.stderr()
        assert "Stopped" in rest
    finally:
        server.kill()
    # the last user stopped the embedded PostgreSQL
    assert EmbeddedPostgres(data_dir)._is_running() is False

    again = ServeProcess(env=env, log=tmp_path / "serve2.log")
    try:
        assert again.printed_key is None  # the first key is never shown twice
        assert get_loops(again.url, key, run_id)[0]["hits"] == 5  # data survived
        code, _ = again.stop(signal.SIGINT)
        assert code == 0
    finally:
        again.kill()


def test_serve_with_external_database(fresh_db_url: str, tmp_path: Path) -> None:
    server = ServeProcess("--database-url", fresh_db_url, log=tmp_path / "serve.log")
    try:
        key = server.printed_key
        assert key
        run_id = post_looping_run(server.url, key)
        assert get_loops(server.url, key, run_id)[0]["hits"] == 5
        current = keelwave("migrate", "current", "--database-url", fresh_db_url)
        assert "(head)" in current.stdout + current.stderr
    finally:
        code, _ = server.stop()
        server.kill()
    assert code == 0


def test_no_migrate_on_an_empty_database_says_what_to_do(fresh_db_url: str) -> None:
    result = keelwave("serve", "--no-migrate", "--port", "0", "--database-url", fresh_db_url)
    assert result.returncode == 1
    assert "keelwave migrate" in result.stderr
    assert "Traceback" not in result.stderr


def test_unreachable_database_is_one_clear_line() -> None:
    result = keelwave(
        "serve", "--port", "0", "--database-url", "postgresql://nobody:secret@127.0.0.1:1/none"
    )
    assert result.returncode == 1
    assert "cannot connect" in result.stderr
    assert "secret" not in result.stderr  # the password is redacted
    assert "Traceback" not in result.stderr


@pytest.mark.parametrize("event_loop", ["auto", "asyncio"])  # uvloop, and asyncio's own
def test_sigterm_commits_what_was_acknowledged(
    fresh_db_url: str, tmp_path: Path, event_loop: str
) -> None:
    """Stop the server while clients are posting: every acknowledged step is stored."""
    server = ServeProcess(
        "--database-url", fresh_db_url, log=tmp_path / "serve.log",
        env={"KEELWAVE_EVENT_LOOP": event_loop},
    )  # fmt: skip
    key = server.printed_key
    run_id = str(uuid.uuid4())
    acknowledged: list[int] = []
    stop = threading.Event()

    def client(offset: int) -> None:
        with httpx.Client(base_url=server.url, headers={"Authorization": f"Bearer {key}"}) as http:
            index = offset
            while not stop.is_set():
                try:
                    response = http.post(
                        "/v1/ingest/agent/steps",
                        json={
                            "run_id": run_id,
                            "step_index": index,
                            "tool_name": "t",
                            "tool_input": {"i": index},
                        },
                    )
                except httpx.HTTPError:
                    return  # the server is gone
                if response.status_code == 200:
                    acknowledged.append(index)
                index += 8

    threads = [threading.Thread(target=client, args=(n,)) for n in range(8)]
    for thread in threads:
        thread.start()
    while len(acknowledged) < 200:
        threading.Event().wait(0.01)
    code, _ = server.stop(signal.SIGTERM)
    stop.set()
    for thread in threads:
        thread.join()
    assert code == 0
    with psycopg.connect(fresh_db_url) as conn:
        stored = {
            row[0]
            for row in conn.execute(
                "SELECT step_index FROM agent_steps WHERE run_id = %s", (run_id,)
            )
        }
    assert set(acknowledged) <= stored


def test_keelwave_command_is_installed() -> None:
    path = shutil.which("keelwave")
    if path is None:
        pytest.skip("the keelwave script is not on PATH (not installed with pip)")
    result = subprocess.run([path, "--help"], capture_output=True, text=True)
    assert result.returncode == 0
    for command in ("serve", "migrate", "keys"):
        assert command in result.stdout


def _connections_by_process(pids: list[str], port: int) -> dict[str, int]:
    """How many established TCP connections on ``port`` each process holds (Linux /proc)."""
    sockets = {}  # socket inode -> pid
    for pid in pids:
        for fd in Path(f"/proc/{pid}/fd").iterdir():
            target = str(fd.readlink()) if fd.is_symlink() else ""
            if target.startswith("socket:["):
                sockets[target[8:-1]] = pid
    counts = dict.fromkeys(pids, 0)
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        for line in Path(table).read_text().splitlines()[1:]:
            fields = line.split()
            local_port, state, inode = int(fields[1].rsplit(":", 1)[1], 16), fields[3], fields[9]
            if local_port == port and state == "01" and inode in sockets:  # 01: ESTABLISHED
                counts[sockets[inode]] += 1
    return counts


def test_workers_share_the_port_and_leave_with_the_first(fresh_db_url: str, tmp_path: Path):
    server = ServeProcess(
        "--database-url", fresh_db_url, "--workers", "3", log=tmp_path / "serve.log"
    )
    try:
        assert "3 processes" in "".join(server.output)
        key = server.printed_key
        children = subprocess.run(
            ["pgrep", "-P", str(server.process.pid)], capture_output=True, text=True
        ).stdout.split()
        # Clients that connect as soon as the server says it listens are spread over
        # every process (the others were listening already), and all of them commit.
        host, port = server.url.removeprefix("http://").rsplit(":", 1)
        clients = [http.client.HTTPConnection(host, int(port), timeout=30) for _ in range(30)]
        for client in clients:
            client.connect()
        run_id = str(uuid.uuid4())
        for index, client in enumerate(clients, start=1):
            body = {"run_id": run_id, "step_index": index, "tool_name": "t", "tool_input": {}}
            client.request("POST", "/v1/ingest/agent/steps", json.dumps(body),
                           {"Authorization": f"Bearer {key}"})  # fmt: skip
            assert client.getresponse().status == 200
        held = _connections_by_process([str(server.process.pid), *children], int(port))
        for client in clients:
            client.close()
        assert sum(1 for count in held.values() if count) == 3, held  # (a child may not serve)
        with psycopg.connect(fresh_db_url) as conn:
            assert (
                conn.execute(
                    "SELECT count(*) FROM agent_steps WHERE run_id = %s", (run_id,)
                ).fetchone()[0]
                == 30
            )
    finally:
        server.process.kill()  # kill -9 of the first process…
        server.process.wait()
    for _ in range(50):  # …and the others notice and leave
        alive = [
            pid
            for pid in children
            if Path(f"/proc/{pid}").exists()
            and "zombie" not in Path(f"/proc/{pid}/status").read_text().lower()
        ]
        if not alive:
            break
        threading.Event().wait(0.2)
    assert not alive


def test_one_process_of_a_server_judges_runs(fresh_db_url: str, tmp_path: Path) -> None:
    """The verdict keeper runs in one process of a `serve`: with two, each run was
    judged twice, its steps read back and normalised twice, for the same verdict."""
    log = tmp_path / "serve.log"
    server = ServeProcess(
        "--database-url", fresh_db_url, "--workers", "3", "--log-level", "info", log=log
    )
    try:
        for _ in range(50):  # (the last process says so as it starts, like the others)
            keepers = log.read_text().count("judges the runs' verdicts")
            if keepers:
                break
            threading.Event().wait(0.1)
        threading.Event().wait(0.5)
        assert log.read_text().count("judges the runs' verdicts") == 1, log.read_text()
    finally:
        server.stop()


def test_a_second_server_on_a_busy_port_refuses_to_start(
    fresh_db_url: str, db_url: str, tmp_path: Path
) -> None:
    """With SO_REUSEPORT the kernel would let a second keelwave (or anything) share the
    port and split requests between two databases at random: one line, exit 1."""
    first = ServeProcess(
        "--database-url", fresh_db_url, "--workers", "2", log=tmp_path / "first.log"
    )
    try:
        port = first.url.rsplit(":", 1)[1]
        for workers in ("2", "1"):
            second = keelwave(
                "serve", "--port", port, "--database-url", db_url, "--workers", workers,
                "--data-dir", str(tmp_path / f"other-{workers}"), timeout=60,
            )  # fmt: skip
            assert second.returncode == 1, second.stdout + second.stderr
            lines = second.stderr.strip().splitlines()
            assert len(lines) == 1 and port in lines[0] and "in use" in lines[0], second.stderr
            assert "Traceback" not in second.stderr and "kw_" not in second.stdout
    finally:
        first.stop()


def test_a_second_server_on_the_same_data_directory_refuses_to_start(tmp_path: Path) -> None:
    """Two servers on one embedded database: the second would stop it under the first."""
    data_dir = tmp_path / "data"
    first = ServeProcess("--data-dir", str(data_dir), "--workers", "1", log=tmp_path / "1.log")
    try:
        second = keelwave("serve", "--data-dir", str(data_dir), "--port", "0", timeout=60)
        assert second.returncode == 1, second.stdout + second.stderr
        lines = second.stderr.strip().splitlines()
        assert len(lines) == 1 and str(data_dir) in lines[0], second.stderr
        assert str(first.process.pid) in lines[0]
        # The first one is unharmed.
        assert httpx.get(first.url + "/readyz", timeout=10).status_code == 200
    finally:
        first.stop()


@pytest.mark.parametrize(("setting", "loop_module"), [("auto", "uvloop"), ("asyncio", "asyncio")])
def test_the_server_runs_on_the_event_loop_its_setting_names(setting: str, loop_module: str):
    # In a process of its own, as serve runs it: no event loop state left in this one.
    program = (
        "import asyncio\n"
        "from keelwave.cli import server_loop\n"
        "async def main():\n"
        "    print(type(asyncio.get_running_loop()).__module__.split('.')[0])\n"
        f"server_loop.run(main(), {setting!r})\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", program], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == [loop_module]


def test_ctrl_c_while_the_workers_start_stops_cleanly(fresh_db_url: str, tmp_path: Path) -> None:
    """Ctrl+C reaches every process of the terminal's process group. Pressed while the
    workers were still starting, it printed a worker's KeyboardInterrupt traceback and
    "a server process could not start". The first process stops the others itself."""
    log = tmp_path / "serve.log"
    with open(log, "w") as stderr:
        process = subprocess.Popen(
            [sys.executable, "-m", "keelwave.cli", "serve", "--port", "0", "--workers", "3",
             "--database-url", fresh_db_url],
            stdout=subprocess.PIPE, stderr=stderr, text=True, start_new_session=True,
        )  # fmt: skip
        try:
            # The first process is up (it judges the runs) and is starting the others.
            deadline = time.monotonic() + 60
            while "judges the runs" not in log.read_text() and time.monotonic() < deadline:
                time.sleep(0.05)
            os.killpg(process.pid, signal.SIGINT)  # what the terminal does on Ctrl+C
            out, _ = process.communicate(timeout=60)
        finally:
            if process.poll() is None:
                os.killpg(process.pid, signal.SIGKILL)
    errors = log.read_text()
    assert "Traceback" not in errors and "could not start" not in errors, errors
    assert process.returncode == 0, errors
    assert "Stopped." in out


def test_a_body_in_an_encoding_the_server_cannot_read_is_one_log_line(
    fresh_db_url: str, tmp_path: Path
) -> None:
    """aiohttp refuses brotli and zstd bodies itself, before any handler, and logged a
    traceback for each: the server's terminal is for the operator, and a client's odd
    header is one line there."""
    server = ServeProcess("--database-url", fresh_db_url, log=tmp_path / "serve.log")
    try:
        key = server.printed_key
        for path, encoding in (("/v1/traces", "br"), ("/v1/ingest/agent/runs", "zstd")):
            answer = httpx.post(
                server.url + path,
                content=b"{}",
                headers={"Authorization": f"Bearer {key}", "Content-Type": "application/json",
                         "Content-Encoding": encoding},
            )  # fmt: skip
            assert answer.status_code == 400, answer.text
    finally:
        code, _ = server.stop()
        server.kill()
    log = server.stderr()
    assert "Traceback" not in log, log
    assert log.count("content-encoding") == 2, log
    assert code == 0
