"""What only one ``keelwave serve`` may hold: its port, and its data directory.

Server processes share their port with SO_REUSEPORT, so that the kernel
spreads connections over them. The kernel lets any process of the same user
join such a port, though, and a second keelwave started on it would quietly
take half the requests into another database. So the first process checks,
before it starts anything, that nobody holds the port: a socket bound without
SO_REUSEPORT cannot share a port with anyone. Its own workers bind only later.

The embedded database is shared by every keelwave command on its data
directory (``keys create`` while ``serve`` runs), but two *servers* on it
would stop it under each other; ``serve.lock`` there is held for the server's
life, and the kernel drops it if the process dies.
"""

from __future__ import annotations

import errno
import fcntl
import os
import socket
from pathlib import Path
from typing import IO


class Taken(Exception):
    """The port or the data directory is another server's; the message says which."""


def check_port_free(host: str, port: int) -> None:
    """Raise Taken if anything listens on ``host:port`` (port 0 is always free)."""
    if port == 0:
        return
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as probe:
        # As aiohttp binds (SO_REUSEADDR: a port in TIME_WAIT is free), but without
        # SO_REUSEPORT, which would let the probe share a port held with it.
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind((host, port))
        except OSError as error:
            if error.errno == errno.EADDRINUSE:
                raise Taken(
                    f"port {port} on {host} is in use (another keelwave serve, or another "
                    "program): stop it, or choose another --port"
                ) from None
            raise


def claim_data_dir(data_dir: Path) -> IO[str]:
    """Hold ``data_dir/serve.lock`` for as long as the returned file stays open."""
    data_dir.mkdir(parents=True, exist_ok=True)
    handle = open(data_dir / "serve.lock", "a+")  # noqa: SIM115 (held until exit)
    try:
        fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        handle.seek(0)
        holder = handle.read().strip() or "unknown"
        handle.close()
        raise Taken(
            f"another keelwave serve (pid {holder}) is using the data directory {data_dir}: "
            "stop it, or give this one another --data-dir"
        ) from None
    handle.seek(0)
    handle.truncate()
    handle.write(f"{os.getpid()}\n")
    handle.flush()
    return handle
