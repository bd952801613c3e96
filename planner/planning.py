"""SQL text + catalog (+ parameters, session) to a Plan: ``plan()``, and ``Planner``, which caches templates.

Parsing and analysis cost milliseconds; a point lookup must plan in
microseconds. So a ``Planner`` (one per Gateway, which owns it) caches the
analysed template by the statement text, reused while every store it read is
still the same catalog entry; parameters, the position bound and the
session's switches are applied after the cache. ``plan()`` is the same
planning without a cache: a pure function of its arguments.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Mapping, Sequence
from types import MappingProxyType
from typing import Any

from stores.catalog.schema import StoreSpec
from stores.catalog.streams import StreamQuery, streams_of
from stores.iqv2.position import Position, PositionBound

from .analyze import Template, analyze
from .deep import run_deep
from .dialect import Explain, Subscribe, parse_statement
from .errors import ParameterError, SqlSyntaxError, TableScanDisabledError
from .explain import explain_text
from .limits import check_param_values, check_text, check_tree_depth
from .literals import sql_literal
from .plan import Plan, StatementKind, StoreScan, StreamScan
from .point_lanes import PointLane, lane_of
from .positions import line_col
from .requests import bind_scan, check_params
from .rewrites import balance_chains, rewrite_or_chains
from .settings import resolve_session
from .streams import bind_stream, scan_disabled
from .subscribe import analyze_subscribe, bind_subscription
from .template import NO_LANE_YET as _NO_LANE_YET

# given a function that stops the planning thread while it runs, and None after (a statement watch's attach)
AttachInterrupt = Callable[[Callable[[], None] | None], None]

__all__ = ["Planner", "plan", "plan_shape"]

_CACHE_SIZE = 1024


def _normalize(sql: str) -> str:
    """The cache key: trailing whitespace and ';' do not make a new statement.

    Leading text is kept so error lines and columns match what the user sent.
    """
    text = sql.rstrip()
    while text.endswith(";"):
        text = text[:-1].rstrip()
    return text


def _analyze_text(key: str, catalog: Mapping[str, StoreSpec], attach_interrupt: AttachInterrupt | None) -> Template:
    check_text(key)
    try:
        return run_deep(lambda: _analyzed(key, catalog), attach_interrupt)
    except RecursionError:  # the parser's own recursion (check_tree_depth bounds the analysis after it)
        raise SqlSyntaxError("the statement nests expressions too deeply to parse (a chain of thousands of NOT or "
                             "unary minus signs?); write it with fewer levels") from None


class _Entry:
    """A cached template and its point lane (``NO_LANE_YET`` until first asked for)."""

    __slots__ = ("template", "lane")

    def __init__(self, template: Template) -> None:
        self.template = template
        self.lane: Any = _NO_LANE_YET


class Planner:
    """Plans statements with a cache of analysed templates (an LRU of ``size`` statement texts) and their point
    lanes. Thread-safe. A Gateway owns one, so two gateways never share a cache."""

    def __init__(self, size: int = _CACHE_SIZE) -> None:
        self._size = size
        self._cache: OrderedDict[str, _Entry] = OrderedDict()
        self._lock = threading.Lock()
        self._stats = {"hits": 0, "misses": 0}

    def clear(self) -> None:
        with self._lock:
            self._cache.clear()
            self._stats.update(hits=0, misses=0)

    def cache_info(self) -> dict[str, int]:
        with self._lock:
            return {"size": len(self._cache), **self._stats}

    def _entry(self, sql: str, catalog: Mapping[str, StoreSpec],
               attach_interrupt: AttachInterrupt | None = None) -> _Entry:
        key = _normalize(sql)
        with self._lock:
            cached = self._cache.get(key)
            if cached is not None:
                self._cache.move_to_end(key)
        if cached is not None and all(catalog.get(name) is spec or catalog.get(name) == spec
                                      for name, spec in cached.template.deps.items()) and _same_streams(
                                          cached.template, catalog):
            self._stats["hits"] += 1
            return cached
        self._stats["misses"] += 1
        entry = _Entry(_analyze_text(key, catalog, attach_interrupt))
        with self._lock:
            self._cache[key] = entry
            self._cache.move_to_end(key)
            while len(self._cache) > self._size:
                self._cache.popitem(last=False)
        return entry

    def plan(self, sql: str, catalog: Mapping[str, StoreSpec], *,
             params: Sequence[Any] | Mapping[str, Any] | None = None, session: Mapping[str, Any] | None = None,
             attach_interrupt: AttachInterrupt | None = None) -> Plan:
        """``plan()``, with the template from the cache when the text was planned on this catalog before."""
        if not isinstance(sql, str):
            raise TypeError(f"sql must be a string, got {type(sql).__name__}")
        return _bind(self._entry(sql, catalog, attach_interrupt).template, sql, params, session)

    def plan_shape(self, sql: str, catalog: Mapping[str, StoreSpec]) -> Plan:
        """``plan_shape()``, with the template from the cache."""
        if not isinstance(sql, str):
            raise TypeError(f"sql must be a string, got {type(sql).__name__}")
        return _shape(self._entry(sql, catalog).template, sql)

    def point_lane(self, sql: str, catalog: Mapping[str, StoreSpec]) -> PointLane | None:
        """The point lane of ``sql`` (point_lanes.py), or None: then ``plan`` answers.

        None unless ``sql`` is in the cache (for this catalog) as a plain
        point lookup whose rows are exactly the store's answer (no DuckDB).
        The lane is made once per cached template, so a template evicted or
        planned anew takes its lane with it. The default session only: any
        setting goes through ``plan``.
        """
        if not isinstance(sql, str):
            return None
        entry = self._cache.get(sql)  # the text as sent: the key when the client sends no trailing ';' or space
        if entry is None:
            with self._lock:
                entry = self._cache.get(_normalize(sql))
            if entry is None:
                return None
        lane = entry.lane
        if lane is _NO_LANE_YET:  # two threads may both make it: the same lane
            lane = entry.lane = lane_of(entry.template, _bound(entry.template, _DEFAULTS))
        if lane is None or not lane.planned_on(catalog):
            return None
        return lane


def _same_streams(template: Template, catalog: Mapping[str, StoreSpec]) -> bool:
    """Is every stream the template read still the same entry (a stream published anew may have new columns)?"""
    if not template.stream_deps:
        return True
    streams = streams_of(catalog)
    return all(streams.get(name) == spec for name, spec in template.stream_deps.items())


def _analyzed(text: str, catalog: Mapping[str, StoreSpec]) -> Template:
    tree = rewrite_or_chains(parse_statement(text))
    long_chains = balance_chains(tree) > 0
    check_tree_depth(tree)
    explained = tree.this if isinstance(tree, Explain) and not tree.args.get("analyze") else None
    if isinstance(tree, Subscribe) or isinstance(explained, Subscribe):
        return analyze_subscribe(text, explained or tree, catalog, explain=explained is not None)
    template = analyze(text, tree, catalog)
    template.long_chains = long_chains
    return template


def plan(
    sql: str,
    catalog: Mapping[str, StoreSpec],
    *,
    params: Sequence[Any] | Mapping[str, Any] | None = None,
    session: Mapping[str, Any] | None = None,
    attach_interrupt: AttachInterrupt | None = None,
) -> Plan:
    """Plan one statement. Raises a PlanningError subclass naming the problem and, where known, its place.

    Line and column (1-based) refer to ``sql`` as given. No cache: a
    ``Planner`` keeps the analysed templates. ``attach_interrupt``
    is handed a function that stops parsing and analysis (they then raise
    ``PlanningInterrupted``) while they run, and None after: the gateway's
    statement watch calls it when the statement's budget is spent.
    """
    if not isinstance(sql, str):
        raise TypeError(f"sql must be a string, got {type(sql).__name__}")
    return _bind(_analyze_text(_normalize(sql), catalog, attach_interrupt), sql, params, session)


def _bind(template: Template, sql: str, params: Sequence[Any] | Mapping[str, Any] | None,
          session: Mapping[str, Any] | None) -> Plan:
    """A template bound to one call's parameters, session and bound."""
    settings = resolve_session(session) if session else _DEFAULTS
    if template.kind is StatementKind.SUBSCRIBE:
        if params:
            check_param_values(params)
        return bind_subscription(_normalize(sql), template, params, settings)
    if template.kind is not StatementKind.SELECT:
        if params:
            raise ParameterError(f"{template.kind.value} statements take no parameters")
        inner = Plan(
            kind=template.kind,
            describe=template.describe,
            settings=MappingProxyType(dict(template.settings)),
        )
        return _explained(inner) if template.explain else inner
    if params:
        check_param_values(params)
    params = check_params(params, template)
    bound = _bound(template, settings)
    text = _normalize(sql)
    scans = []
    fast_paths = []
    for t in template.scans:
        scan, fast = bind_scan(text, t, params, bound, settings)
        if scan.full_scan and not settings["table_scans"]:
            line, col = line_col(text, t.start) if t.start is not None else (None, None)
            names = [c.name for c in t.spec.key_columns()]
            raise TableScanDisabledError(
                f"query on store {t.store} needs a full table scan (no usable predicate on key column "
                f"{', '.join(names)}); table scans are disabled: add WHERE "
                f"{' AND '.join(n + ' = …' for n in names) if len(names) > 1 else names[0] + ' = …'} or a key range, "
                "or SET table_scans = true",
                line=line,
                col=col,
            )
        scans.append(scan)
        fast_paths.append(fast)
    streams = []
    for t in template.streams:
        stream = bind_stream(text, t, params, bound, settings)
        if stream.full_scan and not settings["table_scans"]:
            raise scan_disabled(text, t)
        streams.append(stream)
    residual = _residual(template, params)
    fast_path = fast_paths[0] if len(scans) == 1 and not streams else None
    result = Plan(
        kind=StatementKind.SELECT,
        scans=tuple(scans),
        residual_sql=residual,
        long_chains=template.long_chains,
        position_bound=bound,
        fast_path=fast_path,
        system_tables=template.system_tables,
        # over one scan, or two joined on their keys (residual_program.Join)
        residual_program=template.program if not streams else None,
        residual_values=template.slot_values(params) if template.program is not None else (),
        streams=tuple(streams),
    )
    return _explained(result, template.explain_position) if template.explain else result


def plan_shape(sql: str, catalog: Mapping[str, StoreSpec]) -> Plan:
    """A statement's plan without parameter values: what its result columns are, found without reading a store.

    SELECT plans have scans with no requests and residual SQL with NULL for
    every parameter (DuckDB binds it and names the result columns); other
    statements plan as ``plan`` would. PostgreSQL's Describe of a prepared
    statement needs this: the columns before any parameter is bound.
    """
    if not isinstance(sql, str):
        raise TypeError(f"sql must be a string, got {type(sql).__name__}")
    return _shape(_analyze_text(_normalize(sql), catalog, None), sql)


def _shape(template: Template, sql: str) -> Plan:
    if template.kind is StatementKind.SUBSCRIBE:  # every parameter NULL: the columns of the rows it sends
        nulls: Any = ({n: None for n in template.param_names} if template.param_mode == "named"
                      else [None] * template.param_count)
        return bind_subscription(_normalize(sql), template, nulls if template.param_mode else None,
                                 _DEFAULTS | {"table_scans": True})
    if template.kind is not StatementKind.SELECT:
        return Plan(kind=template.kind, describe=template.describe, settings=MappingProxyType(dict(template.settings)))
    scans = tuple(StoreScan(relation=t.relation, store=t.store, requests=(), include_failures=t.include_failures)
                  for t in template.scans)
    streams = tuple(StreamScan(relation=t.relation, stream=t.store, topic=t.spec.topic, query=StreamQuery(empty=True),
                               include_failures=t.include_failures) for t in template.streams)  # type: ignore[union-attr]
    residual = "".join("NULL" if isinstance(c, int) else c for c in template.chunks)
    shape = Plan(kind=StatementKind.SELECT, scans=scans, residual_sql=residual, system_tables=template.system_tables,
                 streams=streams)
    return Plan(kind=StatementKind.EXPLAIN, inner=shape, explain_position=template.explain_position) \
        if template.explain else shape


_DEFAULTS = resolve_session(None)
_bound_cache: dict[str, PositionBound] = {}


def _bound(template: Template, settings: Mapping[str, Any]) -> PositionBound:
    text = template.position_json if template.position_json is not None else settings["position_bound"]
    if not text:
        return PositionBound.unbounded()
    bound = _bound_cache.get(text)
    if bound is None:
        bound = PositionBound.at(Position.from_json(text))
        if len(_bound_cache) > 256:
            _bound_cache.clear()
        _bound_cache[text] = bound
    return bound


def _residual(template: Template, params: Any) -> str:
    if len(template.chunks) == 1:
        return template.chunks[0]  # type: ignore[return-value]
    out = []
    for chunk in template.chunks:
        if isinstance(chunk, int):
            out.append(sql_literal(params[template.slot_keys[chunk]]))
        else:
            out.append(chunk)
    return "".join(out)


def _explained(inner: Plan, position: bool = False) -> Plan:
    return Plan(kind=StatementKind.EXPLAIN, inner=inner, explain=explain_text(inner), position_bound=inner.position_bound,
                explain_position=position)
