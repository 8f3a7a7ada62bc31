"""The spool directory: events a process could not send before it ended, kept on disk
for the next client that starts with the same directory (opt-in: ``spool_dir``).

Files, one per process that had something left, hold JSON lines
``{"kind": "step", "body": "<the event's JSON text>"}``: the body is kept as
text, byte for byte, because the server fingerprints ``tool_input`` over the
exact bytes it receives. Names say whose events they are:
``keelwave-<ident>-<time>-<pid>-<random>.jsonl``, where ``<ident>`` is a hash
of the endpoint and the API key (never the key itself), so a client only ever
resends what was meant for its own server and project.

Several processes may share a directory, so every step is one atomic rename:

* a file is written under a hidden temporary name, synced, then renamed into
  place, so a reader never sees half a file;
* a client claims a file by renaming it to ``<name>.claimed-<token>`` before
  reading it; of two processes racing for one file, one rename fails, so
  no file is ever resent by two processes;
* a claim is deleted once every event in it is settled (stored, or refused
  for good); a process that exits first writes what is left to a new file
  and then deletes its claims; one that crashes leaves its claims, which are
  taken over once their age (refreshed every minute while held) passes
  ``STALE_CLAIM`` seconds.

The directory is bounded: before a file is written, the oldest files are
deleted (and said so) until all fit in ``max_bytes``.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import secrets
import threading
import time
from collections.abc import Iterator
from pathlib import Path

from keelwave.sdk._delivery import PATHS, Event

log = logging.getLogger("keelwave")

DEFAULT_MAX_BYTES = 32 * 1024 * 1024
STALE_CLAIM = 600.0  # seconds without a refresh after which a claim is a dead process's
REFRESH = 60.0  # how often a live process refreshes the claims it holds
_CLAIMED = ".claimed-"


class Claim:
    """A file this process claimed; deleted once each of its events is settled."""

    def __init__(self, spool: Spool, path: Path, events: list[Event]) -> None:
        self.path = path
        self.events = events
        self._spool = spool
        self._left = len(events)
        self._lock = threading.Lock()
        for event in events:
            event.claim = self
        if not events:
            self.release()

    def settled(self, count: int = 1) -> None:
        with self._lock:
            self._left -= count
            done = self._left == 0
        if done:
            self.release()

    def release(self) -> None:
        self._spool.release(self)


class Spool:
    def __init__(self, directory: str | os.PathLike, endpoint: str, api_key: str,
                 max_bytes: int = DEFAULT_MAX_BYTES) -> None:  # fmt: skip
        self.directory = Path(directory)
        self.max_bytes = max_bytes
        self._ident = hashlib.sha256(f"{endpoint}\n{api_key}".encode()).hexdigest()[:16]
        self._held: list[Claim] = []
        self._refreshed = time.monotonic()

    # -- claiming and resending ---------------------------------------------------

    def claims(self) -> Iterator[Claim]:
        """Claim this client's files one at a time (oldest first) and read them."""
        try:
            paths = sorted(self.directory.glob(f"keelwave-{self._ident}-*"))
        except OSError:
            return
        now = time.time()
        for temporary in self.directory.glob(f".keelwave-{self._ident}-*.tmp"):
            if now - _mtime(temporary, now) > STALE_CLAIM:  # a write cut short by a crash
                _unlink(temporary)
        for path in paths:
            if _CLAIMED in path.name:  # someone else's, unless they died long ago
                base, _, _ = path.name.partition(_CLAIMED)
                if now - _mtime(path, now) < STALE_CLAIM:
                    continue
            elif path.suffix == ".jsonl":
                base = path.name
            else:
                continue
            claimed = path.with_name(f"{base}{_CLAIMED}{os.getpid()}-{secrets.token_hex(4)}")
            try:
                os.rename(path, claimed)  # atomic: of two claimants, one fails here
                os.utime(claimed)  # the claim's age starts now
            except OSError:
                continue
            claim = Claim(self, claimed, self._read(claimed))
            if claim.events:
                yield claim  # the caller holds it, or gives it back

    def _read(self, path: Path) -> list[Event]:
        events, bad = [], 0
        try:
            lines = path.read_bytes().splitlines()
        except OSError as error:
            log.warning("keelwave: cannot read the spool file %s: %s", path, error)
            return []
        for line in lines:
            try:
                item = json.loads(line)
                kind, body = item["kind"], item["body"]
            except (ValueError, KeyError, TypeError):
                bad += 1
                continue
            if kind in PATHS and isinstance(body, str):
                events.append(Event(kind, body))
            else:
                bad += 1
        if bad:
            log.warning("keelwave: %d lines of the spool file %s are not events; skipped",
                        bad, path)  # fmt: skip
        return events

    def refresh(self) -> None:
        """Tell other processes the claims held here are alive (at most once a minute)."""
        if time.monotonic() - self._refreshed < REFRESH:
            return
        self._refreshed = time.monotonic()
        for claim in list(self._held):
            try:
                os.utime(claim.path)
            except OSError:
                pass

    def hold(self, claim: Claim) -> None:
        self._held.append(claim)

    def give_back(self, claim: Claim) -> None:
        """Unclaim a file read but never resent (the client closed meanwhile)."""
        base, _, _ = claim.path.name.partition(_CLAIMED)
        try:
            os.rename(claim.path, claim.path.with_name(base))
        except OSError:
            pass

    @property
    def holding(self) -> bool:
        return bool(self._held)

    def release(self, claim: Claim) -> None:
        """Delete a claimed file: its events are settled, or written to a new file."""
        if claim in self._held:
            self._held.remove(claim)
        _unlink(claim.path)  # gone already if taken over after all, or deleted to make room

    def release_all(self) -> None:
        for claim in list(self._held):
            claim.release()

    def forget(self) -> None:
        """In a forked child: the claims are the parent's to finish."""
        self._held = []

    # -- writing --------------------------------------------------------------

    def write(self, events: list[Event]) -> Path | None:
        """Write ``events`` (oldest first) to a new file of their own; its path, or None.

        What does not fit in ``max_bytes`` even alone is cut from the oldest end,
        as the oldest files are the first deleted to make room.
        """
        lines = [(json.dumps({"kind": e.kind, "body": e.text()}) + "\n").encode() for e in events]
        size, first = 0, len(lines)
        while first > 0 and size + len(lines[first - 1]) <= self.max_bytes:
            first -= 1
            size += len(lines[first])
        if first:
            log.warning("keelwave: %d events do not fit in spool_max_bytes=%d; the oldest %d "
                        "are left out", len(lines), self.max_bytes, first)  # fmt: skip
        if first == len(lines):
            return None
        name = f"keelwave-{self._ident}-{time.time_ns()}-{os.getpid()}-{secrets.token_hex(4)}"
        path = self.directory / f"{name}.jsonl"
        temporary = self.directory / f".{name}.tmp"
        try:
            self.directory.mkdir(mode=0o700, parents=True, exist_ok=True)
            self._make_room(size)
            # 0o600: events hold the agent's inputs and outputs.
            descriptor = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            with os.fdopen(descriptor, "wb") as file:
                file.writelines(lines[first:])
                file.flush()
                os.fsync(file.fileno())
            os.replace(temporary, path)
        except OSError as error:
            log.warning("keelwave: cannot write the spool file %s: %s", path, error)
            _unlink(temporary)
            return None
        return path

    def _make_room(self, incoming: int) -> None:
        """Delete the oldest spool files (anyone's) until ``incoming`` more bytes fit."""
        held = {claim.path for claim in self._held}
        files = []
        for path in self.directory.glob("keelwave-*"):
            if path in held:
                continue
            try:
                status = path.stat()
            except OSError:
                continue
            files.append((status.st_mtime, path, status.st_size))
        total = sum(size for _, _, size in files) + incoming
        if total <= self.max_bytes:
            return
        deleted, freed = 0, 0
        for _, path, size in sorted(files):
            if total <= self.max_bytes:
                break
            if not _unlink(path):
                continue
            total, deleted, freed = total - size, deleted + 1, freed + size
        log.warning("keelwave: the spool directory %s is over spool_max_bytes=%d; deleted the "
                    "oldest %d file(s), %d bytes of events never sent", self.directory,
                    self.max_bytes, deleted, freed)  # fmt: skip


def _mtime(path: Path, default: float) -> float:
    try:
        return path.stat().st_mtime
    except OSError:
        return default


def _unlink(path: Path) -> bool:
    try:
        path.unlink()
    except OSError:
        return False
    return True
