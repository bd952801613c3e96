"""Planning over a composite key (issue 16 item 1): whole keys, key prefixes, later columns, LIMIT and ORDER BY."""

from __future__ import annotations

import pytest

import planner
from planner.errors import TableScanDisabledError, TypeMismatchError
from stores.catalog.partitioner import partition_for_key
from stores.catalog.schema import Column, SqlType, StoreKind, StoreSpec
from stores.catalog.tuple_keys import encode_tuple, prefix_range
from stores.iqv2.query import (
    KeyQuery,
    MultiKeyQuery,
    MultiVersionedRangeQuery,
    RangeQuery,
    VersionedKeyQuery,
    WindowKeyQuery,
    WindowRangeQuery,
)

PARTS = (Column("region", SqlType.VARCHAR), Column("product", SqlType.BIGINT), Column("day", SqlType.DATE))
KV = StoreSpec("kv", StoreKind.KEY_VALUE, key=PARTS, values=(Column("n", SqlType.BIGINT),), partitions=4)
WIN = StoreSpec("win", StoreKind.WINDOW, key=PARTS[:2], values=(Column("n", SqlType.BIGINT),), partitions=2,
                window_size_ms=1000)
SES = StoreSpec("ses", StoreKind.SESSION, key=PARTS[:2], values=(Column("n", SqlType.BIGINT),), partitions=2)
VER = StoreSpec("ver", StoreKind.VERSIONED, key=PARTS[:2], values=(Column("n", SqlType.BIGINT),), partitions=2)
CATALOG = {s.name: s for s in (KV, WIN, SES, VER)}


def _queries(sql: str, params=None, session=None):  # noqa: ANN001, ANN202
    p = planner.plan(sql, CATALOG, params=params, session=session)
    (scan,) = p.scans
    return scan, [(r.query, r.partitions) for r in scan.requests]


def _part(key: tuple, spec: StoreSpec = KV) -> frozenset[int]:
    return frozenset({partition_for_key(encode_tuple(spec.key_parts, key), spec.partitions, SqlType.BLOB)})


def test_every_key_column_equal_is_a_lookup_on_the_keys_partition() -> None:
    scan, reqs = _queries("SELECT n FROM kv WHERE region = 'eu' AND product = 7 AND day = DATE '1970-01-03'")
    assert reqs == [(KeyQuery.with_key(("eu", 7, 2)), _part(("eu", 7, 2)))]
    assert not scan.full_scan
    scan, reqs = _queries("SELECT n FROM kv WHERE day = ? AND region = ? AND product = ?", params=["1970-01-02", "x", 1])
    assert reqs == [(KeyQuery.with_key(("x", 1, 1)), _part(("x", 1, 1)))]


def test_in_lists_multiply_into_keys_grouped_by_partition() -> None:
    _scan, reqs = _queries("SELECT n FROM kv WHERE region IN ('a', 'b') AND product IN (1, 2, 3) AND day = DATE '1970-01-01'")
    keys = {k for q, ps in reqs for k in (q.keys if isinstance(q, MultiKeyQuery) else [q.key])}
    assert keys == {(r, p, 0) for r in "ab" for p in (1, 2, 3)}
    for q, ps in reqs:
        for k in (q.keys if isinstance(q, MultiKeyQuery) else [q.key]):
            assert ps == _part(k)


def test_a_null_among_a_key_columns_values_is_left_out_and_a_lone_null_is_refused() -> None:
    _scan, reqs = _queries("SELECT n FROM kv WHERE region IN ('a', NULL) AND product IN (1, NULL) AND day = DATE '1970-01-01'")
    assert reqs == [(KeyQuery.with_key(("a", 1, 0)), _part(("a", 1, 0)))]
    _scan, reqs = _queries("SELECT n FROM kv WHERE region = 'a' AND product IN (?, ?) AND day = DATE '1970-01-01'",
                           params=[None, 2])
    assert reqs == [(KeyQuery.with_key(("a", 2, 0)), _part(("a", 2, 0)))]
    with pytest.raises(TypeMismatchError, match="key column product .* with NULL"):
        planner.plan("SELECT n FROM kv WHERE region = 'eu' AND product IN (NULL)", CATALOG)


def test_a_key_prefix_is_one_range_and_a_bound_on_the_next_column_narrows_it() -> None:
    scan, reqs = _queries("SELECT n FROM kv WHERE region = 'eu'")
    lo, hi = prefix_range(PARTS, ("eu",))
    assert reqs == [(RangeQuery.with_range(lo, hi), frozenset(range(4)))] and not scan.full_scan
    _scan, reqs = _queries("SELECT n FROM kv WHERE region = 'eu' AND product > 3 AND product <= 9")
    lo, hi = prefix_range(PARTS, ("eu",), 4, 9)
    assert reqs == [(RangeQuery.with_range(lo, hi), frozenset(range(4)))]
    _scan, reqs = _queries("SELECT n FROM kv WHERE region IN ('a', 'b') AND product = 1")
    assert [q for q, _ in reqs] == [RangeQuery.with_range(*prefix_range(PARTS, (r, 1))) for r in "ab"]


def test_a_later_column_alone_is_a_scan_and_refused_when_scans_are_off() -> None:
    scan, reqs = _queries("SELECT n FROM kv WHERE product = 3")
    assert scan.full_scan and reqs == [(RangeQuery.with_no_bounds(), frozenset(range(4)))]
    with pytest.raises(TableScanDisabledError, match="region = … AND product = … AND day = …"):
        planner.plan("SELECT n FROM kv WHERE product = 3 AND day = DATE '1970-01-02'", CATALOG, session={"table_scans": False})
    planner.plan("SELECT n FROM kv WHERE region = 'x' AND day = DATE '1970-01-02'", CATALOG, session={"table_scans": False})


def test_limit_is_pushed_only_when_every_predicate_is_in_the_requests() -> None:
    scan, _ = _queries("SELECT * FROM kv WHERE region = 'eu' AND product >= 2 LIMIT 3")
    assert scan.limit == 3
    scan, _ = _queries("SELECT * FROM kv WHERE region = 'eu' AND day = DATE '1970-01-03' LIMIT 3")  # day skips product: residual
    assert scan.limit is None
    scan, _ = _queries("SELECT * FROM kv ORDER BY region DESC, product DESC LIMIT 2")
    assert scan.limit == 2 and scan.order is not None and scan.order.name == "DESCENDING"
    scan, _ = _queries("SELECT * FROM kv ORDER BY product LIMIT 2")
    assert scan.limit is None and scan.order is None


def test_type_errors_name_the_key_column() -> None:
    with pytest.raises(TypeMismatchError, match="key column product"):
        planner.plan("SELECT n FROM kv WHERE region = 'eu' AND product = 'seven'", CATALOG)
    _scan, reqs = _queries("SELECT n FROM kv WHERE region = 'eu' AND product = 1.5 AND day = DATE '1970-01-01'")
    assert reqs == []  # 1.5 is no BIGINT: nothing can match


def test_window_session_and_versioned_stores() -> None:
    _scan, reqs = _queries("SELECT * FROM win WHERE region = 'eu' AND product = 1 AND window_start >= TIMESTAMP '1970-01-01 00:00:05'")
    assert reqs == [(WindowKeyQuery.with_key_and_window_start_range(("eu", 1), 5000, reqs[0][0].time_to),
                     _part(("eu", 1), WIN))]
    scan, reqs = _queries("SELECT * FROM win WHERE region = 'eu'")  # no key range on window stores: a scan
    assert isinstance(reqs[0][0], WindowRangeQuery) and scan.full_scan
    _scan, reqs = _queries("SELECT * FROM ses WHERE region = 'eu' AND product = 1")
    assert reqs == [(WindowRangeQuery.with_key(("eu", 1)), _part(("eu", 1), SES))]
    with pytest.raises(planner.errors.UnsupportedSqlError, match="region = … AND product = …"):
        planner.plan("SELECT * FROM ses WHERE region = 'eu'", CATALOG)
    _scan, reqs = _queries("SELECT * FROM ver WHERE region = 'eu' AND product = 1")
    assert reqs == [(VersionedKeyQuery.with_key(("eu", 1)), _part(("eu", 1), VER))]
    _scan, reqs = _queries("SELECT * FROM ver FOR SYSTEM_TIME ALL WHERE region = 'eu'")
    lo, hi = prefix_range(VER.key_parts, ("eu",))
    assert isinstance(reqs[0][0], MultiVersionedRangeQuery) and (reqs[0][0].lower, reqs[0][0].upper) == (lo, hi)
