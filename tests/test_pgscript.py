"""Scripts: a transaction of statements and COPYs sent as one query string."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime

import msgspec
import psycopg
import pytest

from keelwave.server.store.pgscript import (
    SESSION,
    Script,
    Unquotable,
    copy_data,
    literal,
    literals_are_safe,
    prepare,
)


@pytest.fixture
async def conn(db_url: str):
    async with await psycopg.AsyncConnection.connect(db_url, autocommit=True) as conn:
        await conn.execute("CREATE TEMP TABLE t (id uuid, n int, note text)")
        yield conn


def rows(conn: psycopg.AsyncConnection, items: list[tuple]) -> list[bytes]:
    return copy_data(conn, ("uuid", "int4", "text"), items)


async def stored(conn: psycopg.AsyncConnection) -> list[tuple]:
    cur = await conn.execute("SELECT n, note FROM t ORDER BY n")
    return await cur.fetchall()


async def test_statements_and_copies_run_in_order_in_one_transaction(conn) -> None:
    ids = [uuid.uuid4() for _ in range(3)]
    script = Script()
    script.add("BEGIN")
    script.copy("COPY t FROM STDIN (FORMAT BINARY)", rows(conn, [(ids[0], 1, "first")]))
    script.add("UPDATE t SET note = note || ' updated' WHERE id = ANY(%s::uuid[])", ([ids[0]],))
    many = [(ids[1], n, "tab\tand\nnewline 'quoted'") for n in range(2, 3000)]
    script.copy("COPY t FROM STDIN (FORMAT BINARY)", rows(conn, many))  # several chunks
    script.add("COMMIT")
    await script.run(conn)
    result = await stored(conn)
    assert result[0] == (1, "first updated")
    assert len(result) == 2999
    assert result[-1] == (2999, "tab\tand\nnewline 'quoted'")
    assert conn.info.transaction_status == psycopg.pq.TransactionStatus.IDLE


async def test_an_error_stops_the_script_and_is_raised_as_psycopg_would(conn) -> None:
    script = Script()
    script.add("BEGIN")
    script.copy("COPY t FROM STDIN (FORMAT BINARY)", rows(conn, [(uuid.uuid4(), 1, "kept?")]))
    script.add("SELECT 1 / (SELECT count(*) - 1 FROM t)")  # division by zero
    script.copy("COPY t FROM STDIN (FORMAT BINARY)", rows(conn, [(uuid.uuid4(), 2, "never")]))
    script.add("COMMIT")
    with pytest.raises(psycopg.errors.DivisionByZero) as caught:
        await script.run(conn)
    assert caught.value.diag.message_primary == "division by zero"
    assert conn.info.transaction_status == psycopg.pq.TransactionStatus.INERROR
    await Script.rollback(conn)
    assert await stored(conn) == []
    await conn.execute("SELECT 1")  # the connection is usable again


async def test_bad_copy_data_is_a_data_error(conn) -> None:
    script = Script()
    script.add("BEGIN")
    script.copy("COPY t (note) FROM STDIN (FORMAT BINARY)", [b"not a binary copy"])
    with pytest.raises(psycopg.DataError):
        await script.run(conn)
    await Script.rollback(conn)


async def test_prepared_statements_are_executed_with_literal_arguments(conn) -> None:
    ids = [uuid.uuid4(), uuid.uuid4()]
    insert = "INSERT INTO t SELECT id, %(n)s, 'prepared' FROM unnest(%(ids)s::uuid[]) AS id"
    count = "INSERT INTO t VALUES (NULL, %s, (SELECT count(*)::text FROM t))"
    names = await prepare(conn, {"kw_test_insert": insert, "kw_test_count": count})
    script = Script(names)
    script.add(insert, {"ids": ids, "n": 7})
    script.add(count, (8,))
    await script.run(conn)
    assert await stored(conn) == [(7, "prepared"), (7, "prepared"), (8, "2")]


def test_literals_are_only_made_of_integers_and_uuids() -> None:
    run = uuid.UUID(int=1)
    assert literal(5) == "5"
    assert literal([1, -2]) == "'{1,-2}'"
    assert literal([run]) == "'{00000000-0000-0000-0000-000000000001}'"
    with pytest.raises(TypeError, match="str"):
        literal(["'); DROP TABLE agent_steps; --"])
    with pytest.raises(TypeError):
        literal(True)


async def test_values_written_as_text_come_back_exactly(conn) -> None:
    """Rows written into the script's text: quotes, backslashes, Unicode, JSON as sent,
    every byte value, infinities, microseconds and arrays survive the trip."""
    await conn.execute(
        "CREATE TEMP TABLE v (t text, j json, b bytea, f float8, ts timestamptz, tags text[],"
        " u uuid, n int8, missing text)"
    )
    nasty = "it's a \\'trap\\' -- ); DROP TABLE v; \n\t naïve 🙂 {\"x\"}"
    sent = (
        nasty,
        msgspec.Raw(b'{"q": "it\'s \\\\ \\"quoted\\"", "n": [1, 2.50]}'),
        bytes(range(256)),
        float("-inf"),
        datetime(2026, 11, 30, 8, 0, 0, 123456, tzinfo=UTC),
        ["a'b", 'c"d', "e,f", "{g}", "h\\i", ""],
        uuid.uuid4(),
        -(2**62),
        None,
    )
    script = Script()
    script.values(
        "INSERT INTO v",
        ["text", "json", "bytea", "float8", "timestamptz", "text[]", "uuid", "int8", "text"],
        [sent, sent],  # fmt: skip
    )
    await script.run(conn)
    cur = await conn.execute("SELECT t, j::text, b, f, ts, tags, u, n, missing FROM v")
    for row in await cur.fetchall():
        assert row == (nasty, bytes(sent[1]).decode(), *sent[2:])


def test_what_cannot_be_written_as_text_is_refused() -> None:
    script = Script()
    with pytest.raises(Unquotable):
        script.values("INSERT INTO v", ["text"], [("a\x00b",)])
    with pytest.raises(Unquotable):
        script.values("INSERT INTO v", ["json"], [(b'"\xff"',)])
    with pytest.raises(Unquotable, match="object"):
        script.values("INSERT INTO v", ["text"], [(object(),)])


async def test_a_session_with_the_settings_literals_need_is_seen_as_safe(conn) -> None:
    """The writer checks this before every flush; a check that never passed made every
    flush log a warning and set the session again (two round trips)."""
    for setting in SESSION:
        await conn.execute(setting)
    assert literals_are_safe(conn)
    await conn.execute("SET standard_conforming_strings = off")
    assert not literals_are_safe(conn)
