"""Kafka as a source log, on confluent-kafka (librdkafka): topics, end offsets, producing with positions.

``KafkaSource`` is what a pipeline names (``Topology(spark, KafkaSource("host:9092"))``) and what the
runtime and the CLI ask about topics and offsets; the Spark side that reads the records is
``stores.pipeline.kafka_source``. No pyspark here: producers and the serving process use this.

Decisions worth knowing:

- Metadata is only ever requested for *all* topics. Asking a broker about one named topic may create it
  (``auto.create.topics.enable``; Tansu always does), and a missing source topic must stay missing so
  KIP-662's MissingSourceTopicException can fire. Producers and consumers set
  ``allow.auto.create.topics=false`` for the same reason.
- End offsets come from the fetch path, not only from ListOffsets: some brokers (Tansu 0.6) report a high
  watermark that lags behind multi-record batches. A probe consumer fetches from the listed end and takes
  the highest offset it sees; a lower bound is always safe (records arrive one trigger later), an upper
  bound never is.
- Producers use Kafka's murmur2 partitioner (librdkafka's default is CRC32), so a key lands where a Java
  producer would put it. Keys are written as UTF-8 text, values as compact JSON, timestamps as CreateTime.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import json
import logging
import threading
import time
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from .eventlog import TOPIC_NAME_RE, Record, TopicExistsError, UnknownTopicError
from .records import InvalidRecordError, check_record, record_headers, unpack_record, value_json

__all__ = ["KafkaSource", "KafkaClient", "KafkaUnavailableError", "KafkaError", "key_text", "client_config"]

DEFAULT_TIMEOUT_S = 10.0
_LOG = logging.getLogger("iqgate.kafka")  # librdkafka's own log lines go here, not to stderr
_PROBE_WAIT_S = 0.02


class KafkaError(Exception):
    """A Kafka operation failed; the message says which and where."""


class KafkaUnavailableError(KafkaError):
    """The brokers cannot be reached (they are named, and how long it was tried)."""


def client_config(bootstrap_servers: str, options: Mapping[str, Any] | None) -> dict[str, Any]:
    """librdkafka settings: the user's options (security.protocol, sasl.*, …) over ours.

    Spark's own Kafka source spells consumer options ``kafka.<name>``; both spellings are accepted.
    """
    if not isinstance(bootstrap_servers, str) or not bootstrap_servers.strip():
        raise ValueError(f"bootstrap_servers must be 'host:port[,host:port]', got {bootstrap_servers!r}")
    conf: dict[str, Any] = {"bootstrap.servers": bootstrap_servers.strip(), "log.connection.close": False}
    for k, v in (options or {}).items():
        conf[k[len("kafka."):] if k.startswith("kafka.") else k] = v
    return conf


def key_text(key: Any) -> bytes:
    """A record key as Kafka carries it here: UTF-8 text (integers as their decimal digits)."""
    return str(key).encode("utf-8")


@dataclass(frozen=True)
class KafkaSource:
    """Topics in Kafka as a pipeline's source (and a SourceLog for the runtime and the CLI).

    ``options`` are librdkafka client settings passed to every consumer, producer and admin client
    (``security.protocol``, ``sasl.mechanism``, ``sasl.username``, …; ``kafka.``-prefixed names work too).
    ``partitions`` optionally pins a topic's partition count (otherwise read from the brokers).
    """

    bootstrap_servers: str
    options: Mapping[str, Any] | None = None
    partitions_override: Mapping[str, int] | None = None
    timeout_s: float = DEFAULT_TIMEOUT_S
    _client: list[KafkaClient] = field(default_factory=list, init=False, repr=False, compare=False, hash=False)

    def __post_init__(self) -> None:
        client_config(self.bootstrap_servers, self.options)  # validates early, with the field named

    @property
    def client(self) -> KafkaClient:
        if not self._client:
            self._client.append(KafkaClient(self.bootstrap_servers, self.options, timeout_s=self.timeout_s))
        return self._client[0]

    def describe(self) -> str:
        return f"Kafka at {self.bootstrap_servers}"

    # -- SourceLog --------------------------------------------------------------------------
    def list_topics(self) -> dict[str, int]:
        return self.client.list_topics()

    def has_topic(self, topic: str) -> bool:
        return topic in self.client.list_topics()

    def partitions(self, topic: str) -> int:
        pinned = (self.partitions_override or {}).get(topic)
        return pinned if pinned is not None else self.client.partitions(topic)

    def create_topic(self, name: str, partitions: int = 1, *, exist_ok: bool = False) -> None:
        self.client.create_topic(name, partitions, exist_ok=exist_ok)

    def delete_topic(self, name: str) -> None:
        self.client.delete_topic(name)

    def end_offsets(self, topic: str) -> dict[int, int]:
        return self.client.end_offsets(topic)

    def last_offsets(self, topic: str) -> dict[int, int]:
        return {p: e - 1 for p, e in self.end_offsets(topic).items() if e > 0}

    def append_batch(self, topic: str, records: Iterable[Any]) -> list[tuple[int, int]]:
        return self.client.produce(topic, records)

    def read(self, topic: str, partition: int, start: int, end: int) -> Iterator[Record]:
        return self.client.read(topic, partition, start, end)

    def low_offsets(self, topic: str) -> dict[int, int]:
        """``{partition: first offset still held}`` (retention deleted the records before it)."""
        return self.client.low_offsets(topic)

    def close(self) -> None:
        if self._client:
            self._client.pop().close()


class KafkaClient:
    """Admin, per-call probe consumers for end offsets, and a producer; thread-safe, closed by ``close``."""

    def __init__(self, bootstrap_servers: str, options: Mapping[str, Any] | None = None, *,
                 timeout_s: float = DEFAULT_TIMEOUT_S) -> None:
        from confluent_kafka.admin import AdminClient

        self.servers = bootstrap_servers
        self.conf = client_config(bootstrap_servers, options)
        self.timeout_s = timeout_s
        self._admin = AdminClient({**self.conf, "logger": _LOG})
        self._lock = threading.Lock()
        self._producer: Any = None

    # -- metadata -----------------------------------------------------------------------------
    def list_topics(self) -> dict[str, int]:
        """``{topic: partitions}`` of every topic but Kafka's internal ones (``__…``)."""
        from confluent_kafka import KafkaException

        try:
            md = self._admin.list_topics(timeout=self.timeout_s)
        except KafkaException as exc:
            raise self._unavailable("list the topics", exc) from None
        return {name: len(t.partitions) for name, t in sorted(md.topics.items())
                if not name.startswith("__") and t.error is None}

    def partitions(self, topic: str) -> int:
        n = self.list_topics().get(topic)
        if n is None:
            raise UnknownTopicError(f"topic {topic!r} does not exist in Kafka at {self.servers}")
        return n

    def create_topic(self, name: str, partitions: int = 1, *, exist_ok: bool = False) -> None:
        """Create ``name`` and wait until the brokers list it; ``exist_ok`` accepts one with the same partitions."""
        from confluent_kafka import KafkaException
        from confluent_kafka.admin import NewTopic

        if not isinstance(name, str) or not TOPIC_NAME_RE.match(name):
            raise ValueError(f"invalid topic name {name!r}: use 1-249 of A-Z a-z 0-9 . _ -")
        if isinstance(partitions, bool) or not isinstance(partitions, int) or partitions < 1:
            raise ValueError(f"topic {name!r}: partitions must be an integer >= 1, got {partitions!r}")
        have = self.list_topics().get(name)
        if have is None:
            future = self._admin.create_topics([NewTopic(name, partitions, 1)])[name]
            try:
                future.result(timeout=self.timeout_s)
            except KafkaException as exc:
                if "TOPIC_ALREADY_EXISTS" not in str(exc):
                    raise KafkaError(f"cannot create topic {name!r} in Kafka at {self.servers}: {exc}") from None
            have = self._wait_for(name, present=True)
        elif not exist_ok:
            raise TopicExistsError(f"topic {name!r} already exists in Kafka at {self.servers}")
        if have != partitions:
            raise TopicExistsError(f"topic {name!r} exists with {have} partitions, not {partitions}")

    def delete_topic(self, name: str) -> None:
        from confluent_kafka import KafkaException

        if name not in self.list_topics():
            raise UnknownTopicError(f"topic {name!r} does not exist in Kafka at {self.servers}")
        try:
            self._admin.delete_topics([name])[name].result(timeout=self.timeout_s)
        except KafkaException as exc:
            raise KafkaError(f"cannot delete topic {name!r} in Kafka at {self.servers}: {exc}") from None
        self._wait_for(name, present=False)

    def _wait_for(self, name: str, *, present: bool) -> int | None:
        deadline = time.monotonic() + self.timeout_s
        for _ in range(10_000):  # bounded; the clock ends it
            n = self.list_topics().get(name)
            if (n is not None) == present:
                return n
            if time.monotonic() > deadline:
                break
            time.sleep(0.05)
        raise KafkaError(f"topic {name!r} did not {'appear' if present else 'disappear'} in Kafka at "
                         f"{self.servers} within {self.timeout_s:.0f} s")

    # -- offsets ------------------------------------------------------------------------------
    def end_offsets(self, topic: str) -> dict[int, int]:
        """``{partition: next offset}``, read by fetching from the listed high watermark until each partition's EOF.

        The listed watermark can lag (Tansu lists a multi-record batch's base
        offset), so a fetch from it reads whatever follows; the fetch is over
        for a partition when librdkafka reports its end (partition EOF), not
        after a fixed wait: a probe that gave up early on a loaded machine
        reported ends lower than offsets already read, which looked like a
        truncated topic.
        """
        from confluent_kafka import KafkaError as RdKafkaError
        from confluent_kafka import KafkaException, TopicPartition

        n = self.partitions(topic)
        with self._probe_consumer() as c:
            try:
                ends = {p: c.get_watermark_offsets(TopicPartition(topic, p), timeout=self.timeout_s,
                                                   cached=False)[1] for p in range(n)}
                c.assign([TopicPartition(topic, p, max(e, 0)) for p, e in ends.items()])
                pending = set(ends)
                deadline = time.monotonic() + self.timeout_s
                while pending and time.monotonic() < deadline:
                    for m in c.consume(10_000, timeout=_PROBE_WAIT_S):
                        if m.topic() != topic:
                            continue
                        err = m.error()
                        if err is None:
                            ends[m.partition()] = max(ends[m.partition()], m.offset() + 1)
                        elif err.code() == RdKafkaError._PARTITION_EOF:
                            ends[m.partition()] = max(ends[m.partition()], m.offset())
                            pending.discard(m.partition())
            except KafkaException as exc:
                raise self._unavailable(f"read the end offsets of {topic!r}", exc) from None
        if pending:
            raise KafkaUnavailableError(
                f"cannot reach Kafka at {self.servers} to read the end offsets of {topic!r}: partition(s) "
                f"{sorted(pending)} did not answer within {self.timeout_s:.0f} s")
        return ends

    def topic_ids(self, topics: list[str]) -> dict[str, str]:
        """``{topic: topic id}`` (KIP-516): a topic deleted and re-created under the same name gets a new id.

        Empty for a broker that does not report ids (they are then not checked); a broker that cannot be
        reached raises as the other calls do.
        """
        from confluent_kafka import KafkaException, TopicCollection

        if not topics:
            return {}
        try:
            futures = self._admin.describe_topics(TopicCollection(list(topics)), request_timeout=self.timeout_s)
            out = {}
            for t, f in futures.items():
                tid = getattr(f.result(timeout=self.timeout_s), "topic_id", None)
                if tid is not None and str(tid) not in ("", "AAAAAAAAAAAAAAAAAAAAAA"):  # the zero Uuid: unknown
                    out[t] = str(tid)
            return out
        except KafkaException as exc:
            err = exc.args[0] if exc.args else None
            code = err.code() if hasattr(err, "code") else None
            from confluent_kafka import KafkaError as RdKafkaError

            if code in (RdKafkaError._TRANSPORT, RdKafkaError._ALL_BROKERS_DOWN, RdKafkaError._TIMED_OUT):
                raise self._unavailable(f"describe the topics {sorted(topics)}", exc) from None
            return {}  # an old broker, or a topic gone between two calls (the caller sees it missing next)
        except concurrent.futures.TimeoutError:
            raise KafkaUnavailableError(f"cannot reach Kafka at {self.servers} to describe the topics "
                                        f"{sorted(topics)}: no answer within {self.timeout_s:.0f} s") from None
        except (TypeError, NotImplementedError):
            return {}

    def low_offsets(self, topic: str) -> dict[int, int]:
        """``{partition: first offset still held}`` (records before it were deleted by retention)."""
        from confluent_kafka import KafkaException, TopicPartition

        n = self.partitions(topic)
        with self._probe_consumer() as c:
            try:
                return {p: c.get_watermark_offsets(TopicPartition(topic, p), timeout=self.timeout_s,
                                                   cached=False)[0] for p in range(n)}
            except KafkaException as exc:
                raise self._unavailable(f"read the low offsets of {topic!r}", exc) from None

    @contextlib.contextmanager
    def _probe_consumer(self) -> Iterator[Any]:
        """A consumer for one call, closed after it: a consumer that keeps a topic in its metadata after the topic
        is deleted can crash librdkafka (seen with Tansu 0.6: a segfault in the process), so none outlives a call."""
        from confluent_kafka import Consumer

        c = Consumer({
            **self.conf, "logger": _LOG, "group.id": "iqgate-probe", "enable.auto.commit": False,
            "allow.auto.create.topics": False, "auto.offset.reset": "latest", "fetch.wait.max.ms": 10,
            "enable.partition.eof": True, "socket.timeout.ms": int(self.timeout_s * 1000),
        })
        try:
            yield c
        finally:
            c.close()

    # -- reading -------------------------------------------------------------------------------
    def read(self, topic: str, partition: int, start: int, end: int) -> Iterator[Record]:
        """The records at offsets [start, end) of one partition (keys as text, values parsed from JSON).

        For tools and oracles: the pipeline reads through ``stores.pipeline.kafka_source``.
        """
        for offset, key, raw, ts, headers in self.read_raw(topic, partition, start, end):
            yield Record(topic, partition, offset, None if key is None else key.decode("utf-8", "replace"),
                         None if raw is None else json.loads(raw), ts, headers)

    def read_raw(self, topic: str, partition: int, start: int, end: int) -> Iterator[tuple[Any, ...]]:
        """``(offset, key bytes, value bytes, timestamp ms, headers)`` of the records at offsets [start, end).

        A read that makes no progress for ``timeout_s`` fails saying where it is stuck; one that keeps
        reading may take as long as it needs (a stream scan of a whole topic). The consumer is closed when
        the generator ends or is closed early.
        """
        from confluent_kafka import Consumer, TopicPartition
        from confluent_kafka import KafkaError as RdKafkaError

        if end <= start:
            return
        consumer = Consumer({**self.conf, "logger": _LOG, "group.id": "iqgate-read", "enable.auto.commit": False,
                             "allow.auto.create.topics": False, "enable.partition.eof": True,
                             "auto.offset.reset": "error"})
        try:
            consumer.assign([TopicPartition(topic, partition, start)])
            deadline = time.monotonic() + self.timeout_s
            pos = start
            while pos < end:
                if time.monotonic() > deadline:
                    raise KafkaError(f"reading {topic}/{partition} [{start}, {end}) from Kafka at {self.servers}: "
                                     f"stuck at offset {pos} for {self.timeout_s:.0f} s")
                for m in consumer.consume(min(10_000, end - pos), timeout=0.2):
                    err = m.error()
                    if err is not None:
                        if err.code() == RdKafkaError._PARTITION_EOF:
                            if m.offset() >= end:
                                pos = end
                            continue
                        raise KafkaError(f"reading {topic}/{partition} from Kafka at {self.servers}: {err}")
                    if m.offset() >= end:
                        pos = end
                        break
                    pos = m.offset() + 1
                    deadline = time.monotonic() + self.timeout_s  # progress: the clock starts again
                    yield (m.offset(), m.key(), m.value(), m.timestamp()[1],
                           tuple((n, v) for n, v in (m.headers() or ())))
        finally:
            consumer.close()

    def offsets_for_times(self, topic: str, times: Mapping[int, int]) -> dict[int, int | None]:
        """Kafka's offsetsForTimes: per partition the first offset whose record timestamp is at or after the time
        (None: no such record yet). Exact for any order of timestamps: no earlier record is as late."""
        from confluent_kafka import KafkaException, TopicPartition

        if not times:
            return {}
        with self._probe_consumer() as c:
            try:
                got = c.offsets_for_times([TopicPartition(topic, p, int(t)) for p, t in sorted(times.items())],
                                          timeout=self.timeout_s)
            except KafkaException as exc:
                raise self._unavailable(f"look up offsets by time in {topic!r}", exc) from None
        out: dict[int, int | None] = {}
        for tp in got:
            if tp.error is not None:
                raise KafkaError(f"Kafka at {self.servers} failed to look up offsets by time in {topic}/"
                                 f"{tp.partition}: {tp.error}")
            out[tp.partition] = tp.offset if tp.offset >= 0 else None
        return out

    # -- producing ----------------------------------------------------------------------------
    def produce(self, topic: str, records: Iterable[Any]) -> list[tuple[int, int]]:
        """Write records, wait for every delivery report; ``(partition, offset)`` of each, in order.

        Records are checked before anything is sent (bad input sends nothing). Kafka has no all-or-nothing
        without transactions: if the brokers refuse some records, the error says how many were written.
        """
        from confluent_kafka import KafkaException

        n = self.partitions(topic)
        checked = []
        for i, rec in enumerate(records):
            key, value, ts = unpack_record(rec, i)
            where = f"record {i} of topic {topic!r}"
            if key is None:
                raise InvalidRecordError(f"{where}: the key is null")
            checked.append((*check_record(key, value, ts, where), record_headers(rec, where)))
        out: list[tuple[int, int] | None] = [None] * len(checked)
        failures: list[str] = []

        def delivered(i: int) -> Any:
            def report(err: Any, msg: Any) -> None:
                if err is not None:
                    failures.append(f"record {i}: {err}")
                else:
                    out[i] = (msg.partition(), msg.offset())
            return report

        with self._lock:
            producer = self._get_producer()
            try:
                for i, (key, value, ts, hs) in enumerate(checked):
                    extra = {"headers": list(hs)} if hs else {}  # Kafka record headers, in order
                    for _ in range(1000):  # bounded: a full local queue drains in milliseconds
                        try:
                            producer.produce(topic, key=key_text(key), value=value_json(value), timestamp=ts,
                                             on_delivery=delivered(i), **extra)
                            break
                        except BufferError:
                            producer.poll(0.05)
                    producer.poll(0)
                left = producer.flush(self.timeout_s)
            except KafkaException as exc:
                raise self._unavailable(f"produce to {topic!r}", exc) from None
        written = sum(1 for o in out if o is not None)
        if left or failures or written != len(checked):
            why = "; ".join(failures[:3]) or f"{left} record(s) still unacknowledged after {self.timeout_s:.0f} s"
            raise KafkaError(f"{written} of {len(checked)} records were written to {topic!r} ({n} partitions) in "
                             f"Kafka at {self.servers}: {why}")
        return [o for o in out if o is not None]

    def _get_producer(self) -> Any:
        from confluent_kafka import Producer

        if self._producer is None:
            self._producer = Producer({
                **self.conf, "logger": _LOG, "partitioner": "murmur2_random", "allow.auto.create.topics": False, "acks": "all",
                "linger.ms": 5, "message.timeout.ms": int(self.timeout_s * 1000),
            })
        return self._producer

    # -- errors and teardown ------------------------------------------------------------------
    def _unavailable(self, what: str, exc: Exception) -> KafkaError:
        text = str(exc)
        if any(code in text for code in ("_TRANSPORT", "_TIMED_OUT", "_ALL_BROKERS_DOWN", "_RESOLVE")):
            return KafkaUnavailableError(
                f"cannot reach Kafka at {self.servers} to {what}: tried for {self.timeout_s:.0f} s ({text}); "
                "check bootstrap_servers and that the brokers are up")
        return KafkaError(f"Kafka at {self.servers} failed to {what}: {text}")

    def close(self) -> None:
        with self._lock:
            if self._producer is not None:
                self._producer.flush(1.0)
                self._producer = None
