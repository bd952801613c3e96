"""Where changelogs live: a topic per store on the pipeline's own log (EventLog or Kafka), and how to tail it.

``ChangelogLog`` is the small surface the writer and the replicas need:
make a topic with one partition per store partition, append records to
chosen partitions (all-or-nothing on the EventLog; on Kafka each delivery is
awaited and a failure fails the batch before the store commits), read the
last record of a partition, and tail partitions from given offsets while
reporting where each ends (for lag).
"""

from __future__ import annotations

import logging
import re
import threading
import time
from collections.abc import Iterable, Iterator, Mapping
from typing import Any, NamedTuple, Protocol

from ..log.eventlog import EventLog, UnknownTopicError
from ..log.kafka import KafkaClient, KafkaError, KafkaSource, client_config
from .record import ChangelogRecord

__all__ = ["ChangelogLog", "EventLogChangelog", "KafkaChangelog", "Item", "Tail", "changelog_topic",
           "store_of_topic", "parse_changelog_topic", "generation_topics", "changelog_log_for", "SUFFIX"]

log = logging.getLogger(__name__)
_LOG = logging.getLogger("iqgate.kafka")
SUFFIX = "-changelog"
GENERATION_MARK = ".g"  # store names are letters, digits and _: a '.' cannot be part of one
_STORE_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
READ_MAX = 500  # records per partition per poll: bounds a poll's memory and time
POLL_PAUSE_S = 0.02


def changelog_topic(application_id: str, store: str, generation: int = 0) -> str:
    """Kafka Streams' name ``<application_id>-<store>-changelog`` for generation 0 (every store until it is first
    rebuilt, and every changelog written before generations were logged); ``<application_id>-<store>.g<N>-changelog``
    for generation N >= 1 (a rebuild's own topic: it starts again at batch 0, beside the generation it replaces)."""
    if isinstance(generation, bool) or not isinstance(generation, int) or generation < 0:
        raise ValueError(f"store {store!r}: a generation is an int >= 0, got {generation!r}")
    mark = f"{GENERATION_MARK}{generation}" if generation else ""
    return f"{application_id}-{store}{mark}{SUFFIX}"


def parse_changelog_topic(application_id: str, topic: str) -> tuple[str, int] | None:
    """``(store, generation)`` of one of this application's changelog topics; None for any other topic."""
    prefix = f"{application_id}-"
    if not (topic.startswith(prefix) and topic.endswith(SUFFIX)) or len(topic) <= len(prefix) + len(SUFFIX):
        return None
    middle = topic[len(prefix):-len(SUFFIX)]
    store, mark, gen = middle.rpartition(GENERATION_MARK)
    if not mark:
        store, generation = middle, 0
    elif gen.isdigit() and gen.isascii() and not gen.startswith("0"):
        generation = int(gen)
    else:
        return None
    return (store, generation) if _STORE_NAME.fullmatch(store) else None


def store_of_topic(application_id: str, topic: str) -> str | None:
    """The store a changelog topic belongs to, whatever its generation (None if ``topic`` is not one of this
    application's changelogs)."""
    parsed = parse_changelog_topic(application_id, topic)
    return None if parsed is None else parsed[0]


def generation_topics(application_id: str, topics: Iterable[str]) -> dict[str, dict[int, str]]:
    """``{store: {generation: topic}}`` of this application's changelog topics among ``topics``."""
    out: dict[str, dict[int, str]] = {}
    for t in topics:
        parsed = parse_changelog_topic(application_id, t)
        if parsed is not None:
            out.setdefault(parsed[0], {})[parsed[1]] = t
    return out


class Item(NamedTuple):
    """One changelog record read back: where it is, when it was written, what it says."""

    partition: int
    offset: int
    timestamp: int | None
    record: ChangelogRecord


class Tail(Protocol):
    def poll(self, max_wait_s: float) -> list[Item]:
        """The next records (in offset order per partition), waiting up to ``max_wait_s`` for any."""
        ...

    def ends(self) -> dict[int, int]:
        """``{partition: end offset}`` as last seen (exclusive ends: the lag is end - next offset)."""
        ...

    def positions(self) -> dict[int, int]:
        """``{partition: next offset to read}`` (past Kafka's transaction markers once they were read over)."""
        ...

    def close(self) -> None: ...


class ChangelogLog(Protocol):
    def describe(self) -> str: ...

    def list_topics(self) -> dict[str, int]: ...

    def ensure(self, topic: str, partitions: int) -> None:
        """Create the topic with ``partitions`` if missing (an existing one must have that many)."""
        ...

    def delete(self, topic: str) -> bool:
        """Delete the topic if it exists (False if it did not): a rebuild begun again, a generation swapped out."""
        ...

    def topic_id(self, topic: str) -> str | None:
        """An id that changes when the topic is deleted and created again (None: missing, or the log cannot tell)."""
        ...

    def prepare(self, topic: str) -> None:
        """Before a writer reads the tail: on Kafka, fence any earlier writer of ``topic`` and end its open
        transaction, so the tail read next is final."""
        ...

    def append(self, topic: str, records: Mapping[int, ChangelogRecord]) -> dict[int, int]:
        """Write one record per named partition, durably; the offset of each. Raises if any was not written."""
        ...

    def last(self, topic: str, partition: int) -> Item | None:
        """The last record of a partition (None if it is empty)."""
        ...

    def tail(self, topic: str, starts: Mapping[int, int]) -> Tail:
        """Read partitions onwards from ``{partition: offset}``."""
        ...

    def low_offsets(self, topic: str) -> dict[int, int]:
        """``{partition: first offset still held}`` (0 unless records were deleted)."""
        ...

    def end_offsets(self, topic: str) -> dict[int, int]:
        """``{partition: next offset}`` (exclusive ends; on Kafka they count transaction markers)."""
        ...

    def read_from(self, topic: str, partition: int, offset: int, limit: int) -> list[Item]:
        """Up to ``limit`` records of one partition from the first at or after ``offset``, as far as the partition
        holds them now (no waiting for more): a live feed's look-ups of a batch by offset (``stores.live``)."""
        ...


def changelog_log_for(source: Any, *, fsync: bool = True) -> ChangelogLog | None:
    """The changelog log that goes with a pipeline's source log: the same EventLog, or the same Kafka cluster.

    ``fsync=False`` (the stores are not synced per commit either) makes embedded-log appends crash-safe
    but not power-loss-safe; Kafka's durability is the brokers' (acks=all), whatever this says.
    """
    if isinstance(source, EventLog):
        return EventLogChangelog(source, fsync=fsync)
    if isinstance(source, KafkaSource):
        return KafkaChangelog(source.bootstrap_servers, source.options)
    return None


# -- the embedded EventLog ------------------------------------------------------------------------------
def _lazy_value(record: ChangelogRecord) -> Iterator[tuple[str, dict[str, Any], None]]:
    yield str(record.batch_id), record.to_value(), None


class EventLogChangelog:
    def __init__(self, log_: EventLog, *, fsync: bool = True) -> None:
        self.log = log_
        self.fsync = fsync

    def describe(self) -> str:
        return self.log.describe()

    def list_topics(self) -> dict[str, int]:
        return self.log.list_topics()

    def ensure(self, topic: str, partitions: int) -> None:
        self.log.create_topic(topic, partitions=partitions, exist_ok=True)

    def delete(self, topic: str) -> bool:
        try:
            self.log.delete_topic(topic)
        except UnknownTopicError:
            return False
        return True

    def topic_id(self, topic: str) -> str | None:
        try:
            return self.log.epoch(topic)
        except UnknownTopicError:
            return None

    def prepare(self, topic: str) -> None:
        """Nothing to fence: an EventLog append is all-or-nothing across partitions."""

    def append(self, topic: str, records: Mapping[int, ChangelogRecord]) -> dict[int, int]:
        # one partition's value at a time: only the encoded lines are kept (a big batch's value is large)
        return self.log.append_to_partitions(topic, {p: _lazy_value(r) for p, r in records.items()},
                                             fsync=self.fsync)

    def last(self, topic: str, partition: int) -> Item | None:
        end = self.log.end_offsets(topic).get(partition, 0)
        if end <= 0:
            return None
        for off, _key, value, ts in self.log.read_raw(topic, partition, end - 1, end):
            return Item(partition, off, ts, ChangelogRecord.from_value(value, f"{topic}/{partition}@{off}"))
        return None

    def tail(self, topic: str, starts: Mapping[int, int]) -> Tail:
        return _EventLogTail(self.log, topic, starts)

    def low_offsets(self, topic: str) -> dict[int, int]:
        return self.log.low_offsets(topic)

    def end_offsets(self, topic: str) -> dict[int, int]:
        return self.log.end_offsets(topic)

    def read_from(self, topic: str, partition: int, offset: int, limit: int) -> list[Item]:
        end = min(self.log.end_offsets(topic).get(partition, 0), offset + max(1, limit))
        start = max(offset, self.log.low_offsets(topic).get(partition, 0))
        return [Item(partition, off, ts, ChangelogRecord.from_value(value, f"{topic}/{partition}@{off}"))
                for off, _key, value, ts in self.log.read_raw(topic, partition, start, end)] if end > start else []


class _EventLogTail:
    def __init__(self, log_: EventLog, topic: str, starts: Mapping[int, int]) -> None:
        self.log, self.topic = log_, topic
        self.next = dict(starts)
        self._ends: dict[int, int] = {}

    def poll(self, max_wait_s: float) -> list[Item]:
        deadline = time.monotonic() + max_wait_s
        for _ in range(100_000):  # bounded; the clock ends it
            ends = self.log.end_offsets(self.topic)
            self._ends = {p: ends.get(p, 0) for p in self.next}
            out: list[Item] = []
            for p, start in sorted(self.next.items()):
                stop = min(ends.get(p, 0), start + READ_MAX)
                if stop <= start:
                    continue
                for off, _key, value, ts in self.log.read_raw(self.topic, p, start, stop):
                    out.append(Item(p, off, ts, ChangelogRecord.from_value(value, f"{self.topic}/{p}@{off}")))
                    self.next[p] = off + 1
            if out or time.monotonic() >= deadline:
                return out
            time.sleep(min(POLL_PAUSE_S, max(0.0, deadline - time.monotonic())))
        return []

    def ends(self) -> dict[int, int]:
        return dict(self._ends)

    def positions(self) -> dict[int, int]:
        return dict(self.next)

    def close(self) -> None:
        pass


# -- Kafka ------------------------------------------------------------------------------------------------
class KafkaChangelog:
    """Changelog topics in Kafka: one transaction per batch, so a batch's records are visible in every partition or
    in none (a pipeline killed mid-batch never leaves replicas with half a batch); ``assign()``-based readers.

    Each topic has its own transactional producer (``transactional.id`` = ``iqgate-<topic>``): a restarted
    pipeline fences the one it replaces and ends its open transaction before reading the changelog's tail.
    Readers are ``read_committed``; offsets count Kafka's transaction markers, so positions, not record offsets,
    say how far a reader has got.
    """

    def __init__(self, bootstrap_servers: str, options: Mapping[str, Any] | None = None,
                 timeout_s: float = 10.0, *, transaction_timeout_ms: int = 10_000) -> None:
        self.servers = bootstrap_servers
        self.options = dict(options or {})
        self.conf = client_config(bootstrap_servers, options)
        self.timeout_s = timeout_s
        self.transaction_timeout_ms = transaction_timeout_ms
        self._client: KafkaClient | None = None
        self._producers: dict[str, Any] = {}
        self._ensured: set[str] = set()
        self._lock = threading.Lock()  # the producers (held while one starts: init_transactions)
        self._client_lock = threading.Lock()
        self._closed = False

    @property
    def client(self) -> KafkaClient:
        with self._client_lock:
            self._check_open()
            if self._client is None:
                self._client = KafkaClient(self.servers, self.options, timeout_s=self.timeout_s)
            return self._client

    def _check_open(self) -> None:
        """Why: a background task (a changelog prepared, old generations deleted) that outlives ``close`` must not
        open a client or producer again, with threads and a transaction nobody ends."""
        if self._closed:
            raise KafkaError(f"the changelog connection to Kafka at {self.servers} is closed")

    def describe(self) -> str:
        return f"Kafka at {self.servers}"

    def list_topics(self) -> dict[str, int]:
        return self.client.list_topics()

    def ensure(self, topic: str, partitions: int) -> None:
        """Create the changelog with unlimited retention (a replica started later restores from its first record)."""
        if topic in self._ensured:
            return
        if topic not in self.client.list_topics():
            from confluent_kafka import KafkaException
            from confluent_kafka.admin import AdminClient, NewTopic

            admin = AdminClient({**self.conf, "logger": _LOG})
            future = admin.create_topics([NewTopic(topic, partitions, 1, config={"retention.ms": "-1"})])[topic]
            try:
                future.result(timeout=self.timeout_s)
            except KafkaException as exc:
                if "TOPIC_ALREADY_EXISTS" not in str(exc):
                    raise KafkaError(f"cannot create changelog {topic!r} in Kafka at {self.servers}: {exc}") from None
        self.client.create_topic(topic, partitions, exist_ok=True)  # waits until listed; checks the partitions
        self._ensured.add(topic)

    def delete(self, topic: str) -> bool:
        """Delete the topic (its transactional producer first: a later writer of a new topic starts afresh)."""
        with self._lock:
            producer = self._producers.pop(topic, None)
        if producer is not None:
            producer.flush(1.0)
        self._ensured.discard(topic)
        try:
            self.client.delete_topic(topic)
        except UnknownTopicError:
            return False
        return True

    def topic_id(self, topic: str) -> str | None:
        return self.client.topic_ids([topic]).get(topic)

    def prepare(self, topic: str) -> None:
        self._producer(topic)

    def _producer(self, topic: str) -> Any:
        from confluent_kafka import KafkaException, Producer

        with self._lock:
            self._check_open()
            p = self._producers.get(topic)
            if p is None:
                p = Producer({**self.conf, "logger": _LOG, "acks": "all", "linger.ms": 0,
                              "allow.auto.create.topics": False, "message.max.bytes": 64 << 20,
                              "transactional.id": f"iqgate-{topic}",
                              "transaction.timeout.ms": self.transaction_timeout_ms,
                              "message.timeout.ms": min(int(self.timeout_s * 1000), self.transaction_timeout_ms)})
                try:
                    p.init_transactions(self.timeout_s)
                except KafkaException as exc:
                    raise KafkaError(f"cannot start writing changelog {topic!r} to Kafka at {self.servers} "
                                     f"(transactions): {exc}") from None
                self._producers[topic] = p
            return p

    def append(self, topic: str, records: Mapping[int, ChangelogRecord]) -> dict[int, int]:
        from confluent_kafka import KafkaException

        producer = self._producer(topic)
        out: dict[int, int] = {}
        errors: list[str] = []

        def report(err: Any, msg: Any) -> None:
            if err is not None:
                errors.append(f"partition {msg.partition()}: {err}")
            else:
                out[msg.partition()] = msg.offset()

        try:
            producer.begin_transaction()
            try:
                for p, rec in sorted(records.items()):
                    value, headers = rec.to_kafka()
                    for _ in range(1000):  # bounded: a full local queue drains in milliseconds
                        try:
                            producer.produce(topic, value=value, key=str(rec.batch_id).encode(), partition=p,
                                             headers=headers, on_delivery=report)
                            break
                        except BufferError:
                            producer.poll(0.05)
                left = producer.flush(self.timeout_s)
                if left or errors or len(out) != len(records):
                    raise KafkaError("; ".join(errors[:3]) or f"{left} record(s) unacknowledged after "
                                     f"{self.timeout_s:.0f} s")
                producer.commit_transaction(self.timeout_s)
            except BaseException:
                try:
                    producer.abort_transaction(self.timeout_s)
                except KafkaException:
                    self._drop(topic)  # fenced or broken: the next batch starts a new producer
                raise
        except (KafkaException, KafkaError) as exc:
            raise KafkaError(f"changelog {topic!r} in Kafka at {self.servers}: the batch's {len(records)} "
                             f"record(s) were not written: {exc}") from None
        return out

    def _drop(self, topic: str) -> None:
        with self._lock:
            self._producers.pop(topic, None)

    def last(self, topic: str, partition: int) -> Item | None:
        """The last committed record: read back from the end, further each time (transaction markers take offsets)."""
        end = self.client.end_offsets(topic).get(partition, 0)
        if end <= 0:
            return None
        span = 4
        for _ in range(64):  # bounded: the span doubles up to the whole partition
            start = max(0, end - span)
            items = self._read_to_end(topic, partition, start)
            if items:
                return items[-1]
            if start == 0:
                return None
            span *= 4
        return None

    def _read_to_end(self, topic: str, partition: int, start: int) -> list[Item]:
        t = _KafkaTail(self.conf, topic, {partition: start}, self.timeout_s)
        try:
            deadline = time.monotonic() + self.timeout_s
            items: list[Item] = []
            for _ in range(100_000):  # bounded; the clock ends it
                items += t.poll(0.2)
                if partition in t.eof:
                    return items
                if time.monotonic() > deadline:
                    raise KafkaError(f"cannot read {topic}/{partition} to its end from Kafka at {self.servers} "
                                     f"within {self.timeout_s:.0f} s")
            return items
        finally:
            t.close()

    def tail(self, topic: str, starts: Mapping[int, int]) -> Tail:
        return _KafkaTail(self.conf, topic, starts, self.timeout_s)

    def low_offsets(self, topic: str) -> dict[int, int]:
        return self.client.low_offsets(topic)

    def end_offsets(self, topic: str) -> dict[int, int]:
        return self.client.end_offsets(topic)

    def read_from(self, topic: str, partition: int, offset: int, limit: int) -> list[Item]:
        """A consumer of its own from ``offset`` until ``limit`` records or the partition's end (transaction
        markers take offsets, so the first record may be further on)."""
        t = _KafkaTail(self.conf, topic, {partition: offset}, self.timeout_s)
        try:
            deadline = time.monotonic() + self.timeout_s
            items: list[Item] = []
            for _ in range(100_000):  # bounded; the clock ends it
                items += t.poll(0.1)
                if len(items) >= limit or partition in t.eof:
                    return items[:limit]
                if time.monotonic() > deadline:
                    raise KafkaError(f"cannot read {topic}/{partition} from offset {offset} from Kafka at "
                                     f"{self.servers} within {self.timeout_s:.0f} s")
            return items[:limit]
        finally:
            t.close()

    def close(self) -> None:
        """Flush and close every producer and the client; what is called on this changelog afterwards fails.

        A producer being created meanwhile (``_producer`` holds the lock through ``init_transactions``) is closed
        with the others.
        """
        with self._lock:
            self._closed = True
            producers, self._producers = list(self._producers.values()), {}
        with self._client_lock:
            client, self._client = self._client, None
        for p in producers:
            p.flush(1.0)
            close = getattr(p, "close", None)  # where confluent-kafka has it; else the producer ends when dropped
            if close is not None:
                close()
        if client is not None:
            client.close()


class _KafkaTail:
    def __init__(self, conf: Mapping[str, Any], topic: str, starts: Mapping[int, int], timeout_s: float) -> None:
        from confluent_kafka import Consumer, TopicPartition

        self.topic = topic
        self._c = Consumer({**conf, "logger": _LOG, "group.id": "iqgate-replica", "enable.auto.commit": False,
                            "allow.auto.create.topics": False, "enable.partition.eof": True,
                            "isolation.level": "read_committed", "auto.offset.reset": "earliest",
                            "fetch.wait.max.ms": 50, "socket.timeout.ms": int(timeout_s * 1000)})
        self._c.assign([TopicPartition(topic, p, o) for p, o in starts.items()])
        self._ends = {p: o for p, o in starts.items()}
        self._next = dict(starts)
        self.eof: set[int] = set()

    def poll(self, max_wait_s: float) -> list[Item]:
        from confluent_kafka import KafkaError as RdKafkaError

        out: list[Item] = []
        for m in self._c.consume(READ_MAX, timeout=max_wait_s):
            err = m.error()
            p = m.partition()
            if err is not None:
                if err.code() == RdKafkaError._PARTITION_EOF:
                    self._next[p] = max(self._next.get(p, 0), m.offset())
                    self._ends[p] = max(self._ends.get(p, 0), m.offset())
                    self.eof.add(p)
                    continue
                raise KafkaError(f"reading changelog {self.topic}/{p}: {err}")
            off = m.offset()
            where = f"{self.topic}/{p}@{off}"
            out.append(Item(p, off, m.timestamp()[1], ChangelogRecord.from_kafka(m.value(), m.headers(), where)))
            self._next[p] = max(self._next.get(p, 0), off + 1)
            self._ends[p] = max(self._ends.get(p, 0), off + 1)
            self.eof.discard(p)
        for p in self._next:
            try:
                hw = self._c.get_watermark_offsets(_tp(self.topic, p), cached=True)
            except Exception:  # noqa: BLE001 - no statistics yet: keep what the fetches said
                hw = None
            if hw is not None and hw[1] >= 0:
                self._ends[p] = max(self._ends.get(p, 0), hw[1])
        return out

    def ends(self) -> dict[int, int]:
        """Where each partition ends for a read_committed reader.

        A partition at EOF has been read to its last stable offset: the high watermark beyond it holds an
        open transaction (a pipeline killed mid-batch leaves one open until its transactional.id is reused),
        which is not readable yet and so is not lag.
        """
        out = dict(self._ends)
        for p in self.eof:
            out[p] = self._next.get(p, out.get(p, 0))
        return out

    def positions(self) -> dict[int, int]:
        return dict(self._next)

    def close(self) -> None:
        self._c.close()


def _tp(topic: str, p: int) -> Any:
    from confluent_kafka import TopicPartition

    return TopicPartition(topic, p)


