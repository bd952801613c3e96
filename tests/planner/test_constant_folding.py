"""Constant key expressions are folded before pushdown (issue 16 item 3), exactly as DuckDB evaluates them."""

from __future__ import annotations

from decimal import Decimal

import duckdb
import pytest
import sqlglot

import planner
from planner.folding import fold_constant
from stores.iqv2.query import KeyQuery, RangeQuery, TimestampedKeyQuery
from tests.planner.planner_catalog import CATALOG

FOLDED = [
    "10 + 1", "7 // 2", "-7 // 2", "(-7) // 2", "-7 % 3", "2 * 3 - 4", "- (5)", "3 - -2", "1.5 * 2", "0.1 * 3",
    "'a' || 'b'", "concat('c', '000', '1')", "lower('C0001')", "upper('abc')", "trim('  x ')", "ltrim('  x ')",
    "rtrim(' x  ')", "CAST('11' AS INT)", "CAST(' 11 ' AS BIGINT)", "CAST('+011' AS INT)", "CAST(11 AS VARCHAR)",
    "'c' || CAST(7 * 6 AS VARCHAR)", "CAST('x' AS VARCHAR(1))",
]
NOT_FOLDED = [
    "2147483647 + 1",              # INT32 overflow: DuckDB fails, so the planner must not guess
    "9223372036854775807 + 1",
    "7 / 2",                       # DOUBLE division
    "CAST('1.5' AS INT)",          # DuckDB rounds
    "CAST(1.5 AS INT)",
    "lower('ÀB')",                 # non-ASCII case mapping is DuckDB's
    "CAST('12' AS DECIMAL)",       # DECIMAL(18,3) rounding
    "CAST(2147483647 AS BIGINT) + 1",  # folding keeps literal widths only: conservative, left to DuckDB
    "now()", "random()", "1e3 + 1", "CAST(300 AS TINYINT)",
]


@pytest.mark.parametrize("text", FOLDED)
def test_folded_values_equal_duckdbs(text: str) -> None:
    folded = fold_constant(sqlglot.parse_one(text, read="duckdb"))
    assert folded is not None, text
    ((want,),) = duckdb.sql(f"SELECT {text}").fetchall()
    value, sql_type = folded
    assert value == want and type(value) is type(want) or (isinstance(want, Decimal) and Decimal(value) == want)
    assert sql_type in ("INTEGER", "DECIMAL", "VARCHAR")


@pytest.mark.parametrize("text", NOT_FOLDED)
def test_what_duckdb_might_evaluate_differently_is_left_to_it(text: str) -> None:
    assert fold_constant(sqlglot.parse_one(text, read="duckdb")) is None


@pytest.mark.parametrize("sql, query", [
    ("SELECT * FROM int_store WHERE k = 10 + 1", KeyQuery.with_key(11)),
    ("SELECT * FROM int_store WHERE k = CAST('11' AS INT)", KeyQuery.with_key(11)),
    ("SELECT * FROM int_store WHERE 10 + 1 = k", KeyQuery.with_key(11)),
    ("SELECT * FROM revenue WHERE customer = lower('C0001')", TimestampedKeyQuery.with_key("c0001")),
    ("SELECT * FROM int_store WHERE k BETWEEN 2 * 3 AND 20 // 3", RangeQuery.with_range(6, 6)),
    ("SELECT * FROM int_store WHERE k IN (1 + 1, CAST('3' AS INT))", None),
])
def test_folded_key_predicates_are_lookups_even_with_scans_off(sql: str, query: object) -> None:
    p = planner.plan(sql, CATALOG, session={"table_scans": False})
    (scan,) = p.scans
    assert not scan.full_scan
    if query is not None:
        assert [r.query for r in scan.requests] == [query]


def test_an_unfoldable_expression_is_still_a_scan() -> None:
    (scan,) = planner.plan("SELECT * FROM int_store WHERE k = 2147483647 + 1", CATALOG).scans
    assert scan.full_scan
    with pytest.raises(planner.errors.TableScanDisabledError):
        planner.plan("SELECT * FROM int_store WHERE k = abs(-3)", CATALOG, session={"table_scans": False})
