"""The point-lookup binder (``requests._bind_point``) against the general one (``requests.bind_general``).

``bind_scan`` takes the short path for ``WHERE k = ?`` on a key-value store;
every statement and value here must bind to the same scan (requests,
partitions, bound, flags, fast-path columns) or fail with the same error,
whichever path runs. ``planning.bind_point`` (the gateway's point lane) must
give ``plan``'s scan, fast-path columns and bound, or None where ``plan``
would do anything else (an error, DuckDB).
"""

from __future__ import annotations

import itertools
from typing import Any

import pytest

from planner.errors import PlanningError
from planner.planning import _template, bind_point, clear_cache, plan
from planner.requests import _point_ref, bind_general, bind_scan
from planner.settings import resolve_session
from stores.iqv2.position import Position, PositionBound
from tests.planner.planner_catalog import CATALOG

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
    t = _template(sql, CATALOG).scans[0]
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
            t = _template(sql, CATALOG).scans[0]
        except PlanningError:
            continue  # e.g. a literal the analyser refuses: no binding to compare
        points += _point_ref(t) is not None
        fast, general = _bind(bind_scan, sql, params, session, bound), _bind(bind_general, sql, params, session, bound)
        assert fast == general, (sql, params)
    assert points >= 400  # the short path really ran (most shapes above are point lookups)


def test_only_plain_point_lookups_take_the_short_path() -> None:
    def shape(sql: str) -> bool:
        return _point_ref(_template(sql, CATALOG).scans[0]) is not None

    assert shape("SELECT * FROM mystore WHERE k = ?")
    assert shape("SELECT * FROM revenue WHERE customer IN (?)")
    assert not shape("SELECT * FROM mystore WHERE k IN (?, ?)")
    assert not shape("SELECT * FROM mystore WHERE k = ? LIMIT 1")
    assert not shape("SELECT * FROM mystore WHERE k > ?")
    assert not shape("SELECT * FROM per_min WHERE key = ?")       # a window store
    assert not shape("SELECT * FROM last_order WHERE key = ?")    # a versioned store
    assert not shape("SELECT * FROM mystore WHERE k = ? AND _partition = 1")


def test_bind_point_is_plan_s_scan_or_none() -> None:
    lane = 0
    for sql, params in CASES:
        clear_cache()
        assert bind_point(sql, CATALOG, params) is None  # not planned yet: never known to be a point lookup
        try:
            planned = plan(sql, CATALOG, params=params)
        except PlanningError:
            planned = None
        got = bind_point(sql, CATALOG, params)
        if got is None:
            if planned is not None and planned.fast_path is not None and len(planned.scans) == 1:
                assert _point_ref(_template(sql, CATALOG).scans[0]) is None, (sql, params)  # e.g. IN (?, ?)
            continue
        lane += 1
        assert planned is not None and got == (planned.scans[0], planned.fast_path, planned.position_bound), (sql, params)
    assert lane >= 200  # the lane really ran (210 of these cases plan as plain point lookups)


def test_bind_point_declines_what_plan_must_decide() -> None:
    sql = "SELECT * FROM mystore WHERE k = ?"
    plan(sql, CATALOG, params=[1])
    assert bind_point(sql, CATALOG, [1]) is not None
    assert bind_point(sql + " ;  ", CATALOG, [2]) is not None  # the plan cache's own key
    assert bind_point(sql, CATALOG, [1, 2]) is None  # plan says how many parameters it takes
    assert bind_point(sql, CATALOG, [[1]]) is None  # plan says a list is no key
    assert bind_point(sql, CATALOG, 5) is None
    assert bind_point(sql, {**CATALOG, "mystore": CATALOG["int_store"]}, [1]) is None  # the store changed
    bounded = "SELECT * FROM mystore WHERE k = ? AS OF POSITION '{\"events\": {\"0\": 3}}'"
    planned = plan(bounded, CATALOG, params=[1])
    got = bind_point(bounded, CATALOG, [1])
    assert got == (planned.scans[0], planned.fast_path, planned.position_bound)  # the bound in the text, as plan's
    assert not got[2].is_unbounded() and got[0].requests[0].position_bound == got[2]
    for other in ("SELECT count(*) FROM mystore WHERE k = ?", "EXPLAIN SELECT * FROM mystore WHERE k = ?"):
        plan(other, CATALOG, params=[1])
        assert bind_point(other, CATALOG, [1]) is None
