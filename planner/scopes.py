"""Per query scope: validating column references and deciding what each store scan may push down.

A scope is one SELECT with its FROM/JOIN sources (sqlglot's scope
analysis); predicates only move into the scans of stores listed directly in
that SELECT, and LIMIT/ORDER BY/fast path only for a statement that is a
single-store SELECT with nothing after the scan that could drop rows.
"""

from __future__ import annotations

from typing import Any

from sqlglot import exp

from stores.catalog.schema import StoreKind, StoreSpec
from stores.iqv2.query import ResultOrder

from .errors import UnknownColumnError
from .function_allowlist import AGGREGATE_FUNCTIONS, SET_RETURNING_FUNCTIONS
from .literals import value_ref
from .positions import node_position
from .predicates import Constraint, classify, conjuncts
from .residual import OPAQUE_TABLE_ARGS
from .streams import is_stream, pseudo_columns, stream_role
from .template import ScanTemplate

__all__ = ["analyze_scope", "local_sources"]

_ROW_CHANGING = (exp.AggFunc, exp.Window, exp.Unnest, exp.Explode, exp.Subquery)


_ROW_CHANGING_NAMES = AGGREGATE_FUNCTIONS | SET_RETURNING_FUNCTIONS


def _row_changing(e: exp.Expression) -> bool:
    """Whether ``e`` holds something that drops, adds or merges rows: an aggregate, window, unnest or subquery.

    DuckDB aggregates and row-returning macros sqlglot does not know (``mean``, ``product``, ``mad``,
    ``histogram``, ``generate_subscripts``…) are anonymous calls to it, not AggFuncs or Unnests: before they
    were checked by name, ``SELECT mean(x) FROM s LIMIT 1`` had its LIMIT pushed into the scan and averaged one
    row, and ``SELECT generate_subscripts(l, 1) FROM s LIMIT 5`` answered fewer rows than 5 (s17).
    """
    if e.find(*_ROW_CHANGING):
        return True
    return any(n.name.lower() in _ROW_CHANGING_NAMES for n in e.find_all(exp.Anonymous))


def local_sources(select: exp.Select) -> list[tuple[str, exp.Expression]]:
    out: list[tuple[str, exp.Expression]] = []
    frm = select.args.get("from_")
    if frm is not None:
        out.append((frm.this.alias_or_name.lower(), frm.this))
    for join in select.args.get("joins") or ():
        out.append((join.this.alias_or_name.lower(), join.this))
    return out



_CONSUMABLE: dict[StoreKind, set[tuple[str, str]]] = {
    StoreKind.KEY_VALUE: {("key", "eq"), ("key", "range"), ("_partition", "eq")},
    StoreKind.TIMESTAMPED_KEY_VALUE: {("key", "eq"), ("key", "range"), ("_partition", "eq")},
    StoreKind.WINDOW: {("key", "eq"), ("window_start", "eq"), ("window_start", "range"), ("_partition", "eq")},
    StoreKind.SESSION: {("key", "eq"), ("_partition", "eq")},
    StoreKind.VERSIONED: {("key", "eq"), ("key", "range"), ("_partition", "eq")},
}


def key_part_role(i: int) -> str:
    """The role of a composite key's i-th column in constraints (a single key column's role is ``key``)."""
    return f"key#{i}"


def _role(spec: StoreSpec, column: str) -> str | None:
    if is_stream(spec):
        return stream_role(column)
    if spec.composite:
        for i, c in enumerate(spec.key_parts):
            if column == c.name.lower():
                return key_part_role(i)
    elif column == spec.key.name.lower():
        # an ARRAY or STRUCT key is stored as its JSON text: neither its lookups (DuckDB's list and struct literals
        # and casts) nor its order are the text's, so its predicates stay residual (a scan DuckDB filters)
        return None if spec.key.nested else "key"
    if column == "_partition":
        return column
    if column in spec.system_columns() and column != "rowtime":  # rowtime is never pushed
        return column
    return None


def _consumable(spec: StoreSpec, role: str, kind: str, eq_roles: set[str] | None = None) -> bool:
    """Whether the scan's requests represent the constraint exactly (so it need not be re-checked for LIMIT).

    A composite key's part is consumed when every earlier part has an equality (a key or a key-prefix range).
    A stream's are never: nothing (no LIMIT) relies on them.
    """
    if is_stream(spec):
        return False
    if role.startswith("key#"):
        i = int(role[4:])
        if eq_roles is None or any(key_part_role(j) not in eq_roles for j in range(i)):
            return False
        if kind == "range" and spec.kind in (StoreKind.WINDOW, StoreKind.SESSION):
            return False
        return (("key", kind) in _CONSUMABLE[spec.kind]) or kind == "eq"
    if (role, kind) in _CONSUMABLE[spec.kind]:
        return True
    return spec.kind is StoreKind.WINDOW and role == "window_end" and spec.window_size_ms is not None


def analyze_scope(sql: str, scope: Any, root: exp.Expression, by_table: dict[int, ScanTemplate],
                  param_index: dict[int, int]) -> None:
    select = scope.expression
    if not isinstance(select, exp.Select):
        return
    local = local_sources(select)
    # a pivoted or sampled store is not what WHERE sees: treat it like any other relation
    stores = {alias: by_table[id(node)] for alias, node in local
              if id(node) in by_table and not any(node.args.get(a) for a in OPAQUE_TABLE_ARGS)}
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
        names_of[alias] = dict(zip(visible, original)) | {p: p for p in pseudo_columns(scan.spec)}
    # derived tables and single-use CTEs that only project one store's columns pass predicates through
    targets = dict(stores)
    for alias, node in local:
        if alias not in stores:
            through = _pass_through(node, scope, root, by_table)
            if through is not None:
                targets[alias], names_of[alias] = through
    if not targets:
        return
    columns_of = {alias: set(m) for alias, m in names_of.items()}
    only_stores = len(stores) == len(local)
    only_targets = len(targets) == len(local)
    aliases = {a.alias.lower() for a in select.expressions if isinstance(a, exp.Alias)}
    lambda_vars = {i.name.lower() for lam in select.find_all(exp.Lambda) for i in lam.expressions}
    source_names = {alias for alias, _ in local}

    own = _own_columns(select)
    for column in scope.columns:
        if isinstance(column.this, exp.Star) or id(column) not in own:
            continue
        qual, name = column.table.lower(), column.name.lower()
        if qual and qual in stores and name not in columns_of[qual]:
            _unknown_column(sql, column, stores[qual])
        if (not qual and len(local) == 1 and only_stores and (scope.is_root or scope.is_cte)
                and name not in columns_of[local[0][0]] and name not in aliases and name not in lambda_vars
                and name not in source_names and not own[id(column)]):
            _unknown_column(sql, column, stores[local[0][0]])

    def resolve(column: exp.Column) -> tuple[str, str] | None:
        qual, name = column.table.lower(), column.name.lower()
        if qual:
            if qual not in targets or (qual not in stores and name not in columns_of[qual]):
                return None
            return qual, names_of[qual].get(name, name)
        owners = [a for a in targets if name in columns_of[a]]
        if len(owners) == 1 and (only_targets or len(local) == 1):
            return owners[0], names_of[owners[0]][name]
        return None

    where_terms = conjuncts(select.args["where"].this) if select.args.get("where") else []
    consumed: dict[str, int] = {alias: 0 for alias in stores}
    found: list[tuple[Constraint, ScanTemplate]] = []
    for term in where_terms:
        c = classify(term, resolve, param_index)
        if c is None:
            continue
        scan = targets[c.source]
        role = _role(scan.spec, c.column)
        if role is None:
            continue
        found.append((Constraint(c.source, role, c.kind, c.values, c.bounds), scan))
        scan.constraints.append(found[-1][0])
    eq_roles: dict[str, set[str]] = {}
    for c, _scan in found:
        if c.kind == "eq":
            eq_roles.setdefault(c.source, set()).add(c.column)
    for c, scan in found:
        if c.source in consumed and _consumable(scan.spec, c.column, c.kind, eq_roles.get(c.source, set())):
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
            scan = targets[c.source]
            role = _role(scan.spec, c.column)
            if role is not None:
                scan.constraints.append(Constraint(c.source, role, c.kind, c.values, c.bounds))
    for a, b in _joined_on_keys(select, stores, resolve):  # r.key = ? and r.key = l.key: l.key = ? too
        for c, _scan in found:
            if c.column == "key" and c.source in (a, b):
                other = b if c.source == a else a
                stores[other].constraints.append(Constraint(other, "key", c.kind, c.values, c.bounds))

    if not (scope.is_root and len(local) == 1 and only_stores and root is select):
        return
    alias, scan = next(iter(stores.items()))
    scan.all_consumed = consumed[alias] == len(where_terms)
    _order_and_limit(select, scan, resolve, param_index)
    table_alias = local[0][1].args.get("alias")
    if not (table_alias is not None and table_alias.columns):  # renamed columns: let DuckDB project
        scan.fast_path = _fast_path(select, scan, alias)


def _pass_through(node: exp.Expression, scope: Any, root: exp.Expression,
                  by_table: dict[int, ScanTemplate]) -> tuple[ScanTemplate, dict[str, str]] | None:
    """The store scan behind a derived table or single-use CTE that only projects its columns.

    Filtering such a relation's output equals filtering the store's rows
    first, so its predicates may reach the scan (BI tools wrap queries as
    ``SELECT … FROM (<query>) AS virtual_table WHERE …``). Returns the scan and
    output name -> store column, or None when anything could change rows.
    """
    alias = node.args.get("alias")
    if isinstance(node, exp.Subquery):
        if alias is not None and alias.columns:
            return None
        inner = node.this
    elif isinstance(node, exp.Table) and isinstance(node.this, exp.Identifier) and not node.args.get("db"):
        name = node.name.lower()
        ctes = [c for c in root.find_all(exp.CTE) if c.alias_or_name.lower() == name]
        uses = [t for t in root.find_all(exp.Table) if isinstance(t.this, exp.Identifier) and t.name.lower() == name]
        if len(ctes) != 1 or len(uses) != 1 or ctes[0].args.get("alias") is None:
            return None
        if ctes[0].args["alias"].columns or (ctes[0].parent is not None and ctes[0].parent.args.get("recursive")):
            return None
        inner = ctes[0].this
    else:
        return None
    if not isinstance(inner, exp.Select) or any(
        inner.args.get(k) for k in ("group", "having", "qualify", "distinct", "windows", "laterals", "sample",
                                     "with_", "joins", "limit", "offset")
    ):
        return None
    inner_local = local_sources(inner)
    if len(inner_local) != 1 or id(inner_local[0][1]) not in by_table:
        return None
    store_alias, table = inner_local[0]
    if any(table.args.get(a) for a in OPAQUE_TABLE_ARGS) or (table.args.get("alias") is not None and table.args["alias"].columns):
        return None
    scan = by_table[id(table)]
    store_columns = {c.name.lower() for c in scan.spec.columns()} | set(pseudo_columns(scan.spec))
    mapping: dict[str, str] = {}
    seen: dict[str, int] = {}
    for e in inner.expressions:
        if _row_changing(e):
            return None
        star = e if isinstance(e, exp.Star) else (e.this if isinstance(e, exp.Column) and isinstance(e.this, exp.Star) else None)
        if star is not None:
            if any(star.args.get(k) for k in ("except_", "replace", "rename", "ilike")):
                return None
            for c in scan.spec.columns():
                seen[c.name.lower()] = seen.get(c.name.lower(), 0) + 1
                mapping[c.name.lower()] = c.name.lower()
            continue
        out = e.alias_or_name.lower()
        seen[out] = seen.get(out, 0) + 1
        col = e.this if isinstance(e, exp.Alias) else e
        if isinstance(col, exp.Column) and (not col.table or col.table.lower() == store_alias) and col.name.lower() in store_columns:
            mapping[out] = col.name.lower()
    return scan, {k: v for k, v in mapping.items() if seen[k] == 1}


def _joined_on_keys(select: exp.Select, stores: dict[str, ScanTemplate], resolve: Any) -> list[tuple[str, str]]:
    """The pairs of stores an inner or left join matches on their keys (one key column each, of one type):
    ``a JOIN b USING (key)`` of two stores whose key is so named, or ``ON a.key = b.key``.

    Why: a WHERE constraint on one's key then holds for the other's in every row the join keeps (an inner join's
    rows match on the key; a left join's WHERE rejects the NULL rows of a right store's key, and a right row
    only joins a left row of its key), so ``r.key = ?`` reads one key of each store, not the whole of the
    other: a join of two point lookups. The residual SQL still has the whole WHERE and join.
    """
    pairs: list[tuple[str, str]] = []
    sources = local_sources(select)
    for i, join in enumerate(select.args.get("joins") or ()):
        side, kind = (join.args.get("side") or "").upper(), (join.args.get("kind") or "").upper()
        right = sources[i + 1][0]
        if side not in ("", "LEFT") or kind not in ("", "INNER", "OUTER") or join.args.get("method") \
                or right not in stores:
            continue
        using, on = join.args.get("using"), join.args.get("on")
        found: list[tuple[str, str]] = []
        if using and on is None and len(sources) == 2 and sources[0][0] in stores:  # a USING column is unambiguous
            left = sources[0][0]
            names = {u.name.lower() for u in using if isinstance(u, exp.Identifier)}
            if stores[left].spec.key.name.lower() == stores[right].spec.key.name.lower() in names:
                found.append((left, right))
        for term in conjuncts(on) if on is not None else ():
            if isinstance(term, exp.EQ) and isinstance(term.this, exp.Column) \
                    and isinstance(term.expression, exp.Column):
                x, y = resolve(term.this), resolve(term.expression)
                if x is not None and y is not None and x[0] != y[0] and right in (x[0], y[0]) \
                        and x[0] in stores and y[0] in stores \
                        and _role(stores[x[0]].spec, x[1]) == _role(stores[y[0]].spec, y[1]) == "key":
                    found.append((x[0], y[0]))
        for a, b in found:
            ka, kb = stores[a].spec.key, stores[b].spec.key
            if _role(stores[a].spec, ka.name.lower()) == _role(stores[b].spec, kb.name.lower()) == "key" \
                    and ka.type == kb.type:
                pairs.append((a, b))
    return pairs


def _unknown_column(sql: str, column: exp.Column, scan: ScanTemplate) -> None:
    line, col = node_position(sql, column)
    names = ", ".join(c.name for c in scan.spec.columns())
    what = "stream" if is_stream(scan.spec) else "store"
    err = UnknownColumnError(
        f"unknown column {column.name!r} in {what} {scan.store} (as {scan.alias}); its columns are {names} "
        f"and the pseudo-columns {', '.join(pseudo_columns(scan.spec))}",
        line=line, col=col,
    )
    err.store, err.column = scan.store, column.name  # the gateway tells a column arriving with an upgrade apart
    raise err


def _simple(select: exp.Select) -> bool:
    """Nothing after the scan can drop, add or merge rows."""
    if any(select.args.get(k) for k in ("group", "having", "qualify", "distinct", "windows", "laterals", "sample", "with_", "joins")):
        return False
    return not any(_row_changing(e) for e in select.expressions)


def _order_and_limit(select: exp.Select, scan: ScanTemplate, resolve: Any, param_index: dict[int, int]) -> None:
    if not _simple(select) or scan.spec.kind not in (StoreKind.KEY_VALUE, StoreKind.TIMESTAMPED_KEY_VALUE) \
            or scan.spec.key.nested:  # an ARRAY/STRUCT key's stored (text) order is not its order
        return
    order = select.args.get("order")
    if order is not None:
        first = order.expressions[0]
        names = [c.name.lower() for c in scan.spec.key_columns()]
        # a composite key: ORDER BY a prefix of its columns, one direction, is the store's order
        keys = order.expressions[:len(names)] if scan.spec.composite else [first]
        outputs = {a.alias.lower(): a.this for a in select.expressions if isinstance(a, exp.Alias)}
        for i, o in enumerate(keys):
            term = o.this
            if isinstance(term, exp.Column) and not term.table and term.name.lower() in outputs:
                # a name in ORDER BY is an output column's before a store column's (PostgreSQL, DuckDB): with
                # SELECT -id AS id … ORDER BY id LIMIT 2, the store's key order is not the answer's (s18)
                term = outputs[term.name.lower()]
            target = resolve(term) if isinstance(term, exp.Column) else None
            if target is None or target[1] != names[i] or bool(o.args.get("desc")) != bool(first.args.get("desc")):
                if i == 0:
                    return
                keys = keys[:i]
                break
        scan.order = ResultOrder.DESCENDING if first.args.get("desc") else ResultOrder.ASCENDING
        if len(order.expressions) != len(keys):
            return
    count = _row_count(select.args.get("limit"))
    if count is not None and scan.all_consumed:
        scan.limit = value_ref(count, param_index)
        offset = select.args.get("offset")
        if offset is not None:
            scan.offset = value_ref(offset.expression, param_index)
            if scan.offset is None:
                scan.limit = None


def _row_count(limit: exp.Expression | None) -> exp.Expression | None:
    """The count of ``LIMIT n`` or ``FETCH FIRST n ROWS ONLY``; None for what is not a count of rows.

    Why: ``LIMIT 10 PERCENT`` keeps its ``10`` in the same place as ``LIMIT 10``
    (the PERCENT is a LimitOptions beside it): pushed as ten rows, DuckDB then
    took 10% of those ten (s18). FETCH keeps its count elsewhere; a planner
    that read it as a LIMIT failed on it (INTERNAL)."""
    if limit is None:
        return None
    options = limit.args.get("limit_options")
    if options is not None and (options.args.get("percent") or options.args.get("with_ties")):
        return None
    if isinstance(limit, exp.Limit):
        return limit.expression
    return limit.args.get("count") if isinstance(limit, exp.Fetch) else None


def _fast_path(select: exp.Select, scan: ScanTemplate, alias: str) -> tuple[str, ...] | None:
    if scan.spec.kind not in (StoreKind.KEY_VALUE, StoreKind.TIMESTAMPED_KEY_VALUE, StoreKind.VERSIONED):
        return None
    if not scan.all_consumed or not any(c.column.startswith("key") and c.kind == "eq" for c in scan.constraints):
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


def _own_columns(select: exp.Select) -> dict[int, bool]:
    """id(column) → whether it sits in a lambda, for each column whose nearest SELECT is ``select``.

    One walk down instead of two walks up per column (``find_ancestor``):
    up is as long as the expression is deep, so a WHERE of thousands of
    mixed OR/AND terms planned in quadratic time (3,000 terms: 5 s).
    """
    out: dict[int, bool] = {}
    stack = [(select, select.find_ancestor(exp.Lambda) is not None)]
    while stack:
        node, in_lambda = stack.pop()
        for child in node.iter_expressions():
            if isinstance(child, exp.Select):  # a subquery's columns belong to its own SELECT
                continue
            inside = in_lambda or isinstance(child, exp.Lambda)
            if isinstance(child, exp.Column):
                out[id(child)] = inside
            stack.append((child, inside))
    return out
