"""EventLog: topics, keyed partitioning, durability across producer processes, crash tails, errors."""

from __future__ import annotations

import json
import multiprocessing
import os
import struct
import zlib
from datetime import datetime, timezone
from typing import Any

import pytest

from stores.catalog.partitioner import partition_for_key
from stores.log.eventlog import (
    EventLog,
    InvalidRecordError,
    TopicExistsError,
    UnknownTopicError,
)
from stores.log.segment import HEADER_SIZE, encode_record


def test_append_returns_the_murmur2_partition_and_consecutive_offsets(tmp_path):
    log = EventLog(tmp_path)
    log.create_topic("orders", partitions=4)
    got = [log.append("orders", key="c42", value={"amount": float(i)}, timestamp=1000 + i) for i in range(3)]
    p = partition_for_key("c42", 4)
    assert got == [(p, 0), (p, 1), (p, 2)]
    recs = log.read("orders", p)
    assert [(r.offset, r.key, r.value, r.timestamp) for r in recs] == [
        (0, "c42", {"amount": 0.0}, 1000), (1, "c42", {"amount": 1.0}, 1001), (2, "c42", {"amount": 2.0}, 1002)]
    assert log.end_offsets("orders")[p] == 3
    assert log.last_offsets("orders") == {p: 2}


def test_batch_append_and_read_by_offset_range(tmp_path):
    log = EventLog(tmp_path)
    log.create_topic("t", partitions=3)
    recs = [(f"k{i % 7}", {"i": i}, i) for i in range(50)] + [{"key": 5, "value": None, "timestamp": 99}]
    out = log.append_batch("t", recs)
    assert len(out) == 51
    for (key, value, ts), (p, o) in zip(recs[:50], out[:50]):
        assert p == partition_for_key(key, 3)
        [r] = log.read("t", p, o, o + 1)
        assert (r.key, r.value, r.timestamp) == (key, value, ts)
    p, o = out[50]
    assert log.read("t", p, o)[0].value is None  # a tombstone
    # offsets are dense per partition and every record is there once
    assert sorted(o for pp, o in out if pp == 0) == list(range(log.end_offsets("t")[0]))


def test_datetime_timestamps_and_values(tmp_path):
    log = EventLog(tmp_path)
    log.create_topic("t")
    when = datetime(2024, 1, 2, 3, 4, 5, tzinfo=timezone.utc)
    log.append("t", "a", {"at": when}, timestamp=when)
    [r] = log.read("t", 0)
    assert r.timestamp == int(when.timestamp() * 1000)
    assert r.value == {"at": "2024-01-02T03:04:05+00:00"}


def test_topics_create_list_delete_and_recreate_changes_the_epoch(tmp_path):
    log = EventLog(tmp_path)
    log.create_topic("a", partitions=2)
    log.create_topic("b")
    assert log.list_topics() == {"a": 2, "b": 1}
    with pytest.raises(TopicExistsError, match="already exists"):
        log.create_topic("a", partitions=2)
    log.create_topic("a", partitions=2, exist_ok=True)
    with pytest.raises(TopicExistsError, match="2 partitions, not 3"):
        log.create_topic("a", partitions=3, exist_ok=True)
    epoch = log.epoch("a")
    log.append("a", "x", {"v": 1})
    log.delete_topic("a")
    assert log.list_topics() == {"b": 1}
    with pytest.raises(UnknownTopicError, match="'a' does not exist"):
        log.append("a", "x", {"v": 1})
    with pytest.raises(UnknownTopicError):
        log.delete_topic("a")
    log.create_topic("a", partitions=2)
    assert log.epoch("a") != epoch
    assert log.end_offsets("a") == {0: 0, 1: 0}


@pytest.mark.parametrize("name", ["", "a/b", "x@y", "..", "a" * 250, 7])
def test_invalid_topic_names(tmp_path, name):
    with pytest.raises(ValueError, match="invalid topic name"):
        EventLog(tmp_path).create_topic(name)


def test_invalid_partitions(tmp_path):
    with pytest.raises(ValueError, match="partitions must be an integer >= 1"):
        EventLog(tmp_path).create_topic("t", partitions=0)


def _nested(levels: int) -> Any:
    v: Any = 1
    for _ in range(levels):
        v = [v]
    return v


@pytest.mark.parametrize("record, message", [
    ((None, {"v": 1}, 1), "the key is null"),
    ((1.5, {"v": 1}, 1), "key must be a string or an integer"),
    (("k", [1, 2], 1), "value must be a mapping"),
    (("k", {"v": object()}, 1), "not JSON-serializable"),
    (("k", {"v": float("nan")}, 1), "not JSON-serializable"),
    (("k", {"v": _nested(256)}, 1), "value nests more than 256 levels deep"),
    (("k", {"v": _nested(50_000)}, 1), "value nests more than 256 levels"),  # past json.dumps' own recursion
    (("k", {"v": 1}, "yesterday"), "timestamp must be"),
    (("k", {"v": 1}, -5), "timestamp must be non-negative epoch milliseconds .* got -5"),
    (("k", {"v": 1}, 2**63), "timestamp must be non-negative epoch milliseconds that fit in 64 bits"),
    ((2**63, {"v": 1}, 1), "key 9223372036854775808 does not fit in 64 bits"),
    ((-2**63 - 1, {"v": 1}, 1), "does not fit in 64 bits"),
    ({"key": "k", "colour": 1}, "expected keys"),
    ("just a string", "expected \\(key, value, timestamp\\)"),
])
def test_bad_records_write_nothing(tmp_path, record, message):
    log = EventLog(tmp_path)
    log.create_topic("t", partitions=2)
    good = ("k", {"v": 1}, 1)
    with pytest.raises(InvalidRecordError, match=message) as info:
        log.append_batch("t", [good, record])
    assert "record 1" in str(info.value)
    assert log.end_offsets("t") == {0: 0, 1: 0}


def test_values_nested_to_the_limit_are_written_and_read_back(tmp_path):
    """256 levels is the limit (the value object is the first); brackets inside strings are not nesting."""
    log = EventLog(tmp_path)
    log.create_topic("t", partitions=1)
    values = [{"v": _nested(255)}, {"s": "[" * 10_000}]
    log.append_batch("t", [("k", v, 1) for v in values])
    assert [r.value for r in log.read("t", 0, 0, 2)] == values


def test_explicit_partition_and_its_range(tmp_path):
    log = EventLog(tmp_path)
    log.create_topic("t", partitions=2)
    assert log.append("t", None, {"v": 1}, partition=1) == (1, 0)
    with pytest.raises(InvalidRecordError, match="partition 2 is outside 0..1"):
        log.append("t", "k", {"v": 1}, partition=2)


def test_read_errors(tmp_path):
    log = EventLog(tmp_path)
    log.create_topic("t")
    log.append("t", "k", {"v": 1})
    with pytest.raises(UnknownTopicError):
        log.read("nope", 0)
    with pytest.raises(Exception, match="has no partition 3"):
        log.read("t", 3)
    with pytest.raises(Exception, match="SOURCE_TRUNCATED"):
        log.read("t", 0, 0, 5)


def test_a_crash_tail_is_cut_off_by_the_next_append(tmp_path):
    """Records and index entries written but never committed are what a kill -9 mid-append leaves."""
    log = EventLog(tmp_path)
    log.create_topic("t")
    log.append("t", "k", {"v": 1}, 1)
    d = tmp_path / "topics" / "t"
    with open(d / "0.rec", "ab") as f:
        f.write(encode_record(b'{"k":"k","v":{"v":999},"t":5}') + b"\x00\x00\x17half")
    with open(d / "0.ix", "ab") as f:
        f.write(b"\x00\x00\x00\x00\x00\x00\x01\x00\x00\x00\x00")
    assert log.end_offsets("t") == {0: 1}  # readers never see the tail
    assert log.append("t", "k", {"v": 2}, 2) == (0, 1)
    assert [r.value for r in log.read("t", 0)] == [{"v": 1}, {"v": 2}]


def _produce(root: str, worker: int, n: int) -> None:
    log = EventLog(root)
    for i in range(n):
        log.append("t", f"w{worker}", {"worker": worker, "seq": i}, i)


def test_several_producer_processes_lose_and_reorder_nothing(tmp_path):
    log = EventLog(tmp_path)
    log.create_topic("t", partitions=2)
    ctx = multiprocessing.get_context("fork")
    procs = [ctx.Process(target=_produce, args=(str(tmp_path), w, 150)) for w in range(4)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(60)
        assert p.exitcode == 0
    seen: dict[int, list[int]] = {w: [] for w in range(4)}
    total = 0
    for part in range(2):
        for r in log.read("t", part):
            seen[r.value["worker"]].append(r.value["seq"])
            assert partition_for_key(f"w{r.value['worker']}", 2) == part
            total += 1
    assert total == 600
    for w in range(4):
        assert seen[w] == list(range(150)), f"producer {w}'s records were lost or reordered"


def test_records_are_on_disk_with_a_length_and_a_checksum(tmp_path):
    log = EventLog(tmp_path)
    log.create_topic("t")
    log.append("t", "k", {"v": 1}, 7)
    raw = (tmp_path / "topics" / "t" / "0.rec").read_bytes()
    length, crc = struct.unpack(">II", raw[:8])
    assert length == len(raw) - 8
    assert crc == zlib.crc32(raw[8:], zlib.crc32(raw[:4]))
    assert json.loads(raw[8:]) == {"k": "k", "v": {"v": 1}, "t": 7}
    assert os.path.getsize(tmp_path / "topics" / "t" / "0.ix") == HEADER_SIZE + 8
