"""Composite keys (issue 16 item 1): the tuple encoding's order, its vectorized twin, specs, writes and reads."""

from __future__ import annotations

import random
from datetime import date
from pathlib import Path

import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from stores.catalog.partitioner import partition_for_key
from stores.catalog.schema import Column, KeyTypeError, SqlType, StoreKind, StoreSpec
from stores.catalog.tuple_keys import coerce_tuple, decode_tuple, encode_tuple, prefix_range
from stores.engine import open_partition
from stores.engine.batch import KEY, encode, split_by_partition
from stores.engine.change import Change
from stores.engine.codec import BatchError
from stores.iqv2.position import Position, PositionBound
from stores.iqv2.query import KeyQuery, RangeQuery, WindowKeyQuery, WindowRangeQuery

PARTS = (Column("s", SqlType.VARCHAR), Column("i", SqlType.BIGINT), Column("d", SqlType.DOUBLE),
         Column("b", SqlType.BOOLEAN), Column("day", SqlType.DATE), Column("ts", SqlType.TIMESTAMP),
         Column("raw", SqlType.BLOB))

_text = st.text(alphabet=st.sampled_from(["a", "b", "\x00", "\xff", "é", "z", "\U0001f600"]), max_size=4)
_ints = st.integers(min_value=-(2**63), max_value=2**63 - 1)
_doubles = st.floats(allow_nan=False, width=64)
_blobs = st.binary(max_size=4)
_tuples = st.tuples(_text, _ints, _doubles, st.booleans(), st.integers(-10**6, 10**6), _ints, _blobs)


def _canon(t: tuple) -> tuple:
    """Python's order for the tuple, with -0.0 and 0.0 one value (as SQL compares them)."""
    return tuple(v + 0.0 if isinstance(v, float) else v for v in t)


@settings(max_examples=300, deadline=None)
@given(st.lists(_tuples, min_size=2, max_size=12))
def test_byte_order_is_tuple_order_and_decoding_round_trips(keys: list[tuple]) -> None:
    enc = {k: encode_tuple(PARTS, k) for k in keys}
    for k, b in enc.items():
        assert decode_tuple(PARTS, b) == _canon(k)
    by_bytes = sorted(keys, key=lambda k: enc[k])
    by_tuple = sorted(keys, key=lambda k: (tuple(_py_order(v) for v in _canon(k))))
    assert [_canon(k) for k in by_bytes] == [_canon(k) for k in by_tuple]


def _py_order(v):  # strings compare by code point in SQL (and in Python), bytes bytewise: Python agrees
    return v


@settings(max_examples=150, deadline=None)
@given(st.lists(_tuples, min_size=1, max_size=20), st.integers(1, 6))
def test_prefix_range_holds_exactly_the_keys_with_the_prefix(keys: list[tuple], n: int) -> None:
    probe = keys[0][:n]
    lo, hi = prefix_range(PARTS, probe)
    inside = {k for k in keys if lo <= encode_tuple(PARTS, k) <= hi}
    assert inside == {k for k in keys if _canon(k[:n]) == _canon(probe)}


def test_prefix_range_with_a_bound_on_the_next_column() -> None:
    parts = PARTS[:2]
    keys = [(r, i) for r in ("a", "ab", "b") for i in range(-3, 4)]
    lo, hi = prefix_range(parts, ("a",), -1, 2)
    got = sorted(k for k in keys if lo <= encode_tuple(parts, k) <= hi)
    assert got == [("a", i) for i in range(-1, 3)]
    lo, hi = prefix_range(parts, (), "a", "ab")  # a range on the first column alone
    got = sorted(k for k in keys if lo <= encode_tuple(parts, k) <= hi)
    assert got == sorted(k for k in keys if "a" <= k[0] <= "ab")


@settings(max_examples=60, deadline=None)
@given(st.lists(_tuples, min_size=1, max_size=30))
def test_the_writers_vectorized_encoding_equals_the_python_one(keys: list[tuple]) -> None:
    spec = StoreSpec("t", StoreKind.KEY_VALUE, key=PARTS, values=(Column("v", SqlType.BIGINT),))
    struct = pa.array([dict(zip([c.name for c in PARTS], k)) for k in keys],
                      pa.struct([("s", pa.string()), ("i", pa.int64()), ("d", pa.float64()), ("b", pa.bool_()),
                                 ("day", pa.int64()), ("ts", pa.int64()), ("raw", pa.binary())]))
    rows = encode(spec, pa.table({KEY: struct, "v0": pa.array(range(len(keys)), pa.int64())}), "w")
    assert rows.column(KEY).to_pylist() == [encode_tuple(PARTS, _canon(k)) for k in keys]


def test_keys_land_where_the_planner_looks_for_them() -> None:
    spec = StoreSpec("t", StoreKind.KEY_VALUE, key=(Column("r", SqlType.VARCHAR), Column("p", SqlType.BIGINT)),
                     values=(), partitions=5)
    keys = [(f"r{i % 7}", i) for i in range(200)]
    rows = encode(spec, pa.table({KEY: pa.array([{"r": r, "p": p} for r, p in keys])}), "w")
    for part, share in enumerate(split_by_partition(spec, rows)):
        for raw in share.rows.column(KEY).to_pylist():
            assert partition_for_key(raw, 5, SqlType.BLOB) == part
            assert partition_for_key(encode_tuple(spec.key_parts, decode_tuple(spec.key_parts, raw)), 5,
                                     SqlType.BLOB) == part


def test_spec_round_trips_and_refuses_bad_keys() -> None:
    spec = StoreSpec("sales", StoreKind.WINDOW, key=[Column("region", "STRING"), Column("day", "DATE")],
                     values=(Column("n", "BIGINT"),), window_size_ms=1000)
    assert [c.name for c in spec.columns()] == ["region", "day", "window_start", "window_end", "n"]
    assert spec.key.type is SqlType.BLOB and spec.composite
    assert StoreSpec.from_json(spec.to_json()) == spec
    one = StoreSpec("one", StoreKind.KEY_VALUE, key=(Column("k", "BIGINT"),), values=())
    assert not one.composite and one.key == Column("k", SqlType.BIGINT)
    with pytest.raises(ValueError, match="duplicate column names"):
        StoreSpec("x", StoreKind.KEY_VALUE, key=(Column("a", "BIGINT"), Column("a", "BIGINT")), values=())
    with pytest.raises(ValueError, match="a key column is a scalar"):
        StoreSpec("x", StoreKind.KEY_VALUE, key=(Column("a", "BIGINT"), Column("b", "ARRAY<BIGINT>")), values=())
    with pytest.raises(KeyTypeError, match="has 2 columns"):
        coerce_tuple(spec.key_parts, ("eu",))
    with pytest.raises(KeyTypeError, match="key column 'day'"):
        coerce_tuple(spec.key_parts, ("eu", "not a date"))
    with pytest.raises(KeyTypeError, match="unknown key column"):
        coerce_tuple(spec.key_parts, {"region": "eu", "nope": 1})
    assert coerce_tuple(spec.key_parts, {"region": "eu", "day": "2024-01-02"}) == ("eu", (date(2024, 1, 2) - date(1970, 1, 1)).days)


SALES = StoreSpec("sales", StoreKind.TIMESTAMPED_KEY_VALUE,
                  key=(Column("region", SqlType.VARCHAR), Column("product", SqlType.BIGINT)),
                  values=(Column("n", SqlType.BIGINT),), partitions=1)


def test_store_answers_tuples_mappings_and_prefix_ranges(tmp_path: Path) -> None:
    store = open_partition(SALES, 0, tmp_path / "p.db")
    try:
        rnd = random.Random(3)
        data = {(rnd.choice(["eu", "us", "e", "eu\x00"]), rnd.randrange(-50, 50)): rnd.randrange(100) for _ in range(80)}
        store.apply_batch(0, [Change(k, (v,), timestamp=1) for k, v in data.items()], Position.from_map({"t": {0: 1}}))
        unbounded = PositionBound.unbounded()
        for k, v in data.items():
            assert store.query(KeyQuery.with_key(k), unbounded).result == (v,)
            assert store.query(KeyQuery.with_key(list(k)), unbounded).result == (v,)
        assert store.query(KeyQuery.with_key({"region": "eu", "product": 1000}), unbounded).result is None
        lo, hi = prefix_range(SALES.key_parts, ("eu",))
        got = [(kv.key, kv.value.n) for kv in store.query(RangeQuery.with_range(lo, hi), unbounded).result]
        assert got == sorted((k, v) for k, v in data.items() if k[0] == "eu")
        everything = [kv.key for kv in store.query(RangeQuery.with_no_bounds().with_descending_keys(), unbounded).result]
        assert everything == sorted(data, reverse=True)
        with pytest.raises(KeyTypeError, match="has 2 columns"):
            store.query(KeyQuery.with_key(("eu",)), unbounded)
        with pytest.raises(KeyTypeError, match="is a tuple"):
            store.query(KeyQuery.with_key("eu"), unbounded)
    finally:
        store.close()


def test_bad_composite_keys_in_a_batch_are_named_and_nothing_is_written(tmp_path: Path) -> None:
    store = open_partition(SALES, 0, tmp_path / "p.db")
    try:
        good = {"region": "eu", "product": 1}
        cases = [
            (pa.array([good, {"region": None, "product": 2}]), "change #1.*key column 'region'.*should not be null"),
            (pa.array([good, None], pa.struct([("region", pa.string()), ("product", pa.int64())])),
             "change #1.*the key should not be null"),
            (pa.array([{"region": "eu"}]), "struct of 2 fields"),
            (pa.array([{"region": "eu", "product": 1.5}]), "key column 'product'"),
        ]
        for keys, message in cases:
            table = pa.table({KEY: keys, "v0": pa.array([1] * len(keys), pa.int64()),
                              "ts": pa.array([1] * len(keys), pa.int64())})
            with pytest.raises(BatchError, match=message):
                store.apply_rows(1, encode(SALES, table, "store 'sales' batch 1"), Position.from_map({"t": {0: 1}}), 1)
        with pytest.raises(BatchError, match="key column 'region'"):
            store.apply_batch(2, [Change((1, 1), (1,), timestamp=1)], Position.from_map({"t": {0: 1}}))
        assert store.count() == 0
    finally:
        store.close()


def test_window_and_session_stores_take_composite_keys(tmp_path: Path) -> None:
    for kind in (StoreKind.WINDOW, StoreKind.SESSION):
        spec = StoreSpec(f"w_{kind.value}", kind, key=(Column("a", SqlType.VARCHAR), Column("b", SqlType.BOOLEAN)),
                         values=(Column("n", SqlType.BIGINT),), window_size_ms=10 if kind is StoreKind.WINDOW else None)
        store = open_partition(spec, 0, tmp_path / f"{kind.value}.db")
        try:
            store.apply_batch(0, [Change(("x", True), (1,), window_start=0, window_end=10),
                                  Change(("x", False), (2,), window_start=10, window_end=20)],
                              Position.from_map({"t": {0: 1}}))
            unbounded = PositionBound.unbounded()
            if kind is StoreKind.WINDOW:
                res = store.query(WindowKeyQuery.with_key_and_window_start_range(("x", False), 0, 100), unbounded)
                assert [(ws, v.n) for ws, v in res.result] == [(10, 2)]
            else:
                res = store.query(WindowRangeQuery.with_key(("x", True)), unbounded)
                assert [(kv.key.key, kv.value.n) for kv in res.result] == [(("x", True), 1)]
        finally:
            store.close()
