"""Every type through every face (issue 44): one column of each type, read as rows in process, as Arrow in process
(DuckDB's export and rows in hand), over HTTP as JSON and as Arrow IPC, and over the PG port in text and binary.

The one type table (``gateway/engine/types.py``) says what each DuckDB type is in Arrow, PostgreSQL and JSON; this
holds every route to it. In particular an answer's Arrow type is the same whichever route made the answer: a
point lookup's rows in hand give ``timestamp[us, tz=UTC]`` for a TIMESTAMP WITH TIME ZONE, as DuckDB's export
does (they used to give ``ms``).
"""

from __future__ import annotations

import datetime as dt
import decimal
import json
import uuid
from typing import Any

import pyarrow as pa
import pytest

from gateway.engine import Gateway
from gateway.engine.json_values import dumps
from gateway.engine.result import Result
from gateway.engine.types import answer_arrow_type, pg_type, rows_table
from tests.gateway.gwfixtures import Http
from tests.gateway.pg.conftest import Pg

ARROW = "application/vnd.apache.arrow.stream"
TYPES = [
    ("BIGINT", "9007199254740993::BIGINT"),
    ("INTEGER", "-7::INTEGER"),
    ("SMALLINT", "12::SMALLINT"),
    ("DOUBLE", "2.5::DOUBLE"),
    ("BOOLEAN", "true"),
    ("VARCHAR", "'é \"quoted\"'"),
    ("DATE", "DATE '2024-02-29'"),
    ("TIME", "TIME '12:34:56.789'"),
    ("TIMESTAMP", "TIMESTAMP '2024-05-01 12:00:00.123456'"),
    ("TIMESTAMP WITH TIME ZONE", "TIMESTAMPTZ '2024-05-01 12:00:00.5+00'"),
    ("DECIMAL(10,3)", "12.345::DECIMAL(10,3)"),
    ("HUGEINT", "170141183460469231731687303715884105727::HUGEINT"),
    ("UUID", "'6f1d3e80-6a5d-4a2c-9d1a-2b7d6b0f4e11'::UUID"),
    ("INTERVAL", "INTERVAL 3 DAY + INTERVAL 4 HOUR"),
    ("BLOB", "'\\xAA\\x00'::BLOB"),
    ("INTEGER[]", "[1, 2, NULL]"),
]


@pytest.mark.parametrize(("duck", "expr"), TYPES, ids=[t for t, _ in TYPES])
def test_one_type_through_every_face(gw: Gateway, server: Http, pg: Pg, duck: str, expr: str) -> None:
    sql = f"SELECT {expr} AS v"
    rows_result = gw.sql(sql, stream=True)
    assert rows_result.columns == [("v", duck)]
    rows = rows_result.rows()
    value = rows[0][0]
    # Arrow in process: DuckDB's export and rows in hand agree on the type (and the value where Arrow holds it)
    exported = gw.sql(sql, arrow=True).to_arrow()
    in_hand = Result.in_hand([("v", duck)], rows, exported.schema and gw.sql(sql).position, []).to_arrow()
    want_type = answer_arrow_type(duck)
    if want_type is not None:
        assert exported.schema.field("v").type == want_type, (duck, exported.schema)
        assert in_hand.schema.field("v").type == want_type, (duck, in_hand.schema)
        assert in_hand.column(0).to_pylist() == exported.column(0).to_pylist()
    assert rows_table([("v", duck)], rows).equals(in_hand)
    # HTTP: JSON is the rows as json_values writes them; Arrow IPC is DuckDB's export
    status, _, body = server.sql(sql)
    assert status == 200 and body["columns"] == [{"name": "v", "type": duck}]
    assert body["rows"] == json.loads(dumps(rows))
    status, _, raw = server.sql(sql, ARROW)
    assert status == 200 and pa.ipc.open_stream(raw).read_all().equals(exported)
    # PG: the type the table says, and the value in text and in binary
    with pg.connect() as con:
        for binary in (False, True):
            with con.cursor(binary=binary) as cur:
                cur.execute(sql)
                assert cur.description[0].type_code == pg_type(duck).oid, (duck, binary)
                got = cur.fetchone()[0]
                assert _same(got, value), (duck, binary, got, value)


def _same(pg_value: Any, duck_value: Any) -> bool:
    """A PG client's value for DuckDB's: equal, allowing the forms PostgreSQL's types have (psycopg's)."""
    if isinstance(duck_value, uuid.UUID):
        return str(pg_value) == str(duck_value)
    if isinstance(duck_value, bytes):
        return bytes(pg_value) == duck_value
    if isinstance(duck_value, int) and isinstance(pg_value, decimal.Decimal):
        return pg_value == duck_value
    if isinstance(duck_value, dt.timedelta) and isinstance(pg_value, dt.timedelta):
        return pg_value == duck_value
    return bool(pg_value == duck_value)


def test_a_point_lookup_s_arrow_is_duckdb_s(gw: Gateway) -> None:
    """The disagreement issue 44 found: the point lane's rows in hand made TIMESTAMPTZ ``ms``, DuckDB ``us``."""
    sql = "SELECT opened FROM accounts WHERE id = ?"
    key = gw.sql("SELECT min(id) FROM accounts").rows()[0][0]
    gw.sql(sql, [key])
    lane = gw.sql(sql, [key])
    assert lane.route == "point lane"
    duck = gw.sql("SELECT opened FROM accounts WHERE id = ? AND opened IS NOT DISTINCT FROM opened", [key],
                  arrow=True).to_arrow()
    assert lane.to_arrow().schema == duck.schema == pa.schema([("opened", pa.timestamp("us", tz="UTC"))])
    assert lane.to_arrow().equals(duck)
