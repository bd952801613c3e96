"""A Kafka topic deleted and re-created under its name is caught by its topic id (issue 21 item 4), no Spark needed.

Offsets alone cannot tell: a re-created topic that already holds more records
than the checkpoint read looks like the same topic grown. Its id (KIP-516)
changes, so the ``iqkafka`` reader refuses to read on, with SOURCE_TRUNCATED.
"""

from __future__ import annotations

import uuid
from typing import Any

import pytest
from pyspark.sql.streaming.datasource import ReadAllAvailable

from stores import KafkaSource
from stores.log.kafka import KafkaUnavailableError
from stores.pipeline.kafka_source import TOPIC_IDS_KEY, IqKafkaStreamReader
from stores.pipeline.stream_rows import SOURCE_TRUNCATED, parse_value_schema, stream_schema


def _reader(servers: str, topic: str) -> IqKafkaStreamReader:
    schema = stream_schema(parse_value_schema("n BIGINT"), "string")
    return IqKafkaStreamReader(schema, {"bootstrapServers": servers, "topics": topic, "valueSchema": "n BIGINT"})


def test_a_recreated_topic_with_more_records_is_caught_by_its_id(kafka_broker: Any) -> None:
    src = KafkaSource(kafka_broker.bootstrap_servers)
    topic = f"ids-{uuid.uuid4().hex[:8]}"
    src.create_topic(topic, 2)
    src.append_batch(topic, [(f"k{i}", {"n": i}, None) for i in range(5)])
    reader = _reader(kafka_broker.bootstrap_servers, topic)
    try:
        start = reader.initialOffset()
        end = reader.latestOffset(start, ReadAllAvailable())
        assert set(end[TOPIC_IDS_KEY]) == {topic} and end[TOPIC_IDS_KEY] == start[TOPIC_IDS_KEY]
        assert sum(end[topic].values()) == 5
        assert reader.latestOffset(end, ReadAllAvailable()) == end  # the same topic: nothing new, no error
        src.delete_topic(topic)
        src.create_topic(topic, 2)
        src.append_batch(topic, [(f"k{i}", {"n": i}, None) for i in range(40)])  # more than the checkpoint read
        with pytest.raises(RuntimeError, match=rf"{SOURCE_TRUNCATED}: topic '{topic}' was deleted and re-created "
                                               r"since the checkpoint read it \(topic id \S+, now \S+\)"):
            reader.latestOffset(end, ReadAllAvailable())
        legacy = {topic: end[topic]}  # a checkpoint written before ids were kept: offsets alone, as before
        assert sum(reader.latestOffset(legacy, ReadAllAvailable())[topic].values()) == 40
    finally:
        reader.stop()
        src.close()


def test_topic_ids_of_an_unreachable_broker_say_so() -> None:
    src = KafkaSource("127.0.0.1:1", timeout_s=1.0)
    with pytest.raises(KafkaUnavailableError, match=r"cannot reach Kafka at 127\.0\.0\.1:1"):
        src.client.topic_ids(["orders"])
