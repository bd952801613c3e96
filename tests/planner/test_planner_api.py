"""The planner's public contract: entry points, plan kinds, parameters, cache, settings, dialect."""

from __future__ import annotations

import dataclasses
from datetime import date, datetime, timedelta, timezone

import pytest
import sqlglot

import planner
from planner.plan import PSEUDO_COLUMNS, StatementKind
from stores.catalog.partitioner import partition_for_key
from stores.catalog.schema import SqlType
from stores.iqv2.position import Position, PositionBound
from stores.iqv2.query import KeyQuery, MultiKeyQuery, RangeQuery, VersionedKeyQuery
from tests.planner.planner_catalog import CATALOG


def test_public_names() -> None:
    assert callable(planner.plan) and callable(planner.explain_text)
    assert issubclass(planner.Dialect, sqlglot.Dialect)
    for name in ("position_bound", "partial_results", "table_scans", "max_rows", "wait_for_bound_ms", "statement_timeout_ms"):
        setting = planner.SESSION_SETTINGS[name]
        assert isinstance(setting.default, setting.type) and setting.doc
    assert planner.SESSION_SETTINGS["partial_results"].default is False
    assert planner.SESSION_SETTINGS["table_scans"].default is True
    assert planner.SESSION_SETTINGS["wait_for_bound_ms"].default == 0


def test_dialect_round_trips_extensions() -> None:
    sql = "SELECT v FROM mystore WHERE k = 1 AS OF POSITION '{\"events\": {\"0\": 41}}'"
    tree = sqlglot.parse_one(sql, read=planner.Dialect)
    assert tree.sql(dialect=planner.Dialect) == sql
    explain = sqlglot.parse_one("EXPLAIN SELECT 1", read=planner.Dialect)
    assert explain.sql(dialect=planner.Dialect) == "EXPLAIN SELECT 1"
    # an ordinary alias named "of" still parses
    assert sqlglot.parse_one("SELECT k AS of FROM t AS of", read=planner.Dialect).sql(dialect=planner.Dialect) == "SELECT k AS of FROM t AS of"


def test_select_plan_shape() -> None:
    plan = planner.plan("SELECT v FROM mystore WHERE k IN (1, 2, 3)", CATALOG)
    assert plan.kind is StatementKind.SELECT
    (scan,) = plan.scans
    assert scan.relation == "__iq_scan_0" and scan.store == "mystore"
    # one request per partition: a KeyQuery for a lone key, a MultiKeyQuery for several
    by_partition: dict[int, list[int]] = {}
    for k in (1, 2, 3):
        by_partition.setdefault(partition_for_key(k, 4, SqlType.BIGINT), []).append(k)
    want = {frozenset({p}): (KeyQuery.with_key(ks[0]) if len(ks) == 1 else MultiKeyQuery.with_keys(ks))
            for p, ks in by_partition.items()}
    assert {r.partitions: r.query for r in scan.requests} == want
    for r in scan.requests:
        assert r.store_name == "mystore"
        assert r.position_bound.is_unbounded()
    assert plan.fast_path == ("v",)
    assert '"__iq_scan_0"' in plan.residual_sql


def test_range_requests_name_every_partition_explicitly() -> None:
    plan = planner.plan("SELECT * FROM mystore WHERE k > 3", CATALOG)
    (request,) = plan.scans[0].requests
    assert request.partitions == frozenset(range(4))
    assert request.query == RangeQuery.with_range(4, None)
    assert not plan.scans[0].full_scan


@pytest.mark.parametrize(
    ("store", "literal", "key"),
    [
        ("mystore", "42", 42), ("int_store", "'7'", 7), ("str_store", "'c42'", "c42"), ("dbl_store", "2.5", 2.5),
        ("bool_store", "true", True), ("ts_store", "TIMESTAMP '2024-01-01 00:00:01'", 1_704_067_201_000),
        ("date_store", "DATE '1970-01-11'", 10),
    ],
)
def test_key_lookup_goes_to_the_writers_partition_for_every_key_type(store: str, literal: str, key: object) -> None:
    spec = CATALOG[store]
    plan = planner.plan(f"SELECT * FROM {store} WHERE k = {literal}", CATALOG)
    (request,) = plan.scans[0].requests
    assert request.query.key == key
    assert request.partitions == frozenset({partition_for_key(key, spec.partitions, spec.key.type)})


def test_position_bound_from_clause_and_session() -> None:
    plan = planner.plan("SELECT * FROM mystore WHERE k = 1 AS OF POSITION '{\"events\": {\"0\": 41}}'", CATALOG)
    expected = PositionBound.at(Position.from_map({"events": {0: 41}}))
    assert plan.position_bound == expected
    assert all(r.position_bound == expected for r in plan.scans[0].requests)
    plan = planner.plan("SELECT * FROM mystore WHERE k = 1", CATALOG, session={"position_bound": {"events": {"1": 3}}})
    assert plan.position_bound == PositionBound.at(Position.from_map({"events": {1: 3}}))


def test_statement_kinds() -> None:
    assert planner.plan("SHOW TABLES", CATALOG).kind is StatementKind.SHOW_TABLES
    describe = planner.plan("DESCRIBE Revenue", CATALOG)
    assert describe.kind is StatementKind.DESCRIBE and describe.describe == "revenue"
    setting = planner.plan("SET partial_results = true, max_rows = 10", CATALOG)
    assert setting.kind is StatementKind.SET and dict(setting.settings) == {"partial_results": True, "max_rows": 10}
    explained = planner.plan("EXPLAIN SELECT v FROM mystore WHERE k = 1", CATALOG)
    assert explained.kind is StatementKind.EXPLAIN and explained.inner.kind is StatementKind.SELECT
    assert explained.explain == planner.explain_text(explained.inner) == planner.explain_text(explained)
    assert explained.explain.splitlines()[-2] == "residual:"


def test_parameters_are_bound_after_the_cache() -> None:
    cached = planner.Planner()
    a = cached.plan("SELECT v FROM mystore WHERE k = ?", CATALOG, params=[1])
    b = cached.plan("SELECT v FROM mystore WHERE k = ?", CATALOG, params=[2])
    info = cached.cache_info()
    assert info["misses"] == 1 and info["hits"] == 1
    assert a.scans[0].requests[0].query.key == 1 and b.scans[0].requests[0].query.key == 2
    assert a.residual_sql.endswith("k = 1") and b.residual_sql.endswith("k = 2")


def test_catalog_change_invalidates_the_cached_template() -> None:
    sql = "SELECT * FROM mystore WHERE k > 0"
    cached = planner.Planner()
    cached.plan(sql, CATALOG)
    wider = dict(CATALOG, mystore=dataclasses.replace(CATALOG["mystore"], partitions=8))
    assert cached.plan(sql, wider).scans[0].requests[0].partitions == frozenset(range(8))
    without = {k: v for k, v in CATALOG.items() if k != "mystore"}
    with pytest.raises(planner.UnknownStoreError):
        cached.plan(sql, without)


def test_two_planners_share_no_cache() -> None:
    """The cache is a Planner's (a Gateway owns one): module-level ``plan`` is pure and caches nothing."""
    a, b = planner.Planner(), planner.Planner()
    a.plan("SELECT v FROM mystore WHERE k = ?", CATALOG, params=[1])
    assert a.cache_info()["size"] == 1 and b.cache_info()["size"] == 0
    assert b.point_lane("SELECT v FROM mystore WHERE k = ?", CATALOG) is None
    assert a.point_lane("SELECT v FROM mystore WHERE k = ?", CATALOG) is not None


def test_parameter_types() -> None:
    plan = planner.plan("SELECT * FROM ts_store WHERE k = ?", CATALOG, params=[datetime(2024, 1, 1, 1, tzinfo=timezone.utc)])
    assert plan.scans[0].requests[0].query.key == 1_704_070_800_000
    assert plan.residual_sql.endswith("k = TIMESTAMP '2024-01-01 01:00:00'")
    plan = planner.plan("SELECT * FROM date_store WHERE k = ?", CATALOG, params=[date(1970, 1, 3)])
    assert plan.scans[0].requests[0].query.key == 2
    plan = planner.plan("SELECT * FROM mystore WHERE k = 1 AND v = ? AND n = ?", CATALOG, params=[None, 1.5])
    assert plan.residual_sql.endswith("v = NULL AND n = 1.5")
    with pytest.raises(planner.ParameterError, match="unsupported parameter type"):
        planner.plan("SELECT * FROM mystore WHERE k = 1 AND v = ?", CATALOG, params=[object()])
    plan = planner.plan("SELECT * FROM mystore WHERE k = 1 AND v = ?", CATALOG, params=["a\x00'b"])
    assert plan.residual_sql.endswith("v = ('a' || chr(0) || '''b')")


def test_timestamps_past_year_9999_in_utc_plan() -> None:
    """An aware parameter or literal whose UTC instant is past 9999-12-31 (or before year 1): Python's datetime
    cannot hold it, DuckDB can. Both were an OverflowError, an INTERNAL error."""
    late = datetime(9999, 12, 31, 23, 0, tzinfo=timezone(timedelta(hours=-5)))
    plan = planner.plan("SELECT * FROM mystore WHERE k = 1 AND v = ?", CATALOG, params=[late])
    assert plan.residual_sql.endswith("v = CAST(TIMESTAMPTZ '9999-12-31 23:00:00-05:00' AS TIMESTAMP)")
    for text in ("9999-12-31 23:00:00-05", "0001-01-01 01:00:00+05"):
        plan = planner.plan(f"SELECT * FROM ts_store WHERE k = TIMESTAMPTZ '{text}'", CATALOG)
        assert plan.scans[0].full_scan, text  # not pushed down as a key: DuckDB compares it


def test_as_of_parameter_for_versioned_store() -> None:
    plan = planner.plan("SELECT * FROM last_order FOR SYSTEM_TIME AS OF ? WHERE key = ?", CATALOG,
                        params=[datetime(2024, 1, 1), "c1"])
    assert plan.scans[0].requests[0].query == VersionedKeyQuery.with_key("c1").as_of(1_704_067_200_000)


def test_named_parameters_may_repeat() -> None:
    plan = planner.plan("SELECT * FROM mystore WHERE k = :id OR n = :id", CATALOG, params={"id": 3})
    assert plan.residual_sql.endswith("k = 3 OR n = 3")


def test_include_failures_only_when_named() -> None:
    assert not planner.plan("SELECT * FROM mystore", CATALOG).scans[0].include_failures
    plan = planner.plan("SELECT _failure_message FROM mystore", CATALOG)
    assert plan.scans[0].include_failures
    assert "_failure_reason\" IS NULL" not in plan.residual_sql


def test_pseudo_columns_never_in_select_star_of_residual() -> None:
    plan = planner.plan("SELECT * FROM mystore", CATALOG)
    inner = plan.residual_sql.split("FROM")[1]
    assert not any(p in inner.split("WHERE")[0] for p in PSEUDO_COLUMNS)


def test_errors_carry_code_line_and_column() -> None:
    with pytest.raises(planner.UnknownStoreError) as info:
        planner.plan("SELECT *\nFROM revenu", CATALOG)
    err = info.value
    assert (err.line, err.col, err.code) == (2, 6, "UNKNOWN_STORE")
    assert "did you mean 'revenue'" in err.message


def test_unknown_session_setting() -> None:
    with pytest.raises(planner.InvalidSettingError, match="known settings"):
        planner.plan("SELECT * FROM mystore WHERE k = 1", CATALOG, session={"nope": 1})


def test_non_string_sql() -> None:
    with pytest.raises(TypeError):
        planner.plan(b"SELECT 1", CATALOG)  # type: ignore[arg-type]


def test_statement_without_stores_needs_no_scan() -> None:
    plan = planner.plan("SELECT 1 + 1 AS two", CATALOG)
    assert plan.scans == () and plan.residual_sql == "SELECT 1 + 1 AS two"


def test_parameters_on_non_select_statements_are_refused() -> None:
    with pytest.raises(planner.ParameterError):
        planner.plan("SHOW TABLES", CATALOG, params=[1])


def test_two_position_clauses_are_refused() -> None:
    with pytest.raises(planner.UnsupportedSqlError, match="only once"):
        planner.plan("SELECT 1 AS OF POSITION '{}' UNION SELECT 2 AS OF POSITION '{}'", CATALOG)


def test_forbidden_scalar_function_inside_cte() -> None:
    with pytest.raises(planner.ForbiddenFunctionError, match="read_blob"):
        planner.plan("WITH x AS (SELECT read_blob('f') AS b) SELECT * FROM x", CATALOG)


def test_forbidden_scalar_function_inside_a_values_statement() -> None:
    with pytest.raises(planner.ForbiddenFunctionError, match="read_blob"):
        planner.plan("VALUES ((SELECT read_blob('f')))", CATALOG)


def test_write_inside_a_cte_is_refused() -> None:
    with pytest.raises((planner.ReadOnlyError, planner.SqlSyntaxError)):
        planner.plan("WITH x AS (DELETE FROM mystore RETURNING *) SELECT * FROM x", CATALOG)


def test_dialect_leaves_sqlglot_registry_intact() -> None:
    """Registering our dialect must not replace sqlglot's base dialect (registered under '')."""
    registry = sqlglot.dialects.dialect.Dialect.classes
    assert registry[""] is sqlglot.dialects.dialect.Dialect
    assert registry["iqgate"] is planner.Dialect
    assert sqlglot.parse_one("SELECT 1 AS OF POSITION '{}'", read="iqgate").sql(dialect="iqgate") == "SELECT 1 AS OF POSITION '{}'"


@pytest.mark.parametrize("sql, message", [
    ("SELECT random(1)", r"random\(\) takes no arguments, got 1"),                                   # was RANDOM()
    ("SELECT levenshtein(v, v, 3) FROM mystore", r"levenshtein\(\) takes at most 2 arguments, got 3"),
    ("SELECT approx_count_distinct(k, 0.1) FROM mystore", r"approx_count_distinct\(\) takes at most 1 argument"),
    ("SELECT instr(v, 'x', 2) FROM mystore", r"instr\(\) takes at most 2 arguments, got 3"),          # was instr(v, 'x')
    ("SELECT string_agg(v, ',', v) FROM mystore", r"string_agg\(\) takes at most 2 arguments, got 3"),
])
def test_a_call_with_more_arguments_than_duckdbs_function_takes_is_refused(sql: str, message: str) -> None:
    """sqlglot writes the arguments it knows and drops the rest: the statement then answered another question than
    the one asked (DuckDB itself refuses each of them). The guard counts what was written."""
    with pytest.raises(planner.SqlSyntaxError, match=message) as err:
        planner.plan(sql, CATALOG)
    assert err.value.col == 8


@pytest.mark.parametrize("sql, call", [
    ("SELECT regexp_replace(v, 'x', 'y', 'gz') FROM mystore", "REGEXP_REPLACE(v, 'x', 'y', 'gz')"),     # 'gz' was 'g'
    ("SELECT regexp_extract(v, 'x', 0, v) FROM mystore", "REGEXP_EXTRACT(v, 'x', 0, v)"),               # lost 2
    ("SELECT jaro_winkler_similarity(v, v, 0.9) FROM mystore", "JARO_WINKLER_SIMILARITY(v, v, 0.9)"),   # lost 0.9
    ("SELECT time_bucket(INTERVAL 1 DAY, to_timestamp(n), 'Asia/Tokyo') FROM mystore",
     "TIME_BUCKET(INTERVAL '1' DAY, TO_TIMESTAMP(n), 'Asia/Tokyo')"),
    ("SELECT string_agg(v, ',' ORDER BY k, v) FROM mystore", "(v, ',' ORDER BY k, v)"),
], ids=["regexp-flags", "regexp-options", "jaro-cutoff", "time-bucket-zone", "order-by-is-no-argument"])
def test_a_duckdb_call_sqlglot_would_rewrite_losing_an_argument_goes_to_duckdb_as_written(sql: str, call: str) -> None:
    """Within what DuckDB's function takes, sqlglot dropped or renamed arguments (the cutoff of
    jaro_winkler_similarity, a flag of regexp_replace) or read a time zone as a column: such a call of DuckDB's
    own function now reaches DuckDB as written, and DuckDB answers or refuses it."""
    assert call in (planner.plan(sql, CATALOG).residual_sql or "")


def test_what_sqlglot_notes_but_writes_unchanged_still_plans() -> None:
    assert "APPROX_TOP_K(" in (planner.plan("SELECT approx_top_k(k, 2) FROM mystore", CATALOG).residual_sql or "")


def test_a_statement_sqlglot_fails_to_write_is_unsupported_not_internal() -> None:
    """sqlglot writes bool_and(DISTINCT x, y) as BOOL_AND(CAST(DISTINCT … AS BOOLEAN)) and, in this shape of a
    window function, re-parses that text and fails (ParseError: an INTERNAL error before). (With one argument
    the DISTINCT is dropped first: see the next test.)"""
    sql = ("SELECT CAST(split_part(DISTINCT bool_and(DISTINCT INTERVAL 1 DAY, n) OVER (PARTITION BY n ORDER BY ? "
           "RANGE UNBOUNDED PRECEDING), 'a') AS TIMESTAMP) FROM mystore")
    with pytest.raises(planner.UnsupportedSqlError, match=r"cannot be written for DuckDB \(ParseError"):
        planner.plan(sql, CATALOG, params=[1])


@pytest.mark.parametrize("sql, written", [
    ("SELECT bool_and(DISTINCT v > 'a') FROM mystore", "BOOL_AND(CAST(v > 'a' AS BOOLEAN))"),
    ("SELECT bool_or(DISTINCT v > 'a') FILTER (WHERE k > 1) FROM mystore", "BOOL_OR(CAST(v > 'a' AS BOOLEAN))"),
    ("SELECT bool_or(DISTINCT v > 'a') OVER (ORDER BY k RANGE UNBOUNDED PRECEDING) FROM mystore", "BOOL_OR(CAST(v > 'a' AS BOOLEAN))"),
])
def test_bool_and_or_of_distinct_values_is_written_without_the_distinct(sql: str, written: str) -> None:
    """Duplicates do not change an AND or an OR; sqlglot wrote the DISTINCT as BOOL_AND(CAST(DISTINCT x AS
    BOOLEAN)), which DuckDB refused (a 400 naming SQL the user never wrote)."""
    residual = planner.plan(sql, CATALOG).residual_sql or ""
    assert written in residual and "DISTINCT" not in residual, residual
