"""Database errors that retrying will not cure, told apart from those it will.

A dropped connection or a restart passes: the client is told 503 and retries.
A full disk, a read-only database, a missing privilege or extension, a limit
such as TimescaleDB's decompression cap: these fail every attempt until an
operator acts. Answering them as "unavailable, retry shortly" hides them, so
they get their own error code, one log line naming the cause, and /readyz
says not ready while ingest cannot commit.
"""

from __future__ import annotations

import logging

import psycopg

log = logging.getLogger("keelwave.database")

# SQLSTATE -> what it means for an operator.
CAUSES = {
    "53100": "the database's disk is full",
    "53400": "a limit configured in the database was exceeded",
    "42501": "the database user lacks a privilege keelwave needs",
    "25006": "the database is read-only (a standby, or default_transaction_read_only)",
    "58P01": "a file the database needs is missing (an extension not installed?)",
    "58P02": "a file the database needs already exists",
    "42883": "a database function is missing (an extension not installed?)",
    "3D000": "the database does not exist",
    "28000": "the database refused the login",
    "28P01": "the database refused the password",
}


def cause(error: BaseException) -> str | None:
    """What an operator must fix, if ``error`` will not pass by retrying; else None."""
    if not isinstance(error, psycopg.Error):
        return None
    state = error.sqlstate
    if state == "42P01" and "kw_" not in str(error):  # a table of the schema (not a temp one)
        return "a keelwave table is missing (run `keelwave migrate`)"
    return CAUSES.get(state or "")


class Reporter:
    """Logs each cause once (not once per request), and remembers the current one."""

    def __init__(self) -> None:
        self._logged: set[str] = set()
        self.current: str | None = None

    def refused(self, what: str, error: psycopg.Error) -> str:
        reason = cause(error) or "the database refused the write"
        primary = error.diag.message_primary or str(error).splitlines()[0]
        text = f"{reason}: {primary} (SQLSTATE {error.sqlstate})"
        self.current = f"{what} cannot commit: {text}"
        if text not in self._logged:
            self._logged.add(text)
            log.error("%s; this will not pass by retrying, until it is fixed", self.current)
        return text

    def recovered(self) -> None:
        if self.current is not None:
            log.info("the database accepts writes again (it was: %s)", self.current)
            self.current = None
            self._logged.clear()
