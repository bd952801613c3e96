"""The columnar write path leaves exactly what the row-at-a-time path left, for every kind and key type.

Random batches (duplicate rows, deletes and tombstones, out-of-order
versions, replays) are written three ways: ``write_batch`` with Change
objects, ``write_table`` with an Arrow table in Spark's column types, and the
old row path (``row_path.py``). Tables, positions, last batch ids and stream
times must be equal partition by partition. Each example uses both staging
loaders (TEMP table and ADBC file) and, for the writer, both the serial and
the threaded partition writes.
"""

from __future__ import annotations

import datetime as dt
import tempfile
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from stores.catalog.decimals import DecimalType
from stores.catalog.partitioner import key_bytes, partition_for_key, partitions_for_serialized
from stores.catalog.schema import Column, SqlType, StoreKind, StoreSpec
from stores.engine import open_partition
from stores.engine.batch import DELETED, KEY, TS, WE, WS, value_name
from stores.engine.change import Change
from stores.engine.columns import serialized_keys
from stores.engine.writer import PartitionedWriter
from stores.iqv2.position import Position
from tests.stores.engine.row_path import RowPathStore, dump

DEC = DecimalType(20, 3)  # issue 16: DECIMAL keys, 16 order-preserving bytes
KEYS: dict[Any, Any] = {
    SqlType.BIGINT: st.one_of(st.integers(-5, 5), st.sampled_from([-(2**63), 2**63 - 1]), st.integers()).filter(
        lambda i: -(2**63) <= i < 2**63),
    SqlType.INTEGER: st.integers(-(2**31), 2**31 - 1),
    SqlType.DOUBLE: st.one_of(st.sampled_from([0.0, -0.0, 1.5, -1.5]),
                              st.floats(allow_nan=False, allow_infinity=True)),
    SqlType.VARCHAR: st.one_of(st.sampled_from(["", "a", "b", "é", "日本"]), st.text(max_size=40)),
    SqlType.BOOLEAN: st.booleans(),
    SqlType.TIMESTAMP: st.integers(-(2**40), 2**42),
    SqlType.DATE: st.integers(-100_000, 100_000),
    DEC: st.decimals(min_value=-(10**17) + 1, max_value=10**17 - 1, places=3, allow_nan=False, allow_infinity=False),
}
# how write_table receives each key type: the Arrow types Spark hands the sink
ARROW_KEY = {SqlType.BIGINT: pa.int64(), SqlType.INTEGER: pa.int32(), SqlType.DOUBLE: pa.float64(),
             SqlType.VARCHAR: pa.string(), SqlType.BOOLEAN: pa.bool_(), SqlType.TIMESTAMP: pa.timestamp("ms"),
             SqlType.DATE: pa.date32(), DEC: pa.decimal128(20, 3)}
VALUES = (Column("n", SqlType.BIGINT), Column("s", SqlType.VARCHAR), Column("x", SqlType.DOUBLE),
          Column("b", SqlType.BOOLEAN))
VALUE = st.tuples(st.one_of(st.none(), st.integers(-(2**63), 2**63 - 1)), st.one_of(st.none(), st.text(max_size=5)),
                  st.one_of(st.none(), st.floats(allow_nan=False)), st.one_of(st.none(), st.booleans()))
TIMES = st.integers(0, 12).map(lambda i: 1_700_000_000_000 + 1000 * i)
SIZE = 60_000


def _change(kind: StoreKind, key: Any, value: Any, t: int, end: int | None) -> Change:
    if kind in (StoreKind.KEY_VALUE, StoreKind.TIMESTAMPED_KEY_VALUE):
        ts = t if (kind is StoreKind.TIMESTAMPED_KEY_VALUE or end is None) else None
        return Change(key, value, ts)
    if kind is StoreKind.WINDOW:
        ws = t // SIZE * SIZE
        return Change(key, value, t if end is None else None, ws, None if end is None else ws + SIZE)
    if kind is StoreKind.SESSION:
        return Change(key, value, t, t, t + (end or 0))
    return Change(key, value, t)


@st.composite
def batches(draw: Any, kind: StoreKind, key_type: SqlType) -> list[list[Change]]:
    keys = draw(st.lists(KEYS[key_type], min_size=1, max_size=6))
    out = []
    for _ in range(draw(st.integers(1, 4))):
        n = draw(st.integers(0, 25))
        out.append([_change(kind, draw(st.sampled_from(keys)), draw(st.one_of(st.none(), VALUE)), draw(TIMES),
                            draw(st.one_of(st.none(), st.integers(0, 3) .map(lambda i: i * 1000))))
                    for _ in range(n)])
    return out


def _arrow_keys(keys: list[Any], t: SqlType) -> pa.Array:
    if t is SqlType.TIMESTAMP:
        return pa.array([dt.datetime(1970, 1, 1) + dt.timedelta(milliseconds=k) for k in keys], pa.timestamp("ms"))
    if t is SqlType.DATE:
        return pa.array(np.array(keys, dtype=np.int32), pa.int32()).cast(pa.date32())
    return pa.array(keys, ARROW_KEY[t])


def as_table(changes: list[Change], key_type: SqlType) -> pa.Table:
    """The changes as Spark would hand them to the sink: an Arrow table in Spark's column types."""
    cols: dict[str, Any] = {KEY: _arrow_keys([c.key for c in changes], key_type)}
    for i, col in enumerate(VALUES):
        t = {SqlType.BIGINT: pa.int64(), SqlType.VARCHAR: pa.string(), SqlType.DOUBLE: pa.float64(),
             SqlType.BOOLEAN: pa.bool_()}[col.type]
        cols[value_name(i)] = pa.array([None if c.value is None else c.value[i] for c in changes], t)
    for name, attr in ((TS, "timestamp"), (WS, "window_start"), (WE, "window_end")):
        cols[name] = pa.array([getattr(c, attr) for c in changes], pa.int64())
    cols[DELETED] = pa.array([c.value is None for c in changes], pa.bool_())
    return pa.table(cols)


def _spec(kind: StoreKind, key_type: SqlType, partitions: int) -> StoreSpec:
    return StoreSpec("s", kind, Column("k", key_type), VALUES, partitions=partitions, source_topics=("t",),
                     window_size_ms=SIZE if kind is StoreKind.WINDOW else None,
                     history_retention_ms=5000 if kind is StoreKind.VERSIONED else None)


def _writer(spec: StoreSpec, root: Path, name: str, adbc_min_rows: int, parallel: bool) -> PartitionedWriter:
    stores = {p: open_partition(spec, p, root / f"{name}-{p}.db", synchronous="OFF", adbc_min_rows=adbc_min_rows)
              for p in range(spec.partitions)}
    return PartitionedWriter(spec, stores, threads=2, parallel_min_rows=0 if parallel else 10**9)


@pytest.mark.parametrize("kind", list(StoreKind), ids=lambda k: k.value)
@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data(), key_type=st.sampled_from(list(KEYS)), partitions=st.integers(1, 4))
def test_columnar_writes_equal_the_row_path(kind: StoreKind, data: Any, key_type: SqlType, partitions: int) -> None:
    spec = _spec(kind, key_type, partitions)
    written = data.draw(batches(kind, key_type))
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        ref = RowPathStore(spec, root)
        objects = _writer(spec, root, "changes", adbc_min_rows=0, parallel=False)
        arrow = _writer(spec, root, "arrow", adbc_min_rows=10**9, parallel=True)
        try:
            for b, changes in enumerate(written):
                pos = Position.from_map({"t": {0: b, 1: 2 * b}})
                ref.write_batch(b, changes, pos)
                objects.write_batch(b, changes, pos)
                arrow.write_table(b, as_table(changes, key_type), pos)
            replay = written[-1][::-1]  # a replayed batch id changes nothing, whatever it carries
            objects.write_batch(len(written) - 1, replay, Position.from_map({"t": {0: 99}}))
            arrow.write_table(len(written) - 1, as_table(replay, key_type), Position.from_map({"t": {0: 99}}))
            for p in range(partitions):
                want = ref.contents(p)
                for w in (objects, arrow):
                    store = w._stores[p]
                    assert dump(store._wconn, kind) == want, f"partition {p} of the {w is arrow and 'arrow'} writer"
        finally:
            ref.close()
            for w in (objects, arrow):
                for s in w._stores.values():
                    s.close()


@settings(max_examples=60, deadline=None)
@given(key_type=st.sampled_from(list(KEYS)), data=st.data(), partitions=st.integers(1, 64))
def test_vectorized_partitioner_equals_kafkas_murmur2(key_type: SqlType, data: Any, partitions: int) -> None:
    keys = data.draw(st.lists(KEYS[key_type], max_size=300))
    if key_type is SqlType.VARCHAR:
        keys += ["x" * n for n in (0, 1, 2, 3, 4, 5, 255, 256, 257, 1000)]  # every tail length, and long keys
    arr = _arrow_keys(keys, key_type) if key_type in (SqlType.TIMESTAMP, SqlType.DATE) else pa.array(
        keys, ARROW_KEY[key_type])
    from stores.engine.columns import column_type

    stored = column_type(key_type).encode(arr)
    got = partitions_for_serialized(*serialized_keys(stored, key_type), partitions).tolist()
    assert got == [partition_for_key(k, partitions, key_type) for k in keys]


def test_vectorized_partitioner_on_a_million_keys_of_mixed_lengths() -> None:
    rng = np.random.default_rng(5)
    keys = [f"customer-{i}-{'x' * int(n)}" for i, n in enumerate(rng.integers(0, 40, 20_000))]
    arr = pa.array(keys)
    got = partitions_for_serialized(*serialized_keys(arr, SqlType.VARCHAR), 7)
    assert got.tolist() == [partition_for_key(k, 7) for k in keys]
    sliced = arr.slice(123, 5000)  # an Arrow slice keeps its parent's buffers: offsets must be honoured
    assert partitions_for_serialized(*serialized_keys(sliced, SqlType.VARCHAR), 7).tolist() == got[123:5123].tolist()
    ints = np.arange(-500_000, 500_000, dtype=np.int64) * 7919
    got = partitions_for_serialized(*serialized_keys(pa.array(ints), SqlType.BIGINT), 12)
    sample = rng.integers(0, len(ints), 3000)
    assert [got[i] for i in sample] == [partition_for_key(int(ints[i]), 12) for i in sample]
    assert key_bytes(True) == b"\x01"
