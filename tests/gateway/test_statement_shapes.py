"""Statement shapes answer what DuckDB answers: row limits, FETCH, VALUES and PIVOT statements.

Found by running statements over a store through the gateway and over the
same rows in DuckDB (s18):

- ``SELECT id FROM nums ORDER BY id LIMIT 10 PERCENT`` answered one row of
  40: the planner read the ``10`` as a row count and pushed it into the scan,
  and DuckDB then took 10% of those ten rows (planner/scopes.py ``_row_count``).
- ``FETCH FIRST 2 ROWS ONLY`` was INTERNAL (the planner read FETCH as a
  LIMIT); ``FETCH FIRST n PERCENT`` and ``… WITH TIES`` were written by sqlglot
  as ``LIMIT n``, a wrong answer where DuckDB refuses both.
- A top-level ``VALUES`` or ``PIVOT`` statement was refused as READ_ONLY.
- ``SELECT -id AS id FROM nums ORDER BY id LIMIT 2`` answered -1 and 0, not
  -39 and -38: ORDER BY names the output column ``id``, and the planner took
  it for the store's key and pushed the LIMIT into a key-ordered scan.
- A store scanned more than once by a statement that names it once (a
  recursive CTE's step, PIVOT finding its columns) was an EXECUTION_ERROR:
  the scan was a stream, which DuckDB can read once (gateway/arrow_scans.py
  ``reads_once``).
"""

from __future__ import annotations

import duckdb
import pytest

from gateway import Gateway
from gateway.engine.errors import NotSupported
from tests.gateway.test_function_calls import gw, oracle  # noqa: F401 - the same store and oracle table
from tests.planner.reference_store import run_sql


@pytest.mark.parametrize("sql", [
    "SELECT id FROM nums ORDER BY id LIMIT 10 PERCENT",
    "SELECT id FROM nums ORDER BY id DESC LIMIT 10%",
    "SELECT count(*) FROM (SELECT id FROM nums LIMIT 25 PERCENT)",
    "SELECT id FROM nums ORDER BY id FETCH FIRST 2 ROWS ONLY",
    "SELECT id FROM nums ORDER BY id OFFSET 2 ROWS FETCH NEXT 3 ROWS ONLY",
    "SELECT id FROM nums WHERE id > 30 ORDER BY id DESC FETCH FIRST 3 ROWS ONLY",
])
def test_row_limits_answer_as_duckdb_does(gw: Gateway, oracle: duckdb.DuckDBPyConnection, sql: str) -> None:  # noqa: F811
    assert run_sql(gw, sql) == oracle.execute(sql).fetchall()


@pytest.mark.parametrize("sql, message", [
    ("SELECT id FROM nums ORDER BY id FETCH FIRST 10 PERCENT ROWS ONLY",
     r"FETCH FIRST n PERCENT is not supported; use LIMIT n PERCENT \(line 1, column"),
    ("SELECT id FROM (SELECT * FROM nums ORDER BY name FETCH FIRST 2 ROWS WITH TIES)",
     r"FETCH … WITH TIES is not supported \(DuckDB has no WITH TIES\) \(line 1, column"),
])
def test_fetch_forms_sqlglot_would_write_as_a_limit_are_refused(gw: Gateway, sql: str, message: str) -> None:  # noqa: F811
    with pytest.raises(NotSupported, match=message):
        gw.sql(sql)


@pytest.mark.parametrize("sql", [
    "VALUES (1, 'a'), (2, 'b')",
    "VALUES (1, 'a'), (2, 'b') ORDER BY 1 DESC LIMIT 1",
    "VALUES ((SELECT count(*) FROM nums WHERE id < 7))",
    "PIVOT (SELECT * FROM nums WHERE id < 5) ON name USING sum(amount)",
    "UNPIVOT (SELECT id, id * 2 AS d FROM nums WHERE id = 3) ON id, d INTO NAME k VALUE v",
])
def test_values_and_pivot_statements_answer_as_duckdb_does(gw: Gateway, oracle: duckdb.DuckDBPyConnection,  # noqa: F811
                                                           sql: str) -> None:
    """Statements of their own in DuckDB that only read; they were refused as READ_ONLY."""
    want = oracle.execute(sql)
    result = gw.sql(sql)
    assert [c[0] for c in result.columns] == [d[0] for d in want.description]
    assert sorted(result.rows()) == sorted(want.fetchall())


@pytest.mark.parametrize("sql", [
    "SELECT * FROM (PIVOT nums ON name USING count(*)) ORDER BY id LIMIT 3",
    "PIVOT nums ON name USING sum(amount)",
    "WITH RECURSIVE r AS (SELECT id FROM nums WHERE id = 0 UNION ALL "
    "SELECT n.id FROM nums n JOIN r ON n.id = r.id + 1 WHERE r.id < 3) SELECT * FROM r ORDER BY 1",
])
def test_a_store_duckdb_scans_more_than_once_is_read_in_full(gw: Gateway, oracle: duckdb.DuckDBPyConnection,  # noqa: F811
                                                            sql: str) -> None:
    assert sorted(run_sql(gw, sql)) == sorted(oracle.execute(sql).fetchall())


@pytest.mark.parametrize("sql", [
    "SELECT -id AS id FROM nums ORDER BY id LIMIT 2",
    "SELECT 40 - id AS id FROM nums ORDER BY id LIMIT 2 OFFSET 1",
    "SELECT amount * 1000 + id AS id FROM nums ORDER BY id DESC LIMIT 3",
    "SELECT id AS k FROM nums ORDER BY k DESC LIMIT 2 OFFSET 1",  # the key under another name: still pushed
    "SELECT name AS id FROM nums ORDER BY nums.id LIMIT 2",      # a qualified name is the store's column
])
def test_order_by_names_an_output_column_before_a_store_column(gw: Gateway, oracle: duckdb.DuckDBPyConnection,  # noqa: F811
                                                               sql: str) -> None:
    assert run_sql(gw, sql) == oracle.execute(sql).fetchall()
