"""Reading a stream's records from its log (the embedded EventLog or Kafka) as Arrow record batches.

A scan is planned per topic partition first (``slices``): where it starts
(the log's first held offset, a pushed ``offset >=``, and with Kafka the first
offset at or after a pushed ``rowtime >=``, found by offsetsForTimes), where it
stops (the partition's end now, a pushed ``offset <=``), whether the log has
reached the statement's position bound (NOT_UP_TO_BOUND otherwise), and
whether the partition exists at all (DOES_NOT_EXIST). Only then are records
read (``batches``), a bounded number at a time, so memory is a batch's
whatever the topic's size. Time filters the log cannot seek by (the EventLog
keeps no time index; an upper time bound, since timestamps need not grow with
offsets) are applied to each batch as it is read.

Each slice's Position component is the last offset the scan covered: every
record of the partition up to it was considered.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from ..catalog.streams import StreamQuery, StreamSpec
from ..iqv2.position import Position
from ..iqv2.result import FailureReason
from .eventlog import EventLog, EventLogError, UnknownTopicError
from .kafka import KafkaError, KafkaSource
from .record_batches import BatchBuilder, stream_schema

__all__ = ["StreamReader", "PartitionSlice", "StreamReadError", "DEFAULT_BATCH_RECORDS"]

DEFAULT_BATCH_RECORDS = 8192


class StreamReadError(Exception):
    """The stream's log cannot be read (its topic is gone, the brokers are down, a record is damaged)."""


@dataclass(frozen=True, slots=True)
class PartitionSlice:
    """What a scan reads of one topic partition: offsets [start, stop), or why it cannot (``failure``).

    ``last``: the Position component, the last offset the scan covers (None: the partition has no record
    in range to cover, e.g. an empty partition)."""

    topic: str
    partition: int
    start: int = 0
    stop: int = 0
    last: int | None = None
    failure: FailureReason | None = None
    message: str | None = None

    @property
    def position(self) -> Position:
        """What the scan covered of this partition, as a Position (empty when nothing)."""
        return Position.empty() if self.last is None else Position.from_map({self.topic: {self.partition: self.last}})


class StreamReader:
    """One stream over one log. Cheap to make; holds nothing open between calls."""

    def __init__(self, spec: StreamSpec, log: EventLog | KafkaSource) -> None:
        if not isinstance(log, (EventLog, KafkaSource)):
            raise TypeError(f"a stream is read from an EventLog or a KafkaSource, got {type(log).__name__}")
        self.spec = spec
        self.log = log
        self.schema = stream_schema(spec)

    def describe(self) -> str:
        return f"stream {self.spec.name!r} (topic {self.spec.topic!r} in the {self.log.describe()})"

    # -- planning the read --------------------------------------------------------------------------------------
    def slices(self, query: StreamQuery, bound: Position | None = None) -> list[PartitionSlice]:
        """Per partition the query wants, what to read (see the module doc); raises StreamReadError when the
        log cannot say (the topic is gone, the brokers are down)."""
        topic = self.spec.topic
        try:
            count = self.log.partitions(topic)
            wanted = [] if query.empty else query.wanted(count)
            if not wanted:
                return []
            ends = self.log.end_offsets(topic)
            lows = self.log.low_offsets(topic)
        except UnknownTopicError:
            raise StreamReadError(f"{self.describe()}: the topic does not exist (any more)") from None
        except (EventLogError, KafkaError) as exc:
            raise StreamReadError(f"{self.describe()}: {exc}") from None
        lo_off, hi_off = query.offsets
        out: list[PartitionSlice] = []
        for p in wanted:
            if p >= count:
                out.append(PartitionSlice(topic, p, failure=FailureReason.DOES_NOT_EXIST,
                                          message=f"topic {topic!r} has {count} partition(s) (0..{count - 1}); "
                                                  f"partition {p} does not exist"))
                continue
            end = ends.get(p, 0)
            want = None if bound is None else bound.offset(topic, p)
            if want is not None and end - 1 < want:
                where = "is empty" if end == 0 else f"ends at offset {end - 1}"
                out.append(PartitionSlice(topic, p, failure=FailureReason.NOT_UP_TO_BOUND,
                                          message=f"the bound asks for {topic}/{p} offset {want}, but that partition "
                                                  f"of the log {where}"))
                continue
            stop = end if hi_off is None else max(0, min(end, hi_off + 1))
            start = max(lows.get(p, 0), lo_off or 0)
            last = stop - 1 if stop > 0 else None
            out.append(PartitionSlice(topic, p, start, max(start, stop), last))
        return self._seek_by_time(out, query.rowtime[0])

    def _seek_by_time(self, slices: list[PartitionSlice], since: int | None) -> list[PartitionSlice]:
        """Kafka's offsetsForTimes moves each start to the first record at or after ``since`` (the EventLog has no
        time index: its batches are filtered as they are read)."""
        if since is None or not isinstance(self.log, KafkaSource):
            return slices
        todo = {s.partition: since for s in slices if s.failure is None and s.start < s.stop}
        if not todo:
            return slices
        try:
            firsts = self.log.client.offsets_for_times(self.spec.topic, todo)
        except KafkaError as exc:
            raise StreamReadError(f"{self.describe()}: {exc}") from None
        out = []
        for s in slices:
            if s.partition in todo:
                first = firsts.get(s.partition)
                start = s.stop if first is None else min(s.stop, max(s.start, first))
                s = PartitionSlice(s.topic, s.partition, start, s.stop, s.last)
            out.append(s)
        return out

    # -- reading ------------------------------------------------------------------------------------------------
    def batches(self, part: PartitionSlice, query: StreamQuery, batch_records: int = DEFAULT_BATCH_RECORDS
                ) -> Iterator[pa.RecordBatch]:
        """The records of one slice as record batches of at most ``batch_records`` rows, rowtime filter applied;
        StreamReadError when a record cannot be read. Closing the generator ends the read (a Kafka consumer)."""
        if part.failure is not None or part.start >= part.stop:
            return
        builder = BatchBuilder(self.spec)
        lo_t, hi_t = query.rowtime
        try:
            for rec in self._records(part, batch_records):
                builder.add(*rec)
                if len(builder) >= batch_records:
                    batch = _in_time(builder.flush(part.partition), lo_t, hi_t)
                    if batch.num_rows:
                        yield batch
            if len(builder):
                batch = _in_time(builder.flush(part.partition), lo_t, hi_t)
                if batch.num_rows:
                    yield batch
        except UnknownTopicError:
            raise StreamReadError(f"{self.describe()}: the topic was deleted while it was read") from None
        except (EventLogError, KafkaError) as exc:
            raise StreamReadError(f"{self.describe()} partition {part.partition}: {exc}") from None

    def _records(self, part: PartitionSlice, chunk: int) -> Iterator[tuple[Any, ...]]:
        """``(offset, key, value, timestamp, headers)`` of the slice, in offset order."""
        topic = self.spec.topic
        if isinstance(self.log, KafkaSource):
            yield from self.log.client.read_raw(topic, part.partition, part.start, part.stop)
            return
        for s in range(part.start, part.stop, chunk):  # a chunk at a time: the EventLog reads a range into memory
            yield from self.log.read_raw(topic, part.partition, s, min(part.stop, s + chunk), headers=True)


def _in_time(batch: pa.RecordBatch, lo: int | None, hi: int | None) -> pa.RecordBatch:
    """The batch's records with ``lo <= rowtime <= hi`` (epoch ms, inclusive; None: open)."""
    if lo is None and hi is None:
        return batch
    ms = pc.cast(batch.column("rowtime"), pa.int64())
    keep = None
    if lo is not None:
        keep = pc.greater_equal(ms, lo)
    if hi is not None:
        upper = pc.less_equal(ms, hi)
        keep = upper if keep is None else pc.and_(keep, upper)
    return batch.filter(keep)
