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
from dataclasses import dataclass, field
from typing import Any

from sqlglot import exp
from sqlglot.optimizer.scope import traverse_scope

from stores.query import ResultOrder
from stores.schema import StoreKind, StoreSpec

from .catalog import find_store, unknown_store
from .dialect import Explain, PositionClause, position_literal_json
from .errors import ParameterError, ReadOnlyError, UnknownColumnError, UnsupportedSqlError
from .guard import ALLOWED, check_functions, check_read_only, statement_name
from .literals import ValueRef, value_ref
from .plan import FAILURE_COLUMNS, PSEUDO_COLUMNS, StatementKind
from .positions import line_col, node_position
from .predicates import Constraint, classify, conjuncts
from .residual import OPAQUE_TABLE_ARGS, rewrite_stars, unsupported_table_args, wrap_store
from .statements import plan_describe, plan_set, plan_show

__all__ = ["ScanTemplate", "Template", "analyze"]

_NONCE = secrets.token_hex(4)
_SLOT_RE = re.compile(rf"__iqp{_NONCE}_(\d+)__")
_HARMLESS_TABLE_FUNCTIONS = (exp.GenerateSeries, exp.Unnest, exp.Explode)
_MODIFIER_NAMES = {
    "when": "AT (…)", "changes": "CHANGES (…)", "ordinality": "WITH ORDINALITY", "only": "ONLY",
    "hints": "table hints", "partition": "PARTITION (…)", "rows_from": "ROWS FROM", "indexed": "INDEXED BY",
    "system_time": "FOR SYSTEM_TIME", "format": "FORMAT", "pattern": "PATTERN",
}
_ROW_CHANGING = (exp.AggFunc, exp.Window, exp.Unnest, exp.Explode, exp.Subquery)


@dataclass
class ScanTemplate:
    """One store reference, with what its scope lets the planner push into IQv2."""

    index: int
    relation: str
    store: str
    spec: StoreSpec
    alias: str
    start: int | None
    constraints: list[Constraint] = field(default_factory=list)
    as_of: ValueRef | None = None
    all_consumed: bool = False
    order: ResultOrder | None = None
    limit: ValueRef | None = None
    offset: ValueRef | None = None
    include_failures: bool = False
    fast_path: tuple[str, ...] | None = None


@dataclass
class Template:
    kind: StatementKind
    explain: bool = False
    scans: tuple[ScanTemplate, ...] = ()
    chunks: tuple[str | int, ...] = ()
    slot_keys: tuple[int | str, ...] = ()
    position_json: str | None = None
    param_mode: str | None = None
    param_count: int = 0
    param_names: frozenset[str] = frozenset()
    deps: dict[str, StoreSpec] = field(default_factory=dict)
    describe: str | None = None
    settings: dict[str, Any] = field(default_factory=dict)


def analyze(sql: str, statement: exp.Expression, catalog: Mapping[str, StoreSpec]) -> Template:
    explain = False
    if isinstance(statement, Explain):
        if statement.args.get("analyze"):
            raise UnsupportedSqlError("EXPLAIN ANALYZE is not supported: EXPLAIN shows the plan without running it", line=1, col=1)
        explain = True
        statement = statement.this
    if isinstance(statement, exp.Show):
        return plan_show(sql, statement, explain)
    if isinstance(statement, exp.Describe):
        return plan_describe(sql, statement, catalog, explain)
    if isinstance(statement, exp.Set):
        return plan_set(sql, statement, explain)
    if not isinstance(statement, (exp.Select, exp.SetOperation, exp.Subquery)):
        line, col = (1, 1)
        raise ReadOnlyError(f"{ALLOWED}; got {statement_name(statement, sql)}", line=line, col=col)
    check_read_only(sql, statement)
    check_functions(sql, statement)
    return _analyze_query(sql, statement, catalog, explain)


def _placeholders(sql: str, root: exp.Expression) -> tuple[list[exp.Placeholder], str | None]:
    for node in root.find_all(exp.Parameter):
        line, col = node_position(sql, node)
        raise ParameterError("use ? or :name placeholders for parameters", line=line, col=col)
    found = sorted(root.find_all(exp.Placeholder), key=lambda p: p.meta.get("start", 0) if p._meta else 0)
    for p in found:
        if p.this and str(p.this).isdigit():
            line, col = node_position(sql, p)
            raise ParameterError(f"${p.this} parameters are not supported; use ? or :name placeholders", line=line, col=col)
    named = [p for p in found if p.this]
    if named and len(named) != len(found):
        raise ParameterError("cannot mix ? and :name placeholders in one statement")
    return found, ("named" if named else "qmark") if found else None


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


def _local_sources(select: exp.Select) -> list[tuple[str, exp.Expression]]:
    out: list[tuple[str, exp.Expression]] = []
    frm = select.args.get("from_")
    if frm is not None:
        out.append((frm.this.alias_or_name.lower(), frm.this))
    for join in select.args.get("joins") or ():
        out.append((join.this.alias_or_name.lower(), join.this))
    return out


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
    by_table: dict[int, ScanTemplate] = {}
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
        if table.args.get("db") or table.args.get("catalog"):
            raise unknown_store(catalog, table.sql(dialect="duckdb"), line=line, col=col)
        if scope is None:
            raise UnsupportedSqlError(f"store {table.name!r} is referenced where no rows can be read from it", line=line, col=col)
        found = find_store(catalog, table.name)
        if found is None:
            raise unknown_store(catalog, table.name, line=line, col=col)
        extra = unsupported_table_args(table)
        if extra:
            raise UnsupportedSqlError(
                f"store {found[0]}: {', '.join(_MODIFIER_NAMES.get(e, e.upper()) for e in extra)} "
                "on a store is not supported",
                line=line,
                col=col,
            )
        store, spec = found
        template.deps[store] = spec
        scan = ScanTemplate(
            index=len(scans), relation=f"__iq_scan_{len(scans)}", store=store, spec=spec,
            alias=table.alias_or_name, start=_start(table),
        )
        _version(sql, table, scan, param_index)
        scans.append(scan)
        by_table[id(table)] = scan

    referenced = _referenced_pseudo(root)
    for scope in traverse_scope(root):
        _analyze_scope(sql, scope, root, by_table, referenced, param_index)

    # -- residual SQL ------------------------------------------------------
    exposed_by_scan = {}
    for table, _scope in store_tables:
        scan = by_table.get(id(table))
        if scan is None:
            continue
        exposed = tuple(p for p in PSEUDO_COLUMNS if (scan.alias.lower(), p) in referenced or ("", p) in referenced)
        scan.include_failures = any(p in exposed for p in FAILURE_COLUMNS)
        exposed_by_scan[id(table)] = exposed
    for scope in traverse_scope(root):
        if isinstance(scope.expression, exp.Select):
            rewrite_stars(scope.expression, by_table, exposed_by_scan)
    for table, _scope in store_tables:
        scan = by_table.get(id(table))
        if scan is not None:
            table.replace(wrap_store(table, scan, exposed_by_scan[id(table)]))
    for i, p in enumerate(placeholders):
        p.replace(exp.column(f"__iqp{_NONCE}_{i}__"))
    text = root.sql(dialect="duckdb")
    chunks: list[str | int] = []
    pos = 0
    for m in _SLOT_RE.finditer(text):
        chunks.append(text[pos : m.start()])
        chunks.append(int(m.group(1)))
        pos = m.end()
    chunks.append(text[pos:])
    template.chunks = tuple(chunks)
    template.slot_keys = tuple(str(p.this) if p.this else i for i, p in enumerate(placeholders))
    template.param_count = len(placeholders) if mode == "qmark" else 0
    template.param_names = frozenset(str(p.this) for p in placeholders if p.this)
    template.scans = tuple(scans)
    return template


def _start(node: exp.Expression) -> int:
    for sub in node.walk():
        if sub._meta and sub.meta.get("start") is not None:
            return sub.meta["start"]
    return 1 << 60


def _version(sql: str, table: exp.Table, scan: ScanTemplate, param_index: dict[int, int]) -> None:
    version = table.args.get("version")
    if version is None:
        return
    line, col = node_position(sql, version) if node_position(sql, version)[0] else node_position(sql, table)
    if scan.spec.kind is not StoreKind.VERSIONED:
        raise UnsupportedSqlError(
            f"FOR SYSTEM_TIME AS OF applies only to versioned stores; store {scan.store} is {scan.spec.kind.value}",
            line=line, col=col,
        )
    if str(version.args.get("kind", "")).upper() != "AS OF":
        raise UnsupportedSqlError("only FOR SYSTEM_TIME AS OF <timestamp> is supported", line=line, col=col)
    ref = value_ref(version.expression, param_index)
    if ref is None:
        raise UnsupportedSqlError("FOR SYSTEM_TIME AS OF needs a timestamp literal (TIMESTAMP '…')", line=line, col=col)
    scan.as_of = ref
    table.set("version", None)


def _referenced_pseudo(root: exp.Expression) -> set[tuple[str, str]]:
    out: set[tuple[str, str]] = set()
    for column in root.find_all(exp.Column):
        name = column.name.lower()
        if name in PSEUDO_COLUMNS:
            out.add((column.table.lower(), name))
    return out


# -- per scope: column validation and pushdown -----------------------------

_CONSUMABLE: dict[StoreKind, set[tuple[str, str]]] = {
    StoreKind.KEY_VALUE: {("key", "eq"), ("key", "range"), ("_partition", "eq")},
    StoreKind.TIMESTAMPED_KEY_VALUE: {("key", "eq"), ("key", "range"), ("_partition", "eq")},
    StoreKind.WINDOW: {("key", "eq"), ("window_start", "eq"), ("window_start", "range"), ("_partition", "eq")},
    StoreKind.SESSION: {("key", "eq"), ("_partition", "eq")},
    StoreKind.VERSIONED: {("key", "eq"), ("_partition", "eq")},
}


def _role(spec: StoreSpec, column: str) -> str | None:
    if column == spec.key.name.lower():
        return "key"
    if column == "_partition":
        return column
    if column in spec.system_columns() and column != "rowtime":  # rowtime is never pushed
        return column
    return None


def _consumable(spec: StoreSpec, role: str, kind: str) -> bool:
    if (role, kind) in _CONSUMABLE[spec.kind]:
        return True
    return spec.kind is StoreKind.WINDOW and role == "window_end" and spec.window_size_ms is not None


def _analyze_scope(sql: str, scope: Any, root: exp.Expression, by_table: dict[int, ScanTemplate],
                   referenced: set[tuple[str, str]], param_index: dict[int, int]) -> None:
    select = scope.expression
    if not isinstance(select, exp.Select):
        return
    local = _local_sources(select)
    # a pivoted or sampled store is not what WHERE sees: treat it like any other relation
    stores = {alias: by_table[id(node)] for alias, node in local
              if id(node) in by_table and not any(node.args.get(a) for a in OPAQUE_TABLE_ARGS)}
    if not stores:
        return
    # visible name -> store column name, honouring ``AS s(a, b)`` renames
    names_of: dict[str, dict[str, str]] = {}
    for alias, node in local:
        scan = stores.get(alias)
        if scan is None:
            continue
        original = [c.name.lower() for c in scan.spec.columns()]
        visible = list(original)
        renamed = node.args.get("alias").columns if node.args.get("alias") is not None else []
        for i, ident in enumerate(renamed[: len(visible)]):
            visible[i] = ident.name.lower()
        names_of[alias] = dict(zip(visible, original)) | {p: p for p in PSEUDO_COLUMNS}
    columns_of = {alias: set(m) for alias, m in names_of.items()}
    only_stores = len(stores) == len(local)
    aliases = {a.alias.lower() for a in select.expressions if isinstance(a, exp.Alias)}
    lambda_vars = {i.name.lower() for lam in select.find_all(exp.Lambda) for i in lam.expressions}
    source_names = {alias for alias, _ in local}

    for column in scope.columns:
        if isinstance(column.this, exp.Star) or column.find_ancestor(exp.Select) is not select:
            continue
        qual, name = column.table.lower(), column.name.lower()
        if qual and qual in stores and name not in columns_of[qual]:
            _unknown_column(sql, column, stores[qual])
        if (not qual and len(local) == 1 and only_stores and (scope.is_root or scope.is_cte)
                and name not in columns_of[local[0][0]] and name not in aliases and name not in lambda_vars
                and name not in source_names and column.find_ancestor(exp.Lambda) is None):
            _unknown_column(sql, column, stores[local[0][0]])

    def resolve(column: exp.Column) -> tuple[str, str] | None:
        qual, name = column.table.lower(), column.name.lower()
        if qual:
            return (qual, names_of[qual].get(name, name)) if qual in stores else None
        owners = [a for a in stores if name in columns_of[a]]
        if len(owners) == 1 and (only_stores or len(local) == 1):
            return owners[0], names_of[owners[0]][name]
        return None

    where_terms = conjuncts(select.args["where"].this) if select.args.get("where") else []
    consumed: dict[str, int] = {alias: 0 for alias in stores}
    for term in where_terms:
        c = classify(term, resolve, param_index)
        if c is None:
            continue
        scan = stores[c.source]
        role = _role(scan.spec, c.column)
        if role is None:
            continue
        scan.constraints.append(Constraint(c.source, role, c.kind, c.values, c.bounds))
        if _consumable(scan.spec, role, c.kind):
            consumed[c.source] += 1
    for join in select.args.get("joins") or ():
        side, kind = (join.args.get("side") or "").upper(), (join.args.get("kind") or "").upper()
        if side in ("RIGHT", "FULL") or kind in ("CROSS", "SEMI", "ANTI", "ASOF", "POSITIONAL") or join.args.get("using"):
            continue
        own = join.this.alias_or_name.lower()
        for term in conjuncts(join.args.get("on")):
            c = classify(term, resolve, param_index)
            if c is None or (side == "LEFT" and c.source != own):
                continue
            scan = stores[c.source]
            role = _role(scan.spec, c.column)
            if role is not None:
                scan.constraints.append(Constraint(c.source, role, c.kind, c.values, c.bounds))

    if not (scope.is_root and len(local) == 1 and only_stores and root is select):
        return
    alias, scan = next(iter(stores.items()))
    scan.all_consumed = consumed[alias] == len(where_terms)
    _order_and_limit(select, scan, resolve, param_index)
    table_alias = local[0][1].args.get("alias")
    if not (table_alias is not None and table_alias.columns):  # renamed columns: let DuckDB project
        scan.fast_path = _fast_path(select, scan, alias)


def _unknown_column(sql: str, column: exp.Column, scan: ScanTemplate) -> None:
    line, col = node_position(sql, column)
    names = ", ".join(c.name for c in scan.spec.columns())
    raise UnknownColumnError(
        f"unknown column {column.name!r} in store {scan.store} (as {scan.alias}); its columns are {names} "
        f"and the pseudo-columns {', '.join(PSEUDO_COLUMNS)}",
        line=line, col=col,
    )


def _simple(select: exp.Select) -> bool:
    """Nothing after the scan can drop, add or merge rows."""
    if any(select.args.get(k) for k in ("group", "having", "qualify", "distinct", "windows", "laterals", "sample", "with_", "joins")):
        return False
    return not any(e.find(*_ROW_CHANGING) for e in select.expressions)


def _order_and_limit(select: exp.Select, scan: ScanTemplate, resolve: Any, param_index: dict[int, int]) -> None:
    if not _simple(select) or scan.spec.kind not in (StoreKind.KEY_VALUE, StoreKind.TIMESTAMPED_KEY_VALUE):
        return
    order = select.args.get("order")
    if order is not None:
        first = order.expressions[0]
        target = resolve(first.this) if isinstance(first.this, exp.Column) else None
        if target is None or target[1] != scan.spec.key.name.lower():
            return
        scan.order = ResultOrder.DESCENDING if first.args.get("desc") else ResultOrder.ASCENDING
        if len(order.expressions) != 1:
            return
    limit = select.args.get("limit")
    if limit is not None and scan.all_consumed and not limit.args.get("percent"):
        scan.limit = value_ref(limit.expression, param_index)
        offset = select.args.get("offset")
        if offset is not None:
            scan.offset = value_ref(offset.expression, param_index)
            if scan.offset is None:
                scan.limit = None


def _fast_path(select: exp.Select, scan: ScanTemplate, alias: str) -> tuple[str, ...] | None:
    if scan.spec.kind not in (StoreKind.KEY_VALUE, StoreKind.TIMESTAMPED_KEY_VALUE, StoreKind.VERSIONED):
        return None
    if not scan.all_consumed or not any(c.column == "key" and c.kind == "eq" for c in scan.constraints):
        return None
    if not _simple(select) or any(select.args.get(k) for k in ("order", "limit", "offset")):
        return None
    names = {c.name.lower(): c.name for c in scan.spec.columns()}
    out: list[str] = []
    for e in select.expressions:
        star = e if isinstance(e, exp.Star) else (e.this if isinstance(e, exp.Column) and isinstance(e.this, exp.Star) else None)
        if star is not None:
            if any(star.args.get(k) for k in ("except_", "replace", "rename", "ilike")):
                return None
            if isinstance(e, exp.Column) and e.table.lower() != alias:
                return None
            out.extend(c.name for c in scan.spec.columns())
            continue
        inner, out_name = (e.this, e.alias) if isinstance(e, exp.Alias) else (e, None)
        if not isinstance(inner, exp.Column) or (inner.table and inner.table.lower() != alias):
            return None
        name = names.get(inner.name.lower())
        if name is None or (out_name is not None and out_name != inner.name):
            return None
        out.append(name)
    return tuple(out)
