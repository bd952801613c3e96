"""SUBSCRIBE and EMIT CHANGES: a live answer of one store, planned as SQL the engine runs per batch of changes.

A subscription is a SELECT over one store's rows, evaluated row by row: a filter and a projection (computed
columns included). Each batch of changed rows then changes the answer row by row too, so the engine runs the
same residual SQL a pull query would over a relation of the changed rows, and the answer stays exactly the
pull query's answer at every progress Position. What needs more than one row at a time (aggregates, joins,
ORDER BY, DISTINCT, LIMIT, window functions, subqueries) is refused with the reason, and so is what changes
without the store changing (``now()``, ``random()``).

Rows are known by the store's identity (its key columns; window bounds too for window and session stores): the
answer's rows carry it (appended when the SELECT does not list it), deletes name it. A filter that reads value
columns can drop a row that was shown when its values change; whether it was shown is known exactly only by
remembering what was shown (``Subscription.membership``): the engine keeps that set, bounded (``stores.live``).
A filter on identity columns alone decides once and for all per row, and needs no memory.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from sqlglot import exp

from stores.catalog.schema import StoreKind, StoreSpec
from stores.iqv2.position import Position, PositionBound
from stores.iqv2.query import (
    KeyQuery,
    MultiKeyQuery,
    MultiVersionedKeyQuery,
    MultiVersionedRangeQuery,
    RangeQuery,
    TimestampedKeyQuery,
    TimestampedRangeQuery,
    VersionedKeyQuery,
    WindowKeyQuery,
    WindowRangeQuery,
)

from .analyze import Template, analyze
from .catalog import resolve_store
from .dialect import PositionClause, Subscribe, SubscribeOption, position_literal_json
from .errors import PlanningError, TableScanDisabledError, UnsupportedSqlError
from .literals import sql_literal
from .plan import FAILURE_COLUMNS, Plan, StatementKind, Subscription, SubscriptionKeys
from .positions import line_col, node_position
from .requests import bind_scan, check_params

__all__ = ["SubscribeTemplate", "analyze_subscribe", "bind_subscription", "subscription_explain"]

_OPTIONS = ("SNAPSHOT", "PROGRESS")
_TRUE = {"true", "on", "1", "yes", "t"}
_FALSE = {"false", "off", "0", "no", "f"}
# what changes without the store changing: a subscription's answer could not follow it
_VOLATILE_NODES = (exp.CurrentTimestamp, exp.CurrentDate, exp.CurrentTime, exp.CurrentDatetime, exp.Rand, exp.Uuid)
_VOLATILE_NAMES = frozenset({"now", "current_timestamp", "current_date", "current_time", "today", "random", "uuid",
                             "gen_random_uuid", "get_current_timestamp", "get_current_time", "transaction_timestamp",
                             "localtimestamp", "localtime", "epoch_ms_now", "setseed", "nextval", "currval",
                             "current_localtimestamp", "current_localtime"})
_SET_RETURNING = (exp.Unnest, exp.Explode, exp.GenerateSeries)


@dataclass
class SubscribeTemplate:
    """An analysed subscription: its SELECT's variants (see ``Subscription``) and options."""

    store: str
    spec: StoreSpec
    answer: Template
    failing: Template | None
    deletes: Template
    identity: tuple[str, ...]
    identity_at: tuple[int, ...]
    added: tuple[str, ...]
    membership: bool
    snapshot: bool
    progress: bool
    emit_changes: bool
    position_json: str | None


def identity_columns(spec: StoreSpec) -> tuple[str, ...]:
    """The store columns naming one row (as ``stores.live.identity_names``: the key, and window bounds)."""
    names = tuple(c.name for c in spec.key_columns())
    if spec.kind in (StoreKind.WINDOW, StoreKind.SESSION):
        names += ("window_start", "window_end")
    return names


def _where(sql: str, node: exp.Expression | None, fallback: exp.Expression) -> tuple[int | None, int | None]:
    line, col = node_position(sql, node) if node is not None else (None, None)
    if line is None:
        start = fallback.meta.get("start") if fallback._meta else None
        return line_col(sql, start) if start is not None else (1, 1)
    return line, col


def _refuse(sql: str, what: str, node: exp.Expression | None, stmt: Subscribe, why: str | None = None) -> None:
    form = "EMIT CHANGES" if stmt.args.get("emit_changes") else "SUBSCRIBE"
    line, col = _where(sql, node, stmt)
    reason = why or ("a subscription streams one store's rows as they change, filtered and projected row by row; "
                     "aggregate, join or sort in a pull query, or in the pipeline (a store of the result)")
    raise UnsupportedSqlError(f"{form} over {what} is not supported: {reason}", line=line, col=col)


def _options(sql: str, stmt: Subscribe) -> tuple[bool, bool]:
    if stmt.args.get("emit_changes"):
        return True, True
    found: dict[str, bool] = {}
    for opt in stmt.args.get("options") or ():
        assert isinstance(opt, SubscribeOption)
        name = opt.this.name.upper()
        line, col = line_col(sql, opt.meta.get("start", 0))
        if name not in _OPTIONS:
            raise UnsupportedSqlError(f"unknown SUBSCRIBE option {opt.this.name}; the options are SNAPSHOT and PROGRESS",
                                      line=line, col=col)
        if name in found:
            raise UnsupportedSqlError(f"SUBSCRIBE option {name} is given twice", line=line, col=col)
        value = opt.args.get("expression")
        if value is None:
            found[name] = True
            continue
        text = ("true" if value.this else "false") if isinstance(value, exp.Boolean) else value.name.lower()
        if text in _TRUE:
            found[name] = True
        elif text in _FALSE:
            found[name] = False
        else:
            raise UnsupportedSqlError(f"SUBSCRIBE option {name} is true or false, got {value.sql()}",
                                      line=line, col=col)
    return found.get("SNAPSHOT", True), found.get("PROGRESS", True)


def _select_of(sql: str, stmt: Subscribe) -> exp.Select:
    inner = stmt.this
    if isinstance(inner, exp.Table):
        select = exp.select(exp.Star()).from_(inner.copy())
        return select
    while isinstance(inner, exp.Subquery) and not inner.alias:
        inner = inner.this
    if isinstance(inner, Subscribe):
        _refuse(sql, "another subscription", inner, stmt, "write one SUBSCRIBE, or one SELECT … EMIT CHANGES")
    if isinstance(inner, exp.SetOperation):
        _refuse(sql, f"{type(inner).__name__.upper()}", inner, stmt)
    if not isinstance(inner, exp.Select):
        _refuse(sql, f"a {type(inner).__name__} statement", inner, stmt,
                "a subscription is one SELECT over one store (or a store's name)")
    assert isinstance(inner, exp.Select)
    return inner


def _check_shape(sql: str, select: exp.Select, stmt: Subscribe) -> exp.Table:
    """Refuse what a per-row subscription cannot follow; the one store table it reads."""
    if select.args.get("with_") or select.args.get("with"):
        _refuse(sql, "WITH (a common table expression)", select.args.get("with_") or select.args.get("with"), stmt)
    for name, what in (("group", "an aggregation (GROUP BY)"), ("having", "an aggregation (HAVING)"),
                       ("order", "ORDER BY"), ("limit", "LIMIT"), ("offset", "OFFSET"), ("fetch", "FETCH"),
                       ("distinct", "DISTINCT"), ("qualify", "QUALIFY")):
        node = select.args.get(name)
        if node is not None:
            why = ("the order of a changing answer is the subscriber's to keep: sort the rows it holds"
                   if name == "order" else None)
            _refuse(sql, what, node, stmt, why)
    if select.args.get("joins"):
        _refuse(sql, "a join", select.args["joins"][0], stmt)
    position = next(iter(select.find_all(PositionClause)), None)
    if position is not None:
        line, col = line_col(sql, position.meta.get("start", 0))
        raise UnsupportedSqlError("AS OF POSITION belongs after the subscription: SUBSCRIBE (…) AS OF POSITION '…' "
                                  "or SELECT … EMIT CHANGES AS OF POSITION '…'", line=line, col=col)
    frm = select.args.get("from_") or select.args.get("from")
    if frm is None:
        _refuse(sql, "a SELECT without a store", select, stmt, "subscribe to a store: SUBSCRIBE store, or "
                "SUBSCRIBE (SELECT … FROM store …)")
    table = frm.this
    if not isinstance(table, exp.Table) or not isinstance(table.this, exp.Identifier):
        _refuse(sql, "a subquery or table function in FROM", table, stmt)
    if table.args.get("version") is not None:
        _refuse(sql, "FOR SYSTEM_TIME", table.args["version"], stmt, "a subscription follows a versioned store's "
                "current versions; each new version is a change")
    for node in select.walk():
        if node is select:
            continue
        if isinstance(node, exp.Window):
            _refuse(sql, "a window function", node, stmt)
        if isinstance(node, exp.AggFunc) and not isinstance(node.parent, exp.Window):
            _refuse(sql, f"an aggregation ({node.sql()})", node, stmt)
        if isinstance(node, (exp.Subquery, exp.Exists)) or (isinstance(node, exp.Select) and node is not select):
            _refuse(sql, "a subquery", node, stmt, "a subscription reads one store, row by row")
        if isinstance(node, _SET_RETURNING):
            _refuse(sql, f"a set-returning function ({node.sql()})", node, stmt,
                    "each store row must give at most one row of the answer")
        if isinstance(node, _VOLATILE_NODES) or (
                isinstance(node, exp.Anonymous) and str(node.this).lower() in _VOLATILE_NAMES) or (
                isinstance(node, exp.Func) and node._meta and (node.meta.get("call") or ("",))[0] in _VOLATILE_NAMES):
            _refuse(sql, f"{node.sql()}", node, stmt, "its value changes without the store changing, so the "
                    "answer could not follow it")
        if isinstance(node, exp.Column) and node.name.lower() in FAILURE_COLUMNS:
            _refuse(sql, node.name, node, stmt, "a subscription's rows come from the changelog; there are no "
                    "failed partitions to show")
    return table


def _outputs(select: exp.Select, spec: StoreSpec, identity: tuple[str, ...]) -> list[tuple[str | None, str, Any]]:
    """Per output column of the SELECT: (the identity column it carries or None, its name, its node)."""
    ident = {n.lower(): n for n in identity}
    out: list[tuple[str | None, str, Any]] = []
    for e in select.expressions:
        star = e if isinstance(e, exp.Star) else e.this if isinstance(e, exp.Column) and isinstance(e.this, exp.Star) \
            else None
        if star is not None:
            excluded = {c.name.lower() for c in star.args.get("except_") or star.args.get("except") or ()}
            replaced = {r.alias_or_name.lower() for r in star.args.get("replace") or ()}
            for c in spec.columns():
                low = c.name.lower()
                if low in excluded:
                    continue
                out.append((ident.get(low) if low not in replaced else None, c.name, e))
            continue
        inner = e.this if isinstance(e, exp.Alias) else e
        carried = ident.get(inner.name.lower()) if isinstance(inner, exp.Column) and not isinstance(
            inner.this, exp.Star) else None
        out.append((carried, e.alias_or_name, e))
    return out


def _numbered(select: exp.Select) -> None:
    """``?`` placeholders → ``$n`` in text order, so the SQL variants built from parts of the statement bind
    each parameter by its number, not by its rank among the placeholders a variant keeps."""
    found = sorted(select.find_all(exp.Placeholder), key=lambda p: p.meta.get("start", 0) if p._meta else 0)
    if any(p.this for p in found):
        return
    for i, p in enumerate(found):
        numbered = exp.Placeholder(this=str(i + 1))
        numbered.meta.update(p.meta)
        p.replace(numbered)


def analyze_subscribe(sql: str, stmt: Subscribe, catalog: Mapping[str, StoreSpec], explain: bool = False
                      ) -> Template:
    """A SUBSCRIBE (or EMIT CHANGES) statement → a template whose ``subscription`` the binder completes."""
    snapshot, progress = _options(sql, stmt)
    position = stmt.args.get("position")
    select = _select_of(sql, stmt)
    inner_position = select.args.get("position")
    if position is None and inner_position is not None and stmt.args.get("emit_changes"):
        position = inner_position  # SELECT … AS OF POSITION '…' EMIT CHANGES: the clause ends the SELECT
        select.set("position", None)
    position_json = position_literal_json(position) if position is not None else None
    table = _check_shape(sql, select, stmt)
    line, col = node_position(sql, table)
    store, spec = resolve_store(catalog, table, line=line, col=col)
    identity = identity_columns(spec)
    _numbered(select)
    outputs = _outputs(select, spec, identity)
    taken = {name.lower(): node for _, name, node in outputs}
    at: dict[str, int] = {}
    for i, (carried, _name, _node) in enumerate(outputs):
        if carried is not None and carried not in at:
            at[carried] = i
    added = tuple(n for n in identity if n not in at)
    answer_tree = select.copy()
    for n in added:
        if n.lower() in taken:
            bl, bc = _where(sql, taken[n.lower()], stmt)
            raise UnsupportedSqlError(f"a subscription's rows carry the store's identity column {n}, which this "
                                      f"SELECT does not list but uses as the name of another column: rename that "
                                      f"column or list {n}", line=bl, col=bc)
        at[n] = len(outputs) + added.index(n)
        answer_tree.select(exp.column(n, quoted=True), append=True, copy=False)
    where = select.args.get("where")
    cols = {c.name.lower() for c in where.find_all(exp.Column)} if where is not None else set()
    membership = bool(cols - {n.lower() for n in identity} - {"_partition"})
    answer = analyze(sql, answer_tree, catalog)
    ident_cols = [exp.column(n, quoted=True) for n in identity]
    frm = (select.args.get("from_") or select.args.get("from")).this
    failing = None
    if where is not None and membership:
        drop = exp.Not(this=exp.Coalesce(this=exp.Paren(this=where.this.copy()), expressions=[exp.false()]))
        failing = analyze(sql, exp.select(*ident_cols).from_(frm.copy()).where(drop), catalog)
    deleted = exp.select(*[c.copy() for c in ident_cols]).from_(frm.copy())
    if where is not None and not membership:
        deleted = deleted.where(where.this.copy())
    deletes = analyze(sql, deleted, catalog)
    template = Template(kind=StatementKind.SUBSCRIBE, explain=explain, position_json=position_json,
                        param_mode=answer.param_mode, param_count=answer.param_count, param_names=answer.param_names,
                        deps=dict(answer.deps))
    template.lane = None
    template.subscription = SubscribeTemplate(
        store, spec, answer, failing, deletes, identity, tuple(at[n] for n in identity), added, membership, snapshot,
        progress, bool(stmt.args.get("emit_changes")), position_json)
    return template


def _residual(template: Template, params: Any) -> str:
    return "".join(sql_literal(params[template.slot_keys[c]]) if isinstance(c, int) else c for c in template.chunks)


_KEY_QUERIES = (KeyQuery, TimestampedKeyQuery, VersionedKeyQuery, MultiVersionedKeyQuery, WindowKeyQuery)
_RANGE_QUERIES = (RangeQuery, TimestampedRangeQuery, MultiVersionedRangeQuery)


def _keys(text: str, sub: SubscribeTemplate, params: Any, settings: Mapping[str, Any]
          ) -> tuple[SubscriptionKeys | None, bool]:
    """The pushed key predicates as a key filter, and whether the snapshot reads the whole store."""
    try:
        scan, _ = bind_scan(text, sub.answer.scans[0], params, PositionBound.unbounded(), settings)
    except PlanningError:  # a session store read without a key (pull queries need one; a feed does not)
        return None, True
    keys: list[Any] = []
    ranges: list[tuple[Any, Any]] = []
    parts: set[int] = set()
    every = False
    for r in scan.requests:
        q = r.query
        parts |= set(range(sub.spec.partitions)) if r.partitions is None else set(r.partitions)
        if isinstance(q, _KEY_QUERIES) or (isinstance(q, WindowRangeQuery) and q.key is not None):
            keys.append(q.key)
        elif isinstance(q, MultiKeyQuery):
            keys.extend(q.keys)
        elif isinstance(q, _RANGE_QUERIES) and (q.lower is not None or q.upper is not None):
            ranges.append((q.lower, q.upper))
        else:
            every = True
    partitions = None if parts == set(range(sub.spec.partitions)) else frozenset(parts)
    if every:
        return (SubscriptionKeys(partitions=partitions) if partitions is not None else None), scan.full_scan
    return (SubscriptionKeys(tuple(keys) if keys or not ranges else None, tuple(ranges) if ranges else None,
                             partitions), scan.full_scan)


def bind_subscription(text: str, template: Template, params: Any, settings: Mapping[str, Any]) -> Plan:
    """The Plan of an analysed subscription, with parameter values and session settings applied."""
    sub: SubscribeTemplate = template.subscription
    params = check_params(params, sub.answer)
    keys, full_scan = _keys(text, sub, params, settings)
    if sub.snapshot and full_scan and not settings["table_scans"]:
        names = [c.name for c in sub.spec.key_columns()]
        raise TableScanDisabledError(
            f"a subscription to store {sub.store} with a snapshot needs a full table scan (no usable predicate on "
            f"key column {', '.join(names)}); table scans are disabled: add a key predicate, subscribe WITH "
            "(SNAPSHOT = false), or SET table_scans = true")
    subscription = Subscription(
        store=sub.store, relation=sub.answer.scans[0].relation, sql=_residual(sub.answer, params),
        identity=sub.identity, identity_at=sub.identity_at, added=sub.added, membership=sub.membership,
        failing_sql=_residual(sub.failing, params) if sub.failing is not None else None,
        delete_sql=_residual(sub.deletes, params),
        snapshot=sub.snapshot, progress=sub.progress,
        resume=Position.from_json(sub.position_json) if sub.position_json else None,
        keys=keys, emit_changes=sub.emit_changes, store_kind=sub.spec.kind.value, full_scan=full_scan)
    plan = Plan(kind=StatementKind.SUBSCRIBE, subscription=subscription)
    if template.explain:
        return Plan(kind=StatementKind.EXPLAIN, inner=plan, explain=subscription_explain(subscription))
    return plan


def subscription_explain(s: Subscription) -> str:
    """EXPLAIN SUBSCRIBE: what the engine runs per batch, and what the feed is asked for."""
    lines = [f"subscribe store {s.store} ({s.store_kind}): snapshot={str(s.snapshot).lower()} "
             f"progress={str(s.progress).lower()}" + ("" if s.resume is None else f" from {s.resume.to_json()}"),
             f"  identity: {', '.join(s.identity)}" + (f" (appended: {', '.join(s.added)})" if s.added else "")]
    if s.keys is None:
        lines.append("  keys: all" + (" (full scan)" if s.full_scan else ""))
    else:
        lines.append(f"  keys: {'any' if s.keys.keys is None else list(s.keys.keys)}"
                     + ("" if s.keys.ranges is None else f" ranges={list(s.keys.ranges)}")
                     + ("" if s.keys.partitions is None else f" partitions={sorted(s.keys.partitions)}"))
    lines.append(f"rows of {s.relation}: {s.sql}")
    lines.append(f"deleted rows{' (if shown)' if s.membership else ''}: {s.delete_sql}")
    if s.membership:
        lines.append(f"rows leaving the answer (if shown): {s.failing_sql}")
    return "\n".join(lines)
