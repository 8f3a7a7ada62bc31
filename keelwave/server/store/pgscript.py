"""A transaction sent as one script: many statements and COPYs, few round trips.

psycopg sends one statement at a time, or several in a pipeline, but a COPY
can be in neither: COPY is a round trip of its own to start and another to
finish, so a transaction that COPYs between two pipelines costs four. In
PostgreSQL's simple query protocol, one query string may hold many
statements, COPYs among them: the server runs them in order and, at each
COPY, asks for its data. A :class:`Script` uses that. Its round trips are
one per COPY plus one, and PostgreSQL works through the whole transaction
without waiting for this process, whose event loop is busy with requests.

The price: the simple protocol takes no parameters, so values are written
into the script's text: the few a script carries (run ids, counts, lock keys)
by :func:`literal`, which accepts only integers and UUIDs, and a few rows by
:meth:`Script.values`, which quotes the kinds of value ingest produces (see
:func:`quote`; the connection must use standard_conforming_strings and UTF-8,
see :data:`SESSION`). Many rows travel in COPY data. And PostgreSQL plans
every statement every time, unless the statement was prepared on the
connection (:func:`prepare`): the script then EXECUTEs it.

An error stops the script where it happened; PostgreSQL skips the rest of
the string (a COPY after the error asks for no data), and the transaction,
begun in the script, stays aborted until the caller rolls it back.
"""

from __future__ import annotations

import asyncio
import functools
import re
import uuid
from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime

import msgspec
import psycopg
from psycopg import pq
from psycopg.copy import AsyncWriter

COPY_IN = pq.ExecStatus.COPY_IN
FATAL_ERROR = pq.ExecStatus.FATAL_ERROR
TUPLES_OK = pq.ExecStatus.TUPLES_OK

# What :func:`quote` relies on: a quote is escaped by doubling it, a backslash is
# an ordinary character, and no multibyte character contains a quote byte.
SESSION = ("SET standard_conforming_strings = on", "SET client_encoding = 'UTF8'")


def literals_are_safe(conn: psycopg.AsyncConnection) -> bool:
    """Whether the session still has what :data:`SESSION` set, so quote()'s literals
    mean what they say. Free to ask: PostgreSQL reports both settings to the client
    whenever they change (ParameterStatus), whoever changed them."""
    info = conn.info  # (psycopg's ConnectionInfo answers text, the raw pgconn bytes)
    return (
        info.parameter_status("standard_conforming_strings") == "on"
        and info.parameter_status("client_encoding") == "UTF8"
    )


class Unquotable(ValueError):
    """A value :func:`quote` will not write into SQL text (send it by COPY instead)."""


def _text(value: str) -> str:
    if "\x00" in value:
        raise Unquotable("NUL in text")
    return "'" + value.replace("'", "''") + "'"


def quote_json(value: msgspec.Raw | bytes | str | None) -> str:
    """A JSON document, given as its text or its UTF-8 bytes, as a literal for a json column."""
    if value is None:
        return "NULL"
    if isinstance(value, str):
        return _text(value)
    try:
        return _text(bytes(value).decode("utf-8"))
    except UnicodeDecodeError as error:
        raise Unquotable("JSON that is not UTF-8") from error


_QUOTE = {
    type(None): lambda value: "NULL",
    str: _text,
    int: str,
    bool: lambda value: "true" if value else "false",
    float: lambda value: f"'{value!r}'",  # quoted: inf and nan are words
    uuid.UUID: lambda value: f"'{value}'",
    datetime: lambda value: f"'{value.isoformat()}'",
    bytes: lambda value: f"'\\x{value.hex()}'",
    msgspec.Raw: quote_json,
    list: lambda value: f"ARRAY[{', '.join(map(quote, value))}]::text[]" if value else "'{}'",
}


def quote(value: object) -> str:
    """``value`` as a SQL literal: None, text, numbers, UUIDs, timestamps, bytea,
    JSON as sent (msgspec.Raw) and lists of text.

    psycopg can do this (ClientCursor.mogrify) for any type, but at 10-25 µs a
    row it cost more than the round trip it saves; this costs about 3. Any
    other type is Unquotable: its rows go by COPY, where psycopg adapts it.
    """
    try:
        return _QUOTE[type(value)](value)
    except KeyError:
        raise Unquotable(f"no SQL literal for {type(value).__name__}") from None


def literal(value: int | Iterable[int] | Iterable[uuid.UUID]) -> str:
    """A SQL literal for an integer, or an array literal for integers or UUIDs."""
    if isinstance(value, int) and not isinstance(value, bool):
        return str(value)
    items = []
    for item in value:
        if not isinstance(item, int | uuid.UUID) or isinstance(item, bool):
            raise TypeError(f"no literal for {type(item).__name__} in a script")
        items.append(str(item))
    return f"'{{{','.join(items)}}}'"


def inline(sql: str, params: Sequence | Mapping) -> str:
    """``sql`` with its %s / %(name)s placeholders replaced by literals of ``params``."""
    if isinstance(params, Mapping):
        return sql % {name: literal(value) for name, value in params.items()}
    return sql % tuple(literal(value) for value in params)


_NAMED = re.compile(r"%\((\w+)\)s")


@functools.cache
def _parameters(sql: str) -> tuple[str, ...] | int:
    """The names of ``sql``'s %(name)s placeholders in order, or how many %s it has."""
    names = tuple(dict.fromkeys(_NAMED.findall(sql)))
    return names or sql.count("%s")


async def prepare(conn: psycopg.AsyncConnection, statements: dict[str, str]) -> dict[str, str]:
    """PREPARE each SQL text of ``statements`` (name -> sql) on ``conn``, its
    placeholders becoming $1, $2, …; return sql -> name, for :class:`Script`.

    (A connection's prepared statements last until it closes, unless someone
    runs DEALLOCATE ALL: psycopg does when it sees a ROLLBACK it ran itself, so
    scripts roll back on their own, see :meth:`Script.rollback`.)
    """
    for name, sql in statements.items():
        parameters = _parameters(sql)
        if isinstance(parameters, int):
            numbered = sql % tuple(f"${n}" for n in range(1, parameters + 1))
        else:
            numbered = sql % {key: f"${n}" for n, key in enumerate(parameters, start=1)}
        await conn.execute(f"PREPARE {name} AS {numbered}")
    return {sql: name for name, sql in statements.items()}


class _Unused(AsyncWriter):
    """A COPY object needs a writer; :func:`copy_data` takes the formatter's output itself."""

    async def write(self, data: bytes) -> None:
        raise AssertionError("COPY data is taken from the formatter, not written")


def copy_data(
    conn: psycopg.AsyncConnection, types: Sequence[str], rows: Iterable[Sequence]
) -> list[bytes]:
    """``rows`` in PostgreSQL's binary COPY format, in chunks of about 32 kB.

    psycopg formats them (in C), with the connection's dumpers, as its own
    COPY would; the formatter is driven directly, so no coroutine runs per row.
    """
    copy = psycopg.AsyncCopy(conn.cursor(), binary=True, writer=_Unused())
    copy.set_types(types)
    formatter = copy.formatter
    chunks = [chunk for row in rows if (chunk := formatter.write_row(row))]
    chunks.append(formatter.end())
    return chunks


class Script:
    """Statements and COPYs, sent as one query string by :meth:`run`.

    ``prepared`` maps the SQL of statements prepared on the connection to
    their names (what :func:`prepare` returns): those are EXECUTEd.
    """

    def __init__(self, prepared: Mapping[str, str] | None = None) -> None:
        self._prepared = prepared or {}
        self._statements: list[str] = []
        self._copies: list[list[bytes]] = []

    def add(self, sql: str, params: Sequence | Mapping | None = None) -> None:
        name = self._prepared.get(sql)
        if name is None:
            self._statements.append(inline(sql, params) if params else sql)
            return
        parameters = _parameters(sql)
        if isinstance(parameters, tuple):
            params = [params[key] for key in parameters]
        arguments = ", ".join(literal(value) for value in params or ())
        self._statements.append(f"EXECUTE {name}({arguments})" if arguments else f"EXECUTE {name}")

    def values(self, insert: str, kinds: Sequence[str], rows: Iterable[Sequence]) -> None:
        """``insert`` ("INSERT INTO table (columns)") with ``rows`` as its VALUES;
        ``kinds`` are the columns' types (for json ones, bytes are the JSON's text).

        Raises Unquotable (and adds nothing) if a value cannot be written as text.
        """
        quoters = _quoters(tuple(kinds))
        values = ", ".join(
            f"({', '.join([q(value) for q, value in zip(quoters, row, strict=True)])})"
            for row in rows
        )
        self._statements.append(f"{insert} VALUES {values}")

    def copy(self, sql: str, data: list[bytes]) -> None:
        """A COPY ... FROM STDIN statement, and the data to answer it with."""
        self._statements.append(sql)
        self._copies.append(data)

    @staticmethod
    async def rollback(conn: psycopg.AsyncConnection) -> None:
        """Roll back the transaction (without psycopg noticing, see :func:`prepare`)."""
        script = Script()
        script.add("ROLLBACK")
        await script.run(conn)

    async def run(self, conn: psycopg.AsyncConnection, collect: bytes = b"") -> list[bytes]:
        """Send the script, feed its COPYs, read every result; raise the first error.
        Return the values (as text) of every result row of the statements whose
        only column is named ``collect``.

        Errors are psycopg's own classes (a connection failure is an
        OperationalError, bad data a DataError, and so on), as if psycopg
        had run the statements.
        """
        pgconn = conn.pgconn
        waiter = _Waiter(pgconn.socket)
        pgconn.send_query(";\n".join(self._statements).encode())
        await waiter.flushed(pgconn)
        copies = iter(self._copies)
        collected: list[bytes] = []
        error: psycopg.Error | None = None
        while True:
            while pgconn.is_busy():
                await waiter.readable()
                pgconn.consume_input()
            result = pgconn.get_result()
            if result is None:
                break
            if result.status == COPY_IN:
                # (libpq sends in 8 kB pieces as it goes; 0 means its buffer is full)
                for chunk in next(copies):
                    while not pgconn.put_copy_data(chunk):
                        await waiter.writable()
                pgconn.put_copy_end(None)
                await waiter.flushed(pgconn)
            elif result.status == TUPLES_OK:
                if collect and result.nfields == 1 and result.fname(0) == collect:
                    collected += [result.get_value(row, 0) for row in range(result.ntuples)]
            elif result.status == FATAL_ERROR and error is None:
                error = psycopg.errors.error_from_result(result, encoding=conn.info.encoding)
        if error is not None:
            raise error
        return collected


@functools.cache
def _quoters(kinds: tuple[str, ...]) -> tuple:
    return tuple(quote_json if kind == "json" else quote for kind in kinds)


class _Waiter:
    """Waits on the connection's socket in the running event loop."""

    def __init__(self, fd: int) -> None:
        self._fd = fd
        self._loop = asyncio.get_running_loop()

    async def readable(self) -> None:
        await self._wait(self._loop.add_reader, self._loop.remove_reader)

    async def writable(self) -> None:
        await self._wait(self._loop.add_writer, self._loop.remove_writer)

    async def flushed(self, pgconn: pq.abc.PGconn) -> None:
        """Wait until libpq has sent everything it buffered."""
        while pgconn.flush():
            await self.writable()

    async def _wait(self, add, remove) -> None:
        ready = self._loop.create_future()
        add(self._fd, _set_done, ready)
        try:
            await ready
        finally:
            remove(self._fd)


def _set_done(future: asyncio.Future) -> None:
    if not future.done():
        future.set_result(None)
