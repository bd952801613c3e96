"""The stream's columns and record → row conversion, shared by every source (EventLog, Kafka).

A stream has exactly these columns whatever feeds it: ``key``, the value
fields of the declared schema, ``timestamp``, ``topic``, ``partition``,
``offset``, ``tombstone``. Values are JSON objects; conversion is lenient (a
field of the wrong type reads as null, never a failed query), as Spark's
PERMISSIVE JSON.

``tombstone`` is true for a record whose value is null (Kafka's tombstone) and
only then: a value whose fields are all null (``{"mapping": null}``, or a
value that is not a JSON object) is a record with null fields, not a delete.
Once the fields are flattened into columns the two look alike, which is why
the stream says so in a column of its own.
"""

from __future__ import annotations

import json
import math
from datetime import date, datetime, timezone
from typing import Any

from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    BooleanType,
    DataType,
    DateType,
    DecimalType,
    DoubleType,
    FloatType,
    IntegerType,
    LongType,
    MapType,
    ShortType,
    StringType,
    StructField,
    StructType,
    TimestampNTZType,
    TimestampType,
)

from ..catalog import decimals
from ..catalog.nested import NestedType
from ..catalog.schema import SqlType, parse_type

__all__ = [
    "MISSING_SOURCE_TOPIC", "SOURCE_TRUNCATED", "METADATA_COLUMNS", "SPLIT", "parse_value_schema", "stream_schema",
    "row_converter", "admit", "slices", "HEADERS", "HEADERS_TYPE", "has_headers", "TOMBSTONE", "KEY_TYPES",
]

# Errors raised in a source reach the app only as text inside a Spark error (spark-notes.md), so each
# starts with a stable code the runtime classifies on.
MISSING_SOURCE_TOPIC = "MISSING_SOURCE_TOPIC"  # → MissingSourceTopicException (KIP-662)
SOURCE_TRUNCATED = "SOURCE_TRUNCATED"  # records the checkpoint has seen are gone (truncated, recreated, retention)

#: The record's value was null (a tombstone), as distinct from a value whose fields are all null.
TOMBSTONE = "tombstone"
METADATA_COLUMNS = ("timestamp", "topic", "partition", "offset", TOMBSTONE)
#: The record headers column a stream adds when asked (``include_headers``), typed as Spark's Kafka source
#: types it with ``includeHeaders=true``: ARRAY<STRUCT<key: STRING, value: BINARY>>, in record order.
HEADERS = "headers"
HEADERS_TYPE = ArrayType(StructType([StructField("key", StringType(), True), StructField("value", BinaryType(), True)]),
                         True)
SPLIT = 200_000  # records per Spark task: bounds a task's memory and spreads a backlog over cores

_SUPPORTED = (BooleanType, DateType, DoubleType, FloatType, IntegerType, LongType, ShortType,
              StringType, TimestampType, TimestampNTZType, ArrayType, StructType, MapType, DecimalType)
#: Key types a stream can declare (``key_type=``): the log's key (text, or Kafka's bytes) read as that type;
#: ``array<…>`` and ``struct<…>`` keys are JSON text (Kafka's JSON key format), as ksqlDB's ARRAY/STRUCT keys.
KEY_TYPES = ("string", "int", "bigint", "double", "boolean", "date", "timestamp", "binary", "decimal(p,s)",
             "array<…>", "struct<…>")


def parse_value_schema(ddl: str | StructType) -> StructType:
    """``"amount DOUBLE, item STRING"`` → StructType; refuses types the JSON records cannot carry."""
    if isinstance(ddl, StructType):
        schema = ddl
    else:
        if not isinstance(ddl, str) or not ddl.strip():
            raise ValueError(f"value_schema must be a DDL string like 'amount DOUBLE', got {ddl!r}")
        schema = _parse_ddl(ddl)
    for f in schema.fields:
        if not isinstance(f.dataType, _SUPPORTED) or not _nested_ok(f.dataType):
            raise ValueError(f"value field {f.name!r}: type {f.dataType.simpleString()} is not supported; "
                             "use boolean, int, bigint, double, decimal(p,s), string, date, timestamp, or "
                             "array<…>, struct<…>, map<string,…> of them (but decimal)")
        if f.name in ("key", HEADERS) + METADATA_COLUMNS:
            raise ValueError(f"value field {f.name!r} clashes with a column the stream adds "
                             f"(key, {', '.join(METADATA_COLUMNS)}, {HEADERS})")
    return schema


_TYPES: dict[str, DataType] = {
    "boolean": BooleanType(), "bool": BooleanType(), "date": DateType(), "double": DoubleType(),
    "float": FloatType(), "real": FloatType(), "int": IntegerType(), "integer": IntegerType(),
    "bigint": LongType(), "long": LongType(), "smallint": ShortType(), "short": ShortType(),
    "string": StringType(), "varchar": StringType(), "text": StringType(), "timestamp": TimestampType(),
    "timestamp_ltz": TimestampType(), "timestamp_ntz": TimestampNTZType(),
}


_SCALAR_SPARK: dict[SqlType, DataType] = {
    SqlType.BIGINT: LongType(), SqlType.INTEGER: IntegerType(), SqlType.DOUBLE: DoubleType(),
    SqlType.VARCHAR: StringType(), SqlType.BOOLEAN: BooleanType(), SqlType.TIMESTAMP: TimestampType(),
    SqlType.DATE: DateType(),
}


def _nested_spark_type(t: Any) -> DataType:
    """A catalog type (``parse_type``) → the Spark type a value field of it has."""
    if not isinstance(t, NestedType):
        if t not in _SCALAR_SPARK:
            raise ValueError(f"{t} values cannot come from JSON")
        return _SCALAR_SPARK[t]
    if t.kind == "ARRAY":
        return ArrayType(_nested_spark_type(t.element), True)
    if t.kind == "MAP":
        return MapType(_nested_spark_type(t.key), _nested_spark_type(t.element), True)
    return StructType([StructField(n, _nested_spark_type(ft), True) for n, ft in t.fields])


def _nested_ok(dt: DataType, top: bool = True) -> bool:
    """Nested value fields hold the scalar types JSON can carry; a JSON object's keys are text (MAP<string, …>).

    DECIMAL is a top-level field only (a nested value is stored as JSON, whose numbers are not exact)."""
    if isinstance(dt, DecimalType):
        return top
    if isinstance(dt, ArrayType):
        return _nested_ok(dt.elementType, False) and isinstance(dt.elementType, _SUPPORTED)
    if isinstance(dt, MapType):
        return (isinstance(dt.keyType, StringType) and isinstance(dt.valueType, _SUPPORTED)
                and _nested_ok(dt.valueType, False))
    if isinstance(dt, StructType):
        return all(isinstance(f.dataType, _SUPPORTED) and _nested_ok(f.dataType, False) for f in dt.fields)
    return True


def _decimal_type(text: str) -> DataType | None:
    """``decimal(10,2)`` → Spark's DecimalType(10, 2) (``decimal``: Spark's default (10, 0)); ValueError past 38."""
    d = decimals.parse_decimal(text)
    return None if d is None else DecimalType(d.precision, d.scale)


def _type_of(text: str, where: str) -> DataType:
    t = _TYPES.get(text.strip().lower())
    if t is None:
        try:
            t = _decimal_type(text)
        except ValueError as exc:
            raise ValueError(f"{where}: {exc}") from None
    if t is None and ("<" in text or "(" in text):  # array<…>, struct<…>, map<…> (no JVM in the source's workers)
        try:
            t = _nested_spark_type(parse_type(text))
        except ValueError:
            t = None
    if t is None:
        raise ValueError(f"{where}: type {text.strip()!r} is not supported; use one of "
                         "boolean, int, bigint, double, decimal(p,s), string, date, timestamp")
    return t


def _parse_ddl(ddl: str) -> StructType:
    """A small DDL parser: Spark's needs a live SparkContext, which the source's worker processes lack."""
    fields = []
    for i, part in enumerate(_top_level_split(ddl)):
        words = part.split(None, 1)
        if len(words) == 2:
            rest = words[1].rsplit(None, 2)
            if len(rest) == 3 and [w.upper() for w in rest[1:]] == ["NOT", "NULL"]:
                words = [words[0], rest[0], "NOT", "NULL"]
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


def _top_level_split(ddl: str) -> list[str]:
    """``a INT, m MAP<STRING, INT>`` → the fields, splitting on commas outside ``<…>``."""
    parts, depth, cur = [], 0, []
    for ch in ddl:
        depth += ch in "<(" and 1 or (ch in ">)" and -1 or 0)
        if ch == "," and depth == 0:
            parts.append("".join(cur))
            cur = []
        else:
            cur.append(ch)
    parts.append("".join(cur))
    return parts


def key_spark_type(key_type: str) -> DataType:
    """A stream's ``key_type`` → the Spark type of its ``key`` column (ValueError naming the choices)."""
    text = key_type.strip().lower() if isinstance(key_type, str) else ""
    kt: DataType | None = _TYPES.get(text)
    if text in ("binary", "bytes"):
        kt = BinaryType()
    if kt is None and text.startswith(("array", "struct")) and "<" in text:
        try:
            kt = _type_of(key_type, "key type")
        except ValueError:
            kt = None
        if kt is not None and not _nested_ok(kt, False):
            kt = None
    if kt is None and text:
        kt = _decimal_type(key_type)  # ValueError past precision 38, saying so
    if kt is None or not isinstance(kt, (StringType, LongType, IntegerType, DoubleType, BooleanType, DateType,
                                         TimestampType, BinaryType, DecimalType, ArrayType, StructType)):
        raise ValueError(f"key type {key_type!r} is not supported; use one of {', '.join(KEY_TYPES)}")
    return kt


def stream_schema(value_schema: StructType, key_type: str = "string", include_headers: bool = False) -> StructType:
    """The stream's columns: key, the value fields, timestamp, topic, partition, offset, tombstone (then headers if
    asked)."""
    return StructType(
        [StructField("key", key_spark_type(key_type), True)] + list(value_schema.fields) + [
            StructField("timestamp", TimestampType(), True),
            StructField("topic", StringType(), False),
            StructField("partition", IntegerType(), False),
            StructField("offset", LongType(), False),
            StructField(TOMBSTONE, BooleanType(), False),
        ] + ([StructField(HEADERS, HEADERS_TYPE, True)] if include_headers else []))


def admit(avail: dict[tuple[str, int], tuple[int, int]], budget: int) -> dict[tuple[str, int], tuple[int, int]]:
    """Share ``budget`` records over partitions fairly (smallest backlog first), like Kafka's maxOffsetsPerTrigger."""
    out = {}
    pending = sorted(avail.items(), key=lambda kv: kv[1][1] - kv[1][0])
    for i, (tp, (s, e)) in enumerate(pending):
        share = math.ceil(budget / (len(pending) - i)) if budget > 0 else 0
        take = max(0, min(e - s, share))
        out[tp] = (s, s + take)
        budget -= take
    return out


def has_headers(schema: StructType) -> bool:
    """Does a stream schema (``stream_schema``) carry the headers column?"""
    return schema.fields[-1].name == HEADERS


def row_converter(schema: StructType) -> Any:
    """A function from one log record to a row tuple in ``schema``'s order (value fields by name).

    With a headers column the function takes the record's headers too: ``(name, bytes or None)`` pairs
    (confluent-kafka's ``Message.headers()``, the EventLog's), or None for none.
    """
    tail = 6 if has_headers(schema) else 5
    value_fields = [(f.name, _caster(f.dataType, f.name)) for f in schema.fields[1:-tail]]
    key_cast = _key_caster(schema.fields[0].dataType)

    def convert(key: Any, value: Any, ts: int, topic: str, partition: int, offset: int) -> tuple:
        if value is None:  # a tombstone: its fields are null, and the tombstone column says why
            return (key_cast(key), *([None] * len(value_fields)), _ts(ts), topic, partition, offset, True)
        vals = [c(value.get(n)) for n, c in value_fields]
        return (key_cast(key), *vals, _ts(ts), topic, partition, offset, False)

    if tail == 5:
        return convert

    def convert_with_headers(key: Any, value: Any, ts: int, topic: str, partition: int, offset: int,
                             headers: Any = None) -> tuple:
        hs = [(str(n), None if v is None else bytes(v)) for n, v in headers] if headers else []
        return (*convert(key, value, ts, topic, partition, offset), hs)

    return convert_with_headers


def _ts(ms: Any) -> datetime | None:
    if ms is None:
        return None
    return datetime.fromtimestamp(ms / 1000, tz=timezone.utc)


def _key_caster(dt: DataType) -> Any:
    """A record key (text from the log, bytes from Kafka) → the declared key type; unreadable keys are null."""
    if isinstance(dt, BinaryType):
        return lambda k: None if k is None else (bytes(k) if isinstance(k, (bytes, bytearray)) else str(k).encode())
    cast = _caster(dt, "key")
    if isinstance(dt, (ArrayType, StructType)):  # JSON text (Kafka's JSON key format); unreadable keys are null
        def nested_key(k: Any) -> Any:
            if isinstance(k, (bytes, bytearray)):
                k = bytes(k).decode("utf-8", "replace")
            if isinstance(k, str):
                try:
                    k = json.loads(k)
                except (ValueError, RecursionError):
                    return None
            return cast(k)
        return nested_key

    def key(k: Any) -> Any:
        if isinstance(k, (bytes, bytearray)):
            k = bytes(k).decode("utf-8", "replace")
        if isinstance(k, str) and not isinstance(dt, StringType):
            k = k.strip()
            if isinstance(dt, (IntegerType, LongType)):
                try:
                    k = int(k, 10)
                except ValueError:
                    return None
            elif isinstance(dt, BooleanType):
                k = {"true": True, "false": False}.get(k.lower())
        return cast(k)
    return key


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
    if isinstance(dt, DecimalType):
        exact = decimals.DecimalType(dt.precision, dt.scale)
        # a JSON number (a float: its shortest repr, exact for up to 15 digits) or a JSON string for longer
        # ones; a value with more places than the scale or digits than the precision is null, never rounded
        return guard(lambda v: decimals.to_decimal(exact, v))
    if isinstance(dt, ArrayType):
        item = _caster(dt.elementType, name)
        return guard(lambda v: [item(x) for x in v] if isinstance(v, list) else None)
    if isinstance(dt, MapType):
        val = _caster(dt.valueType, name)
        return guard(lambda v: {str(k): val(x) for k, x in v.items()} if isinstance(v, dict) else None)
    if isinstance(dt, StructType):
        subs = [(f.name, _caster(f.dataType, f"{name}.{f.name}")) for f in dt.fields]
        return guard(lambda v: tuple(c(v.get(n)) for n, c in subs) if isinstance(v, dict) else None)
    raise ValueError(f"field {name!r}: unsupported type {dt.simpleString()}")


def slices(ranges: list[tuple[str, int, int, int, Any]], size: int = SPLIT) -> list[list[tuple[str, int, int, int, Any]]]:
    """Offset ranges ``(topic, partition, start, end, tag)`` grouped into tasks of at most ``size`` records.

    Small batches go in one task (a task per partition would pay a Python
    worker round trip each); big ranges are cut.
    """
    out: list[list[tuple[str, int, int, int, Any]]] = []
    current: list[tuple[str, int, int, int, Any]] = []
    room = size
    for t, p, s, e, tag in ranges:
        while s < e:
            stop = min(e, s + room)
            current.append((t, p, s, stop, tag))
            room -= stop - s
            s = stop
            if room == 0:
                out.append(current)
                current, room = [], size
    if current:
        out.append(current)
    return out
