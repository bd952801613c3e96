"""Nested value columns (issue 16 item 2): type text in three spellings, lossless storage, clear errors."""

from __future__ import annotations

from datetime import datetime, timezone
from pathlib import Path

import pyarrow as pa
import pytest

from stores.catalog.nested import NestedType, decode_nested
from stores.catalog.schema import Column, SqlType, StoreKind, StoreSpec, parse_type
from stores.engine import open_partition
from stores.engine.batch import encode
from stores.engine.change import Change
from stores.engine.codec import BatchError
from stores.iqv2.position import Position, PositionBound
from stores.iqv2.query import KeyQuery, RangeQuery


@pytest.mark.parametrize("text", [
    "struct<a:bigint,tags:array<string>,m:map<string,double>,t:timestamp>",        # Spark's simpleString
    "STRUCT<a BIGINT, tags ARRAY<STRING>, m MAP<STRING, DOUBLE>, t TIMESTAMP>",    # ksqlDB
    "STRUCT(a BIGINT, tags VARCHAR[], m MAP(VARCHAR, DOUBLE), t TIMESTAMP WITH TIME ZONE)",  # DuckDB
])
def test_three_spellings_one_type(text: str) -> None:
    t = parse_type(text)
    assert isinstance(t, NestedType)
    assert t.value == "STRUCT(a BIGINT, tags VARCHAR[], m MAP(VARCHAR, DOUBLE), t TIMESTAMP)"
    assert parse_type(t.value) == t


@pytest.mark.parametrize("text, message", [
    ("array<", "expected"), ("map<array<int>,int>", "MAP key must be a scalar"), ("struct<a:int,a:int>", "duplicate"),
    ("array<binary>", "BLOB values inside"), ("array<uuid>", "unsupported column type"),
])
def test_bad_type_text_is_refused_with_the_reason(text: str, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        parse_type(text)


SPEC = StoreSpec("docs", StoreKind.KEY_VALUE, Column("id", SqlType.BIGINT),
                 (Column("tags", "ARRAY<VARCHAR>"), Column("pos", "STRUCT<x DOUBLE, at TIMESTAMP, d DATE>"),
                  Column("counts", "MAP<VARCHAR, BIGINT>"), Column("grid", "ARRAY<ARRAY<BIGINT>>"),
                  Column("by_id", "MAP<BIGINT, STRUCT<ok BOOLEAN>>")))
VALUES = {
    1: (["a", "b", None, ""], {"x": 1.5, "at": 1_700_000_000_123, "d": 19000}, {"k": 1, "\x00": -2},
        [[1, 2], [], None], {7: {"ok": True}, -1: {"ok": None}}),
    2: ([], None, {}, [], {}),
    3: (None, {"x": float("inf"), "at": None, "d": -1}, None, None, None),
}


def test_nested_values_round_trip_from_python_and_from_arrow(tmp_path: Path) -> None:
    assert StoreSpec.from_json(SPEC.to_json()) == SPEC
    store = open_partition(SPEC, 0, tmp_path / "p.db")
    try:
        store.apply_batch(0, [Change(k, v) for k, v in VALUES.items()], Position.from_map({"t": {0: 1}}))
        unbounded = PositionBound.unbounded()
        for k, v in VALUES.items():
            assert tuple(store.query(KeyQuery.with_key(k), unbounded).result) == v
        # the same values as Spark hands them over: Arrow nested arrays, times as timestamps
        when = datetime.fromtimestamp(1_700_000_000.123, tz=timezone.utc)
        table = pa.table({
            "k": pa.array([10], pa.int64()),
            "v0": pa.array([["a", "b", None, ""]]),
            "v1": pa.array([{"x": 1.5, "at": when, "d": 19000}],
                           pa.struct([("x", pa.float64()), ("at", pa.timestamp("us", tz="UTC")), ("d", pa.int32())])),
            "v2": pa.array([[("k", 1), ("\x00", -2)]], pa.map_(pa.string(), pa.int64())),
            "v3": pa.array([[[1, 2], [], None]]),
            "v4": pa.array([[(7, {"ok": True}), (-1, {"ok": None})]],
                           pa.map_(pa.int64(), pa.struct([("ok", pa.bool_())]))),
        })
        store.apply_rows(1, encode(SPEC, table, "b1"), Position.from_map({"t": {0: 2}}), None)
        assert tuple(store.query(KeyQuery.with_key(10), unbounded).result) == VALUES[1]
        assert [kv.key for kv in store.query(RangeQuery.with_no_bounds(), unbounded).result] == [1, 2, 3, 10]
    finally:
        store.close()


def test_values_that_do_not_fit_are_named_and_nothing_is_written(tmp_path: Path) -> None:
    store = open_partition(SPEC, 0, tmp_path / "p.db")
    try:
        bad = [
            (("not a list", None, None, None, None), "value column 'tags'.*is not an array"),
            ((None, {"x": 1.0, "nope": 2}, None, None, None), "value column 'pos'.*not in STRUCT"),
            ((None, None, {"k": "many"}, None, None), "value column 'counts'"),
            ((None, None, None, None, {None: {"ok": True}}), "value column 'by_id'.*MAP key is null"),
        ]
        for value, message in bad:
            with pytest.raises(BatchError, match=message):
                store.apply_batch(0, [Change(1, VALUES[1]), Change(2, value)], Position.from_map({"t": {0: 1}}))
        table = pa.table({"k": pa.array([1], pa.int64()), **{f"v{i}": pa.array([None], pa.string()) for i in range(5)},
                          "v0": pa.array([5], pa.int64())})
        with pytest.raises(BatchError, match="value column 'tags': an Arrow int64 column cannot hold"):
            encode(SPEC, table, "b")
        assert store.count() == 0
    finally:
        store.close()


def test_json_text_is_the_stored_form_with_canonical_scalars() -> None:
    t = parse_type("MAP<DATE, TIMESTAMP>")
    assert decode_nested(t, '[[1, 2000]]') == {1: 2000}
    assert decode_nested(t, None) is None
