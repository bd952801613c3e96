"""The engine's point lane (``Gateway._point_lookup``) against ``_select``'s general way, on real stores.

A plain point lookup the planner has seen is answered without building a
Plan (``planner.bind_point``); everything it returns (columns, rows, the
position, each partition's outcome) must be what the general way returns,
and whatever it cannot answer as the general way would (a failed partition,
too many rows, a wrong parameter) it must leave to the general way. A
session with any setting takes the general way: that is the oracle here.
"""

from __future__ import annotations

from typing import Any

import pytest

import planner
from gateway import errors as ge
from gateway.engine import Gateway
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
        ("SELECT * FROM accounts WHERE id = ?", [2**70]),  # no BIGINT is that: no request at all
        ("SELECT * FROM latest WHERE customer = ?", [latest]),  # a timestamped store
    ]


def test_point_lookups_answer_as_the_general_way(gw: Gateway, shop: Shop) -> None:
    catalog = gw.catalog()
    for sql, params in _statements(shop):
        planner.clear_cache()
        assert gw._point_lookup(sql, params, None, catalog, None) is None  # not planned yet: the general way plans it
        general = gw.sql(sql, params, session=GENERAL)
        assert gw._point_lookup(sql, params, None, catalog, None) is not None, sql  # now the lane answers it
        _same(gw.sql(sql, params), general)
        _same(gw.sql(sql, params, stream=True), general)


def test_what_the_lane_leaves_to_the_general_way_fails_or_answers_the_same(gw: Gateway, shop: Shop) -> None:
    catalog = gw.catalog()
    c = sorted(shop.revenue)[0]
    sql = "SELECT revenue FROM revenue WHERE customer = ?"
    gw.sql(sql, [c])
    for params in ([c, c], [[c]], None):  # wrong parameters: the general way names the problem
        assert gw._point_lookup(sql, params, None, catalog, None) is None
        with pytest.raises(ge.GatewayError) as lane_err:
            gw.sql(sql, params)
        with pytest.raises(ge.GatewayError) as general_err:
            gw.sql(sql, params, session=GENERAL)
        assert (type(lane_err.value), str(lane_err.value)) == (type(general_err.value), str(general_err.value))
    assert gw._point_lookup(sql, [c], None, catalog, 0) is None  # one row over max_rows=0: the general way refuses it
    with pytest.raises(ge.GatewayError, match="max_rows|rows"):
        gw.sql(sql, [c], max_rows=0)
    _same(gw.sql(sql, ["nobody"], max_rows=0), gw.sql(sql, ["nobody"], max_rows=0, session=GENERAL))
    for other in ("SELECT count(*) FROM revenue WHERE customer = ?",  # DuckDB (or the residual evaluator)
                  "SELECT * FROM per_min WHERE customer = ?",  # a window store
                  "SELECT * FROM revenue WHERE customer IN (?, ?)"):
        params = [c] * other.count("?")
        gw.sql(other, params)
        assert gw._point_lookup(other, params, None, catalog, None) is None, other


def test_position_bounds_in_the_text_and_the_request(gw: Gateway, shop: Shop) -> None:
    catalog = gw.catalog()
    c = sorted(shop.revenue)[2]
    reached = shop.position.to_json()
    ahead = Position.from_map({t: {p: o + 10 for p, o in parts.items()}
                               for t, parts in shop.position.to_map().items()}).to_json()
    bounded = f"SELECT revenue FROM revenue WHERE customer = ? AS OF POSITION '{reached}'"
    plain = "SELECT revenue FROM revenue WHERE customer = ?"
    for sql, position in ((bounded, None), (plain, reached), (plain, shop.position), (bounded, reached)):
        gw.sql(sql, [c], position=position, session=GENERAL)
        assert gw._point_lookup(sql, [c], position, catalog, None) is not None, (sql, position)
        _same(gw.sql(sql, [c], position=position), gw.sql(sql, [c], position=position, session=GENERAL))
    # behind the bound: the general way answers (NOT_UP_TO_BOUND, an error unless partial), as it always did
    assert gw._point_lookup(plain, [c], ahead, catalog, None) is None
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
    catalog = g.catalog()
    sql = "SELECT revenue, orders FROM revenue WHERE customer = ?"
    here = next(c for c in sorted(shop.revenue) if partition_for_key(c, 4, SqlType.VARCHAR) == 0)
    away = next(c for c in sorted(shop.revenue) if partition_for_key(c, 4, SqlType.VARCHAR) == 2)
    g.sql(sql, [here])
    assert g._point_lookup(sql, [here], None, catalog, None) is not None
    assert g._point_lookup(sql, [away], None, catalog, None) is None
    with pytest.raises(ge.PartitionFailureError) as info:
        g.sql(sql, [away])
    assert [(p["partition"], p["failure_reason"]) for p in info.value.partitions] == [(2, "NOT_PRESENT")]
    out = g.sql(sql, [away], partial=True)
    assert out.rows() == [] and [(p.partition, p.failure_reason) for p in out.partitions] == [(2, "NOT_PRESENT")]
