"""Read-only enforcement on the AST: which statements run and which functions never do.

DuckDB runs the residual SQL with external access disabled; this is the
first line of defence, and it gives a clear message naming the statement or
function instead of a DuckDB permission error. It works on the parsed tree,
never on the text, so comments, quoting and case cannot smuggle a write in.
"""

from __future__ import annotations

from sqlglot import exp

from .errors import ForbiddenFunctionError, ReadOnlyError
from .positions import node_position

__all__ = ["check_read_only", "check_functions", "function_name", "FORBIDDEN_FUNCTIONS"]

ALLOWED = "only SELECT, WITH, EXPLAIN, SHOW, DESCRIBE and SET are allowed"

# Functions that reach files, the network, extensions, the environment or
# DuckDB's own catalog. Prefixes catch the families (read_json_auto, ...).
FORBIDDEN_FUNCTIONS = frozenset(
    {
        "glob", "getenv", "query", "query_table", "httpfs", "load_extension", "install_extension",
        "sniff_csv", "parquet_scan", "sqlite_scan", "postgres_scan", "mysql_scan", "iceberg_scan",
        "delta_scan", "st_read", "read_csv", "read_csv_auto", "read_parquet", "read_json",
        "read_json_auto", "read_json_objects", "read_ndjson", "read_ndjson_auto", "read_text",
        "read_blob", "read_xlsx", "current_setting", "enable_logging", "checkpoint",
        "force_checkpoint", "which_secret", "set_variable", "getvariable", "load",
    }
)
FORBIDDEN_PREFIXES = (
    "read_", "parquet_", "sqlite_", "postgres_", "mysql_", "iceberg_", "delta_", "duckdb_",
    "pragma_", "icu_", "pg_", "http", "s3", "azure_", "gcs_", "ducklake_", "excel_", "json_execute",
)

_STATEMENT_NAMES: dict[type, str] = {
    exp.Insert: "INSERT", exp.Update: "UPDATE", exp.Delete: "DELETE", exp.Merge: "MERGE",
    exp.Create: "CREATE", exp.Drop: "DROP", exp.Alter: "ALTER", exp.Copy: "COPY",
    exp.Attach: "ATTACH", exp.Detach: "DETACH", exp.Pragma: "PRAGMA", exp.Install: "INSTALL",
    exp.Use: "USE", exp.TruncateTable: "TRUNCATE", exp.Summarize: "SUMMARIZE", exp.Pivot: "PIVOT",
    exp.Transaction: "BEGIN", exp.Commit: "COMMIT", exp.Rollback: "ROLLBACK", exp.Analyze: "ANALYZE",
    exp.Cache: "CACHE", exp.Uncache: "UNCACHE", exp.LoadData: "LOAD",
}
_WRITE_NODES = tuple(t for t in _STATEMENT_NAMES if t is not exp.Pivot)


def statement_name(node: exp.Expression, sql: str = "") -> str:
    """The SQL keyword that names a statement, for error messages."""
    for typ, name in _STATEMENT_NAMES.items():
        if isinstance(node, typ):
            return name
    if isinstance(node, exp.Command):
        return str(node.this).upper()
    if isinstance(node, exp.Values):
        return "VALUES"
    words = sql.split(None, 1)
    return words[0].upper() if words else type(node).__name__.upper()


def check_read_only(sql: str, statement: exp.Expression) -> None:
    """Refuse any node that writes, loads, attaches or configures, wherever it sits in the tree."""
    if isinstance(statement, exp.Command):
        raise ReadOnlyError(f"{ALLOWED}; got {statement_name(statement)}", line=1, col=1)
    for node in statement.walk():
        if isinstance(node, _WRITE_NODES + (exp.Command,)) or (isinstance(node, exp.Set) and node is not statement):
            line, col = node_position(sql, node)
            raise ReadOnlyError(f"{ALLOWED}; got {statement_name(node)}", line=line or 1, col=col or 1)
        if isinstance(node, exp.Pivot) and node.parent is None:
            raise ReadOnlyError(f"{ALLOWED}; got PIVOT statement", line=1, col=1)


def function_name(node: exp.Func) -> str:
    if isinstance(node, exp.Anonymous):
        return node.name.lower()
    return node.sql_name().lower()


def is_forbidden(name: str) -> bool:
    return name in FORBIDDEN_FUNCTIONS or name.startswith(FORBIDDEN_PREFIXES)


def check_functions(sql: str, statement: exp.Expression) -> None:
    """Refuse functions that reach outside the store relations, by name."""
    for node in statement.walk():
        if isinstance(node, exp.Func) and not isinstance(node, exp.Cast):
            name = function_name(node)
            if name.startswith("duckdb_") and isinstance(node.parent, exp.Table):
                continue  # a catalog function used as a table: refused as "not a store" by the analyser
            if is_forbidden(name):
                line, col = node_position(sql, node)
                raise ForbiddenFunctionError(
                    f"function {name}() is not allowed: it reaches files, the network, extensions or "
                    "the engine's catalog; queries may only read stores",
                    line=line,
                    col=col,
                )
