"""KafkaSource as a source log against a real broker (Tansu): topics, end offsets, producing with positions."""

from __future__ import annotations

import uuid
from typing import Any

import pytest

from stores import KafkaSource
from stores.catalog.partitioner import partition_for_bytes
from stores.log.eventlog import TopicExistsError, UnknownTopicError
from stores.log.kafka import KafkaError, KafkaUnavailableError, key_text
from stores.log.records import InvalidRecordError
from stores.log.source import SourceLog


def _topic() -> str:
    return f"t-{uuid.uuid4().hex[:8]}"


@pytest.fixture(scope="module")
def kafka(kafka_broker: Any) -> Any:
    src = KafkaSource(kafka_broker.bootstrap_servers)
    yield src
    src.close()


def test_is_a_source_log_and_says_where(kafka: KafkaSource, kafka_broker: Any) -> None:
    assert isinstance(kafka, SourceLog)
    assert kafka.describe() == f"Kafka at {kafka_broker.bootstrap_servers}"


def test_topics_are_created_listed_and_deleted(kafka: KafkaSource) -> None:
    t = _topic()
    assert not kafka.has_topic(t)
    kafka.create_topic(t, 3)
    assert kafka.has_topic(t) and kafka.partitions(t) == 3 and kafka.list_topics()[t] == 3
    kafka.create_topic(t, 3, exist_ok=True)
    with pytest.raises(TopicExistsError, match="already exists"):
        kafka.create_topic(t, 3)
    with pytest.raises(TopicExistsError, match="exists with 3 partitions, not 2"):
        kafka.create_topic(t, 2, exist_ok=True)
    with pytest.raises(ValueError, match="invalid topic name"):
        kafka.create_topic("bad name!", 1)
    kafka.delete_topic(t)
    assert not kafka.has_topic(t)
    with pytest.raises(UnknownTopicError, match="does not exist"):
        kafka.partitions(t)


def test_asking_about_a_missing_topic_never_creates_it(kafka: KafkaSource) -> None:
    """Metadata requests for one topic create it on brokers with auto-create (Tansu always): we never send one."""
    t = _topic()
    assert not kafka.has_topic(t)
    with pytest.raises(UnknownTopicError):
        kafka.end_offsets(t)
    with pytest.raises(UnknownTopicError):
        kafka.append_batch(t, [("k", {"a": 1}, None)])
    assert t not in kafka.list_topics()


def test_produced_positions_are_the_end_offsets_even_after_batched_writes(kafka: KafkaSource) -> None:
    """Tansu's listed high watermark lags multi-record batches; the fetch-based end must not."""
    t = _topic()
    kafka.create_topic(t, 3)
    assert kafka.end_offsets(t) == {0: 0, 1: 0, 2: 0} and kafka.last_offsets(t) == {}
    expected: dict[int, int] = {}
    for round_ in range(5):
        written = kafka.append_batch(t, [(f"c{i}", {"amount": i, "round": round_}, None) for i in range(700)])
        for p, o in written:
            expected[p] = max(expected.get(p, -1), o)
        assert kafka.last_offsets(t) == expected
    assert {p: e - 1 for p, e in kafka.end_offsets(t).items()} == expected
    records = list(kafka.read(t, 0, 0, expected[0] + 1))
    assert [r.offset for r in records] == list(range(expected[0] + 1))
    assert records[0].value == {"amount": records[0].value["amount"], "round": 0}


def test_keys_land_where_kafkas_murmur2_puts_them(kafka: KafkaSource) -> None:
    t = _topic()
    kafka.create_topic(t, 4)
    keys = [f"user-{i}" for i in range(40)] + [7, 123456789]
    for key, (p, _) in zip(keys, kafka.append_batch(t, [(k, {"v": 1}, None) for k in keys])):
        assert p == partition_for_bytes(key_text(key), 4), key


def test_records_round_trip_with_timestamps_and_tombstones(kafka: KafkaSource) -> None:
    t = _topic()
    kafka.create_topic(t, 1)
    kafka.append_batch(t, [("a", {"x": 1.5, "s": "é"}, 1_700_000_000_123), ("a", None, 1_700_000_000_124),
                           {"key": 42, "value": {"x": None}, "timestamp": None}])
    recs = list(kafka.read(t, 0, 0, 3))
    assert [(r.key, r.value, r.timestamp) for r in recs[:2]] == [
        ("a", {"x": 1.5, "s": "é"}, 1_700_000_000_123), ("a", None, 1_700_000_000_124)]
    assert recs[2].key == "42" and recs[2].timestamp > 1_700_000_000_124


def _deep(levels: int) -> Any:
    v: Any = 1
    for _ in range(levels):
        v = {"x": v}
    return v


@pytest.mark.parametrize("records, says", [
    ([("k", {"a": 1}, None), (None, {"a": 2}, None)], "record 1 .* the key is null"),
    ([("k", [1, 2], None)], "value must be a mapping"),
    ([("k", {"a": float("nan")}, None)], "not JSON-serializable"),
    ([("k", {"a": _deep(300)}, None)], "value nests more than 256 levels deep"),
    ([("k", {"a": 1}, "yesterday")], "timestamp"),
    ([("k", {"a": 1}, 1), ("k", {"a": 1}, -1)], "record 1 .* timestamp must be non-negative"),
    ([(2**64, {"a": 1}, None)], "key 18446744073709551616 does not fit in 64 bits"),
    ([{"key": "k", "vaule": {}}], "expected keys key, value, timestamp"),
])
def test_bad_records_send_nothing(kafka: KafkaSource, records: list[Any], says: str) -> None:
    t = _topic()
    kafka.create_topic(t, 1)
    with pytest.raises(InvalidRecordError, match=says):
        kafka.append_batch(t, records)
    assert kafka.end_offsets(t) == {0: 0}


def test_an_unreachable_broker_is_named_with_how_long_it_was_tried() -> None:
    src = KafkaSource("127.0.0.1:1", timeout_s=1.0)
    with pytest.raises(KafkaUnavailableError, match=r"cannot reach Kafka at 127\.0\.0\.1:1 .* tried for 1 s"):
        src.list_topics()
    assert issubclass(KafkaUnavailableError, KafkaError)


def test_bad_bootstrap_servers_are_refused_at_once() -> None:
    with pytest.raises(ValueError, match="bootstrap_servers"):
        KafkaSource("")
