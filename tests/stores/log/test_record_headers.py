"""Record headers (issue 16 item 7): the embedded log keeps them per record, Kafka carries them, and both
sources give them to a stream as Spark's Kafka source does with ``includeHeaders=true``:
``headers`` ARRAY<STRUCT<key: STRING, value: BINARY>>, in record order, names may repeat."""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

import pytest

from stores import KafkaSource
from stores.log.eventlog import EventLog
from stores.log.records import MAX_HEADERS, InvalidRecordError
from stores.pipeline.iqlog_source import IqLogStreamReader
from stores.pipeline.kafka_source import IqKafkaStreamReader, _Range, source_options
from stores.pipeline.stream_rows import HEADERS_TYPE, parse_value_schema, row_converter, stream_schema

RECORDS = [
    ("a", {"n": 1}, 1000, [("region", b"eu"), ("trace", None), ("region", "us")]),
    ("b", {"n": 2}, 2000, {"region": b"\x00\xff"}),
    ("c", {"n": 3}, 3000),  # none
    {"key": "d", "value": None, "timestamp": 4000, "headers": [("tomb", "stone")]},
]
WANT = [(("region", b"eu"), ("trace", None), ("region", b"us")), (("region", b"\x00\xff"),), (), (("tomb", b"stone"),)]


def test_the_embedded_log_keeps_headers_per_record(tmp_path: Path) -> None:
    log = EventLog(tmp_path)
    log.create_topic("t", 1)
    log.append_batch("t", RECORDS)
    log.append("t", "e", {"n": 5}, 5000, headers=[("one", "1")])
    recs = log.read("t", 0)
    assert [r.headers for r in recs] == [*WANT, (("one", b"1"),)]
    assert [r.value for r in recs][:4] == [{"n": 1}, {"n": 2}, {"n": 3}, None]
    assert list(log.read_raw("t", 0, 2, 3)) == [(2, "c", {"n": 3}, 3000)]  # the 4-tuple path is unchanged


@pytest.mark.parametrize("headers, message", [
    ("x", "a list of \\(name, value\\) pairs or a mapping"),
    ([("a", 1)], "header 'a': the value must be bytes, text or None"),
    ([(1, b"x")], "header 0 must be a \\(name, value\\) pair with a text name"),
    ([("a", b"x", 3)], "header 0 must be"),
    ([("h", b"")] * (MAX_HEADERS + 1), f"at most {MAX_HEADERS}"),
])
def test_bad_headers_are_refused_and_nothing_is_written(tmp_path: Path, headers: Any, message: str) -> None:
    log = EventLog(tmp_path)
    log.create_topic("t", 1)
    with pytest.raises(InvalidRecordError, match=f"record 1 of topic 't': .*{message}"):
        log.append_batch("t", [("ok", {"n": 1}, 1), ("k", {"n": 1}, 1, headers)])
    assert log.end_offsets("t") == {0: 0}


def test_a_stream_with_headers_has_sparks_column_and_rows() -> None:
    schema = stream_schema(parse_value_schema("n BIGINT"), include_headers=True)
    assert schema.fields[-1].name == "headers" and schema.fields[-1].dataType == HEADERS_TYPE
    assert HEADERS_TYPE.simpleString() == "array<struct<key:string,value:binary>>"
    row = row_converter(schema)("k", {"n": 1}, 5, "t", 0, 9, [("a", b"1"), ("b", None)])
    assert row[1] == 1 and row[-1] == [("a", b"1"), ("b", None)] and row[-3:-1] == (9, False)
    assert row_converter(schema)("k", None, 5, "t", 0, 9, None)[-2:] == (True, [])  # a tombstone with no headers
    assert len(row_converter(stream_schema(parse_value_schema("n BIGINT")))("k", {}, 5, "t", 0, 9)) == 7
    with pytest.raises(ValueError, match="clashes with a column the stream adds"):
        parse_value_schema("headers STRING")


def test_the_iqlog_reader_gives_each_records_headers(tmp_path: Path) -> None:
    log = EventLog(tmp_path)
    log.create_topic("t", 1)
    log.append_batch("t", RECORDS)
    opts = {"path": str(tmp_path), "topics": "t", "valueSchema": "n BIGINT", "includeHeaders": "true"}
    schema = stream_schema(parse_value_schema("n BIGINT"), include_headers=True)
    reader = IqLogStreamReader(schema, opts)
    start = reader.initialOffset()
    parts = reader.partitions(start, reader.latestOffset(start, reader.getDefaultReadLimit()))
    rows = [r for p in parts for r in reader.read(p)]
    assert [(r[0], r[-1]) for r in rows] == [(k, list(w)) for k, w in zip("abcd", WANT)]


def test_kafka_carries_headers_to_the_iqkafka_reader(kafka_broker: Any) -> None:
    src = KafkaSource(kafka_broker.bootstrap_servers)
    topic = f"h-{uuid.uuid4().hex[:8]}"
    try:
        src.create_topic(topic, 1)
        offsets = src.append_batch(topic, RECORDS)
        assert [o for _p, o in offsets] == [0, 1, 2, 3]
        assert [r.headers for r in src.read(topic, 0, 0, 4)] == WANT
        schema = stream_schema(parse_value_schema("n BIGINT"), include_headers=True)
        opts = {**source_options(kafka_broker.bootstrap_servers, None), "topics": topic, "includeHeaders": "true"}
        reader = IqKafkaStreamReader(schema, opts)
        try:
            rows = list(reader.read(_Range([(topic, 0, 0, 4, None)])))
        finally:
            reader.stop()
        assert [r[-1] for r in rows] == [list(w) for w in WANT]
        assert [r[1] for r in rows] == [1, 2, 3, None]
    finally:
        src.delete_topic(topic)
        src.close()
