"""Classifying DuckDB's own function list, and regenerating ``planner/function_allowlist.py`` from it.

``python -m tests.planner.function_catalog`` rewrites the allowlist module
for the installed DuckDB and sqlglot; ``test_function_allowlist.py`` fails
while the module and this classification disagree with them, so a DuckDB
upgrade that adds a function cannot open a hole: a function nobody has
classified is refused, and the test names it.
"""

from __future__ import annotations

import re
from pathlib import Path

import duckdb
from sqlglot import exp

ROOT = Path(__file__).resolve().parents[2]
TARGET = ROOT / "planner" / "function_allowlist.py"

# Table functions that only compute rows from their arguments.
PURE_TABLE_FUNCTIONS = frozenset({"range", "generate_series", "unnest", "json_each", "json_tree", "repeat",
                                  "repeat_row"})

# Scalar, aggregate, window functions and macros that reach outside the statement's own values: settings, the
# session, the engine's catalog and logs, the process environment, files, the network, or time (pg_sleep).
_REFUSED_EXACT = frozenset({
    "alias", "current_connection_id", "current_database", "current_query", "current_query_id", "current_schema",
    "current_schemas", "current_setting", "current_transaction_id", "current_catalog", "current_role",
    "current_user", "session_user", "user", "getvariable", "json_deserialize_sql", "json_serialize_plan",
    "json_serialize_sql", "json_execute_serialized_sql", "parse_duckdb_log_message", "stats", "txid_current",
    "version", "write_log", "get_block_size", "inet_client_addr", "inet_client_port", "inet_server_addr",
    "inet_server_port", "col_description", "obj_description", "shobj_description", "format_pg_type",
    "format_type", "map_to_pg_oid", "map_type_id_to_pg_oid", "getenv", "which_secret", "set_variable", "parse_filename", "glob",
    "add_grammar_extension", "remove_grammar_extension",
})
_REFUSED_PATTERN = re.compile(
    r"^(__internal|has_\w+_privilege$|pg_(?!typeof$|size_pretty$)|read_|parquet_|duckdb_|pragma_|enable_|disable_|"
    r"sqlite_|postgres_|mysql_|iceberg_|delta_|http|s3|azure_|gcs_|ducklake_|excel_|checkpoint|force_checkpoint|"
    r"query)")

# SQL syntax that sqlglot represents as a function node but DuckDB does not list as a function.
SYNTAX_NAMES = frozenset({
    "cast", "try_cast", "coalesce", "extract", "array", "struct", "map", "if", "case", "nullif", "interval",
    "bracket", "distinct", "greatest", "least", "current_timestamp", "current_date", "current_time",
    "localtimestamp", "localtime", "columns", "collate", "lambda", "star", "at_time_zone", "convert_timezone",
    "is_inf", "is_nan", "in", "exists", "any", "all", "some", "trim", "substring", "overlay", "position",
    "timestamp_trunc", "date_trunc", "to_map", "try", "grouping", "grouping_id",  # MAP {k: v}, TRY(expr), GROUPING(…)
    "array_contains_all", "array_contained_by", "array_overlaps",  # the list operators @>, <@ and &&
})


def duckdb_functions() -> dict[str, tuple[frozenset[str], int, int]]:
    """name -> (its kinds, the fewest and the most parameters of its overloads), as the installed DuckDB lists
    them."""
    con = duckdb.connect()
    rows = con.sql("SELECT function_name, list(DISTINCT function_type), min(len(parameters)), max(len(parameters)) "
                   "FROM duckdb_functions() GROUP BY function_name").fetchall()
    con.close()
    return {name: (frozenset(kinds), lo, hi) for name, kinds, lo, hi in rows}


def is_operator(name: str) -> bool:
    """``+``, ``~~``, ``IS DISTINCT FROM``: operators, never written as name(…) in SQL."""
    return not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", name)


def allowed(name: str, kinds: frozenset[str]) -> bool:
    """A name may be called when one of its kinds is an allowed call: a pure table function (in FROM), or a
    scalar/aggregate/window function or macro the refusal rules do not catch (a pragma never)."""
    if name in PURE_TABLE_FUNCTIONS:
        return True
    if not kinds & {"scalar", "aggregate", "window", "macro"}:
        return False
    return name not in _REFUSED_EXACT and not _REFUSED_PATTERN.match(name)


def sqlglot_names(name: str, min_args: int, max_args: int) -> set[str]:
    """The names the planner's guard sees for ``SELECT name(…)`` with each number of arguments DuckDB's overloads
    take (sqlglot may map a call to a typed node, and by its number of arguments: ``make_timestamp(micros)`` is
    an anonymous call, ``make_timestamp(y, m, d, h, mi, s)`` a TimestampFromParts)."""
    from planner.dialect import parse_statement
    from planner.guard import function_name

    out = set()
    for n in sorted({0, max(min_args, 1), *range(min_args, min(max_args, 8) + 1)}):
        args = ", ".join(["1"] * n)
        for sql in (f"SELECT {name}({args})", f"SELECT * FROM {name}({args})"):
            try:
                node = parse_statement(sql)
            except Exception:  # noqa: BLE001 - some need other argument shapes: try the next form
                continue
            funcs = [f for f in node.find_all(exp.Func) if not isinstance(f, exp.Cast)]
            if funcs:
                out.add(function_name(funcs[0]))
                break
    return out


def classify() -> tuple[list[str], list[str], list[str]]:
    """(allowed DuckDB names, refused DuckDB names, the guard-level names of the allowed ones)."""
    ok, refused, guard = [], [], set(SYNTAX_NAMES)
    for name, (kinds, lo, hi) in sorted(duckdb_functions().items()):
        if is_operator(name):
            continue
        if allowed(name, kinds):
            ok.append(name)
            guard.add(name.lower())
            guard.update(sqlglot_names(name, lo, hi))
        else:
            refused.append(name)
    return ok, refused, sorted(guard)


def max_arguments(allowed: list[str]) -> dict[str, int]:
    """name -> the most arguments any of its overloads takes, for the allowed names none of whose overloads takes
    a variable number (the guard refuses a call with more: sqlglot drops arguments past what it knows)."""
    con = duckdb.connect()
    rows = con.sql("SELECT function_name, max(len(parameters)), bool_or(varargs IS NOT NULL) FROM duckdb_functions() "
                   "GROUP BY function_name").fetchall()
    con.close()
    names = set(allowed)
    return {name: most for name, most, varargs in sorted(rows) if name in names and not varargs}


def aggregates(allowed: list[str]) -> list[str]:
    """The allowed names DuckDB has an aggregate of: the planner must not push a LIMIT past one (sqlglot parses the
    ones it does not know, ``mean``, ``product``, ``mad``…, as anonymous calls, not aggregates)."""
    funcs = duckdb_functions()
    return [name for name in allowed if "aggregate" in funcs[name][0]]


def set_returning(allowed: list[str]) -> list[str]:
    """The allowed macros that unnest (``generate_subscripts``, ``regexp_split_to_table``): in a SELECT list they
    return rows, not a value, so the planner must not push a LIMIT past one either."""
    con = duckdb.connect()
    rows = con.sql("SELECT DISTINCT function_name FROM duckdb_functions() WHERE function_type = 'macro' "
                   "AND lower(macro_definition) LIKE '%unnest%'").fetchall()
    con.close()
    names = set(allowed)
    return sorted(name for (name,) in rows if name in names)


def _wrapped(pieces: list[str]) -> str:
    """Items of a generated literal, indented and wrapped before 116 columns."""
    lines, line = [], "   "
    for piece in pieces:
        if len(line) + len(piece) > 116:
            lines.append(line)
            line = "   "
        line += piece
    lines.append(line)
    return "\n".join(lines)


def _arities(most: dict[str, int]) -> str:
    return _wrapped([f" {n!r}: {k}," for n, k in most.items()])


def _names(items: list[str]) -> str:
    return _wrapped([f" {n!r}," for n in items])


def render() -> str:
    ok, refused, guard = classify()
    version = duckdb.__version__
    return f'''"""Which functions statements may call: an allowlist, generated from DuckDB's own function list.

Generated by ``python -m tests.planner.function_catalog`` for DuckDB {version}; ``tests/planner/
test_function_allowlist.py`` fails when this file and the installed DuckDB or sqlglot disagree, so a function
DuckDB adds is refused until someone classifies it. Allowed: functions that compute only from their
arguments (and the clock). Refused: whatever reaches settings, the session, the catalog, logs, the
environment, files or the network.
"""

from __future__ import annotations

__all__ = ["ALLOWED_DUCKDB_FUNCTIONS", "REFUSED_DUCKDB_FUNCTIONS", "GUARD_NAMES", "MAX_ARGUMENTS",
           "AGGREGATE_FUNCTIONS", "SET_RETURNING_FUNCTIONS"]

#: DuckDB function names a statement may call.
ALLOWED_DUCKDB_FUNCTIONS = frozenset({{
{_names(ok)}
}})

#: DuckDB function names a statement may never call.
REFUSED_DUCKDB_FUNCTIONS = frozenset({{
{_names(refused)}
}})

#: The names the planner's guard sees (sqlglot's, for the allowed functions and SQL syntax).
GUARD_NAMES = frozenset({{
{_names(guard)}
}})

#: The most arguments an allowed DuckDB function takes (those with a variable number are not listed).
MAX_ARGUMENTS = {{
{_arities(max_arguments(ok))}
}}

#: The allowed names DuckDB has an aggregate of (sqlglot parses some as plain calls).
AGGREGATE_FUNCTIONS = frozenset({{
{_names(aggregates(ok))}
}})

#: The allowed macros that return rows in a SELECT list (they unnest).
SET_RETURNING_FUNCTIONS = frozenset({{
{_names(set_returning(ok))}
}})
'''


if __name__ == "__main__":
    TARGET.write_text(render(), encoding="utf-8")
    print(f"wrote {TARGET}")
