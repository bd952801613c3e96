"""The point-lookup binder (``requests._bind_point``) against the general one (``requests.bind_general``).

``bind_scan`` takes the short path for ``WHERE k = ?`` on a key-value store;
every statement and value here must bind to the same scan (requests,
partitions, bound, flags, fast-path columns) or fail with the same error,
whichever path runs. ``planning.point_lane`` (the gateway's point lane) must
give ``plan``'s request (store, key, query type, partition, bound) and
fast-path columns, or None where ``plan`` would do anything else (an error,
DuckDB, no request at all).
"""

from __future__ import annotations

import functools
import itertools
from typing import Any

import pytest

from planner.errors import PlanningError
from planner.planning import Planner, _analyze_text, _normalize
from planner.requests import _point_ref, bind_general, bind_scan
from planner.settings import resolve_session
from stores.iqv2.position import Position, PositionBound
from stores.iqv2.query import KeyQuery, TimestampedKeyQuery
from tests.planner.planner_catalog import CATALOG

PLANNER = Planner()  # the gateway's point lane lives in its Planner's cache


@functools.lru_cache(maxsize=None)
def _template(sql: str) -> Any:
    """The analysed template of ``sql`` (what a Planner caches, and so shares between statements: here too)."""
    return _analyze_text(_normalize(sql), CATALOG, None)

STORES = ["mystore", "int_store", "str_store", "dbl_store", "bool_store", "ts_store", "date_store", "revenue", "single"]
SHAPES = [
    "SELECT * FROM {s} WHERE {k} = ?",
    "SELECT {k} FROM {s} WHERE ? = {k}",
    "SELECT * FROM {s} WHERE {k} IN (?)",
    "SELECT * FROM {s} t WHERE t.{k} = ? ORDER BY {k}",
    "SELECT count(*) FROM {s} WHERE {k} = ?",
    "SELECT * FROM {s} WHERE {k} = ? AND {k} = ?",      # two constraints: the general path
    "SELECT * FROM {s} WHERE {k} = ? LIMIT 1",           # LIMIT: the general path
    "SELECT * FROM {s} WHERE {k} IN (?, ?)",             # two keys: the general path
]
LITERALS = ["5", "-1", "'7'", "'abc'", "5.5", "3.0", "NULL", "TRUE", "9223372036854775808", "'2024-01-02'",
            "TIMESTAMP '2024-01-02 03:04:05'", "DATE '2024-01-02'"]
VALUES: list[Any] = [0, 1, -1, 2**63, 3.0, 3.5, "7", " 8 ", "abc", "", None, True, False, "2024-01-02",
                     "2024-01-02T03:04:05Z", 1.5e300]
SESSIONS = [{}, {"require_active": True}, {"execution_info": True}]
BOUNDS = [PositionBound.unbounded(), PositionBound.at(Position.from_map({"events": {0: 5}}))]


def _key(store: str) -> str:
    return CATALOG[store].key.name


def _bind(fn: Any, sql: str, params: Any, session: dict[str, Any], bound: PositionBound) -> Any:
    t = _template(sql).scans[0]
    try:
        return fn(sql, t, params, bound, resolve_session(session) if session else resolve_session(None))
    except PlanningError as exc:
        return (type(exc).__name__, str(exc), exc.line, exc.col)


def _cases() -> list[tuple[str, Any]]:
    out: list[tuple[str, Any]] = []
    for store, shape in itertools.product(STORES, SHAPES):
        sql = shape.format(s=store, k=_key(store))
        n = sql.count("?")
        out += [(sql, [v] * n) for v in VALUES]
    for store, lit in itertools.product(STORES, LITERALS):
        out.append((f"SELECT * FROM {store} WHERE {_key(store)} = {lit}", None))
    return out


CASES = _cases()


@pytest.mark.parametrize("session", SESSIONS, ids=["default", "require_active", "execution_info"])
@pytest.mark.parametrize("bound", BOUNDS, ids=["unbounded", "bounded"])
def test_point_binding_is_the_general_binding(session: dict[str, Any], bound: PositionBound) -> None:
    points = 0
    for sql, params in CASES:
        try:
            t = _template(sql).scans[0]
        except PlanningError:
            continue  # e.g. a literal the analyser refuses: no binding to compare
        points += _point_ref(t) is not None
        fast, general = _bind(bind_scan, sql, params, session, bound), _bind(bind_general, sql, params, session, bound)
        assert fast == general, (sql, params)
    assert points >= 400  # the short path really ran (most shapes above are point lookups)


def test_only_plain_point_lookups_take_the_short_path() -> None:
    def shape(sql: str) -> bool:
        return _point_ref(_template(sql).scans[0]) is not None

    assert shape("SELECT * FROM mystore WHERE k = ?")
    assert shape("SELECT * FROM revenue WHERE customer IN (?)")
    assert not shape("SELECT * FROM mystore WHERE k IN (?, ?)")
    assert not shape("SELECT * FROM mystore WHERE k = ? LIMIT 1")
    assert not shape("SELECT * FROM mystore WHERE k > ?")
    assert not shape("SELECT * FROM per_min WHERE key = ?")       # a window store
    assert not shape("SELECT * FROM last_order WHERE key = ?")    # a versioned store
    assert not shape("SELECT * FROM mystore WHERE k = ? AND _partition = 1")


def _lane_answer(sql: str, params: Any, catalog: Any = CATALOG) -> tuple[Any, ...] | None:
    """What the lane binds ``params`` to (store, query type, key, partitions, bound, columns), or None."""
    lane = PLANNER.point_lane(sql, catalog)
    if lane is None:
        return None
    key = lane.key(params)
    if key is None:
        return None
    query = TimestampedKeyQuery if lane.timestamped else KeyQuery
    residual = (lane.program, lane.residual_values(params)) if lane.program is not None else None
    return lane.store, query, key, frozenset({lane.partition(key)}), lane.bound, lane.columns, residual


def _plan_answer(planned: Any) -> tuple[Any, ...] | None:
    """The same of a Plan, when it is one KeyQuery whose rows are the answer or a residual program's input (else
    None: DuckDB answers, or no store is asked)."""
    if planned is None or len(planned.scans) != 1 or len(planned.scans[0].requests) != 1:
        return None
    if planned.fast_path is None and planned.residual_program is None:
        return None
    r = planned.scans[0].requests[0]
    residual = None if planned.fast_path is not None else (planned.residual_program, planned.residual_values)
    return (r.store_name, type(r.query), r.query.key, r.partitions, r.position_bound, planned.fast_path, residual)


def test_point_lane_is_plan_s_request_or_none() -> None:
    lane = 0
    for sql, params in CASES:
        PLANNER.clear()
        assert PLANNER.point_lane(sql, CATALOG) is None  # not planned yet: never known to be a point lookup
        try:
            planned = PLANNER.plan(sql, CATALOG, params=params)
        except PlanningError:
            planned = None
        got = _lane_answer(sql, params)
        if got is None:
            if _plan_answer(planned) is not None:
                assert _point_ref(_template(sql).scans[0]) is None, (sql, params)  # e.g. IN (?, ?)
            continue
        lane += 1
        assert got == _plan_answer(planned), (sql, params)
        assert type(got[2]) is type(planned.scans[0].requests[0].query.key), (sql, params)  # 1, never True or 1.0
    # the lane really ran: 177 of these cases are plain point lookups of a key a row can have, 45 more are one
    # with a residual program (count(*)); a key no row can have, such as 2**63 in a BIGINT column, plan answers
    # with no request at all: the lane leaves those to it
    assert lane >= 215


def test_point_lane_declines_what_plan_must_decide() -> None:
    sql = "SELECT * FROM mystore WHERE k = ?"
    PLANNER.plan(sql, CATALOG, params=[1])
    assert _lane_answer(sql, [1]) is not None
    assert _lane_answer(sql + " ;  ", [2]) is not None  # the plan cache's own key
    assert _lane_answer(sql, (3,)) is not None  # a DB-API cursor's tuple
    assert _lane_answer(sql, [1, 2]) is None  # plan says how many parameters it takes
    assert _lane_answer(sql, [[1]]) is None  # plan says a list is no key
    assert _lane_answer(sql, [None]) is None  # plan says NULL matches no key
    assert _lane_answer(sql, ["\ud800"]) is None  # plan says a lone surrogate is no text
    assert _lane_answer(sql, 5) is None
    assert _lane_answer(sql, {"a": 1}) is None
    assert _lane_answer(sql, [1], {**CATALOG, "mystore": CATALOG["int_store"]}) is None  # the store changed
    bounded = "SELECT * FROM mystore WHERE k = ? AS OF POSITION '{\"events\": {\"0\": 3}}'"
    planned = PLANNER.plan(bounded, CATALOG, params=[1])
    got = _lane_answer(bounded, [1])
    assert got == _plan_answer(planned)  # the bound in the text, as plan's
    assert not got[4].is_unbounded()
    for other in ("SELECT count(*) FROM mystore WHERE k = ? AND v LIKE 'a%'",  # DuckDB's residual
                  "EXPLAIN SELECT * FROM mystore WHERE k = ?"):
        PLANNER.plan(other, CATALOG, params=[1])
        assert PLANNER.point_lane(other, CATALOG) is None


def test_a_literal_key_is_bound_once() -> None:
    sql = "SELECT * FROM int_store WHERE k = 7"
    planned = PLANNER.plan(sql, CATALOG)
    lane = PLANNER.point_lane(sql, CATALOG)
    assert lane is not None and lane.constant == 7
    assert _lane_answer(sql, None) == _plan_answer(planned)
    assert _lane_answer(sql, [1]) is None  # plan says the statement takes no parameters
    PLANNER.plan("SELECT * FROM mystore WHERE k = 9223372036854775808", CATALOG)
    assert PLANNER.point_lane("SELECT * FROM mystore WHERE k = 9223372036854775808", CATALOG) is None  # no such key


@pytest.mark.parametrize("store", ["mystore", "int_store", "str_store"])
def test_the_lane_s_shortcut_for_a_lone_parameter_is_plan_s_binding(store: str) -> None:
    """A lone ``?`` of the key's own Python type skips coerce_bound: the same key, the same partition, or None."""
    sql = f"SELECT * FROM {store} WHERE {_key(store)} = ?"
    PLANNER.plan(sql, CATALOG, params=[1] if CATALOG[store].key.type.value != "VARCHAR" else ["a"])
    lane = PLANNER.point_lane(sql, CATALOG)
    assert lane is not None
    values: list[Any] = [0, 1, -1, 2**31 - 1, 2**31, -(2**31), -(2**31) - 1, 2**63 - 1, 2**63, -(2**63), True,
                         "a", "", "é", "\ud800", " 5 ", 3.0]
    for v in values:
        try:
            planned = PLANNER.plan(sql, CATALOG, params=[v])
        except PlanningError:
            planned = None
        assert _lane_answer(sql, [v]) == _plan_answer(planned), (store, v)
