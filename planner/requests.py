"""Binding a scan template to IQv2 requests: values coerced, bounds tightened, partitions chosen.

Runs on every plan() call (after the cache), so it is plain Python over
small lists. The query type follows the store kind (kafka-iqv2.md §1.7): a
store is only ever sent a query it can answer.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from stores.catalog.partitioner import partition_for_key
from stores.catalog.schema import SqlType, StoreKind
from stores.catalog.tuple_keys import encode_tuple
from stores.iqv2.position import PositionBound
from stores.iqv2.query import (
    KeyQuery,
    MultiKeyQuery,
    MultiVersionedKeyQuery,
    MultiVersionedRangeQuery,
    RangeQuery,
    ResultOrder,
    TimestampedKeyQuery,
    TimestampedRangeQuery,
    VersionedKeyQuery,
    WindowKeyQuery,
    WindowRangeQuery,
)
from stores.iqv2.request import StateQueryRequest
from stores.iqv2.timeutil import MAX_MS, MIN_MS

from .composite_keys import composite_keys
from .errors import ParameterError, TypeMismatchError, UnsupportedSqlError
from .literals import NO_MATCH, NOT_PUSHABLE, ValueRef, coerce_bound, resolve, show
from .plan import StoreScan
from .positions import line_col
from .template import ScanTemplate

__all__ = ["bind_scan", "bind_general", "Binder"]


@dataclass(slots=True)
class _Range:
    lo: Any = None
    hi: Any = None

    def add(self, op: str, value: Any) -> None:
        if op in (">=", "="):
            self.lo = value if self.lo is None else max(self.lo, value)
        if op in ("<=", "="):
            self.hi = value if self.hi is None else min(self.hi, value)

    @property
    def bounded(self) -> bool:
        return self.lo is not None or self.hi is not None

    def contains(self, v: Any) -> bool:
        return (self.lo is None or v >= self.lo) and (self.hi is None or v <= self.hi)


def _pos(sql: str, ref: ValueRef, fallback: int | None) -> tuple[int | None, int | None]:
    start = ref.start if ref.start is not None else fallback
    return line_col(sql, start) if start is not None else (None, None)


class _Binder:
    def __init__(self, sql: str, t: ScanTemplate, params: Any) -> None:
        self.sql, self.t, self.params = sql, t, params
        self.exact = True

    def value(self, ref: ValueRef, target: SqlType, op: str, column: str, what: str,
              among: int = 1) -> tuple[Any, str]:
        """``among``: how many values the column may equal (``IN (…)``, an OR of equalities). A NULL among
        others never matches but the others may (SQL's ``k IN ('a', NULL)`` finds 'a'): it is left out. A NULL
        alone (``k = NULL``) can match nothing, which is a mistake worth saying."""
        value, sql_type = resolve(ref, self.params)
        if among > 1 and sql_type == "NULL":
            return NO_MATCH, op
        try:
            v, op2 = coerce_bound(value, sql_type, target, op, column=column, what=what, line=None, col=None)
        except TypeMismatchError as err:
            line, col = _pos(self.sql, ref, self.t.start)
            raise TypeMismatchError(err.message, line=line, col=col) from None
        if v is NOT_PUSHABLE:
            self.exact = False
        elif op2 in (">", "<"):
            self.exact = False  # no exact successor (strings, booleans): inclusive, DuckDB trims
            op2 += "="
        return v, op2

    def partition(self, ref: ValueRef, among: int = 1) -> Any:
        value, sql_type = resolve(ref, self.params)
        if among > 1 and sql_type == "NULL":
            return NO_MATCH  # as in ``value``
        if sql_type == "INTEGER":
            return value if value >= 0 else NO_MATCH
        if sql_type == "VARCHAR" and value.strip().lstrip("-").isdigit():
            v = int(value.strip())
            return v if v >= 0 else NO_MATCH
        if sql_type in ("DECIMAL", "DOUBLE") and float(value).is_integer():
            return int(value) if value >= 0 else NO_MATCH
        if sql_type in ("DECIMAL", "DOUBLE"):
            return NO_MATCH
        line, col = _pos(self.sql, ref, self.t.start)
        raise TypeMismatchError(f"cannot compare column _partition (INTEGER) with {show(value, sql_type)} ({sql_type})", line=line, col=col)


Binder = _Binder  # the value coercion a scan's binding uses, for streams' too (planner/streams.py)


def bind_scan(
    sql: str, t: ScanTemplate, params: Any, bound: PositionBound, session: Mapping[str, Any]
) -> tuple[StoreScan, tuple[str, ...] | None]:
    """The scan and its fast-path columns (None unless the requests are exactly the statement's rows).

    LIMIT and the fast path are only kept when every pushed predicate was
    represented exactly; otherwise DuckDB still has rows to drop.
    """
    ref = _point_ref(t)
    if ref is not None:
        point = _bind_point(sql, t, ref, params, bound, session)
        if point is not None:
            return point
    return bind_general(sql, t, params, bound, session)


def _point_ref(t: ScanTemplate) -> ValueRef | None:
    """The one key value of a plain point lookup (``WHERE k = ?`` on a key-value store, nothing else pushed)."""
    spec = t.spec
    if (spec.kind is not StoreKind.KEY_VALUE and spec.kind is not StoreKind.TIMESTAMPED_KEY_VALUE) \
            or spec.composite or len(t.constraints) != 1 or t.limit is not None:
        return None
    c = t.constraints[0]
    if c.column != "key" or c.kind != "eq" or len(c.values) != 1:
        return None
    return c.values[0]


def _bind_point(sql: str, t: ScanTemplate, ref: ValueRef, params: Any, bound: PositionBound,
                session: Mapping[str, Any]) -> tuple[StoreScan, tuple[str, ...] | None] | None:
    """``bind_general``'s answer for a point lookup, without its machinery for ranges, windows and versions.

    Why: this is the statement BI tools and services send most, and binding
    it the general way cost ~20 us of a ~100 us HTTP lookup (issue 14).
    None when the value cannot be pushed down (the general path then scans).
    tests/planner/test_point_binding.py checks it against ``bind_general``.
    """
    spec = t.spec
    b = _Binder(sql, t, params)
    value = b.value(ref, spec.key.type, "=", spec.key.name, "key column")[0]
    if value is NOT_PUSHABLE:
        return None
    requests: tuple[StateQueryRequest, ...] = ()
    if value is not NO_MATCH:
        cls = TimestampedKeyQuery if spec.kind is StoreKind.TIMESTAMPED_KEY_VALUE else KeyQuery
        r = StateQueryRequest(t.store, cls.with_key(value),
                              frozenset((partition_for_key(value, spec.partitions, spec.key.type),)), bound)
        if session.get("require_active"):
            r = r.require_active()
        if session.get("execution_info"):
            r = r.enable_execution_info()
        requests = (r,)
    scan = StoreScan(
        relation=t.relation, store=t.store, requests=requests, order=t.order, limit=None,
        include_failures=t.include_failures, full_scan=False,
        store_kind=spec.kind.value, store_partitions=spec.partitions,
    )
    return scan, (t.fast_path if b.exact and t.all_consumed else None)


def bind_general(
    sql: str, t: ScanTemplate, params: Any, bound: PositionBound, session: Mapping[str, Any]
) -> tuple[StoreScan, tuple[str, ...] | None]:
    """``bind_scan`` for every shape of scan: keys, key ranges, composite keys, windows, versions, partitions."""
    spec = t.spec
    b = _Binder(sql, t, params)
    keys: list[Any] | None = None
    key_range, ws, we, vf, vt = _Range(), _Range(), _Range(), _Range(), _Range()
    partitions: set[int] | None = None
    impossible = False  # a bound no row can meet (beyond the column's range)
    time_ranges = {"window_start": ws, "window_end": we, "valid_from": vf, "valid_to": vt}
    key_ranges: list[tuple[Any, Any]] | None = None  # composite keys: key-prefix byte ranges
    if spec.composite:
        ck = composite_keys(spec, t.constraints,
                            lambda r, typ, op, name, among=1: b.value(r, typ, op, name, "key column", among))
        keys, impossible = ck.keys, ck.impossible
        b.exact = b.exact and ck.exact
        if ck.ranges:
            key_ranges = ck.ranges
            key_range.lo, key_range.hi = ck.ranges[0]
    for c in t.constraints:
        if c.column.startswith("key#"):
            continue
        if c.column == "_partition":
            if c.kind != "eq":
                continue
            vals = {p for p in (b.partition(r, len(c.values)) for r in c.values) if p is not NO_MATCH}
            partitions = vals if partitions is None else partitions & vals
            continue
        if c.column == "key":
            target, name, what = spec.key.type, spec.key.name, "key column"
        else:
            target, name, what = SqlType.TIMESTAMP, c.column, "column"
        if c.kind == "eq":
            coerced = [b.value(r, target, "=", name, what, len(c.values))[0] for r in c.values]
            if any(v is NOT_PUSHABLE for v in coerced):
                continue
            vals = [v for v in coerced if v is not NO_MATCH]
            if c.column == "key":
                wanted = set(vals)
                keys = list(dict.fromkeys(vals)) if keys is None else [k for k in keys if k in wanted]
            elif len(set(vals)) == 1:
                time_ranges[c.column].add("=", vals[0])
            elif not vals:
                time_ranges[c.column].add(">=", MAX_MS)
                time_ranges[c.column].add("<=", MIN_MS)
            else:
                time_ranges[c.column].add(">=", min(vals))
                time_ranges[c.column].add("<=", max(vals))
                b.exact = False
            continue
        rng = key_range if c.column == "key" else time_ranges[c.column]
        for op, ref in c.bounds:
            v, op2 = b.value(ref, target, op, name, what)
            if v is NO_MATCH:
                impossible = True
            elif v is not NOT_PUSHABLE:
                rng.add(op2, v)
    if keys is not None and key_range.bounded:
        keys = [k for k in keys if key_range.contains(k)]
    if spec.kind is StoreKind.WINDOW and we.bounded and spec.window_size_ms is not None:
        size = spec.window_size_ms
        if we.lo is not None:
            ws.add(">=", we.lo - size)
        if we.hi is not None:
            ws.add("<=", we.hi - size)

    if partitions is not None and not partitions:
        impossible = True  # e.g. _partition = -1: no partition can hold a row
    all_parts = partitions if partitions is not None else set(range(spec.partitions))
    queries: list[tuple[Any, frozenset[int]]] = []
    full_scan = False
    key_lookup = keys is not None
    kind = spec.kind

    def for_key(k: Any) -> frozenset[int] | None:
        stored = encode_tuple(spec.key_parts, k) if spec.composite else k
        p = partition_for_key(stored, spec.partitions, spec.key.type)
        if partitions is not None and p not in partitions:
            return None
        return frozenset((p,))

    if kind in (StoreKind.KEY_VALUE, StoreKind.TIMESTAMPED_KEY_VALUE):
        timestamped = kind is StoreKind.TIMESTAMPED_KEY_VALUE
        if key_lookup:
            cls = TimestampedKeyQuery if timestamped else KeyQuery
            queries = [(cls.with_key(ks[0]) if len(ks) == 1 else MultiKeyQuery.with_keys(ks), ps)
                       for ps, ks in _by_partition(keys, for_key)]
        else:
            for lo, hi in key_ranges or [(key_range.lo, key_range.hi)]:
                rq: Any = (TimestampedRangeQuery if timestamped else RangeQuery).with_range(lo, hi)
                if t.order is ResultOrder.DESCENDING:
                    rq = rq.with_descending_keys()
                elif t.order is ResultOrder.ASCENDING:
                    rq = rq.with_ascending_keys()
                queries.append((rq, frozenset(all_parts)))
            full_scan = not key_range.bounded
    elif kind is StoreKind.WINDOW:
        lo = ws.lo if ws.lo is not None else MIN_MS
        hi = ws.hi if ws.hi is not None else MAX_MS
        if key_lookup:
            queries = [(WindowKeyQuery.with_key_and_window_start_range(k, lo, hi), ps) for k in keys if (ps := for_key(k)) is not None]
        else:
            full_scan = not ws.bounded
            queries = [(WindowRangeQuery.with_window_start_range(lo, hi), frozenset(all_parts))]
    elif kind is StoreKind.SESSION:
        if not key_lookup:
            raise _needs_key(sql, t, "session stores can only be queried by key (Kafka's session stores answer only WindowRangeQuery.with_key)")
        queries = [(WindowRangeQuery.with_key(k), ps) for k in keys if (ps := for_key(k)) is not None]
    elif kind is StoreKind.VERSIONED:
        window = _system_time_window(sql, t, b, params, vf, vt)
        if window is None:
            impossible = True
        elif key_lookup:
            for k in keys:
                ps = for_key(k)
                if ps is None:
                    continue
                if window.point is not None:
                    q: Any = VersionedKeyQuery.with_key(k)
                    queries.append((q if window.point == MAX_MS else q.as_of(window.point), ps))
                else:
                    mq = MultiVersionedKeyQuery.with_key(k).from_time(window.lo).to_time(window.hi)
                    queries.append((mq.with_ascending_timestamps(), ps))
        else:
            for lo, hi in key_ranges or [(key_range.lo, key_range.hi)]:
                rq = (MultiVersionedRangeQuery.with_key_range(lo, hi)
                      .from_time(window.lo).to_time(window.hi).with_ascending_timestamps())
                rq = rq.with_descending_keys() if t.order is ResultOrder.DESCENDING else rq.with_ascending_keys()
                queries.append((rq, frozenset(all_parts)))
            full_scan = not key_range.bounded

    if impossible:
        queries, full_scan = [], False
    requests = []
    for q, ps in queries:
        r = StateQueryRequest.in_store(t.store).with_query(q).with_partitions(ps).with_position_bound(bound)
        if session.get("require_active"):
            r = r.require_active()
        if session.get("execution_info"):
            r = r.enable_execution_info()
        requests.append(r)

    exact = b.exact and t.all_consumed
    limit = None
    if t.limit is not None and exact:
        limit = _count(t.limit, params)
        offset = _count(t.offset, params) if t.offset is not None else 0
        limit = None if limit is None or offset is None else limit + offset
    fast = t.fast_path if exact and key_lookup else None
    scan = StoreScan(
        relation=t.relation, store=t.store, requests=tuple(requests), order=t.order, limit=limit,
        include_failures=t.include_failures, full_scan=full_scan,
        store_kind=spec.kind.value, store_partitions=spec.partitions,
    )
    return scan, fast


@dataclass(frozen=True, slots=True)
class _TimeWindow:
    """Which versions a versioned scan asks for: those overlapping [lo, hi] (None: open).

    ``point`` is set when the clause selects one instant (the current versions are the
    instant MAX_MS): then a key lookup is a VersionedKeyQuery, not a history query.
    """

    lo: int | None
    hi: int | None
    point: int | None = None


def _system_time_window(sql: str, t: ScanTemplate, b: _Binder, params: Any, vf: _Range,
                        vt: _Range) -> _TimeWindow | None:
    """SQL:2011 semantics: the clause decides which versions the table has; valid_from/valid_to predicates
    only narrow the history a FROM/BETWEEN/ALL clause asks for (they always stay in the residual).
    None: no version can match (an empty period).
    """
    st = t.system_time
    if st is None:
        return _TimeWindow(MAX_MS, MAX_MS, MAX_MS)  # the current versions: those valid at the end of time
    what = f"FOR SYSTEM_TIME {st.kind.replace('_', ' ').upper().replace('FROM TO', 'FROM … TO')}"
    times = [_system_time_value(sql, t, b, params, ref, what) for ref in st.values]
    if st.kind == "as_of":
        return _TimeWindow(times[0], times[0], times[0])
    if st.kind == "all":
        lo, hi = None, None
    else:
        lo, hi = times
        if st.kind == "from_to":
            if hi == MIN_MS:
                return None
            hi -= 1  # TO is exclusive; times are whole milliseconds
        if lo > hi:
            return None
    # a version [vf, vt) overlaps [lo, hi] iff vf <= hi and vt > lo (kafka-iqv2.md §1.8)
    period_lo, period_hi = lo, hi
    his = [x for x in (hi, vf.hi, None if vt.hi is None else vt.hi - 1) if x is not None]
    los = [x for x in (lo, None if vt.lo is None else vt.lo - 1, vf.lo) if x is not None]  # vt >= L: vt > L - 1
    lo, hi = (max(los) if los else None), (min(his) if his else None)
    if lo is not None and hi is not None and lo > hi:
        # Not empty: `vf <= hi and vt > lo` still holds for a version that starts before hi and ends after lo
        # (FROM a TO b WHERE valid_from < x, x before a). A history query cannot ask for lo > hi, so one side
        # goes back to the period's own bound; the predicates that moved it stay in the residual.
        if period_lo is None or period_lo <= hi:
            lo = period_lo
        elif period_hi is None or lo <= period_hi:
            hi = period_hi
        else:
            lo, hi = period_lo, period_hi
    return _TimeWindow(lo, hi)


def _system_time_value(sql: str, t: ScanTemplate, b: _Binder, params: Any, ref: ValueRef, what: str) -> int:
    try:
        value, _ = b.value(ref, SqlType.TIMESTAMP, "=", what, "value")
    except TypeMismatchError as err:
        raw, _t = resolve(ref, params)
        raise TypeMismatchError(f"{what} needs a timestamp; {raw!r} is not one", line=err.line, col=err.col) from None
    if value is NOT_PUSHABLE or value is NO_MATCH:
        line, col = _pos(sql, ref, t.start)
        raise UnsupportedSqlError(f"{what} needs a timestamp (with or without a UTC offset) in whole milliseconds",
                                  line=line, col=col)
    return value


def _by_partition(keys: list[Any], for_key: Any) -> list[tuple[frozenset[int], list[Any]]]:
    """Keys grouped by the partition that holds them, groups in the order of their first key: one request per
    partition (a MultiKeyQuery when it holds several), so ``k IN (…)`` with thousands of keys stays cheap."""
    groups: dict[frozenset[int], list[Any]] = {}
    for k in keys:
        ps = for_key(k)
        if ps is not None:
            groups.setdefault(ps, []).append(k)
    return list(groups.items())


def _count(ref: ValueRef, params: Any) -> int | None:
    value, sql_type = resolve(ref, params)
    if sql_type == "INTEGER" and value >= 0:
        return int(value)
    return None


def _needs_key(sql: str, t: ScanTemplate, why: str) -> UnsupportedSqlError:
    line, col = line_col(sql, t.start) if t.start is not None else (None, None)
    where = " AND ".join(f"{c.name} = …" for c in t.spec.key_columns())
    return UnsupportedSqlError(
        f"store {t.store} needs a key: add WHERE {where} (or IN (…)); {why}", line=line, col=col
    )


def check_params(params: Any, template: Any) -> Any:
    """The parameters in the shape the template's placeholders need, or ParameterError."""
    if template.param_mode is None:
        if params:
            raise ParameterError(f"the statement has no placeholders but {len(params)} parameters were given")
        return ()
    if template.param_mode in ("qmark", "numbered"):
        what = "?" if template.param_mode == "qmark" else "$n"
        if params is None or isinstance(params, (str, bytes)) or not hasattr(params, "__len__") or hasattr(params, "keys"):
            raise ParameterError(f"the statement has {template.param_count} {what} placeholders; pass a list of {template.param_count} parameters")
        if len(params) != template.param_count:
            raise ParameterError(f"the statement has {template.param_count} {what} placeholders but {len(params)} parameters were given")
        return params
    if params is None or not hasattr(params, "keys"):
        raise ParameterError(f"the statement has named placeholders ({', '.join(sorted(template.param_names))}); pass a mapping")
    missing = template.param_names - set(params.keys())
    if missing:
        raise ParameterError(f"missing parameters: {', '.join(sorted(missing))}")
    return params
