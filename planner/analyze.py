"""From a parsed statement to a reusable template: the store scans, their constraints, the residual SQL.

This is the expensive half of planning (scope analysis, validation, SQL
generation), done once per distinct statement text; everything that depends
on parameter values or session settings is left to ``bind``. Placeholders
stay symbolic: constraints hold ``Param`` references and the residual SQL is
kept as text chunks around parameter slots.
"""

from __future__ import annotations

import re
import secrets
from collections.abc import Mapping
from typing import Any

from sqlglot import ErrorLevel, exp
from sqlglot.errors import SqlglotError
from sqlglot.optimizer.scope import traverse_scope

from stores.catalog.schema import StoreKind, StoreSpec

from .catalog import STORE_SCHEMAS, resolve_relation, resolve_system_table, unknown_store
from .dialect import SQLGLOT_FAILURES, Explain, IqgateDialect, PositionClause, parse_statement, position_literal_json
from .errors import (
    InvalidSettingError,
    ParameterError,
    ReadOnlyError,
    UnsupportedSqlError,
)
from .guard import ALLOWED, check_argument_counts, check_functions, check_read_only, check_value_sizes, statement_name
from .literals import value_ref
from .pg_compat import rewrite_pg_compat
from .plan import FAILURE_COLUMNS, StatementKind
from .positions import line_col, node_position
from .residual import rewrite_stars, unsupported_table_args, wrap_store
from .residual_program import compile_join_program, compile_program
from .scopes import analyze_scope
from .statements import plan_describe, plan_reset, plan_set, plan_show, show_setting_sql
from .streams import is_stream, pseudo_columns
from .systables import SYSTEM_SCHEMAS, relation_name
from .template import ScanTemplate, SystemTime, Template

__all__ = ["ScanTemplate", "Template", "analyze"]

_NONCE = secrets.token_hex(4)
_SLOT_RE = re.compile(rf"__iqp{_NONCE}_(\d+)__")
_HARMLESS_TABLE_FUNCTIONS = (exp.GenerateSeries, exp.Unnest, exp.Explode)
_MODIFIER_NAMES = {
    "when": "AT (…)", "changes": "CHANGES (…)", "ordinality": "WITH ORDINALITY", "only": "ONLY",
    "hints": "table hints", "partition": "PARTITION (…)", "rows_from": "ROWS FROM", "indexed": "INDEXED BY",
    "system_time": "FOR SYSTEM_TIME", "format": "FORMAT", "pattern": "PATTERN",
}
def analyze(sql: str, statement: exp.Expression, catalog: Mapping[str, StoreSpec]) -> Template:
    explain = False
    explain_position = False
    if isinstance(statement, Explain):
        if statement.args.get("analyze"):
            raise UnsupportedSqlError("EXPLAIN ANALYZE is not supported: EXPLAIN shows the plan without running it", line=1, col=1)
        explain = True
        explain_position = bool(statement.args.get("position"))
        statement = statement.this
        if explain_position and not isinstance(statement, (exp.Select, exp.SetOperation, exp.Subquery, exp.Values)):
            raise UnsupportedSqlError("EXPLAIN POSITION explains a query (SELECT, WITH, VALUES): the Position each "
                                      "store partition it reads would be read at", line=1, col=1)
    if isinstance(statement, exp.Show):
        return plan_show(sql, statement, explain)
    if isinstance(statement, exp.Describe):
        return plan_describe(sql, statement, catalog, explain)
    if isinstance(statement, exp.Set):
        return plan_set(sql, statement, explain)
    if isinstance(statement, exp.Command) and str(statement.this).upper() == "RESET":
        return plan_reset(sql, statement, explain)
    if isinstance(statement, exp.Command) and str(statement.this).upper() == "SHOW":
        text = show_setting_sql(statement)
        inner = parse_statement(text)
        return analyze(text, Explain(this=inner) if explain else inner, catalog)
    if isinstance(statement, exp.Command) and str(statement.this).upper() == "SET":
        raise InvalidSettingError("expected SET <setting> = <value>", line=1, col=1)
    if isinstance(statement, exp.Pivot) and isinstance(statement.this, exp.Expression):
        # DuckDB's PIVOT / UNPIVOT statement only reads: it is planned as the query it stands for, as
        # SELECT * FROM (PIVOT …) is (it was refused as READ_ONLY until s18)
        statement = exp.select("*").from_(exp.Subquery(this=statement))
    if not isinstance(statement, (exp.Select, exp.SetOperation, exp.Subquery, exp.Values)):
        line, col = (1, 1)
        raise ReadOnlyError(f"{ALLOWED}; got {statement_name(statement, sql)}", line=line, col=col)
    check_read_only(sql, statement)
    statement = rewrite_pg_compat(statement)
    check_functions(sql, statement)
    check_argument_counts(sql, statement)
    check_value_sizes(sql, statement)
    _check_fetch(sql, statement)
    template = _analyze_query(sql, statement, catalog, explain)
    template.explain_position = explain_position
    return template


def _check_fetch(sql: str, statement: exp.Expression) -> None:
    """``FETCH FIRST n PERCENT ROWS ONLY`` and ``… WITH TIES`` are refused: sqlglot writes both as ``LIMIT n``
    (a wrong answer, silently), and DuckDB has neither."""
    for node in statement.find_all(exp.Fetch):
        options = node.args.get("limit_options")
        if options is None or not (options.args.get("percent") or options.args.get("with_ties")):
            continue
        line, col = node_position(sql, node)
        if options.args.get("with_ties"):
            raise UnsupportedSqlError("FETCH … WITH TIES is not supported (DuckDB has no WITH TIES)", line=line, col=col)
        raise UnsupportedSqlError("FETCH FIRST n PERCENT is not supported; use LIMIT n PERCENT", line=line, col=col)


def _replace_placeholders(placeholders: list[exp.Placeholder]) -> None:
    """Each placeholder becomes a slot column, linearly: replacing list items one by one re-parents the whole
    list every time (quadratic for ``IN (?, ?, …)`` with thousands of parameters)."""
    lists: dict[tuple[int, str], tuple[exp.Expression, str, dict[int, exp.Expression]]] = {}
    for i, p in enumerate(placeholders):
        slot = exp.column(f"__iqp{_NONCE}_{i}__")
        parent, key = p.parent, p.arg_key
        if parent is not None and isinstance(parent.args.get(key), list):
            entry = lists.setdefault((id(parent), key), (parent, key, {}))
            entry[2][id(p)] = slot
        else:
            p.replace(slot)
    for parent, key, slots in lists.values():
        parent.set(key, [slots.get(id(e), e) for e in parent.args[key]])


def _placeholders(sql: str, root: exp.Expression) -> tuple[list[exp.Placeholder], str | None]:
    for node in root.find_all(exp.Parameter):
        line, col = node_position(sql, node)
        raise ParameterError("use ? or :name placeholders for parameters", line=line, col=col)
    found = sorted(root.find_all(exp.Placeholder), key=lambda p: p.meta.get("start", 0) if p._meta else 0)
    numbered = [p for p in found if p.this and str(p.this).isdigit()]
    for p in numbered:
        if int(str(p.this)) < 1:
            line, col = node_position(sql, p)
            raise ParameterError(f"${p.this}: numbered parameters start at $1", line=line, col=col)
    named = [p for p in found if p.this and not str(p.this).isdigit()]
    if sum(1 for group in (numbered, named, [p for p in found if not p.this]) if group) > 1:
        raise ParameterError("cannot mix ?, $n and :name placeholders in one statement")
    if not found:
        return found, None
    return found, ("numbered" if numbered else "named" if named else "qmark")


def _take_position_clause(sql: str, root: exp.Expression) -> str | None:
    clauses = list(root.find_all(PositionClause))
    if not clauses:
        return None
    if len(clauses) > 1:
        line, col = line_col(sql, clauses[1].meta.get("start", 0))
        raise UnsupportedSqlError("AS OF POSITION may appear only once per statement", line=line, col=col)
    clause = clauses[0]
    holder = clause.parent
    node = holder
    while node is not None:
        if isinstance(node, (exp.Subquery, exp.CTE)) or (node.arg_key not in (None, "this", "expression")):
            line, col = line_col(sql, clause.meta.get("start", 0))
            raise UnsupportedSqlError(
                "AS OF POSITION applies to the whole statement; put it at the end of the outermost query",
                line=line,
                col=col,
            )
        node = node.parent
    holder.set("position", None)
    return position_literal_json(clause)


def _cte_names(root: exp.Expression) -> set[str]:
    return {cte.alias_or_name.lower() for cte in root.find_all(exp.CTE)}


def _analyze_query(sql: str, root: exp.Expression, catalog: Mapping[str, StoreSpec], explain: bool) -> Template:
    placeholders, mode = _placeholders(sql, root)
    param_index = {id(p): i for i, p in enumerate(placeholders)}
    position_json = _take_position_clause(sql, root)
    ctes = _cte_names(root)

    # -- find the store references, in text order ------------------------
    store_tables: list[tuple[exp.Table, Any]] = []
    seen: set[int] = set()
    for scope in traverse_scope(root):
        for src in scope.sources.values():
            if isinstance(src, exp.Table) and id(src) not in seen:
                seen.add(id(src))
                store_tables.append((src, scope))
    for table in root.find_all(exp.Table):
        if id(table) not in seen and not (isinstance(table.this, exp.Identifier) and table.name.lower() in ctes):
            seen.add(id(table))
            store_tables.append((table, None))
    store_tables.sort(key=lambda ts: _start(ts[0]))

    template = Template(kind=StatementKind.SELECT, explain=explain, position_json=position_json, param_mode=mode)
    scans: list[ScanTemplate] = []
    streams: list[ScanTemplate] = []
    by_table: dict[int, ScanTemplate] = {}
    system: dict[str, None] = {}
    for table, scope in list(store_tables):
        if isinstance(table.this, exp.Identifier):
            line, col = node_position(sql, table)
            key = resolve_system_table(catalog, table, line=line, col=col)
            if key is not None:
                system[key] = None
                _use_system_table(table, key)
                store_tables.remove((table, scope))
    for table, scope in store_tables:
        if not isinstance(table.this, exp.Identifier):
            if isinstance(table.this, _HARMLESS_TABLE_FUNCTIONS):
                continue
            name = table.this.sql_name().lower() if isinstance(table.this, exp.Func) else table.this.sql()
            if isinstance(table.this, exp.Anonymous):
                name = table.this.name.lower()
            line, col = node_position(sql, table)
            raise unknown_store(catalog, name, line=line, col=col, what="table function")
        line, col = node_position(sql, table)
        found = resolve_relation(catalog, table, line=line, col=col)
        what = "stream" if is_stream(found[1]) else "store"
        extra = unsupported_table_args(table)
        if extra:
            raise UnsupportedSqlError(
                f"{what} {found[0]}: {', '.join(_MODIFIER_NAMES.get(e, e.upper()) for e in extra)} "
                f"on a {what} is not supported",
                line=line,
                col=col,
            )
        store, spec = found
        if is_stream(spec):
            template.stream_deps[store] = spec  # type: ignore[assignment]
            scan = ScanTemplate(index=len(streams), relation=f"__iq_stream_{len(streams)}", store=store, spec=spec,
                                alias=table.alias_or_name, start=_start(table))
            streams.append(scan)
        else:
            template.deps[store] = spec  # type: ignore[assignment]
            scan = ScanTemplate(
                index=len(scans), relation=f"__iq_scan_{len(scans)}", store=store, spec=spec,
                alias=table.alias_or_name, start=_start(table),
            )
            scans.append(scan)
        _version(sql, table, scan, param_index)
        by_table[id(table)] = scan

    _unqualify_columns(root)
    referenced = _referenced_pseudo(root, {p for scan in by_table.values() for p in pseudo_columns(scan.spec)})
    for scope in traverse_scope(root):
        analyze_scope(sql, scope, root, by_table, param_index)

    # -- residual SQL ------------------------------------------------------
    exposed_by_scan = {}
    for table, _scope in store_tables:
        scan = by_table.get(id(table))
        if scan is None:
            continue
        exposed = tuple(p for p in pseudo_columns(scan.spec)
                        if (scan.alias.lower(), p) in referenced or ("", p) in referenced)
        select = table.find_ancestor(exp.Select)
        if exposed and select is not None and any(
            (j.args.get("method") or "").upper() == "NATURAL" for j in select.args.get("joins") or ()
        ):
            # the exposed pseudo-columns would silently become join columns
            line, col = node_position(sql, table)
            raise UnsupportedSqlError(
                f"pseudo-columns ({', '.join(exposed)}) cannot be combined with NATURAL JOIN; use JOIN … USING (…)",
                line=line, col=col,
            )
        scan.include_failures = any(p in exposed for p in FAILURE_COLUMNS)
        exposed_by_scan[id(table)] = exposed
    for scope in traverse_scope(root):
        if isinstance(scope.expression, exp.Select):
            rewrite_stars(scope.expression, by_table, exposed_by_scan)
    if len(scans) == len(store_tables) and not streams and not system \
            and not any(exposed_by_scan.get(id(t)) for t, _ in store_tables):
        if len(scans) == 1:
            template.program = compile_program(root, store_tables[0][0], scans[0].spec, scans[0].alias, param_index)
        elif len(scans) == 2:  # two point lookups joined on their keys
            template.program = compile_join_program(root, [(t, s.spec, s.alias) for (t, _), s in zip(store_tables, scans)],
                                                    param_index)
    for table, _scope in store_tables:
        scan = by_table.get(id(table))
        if scan is not None:
            table.replace(wrap_store(table, scan, exposed_by_scan[id(table)]))
    _replace_placeholders(placeholders)
    text = _duckdb_text(root)
    chunks: list[str | int] = []
    pos = 0
    for m in _SLOT_RE.finditer(text):
        chunks.append(text[pos : m.start()])
        chunks.append(int(m.group(1)))
        pos = m.end()
    chunks.append(text[pos:])
    template.chunks = tuple(chunks)
    template.slot_keys = tuple(_slot_key(p, i) for i, p in enumerate(placeholders))
    template.param_count = (len(placeholders) if mode == "qmark"
                            else max(int(str(p.this)) for p in placeholders) if mode == "numbered" else 0)
    template.param_names = frozenset(str(p.this) for p in placeholders if p.this and mode == "named")
    template.scans = tuple(scans)
    template.streams = tuple(streams)
    template.system_tables = tuple(system)
    return template


# Ours, not sqlglot's DuckDB dialect: calls and IS NOT NULL are written as given, so DuckDB names the columns
_WRITER = IqgateDialect()
# What sqlglot notes about a call it still writes for DuckDB as it was given (the message starts so)
_HARMLESS_NOTES = ("APPROX_TOP_K cannot be transpiled to DuckDB due to incompatible return types",)


def _duckdb_text(root: exp.Expression) -> str:
    """The residual statement's text for DuckDB, or an UnsupportedSqlError when sqlglot could only write it by
    dropping part of it: ``random(1)`` became ``RANDOM()``, ``levenshtein(a, b, 3)`` ``LEVENSHTEIN(a, b)``,
    ``approx_count_distinct(x, 0.1)`` lost its accuracy, regexp flags were cut, and the statement answered
    another question than the one asked (sqlglot only logs such notes)."""
    _drop_idle_distinct(root)
    generator = _WRITER.generator(unsupported_level=ErrorLevel.IGNORE)
    try:
        text = generator.generate(root)
    except (SqlglotError, *SQLGLOT_FAILURES) as exc:
        # the generator re-parses some of what it writes (a window frame over bool_and(DISTINCT …)) and can
        # fail on its own text: the statement cannot be written for DuckDB, which is not an internal error
        raise UnsupportedSqlError(f"this statement cannot be written for DuckDB ({type(exc).__name__}: "
                                  f"{str(exc).splitlines()[0][:200]})") from None
    lost = [m for m in generator.unsupported_messages if not m.startswith(_HARMLESS_NOTES)]
    if lost:
        raise UnsupportedSqlError(f"this statement cannot run as written: {lost[0].rstrip('. ')} (part of it "
                                  "would be dropped); check the function's arguments")
    return text


def _drop_idle_distinct(root: exp.Expression) -> None:
    """``bool_and(DISTINCT x)`` / ``bool_or(DISTINCT x)`` as ``bool_and(x)`` / ``bool_or(x)``: the same answer
    (duplicates do not change an AND or an OR), and sqlglot writes the DISTINCT form for DuckDB as
    ``BOOL_AND(CAST(DISTINCT x AS BOOLEAN))``, which DuckDB refuses with an error about SQL the user never wrote."""
    for node in list(root.find_all(exp.LogicalAnd, exp.LogicalOr)):
        arg = node.this
        if isinstance(arg, exp.Distinct) and len(arg.expressions) == 1 and arg.args.get("on") is None:
            node.set("this", arg.expressions[0])


def _use_system_table(table: exp.Table, key: str) -> None:
    """Point the reference at the system table's relation, keeping the name its columns are qualified with."""
    alias = table.args.get("alias")
    if alias is None:
        table.set("alias", exp.TableAlias(this=exp.to_identifier(table.name)))
    table.set("this", exp.to_identifier(relation_name(key), quoted=True))
    table.set("db", None)
    table.set("catalog", None)


def _unqualify_columns(root: exp.Expression) -> None:
    """``main.revenue.key`` / ``pg_catalog.pg_class.oid``: the table's name alone qualifies a column in DuckDB
    once the table is a relation (SQLAlchemy writes schema-qualified columns for schema-qualified tables)."""
    for column in root.find_all(exp.Column):
        db = column.args.get("db")
        if db is not None and db.name.lower() in (*STORE_SCHEMAS, *SYSTEM_SCHEMAS):
            column.set("db", None)
            column.set("catalog", None)


def _slot_key(p: exp.Placeholder, i: int) -> int | str:
    """Where a placeholder's value is in the parameters: ``?`` by position, ``$n`` at n-1, ``:name`` by name."""
    if not p.this:
        return i
    text = str(p.this)
    return int(text) - 1 if text.isdigit() else text


def _start(node: exp.Expression) -> int:
    for sub in node.walk():
        if sub._meta and sub.meta.get("start") is not None:
            return sub.meta["start"]
    return 1 << 60


_SYSTEM_TIME_KINDS = {"AS OF": ("as_of", 1), "FROM": ("from_to", 2), "BETWEEN": ("between", 2), "ALL": ("all", 0)}


def _version(sql: str, table: exp.Table, scan: ScanTemplate, param_index: dict[int, int]) -> None:
    """``FOR SYSTEM_TIME …`` on a versioned store → the scan's SystemTime (SQL:2011; see planner/README.md)."""
    version = table.args.get("version")
    if version is None:
        return
    line, col = node_position(sql, version) if node_position(sql, version)[0] else node_position(sql, table)
    if scan.spec.kind is not StoreKind.VERSIONED:
        what = f"{scan.store} is a stream" if is_stream(scan.spec) else f"store {scan.store} is {scan.spec.kind.value}"
        raise UnsupportedSqlError(f"FOR SYSTEM_TIME applies only to versioned stores; {what}", line=line, col=col)
    written = str(version.args.get("kind", "")).upper()
    if written not in _SYSTEM_TIME_KINDS:
        raise UnsupportedSqlError(
            f"FOR SYSTEM_TIME {written} is not supported; use AS OF t, FROM a TO b, BETWEEN a AND b or ALL",
            line=line, col=col)
    kind, arity = _SYSTEM_TIME_KINDS[written]
    expr = version.expression
    parts = [] if arity == 0 else (list(expr.expressions) if isinstance(expr, exp.Tuple) else [expr])
    # a part can be missing: sqlglot reads `FROM t + INTERVAL 1 MINUTE TO x` as an interval `MINUTE TO x`
    refs = tuple(None if e is None else value_ref(e, param_index) for e in parts)
    if len(refs) != arity or any(r is None for r in refs):
        raise UnsupportedSqlError(
            f"FOR SYSTEM_TIME {written} needs {'a timestamp' if arity == 1 else 'two timestamps'}: "
            "a literal (TIMESTAMP '…') or a parameter",
            line=line, col=col)
    scan.system_time = SystemTime(kind, refs)  # type: ignore[arg-type]
    table.set("version", None)


def _referenced_pseudo(root: exp.Expression, names: set[str]) -> set[tuple[str, str]]:
    """(qualifier, name) of every column reference whose name is one of the pseudo-columns ``names``."""
    out: set[tuple[str, str]] = set()
    for column in root.find_all(exp.Column):
        name = column.name.lower()
        if name in names:
            out.add((column.table.lower(), name))
    return out


# -- per scope: column validation and pushdown -----------------------------
