"""Answers over Flight SQL equal the HTTP JSON answers, for every type and every store kind.

The real ADBC Flight SQL driver (what pandas and polars read through) and
pyarrow's FlightClient read the same statements the HTTP face answers; the
JSON rows are the oracle. Arrow carries values JSON cannot (NaN, bytes,
MAP keys of any type), so ``as_json`` turns each Arrow value into the JSON
the HTTP face writes for it — each rule below is one representational
difference, never a different value.
"""

from __future__ import annotations

import base64
import datetime as dt
import math
import threading
from decimal import Decimal
from typing import Any

import pandas as pd
import pyarrow as pa
import pytest

from tests.gateway.flight.conftest import Flight, Raw
from tests.gateway.gwfixtures import Http, Shop

# one expression per type DuckDB answers with (and the types arrow_faithful rewrites)
EVERY_TYPE = [
    "1::TINYINT", "1::SMALLINT", "1::INTEGER", "1::BIGINT", "170141183460469231731687303715884105727::HUGEINT",
    "1::UTINYINT", "1::USMALLINT", "1::UINTEGER", "18446744073709551615::UBIGINT", "7::UHUGEINT",
    "1.5::FLOAT", "1.5::DOUBLE", "'nan'::DOUBLE", "12.345::DECIMAL(10,3)",
    "123456789012345678901234567.89::DECIMAL(38,2)", "true", "'héllo'", "'\\x00\\xff'::BLOB", "DATE '2024-05-01'",
    "TIME '12:34:56.789'", "TIMESTAMP '2024-05-01 12:00:00.123456'", "TIMESTAMPTZ '2024-05-01 12:00:00.5+02'",
    "'12:00:00+05'::TIMETZ", "INTERVAL '1 year 2 days 3 seconds'", "'7e9e1e9b-61d5-4b8c-9e43-0b2d3f2b1a10'::UUID",
    "[1, 2, NULL]", "['a', 'b']", "{'x': 1, 'y': 'z'}", "MAP {'k': 1}", "MAP {1: 'a'}", "'101'::BIT",
    "[1,2]::INTEGER[2]", "union_value(n := 1)", "NULL", "'{\"a\": 1}'::JSON", "TIMESTAMP_S '2024-05-01 12:00:00'",
    "[{'t': '12:00:00+05'::TIMETZ}]", "{'m': MAP {'101'::BIT: 1::UHUGEINT}}",
]

# every store kind, the pseudo-columns, the point lane (a lookup answered without DuckDB), aggregates, joins
STORE_STATEMENTS = [
    "SELECT * FROM revenue ORDER BY customer",
    "SELECT * FROM accounts ORDER BY id",
    "SELECT * FROM per_min ORDER BY customer, window_start",
    "SELECT * FROM last_order ORDER BY customer",
    "SELECT * FROM last_order FOR SYSTEM_TIME ALL ORDER BY customer, valid_from",
    "SELECT * FROM latest ORDER BY customer",
    "SELECT customer, revenue, orders FROM revenue WHERE customer = 'c03'",
    "SELECT * FROM accounts WHERE id = -93",
    "SELECT * FROM accounts WHERE id = 99999",
    "SELECT _partition, _position, customer FROM revenue ORDER BY customer",
    "SELECT customer, sum(orders) AS n, max(window_end) AS last FROM per_min GROUP BY customer ORDER BY 1",
    "SELECT r.customer, r.revenue, l.amount FROM revenue r JOIN latest l USING (customer) ORDER BY 1",
    "SELECT table_name FROM information_schema.tables ORDER BY 1",
    "SHOW TABLES",
    "DESCRIBE accounts",
]


def as_json(value: Any, duck_type: str) -> Any:
    """The JSON the HTTP face writes for the Arrow value ``value`` of a column of ``duck_type``."""
    if value is None:
        return None
    if isinstance(value, float):
        return None if not math.isfinite(value) else value
    if isinstance(value, Decimal):  # DuckDB exports 128-bit integers as decimal128(38, 0); JSON has integers
        return int(value) if duck_type in ("HUGEINT", "UHUGEINT") else str(value)
    if isinstance(value, bytes):
        return base64.b64encode(value).decode()
    if isinstance(value, pd.Timestamp):
        return value.to_pydatetime(warn=False).isoformat()
    if isinstance(value, dt.datetime | dt.date):
        return value.isoformat()
    if isinstance(value, dt.time):
        return value.isoformat()
    if isinstance(value, pa.MonthDayNano):  # DuckDB's Python value: a timedelta, a month as 30 days
        return str(dt.timedelta(days=value.months * 30 + value.days, microseconds=value.nanoseconds // 1000))
    if duck_type.startswith("TIME WITH TIME ZONE"):  # sent as DuckDB's text (Arrow has no time with offset)
        return dt.time.fromisoformat(value).isoformat()
    if duck_type.startswith("MAP(") and isinstance(value, list):
        key_type, value_type = _map_types(duck_type)
        return {_key(as_json(k, key_type)): as_json(v, value_type) for k, v in value}
    if isinstance(value, list):
        inner = duck_type[:duck_type.rindex("[")] if duck_type.endswith("]") else ""
        return [as_json(v, inner) for v in value]
    if isinstance(value, dict):
        fields = _struct_types(duck_type)
        return {k: as_json(v, fields.get(k, "")) for k, v in value.items()}
    return value


def _key(k: Any) -> Any:
    return k if isinstance(k, str) else str(k)


def _split_top(text: str) -> list[str]:
    parts, depth, start = [], 0, 0
    for i, c in enumerate(text):
        depth += c == "("
        depth -= c == ")"
        if c == "," and depth == 0:
            parts.append(text[start:i].strip())
            start = i + 1
    parts.append(text[start:].strip())
    return parts


def _map_types(duck_type: str) -> tuple[str, str]:
    key, value = _split_top(duck_type[4:-1])
    return key, value


def _struct_types(duck_type: str) -> dict[str, str]:
    if not duck_type.startswith("STRUCT("):
        return {}
    out = {}
    for part in _split_top(duck_type[7:-1]):
        name, _, t = part.partition(" ")
        out[name.strip('"')] = t
    return out


def _http(server: Http, sql: str, **fields: Any) -> tuple[list[str], list[str], list[list[Any]]]:
    status, _, body = server.sql(sql, **fields)
    assert status == 200, body
    return [c["name"] for c in body["columns"]], [c["type"] for c in body["columns"]], body["rows"]


def _rows_json(table: pa.Table, types: list[str]) -> list[list[Any]]:
    columns = [c.to_pylist() for c in table.columns]
    return [[as_json(v, t) for v, t in zip(row, types)] for row in zip(*columns)]


def test_every_type_equals_the_http_json_answer(flight: Flight, server: Http) -> None:
    sql = "SELECT " + ", ".join(f"{e} AS c{i}" for i, e in enumerate(EVERY_TYPE))
    names, types, want = _http(server, sql)
    with flight.adbc() as con, con.cursor() as cur:
        cur.execute(sql)
        table = cur.fetch_arrow_table()
    assert table.column_names == names
    assert _rows_json(table, types) == want


@pytest.mark.parametrize("sql", STORE_STATEMENTS)
def test_store_answers_equal_the_http_json_answer(flight: Flight, raw: Raw, server: Http, sql: str) -> None:
    names, types, want = _http(server, sql)
    with flight.adbc() as con, con.cursor() as cur:
        cur.execute(sql)
        table = cur.fetch_arrow_table()
        assert [d[0] for d in cur.description] == names
    assert table.column_names == names
    assert _rows_json(table, types) == want
    meta, plain = raw.sql(sql)  # pyarrow's client: the statement query (ADBC prepares every statement)
    assert _rows_json(plain, types) == want
    assert plain.schema.equals(table.schema)


def test_a_statement_has_one_schema_however_it_is_answered(raw: Raw) -> None:
    """A key lookup the engine answers without DuckDB sends the same Arrow types as a scan (timestamps in
    microseconds, not the milliseconds rows in hand would give), and GetSchema says them before it runs."""
    lookup = "SELECT * FROM accounts WHERE id = -93"
    scan = "SELECT * FROM accounts WHERE id > -94 AND id < -92"
    _, a = raw.sql(lookup)
    _, b = raw.sql(scan)
    assert a.num_rows == b.num_rows == 1 and a.equals(b)
    assert a.schema.field("opened").type == pa.timestamp("us", tz="UTC")
    described = raw.client.get_schema(raw.command("CommandStatementQuery", query=lookup), raw.options()).schema
    assert described.equals(a.schema)


def test_prepared_statements_bind_arrow_parameters(flight: Flight, server: Http, shop: Shop) -> None:
    with flight.adbc() as con, con.cursor() as cur:
        for key in sorted(shop.accounts)[:6]:
            cur.execute("SELECT * FROM accounts WHERE id = ?", parameters=[key])
            names, types, want = _http(server, "SELECT * FROM accounts WHERE id = ?", params=[key])
            assert _rows_json(cur.fetch_arrow_table(), types) == want
        since = dt.datetime(2024, 5, 2, 3, 0, tzinfo=dt.timezone.utc)
        cur.execute("SELECT id, opened FROM accounts WHERE opened >= ? AND name LIKE ? ORDER BY id",
                    parameters=[since, "name%"])
        got = cur.fetchall()
        want = [(k, dt.datetime.fromtimestamp(v[3] / 1000, dt.timezone.utc)) for k, v in sorted(shop.accounts.items())
                if v[3] >= since.timestamp() * 1000 and v[0] is not None]
        assert [(k, ts.astimezone(dt.timezone.utc)) for k, ts in got] == want
        cur.execute("SELECT ? AS i, ? AS f, ? AS s, ? AS b, ? AS n, ? AS d, ? AS x",
                    parameters=[7, 2.5, "t", True, None, Decimal("1.25"), b"\x01"])
        assert cur.fetchall() == [(7, 2.5, "t", True, None, Decimal("1.25"), b"\x01")]


def test_several_parameter_rows_are_one_answer(raw: Raw, shop: Shop) -> None:
    """Flight SQL binds a batch of parameter rows to one execution: each row runs, the answers are one stream."""
    session = raw.session()
    created = session.client.do_action(("CreatePreparedStatement", _any("ActionCreatePreparedStatementRequest",
                                        query="SELECT customer, orders FROM revenue WHERE customer = ?")),
                                       session.options())
    result = _unpack(next(iter(created)).body.to_pybytes(), "ActionCreatePreparedStatementResult")
    handle = result.prepared_statement_handle
    assert pa.ipc.read_schema(pa.py_buffer(result.parameter_schema)).types == [pa.string()]
    keys = sorted(shop.revenue)[:4]
    descriptor = raw.command("CommandPreparedStatementQuery", prepared_statement_handle=handle)
    writer, meta = session.client.do_put(descriptor, pa.schema([("p", pa.string())]), session.options())
    writer.write_batch(pa.record_batch([pa.array(keys)], names=["p"]))
    writer.done_writing()
    ack = meta.read()
    writer.close()
    assert _message("DoPutPreparedStatementResult", ack.to_pybytes()).prepared_statement_handle == handle
    info = session.client.get_flight_info(descriptor, session.options())
    table = session.client.do_get(info.endpoints[0].ticket, session.options()).read_all()
    assert table.to_pylist() == [{"customer": k, "orders": shop.revenue[k][1]} for k in keys]
    list(session.client.do_action(("ClosePreparedStatement", _any("ActionClosePreparedStatementRequest",
                                   prepared_statement_handle=handle)), session.options()))


def test_pandas_reads_through_adbc(flight: Flight, shop: Shop) -> None:
    with flight.adbc() as con:
        frame = pd.read_sql("SELECT customer, revenue, orders FROM revenue ORDER BY customer", con)
    assert list(frame["customer"]) == sorted(shop.revenue)
    assert list(frame["orders"]) == [shop.revenue[c][1] for c in sorted(shop.revenue)]


def test_polars_reads_through_adbc(flight: Flight, shop: Shop) -> None:
    polars = pytest.importorskip("polars", reason="polars is not a dependency (large); install it to run this")
    with flight.adbc() as con:
        frame = polars.read_database("SELECT customer, orders FROM revenue ORDER BY customer", con)
    assert frame["customer"].to_list() == sorted(shop.revenue)


def test_eight_concurrent_clients(flight: Flight, server: Http, shop: Shop) -> None:
    statements = STORE_STATEMENTS[:8]
    wanted = {sql: _http(server, sql) for sql in statements}
    errors: list[BaseException] = []

    def client(i: int) -> None:
        try:
            with flight.adbc() as con, con.cursor() as cur:
                for round_ in range(6):
                    sql = statements[(i + round_) % len(statements)]
                    cur.execute(sql)
                    _, types, want = wanted[sql]
                    assert _rows_json(cur.fetch_arrow_table(), types) == want
                    key = sorted(shop.accounts)[(i * 7 + round_) % len(shop.accounts)]
                    cur.execute("SELECT id, balance FROM accounts WHERE id = ?", parameters=[key])
                    assert cur.fetchall() == [(key, shop.accounts[key][1])]
        except BaseException as exc:  # noqa: BLE001 - reported by the main thread
            errors.append(exc)

    threads = [threading.Thread(target=client, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert not any(t.is_alive() for t in threads)
    assert errors == []
    assert flight.handle.stats()["pending"] == 0 and flight.handle.stats()["streaming"] == 0


def _any(name: str, **fields: Any) -> bytes:
    from gateway.flight import protocol

    return protocol.pack(protocol.message(name, **fields))


def _unpack(raw: bytes, name: str) -> Any:
    from gateway.flight import protocol

    found, value = protocol.command_name(raw)
    assert found == name
    return protocol.unpack(name, value)


def _message(name: str, raw: bytes) -> Any:
    from gateway.flight import protocol

    return protocol.unpack(name, raw)
