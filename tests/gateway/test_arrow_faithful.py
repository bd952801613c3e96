"""Answers as Arrow hold the values the JSON answer holds (gateway/arrow_faithful.py).

Found by comparing the answer formats (s17): through DuckDB's Arrow export a
UHUGEINT of 2^127 or more arrived negative (2^128 - 1 as -1), BIT arrived as
DuckDB's internal bytes and TIME WITH TIME ZONE lost its offset; an answer
built from Python rows crashed with pyarrow's ArrowInvalid/OverflowError on
a HUGEINT of 39 digits or a UHUGEINT past 2^127, instead of a gateway error.
"""

from __future__ import annotations

import datetime as dt
from decimal import Decimal
from typing import Any

import duckdb
import pyarrow as pa
import pytest

from gateway import Gateway
from gateway.engine.arrow_faithful import faithful_type, timetz_text
from gateway.engine.errors import ExecutionError
from tests.gateway.gwfixtures import Http

ARROW = "application/vnd.apache.arrow.stream"
TOP = 2**127 - 1  # the largest value a signed 128-bit integer (Arrow's decimal128 storage) holds


def _ipc(server: Http, sql: str) -> list[Any]:
    status, _, body = server.sql(sql, ARROW)
    assert status == 200, body
    return pa.ipc.open_stream(body).read_all().column(0).to_pylist()


@pytest.mark.parametrize("text", ["12:00:00+05", "12:00:00.5+05:30", "00:00:00-00", "23:59:59.999999-15:59",
                                  "12:34:56.000123+00:00:30", "01:02:03.1-00:00:01", "24:00:00+00"])
def test_timetz_text_is_duckdbs_own_text(text: str) -> None:
    con = duckdb.connect()
    duck, value = con.execute(f"SELECT '{text}'::TIMETZ::VARCHAR, '{text}'::TIMETZ").fetchone()
    assert timetz_text(value) == duck


def test_timetz_text_of_nothing() -> None:
    assert timetz_text(None) is None
    assert timetz_text(dt.time(1, 2, 3, tzinfo=dt.timezone(-dt.timedelta(hours=2)))) == "01:02:03-02"


def test_only_the_types_duckdb_exports_unfaithfully_are_cast() -> None:
    con = duckdb.connect()
    rel = con.sql("SELECT 1::UHUGEINT a, '1'::BIT b, '12:00:00+05'::TIMETZ c, 1::HUGEINT d, 'x' e, [1] f, "
                  "{'UHUGEINT': 1::UHUGEINT, 'q\"x': 1} g, [1::UHUGEINT, 2]::UHUGEINT[2] h, "
                  "MAP {'1'::BIT: 1} i, union_value(n := '1'::BIT) j, [{'t': '12:00:00+05'::TIMETZ}] k, "
                  "MAP {1: 2} l")
    assert [faithful_type(t) for t in rel.types] == [
        "HUGEINT", "VARCHAR", "VARCHAR", None, None, None,
        'STRUCT("UHUGEINT" HUGEINT, "q""x" INTEGER)',  # a field named like a type keeps its name
        "HUGEINT[2]",
        "MAP(VARCHAR, INTEGER)",
        'UNION("n" VARCHAR)',  # not the union's tag
        'STRUCT("t" VARCHAR)[]',
        None,
    ]


@pytest.mark.parametrize("expr, want", [
    ("'101'::BIT", "101"),
    ("'12:00:00.5+05:30'::TIMETZ", "12:00:00.5+05:30"),
    (f"{TOP}::UHUGEINT", Decimal(TOP)),
    (f"{TOP}::HUGEINT", Decimal(TOP)),
    (f"(-{TOP}::HUGEINT - 1)", Decimal(-TOP - 1)),
    ("7::UHUGEINT", Decimal(7)),
], ids=["bit", "timetz", "uhugeint-top", "hugeint-top", "hugeint-bottom", "uhugeint"])
def test_arrow_answers_hold_the_values(gw: Gateway, server: Http, expr: str, want: Any) -> None:
    """Every route to Arrow: DuckDB's export (arrow=True, the HTTP answer) and rows in hand (to_arrow)."""
    sql = f"SELECT {expr} AS v"
    assert gw.sql(sql, arrow=True).to_arrow().column(0).to_pylist() == [want]
    assert gw.sql(sql).to_arrow().column(0).to_pylist() == [want]
    assert _ipc(server, sql) == [want]
    assert _ipc(server, f"SELECT {expr} AS v FROM revenue LIMIT 1") == [want]


def test_nested_values_through_duckdbs_export(gw: Gateway, server: Http) -> None:
    sql = ("SELECT {'x': 7::UHUGEINT, 'b': '1'::BIT} s, ['12:00:00+05'::TIMETZ] l, "
           "MAP {'101'::BIT: 1::UHUGEINT} m, 1 s")  # a repeated column name is cast by position
    want = [{"x": Decimal(7), "b": "1"}, ["12:00:00+05"], [("101", Decimal(1))], 1]
    table = gw.sql(sql, arrow=True).to_arrow()
    assert [table.column(i).to_pylist()[0] for i in range(4)] == want
    assert table.column_names == ["s", "l", "m", "s"]
    status, _, body = server.sql(sql, ARROW)
    assert status == 200
    ipc = pa.ipc.open_stream(body).read_all()
    assert [ipc.column(i).to_pylist()[0] for i in range(4)] == want


def test_a_uhugeint_arrow_cannot_carry_is_an_error_not_a_wrapped_value(gw: Gateway, server: Http) -> None:
    big = 2**128 - 1
    sql = f"SELECT {big}::UHUGEINT AS v"
    with pytest.raises(ExecutionError, match="out of range"):
        gw.sql(sql, arrow=True).to_arrow()
    with pytest.raises(ExecutionError, match="out of range"):  # read as Arrow first: DuckDB's faithful cast refuses
        gw.sql(sql).to_arrow()
    result = gw.sql(sql)
    assert result.rows() == [(big,)]  # read as rows first: Arrow is made from the rows in hand, and refuses too
    with pytest.raises(ExecutionError, match=f"column 'v': the UHUGEINT value {big} is out of range"):
        result.to_arrow()
    status, _, body = server.sql(sql, ARROW)
    assert status == 400 and body["error"]["code"] == "EXECUTION_ERROR", body
    assert "out of range" in body["error"]["message"]
    status, _, body = server.sql(sql)  # JSON carries it
    assert status == 200 and body["rows"] == [[big]]


def test_a_statement_run_again_for_its_arrow_goes_through_the_same_casts(gw: Gateway) -> None:
    """A statement over a system table keeps its SQL on its cursor: to_arrow() after rows() runs it again."""
    sql = "SELECT {v}::UHUGEINT AS v, '101'::BIT AS b FROM information_schema.tables LIMIT 1"
    result = gw.sql(sql.format(v=7))
    assert result.rows() == [(7, "101")]
    assert result.to_arrow().to_pylist() == [{"v": Decimal(7), "b": "101"}]
    result = gw.sql(sql.format(v=2**128 - 1))
    assert result.rows() == [(2**128 - 1, "101")]
    with pytest.raises(ExecutionError, match="out of range"):
        result.to_arrow()


def test_a_nested_value_rows_in_hand_cannot_carry_is_an_error(gw: Gateway) -> None:
    """Arrow from rows in hand is typed as DuckDB's export (types.py): a list of 128-bit integers is a list of
    decimal128(38, 0), equal to DuckDB's own answer; one past its signed range is an error, never wrapped around."""
    fits = gw.sql(f"SELECT [{2**100}::UHUGEINT] AS v")
    assert fits.rows() == [([2**100],)]
    assert fits.to_arrow().equals(gw.sql(f"SELECT [{2**100}::UHUGEINT] AS v", arrow=True).to_arrow())
    result = gw.sql(f"SELECT [{2**128 - 1}::UHUGEINT] AS v")
    assert result.rows() == [([2**128 - 1],)]
    with pytest.raises(ExecutionError, match=r"column 'v' of type UHUGEINT\[\] cannot be sent as Arrow"):
        result.to_arrow()