"""One ingest writer connection on Citus: a project's batch in one transaction on its shard.

The writer (writer.py) hands a Citus lane the requests of one project at a time
(``PER_PROJECT``), so each transaction names one project, and Citus routes all
of it to the worker holding that project's shard: a single-node transaction,
committed there, with no two-phase commit. Acknowledged still means committed:
the writer answers the requests after this returns.

The transaction is one script (pgscript.py), as on one PostgreSQL: row locks,
the rows into the distributed staging tables (as VALUES when few, else binary
COPY, which Citus sends on to the shard), then citus/statements.py's statements,
and COMMIT. No statement is prepared: the project is written into each as a
literal, which is what lets Citus prune to one shard while it plans. The
planner settings of the plain lane are not used either: the coordinator plans
little (a routed statement is planned again on the worker, by its own planner).
Finishes are not written here (the class says no ``FINISHES``): the finish
routes commit them on the pool instead (lifecycle.py).
"""

from __future__ import annotations

import logging
import uuid

import psycopg

from keelwave.server.store import pgscript, statements
from keelwave.server.store.citus import statements as citus_statements
from keelwave.server.store.lane import STAGES, Lane, Rows, _as_values, _kinds, _runs_touched
from keelwave.server.store.pgscript import Script, copy_data

log = logging.getLogger("keelwave.writer")


class CitusLane:
    """A writer connection to a Citus node (the coordinator, or a worker with metadata)."""

    # The writer gives this lane one project's requests at a time (writer.py).
    PER_PROJECT = True

    def __init__(
        self, conninfo: str, connect_timeout: int, transaction_pooling: bool = False
    ) -> None:
        self._conninfo = conninfo
        self._connect_timeout = connect_timeout
        # Nothing lives in the session here (no TEMP tables, nothing prepared), so a
        # pooler in transaction mode changes nothing.
        self.transaction_pooling = transaction_pooling
        self._conn: psycopg.AsyncConnection | None = None

    async def commit(self, batch: list[Rows]) -> None:
        """Write the batch, one transaction per project in it (the writer sends one)."""
        conn = await self._connection()
        if not pgscript.literals_are_safe(conn):
            log.warning("writer session lost standard_conforming_strings/UTF-8; restoring")
            for setting in pgscript.SESSION:
                await conn.execute(setting)
        for project, rows in _by_project(batch).items():
            try:
                await self._script(conn, project, rows).run(conn)
            except BaseException:
                await self._roll_back()
                raise

    def _script(
        self, conn: psycopg.AsyncConnection, project: uuid.UUID, batch: list[Rows]
    ) -> Script:
        script = Script()
        script.add(statements.BEGIN)
        runs = _runs_touched(batch)
        script.add(citus_statements.lock_runs(project, runs))
        script.add(citus_statements.lock_run_rows(project, runs))
        filled = []
        for position, stage, columns, _ in STAGES:
            rows = [row for rows in batch for row in rows[position]]
            if not rows:
                continue
            filled.append(stage)
            numbered = [(seq, *row) for seq, row in enumerate(rows)]
            insert = statements.insert_sql(stage, columns)
            if not _as_values(script, insert, _kinds(columns, seq=True), numbered):
                data = copy_data(conn, statements.copy_types(columns), numbered)
                script.copy(statements.copy_sql(stage, columns), data)
        for sql in citus_statements.move_in(project, filled):
            script.add(sql)
        script.add("COMMIT")
        return script

    _roll_back = Lane._roll_back  # the same connection handling: _conn, drop()

    async def analyze(self, tables: list[str]) -> None:
        # Citus analyses shards on their workers; the coordinator's statistics of a
        # distributed table are not what routed statements are planned with.
        return

    async def _connection(self) -> psycopg.AsyncConnection:
        if self._conn is None or self._conn.closed:
            conn = await psycopg.AsyncConnection.connect(
                self._conninfo,
                autocommit=True,
                connect_timeout=self._connect_timeout,
                prepare_threshold=None,
                client_encoding="UTF8",
            )
            Lane._register_dumpers(conn)  # bytea and JSON as sent, by the C dumper
            for setting in pgscript.SESSION:
                await conn.execute(setting)
            self._conn = conn
        return self._conn

    drop = Lane.drop


def _by_project(batch: list[Rows]) -> dict[uuid.UUID, list[Rows]]:
    """The batch's requests by project (a request's rows are all of one project)."""
    grouped: dict[uuid.UUID, list[Rows]] = {}
    for rows in batch:
        grouped.setdefault(project_of(rows), []).append(rows)
    return grouped


def project_of(rows: Rows) -> uuid.UUID:
    """The project of a request's rows (project_id is every row's first column)."""
    return next(part[0][0] for part in rows if part)
