"""The ``iqkafka`` Python streaming data source: Spark reads Kafka topics without the spark-sql-kafka jar.

It keeps the contract of Spark's own Kafka source, so a checkpoint means the
same thing either way: offsets are ``{topic: {"<partition>": next_offset}}``
(exclusive ends) plus ``"@topic_ids": {topic: id}`` where the broker has
topic ids (KIP-516: a topic deleted and re-created is caught by its new id), each micro-batch reads exactly the ranges between two such
offsets, one input partition per topic-partition range (``assign`` + seek,
no consumer group, nothing committed to Kafka), partitions added to a topic
are read from their start, and the columns are the embedded log's: key, the
value fields, timestamp, topic, partition, offset.

Options: ``bootstrapServers``, ``topics`` (comma list), ``valueSchema``,
``keyType``, ``includeHeaders`` (``true``: a ``headers`` column, as Spark's own source), ``startingOffsets`` (``earliest`` default, ``latest``, or JSON
``{"topic": {"0": 42}}`` with -2/-1 for earliest/latest, as Spark's),
``maxOffsetsPerTrigger``, ``cutLedger``/``cutLedgerRef`` and ``cutMaxAgeMs``
(shared batch cuts: ``batch_cuts.py``), and any ``kafka.<name>`` librdkafka
setting (``kafka.security.protocol``, ``kafka.sasl.*``, …) for the consumers.

Errors carry the stable codes of ``stream_rows``: a missing topic is
``MISSING_SOURCE_TOPIC`` (KIP-662); records the checkpoint read that are
gone (a topic recreated shorter, retention past unread records) are
``SOURCE_TRUNCATED``. A value that is not a JSON object reads as all-null
fields; such records are counted and logged per task, never a crash.
"""

from __future__ import annotations

import json
import logging
import sys
import time
from collections.abc import Iterator, Sequence
from typing import Any

from pyspark.sql.datasource import DataSource, DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadLimit, ReadMaxRows
from pyspark.sql.types import StructType

from .batch_cuts import SharedCuts, batch_ends
from .stream_rows import (
    MISSING_SOURCE_TOPIC,
    SOURCE_TRUNCATED,
    has_headers,
    parse_value_schema,
    row_converter,
    slices,
)
from .stream_rows import stream_schema as _stream_schema

__all__ = ["IqKafkaDataSource", "IqKafkaStreamReader", "source_options", "read_timeout_s"]

log = logging.getLogger(__name__)

#: The reserved offsets entry ``{topic: topic id}``: a topic re-created under its name is caught before it is
#: read, even when the new topic already holds more records than the checkpoint read ("@" is no topic name).
TOPIC_IDS_KEY = "@topic_ids"

#: How long one task may wait for the records its range promises before it fails loudly.
read_timeout_s = 120.0


def source_options(bootstrap_servers: str, options: dict[str, Any] | None) -> dict[str, str]:
    """KafkaSource settings as data source options (strings; client settings as ``kafka.<name>``)."""
    out = {"bootstrapServers": bootstrap_servers}
    for k, v in (options or {}).items():
        out[k if k.startswith("kafka.") else f"kafka.{k}"] = str(v)
    return out


class _Range(InputPartition):
    """One task's work: offset ranges ``(topic, partition, start, end, None)`` (see ``stream_rows.slices``)."""

    def __init__(self, ranges: list[tuple[str, int, int, int, None]]) -> None:
        super().__init__(tuple(ranges))
        self.ranges = ranges


class IqKafkaDataSource(DataSource):
    @classmethod
    def name(cls) -> str:
        return "iqkafka"

    def schema(self) -> StructType:
        return _stream_schema(parse_value_schema(self.options.get("valueSchema", "value STRING")),
                              self.options.get("keyType", "string"),
                              self.options.get("includeHeaders", "false").lower() == "true")

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        return IqKafkaStreamReader(schema, self.options)


class IqKafkaStreamReader(DataSourceStreamReader):
    """Driver side: offsets and planning (one long-lived client); worker side: ``read`` of one task's ranges."""

    def __init__(self, schema: StructType, options: Any) -> None:
        self.schema = schema
        self.servers = options.get("bootstrapServers") or ""
        if not self.servers:
            raise ValueError("iqkafka source: option 'bootstrapServers' (host:port[,host:port]) is required")
        self.topics = [t.strip() for t in options.get("topics", "").split(",") if t.strip()]
        if not self.topics:
            raise ValueError("iqkafka source: option 'topics' (comma-separated) is required")
        self.client_options = {k[len("kafka."):]: v for k, v in options.items() if k.lower().startswith("kafka.")}
        mo = options.get("maxOffsetsPerTrigger")
        self.max_offsets = int(mo) if mo else None
        if self.max_offsets is not None and self.max_offsets < 1:
            raise ValueError(f"iqkafka source: maxOffsetsPerTrigger must be >= 1, got {mo}")
        self.starting = options.get("startingOffsets", "earliest")
        self._client: Any = None
        self.cuts = SharedCuts.from_options(options, "iqkafka")  # None: this query plans its batches alone
        if self.starting not in ("earliest", "latest"):
            try:
                parsed = json.loads(self.starting)
            except ValueError:
                parsed = None
            if not isinstance(parsed, dict) or not all(isinstance(v, dict) for v in parsed.values()):
                raise ValueError("iqkafka source: startingOffsets must be earliest, latest or JSON like "
                                 f'{{"topic": {{"0": 42}}}}, got {self.starting!r}')

    # -- driver side --------------------------------------------------------------------------
    def _kafka(self) -> Any:
        if self._client is None:
            from stores.log.kafka import KafkaClient

            self._client = KafkaClient(self.servers, self.client_options)
        return self._client

    def _require(self, topics: dict[str, int]) -> None:
        missing = [t for t in self.topics if t not in topics]
        if missing:
            raise RuntimeError(f"{MISSING_SOURCE_TOPIC}: source topic(s) {', '.join(map(repr, missing))} do not "
                               f"exist in Kafka at {self.servers}")

    def initialOffset(self) -> dict:
        kafka = self._kafka()
        topics = kafka.list_topics()
        self._require(topics)
        given = json.loads(self.starting) if self.starting not in ("earliest", "latest") else {}
        out: dict[str, Any] = {}
        for t in self.topics:
            ends = kafka.end_offsets(t)
            lows = kafka.low_offsets(t)
            chosen = {}
            for p in range(topics[t]):
                want = given.get(t, {}).get(str(p), -1 if self.starting == "latest" else -2)
                want = int(want)
                chosen[str(p)] = ends[p] if want == -1 else lows[p] if want == -2 else want
            out[t] = chosen
        ids = kafka.topic_ids(self.topics)
        if ids:
            out[TOPIC_IDS_KEY] = ids
        return out

    def getDefaultReadLimit(self) -> ReadLimit:
        return ReadMaxRows(self.max_offsets) if self.max_offsets else ReadAllAvailable()

    def latestOffset(self, start: dict, limit: ReadLimit) -> dict:
        looked_at = time.time()  # before the broker's ends are read (batch_cuts: which cuts it may trust)
        kafka = self._kafka()
        topics = kafka.list_topics()
        self._require(topics)
        ids = kafka.topic_ids(self.topics)
        for t, was in (start.get(TOPIC_IDS_KEY) or {}).items():
            now = ids.get(t)
            if now is not None and now != was:
                raise RuntimeError(f"{SOURCE_TRUNCATED}: topic {t!r} was deleted and re-created since the checkpoint "
                                   f"read it (topic id {was}, now {now}): the records it read are gone")
        avail: dict[tuple[str, int], tuple[int, int]] = {}
        for t in self.topics:
            ends = kafka.end_offsets(t)
            seen = {int(p): int(o) for p, o in start.get(t, {}).items()}
            lost = [p for p in seen if p not in ends]
            if lost:
                raise RuntimeError(f"{SOURCE_TRUNCATED}: topic {t!r} lost partition(s) {lost} since the checkpoint "
                                   "(deleted and recreated with fewer partitions?)")
            for p, o in seen.items():
                if ends[p] < o:
                    raise RuntimeError(f"{SOURCE_TRUNCATED}: topic {t!r} partition {p} ends at offset {ends[p]}, "
                                       f"but the checkpoint has already read up to {o} (was the topic recreated?)")
            for p, e in ends.items():
                avail[(t, p)] = (seen.get(p, 0), e)  # a partition added since: read from its start
        max_rows = int(limit.max_rows) if isinstance(limit, ReadMaxRows) else None
        out: dict[str, Any] = batch_ends(self.topics, avail, max_rows, self.cuts, ids, looked_at)
        if ids:
            out[TOPIC_IDS_KEY] = ids
        return out

    def partitions(self, start: dict, end: dict) -> Sequence[InputPartition]:
        ranges = [(t, p, int(start.get(t, {}).get(str(p), 0)), e, None)
                  for t in self.topics
                  for p, e in sorted((int(p), int(e)) for p, e in end.get(t, {}).items())]
        return [_Range(group) for group in slices(ranges)]

    def commit(self, end: dict) -> None:
        """Nothing to release: offsets live in Spark's checkpoint, not in a consumer group."""

    def stop(self) -> None:
        if self.cuts is not None:
            self.cuts.close()
        if self._client is not None:
            self._client.close()
            self._client = None

    # -- worker side --------------------------------------------------------------------------
    def read(self, partition: InputPartition) -> Iterator[tuple]:
        from confluent_kafka import Consumer, KafkaError, TopicPartition

        from stores.log.kafka import client_config

        task: _Range = partition  # type: ignore[assignment]
        convert = row_converter(self.schema)
        headers = has_headers(self.schema)
        consumer = Consumer({
            **client_config(self.servers, self.client_options), "group.id": "iqgate-reader",
            "enable.auto.commit": False, "allow.auto.create.topics": False, "enable.partition.eof": True,
            "auto.offset.reset": "error", "logger": logging.getLogger("iqgate.kafka"),
        })
        bad = 0
        try:
            for topic, part, start, end, _ in task.ranges:
                consumer.assign([TopicPartition(topic, part, start)])
                deadline = time.monotonic() + read_timeout_s
                pos = start
                while pos < end:
                    msgs = consumer.consume(min(10_000, end - pos), timeout=0.5)
                    for m in msgs:
                        err = m.error()
                        if err is not None:
                            if err.code() == KafkaError._PARTITION_EOF:
                                if m.offset() >= end:  # offsets up to end held no more records (markers)
                                    pos = end
                                continue
                            if err.code() in (KafkaError.UNKNOWN_TOPIC_OR_PART, KafkaError._UNKNOWN_TOPIC):
                                raise RuntimeError(f"{MISSING_SOURCE_TOPIC}: source topic {topic!r} disappeared "
                                                   f"while reading it from Kafka at {self.servers}")
                            if err.code() == KafkaError._AUTO_OFFSET_RESET or "OFFSET_OUT_OF_RANGE" in str(err):
                                raise RuntimeError(f"{SOURCE_TRUNCATED}: topic {topic!r} partition {part} no longer "
                                                   f"holds offsets {start}..{end - 1} (retention or a recreated "
                                                   f"topic): {err}")
                            raise RuntimeError(f"reading {topic}/{part} from Kafka at {self.servers}: {err}")
                        off = m.offset()
                        if off >= end:
                            pos = end
                            break
                        pos = off + 1
                        raw = m.value()
                        value = None
                        if raw is not None:
                            try:
                                value = json.loads(raw)
                            except (ValueError, RecursionError):  # not JSON, or nested past the worker's stack
                                value = None
                            if not isinstance(value, dict):
                                bad += 1
                                value = {}
                        key = m.key()
                        ts = m.timestamp()[1]
                        if headers:  # confluent-kafka: [(name, bytes or None)] or None
                            yield convert(key, value, ts if ts >= 0 else None, topic, part, off, m.headers())
                        else:
                            yield convert(key, value,  # raw bytes: the key type decides (text, or bytes for binary)
                                          ts if ts >= 0 else None, topic, part, off)
                    if pos < end and time.monotonic() > deadline:
                        raise RuntimeError(f"reading {topic}/{part} offsets {start}..{end - 1} from Kafka at "
                                           f"{self.servers}: stuck at {pos} for {read_timeout_s:.0f} s")
        finally:
            consumer.close()
            if bad:
                print(f"iqgate kafka source: {bad} record(s) in {task.ranges} had a value that is not a JSON object;"
                      " their value fields read as null", file=sys.stderr, flush=True)
