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
(``earliest`` default, or ``latest``).
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence
from datetime import date, datetime, timezone
from typing import Any

from pyspark.sql.datasource import DataSource, DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadLimit, ReadMaxRows
from pyspark.sql.types import (
    BooleanType,
    DataType,
    DateType,
    DoubleType,
    FloatType,
    IntegerType,
    LongType,
    ShortType,
    StringType,
    StructField,
    StructType,
    TimestampNTZType,
    TimestampType,
)

__all__ = [
    "IqLogDataSource", "IqLogStreamReader", "EPOCHS_KEY", "MISSING_SOURCE_TOPIC", "SOURCE_TRUNCATED",
    "METADATA_COLUMNS", "stream_schema", "parse_value_schema",
]

EPOCHS_KEY = "@epochs"
MISSING_SOURCE_TOPIC = "MISSING_SOURCE_TOPIC"
SOURCE_TRUNCATED = "SOURCE_TRUNCATED"
METADATA_COLUMNS = ("timestamp", "topic", "partition", "offset")
_SPLIT = 200_000  # records per Spark task: bounds a task's memory and spreads a backlog over cores

_SUPPORTED = (BooleanType, DateType, DoubleType, FloatType, IntegerType, LongType, ShortType,
              StringType, TimestampType, TimestampNTZType)


def parse_value_schema(ddl: str | StructType) -> StructType:
    """``"amount DOUBLE, item STRING"`` → StructType; refuses types the JSON records cannot carry."""
    if isinstance(ddl, StructType):
        schema = ddl
    else:
        if not isinstance(ddl, str) or not ddl.strip():
            raise ValueError(f"value_schema must be a DDL string like 'amount DOUBLE', got {ddl!r}")
        schema = _parse_ddl(ddl)
    for f in schema.fields:
        if not isinstance(f.dataType, _SUPPORTED):
            raise ValueError(f"value field {f.name!r}: type {f.dataType.simpleString()} is not supported; "
                             "use boolean, int, bigint, double, string, date or timestamp")
        if f.name in ("key",) + METADATA_COLUMNS:
            raise ValueError(f"value field {f.name!r} clashes with a column the stream adds "
                             f"(key, {', '.join(METADATA_COLUMNS)})")
    return schema


_TYPES: dict[str, DataType] = {
    "boolean": BooleanType(), "bool": BooleanType(), "date": DateType(), "double": DoubleType(),
    "float": FloatType(), "real": FloatType(), "int": IntegerType(), "integer": IntegerType(),
    "bigint": LongType(), "long": LongType(), "smallint": ShortType(), "short": ShortType(),
    "string": StringType(), "varchar": StringType(), "text": StringType(), "timestamp": TimestampType(),
    "timestamp_ltz": TimestampType(), "timestamp_ntz": TimestampNTZType(),
}


def _type_of(text: str, where: str) -> DataType:
    t = _TYPES.get(text.strip().lower())
    if t is None:
        raise ValueError(f"{where}: type {text.strip()!r} is not supported; use one of "
                         "boolean, int, bigint, double, string, date, timestamp")
    return t


def _parse_ddl(ddl: str) -> StructType:
    """A small DDL parser: Spark's needs a live SparkContext, which the source's worker processes lack."""
    fields = []
    for i, part in enumerate(ddl.split(",")):
        words = part.split()
        if not words:
            raise ValueError(f"value_schema {ddl!r}: field {i + 1} is empty")
        nullable = True
        if len(words) == 4 and [w.upper() for w in words[2:]] == ["NOT", "NULL"]:
            nullable, words = False, words[:2]
        if len(words) != 2:
            raise ValueError(f"value_schema {ddl!r}: field {i + 1} ({part.strip()!r}) must be 'name TYPE'")
        name = words[0].strip("`")
        if not name.replace("_", "a").isalnum():
            raise ValueError(f"value_schema {ddl!r}: field name {name!r} must be letters, digits and _")
        fields.append(StructField(name, _type_of(words[1], f"value_schema field {name!r}"), nullable))
    names = [f.name for f in fields]
    if len(set(names)) != len(names):
        raise ValueError(f"value_schema {ddl!r}: duplicate field names")
    return StructType(fields)


def stream_schema(value_schema: StructType, key_type: str = "string") -> StructType:
    """The stream's columns: key, the value fields, timestamp, topic, partition, offset."""
    kt = _type_of(key_type, "key")
    if not isinstance(kt, (StringType, LongType, IntegerType)):
        raise ValueError(f"key type {key_type!r} is not supported; use string, int or bigint")
    return StructType(
        [StructField("key", kt, True)] + list(value_schema.fields) + [
            StructField("timestamp", TimestampType(), True),
            StructField("topic", StringType(), False),
            StructField("partition", IntegerType(), False),
            StructField("offset", LongType(), False),
        ])


class _Slice(InputPartition):
    """One task's work: contiguous offset ranges ``(topic, partition, start, end, epoch)`` of log partitions.

    Small batches go in one task (a task per log partition would pay a
    Python worker round trip each); big ones are cut at ``_SPLIT`` records.
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
                             self.options.get("keyType", "string"))

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
            out[t] = {str(p): (e if self.starting == "latest" else 0) for p, e in ends.items()}
            out[EPOCHS_KEY][t] = log.epoch(t)
        return out

    def getDefaultReadLimit(self) -> ReadLimit:
        return ReadMaxRows(self.max_records) if self.max_records else ReadAllAvailable()

    def latestOffset(self, start: dict, limit: ReadLimit) -> dict:
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
            seen = {int(p): int(o) for p, o in start.get(t, {}).items()}
            for p, o in seen.items():
                if p not in ends or ends[p] < o:
                    have = ends.get(p, "no partition")
                    raise RuntimeError(f"{SOURCE_TRUNCATED}: topic {t!r} partition {p} ends at {have}, but "
                                       f"the checkpoint has already read up to offset {o}")
            for p, e in ends.items():
                avail[(t, p)] = (seen.get(p, 0), e)
        if isinstance(limit, ReadMaxRows):
            avail = _admit(avail, int(limit.max_rows))
        out: dict[str, Any] = {t: {} for t in self.topics}
        for (t, p), (_, e) in sorted(avail.items()):
            out[t][str(p)] = e
        out[EPOCHS_KEY] = epochs
        return out

    def partitions(self, start: dict, end: dict) -> Sequence[InputPartition]:
        epochs = end.get(EPOCHS_KEY, {})
        out: list[InputPartition] = []
        current: list[tuple[str, int, int, int, str | None]] = []
        room = _SPLIT
        for t in self.topics:
            for p, e in sorted(((int(p), int(e)) for p, e in end.get(t, {}).items())):
                s = int(start.get(t, {}).get(str(p), 0))
                while s < e:
                    stop = min(e, s + room)
                    current.append((t, p, s, stop, epochs.get(t)))
                    room -= stop - s
                    s = stop
                    if room == 0:
                        out.append(_Slice(current))
                        current, room = [], _SPLIT
        if current:
            out.append(_Slice(current))
        return out

    def commit(self, end: dict) -> None:
        """The log keeps every record; nothing to release."""

    # -- worker side ----------------------------------------------------
    def read(self, partition: InputPartition) -> Iterator[tuple]:
        from ..log.eventlog import UnknownTopicError

        sl: _Slice = partition  # type: ignore[assignment]
        log = self._log()
        convert = _row_converter(self.schema)
        for topic, part, start, end, epoch in sl.ranges:
            try:
                if epoch is not None and log.epoch(topic) != epoch:
                    raise RuntimeError(f"{SOURCE_TRUNCATED}: topic {topic!r} was recreated while being read")
                for off, key, value, ts in log.read_raw(topic, part, start, end):
                    yield convert(key, value, ts, topic, part, off)
            except UnknownTopicError as exc:
                raise RuntimeError(f"{MISSING_SOURCE_TOPIC}: {exc}") from None


def _admit(avail: dict[tuple[str, int], tuple[int, int]], budget: int) -> dict[tuple[str, int], tuple[int, int]]:
    """Share ``budget`` records over partitions fairly (smallest backlog first), like Kafka's maxOffsetsPerTrigger."""
    out = {}
    pending = sorted(avail.items(), key=lambda kv: kv[1][1] - kv[1][0])
    for i, (tp, (s, e)) in enumerate(pending):
        share = math.ceil(budget / (len(pending) - i)) if budget > 0 else 0
        take = max(0, min(e - s, share))
        out[tp] = (s, s + take)
        budget -= take
    return out


def _row_converter(schema: StructType) -> Any:
    """A function from one log record to a row tuple in ``schema``'s order (value fields by name)."""
    value_fields = [(f.name, _caster(f.dataType, f.name)) for f in schema.fields[1:-4]]
    key_cast = _caster(schema.fields[0].dataType, "key")

    def convert(key: Any, value: Any, ts: int, topic: str, partition: int, offset: int) -> tuple:
        if value is None:
            vals = [None] * len(value_fields)
        else:
            vals = [c(value.get(n)) for n, c in value_fields]
        return (key_cast(key), *vals, _ts(ts), topic, partition, offset)

    return convert


def _ts(ms: Any) -> datetime | None:
    if ms is None:
        return None
    return datetime.fromtimestamp(ms / 1000, tz=timezone.utc)


def _caster(dt: DataType, name: str) -> Any:
    """Lenient JSON → Python conversion: a value of the wrong type becomes null, not a failed query.

    A failing cast would stop the whole pipeline on one bad record; Spark's
    own JSON reader (PERMISSIVE) makes the same choice.
    """
    def guard(fn: Any) -> Any:
        def cast(v: Any) -> Any:
            if v is None:
                return None
            try:
                return fn(v)
            except (TypeError, ValueError, OverflowError):
                return None
        return cast

    if isinstance(dt, (IntegerType, LongType, ShortType)):
        return guard(lambda v: int(v) if not isinstance(v, (bool, float)) or float(v).is_integer() else None)
    if isinstance(dt, (DoubleType, FloatType)):
        return guard(lambda v: None if isinstance(v, bool) else float(v))
    if isinstance(dt, StringType):
        return guard(lambda v: v if isinstance(v, str) else str(v))
    if isinstance(dt, BooleanType):
        return guard(lambda v: v if isinstance(v, bool) else None)
    if isinstance(dt, (TimestampType, TimestampNTZType)):
        def to_ts(v: Any) -> datetime | None:
            if isinstance(v, (int, float)) and not isinstance(v, bool):
                return _ts(int(v))
            d = datetime.fromisoformat(str(v).replace("Z", "+00:00"))
            return d if d.tzinfo else d.replace(tzinfo=timezone.utc)
        return guard(to_ts)
    if isinstance(dt, DateType):
        return guard(lambda v: v if isinstance(v, date) else date.fromisoformat(str(v)[:10]))
    raise ValueError(f"field {name!r}: unsupported type {dt.simpleString()}")
