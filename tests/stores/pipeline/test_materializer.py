"""The foreachBatch sink's columnar step (``rows_to_table``) against the per-row function it replaced.

``rows_to_changes`` below is the sink's row path until issue 22: column lists
→ Change objects, latest records deduplicated per key in log order. The
columnar step hands every record to the writer in log order instead (the
writer's later-wins rule does the deduplication), so the tables must end up
the same. One deliberate difference: a store's stream time is now the newest
record of the batch, not the newest of the records that survived
deduplication (Kafka's definition); the reference below is adjusted to it.
"""

from __future__ import annotations

import logging
import tempfile
from collections.abc import Mapping
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pyarrow as pa
import pyspark  # noqa: E402,F401 - Spark tests run or fail, never skip quietly
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from stores.catalog.schema import Column, SqlType, StoreKind, StoreSpec  # noqa: E402
from stores.engine import open_partition  # noqa: E402
from stores.engine.change import Change  # noqa: E402
from stores.engine.codec import BatchError  # noqa: E402
from stores.engine.writer import PartitionedWriter  # noqa: E402
from stores.iqv2.position import Position  # noqa: E402
from stores.pipeline.materializer import BatchSink, BatchTimes, rows_to_table  # noqa: E402
from tests.stores.engine.row_path import RowPathStore, dump  # noqa: E402

GAP = 60_000
KINDS = {"latest": StoreKind.TIMESTAMPED_KEY_VALUE, "versioned": StoreKind.VERSIONED,
         "aggregate": StoreKind.TIMESTAMPED_KEY_VALUE, "window": StoreKind.WINDOW, "session": StoreKind.SESSION}


def rows_to_changes(decl: Any, data: Mapping[str, list[Any]], batch_ts: int | None) -> list[Change]:
    """The row path (see the module docstring), minus the per-key deduplication of ``latest``."""
    keys = data["__k"]
    vals = [data[f"__v{i}"] for i in range(len(decl.value_cols))]
    ts, ws, we = data.get("__ts"), data.get("__ws"), data.get("__we")
    gap = decl.spec.gap_ms if decl.shape == "session" else None
    rows = range(len(keys))
    if decl.shape in ("latest", "versioned") and "__offset" in data:
        tp, pp, op = data.get("__topic"), data["__partition"], data["__offset"]
        rows = sorted(rows, key=lambda i: (tp[i] if tp else "", pp[i], op[i]))
    out: list[Change] = []
    for i in rows:
        value: tuple[Any, ...] | None = tuple(v[i] for v in vals)
        if decl.shape in ("latest", "versioned") and all(x is None for x in value):  # type: ignore[union-attr]
            value = None
        t = ts[i] if ts is not None else batch_ts
        end = we[i] if we else None
        if gap and end is not None:
            end -= gap
        out.append(Change(keys[i], value, t, ws[i] if ws else None, end))
    if decl.shape == "versioned":
        out = [c for c in out if c.key is not None and c.timestamp is not None]
    return [c for c in out if c.key is not None]


def _decl(shape: str, partitions: int) -> SimpleNamespace:
    spec = StoreSpec("m", KINDS[shape], Column("key", SqlType.VARCHAR),
                     (Column("amount", SqlType.DOUBLE), Column("item", SqlType.VARCHAR)), partitions=partitions,
                     source_topics=("orders", "refunds"), gap_ms=GAP if shape == "session" else None,
                     history_retention_ms=None)
    return SimpleNamespace(shape=shape, value_cols=("amount", "item"), spec=spec)


@st.composite
def projections(draw: Any, shape: str) -> pa.Table:
    """A projected micro-batch as ``BatchSink`` sees it (``__k``, ``__v…``, times, source coordinates)."""
    n = draw(st.integers(0, 30))
    key = st.one_of(st.none(), st.sampled_from(["c1", "c2", "c3", "é"])) if shape in ("latest", "versioned") \
        else st.sampled_from(["c1", "c2", "c3", "é"])
    cols: dict[str, Any] = {
        "__k": pa.array([draw(key) for _ in range(n)], pa.string()),
        "__v0": pa.array([draw(st.one_of(st.none(), st.floats(-5, 5))) for _ in range(n)], pa.float64()),
        "__v1": pa.array([draw(st.one_of(st.none(), st.sampled_from(["pen", "mug"]))) for _ in range(n)]),
    }
    times = st.integers(0, 5).map(lambda i: 1_700_000_000_000 + i * 30_000)
    if shape in ("latest", "versioned"):
        cols["__ts"] = pa.array([draw(st.one_of(st.none(), times)) if shape == "versioned" else draw(times)
                                 for _ in range(n)], pa.int64())
        coords = draw(st.permutations([(t, p, o) for t in ("orders", "refunds") for p in range(2) for o in range(8)]))
        cols["__topic"] = pa.array([c[0] for c in coords[:n]])
        cols["__partition"] = pa.array([c[1] for c in coords[:n]], pa.int32())
        cols["__offset"] = pa.array([c[2] for c in coords[:n]], pa.int64())
    elif shape == "aggregate" and draw(st.booleans()):
        cols["__ts"] = pa.array([draw(times) for _ in range(n)], pa.int64())
    elif shape in ("window", "session"):
        starts = [draw(times) for _ in range(n)]
        cols["__ts"] = pa.array([draw(times) for _ in range(n)], pa.int64())
        cols["__ws"] = pa.array(starts, pa.int64())
        cols["__we"] = pa.array([s + GAP + draw(st.integers(0, 3)) * 1000 for s in starts], pa.int64())
    return pa.table(cols)


@pytest.mark.parametrize("shape", list(KINDS))
@settings(max_examples=30, deadline=None)
@given(data=st.data(), partitions=st.integers(1, 3))
def test_rows_to_table_writes_what_the_row_path_wrote(shape: str, data: Any, partitions: int) -> None:
    decl = _decl(shape, partitions)
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        ref = RowPathStore(decl.spec, root)
        stores = {p: open_partition(decl.spec, p, root / f"new-{p}.db", synchronous="OFF")
                  for p in range(partitions)}
        writer = PartitionedWriter(decl.spec, stores)
        try:
            for b in range(data.draw(st.integers(1, 3))):
                table = data.draw(projections(shape))
                pos = Position.from_map({"orders": {0: b}})
                batch_ts = 1_700_000_000_000 + b
                ref.write_batch(b, rows_to_changes(decl, {c: table.column(c).to_pylist() for c in table.column_names},
                                                   batch_ts), pos)
                writer.write_table(b, rows_to_table(decl, table, batch_ts), pos)
            for p in range(partitions):
                assert dump(stores[p]._wconn, decl.spec.kind) == ref.contents(p)
        finally:
            ref.close()
            for s in stores.values():
                s.close()


def _store(tmp_path: Path, shape: str, values: tuple[Column, ...] = ()) -> tuple[Any, PartitionedWriter]:
    spec = StoreSpec("m", KINDS[shape], Column("key", SqlType.VARCHAR), values, partitions=1)
    store = open_partition(spec, 0, tmp_path / "m.db", synchronous="OFF")
    return SimpleNamespace(shape=shape, value_cols=tuple(c.name for c in values), spec=spec), \
        PartitionedWriter(spec, {0: store})


def test_latest_store_without_value_columns_keeps_every_key(tmp_path: Path) -> None:
    """No value column means no tombstone to see: each record says "this key exists" (the row path deleted it)."""
    decl, writer = _store(tmp_path, "latest")
    table = pa.table({"__k": ["a", "b", None], "__ts": pa.array([1, 2, 3], pa.int64()),
                      "__partition": pa.array([0, 0, 0], pa.int32()), "__offset": pa.array([0, 1, 2], pa.int64())})
    writer.write_table(0, rows_to_table(decl, table, None), Position.from_map({"t": {0: 2}}))
    rows, meta = dump(writer._stores[0]._wconn, decl.spec.kind)
    assert rows == [("a", 1), ("b", 2)] and meta[2] == 2  # the null-key record was dropped


def test_a_bad_row_from_spark_fails_the_batch_naming_it(tmp_path: Path) -> None:
    """A timestamped store whose timestamp column is null for one key: nothing written, the key named."""
    decl, writer = _store(tmp_path, "aggregate", (Column("n", SqlType.BIGINT),))
    good = pa.table({"__k": ["a"], "__v0": pa.array([1], pa.int64()), "__ts": pa.array([5], pa.int64())})
    writer.write_table(0, rows_to_table(decl, good, None), Position.from_map({"t": {0: 0}}))
    bad = pa.table({"__k": ["a", "zed", "b"], "__v0": pa.array([2, 3, 4], pa.int64()),
                    "__ts": pa.array([6, None, 7], pa.int64())})
    with pytest.raises(BatchError, match=r"store 'm' batch 1 change #1 \(key 'zed'\): a timestamped key-value "
                                         r"store needs the record timestamp"):
        writer.write_table(1, rows_to_table(decl, bad, None), Position.from_map({"t": {0: 1}}))
    assert dump(writer._stores[0]._wconn, decl.spec.kind) == ([("a", 5, 1)], (0, Position.from_map({"t": {0: 0}}), 5))


def test_the_sink_logs_each_batch_s_moments_and_position_for_freshness_breakdowns(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """The pipeline benchmark splits append → visible at the sink's moments (issue 50): they come in order, with the
    Position the batch wrote, on the debug record's ``batch_times``; and the store holds that Position by then."""
    decl, writer = _store(tmp_path, "aggregate", (Column("n", SqlType.BIGINT),))
    decl.driver_plan = None
    ck = tmp_path / "ck"
    (ck / "offsets").mkdir(parents=True)
    (ck / "offsets" / "0").write_text('v1\n{"batchTimestampMs":7}\n{"orders":{"0":3,"1":0}}\n', encoding="utf-8")
    applied: list[tuple[str, int, Position]] = []
    sink = BatchSink(decl, ck, lambda: writer, lambda *a: applied.append(a))
    batch = SimpleNamespace(toArrow=lambda: pa.table({"__k": ["a"], "__v0": pa.array([1], pa.int64()),
                                                      "__ts": pa.array([5], pa.int64())}))
    with caplog.at_level(logging.DEBUG, logger="stores.pipeline.materializer"):
        sink(batch, 0)  # type: ignore[arg-type]
    [times] = [r.batch_times for r in caplog.records if hasattr(r, "batch_times")]
    assert isinstance(times, BatchTimes) and times.batch_id == 0
    assert times.started <= times.collected <= times.written
    assert times.position == Position.from_map({"orders": {0: 2}}) == applied[0][2]
    assert writer._stores[0].current_position() == times.position
