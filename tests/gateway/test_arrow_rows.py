"""Per-partition IQv2 results of every query type become the rows of the store relation (no planner involved)."""

from __future__ import annotations

from dataclasses import replace
from datetime import datetime, timezone

import pyarrow as pa
import pytest

from gateway.engine.arrow_rows import _data_rows, _Shaper, collect, position_json
from stores.app.streams import StreamsApp
from stores.catalog.schema import Column, SqlType
from stores.iqv2.position import Position, PositionBound
from stores.iqv2.query import (
    KeyQuery,
    MultiVersionedKeyQuery,
    RangeQuery,
    ResultOrder,
    TimestampedKeyQuery,
    TimestampedRangeQuery,
    VersionedKeyQuery,
    WindowKeyQuery,
    WindowRangeQuery,
)
from stores.iqv2.request import StateQueryRequest
from tests.gateway.gwfixtures import MINUTE, Shop


def _answers(app: StreamsApp, store: str, *queries, partitions=None):  # noqa: ANN001, ANN202
    out = []
    for q in queries:
        req = StateQueryRequest.in_store(store).with_query(q)
        if partitions is not None:
            req = req.with_partitions(partitions)
        out.append((req, app.query(req)))
    return out


def test_key_value_range_rows_match_what_was_written(shop_app: StreamsApp, shop: Shop) -> None:
    spec = shop_app.catalog()["revenue"]
    rows = collect(spec, _answers(shop_app, "revenue", RangeQuery.with_no_bounds()), None, None)
    got = {r[0]: (r[1], r[2]) for r in rows.rows}
    assert got == shop.revenue
    assert {r[3] for r in rows.rows} <= set(range(spec.partitions))
    assert all(Position.from_json(r[4]) == shop.position for r in rows.rows)
    table = rows.to_arrow(include_failures=False)
    assert table.schema.names == ["customer", "revenue", "orders", "_partition", "_position", "_failure_reason",
                                  "_failure_message"]
    assert table.num_rows == len(shop.revenue)


def test_ordered_merge_across_partitions_then_limit(shop_app: StreamsApp, shop: Shop) -> None:
    spec = shop_app.catalog()["revenue"]
    q = RangeQuery.with_no_bounds()
    asc = collect(spec, _answers(shop_app, "revenue", q), ResultOrder.ASCENDING, 5)
    desc = collect(spec, _answers(shop_app, "revenue", q), ResultOrder.DESCENDING, 5)
    keys = sorted(shop.revenue)
    assert [r[0] for r in asc.rows] == keys[:5]
    assert [r[0] for r in desc.rows] == keys[::-1][:5]


def test_point_lookups_of_every_kind(shop_app: StreamsApp, shop: Shop) -> None:
    cat = shop_app.catalog()
    c = sorted(shop.revenue)[3]
    kv = collect(cat["revenue"], _answers(shop_app, "revenue", KeyQuery.with_key(c), KeyQuery.with_key("nobody")),
                 None, None)
    assert [r[:3] for r in kv.rows] == [(c, *shop.revenue[c])]
    ts = collect(cat["latest"], _answers(shop_app, "latest", TimestampedKeyQuery.with_key(c)), None, None)
    assert [r[:3] for r in ts.rows] == [(c, *shop.latest[c])]
    vs = shop.versions[c]
    ver = collect(cat["last_order"], _answers(shop_app, "last_order", VersionedKeyQuery.with_key(c)), None, None)
    assert [r[:4] for r in ver.rows] == [(c, vs[-1][1], vs[-1][0], None)]


def test_timestamped_range_has_rowtime(shop_app: StreamsApp, shop: Shop) -> None:
    spec = shop_app.catalog()["latest"]
    rows = collect(spec, _answers(shop_app, "latest", TimestampedRangeQuery.with_no_bounds()), None, None)
    assert {r[0]: (r[1], r[2]) for r in rows.rows} == shop.latest
    t = rows.to_arrow(False)
    assert t.schema.field("rowtime").type == pa.timestamp("ms", tz="UTC")


def test_window_queries_fill_window_bounds(shop_app: StreamsApp, shop: Shop) -> None:
    spec = shop_app.catalog()["per_min"]
    lo = min(ws for _, ws in shop.per_min)
    hi = max(ws for _, ws in shop.per_min)
    rows = collect(spec, _answers(shop_app, "per_min", WindowRangeQuery.with_window_start_range(lo, hi)), None, None)
    assert {(r[0], r[1]): (r[3], r[4]) for r in rows.rows} == shop.per_min
    assert all(r[2] == r[1] + MINUTE for r in rows.rows)
    c = sorted(shop.revenue)[0]
    one = collect(spec, _answers(shop_app, "per_min", WindowKeyQuery.with_key_and_window_start_range(c, lo, hi)),
                  ResultOrder.ASCENDING, None)
    expected = sorted((ws, v) for (k, ws), v in shop.per_min.items() if k == c)
    assert [(r[1], (r[3], r[4])) for r in one.rows] == expected
    assert all(r[2] == r[1] + MINUTE for r in one.rows)


def test_multi_versioned_history_has_validity(shop_app: StreamsApp, shop: Shop) -> None:
    spec = shop_app.catalog()["last_order"]
    c = max(shop.versions, key=lambda k: len(shop.versions[k]))
    q = MultiVersionedKeyQuery.with_key(c).with_ascending_timestamps()
    rows = collect(spec, _answers(shop_app, "last_order", q), ResultOrder.ASCENDING, None)
    vs = shop.versions[c]
    expected = [(c, a, ts, vs[i + 1][0] if i + 1 < len(vs) else None) for i, (ts, a) in enumerate(vs)]
    assert [r[:4] for r in rows.rows] == expected


def test_failed_partitions_are_rows_only_when_asked(shop_app: StreamsApp, shop: Shop) -> None:
    spec = shop_app.catalog()["revenue"]
    ahead = Position.from_map({"orders": {0: shop.position.offset("orders", 0) + 100}})
    req = StateQueryRequest.in_store("revenue").with_query(RangeQuery.with_no_bounds()).with_position_bound(
        PositionBound.at(ahead))
    rows = collect(spec, [(req, shop_app.query(req))], None, None)
    assert rows.rows == [] and len(rows.failures) == spec.partitions
    hidden = rows.to_arrow(include_failures=False)
    shown = rows.to_arrow(include_failures=True)
    assert hidden.num_rows == 0
    assert shown.column("_failure_reason").to_pylist() == ["NOT_UP_TO_BOUND"] * spec.partitions
    assert shown.column("customer").null_count == spec.partitions
    assert sorted(shown.column("_partition").to_pylist()) == list(range(spec.partitions))


def test_project_gives_python_values_like_duckdb(shop_app: StreamsApp, shop: Shop) -> None:
    spec = shop_app.catalog()["accounts"]
    k = sorted(shop.accounts)[4]
    rows = collect(spec, _answers(shop_app, "accounts", KeyQuery.with_key(k)), None, None)
    cols, out = rows.project(["opened", "id", "active"])
    assert cols == [("opened", "TIMESTAMP WITH TIME ZONE"), ("id", "BIGINT"), ("active", "BOOLEAN")]
    ms = shop.accounts[k][3]
    assert out == [(datetime.fromtimestamp(ms / 1000, tz=timezone.utc), k, shop.accounts[k][2])]
    with pytest.raises(KeyError, match="nope"):
        rows.project(["nope"])


def test_a_result_that_does_not_fit_the_spec_is_refused(shop_app: StreamsApp) -> None:
    spec = shop_app.catalog()["revenue"]
    wider = replace(spec, values=spec.values + (Column("extra", SqlType.BIGINT),))
    with pytest.raises(ValueError, match="expected a tuple of 3 values"):
        collect(wider, _answers(shop_app, "revenue", RangeQuery.with_no_bounds()), None, None)


def _object_path_rows(spec, answers):  # noqa: ANN001, ANN202
    """The rows built through the IQv2 result objects (KeyValue, ValueAndTimestamp, ...), the reference path."""
    shaper = _Shaper(spec)
    out = []
    for req, answer in answers:
        for p, qr in answer.partition_results.items():
            tail = (p, position_json(qr.position))
            out += [r + tail for r in _data_rows(shaper, req, qr.result)]
    return out


def test_raw_rows_fast_path_equals_the_object_path(shop_app: StreamsApp, shop: Shop) -> None:
    """Range-style results go through raw rows; they must give exactly what the result objects give."""
    c = sorted(shop.revenue)[1]
    cases = [
        ("revenue", RangeQuery.with_no_bounds()),
        ("latest", TimestampedRangeQuery.with_no_bounds()),
        ("per_min", WindowRangeQuery.with_window_start_range(0, 2**62)),
        ("per_min", WindowKeyQuery.with_key_and_window_start_range(c, 0, 2**62)),
        ("last_order", MultiVersionedKeyQuery.with_key(c)),
    ]
    for store, q in cases:
        spec = shop_app.catalog()[store]
        fast = collect(spec, _answers(shop_app, store, q), None, None).rows
        slow = _object_path_rows(spec, _answers(shop_app, store, q))
        assert fast, (store, q)
        assert sorted(fast, key=repr) == sorted(slow, key=repr), (store, q)
