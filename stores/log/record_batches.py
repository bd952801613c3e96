"""A stream's records as Arrow record batches: the key, the value fields of its schema, the record's columns.

The same reading of a record the pipeline's sources make (``stores.pipeline.stream_rows``), without Spark: a
value is a JSON object whose fields are read by name, leniently (a field of the wrong type, or a value that is
not an object, reads as null, never as a failed scan), a tombstone (no value) has every field null; the key is
the log's text (Kafka's bytes as UTF-8) read as the declared key type (ARRAY/STRUCT keys as JSON text).
Text fields that hold JSON objects or arrays read as their JSON text.

Arrow types are the stores' scan types (times ``timestamp[ms, UTC]``, dates ``date32``, decimals
``decimal128``), so a stream's relation reads in DuckDB as a store's does.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from datetime import date, datetime, timezone
from typing import Any

import numpy as np
import pyarrow as pa

from ..catalog import decimals
from ..catalog.decimals import DecimalType
from ..catalog.nested import NestedType
from ..catalog.schema import Column, SqlType
from ..catalog.streams import StreamSpec

__all__ = ["arrow_type", "stream_schema", "BatchBuilder"]

_SCALARS: dict[SqlType, pa.DataType] = {
    SqlType.BIGINT: pa.int64(), SqlType.INTEGER: pa.int32(), SqlType.DOUBLE: pa.float64(),
    SqlType.VARCHAR: pa.string(), SqlType.BOOLEAN: pa.bool_(), SqlType.TIMESTAMP: pa.timestamp("ms", tz="UTC"),
    SqlType.DATE: pa.date32(), SqlType.BLOB: pa.binary(),
}
_INT_RANGE = {SqlType.BIGINT: (-(2**63), 2**63 - 1), SqlType.INTEGER: (-(2**31), 2**31 - 1)}
_EPOCH_DAY = date(1970, 1, 1).toordinal()


def arrow_type(t: SqlType | DecimalType | NestedType) -> pa.DataType:
    """A column type as a scan hands it to DuckDB (the stores' Arrow types)."""
    if isinstance(t, DecimalType):
        return pa.decimal128(t.precision, t.scale)
    if isinstance(t, NestedType):
        if t.kind == "ARRAY":
            return pa.list_(arrow_type(t.element))
        if t.kind == "MAP":
            return pa.map_(arrow_type(t.key), arrow_type(t.element))
        return pa.struct([pa.field(n, arrow_type(ft)) for n, ft in t.fields])
    return _SCALARS[t]


def stream_schema(spec: StreamSpec) -> pa.Schema:
    """The record batches' schema: ``spec.all_columns()`` in order (nullable, as a relation's failure rows are)."""
    return pa.schema([pa.field(c.name, arrow_type(c.type)) for c in spec.all_columns()])


# -- lenient conversion, one function per column type ------------------------------------------------------------
def _guard(fn: Callable[[Any], Any]) -> Callable[[Any], Any]:
    def cast(v: Any) -> Any:
        if v is None:
            return None
        try:
            return fn(v)
        except (TypeError, ValueError, OverflowError, ArithmeticError):
            return None
    return cast


def _ms(v: Any) -> int:
    if isinstance(v, bool):
        raise TypeError
    if isinstance(v, (int, float)):
        return int(v)
    d = datetime.fromisoformat(str(v).strip().replace("Z", "+00:00"))
    if d.tzinfo is None:
        d = d.replace(tzinfo=timezone.utc)
    return int(d.timestamp() * 1000)


def _days(v: Any) -> int:
    if isinstance(v, datetime):
        v = v.date()
    if not isinstance(v, date):
        v = date.fromisoformat(str(v)[:10])
    return v.toordinal() - _EPOCH_DAY


def _int_of(t: SqlType) -> Callable[[Any], Any]:
    lo, hi = _INT_RANGE[t]

    def to_int(v: Any) -> int:
        if isinstance(v, bool) or (isinstance(v, float) and not v.is_integer()):
            raise ValueError
        n = int(v)
        if not lo <= n <= hi:
            raise OverflowError
        return n
    return to_int


def _text(v: Any) -> str:
    if isinstance(v, str):
        return v
    if isinstance(v, (dict, list, bool)):
        return json.dumps(v, separators=(",", ":"))
    return str(v)


def converter(t: SqlType | DecimalType | NestedType) -> Callable[[Any], Any]:
    """JSON value → the Python value pyarrow builds ``arrow_type(t)`` from; null when it does not fit."""
    if isinstance(t, DecimalType):
        return _guard(lambda v: None if isinstance(v, bool) else decimals.to_decimal(t, v))
    if isinstance(t, NestedType):
        if t.kind == "ARRAY":
            item = converter(t.element)
            return _guard(lambda v: [item(x) for x in v] if isinstance(v, list) else None)
        if t.kind == "MAP":
            key, val = converter(t.key), converter(t.element)
            return _guard(lambda v: [(key(k), val(x)) for k, x in v.items() if key(k) is not None]
                          if isinstance(v, dict) else None)
        subs = [(n, converter(ft)) for n, ft in t.fields]
        return _guard(lambda v: {n: c(v.get(n)) for n, c in subs} if isinstance(v, dict) else None)
    if t in _INT_RANGE:
        return _guard(_int_of(t))
    if t is SqlType.DOUBLE:
        return _guard(lambda v: None if isinstance(v, bool) else float(v))
    if t is SqlType.VARCHAR:
        return _guard(_text)
    if t is SqlType.BOOLEAN:
        return _guard(lambda v: v if isinstance(v, bool) else None)
    if t is SqlType.TIMESTAMP:
        return _guard(_ms)
    if t is SqlType.DATE:
        return _guard(_days)
    if t is SqlType.BLOB:
        return _guard(lambda v: v if isinstance(v, bytes) else str(v).encode("utf-8"))
    raise ValueError(f"unsupported column type {t}")


def key_converter(col: Column) -> Callable[[Any], Any]:
    """A record key (the EventLog's text or integer, Kafka's bytes) → the declared key type; unreadable: null."""
    t = col.type
    if t is SqlType.BLOB:
        return lambda k: None if k is None else (bytes(k) if isinstance(k, (bytes, bytearray)) else
                                                 str(k).encode("utf-8"))
    cast = converter(t)
    if isinstance(t, NestedType):  # JSON text, as Kafka's JSON key format carries an ARRAY or STRUCT key
        def nested(k: Any) -> Any:
            if isinstance(k, (bytes, bytearray)):
                k = bytes(k).decode("utf-8", "replace")
            if isinstance(k, str):
                try:
                    k = json.loads(k)
                except (ValueError, RecursionError):
                    return None
            return cast(k)
        return nested

    def key(k: Any) -> Any:
        if isinstance(k, (bytes, bytearray)):
            k = bytes(k).decode("utf-8", "replace")
        if isinstance(k, str) and t is not SqlType.VARCHAR:
            k = k.strip()
            if t in _INT_RANGE:
                try:
                    k = int(k, 10)
                except ValueError:
                    return None
            elif t is SqlType.BOOLEAN:
                k = {"true": True, "false": False}.get(k.lower())
        return cast(k)
    return key


class BatchBuilder:
    """Collects one partition's records and makes record batches of them (``stream_schema(spec)``)."""

    def __init__(self, spec: StreamSpec) -> None:
        self.spec = spec
        self.schema = stream_schema(spec)
        self._key = key_converter(spec.key)
        self._fields = [(c.name, converter(c.type)) for c in spec.values]
        self._headers = spec.headers
        self._reset()

    def _reset(self) -> None:
        self._keys: list[Any] = []
        self._values: list[list[Any]] = [[] for _ in self._fields]
        self._times: list[int] = []
        self._offsets: list[int] = []
        self._hs: list[Any] = []

    def __len__(self) -> int:
        return len(self._offsets)

    def add(self, offset: int, key: Any, value: Any, timestamp: int, headers: Any = ()) -> None:
        """One record; ``value`` a parsed JSON value (the EventLog's) or its bytes (Kafka's), None a tombstone."""
        if isinstance(value, (bytes, bytearray, memoryview)):
            try:
                value = json.loads(bytes(value))
            except (ValueError, RecursionError):
                value = None  # not JSON: every field null, as the pipeline's sources read it
        self._keys.append(self._key(key))
        if isinstance(value, dict):
            for out, (name, cast) in zip(self._values, self._fields):
                out.append(cast(value.get(name)))
        else:
            for out in self._values:
                out.append(None)
        self._times.append(timestamp)
        self._offsets.append(offset)
        if self._headers:
            self._hs.append([{"key": str(n), "value": None if v is None else bytes(v)} for n, v in headers or ()])

    def flush(self, partition: int) -> pa.RecordBatch:
        """The records added since the last flush, as one batch of ``partition``."""
        n = len(self._offsets)
        schema = self.schema
        arrays = [pa.array(self._keys, type=schema.field(0).type)]
        arrays += [pa.array(vals, type=schema.field(i + 1).type) for i, vals in enumerate(self._values)]
        base = 1 + len(self._fields)
        arrays.append(pa.array(np.asarray(self._times, dtype=np.int64)).cast(schema.field(base).type))
        arrays.append(pa.array(np.full(n, partition, dtype=np.int32)))
        arrays.append(pa.array(np.asarray(self._offsets, dtype=np.int64)))
        if self._headers:
            arrays.append(pa.array(self._hs, type=schema.field(base + 3).type))
        self._reset()
        return pa.RecordBatch.from_arrays(arrays, schema=schema)
