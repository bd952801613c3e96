"""Read-only enforcement on the AST: which statements run and which functions never do.

DuckDB runs the residual SQL with external access disabled; this is the
first line of defence, and it gives a clear message naming the statement or
function instead of a DuckDB permission error. It works on the parsed tree,
never on the text, so comments, quoting and case cannot smuggle a write in.
"""

from __future__ import annotations

from sqlglot import exp

from .errors import ForbiddenFunctionError, ReadOnlyError, ResourceLimitError, SqlSyntaxError
from .function_allowlist import GUARD_NAMES, MAX_ARGUMENTS, REFUSED_DUCKDB_FUNCTIONS
from .positions import node_position
from .suggest import closest

__all__ = ["check_read_only", "check_functions", "check_argument_counts", "check_value_sizes", "function_name",
           "is_allowed", "MAX_VALUE_ELEMENTS"]

ALLOWED = "only SELECT, WITH, VALUES, EXPLAIN, SHOW, DESCRIBE and SET are allowed"

_STATEMENT_NAMES: dict[type, str] = {
    exp.Insert: "INSERT", exp.Update: "UPDATE", exp.Delete: "DELETE", exp.Merge: "MERGE",
    exp.Create: "CREATE", exp.Drop: "DROP", exp.Alter: "ALTER", exp.Copy: "COPY",
    exp.Attach: "ATTACH", exp.Detach: "DETACH", exp.Pragma: "PRAGMA", exp.Install: "INSTALL",
    exp.Use: "USE", exp.TruncateTable: "TRUNCATE", exp.Summarize: "SUMMARIZE", exp.Pivot: "PIVOT",
    exp.Transaction: "BEGIN", exp.Commit: "COMMIT", exp.Rollback: "ROLLBACK", exp.Analyze: "ANALYZE",
    exp.Cache: "CACHE", exp.Uncache: "UNCACHE", exp.LoadData: "LOAD", exp.Into: "SELECT … INTO",
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


#: The most elements one scalar call may build (a LIST from range()/generate_series(), list_resize(), a string
#: from repeat()): such values live outside DuckDB's memory_limit, so a literal-sized giant is refused up front.
MAX_VALUE_ELEMENTS = 1_000_000


def _number(node: exp.Expression | None) -> float | None:
    if isinstance(node, exp.Literal) and not node.is_string:
        try:
            return float(node.this)
        except ValueError:
            return None
    if isinstance(node, exp.Neg):
        inner = _number(node.this)
        return None if inner is None else -inner
    return None


def _elements(node: exp.Expression) -> float | None:
    """How many elements a scalar list/string-building call with literal arguments makes, if knowable."""
    if isinstance(node, exp.GenerateSeries):
        start, end = _number(node.args.get("start")), _number(node.args.get("end"))
        step = _number(node.args.get("step")) if node.args.get("step") is not None else 1.0
        if start is None or end is None or not step:
            return None
        return max(0.0, (end - start) / step)
    if isinstance(node, exp.Repeat):
        times, this = _number(node.args.get("times")), node.this
        size = len(this.this) if isinstance(this, exp.Literal) and this.is_string else 1
        return None if times is None else times * max(1, size)
    if isinstance(node, exp.Anonymous) and node.name.lower() in ("list_resize", "array_resize") and len(node.expressions) >= 2:
        return _number(node.expressions[1])
    return None


def check_value_sizes(sql: str, statement: exp.Expression) -> None:
    """Refuse scalar calls whose literal arguments ask for a value larger than MAX_VALUE_ELEMENTS."""
    for node in statement.walk():
        if isinstance(node, (exp.GenerateSeries, exp.Repeat, exp.Anonymous)) and not isinstance(node.parent, exp.Table):
            n = _elements(node)
            if n is not None and n > MAX_VALUE_ELEMENTS:
                line, col = node_position(sql, node)
                raise ResourceLimitError(
                    f"{function_name(node)}() would build one value of {n:,.0f} elements; the limit is "
                    f"{MAX_VALUE_ELEMENTS:,} (use it as a table, FROM range(…), to stream rows instead)",
                    line=line, col=col)


def is_allowed(name: str) -> bool:
    return name in GUARD_NAMES


def check_argument_counts(sql: str, statement: exp.Expression) -> None:
    """A call with more arguments than DuckDB's function takes is refused, naming both counts.

    sqlglot would have dropped the ones past what it knows (dialect.py ``_counted``), answering a call DuckDB
    refuses: ``instr('abc', 'c', 2)`` is not ``instr('abc', 'c')``.
    """
    for node in statement.walk():
        call = node.meta.get("call") if node._meta else None
        if call is None:
            continue
        name, given = call
        most = MAX_ARGUMENTS.get(name)
        if most is not None and given > most:
            line, col = node_position(sql, node)
            takes = f"at most {most} argument{'s' if most != 1 else ''}" if most else "no arguments"
            raise SqlSyntaxError(f"{_short(name)}() takes {takes}, got {given}", line=line, col=col)


def check_functions(sql: str, statement: exp.Expression) -> None:
    """Only functions on the allowlist (``function_allowlist``, generated from DuckDB's own list) may be called.

    Anything else — what reaches settings, the session, the catalog, files, the network or extensions, and any
    function a newer DuckDB adds before it is classified — is refused by name, with a did-you-mean.
    """
    for node in statement.walk():
        if isinstance(node, exp.Func) and not isinstance(node, (exp.Cast, exp.Connector)):  # AND/OR/XOR are operators
            name = function_name(node)
            refused = name in REFUSED_DUCKDB_FUNCTIONS or name in _DANGEROUS or name.startswith(_REFUSED_HINTS)
            if isinstance(node.parent, exp.Table) and not refused:
                continue  # a function used as a table: the analyser allows only pure row generators there
            if is_allowed(name) and not refused:
                continue
            line, col = node_position(sql, node)
            if refused:
                raise ForbiddenFunctionError(
                    f"function {_short(name)}() is not allowed: it reaches settings, the session, the catalog, files, "
                    "the network or extensions; queries may only compute over stores", line=line, col=col)
            close = closest(name, GUARD_NAMES)
            hint = f"; did you mean {close}()?" if close else ""
            raise ForbiddenFunctionError(f"unknown function {_short(name)}(){hint}", line=line, col=col)


# Names of functions that DuckDB extensions or other versions have, refused even when this DuckDB lacks them.
_DANGEROUS = frozenset({"getenv", "httpfs", "load_extension", "install_extension", "st_read", "enable_logging",
                        "set_variable", "getvariable", "which_secret", "load"})
_REFUSED_HINTS = ("read_", "parquet_", "duckdb_", "pragma_", "http", "s3", "glob", "sqlite_", "postgres_",
                  "mysql_", "iceberg_", "delta_", "ducklake_", "azure_", "gcs_", "excel_", "json_execute")


def _short(name: str) -> str:
    return name if len(name) <= 64 else f"{name[:40]}… ({len(name)} characters)"
