"""A real PgBouncer (Debian's ``pgbouncer`` package) in front of the test PostgreSQL,
on a free port, in session or transaction pooling mode."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import tempfile
import time
from pathlib import Path
from urllib.parse import urlsplit

from serve_process import free_port

PGBOUNCER = shutil.which("pgbouncer") or "/usr/sbin/pgbouncer"


def available() -> bool:
    return os.path.exists(PGBOUNCER)


class PgBouncer:
    """``pool_size`` server sessions shared by every client: small, so that the
    writer's lanes, the query pool and the key listener really share sessions."""

    def __init__(self, postgres_url: str, mode: str, pool_size: int = 4) -> None:
        target = urlsplit(postgres_url)
        self.port = free_port()
        self.user = target.username or "postgres"
        # Its own folder in /tmp: pytest's tmp_path is private to root, and PgBouncer
        # runs as postgres.
        self.folder = folder = Path(tempfile.mkdtemp(prefix="kw_pgbouncer_"))
        (folder / "users.txt").write_text(f'"{self.user}" ""\n')
        config = folder / "pgbouncer.ini"
        config.write_text(
            "[databases]\n"
            f"* = host={target.hostname} port={target.port or 5432}\n"
            "[pgbouncer]\n"
            "listen_addr = 127.0.0.1\n"
            f"listen_port = {self.port}\n"
            "unix_socket_dir =\n"
            "auth_type = trust\n"
            f"auth_file = {folder / 'users.txt'}\n"
            f"pool_mode = {mode}\n"
            f"default_pool_size = {pool_size}\n"
            "max_client_conn = 500\n"
            f"logfile = {folder / 'pgbouncer.log'}\n"
            f"pidfile = {folder / 'pgbouncer.pid'}\n"
            "ignore_startup_parameters = extra_float_digits,options\n"
        )
        command = [PGBOUNCER, str(config)]
        if os.geteuid() == 0:  # PgBouncer refuses to run as root
            shutil.chown(folder, "postgres")
            for path in folder.iterdir():
                shutil.chown(path, "postgres")
            command[1:1] = ["-u", "postgres"]
        self.process = subprocess.Popen(
            command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True
        )
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"pgbouncer exited: {self.process.stderr.read()}{self.log()}")
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=0.2):
                    return
            except OSError:
                time.sleep(0.05)
        self.stop()
        raise RuntimeError(f"pgbouncer did not listen on {self.port}: {self.log()}")

    def url(self, database: str) -> str:
        return f"postgresql://{self.user}@127.0.0.1:{self.port}/{database}"

    def log(self) -> str:
        path = self.folder / "pgbouncer.log"
        return path.read_text() if path.exists() else ""

    def stop(self) -> None:
        self.process.terminate()
        try:
            self.process.wait(timeout=5)
        except subprocess.TimeoutExpired:
            self.process.kill()
        shutil.rmtree(self.folder, ignore_errors=True)
