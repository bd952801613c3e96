"""The iqlog reader's offsets and errors, and offsets-log → Position, without a running query.

The reader is a plain object on the driver, so its offset logic is tested by
calling it directly against a real EventLog; Kafka-format offsets (no
``@epochs``) go through the same Position conversion.
"""

from __future__ import annotations

import json

import pyspark  # noqa: E402,F401 - Spark tests run or fail, never skip quietly
import pytest
from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadMaxRows  # noqa: E402

from stores.iqv2.errors import MissingSourceTopicException, StreamsException  # noqa: E402
from stores.iqv2.position import Position  # noqa: E402
from stores.log.eventlog import EventLog  # noqa: E402
from stores.pipeline.iqlog_source import EPOCHS_KEY, IqLogStreamReader  # noqa: E402
from stores.pipeline.materializer import (  # noqa: E402
    last_committed_batch,
    position_from_offsets,
    read_batch_offsets,
)
from stores.pipeline.runtime import SourceTruncatedException, classify_failure  # noqa: E402
from stores.pipeline.stream_rows import admit, parse_value_schema, slices, stream_schema  # noqa: E402


def _reader(root, topics="orders", **opts):
    schema = stream_schema(parse_value_schema("amount DOUBLE, item STRING"))
    return IqLogStreamReader(schema, {"path": str(root), "topics": topics, **opts})


@pytest.fixture()
def log(tmp_path):
    log = EventLog(tmp_path)
    log.create_topic("orders", partitions=2)
    log.append_batch("orders", [(f"c{i}", {"amount": i, "item": "x"}, i) for i in range(20)])
    return log


def test_offsets_have_kafka_shape_plus_epochs(log):
    r = _reader(log.root)
    start = r.initialOffset()
    assert start == {"orders": {"0": 0, "1": 0}, EPOCHS_KEY: {"orders": log.epoch("orders")}}
    end = r.latestOffset(start, ReadAllAvailable())
    ends = log.end_offsets("orders")
    assert end["orders"] == {"0": ends[0], "1": ends[1]}
    json.dumps(end)  # offsets must be JSON
    assert _reader(log.root, startingOffsets="latest").initialOffset()["orders"] == end["orders"]


def test_max_records_per_batch_is_shared_over_partitions(log):
    r = _reader(log.root, maxRecordsPerBatch="5")
    assert isinstance(r.getDefaultReadLimit(), ReadMaxRows)
    start = r.initialOffset()
    end = r.latestOffset(start, r.getDefaultReadLimit())
    assert sum(end["orders"].values()) == 5
    assert min(end["orders"].values()) >= 2  # both partitions progress
    assert admit({("t", 0): (0, 1), ("t", 1): (0, 100)}, 10) == {("t", 0): (0, 1), ("t", 1): (0, 9)}


def test_partitions_and_read_return_the_records_between_offsets(log):
    r = _reader(log.root)
    start = r.initialOffset()
    end = r.latestOffset(start, ReadAllAvailable())
    rows = [row for part in r.partitions(start, end) for row in r.read(part)]
    assert len(rows) == 20
    key, amount, item, ts, topic, partition, offset, tombstone = rows[0]
    assert (topic, isinstance(amount, float), item, tombstone) == ("orders", True, "x", False)
    assert r.partitions(end, end) == []


def test_missing_topic_has_a_stable_code(log):
    r = _reader(log.root, topics="orders,nope")
    with pytest.raises(RuntimeError, match="^MISSING_SOURCE_TOPIC: source topic 'nope'"):
        r.initialOffset()
    r = _reader(log.root)
    start = r.initialOffset()
    log.delete_topic("orders")
    with pytest.raises(RuntimeError, match="^MISSING_SOURCE_TOPIC"):
        r.latestOffset(start, ReadAllAvailable())


def test_recreated_topic_is_reported_as_truncated(log):
    r = _reader(log.root)
    end = r.latestOffset(r.initialOffset(), ReadAllAvailable())
    log.delete_topic("orders")
    log.create_topic("orders", partitions=2)
    log.append_batch("orders", [(f"c{i}", {"amount": i}, i) for i in range(40)])  # longer, still wrong
    with pytest.raises(RuntimeError, match="^SOURCE_TRUNCATED: topic 'orders' was deleted and recreated"):
        r.latestOffset(end, ReadAllAvailable())


def test_truncated_partition_without_epoch_kafka_style_offsets(log):
    r = _reader(log.root)
    kafka_style = {"orders": {"0": 1000, "1": 0}}  # no @epochs, as Kafka's source writes
    with pytest.raises(RuntimeError, match="SOURCE_TRUNCATED: topic 'orders' partition 0 ends at"):
        r.latestOffset(kafka_style, ReadAllAvailable())


def test_reader_option_errors(tmp_path):
    schema = stream_schema(parse_value_schema("a INT"))
    with pytest.raises(ValueError, match="'path'"):
        IqLogStreamReader(schema, {"topics": "t"})
    with pytest.raises(ValueError, match="'topics'"):
        IqLogStreamReader(schema, {"path": str(tmp_path)})
    with pytest.raises(ValueError, match="maxRecordsPerBatch must be >= 1"):
        IqLogStreamReader(schema, {"path": str(tmp_path), "topics": "t", "maxRecordsPerBatch": "0"})
    with pytest.raises(ValueError, match="startingOffsets"):
        IqLogStreamReader(schema, {"path": str(tmp_path), "topics": "t", "startingOffsets": "middle"})


@pytest.mark.parametrize("ddl, message", [
    ("", "DDL string"),
    ("amount", "must be 'name TYPE'"),
    ("amount DECIMAL(39,2)", "precision 39 is not supported"),
    ("amount INTERVAL", "not supported"),
    ("a INT, a INT", "duplicate"),
    ("offset BIGINT", "clashes"),
    ("a-b INT", "letters, digits"),
])
def test_value_schema_errors(ddl, message):
    with pytest.raises(ValueError, match=message):
        parse_value_schema(ddl)


def test_lenient_value_conversion(tmp_path):
    log = EventLog(tmp_path)
    log.create_topic("t")
    log.append_batch("t", [("k", {"amount": "lots", "item": 5}, 1), ("k", None, 2), ("k", {}, 3)])
    r = _reader(tmp_path, topics="t")
    s = r.initialOffset()
    rows = [row for p in r.partitions(s, r.latestOffset(s, ReadAllAvailable())) for row in r.read(p)]
    assert [(row[1], row[2]) for row in rows] == [(None, "5"), (None, None), (None, None)]
    assert [row[-1] for row in rows] == [False, True, False]  # only the null value is a tombstone (issue 51)


# -- offsets log → Position ---------------------------------------------------------------
def test_position_from_kafka_and_iqlog_offsets():
    kafka = {"orders": {"0": 42, "1": 0, "2": 7}}
    assert position_from_offsets([kafka]) == Position.from_map({"orders": {0: 41, 2: 6}})
    iqlog = {"orders": {"0": 3}, EPOCHS_KEY: {"orders": "abc"}}
    assert position_from_offsets([iqlog, {"users": {"0": 1}}]) == Position.from_map(
        {"orders": {0: 2}, "users": {0: 0}})
    assert position_from_offsets([{"orders": {"0": -1}}]).is_empty()
    with pytest.raises(ValueError, match="JSON object"):
        position_from_offsets([[1, 2]])


def test_read_batch_offsets_from_a_checkpoint(tmp_path):
    (tmp_path / "offsets").mkdir()
    (tmp_path / "offsets" / "3").write_text(
        'v1\n{"batchWatermarkMs":0,"batchTimestampMs":1700000000123,"conf":{}}\n'
        '{"orders":{"0":10,"1":4}}\n', encoding="utf-8")
    sources, ts = read_batch_offsets(tmp_path, 3)
    assert ts == 1700000000123
    assert position_from_offsets(sources) == Position.from_map({"orders": {0: 9, 1: 3}})
    (tmp_path / "offsets" / "4").write_text("garbage", encoding="utf-8")
    with pytest.raises(ValueError, match="not a Spark offsets log entry"):
        read_batch_offsets(tmp_path, 4)
    assert last_committed_batch(tmp_path) is None
    (tmp_path / "commits").mkdir()
    for i in (0, 1, 2):
        (tmp_path / "commits" / str(i)).write_text("v1\n{}", encoding="utf-8")
    (tmp_path / "commits" / ".2.crc").write_text("", encoding="utf-8")
    assert last_committed_batch(tmp_path) == 2


def test_failures_are_classified_by_their_code():
    exc = classify_failure(RuntimeError("[STREAM_FAILED] blah\nMISSING_SOURCE_TOPIC: source topic 'x' gone\nmore"))
    assert isinstance(exc, MissingSourceTopicException)
    assert str(exc) == "MISSING_SOURCE_TOPIC: source topic 'x' gone"
    assert isinstance(classify_failure(RuntimeError("x SOURCE_TRUNCATED: y")), SourceTruncatedException)
    other = classify_failure(RuntimeError("disk full"))
    assert type(other) is StreamsException and "disk full" in str(other)


def test_slices_group_small_ranges_and_cut_big_ones() -> None:
    ranges = [("t", 0, 0, 3, None), ("t", 1, 5, 5, None), ("t", 2, 10, 17, "x")]
    assert slices(ranges, size=100) == [[("t", 0, 0, 3, None), ("t", 2, 10, 17, "x")]]  # empty range dropped
    assert slices(ranges, size=4) == [[("t", 0, 0, 3, None), ("t", 2, 10, 11, "x")],
                                      [("t", 2, 11, 15, "x")], [("t", 2, 15, 17, "x")]]
    assert sum(e - s for group in slices(ranges, size=2) for _, _, s, e, _ in group) == 10
