"""A stream's records read from the embedded log as Arrow: what a scan plans per partition, and what it reads.

Expectations come from the records appended (and read back with ``EventLog.read``), never from the reader.
"""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pytest

from stores.catalog.schema import Column, SqlType, parse_type
from stores.catalog.streams import HEADERS_TYPE, Catalog, StreamQuery, StreamSpec, relation_spec, streams_of
from stores.iqv2.position import Position
from stores.iqv2.result import FailureReason
from stores.log.eventlog import EventLog
from stores.log.record_batches import stream_schema
from stores.log.stream_reader import StreamReader, StreamReadError

ORDERS = StreamSpec("orders", "orders", Column("key", SqlType.VARCHAR),
                    (Column("amount", SqlType.DOUBLE), Column("qty", SqlType.BIGINT), Column("item", SqlType.VARCHAR),
                     Column("at", SqlType.TIMESTAMP), Column("day", SqlType.DATE), Column("price", parse_type("DECIMAL(6,2)")),
                     Column("tags", parse_type("VARCHAR[]")), Column("dims", parse_type("STRUCT(w BIGINT, h DOUBLE)")),
                     Column("attrs", parse_type("MAP(VARCHAR, BIGINT)")), Column("ok", SqlType.BOOLEAN)),
                    partitions=3, headers=True)


@pytest.fixture()
def log(tmp_path: Path) -> EventLog:
    log = EventLog(tmp_path / "log")
    log.create_topic("orders", partitions=3)
    return log


def read_all(reader: StreamReader, query: StreamQuery = StreamQuery(), bound: Position | None = None,
             batch: int = 1000) -> pa.Table:
    batches = [b for s in reader.slices(query, bound) for b in reader.batches(s, query, batch)]
    return pa.Table.from_batches(batches, schema=reader.schema)


def test_values_are_read_leniently_as_the_pipeline_reads_them(log: EventLog) -> None:
    good = {"amount": 9.5, "qty": 3, "item": "pen", "at": "2024-05-01T12:00:00Z", "day": "2024-05-01",
            "price": 12.25, "tags": ["a", "b"], "dims": {"w": 2, "h": 1.5}, "attrs": {"x": 1}, "ok": True}
    odd = {"amount": "lots", "qty": 2.5, "item": 7, "at": 1714564800000, "day": "no date", "price": 1.234,
           "tags": "a", "dims": [1], "attrs": {"y": "z"}, "ok": "yes", "extra": 1}
    nested = {"item": {"k": [1, 2]}, "qty": True, "price": 99999.99}
    log.append("orders", "k1", good, 1000, partition=0, headers=[("src", b"web"), ("trace", None)])
    log.append("orders", "k2", odd, 1001, partition=0)
    log.append("orders", "k3", None, 1002, partition=0)  # a tombstone: every field null
    log.append("orders", "k4", nested, 1003, partition=0)
    rows = read_all(StreamReader(ORDERS, log), StreamQuery(partitions=frozenset({0}))).to_pylist()
    assert [r["key"] for r in rows] == ["k1", "k2", "k3", "k4"]
    assert [r["offset"] for r in rows] == [0, 1, 2, 3] and {r["partition"] for r in rows} == {0}
    first, second, tomb, fourth = rows
    assert first["amount"] == 9.5 and first["qty"] == 3 and first["item"] == "pen" and first["ok"] is True
    assert first["at"].isoformat() == "2024-05-01T12:00:00+00:00" and str(first["day"]) == "2024-05-01"
    assert str(first["price"]) == "12.25" and first["tags"] == ["a", "b"] and first["dims"] == {"w": 2, "h": 1.5}
    assert first["attrs"] == [("x", 1)]
    assert first["headers"] == [{"key": "src", "value": b"web"}, {"key": "trace", "value": None}]
    assert first["rowtime"].timestamp() == 1.0
    # the wrong type is null, never a failed scan; text fields take numbers and objects as their JSON text
    assert second["amount"] is None and second["qty"] is None and second["item"] == "7"
    assert second["at"].timestamp() == 1714564800 and second["day"] is None and second["price"] is None
    assert second["tags"] is None and second["dims"] is None and second["attrs"] == [("y", None)]
    assert second["ok"] is None and second["headers"] == []
    assert all(tomb[c.name] is None for c in ORDERS.values)
    assert fourth["item"] == '{"k":[1,2]}' and fourth["qty"] is None and fourth["price"] is None  # 7 digits: DECIMAL(6,2) holds 6


def test_keys_are_read_as_the_declared_type(log: EventLog) -> None:
    log.append("orders", "17", {}, 1, partition=0)
    log.append("orders", 42, {}, 2, partition=0)
    log.append("orders", "x", {}, 3, partition=0)
    ints = StreamSpec("orders", "orders", Column("key", SqlType.BIGINT), (), 3)
    assert read_all(StreamReader(ints, log)).column("key").to_pylist() == [17, 42, None]
    log.create_topic("arr", 1)
    log.append("arr", [1, "a"], {}, 1)
    log.append("arr", "not json", {}, 2)
    arr = StreamSpec("arr", "arr", Column("key", parse_type("STRUCT(a BIGINT, b VARCHAR)")), ())
    log.append("arr", {"a": 5, "b": "q"}, {}, 3)
    assert read_all(StreamReader(arr, log)).column("key").to_pylist() == [None, None, {"a": 5, "b": "q"}]


def test_slices_cover_the_pushed_ranges_and_say_what_cannot_be_read(log: EventLog) -> None:
    log.append_batch("orders", [(f"k{i}", {"amount": i}, 100 + i) for i in range(40)])
    ends = log.end_offsets("orders")
    reader = StreamReader(ORDERS, log)
    everything = reader.slices(StreamQuery())
    assert [(s.partition, s.start, s.stop, s.last) for s in everything] == \
        [(p, 0, ends[p], ends[p] - 1) for p in range(3)]
    cut = reader.slices(StreamQuery(partition_range=(1, None), offsets=(2, 4)))
    assert [(s.partition, s.start, s.stop, s.last) for s in cut] == [(p, 2, min(5, ends[p]), min(4, ends[p] - 1))
                                                                     for p in (1, 2)]
    assert reader.slices(StreamQuery(empty=True)) == []
    missing, = reader.slices(StreamQuery(partitions=frozenset({7})))
    assert missing.failure is FailureReason.DOES_NOT_EXIST and "has 3 partition(s)" in (missing.message or "")
    behind = reader.slices(StreamQuery(), Position.from_map({"orders": {1: ends[1]}}))
    assert [s.failure for s in behind] == [None, FailureReason.NOT_UP_TO_BOUND, None]
    assert f"ends at offset {ends[1] - 1}" in (behind[1].message or "")
    reached = reader.slices(StreamQuery(), Position.from_map({"orders": {1: ends[1] - 1}, "other": {0: 99}}))
    assert all(s.failure is None for s in reached)
    # records deleted by retention: the scan starts at the first one held
    log.delete_records("orders", {0: 3})
    first = reader.slices(StreamQuery(partitions=frozenset({0})))[0]
    assert (first.start, first.stop) == (3, ends[0])
    got = read_all(reader, StreamQuery(partitions=frozenset({0})))
    assert got.column("offset").to_pylist() == list(range(3, ends[0]))


def test_batches_are_bounded_and_rowtime_filters_them(log: EventLog) -> None:
    recs = [(f"k{i}", {"amount": i}, 10_000 - 7 * i) for i in range(500)]  # timestamps fall as offsets grow
    log.append_batch("orders", recs, partition=2)
    reader = StreamReader(ORDERS, log)
    part = reader.slices(StreamQuery(partitions=frozenset({2})))[0]
    sizes = [b.num_rows for b in reader.batches(part, StreamQuery(), 64)]
    assert max(sizes) <= 64 and sum(sizes) == 500
    q = StreamQuery(partitions=frozenset({2}), rowtime=(7_000, 8_000))
    got = read_all(reader, q, batch=50)
    want = [i for i, (_, _, ts) in enumerate(recs) if 7_000 <= ts <= 8_000]
    assert got.column("offset").to_pylist() == want


def test_a_stream_whose_topic_is_gone_or_damaged_says_so(log: EventLog, tmp_path: Path) -> None:
    reader = StreamReader(StreamSpec("gone", "gone", Column("key", SqlType.VARCHAR), ()), log)
    with pytest.raises(StreamReadError, match="topic does not exist"):
        reader.slices(StreamQuery())
    log.append_batch("orders", [("a", {"amount": 1}, 1), ("b", {"amount": 2}, 2)], partition=1)
    rec = tmp_path / "log" / "topics" / "orders" / "1.rec"
    data = bytearray(rec.read_bytes())
    data[-3] ^= 0xFF  # the second record's payload: its checksum no longer matches
    rec.write_bytes(bytes(data))
    reader = StreamReader(ORDERS, log)
    part = reader.slices(StreamQuery(partitions=frozenset({1})))[0]
    with pytest.raises(StreamReadError, match="CORRUPT_LOG"):
        list(reader.batches(part, StreamQuery()))
    ok = reader.slices(StreamQuery(partitions=frozenset({1}), offsets=(None, 0)))[0]  # the first record still reads
    assert [b.num_rows for b in reader.batches(ok, StreamQuery())] == [1]


def test_stream_specs_check_their_names_and_round_trip() -> None:
    assert StreamSpec.from_json(ORDERS.to_json()) == ORDERS
    assert [c.name for c in ORDERS.columns()] == ["key"] + [c.name for c in ORDERS.values]
    assert [c.name for c in ORDERS.record_columns()] == ["rowtime", "partition", "offset", "headers"]
    assert ORDERS.record_columns()[-1].type == HEADERS_TYPE
    assert stream_schema(ORDERS).names == [c.name for c in ORDERS.all_columns()]
    key = Column("key", SqlType.VARCHAR)
    with pytest.raises(ValueError, match="reserved"):
        StreamSpec("s", "t", key, (Column("rowtime", SqlType.BIGINT),))
    with pytest.raises(ValueError, match="duplicate"):
        StreamSpec("s", "t", key, (Column("a", SqlType.BIGINT), Column("A", SqlType.DOUBLE)))
    with pytest.raises(ValueError, match="must be 1-249"):
        StreamSpec("no spaces", "t", key, ())
    with pytest.raises(ValueError, match="not a topic name"):
        StreamSpec("s", "t/x", key, ())
    with pytest.raises(ValueError, match="a key is a scalar"):
        StreamSpec("s", "t", Column("key", parse_type("MAP(VARCHAR, BIGINT)")), ())
    catalog = Catalog({}, {"orders": ORDERS})
    assert dict(catalog) == {} and streams_of(catalog)["orders"] is ORDERS and relation_spec(catalog, "orders") is ORDERS
    assert streams_of({}) == {}
    assert json.loads(ORDERS.to_json())["headers"] is True


def test_an_unreadable_log_is_refused_at_once() -> None:
    with pytest.raises(TypeError, match="EventLog or a KafkaSource"):
        StreamReader(ORDERS, object())  # type: ignore[arg-type]
