"""Function calls answer what DuckDB answers: aggregates sqlglot does not know, arguments sqlglot would drop.

Found by running calls of DuckDB's functions through the gateway and through
DuckDB side by side (s17):

- ``SELECT mean(x) FROM s LIMIT 1`` averaged one row: sqlglot parses the
  DuckDB aggregates it does not know (``mean``, ``product``, ``mad``,
  ``sem``, ``histogram``, ``fsum``…) as plain calls, so the planner pushed
  the LIMIT into the scan (planner/scopes.py ``_row_changing``).
- ``SELECT generate_subscripts(l, 1) FROM s LIMIT 5`` answered fewer rows
  than 5: a macro that returns rows was not seen as one either.
- ``jaro_winkler_similarity(a, b, 0.99)`` ignored its cutoff and
  ``time_bucket(w, ts, 'Asia/Tokyo')`` read the zone as a column
  (planner/dialect.py ``_counted``).

The oracle is DuckDB over the same rows as plain tables (reference_store.py).
"""

from __future__ import annotations

import math
import random
from collections.abc import Iterator
from typing import Any

import duckdb
import pytest

from gateway import Gateway
from gateway.engine.errors import SqlError
from stores.catalog.schema import Column, SqlType, StoreKind, StoreSpec
from tests.planner.reference_store import ReferenceStore, product_gateway, run_sql

STATEMENTS_PER_SEED = 150
SPEC = StoreSpec("nums", StoreKind.KEY_VALUE, Column("id", SqlType.BIGINT),
                 (Column("name", SqlType.VARCHAR), Column("amount", SqlType.DOUBLE)), partitions=3)
STORES = {"nums": ReferenceStore(SPEC, [{"id": i, "name": f"n{i}", "amount": i * 0.25} for i in range(40)])}

# DuckDB aggregates sqlglot parses as plain calls, then ones it knows, and expressions over them
AGGREGATES = ["mean(amount)", "product(id % 3 + 1)", "mad(amount)", "sem(amount)", "fsum(amount)", "kahan_sum(amount)",
              "entropy(id % 4)", "kurtosis_pop(amount)", "favg(amount)", "sum_no_overflow(id)", "histogram(id % 3)",
              "reservoir_quantile(id, 0.5)", "sum(amount)", "count(*)", "avg(id)", "median(amount)",
              "count(DISTINCT id % 5)", "mean(amount) + 1", "round(mean(amount), 2)", "max(id) - min(id)"]
WHERES = ["", " WHERE id = 7", " WHERE id IN (1, 2, 30)", " WHERE id > 10", " WHERE id BETWEEN 3 AND 9",
          " WHERE name LIKE 'n1%'"]


@pytest.fixture(scope="module")
def gw(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Gateway]:
    with product_gateway(STORES, tmp_path_factory.mktemp("function-calls")) as g:
        yield g


@pytest.fixture(scope="module")
def oracle() -> Iterator[duckdb.DuckDBPyConnection]:
    """The same rows as one plain table (what run_direct builds per statement, built once)."""
    con = duckdb.connect()
    con.execute("CREATE TABLE nums (id BIGINT, name VARCHAR, amount DOUBLE)")
    con.executemany("INSERT INTO nums VALUES (?, ?, ?)", [(r["id"], r["name"], r["amount"]) for r in STORES["nums"].rows])
    yield con
    con.close()


def _rounded(rows: list[tuple[Any, ...]]) -> list[tuple[Any, ...]]:
    return [tuple(round(v, 6) if isinstance(v, float) and not math.isnan(v) else v for v in r) for r in rows]


def _statement(rng: random.Random) -> str:
    a, b, where = rng.choice(AGGREGATES), rng.choice(AGGREGATES), rng.choice(WHERES)
    return rng.choice([
        f"SELECT {a} AS v FROM nums{where} LIMIT {rng.randint(1, 3)}",
        f"SELECT {a} AS v, {b} AS w FROM nums{where} LIMIT 1",
        f"SELECT id % 4 AS g, {a} AS v FROM nums{where} GROUP BY g ORDER BY g LIMIT 2",
        f"SELECT 1 AS one FROM nums{where} ORDER BY {a} LIMIT 1",
        f"SELECT id % 3 AS g FROM nums{where} GROUP BY g HAVING {a} > 0 ORDER BY g LIMIT 2",
        f"SELECT * FROM (SELECT {a} AS v FROM nums{where}) LIMIT 1",
        f"SELECT {a} AS v FROM nums{where} ORDER BY 1 LIMIT 1 OFFSET 0",
        f"SELECT {a} AS v FROM (SELECT * FROM nums{where} ORDER BY id LIMIT 5)",
    ])


@pytest.mark.parametrize("seed", [1, 2])
def test_aggregates_with_a_limit_answer_what_duckdb_answers(gw: Gateway, oracle: duckdb.DuckDBPyConnection,
                                                           seed: int) -> None:
    rng = random.Random(seed)
    wrong = []
    for _ in range(STATEMENTS_PER_SEED):
        sql = _statement(rng)
        got, want = _rounded(run_sql(gw, sql)), _rounded(oracle.execute(sql).fetchall())
        if got != want:
            wrong.append(f"{sql}: {got} != {want}")
    assert wrong == [], wrong[:5]


@pytest.mark.parametrize("aggregate", ["mean(amount)", "product(id % 3 + 1)", "mad(amount)", "histogram(id % 3)"])
def test_the_case_found(gw: Gateway, oracle: duckdb.DuckDBPyConnection, aggregate: str) -> None:
    sql = f"SELECT {aggregate} AS v FROM nums LIMIT 1"
    assert run_sql(gw, sql) == oracle.execute(sql).fetchall()


@pytest.mark.parametrize("sql", [
    "SELECT generate_subscripts(CASE WHEN id % 4 = 0 THEN [1] ELSE [] END, 1) AS g FROM nums LIMIT 5",
    "SELECT regexp_split_to_table(CASE WHEN id % 4 = 0 THEN 'a,b' END, ',') AS g FROM nums LIMIT 5",
])
def test_macros_that_return_rows_keep_their_limit_after_them(gw: Gateway, oracle: duckdb.DuckDBPyConnection,
                                                              sql: str) -> None:
    """Most rows give none: a LIMIT pushed into the scan (as it was) answered fewer rows than asked for."""
    assert run_sql(gw, sql) == oracle.execute(sql).fetchall()


@pytest.mark.parametrize("sql", [
    "SELECT jaro_winkler_similarity('abc', 'abd', 0.99), jaro_winkler_similarity('abc', 'abd', 0.5)",
    "SELECT time_bucket(INTERVAL 1 DAY, TIMESTAMPTZ '2024-01-01 10:20:00+00', 'Asia/Tokyo')",
    "SELECT regexp_replace('aBc', 'b', 'x', 'gi')",
    "SELECT date_trunc('hour', TIMESTAMP '2024-01-01 10:20:00'), date_diff('hour', DATE '2024-01-01', DATE '2024-01-02')",
    "SELECT json_extract_string('{\"a\": 1}', 'a'), json_keys('{\"a\": {\"b\": 1}}', '$.a')",
    "SELECT strftime(TIMESTAMP '2024-02-29 13:45:00', '%j %H'), list_sort([3, NULL, 1], 'DESC', 'NULLS FIRST')",
    # s18: sqlglot wrote reduce's initial value before its lambda (a binder error), apply as "x APPLY(y)",
    # log2(x) as LOG(2, x) (the last digit differs) and date_add(1, DATE …) as DATE + INTERVAL (a binder error)
    "SELECT reduce([1, 2, 3], lambda x, y: x + y, 10), apply([1, 2], lambda x: x + 1)",
    "SELECT log2(5), log2(11), log10(5)",
    "SELECT date_add(1, DATE '2024-01-31'), date_add(DATE '2024-01-31', INTERVAL 1 MONTH)",
])
def test_calls_sqlglot_would_rewrite_answer_as_duckdb_does(gw: Gateway, sql: str) -> None:
    con = duckdb.connect()
    con.execute("SET TimeZone = 'UTC'")
    assert gw.sql(sql).rows() == con.execute(sql).fetchall()


@pytest.mark.parametrize("sql, message", [
    ("SELECT instr('abc', 'c', 2)", r"instr\(\) takes at most 2 arguments, got 3 \(line 1, column 8\)"),
    ("SELECT log10(100, 2)", r"log10\(\) takes at most 1 argument, got 2"),
    ("SELECT arg_max(name, id, 2, 5) FROM nums", r"arg_max\(\) takes at most 3 arguments, got 4 \(line 1, column 8\)"),
    ("SELECT 1, map([1], [2], 3)", r"map\(\) takes at most 2 arguments, got 3 \(line 1, column 11\)"),  # s18: a keyword
])
def test_a_call_with_more_arguments_than_duckdb_takes_is_an_error_not_an_answer(gw: Gateway, sql: str,
                                                                               message: str) -> None:
    with pytest.raises(SqlError, match=message):
        gw.sql(sql)


# Expressions sqlglot writes back under another name or shape (pow as POWER, len as LENGTH, IF as a CASE,
# x IS NOT NULL as NOT x IS NULL); DuckDB names an unaliased column after the text of its expression.
UNALIASED = ["pow(amount, 2)", "len(name)", "log2(id + 1)", "log10(id + 1)", "IF(id > 3, 'a', 'b')",
             "name IS NOT NULL", "instr(name, '1')", "string_split(name, '1')", "ceiling(amount)", "substr(name, 2)",
             "list_has_any([id], [1, 2])", "array_has_all([id, 1], [1])", "struct_pack(a := id, b := name)",
             "to_hex(id)", "char_length(name)", "list_value(id, 1)", "filter([id, 2], lambda x: x > 1)"]


@pytest.mark.parametrize("expression", UNALIASED)
def test_an_unaliased_column_is_named_as_duckdb_names_it(gw: Gateway, oracle: duckdb.DuckDBPyConnection,
                                                         expression: str) -> None:
    """What a BI tool or pandas shows as the column's name: ``pow(amount, 2)``, not ``power(amount, 2)``."""
    sql = f"SELECT {expression}, id FROM nums WHERE id = 5"
    want = oracle.execute(sql)
    names = [d[0] for d in want.description]
    result = gw.sql(sql)
    assert [c[0] for c in result.columns] == names
    assert result.rows() == want.fetchall()


@pytest.mark.parametrize("aggregate", ["list(id ORDER BY id)", "list(DISTINCT name ORDER BY name)", "max_by(name, id)",
                                       "argmin(name, id)", "string_agg(name, ',' ORDER BY id)", "countif(id > 3)",
                                       "var_samp(amount)", "count_if(id > 3) FILTER (WHERE id < 8)", "sum(id)"])
def test_an_unaliased_aggregate_is_named_as_duckdb_names_it(gw: Gateway, oracle: duckdb.DuckDBPyConnection,
                                                            aggregate: str) -> None:
    """Aggregates stay sqlglot's typed nodes (the planner reads them) but are written under the name called:
    ``list(id)`` was the column ``array_agg(id)``, ``string_agg`` ``listagg`` (planner/dialect.py ``_renamed_to``)."""
    sql = f"SELECT {aggregate} FROM nums WHERE id < 10"
    want = oracle.execute(sql)
    result = gw.sql(sql)
    assert [c[0] for c in result.columns] == [d[0] for d in want.description]
    assert _rounded(result.rows()) == _rounded(want.fetchall())  # var_samp's last digit follows the row order


def test_a_call_duckdb_refuses_is_refused_though_sqlglot_could_write_it(gw: Gateway) -> None:
    """``struct_pack(1)`` has no field name: DuckDB refuses it; sqlglot wrote it as ``{'_0': 1}`` and answered."""
    with pytest.raises(duckdb.BinderException):
        duckdb.connect().execute("SELECT struct_pack(1)")
    with pytest.raises(SqlError, match=r"struct_pack\(INTEGER_LITERAL\)"):
        gw.sql("SELECT struct_pack(1)")


# Operators sqlglot represents as function nodes: the guard checks them by those nodes' names (s18: @> and &&
# were refused as unknown functions once the calls array_has_all/list_has_any went to DuckDB as written; <@
# always had been).
OPERATORS = ["[1] <@ [1, 2]", "[1, 2] @> [1]", "[1, 2] && [2]", "'abc' ^@ 'a'", "2 ** 3", "2 ^ 3", "7 // 2",
             "'a' ~~ 'a'", "'a' !~~ 'b'", "'a' ~~* 'A'", "'a' ~ 'a'", "'a' GLOB 'a'", "[1] || [2]", "@ -5", "~ 5",
             "5 << 1", "5 & 3", "5 | 3", "{'a': 1}.a", "[1, 2][1:2]", "'abc'[1]", "'{\"a\": 1}'::JSON ->> 'a'",
             "1 IS NOT DISTINCT FROM 2"]


@pytest.mark.parametrize("operator", OPERATORS)
def test_operators_answer_as_duckdb_does(gw: Gateway, operator: str) -> None:
    sql = f"SELECT {operator} AS v"
    assert gw.sql(sql).rows() == duckdb.connect().execute(sql).fetchall()
