"""Run `keelwave serve` as a real subprocess and wait until it listens."""

from __future__ import annotations

import os
import queue
import re
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

LISTENING = re.compile(r"keelwave listening on (http://\S+)")
KEY = re.compile(r"\b(kw_[A-Za-z0-9_-]{40,})\b")


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def keelwave(
    *args: str, env: dict | None = None, timeout: float = 120
) -> subprocess.CompletedProcess:
    """Run a keelwave command the way a user would, from the installed entry point."""
    return subprocess.run(
        [sys.executable, "-m", "keelwave.cli", *args],
        capture_output=True,
        text=True,
        env={**os.environ, **(env or {})},
        timeout=timeout,
    )


class ServeProcess:
    def __init__(
        self, *args: str, env: dict | None = None, log: Path | None = None, port: int | None = 0
    ) -> None:
        self.stderr_path = log
        port_args = ["--port", str(port)] if port is not None else []
        self.process = subprocess.Popen(
            [sys.executable, "-m", "keelwave.cli", "serve", *port_args, *args],
            stdout=subprocess.PIPE,
            stderr=open(log, "w") if log else subprocess.DEVNULL,  # noqa: SIM115
            text=True,
            env={**os.environ, **(env or {})},
        )
        self.output: list[str] = []
        self.url = self._wait_until_listening()

    def _wait_until_listening(self, timeout: float = 120) -> str:
        # A thread reads stdout line by line, so a line is seen as soon as it is printed.
        self._lines: queue.Queue[str | None] = queue.Queue()
        threading.Thread(target=self._pump, daemon=True).start()
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                line = self._lines.get(timeout=1)
            except queue.Empty:
                continue
            if line is None:
                break
            self.output.append(line)
            match = LISTENING.search(line)
            if match:
                return match.group(1)
        self.process.kill()
        raise RuntimeError(f"keelwave serve did not start:\n{''.join(self.output)}{self.stderr()}")

    @property
    def printed_key(self) -> str | None:
        match = KEY.search("".join(self.output))
        return match.group(1) if match else None

    def stderr(self) -> str:
        return self.stderr_path.read_text() if self.stderr_path else ""

    def _pump(self) -> None:
        for line in self.process.stdout:
            self._lines.put(line)
        self._lines.put(None)

    def stop(self, signum: int = signal.SIGTERM, timeout: float = 60) -> tuple[int, str]:
        """Send a signal, wait for the exit; return the exit code and what it printed since."""
        self.process.send_signal(signum)
        self.process.wait(timeout=timeout)
        rest = []
        while (line := self._lines.get(timeout=timeout)) is not None:
            rest.append(line)
        self.output.extend(rest)
        return self.process.returncode, "".join(rest)

    def kill(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait()
