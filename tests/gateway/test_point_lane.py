"""The engine's point lane (``Gateway.point``) against ``_select``'s general way, on real stores.

A plain point lookup the planner has seen is answered without building a
Plan (``planner.point_lane``, ``StreamsApp.point_read``); everything it returns (columns, rows, the
position, each partition's outcome) must be what the general way returns,
and whatever it cannot answer as the general way would (a failed partition,
too many rows, a wrong parameter) it must leave to the general way. A
session with any setting takes the general way: that is the oracle here.
"""

from __future__ import annotations

import re
from typing import Any

import pytest

from gateway.engine import errors as ge
from gateway.engine.gateway import Gateway
from stores.catalog.partitioner import partition_for_key
from stores.catalog.schema import SqlType
from stores.iqv2.position import Position
from tests.gateway.gwfixtures import Shop

GENERAL = {"statement_timeout_ms": 60_000}  # a setting that changes nothing here but the way taken


def _same(lane: Any, general: Any) -> None:
    assert lane.statement is general.statement
    assert lane.columns == general.columns
    assert lane.rows() == general.rows()
    assert lane.position == general.position
    assert lane.partitions == general.partitions


def _statements(shop: Shop) -> list[tuple[str, Any]]:
    c = sorted(shop.revenue)[3]
    a = sorted(shop.accounts)[1]
    latest = sorted(shop.latest)[0]
    return [
        ("SELECT revenue, orders FROM revenue WHERE customer = ?", [c]),
        ("SELECT * FROM revenue WHERE customer = ?", [c]),
        ("SELECT * FROM revenue WHERE customer = ?", ["nobody"]),  # no row
        ("SELECT orders, customer FROM revenue WHERE customer = :c", {"c": c}),
        (f"SELECT * FROM revenue WHERE customer = '{c}'", None),
        ("SELECT * FROM accounts WHERE id = ?", [a]),  # BIGINT key; TIMESTAMP and BOOLEAN values
        ("SELECT opened, name FROM accounts WHERE id = ?", [str(a)]),  # a string the key type takes
        ("SELECT * FROM latest WHERE customer = ?", [latest]),  # a timestamped store
        ("SELECT * FROM accounts WHERE id = ?", [a, 0]),  # no lane: the general way names the problem
        ("SELECT * FROM accounts WHERE id = ?", [2**70]),  # no lane: no BIGINT is that, plan sends no request
        ("SELECT * FROM revenue WHERE customer = 7", None),  # no lane: DuckDB refuses the comparison
    ]


def test_point_lookups_answer_as_the_general_way(gw: Gateway, shop: Shop) -> None:
    lanes = 0
    for sql, params in _statements(shop):
        gw.planner.clear()
        assert gw.point(sql, params) is None  # not planned yet: the general way plans it
        try:
            general: Any = gw.sql(sql, params, session=GENERAL)
        except ge.GatewayError as exc:
            general = exc
        point = gw.point(sql, params)
        if isinstance(general, ge.GatewayError):
            assert point is None, sql
            with pytest.raises(type(general), match=re.escape(str(general))):
                gw.sql(sql, params)
            continue
        if point is None:  # only what plan answers without asking a store (a key no row can have)
            assert general.rows() == [] and general.partitions == [], sql
        else:
            lanes += 1
            assert point.rows() == general.rows() and point.position == general.position
            assert point.route == "point lane" and general.route != "point lane"
        _same(gw.sql(sql, params), general)
        _same(gw.sql(sql, params, stream=True), general)
    assert lanes == 8


def test_a_lookup_with_a_residual_the_gateway_evaluates_answers_as_duckdb_does(gw: Gateway, shop: Shop) -> None:
    """``SELECT count(*) … WHERE k = ? AND v > x`` and the like: the lane evaluates the residual program over the
    looked-up row once DuckDB's first answer taught its columns; the answer is DuckDB's, for rows present or not."""
    import duckdb

    con = duckdb.connect()
    con.execute("CREATE TABLE revenue (customer VARCHAR, revenue DOUBLE, orders BIGINT)")
    con.executemany("INSERT INTO revenue VALUES (?, ?, ?)", [(c, r, n) for c, (r, n) in shop.revenue.items()])
    con.execute("CREATE TABLE latest (customer VARCHAR, amount DOUBLE)")
    con.executemany("INSERT INTO latest VALUES (?, ?)", [(c, a) for c, (a, _ts) in shop.latest.items()])
    keys = [*sorted(shop.revenue)[:6], "nobody"]
    statements = [
        "SELECT count(*) FROM revenue WHERE customer = ? AND revenue >= 0",
        "SELECT count(*) FROM revenue WHERE customer = ? AND orders > 3",
        "SELECT sum(orders), max(revenue) FROM revenue WHERE customer = ?",
        "SELECT orders * 2 AS twice, revenue / orders AS mean FROM revenue WHERE customer = ? AND orders > 1",
        "SELECT avg(amount) FROM latest WHERE customer = ?",  # a timestamped store
    ]
    lanes = 0
    for sql in statements:
        gw.planner.clear()
        for key in keys:
            duck = con.execute(sql, [key]).fetchall()
            first = gw.sql(sql, [key])  # DuckDB (or the evaluator, once it learned) answers
            point = gw.point(sql, [key])
            if point is not None:
                lanes += 1
                assert [tuple(r) for r in point.rows()] == duck, (sql, key)
                assert list(point.columns) == first.columns, sql
                _same(point, first)
            assert first.rows() == duck, (sql, key)
            _same(gw.sql(sql, [key]), gw.sql(sql, [key], session=GENERAL))
    assert lanes >= len(statements) * (len(keys) - 1)  # all but each statement's first call


def test_what_the_lane_leaves_to_the_general_way_fails_or_answers_the_same(gw: Gateway, shop: Shop) -> None:
    c = sorted(shop.revenue)[0]
    sql = "SELECT revenue FROM revenue WHERE customer = ?"
    gw.sql(sql, [c])
    for params in ([c, c], [[c]], None):  # wrong parameters: the general way names the problem
        assert gw.point(sql, params) is None
        with pytest.raises(ge.GatewayError) as lane_err:
            gw.sql(sql, params)
        with pytest.raises(ge.GatewayError) as general_err:
            gw.sql(sql, params, session=GENERAL)
        assert (type(lane_err.value), str(lane_err.value)) == (type(general_err.value), str(general_err.value))
    assert gw.point(sql, [c], max_rows=0) is None  # one row over max_rows=0: the general way refuses it
    with pytest.raises(ge.GatewayError, match="max_rows|rows"):
        gw.sql(sql, [c], max_rows=0)
    _same(gw.sql(sql, ["nobody"], max_rows=0), gw.sql(sql, ["nobody"], max_rows=0, session=GENERAL))
    for other in ("SELECT count(*) FROM revenue WHERE customer = ? AND customer LIKE 'c%'",  # DuckDB's alone
                  "SELECT * FROM per_min WHERE customer = ?",  # a window store
                  "SELECT * FROM revenue WHERE customer IN (?, ?)"):
        params = [c] * other.count("?")
        gw.sql(other, params)
        assert gw.point(other, params) is None, other


def test_position_bounds_in_the_text_and_the_request(gw: Gateway, shop: Shop) -> None:
    c = sorted(shop.revenue)[2]
    reached = shop.position.to_json()
    ahead = Position.from_map({t: {p: o + 10 for p, o in parts.items()}
                               for t, parts in shop.position.to_map().items()}).to_json()
    bounded = f"SELECT revenue FROM revenue WHERE customer = ? AS OF POSITION '{reached}'"
    plain = "SELECT revenue FROM revenue WHERE customer = ?"
    for sql, position in ((bounded, None), (plain, reached), (plain, shop.position), (bounded, reached)):
        gw.sql(sql, [c], position=position, session=GENERAL)
        assert gw.point(sql, [c], position) is not None, (sql, position)
        _same(gw.sql(sql, [c], position=position), gw.sql(sql, [c], position=position, session=GENERAL))
    # behind the bound: the general way answers (NOT_UP_TO_BOUND, an error unless partial), as it always did
    assert gw.point(plain, [c], ahead) is None
    for position, error in ((ahead, ge.PartitionFailureError), ('{"no_such_topic": {"0": 1}}', ge.GatewayError),
                            ("{not json", ge.BadRequest)):
        with pytest.raises(error) as lane_err:
            gw.sql(plain, [c], position=position)
        with pytest.raises(error) as general_err:
            gw.sql(plain, [c], position=position, session=GENERAL)
        assert (type(lane_err.value), str(lane_err.value)) == (type(general_err.value), str(general_err.value))
    _same(gw.sql(plain, [c], position=ahead, partial=True), gw.sql(plain, [c], position=ahead, partial=True,
                                                                   session=GENERAL))


def test_a_failed_partition_goes_the_general_way(half_gw: Gateway, shop: Shop) -> None:
    g = half_gw
    sql = "SELECT revenue, orders FROM revenue WHERE customer = ?"
    here = next(c for c in sorted(shop.revenue) if partition_for_key(c, 4, SqlType.VARCHAR) == 0)
    away = next(c for c in sorted(shop.revenue) if partition_for_key(c, 4, SqlType.VARCHAR) == 2)
    g.sql(sql, [here])
    assert g.point(sql, [here]) is not None
    assert g.point(sql, [away]) is None
    with pytest.raises(ge.PartitionFailureError) as info:
        g.sql(sql, [away])
    assert [(p["partition"], p["failure_reason"]) for p in info.value.partitions] == [(2, "NOT_PRESENT")]
    out = g.sql(sql, [away], partial=True)
    assert out.rows() == [] and [(p.partition, p.failure_reason) for p in out.partitions] == [(2, "NOT_PRESENT")]
