"""The ``iqlog`` Python streaming data source: Spark reads an EventLog like it reads Kafka.

Offsets have Kafka's shape, ``{topic: {"<partition>": next_offset}}`` (exclusive
ends), plus one reserved entry ``"@epochs": {topic: epoch}``. ``@`` cannot
occur in a topic name, so code that turns offsets into Positions simply skips
it. The epoch is what lets us notice a topic that was deleted and recreated:
Spark itself silently accepts offsets that go backwards (spark-notes.md).

Errors raised here reach the app only as text inside a Spark error, so each
starts with a stable code the runtime classifies on:
``MISSING_SOURCE_TOPIC:`` (→ MissingSourceTopicException) and
``SOURCE_TRUNCATED:`` (records the checkpoint has seen are gone).

Options: ``path`` (log root), ``topics`` (comma list), ``valueSchema`` (DDL of
the value fields), ``keyType`` (DDL type of the key, default ``string``),
``maxRecordsPerBatch`` (admission control), ``startingOffsets``
(``earliest`` default, or ``latest``), ``cutLedger``/``cutLedgerRef`` and
``cutMaxAgeMs`` (shared batch cuts: ``batch_cuts.py``).
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Sequence
from typing import Any

from pyspark.sql.datasource import DataSource, DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadLimit, ReadMaxRows
from pyspark.sql.types import StructType

from .batch_cuts import SharedCuts, batch_ends
from .stream_rows import (
    METADATA_COLUMNS,
    MISSING_SOURCE_TOPIC,
    SOURCE_TRUNCATED,
    has_headers,
    parse_value_schema,
    row_converter,
    slices,
    stream_schema,
)

__all__ = [
    "IqLogDataSource", "IqLogStreamReader", "EPOCHS_KEY", "MISSING_SOURCE_TOPIC", "SOURCE_TRUNCATED",
    "METADATA_COLUMNS", "stream_schema", "parse_value_schema",
]

EPOCHS_KEY = "@epochs"


class _Slice(InputPartition):
    """One task's work: contiguous offset ranges ``(topic, partition, start, end, epoch)`` of log partitions.

    Grouped by ``stream_rows.slices``: small batches in one task, big ones cut.
    """

    def __init__(self, ranges: list[tuple[str, int, int, int, str | None]]) -> None:
        super().__init__(tuple(ranges))
        self.ranges = ranges


class IqLogDataSource(DataSource):
    @classmethod
    def name(cls) -> str:
        return "iqlog"

    def schema(self) -> StructType:
        return stream_schema(parse_value_schema(self.options.get("valueSchema", "value STRING")),
                             self.options.get("keyType", "string"),
                             self.options.get("includeHeaders", "false").lower() == "true")

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        return IqLogStreamReader(schema, self.options)


class IqLogStreamReader(DataSourceStreamReader):
    """Driver side: offsets and planning; worker side: ``read`` of one slice."""

    def __init__(self, schema: StructType, options: Any) -> None:
        self.schema = schema
        self.path = options.get("path") or ""
        if not self.path:
            raise ValueError("iqlog source: option 'path' (the EventLog root) is required")
        self.topics = [t.strip() for t in options.get("topics", "").split(",") if t.strip()]
        if not self.topics:
            raise ValueError("iqlog source: option 'topics' (comma-separated) is required")
        mr = options.get("maxRecordsPerBatch")
        self.max_records = int(mr) if mr else None
        if self.max_records is not None and self.max_records < 1:
            raise ValueError(f"iqlog source: maxRecordsPerBatch must be >= 1, got {mr}")
        self.starting = options.get("startingOffsets", "earliest")
        if self.starting not in ("earliest", "latest"):
            raise ValueError(f"iqlog source: startingOffsets must be earliest or latest, got {self.starting!r}")
        self.cuts = SharedCuts.from_options(options, "iqlog")  # None: this query plans its batches alone

    def _log(self) -> Any:
        from ..log.eventlog import (
            EventLog,  # no pyspark there; imported lazily for the workers
        )

        return EventLog(self.path)

    def _require(self, log: Any, topic: str) -> None:
        if not log.has_topic(topic):
            raise RuntimeError(f"{MISSING_SOURCE_TOPIC}: source topic {topic!r} does not exist in the "
                               f"event log at {self.path}")

    # -- driver side ----------------------------------------------------
    def initialOffset(self) -> dict:
        log = self._log()
        out: dict[str, Any] = {EPOCHS_KEY: {}}
        for t in self.topics:
            self._require(log, t)
            ends = log.end_offsets(t)
            low = log.low_offsets(t)  # "earliest" is the first record still held (records may have been deleted)
            out[t] = {str(p): (e if self.starting == "latest" else low.get(p, 0)) for p, e in ends.items()}
            out[EPOCHS_KEY][t] = log.epoch(t)
        return out

    def getDefaultReadLimit(self) -> ReadLimit:
        return ReadMaxRows(self.max_records) if self.max_records else ReadAllAvailable()

    def latestOffset(self, start: dict, limit: ReadLimit) -> dict:
        looked_at = time.time()  # before the log's ends are read (batch_cuts: which cuts it may trust)
        log = self._log()
        epochs = dict(start.get(EPOCHS_KEY, {}))
        avail: dict[tuple[str, int], tuple[int, int]] = {}
        for t in self.topics:
            self._require(log, t)
            ep = log.epoch(t)
            if t in epochs and epochs[t] != ep:
                raise RuntimeError(f"{SOURCE_TRUNCATED}: topic {t!r} was deleted and recreated since the "
                                   "checkpoint; the records it had are gone. Delete the app's state dir to "
                                   "start over")
            epochs[t] = ep
            ends = log.end_offsets(t)
            low = log.low_offsets(t)
            seen = {int(p): int(o) for p, o in start.get(t, {}).items()}
            for p, o in seen.items():
                if p not in ends or ends[p] < o:
                    have = ends.get(p, "no partition")
                    raise RuntimeError(f"{SOURCE_TRUNCATED}: topic {t!r} partition {p} ends at {have}, but "
                                       f"the checkpoint has already read up to offset {o}")
                if o < low.get(p, 0):
                    raise RuntimeError(f"{SOURCE_TRUNCATED}: topic {t!r} partition {p}: the records before offset "
                                       f"{low[p]} were deleted, but the checkpoint has read only up to offset {o}")
            for p, e in ends.items():
                avail[(t, p)] = (seen.get(p, 0), e)
        max_rows = int(limit.max_rows) if isinstance(limit, ReadMaxRows) else None
        out: dict[str, Any] = batch_ends(self.topics, avail, max_rows, self.cuts, epochs, looked_at)
        out[EPOCHS_KEY] = epochs
        return out

    def partitions(self, start: dict, end: dict) -> Sequence[InputPartition]:
        epochs = end.get(EPOCHS_KEY, {})
        ranges = [(t, p, int(start.get(t, {}).get(str(p), 0)), e, epochs.get(t))
                  for t in self.topics
                  for p, e in sorted((int(p), int(e)) for p, e in end.get(t, {}).items())]
        return [_Slice(group) for group in slices(ranges)]

    def commit(self, end: dict) -> None:
        """The log keeps every record; nothing to release."""

    def stop(self) -> None:
        if self.cuts is not None:
            self.cuts.close()

    # -- worker side ----------------------------------------------------
    def read(self, partition: InputPartition) -> Iterator[tuple]:
        from ..log.eventlog import RecordsDeletedError, UnknownTopicError

        sl: _Slice = partition  # type: ignore[assignment]
        log = self._log()
        convert = row_converter(self.schema)
        headers = has_headers(self.schema)
        for topic, part, start, end, epoch in sl.ranges:
            try:
                if epoch is not None and log.epoch(topic) != epoch:
                    raise RuntimeError(f"{SOURCE_TRUNCATED}: topic {topic!r} was recreated while being read")
                if headers:
                    for off, key, value, ts, hs in log.read_raw(topic, part, start, end, headers=True):
                        yield convert(key, value, ts, topic, part, off, hs)
                    continue
                for off, key, value, ts in log.read_raw(topic, part, start, end):
                    yield convert(key, value, ts, topic, part, off)
            except UnknownTopicError as exc:
                raise RuntimeError(f"{MISSING_SOURCE_TOPIC}: {exc}") from None
            except RecordsDeletedError as exc:
                raise RuntimeError(f"{SOURCE_TRUNCATED}: {exc}") from None



