"""asyncpg against the PG port. asyncpg uses only the extended protocol, always in binary, and sends each
parameter in the type the server's Describe named: before s19 it could run ``SELECT 1`` and nothing more
(``WHERE id = $1`` with an int: "expected str, got int"; a list column: its type introspection was refused and
then hung; an error on Describe: the client waited forever, the ErrorResponse unflushed).

Every call has a deadline (``asyncpg_run``), so a hang fails the test instead of stalling the run.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import struct
from typing import Any

import asyncpg
import pytest

from gateway.pg.types import decode_param, parameter_oid
from gateway.pg.wire import ProtocolError
from tests.gateway.gwfixtures import Http, Shop
from tests.gateway.pg.conftest import Pg, asyncpg_run, http_rows


def test_parameters_are_sent_in_the_types_the_statement_gives_them(pg: Pg, server: Http, shop: Shop) -> None:
    ids = sorted(shop.accounts)[:5]

    async def body(con: asyncpg.Connection) -> list[Any]:
        out = []
        for i in ids:  # id = $1: int8, so asyncpg sends a Python int (it refused to send one as text)
            out.append(tuple(await con.fetchrow("SELECT id, name, balance FROM accounts WHERE id = $1", i)))
        customer = sorted(shop.revenue)[3]
        out.append(await con.fetchval("SELECT orders FROM revenue WHERE customer = $1", customer))
        out.append([r["id"] for r in await con.fetch(
            "SELECT id FROM accounts WHERE id BETWEEN $1 AND $2 ORDER BY id LIMIT $3", ids[0], ids[-1], 3)])
        out.append(await con.fetchval("SELECT $1::DATE + 1", dt.date(2024, 1, 31)))
        out.append(await con.fetchval("SELECT count(*) FROM accounts WHERE balance > $1", 100))
        out.append(await con.fetchval("SELECT count(*) FROM accounts WHERE id <> ALL($1)", ids))
        out.append(await con.fetchval("SELECT typname FROM pg_type WHERE oid = $1", 1016))  # oid: uint32
        # binary TIME and INTERVAL parameters ("not supported; send them as text" before s19)
        out.append(await con.fetchval("SELECT $1::TIME", dt.time(1, 2, 3, 4)))
        out.append(await con.fetchval("SELECT $1::INTERVAL", dt.timedelta(days=-1, seconds=5, microseconds=6)))
        return out

    got = asyncpg_run(pg, body)
    for i, row in zip(ids, got[:5]):
        assert row == (i, shop.accounts[i][0], pytest.approx(shop.accounts[i][1]))
    assert got[5] == shop.revenue[sorted(shop.revenue)[3]][1]
    assert got[6] == sorted(shop.accounts)[:3]
    assert got[7] == dt.date(2024, 2, 1)
    assert got[8] == http_rows(server, "SELECT count(*) FROM accounts WHERE balance > 100")[0][0]
    assert got[9] == len(shop.accounts) - len(ids)
    assert got[10:] == ["_int8", dt.time(1, 2, 3, 4), dt.timedelta(days=-1, seconds=5, microseconds=6)]


def test_list_columns_and_array_parameters(pg: Pg, shop: Shop) -> None:
    """A list column makes asyncpg introspect its type through pg_catalog (after turning JIT off with
    ``SELECT current_setting('jit'), set_config('jit', 'off', false)``); ``= ANY($1)`` binds a list."""
    ids = sorted(shop.accounts)[:4]

    async def body(con: asyncpg.Connection) -> list[Any]:
        return [
            await con.fetchval("SELECT list(id ORDER BY id) FROM accounts WHERE id = ANY($1)", ids),
            await con.fetchval("SELECT list(name ORDER BY id) FROM accounts WHERE id IN ($1,$2)", ids[0], ids[1]),
            await con.fetchval("SELECT [1.5, NULL]::DOUBLE[]"),
            [r[0] for r in await con.fetch("SELECT customer FROM revenue WHERE customer = ANY($1) ORDER BY 1",
                                           ["c01", "c02", "nobody"])],
        ]

    lists, names, doubles, customers = asyncpg_run(pg, body)
    assert lists == ids
    assert names == [shop.accounts[i][0] for i in ids[:2]]
    assert doubles == [1.5, None]
    assert customers == sorted(c for c in ("c01", "c02") if c in shop.revenue)


def test_errors_arrive_without_a_sync_and_keep_their_sqlstate(pg: Pg) -> None:
    """asyncpg sends Parse, Describe, Flush and waits: the ErrorResponse must be flushed then."""
    async def body(con: asyncpg.Connection) -> list[str]:
        names = []
        for sql in ("SELEC 1", "SELECT * FROM no_such_store", "CREATE TABLE t (a int)"):
            try:
                await con.fetch(sql)
            except asyncpg.PostgresError as exc:
                names.append(f"{type(exc).__name__} {exc.sqlstate}")
        try:
            await con.fetchval("SELECT name FROM accounts WHERE id = $1", "not a number")
        except asyncpg.DataError as exc:  # the client checks the value against int8 itself
            names.append(type(exc).__name__)
        names.append(str(await con.fetchval("SELECT 40 + 2")))  # the connection still works
        return names

    assert asyncpg_run(pg, body) == ["PostgresSyntaxError 42601", "UndefinedTableError 42P01",
                              "ReadOnlySQLTransactionError 25006", "DataError", "42"]


def test_transactions_cursors_prepared_statements_and_a_pool(pg: Pg, shop: Shop) -> None:
    ids = sorted(shop.accounts)

    async def body(con: asyncpg.Connection) -> list[Any]:
        out: list[Any] = []
        async with con.transaction(readonly=True, isolation="repeatable_read"):
            cur = await con.cursor("SELECT id FROM accounts ORDER BY id")
            out.append([r[0] for r in await cur.fetch(3)] + [r[0] for r in await cur.fetch(2)])
            out.append([r[0] async for r in con.cursor("SELECT id FROM accounts WHERE id < $1 ORDER BY id",
                                                        ids[10], prefetch=4)])
        stmt = await con.prepare("SELECT name FROM accounts WHERE id = $1")
        out.append(([t.name for t in stmt.get_parameters()], [a.name for a in stmt.get_attributes()]))
        out.append(await stmt.fetchval(ids[1]))
        pool = await asyncpg.create_pool(host=pg.host, port=pg.port, user="iqgate", database="iqgate",
                                         password=pg.token, ssl=False, min_size=1, max_size=1)
        try:
            for i in ids[:2]:  # giving a connection back runs asyncpg's reset: pg_advisory_unlock_all(), RESET ALL
                async with pool.acquire() as pooled:
                    out.append(await pooled.fetchval("SELECT id FROM accounts WHERE id = $1", i))
        finally:
            await pool.close()
        return out

    chunks, below, described, name, *pooled = asyncpg_run(pg, body)
    assert chunks == ids[:5]
    assert below == ids[:10]
    assert described == (["int8"], ["name"])
    assert name == shop.accounts[ids[1]][0]
    assert pooled == ids[:2]


def test_sqlalchemy_on_asyncpg(pg: Pg, server: Http, shop: Shop) -> None:
    """``postgresql+asyncpg``: SQLAlchemy's async engine (what FastAPI services use), with expanding IN and the
    inspector, against the same statements over HTTP."""
    from sqlalchemy import bindparam, inspect, text
    from sqlalchemy.ext.asyncio import create_async_engine

    ids = sorted(shop.accounts)[:4]

    async def main() -> tuple[Any, Any, Any]:
        engine = create_async_engine(f"postgresql+asyncpg://iqgate:{pg.token}@{pg.host}:{pg.port}/iqgate",
                                     connect_args={"ssl": False})
        try:
            async with engine.connect() as con:
                one = (await con.execute(text("SELECT name FROM accounts WHERE id = :i"), {"i": ids[1]})).scalar()
                stmt = text("SELECT id FROM accounts WHERE id IN :ids ORDER BY id").bindparams(
                    bindparam("ids", expanding=True))
                many = [r[0] for r in await con.execute(stmt, {"ids": ids})]
                columns = await con.run_sync(lambda c: [(col["name"], str(col["type"]))
                                                        for col in inspect(c).get_columns("accounts")])
            return one, many, columns
        finally:
            await engine.dispose()

    one, many, columns = asyncio.run(main())
    assert one == shop.accounts[ids[1]][0]
    assert many == ids
    status, _, body = server.sql("DESCRIBE accounts")
    assert status == 200
    assert [name for name, _ in columns] == [row[0] for row in body["rows"]]
    assert columns[0] == ("id", "BIGINT")


@pytest.mark.parametrize(("name", "oid"), [
    ("bigint", 20), ("int", 23), ("text", 25), ("varchar(3)", 1043), ("decimal(10, 2)", 1700), ("oid[]", 1028),
    ("pg_catalog._int8", 1016), ('"pg_catalog"."text"', 25), ("uint", 26), ("timestamptz", 1184),
    ("hugeint", 1700), ("struct(a int)", 25), ("regclass", 25), ("no such type", 25), ("no_such[]", 1009),  # an unknown element is text
])
def test_parameter_types_are_described_with_postgresql_oids(name: str, oid: int) -> None:
    """What Describe tells a client about a parameter whose type the SQL decided (unknown names: text)."""
    assert parameter_oid(name) == oid


def test_binary_time_parameters_out_of_range_are_refused() -> None:
    with pytest.raises(ProtocolError, match="incorrect binary data format for type time"):
        decode_param(struct.pack("!q", 86_400_000_001), 1083, True)
    assert decode_param(struct.pack("!q", 86_400_000_000), 1083, True) == "24:00:00.000000"
