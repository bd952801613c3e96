"""The function allowlist against DuckDB's own function list: nothing unclassified, nothing refused gets through.

If DuckDB or sqlglot is upgraded, the first test names what changed; regenerate with
``python -m tests.planner.function_catalog`` after classifying any new function in that module.
"""

from __future__ import annotations

import pytest

import planner
from planner.function_allowlist import ALLOWED_DUCKDB_FUNCTIONS, GUARD_NAMES, REFUSED_DUCKDB_FUNCTIONS
from planner.pg_compat import REWRITTEN_FUNCTIONS as PG_REWRITTEN
from tests.planner.function_catalog import duckdb_functions, is_operator, render
from tests.planner.planner_catalog import CATALOG

FUNCTIONS = duckdb_functions()


def test_the_allowlist_is_generated_from_this_duckdb_and_sqlglot() -> None:
    from tests.planner.function_catalog import TARGET

    assert TARGET.read_text(encoding="utf-8") == render(), (
        "planner/function_allowlist.py is out of date for the installed DuckDB/sqlglot: classify new functions in "
        "tests/planner/function_catalog.py and run python -m tests.planner.function_catalog")


def test_every_duckdb_function_is_classified() -> None:
    named = {n for n in FUNCTIONS if not is_operator(n)}
    assert ALLOWED_DUCKDB_FUNCTIONS | REFUSED_DUCKDB_FUNCTIONS == named
    assert not ALLOWED_DUCKDB_FUNCTIONS & REFUSED_DUCKDB_FUNCTIONS


def _plan(sql: str) -> BaseException | None:
    try:
        planner.plan(sql, CATALOG)
    except planner.PlanningError as exc:
        return exc
    return None


@pytest.mark.parametrize("name", sorted(REFUSED_DUCKDB_FUNCTIONS))
def test_a_refused_function_never_plans(name: str) -> None:
    """Refused, or (PostgreSQL's catalog functions, planner/pg_compat.py) rewritten so DuckDB's is never called."""
    kinds, n, _ = FUNCTIONS[name]
    args = ", ".join(["'x'"] * max(n, 1))
    for sql in (f"SELECT {name}({args})", f"SELECT {name}()", f"SELECT * FROM {name}({args})"):
        err = _plan(sql)
        if err is None and name in PG_REWRITTEN:
            residual = planner.plan(sql, CATALOG).residual_sql or ""
            assert f"{name}(" not in residual.lower(), f"{sql} reaches DuckDB: {residual}"
            continue
        assert err is not None, f"{sql} planned"
        assert not isinstance(err, planner.TypeMismatchError), sql


def test_allowed_functions_are_accepted_by_the_guard() -> None:
    """With every number of arguments its overloads take: sqlglot names some calls by their arguments
    (make_timestamp(y, m, d, h, mi, s) is a TimestampFromParts, make_timestamp(micros) is not; the 6-argument
    form was refused as "unknown function timestamp_from_parts()")."""
    refused = []
    for name in sorted(ALLOWED_DUCKDB_FUNCTIONS):
        kinds, lo, hi = FUNCTIONS[name]
        if not kinds & {"scalar", "aggregate", "window", "macro"}:
            continue
        for n in sorted({max(lo, 1), *range(lo, min(hi, 8) + 1)}):
            err = _plan(f"SELECT {name}({', '.join(['1'] * n)})")
            if isinstance(err, planner.ForbiddenFunctionError):
                refused.append(f"{name}/{n}")
    assert not refused, f"allowed by the list but refused by the guard: {refused}"


@pytest.mark.parametrize("sql, inside", [
    ("SELECT MAP {1: 'a'}", "SELECT MAP {1: read_text('/etc/passwd')}"),
    ("SELECT MAP {'k': [1, 2]}['k']", None),
    ("SELECT TRY(CAST('x' AS INT))", "SELECT TRY(getenv('HOME'))"),
    ("SELECT a, GROUPING(a), GROUPING_ID(a) FROM (VALUES (1)) t(a) GROUP BY ROLLUP (a)", None),
])
def test_syntax_sqlglot_reads_as_a_function_plans(sql: str, inside: str | None) -> None:
    """DuckDB's MAP {k: v} literal, TRY(expr) and GROUPING(…) are nodes of their own to sqlglot (ToMap, Try,
    Grouping), and not in DuckDB's function list: they were refused as "unknown function to_map()" (a name the
    statement never wrote), "unknown function try()" and "unknown function grouping()" (s17). What they hold is
    still guarded."""
    assert _plan(sql) is None
    if inside is not None:
        assert isinstance(_plan(inside), planner.ForbiddenFunctionError)


@pytest.mark.parametrize("sql", [
    "SELECT json_serialize_plan('SELECT current_setting(''memory_limit'')', optimize := true)",
    "SELECT * FROM duckdb_settings()",
    "SELECT getenv('HOME')",
    "SELECT json_serialize_sql('SELECT 1')",
    "SELECT * FROM read_text('/etc/passwd')",
    "SELECT pg_sleep(100)",
    "SELECT brand_new_function(1)",
])
def test_escape_probes_are_refused(sql: str) -> None:
    assert isinstance(_plan(sql), (planner.ForbiddenFunctionError, planner.SqlSyntaxError)), sql


@pytest.mark.parametrize("sql, function", [
    ("SELECT current_setting('memory_limit')", "current_setting("),
    ("SELECT version()", "version("),
])
def test_postgres_catalog_probes_never_reach_duckdb(sql: str, function: str) -> None:
    """PostgreSQL clients call these on connect: they plan, but over the system tables (planner/pg_compat.py),
    which hold only the session's own settings and a PostgreSQL version string, never DuckDB's."""
    residual = planner.plan(sql, CATALOG).residual_sql or ""
    assert function not in residual.lower() and "__iq_sys_" in residual or "PostgreSQL" in residual, residual


def test_unknown_functions_get_a_did_you_mean_and_long_names_are_shortened() -> None:
    err = _plan("SELECT sumz(1)")
    assert isinstance(err, planner.ForbiddenFunctionError) and "unknown function sumz(); did you mean sum()?" in str(err)
    err = _plan("SELECT " + "f" * 900 + "(1)")
    assert isinstance(err, planner.ForbiddenFunctionError) and "(900 characters)" in str(err) and len(str(err)) < 300
    err = _plan("SELECT " + "f" * 900_000 + "(1)")  # refused before parsing: a linear scan of the text
    assert isinstance(err, planner.SqlSyntaxError) and "longer than 1024 characters" in str(err)
    assert "sum" in GUARD_NAMES and "current_setting" not in GUARD_NAMES
