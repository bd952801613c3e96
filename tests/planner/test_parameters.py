"""``$n`` parameters as PostgreSQL clients use them: their inferred types, ``$1,$2`` without a space, and lists
(PostgreSQL's arrays, for ``= ANY($1)``), with the limits that keep a parameter from becoming a large statement."""

from __future__ import annotations

import pytest

from planner import ParameterError, TypeMismatchError, parameter_types, plan
from planner.dialect import IqgateDialect, parse_statement
from planner.limits import MAX_ARRAY_DIMENSIONS, MAX_PARAMS
from planner.param_types import MAX_INFERRED_SQL_CHARS
from tests.planner.planner_catalog import CATALOG


@pytest.mark.parametrize(("sql", "types"), [
    ("SELECT * FROM mystore WHERE k = $1", {1: "bigint"}),
    ("SELECT * FROM mystore WHERE $1 = k", {1: "bigint"}),
    ("SELECT * FROM mystore WHERE (($1)) = k", {1: "bigint"}),
    ("SELECT * FROM MyStore m WHERE m.K = $1", {1: "bigint"}),
    ("SELECT * FROM int_store WHERE k IN ($1, $2)", {1: "int", 2: "int"}),
    ("SELECT * FROM date_store WHERE k BETWEEN $1 AND $2", {1: "date", 2: "date"}),
    ("SELECT * FROM dbl_store WHERE $1 BETWEEN k AND k + 1", {1: "double precision"}),
    ("SELECT * FROM str_store WHERE k LIKE $1 OR v || $2 = 'x'", {1: "text", 2: "text"}),
    ("SELECT * FROM mystore WHERE k = ANY($1)", {1: "bigint[]"}),
    ("SELECT * FROM mystore WHERE k = ANY($1::INTEGER[])", {1: "int[]"}),
    ("SELECT * FROM mystore WHERE k <> ALL($1)", {1: "bigint[]"}),
    ("SELECT typname FROM pg_type WHERE oid = $1", {1: "uint"}),
    ("SELECT * FROM mystore ORDER BY k LIMIT $1 OFFSET $2", {1: "bigint", 2: "bigint"}),
    ("SELECT $1::oid[]", {1: "oid[]"}),
    ("SELECT n + $1 FROM mystore", {1: "bigint"}),
    ("WITH c AS (SELECT n * 2 AS x FROM mystore) SELECT * FROM c WHERE x > $1", {1: "bigint"}),
    ("SELECT * FROM (SELECT sum(total) AS s FROM revenue) WHERE s > $1", {1: "double precision"}),
    ("SELECT typname FROM pg_type WHERE typname = $1", {1: "text"}),
    ("SELECT * FROM mystore WHERE k = $2", {2: "bigint"}),
    # what the SQL does not decide stays out (PostgreSQL's unknown, described as text)
    ("SELECT $1", {}),
    ("SELECT coalesce($1, 'x')", {}),
    ("SELECT * FROM mystore WHERE $1 IS NULL", {}),
    ("SELECT * FROM mystore WHERE k = $1 + $2", {}),
    # a statement that does not plan has no inferred types (its error comes when it runs)
    ("SELECT * FROM mystore WHERE nope = $1", {}),
    ("SELEC $1", {}),
])
def test_parameter_types_come_from_the_sql_around_them(sql: str, types: dict[int, str]) -> None:
    assert parameter_types(sql, CATALOG) == types


def test_a_dollar_parameter_before_a_comma_is_a_parameter() -> None:
    """``$1,$2`` was a syntax error: sqlglot read ``$1,$`` as a dollar-quoted string tagged ``1,``."""
    for sql, written in [("SELECT $1,$2", "SELECT $1, $2"), ("SELECT k FROM mystore WHERE k IN ($1,$2)",
                                                            "SELECT k FROM mystore WHERE k IN ($1, $2)"),
                         ("SELECT ($1)+$2", "SELECT ($1) + $2"), ("SELECT $$a,$1$$", "SELECT 'a,$1'"),
                         ("SELECT $t$x$1,$t$", "SELECT 'x$1,'")]:
        assert parse_statement(sql).sql(dialect=IqgateDialect) == written
    planned = plan("SELECT v FROM mystore WHERE k IN ($1,$2)", CATALOG, params=[1, 2])
    assert sorted(k for r in planned.scans[0].requests for k in r.query.keys) == [1, 2]  # pushed down


def test_list_parameters_are_arrays() -> None:
    planned = plan("SELECT v FROM mystore WHERE k = ANY($1)", CATALOG, params=[[1, None, 3]])
    assert "[1, NULL, 3]" in (planned.residual_sql or "")
    nested = plan("SELECT $1", CATALOG, params=[[["a", "b'c"], [], [None]]])
    assert "[['a', 'b''c'], [], [NULL]]" in (nested.residual_sql or "")


def test_a_list_where_the_key_is_compared_is_a_type_mismatch() -> None:
    for sql in ("SELECT v FROM mystore WHERE k = $1", "SELECT v FROM mystore WHERE k IN ($1, 2)",
                "SELECT v FROM mystore WHERE k > $1"):
        with pytest.raises(TypeMismatchError, match=r"cannot compare key column k \(BIGINT\) with \[1\] \(list\)"):
            plan(sql, CATALOG, params=[[1]])


def test_list_parameters_have_limits() -> None:
    deep: list[object] = [1]
    for _ in range(MAX_ARRAY_DIMENSIONS):
        deep = [deep]
    with pytest.raises(ParameterError, match="nested more than 6 deep"):
        plan("SELECT $1", CATALOG, params=[deep])
    plan("SELECT $1", CATALOG, params=[deep[0]])  # six levels: PostgreSQL's most
    with pytest.raises(ParameterError, match="parameters are values or lists of values"):
        plan("SELECT $1", CATALOG, params=[(1, 2)])
    with pytest.raises(ParameterError, match="more than 100,000 values"):
        plan("SELECT $1", CATALOG, params=[list(range(MAX_PARAMS + 1))])


def test_long_statements_are_not_inferred() -> None:
    """Past MAX_INFERRED_SQL_CHARS the parameters stay unknown (text): annotation grows faster than linearly."""
    padding = " OR ".join(f"(k = {i} AND v = 'x')" for i in range(2_000))
    sql = f"SELECT * FROM mystore WHERE k = $1 AND ({padding})"
    assert len(sql) > MAX_INFERRED_SQL_CHARS
    assert parameter_types(sql, CATALOG) == {}
    assert parameter_types(sql[:200].split(" AND (")[0], CATALOG) == {1: "bigint"}
