"""Between Python values and SQLite columns: key coercion, value validation, value tuples.

Keys are stored in their canonical SQL form (``schema.coerce_key``) with a
column affinity that makes SQLite order them by SQL type: integers
numerically, strings by code point (BINARY collation), timestamps as epoch ms.
"""

from __future__ import annotations

import keyword
from collections import namedtuple
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from ..catalog.decimals import DecimalType, decode_decimal
from ..catalog.nested import NestedType, decode_nested
from ..catalog.schema import Column, KeyTypeError, SqlType, StoreSpec, coerce_key
from ..catalog.tuple_keys import coerce_tuple, decode_tuple, encode_tuple
from ..iqv2.values import KeyValue

__all__ = ["affinity", "ValueCodec", "key_coercer", "BatchError"]


class BatchError(ValueError):
    """A change in a batch is malformed; nothing of the batch was applied."""


_AFFINITY = {
    SqlType.BIGINT: "INTEGER",
    SqlType.INTEGER: "INTEGER",
    SqlType.DATE: "INTEGER",
    SqlType.TIMESTAMP: "INTEGER",
    SqlType.BOOLEAN: "INTEGER",
    SqlType.DOUBLE: "REAL",
    SqlType.VARCHAR: "TEXT",
    SqlType.BLOB: "BLOB",
}


# the Python type that already is a column's canonical form (TIMESTAMP/DATE ints too): no coercion needed
_CANONICAL: dict[SqlType, type] = {
    SqlType.BIGINT: int, SqlType.INTEGER: int, SqlType.DATE: int, SqlType.TIMESTAMP: int,
    SqlType.BOOLEAN: bool, SqlType.DOUBLE: float, SqlType.VARCHAR: str, SqlType.BLOB: bytes,
}


class _NeverCanonical:
    """The fast-path type of a nested column: no Python value is already its JSON text."""


def affinity(t: SqlType | DecimalType | NestedType) -> str:
    """The SQLite column affinity: nested values are JSON text, decimals their 16 ordered bytes."""
    if isinstance(t, DecimalType):
        return "BLOB"
    return "TEXT" if isinstance(t, NestedType) else _AFFINITY[t]


def _canonical(t: SqlType | DecimalType | NestedType) -> type:
    """The Python type that needs no coercion on write (none for nested and decimal columns)."""
    return _CANONICAL[t] if isinstance(t, SqlType) else _NeverCanonical


def _decoder(t: SqlType | DecimalType | NestedType) -> Callable[[Any], Any] | None:
    """Stored form → what readers get, for the types whose stored form is not that: booleans, nested, decimals."""
    if t is SqlType.BOOLEAN:
        return bool
    if isinstance(t, NestedType):
        return lambda v: decode_nested(t, v)
    if isinstance(t, DecimalType):
        return lambda v: decode_decimal(t, v)
    return None


def composite_key_coercer(spec: StoreSpec) -> Callable[[Any], Any]:
    """A composite key (tuple, list or mapping by column name) → its stored bytes; bytes pass as stored keys."""
    parts = spec.key_parts

    def coerce(v: Any) -> Any:
        if type(v) is bytes:
            return v
        return encode_tuple(parts, coerce_tuple(parts, v))
    return coerce


def key_coercer(t: SqlType) -> Callable[[Any], Any]:
    """A fast coercer for query keys: exact canonical types pass straight through."""
    if t in (SqlType.BIGINT, SqlType.INTEGER, SqlType.DATE, SqlType.TIMESTAMP):
        def coerce_int(v: Any) -> Any:
            if type(v) is int:
                return v
            return coerce_key(t, v)
        return coerce_int
    if t is SqlType.VARCHAR:
        def coerce_str(v: Any) -> Any:
            if type(v) is str:
                return v
            return coerce_key(t, v)
        return coerce_str
    return lambda v: coerce_key(t, v)


def _field_names(cols: Sequence[Column]) -> list[str]:
    out = []
    for i, c in enumerate(cols):
        n = c.name
        if not n.isidentifier() or keyword.iskeyword(n) or n.startswith("_"):
            n = f"c{i}_{n}" if n.isidentifier() and not keyword.iskeyword(n) else f"c{i}"
        out.append(n)
    return out


class ValueCodec:
    """Value tuples of one store: validation on write, namedtuple rows on read.

    The namedtuple compares equal to a plain tuple, so ``KeyQuery(2).result == (5,)``
    while ``.revenue`` still works for readers who like names.
    """

    def __init__(self, spec: StoreSpec) -> None:
        self.spec = spec
        self.columns = spec.values
        self.n = len(spec.values)
        self.tuple_type = namedtuple(f"{spec.name}_value", _field_names(spec.values))  # type: ignore[misc]
        self._make = self.tuple_type._make
        self._new = tuple.__new__  # the namedtuple from a tuple without _make's Python frame
        # value columns whose stored form is not what readers get: booleans (0/1) and nested values (JSON text)
        self._decoders: list[tuple[int, Callable[[Any], Any]]] = [
            (i, dec) for i, c in enumerate(spec.values) if (dec := _decoder(c.type)) is not None]
        self._bool_idx = [i for i, _ in self._decoders]
        self.key_type = spec.key.type
        self.composite = spec.composite
        self.coerce_query_key = composite_key_coercer(spec) if spec.composite else key_coercer(spec.key.type)
        self._key_decoder = None if spec.composite else _decoder(spec.key.type)
        self._key_is_bool = self._key_decoder is not None or spec.composite  # the key needs decoding
        self._key_fast = _canonical(spec.key.type)
        self._fast = [_canonical(c.type) for c in spec.values]

    # -- reads ---------------------------------------------------------------
    def value(self, row: Sequence[Any], start: int = 0) -> tuple[Any, ...]:
        vals = row[start : start + self.n]
        if self._decoders:
            vals = list(vals)
            for i, dec in self._decoders:
                if vals[i] is not None:
                    vals[i] = dec(vals[i])
        return self._new(self.tuple_type, vals)

    def plain_value(self, row: Sequence[Any], start: int = 0) -> tuple[Any, ...]:
        """``value`` as a plain tuple (equal to it): for readers that only index it (the point lane)."""
        if not self._decoders:
            return tuple(row[start : start + self.n])
        return tuple(self.value(row, start))

    def pair_converter(self, start: int) -> Callable[[Any], Any]:
        """raw row ``(key, ..., v0, v1, ...)`` -> ``KeyValue(key, value)``, the value columns from ``start``.

        Built once per query so the per-row work is one slice and two tuple
        constructions when no column needs converting (the common case).
        """
        if self._bool_idx or self._key_is_bool:
            key, value = self.key, self.value
            return lambda r: KeyValue(key(r[0]), value(r, start))
        new, vt, end = tuple.__new__, self.tuple_type, start + self.n  # skips the namedtuples' Python __new__
        return lambda r: new(KeyValue, (r[0], new(vt, r[start:end])))

    def key(self, raw: Any) -> Any:
        """A stored key → what readers get: a bool, the tuple of a composite key, or the key itself."""
        if self.composite:
            return decode_tuple(self.spec.key_parts, raw)
        return self._key_decoder(raw) if self._key_decoder is not None else raw

    # -- writes --------------------------------------------------------------
    def write_key(self, key: Any, where: str) -> Any:
        if type(key) is self._key_fast:
            return key
        try:
            if self.composite:
                return self.coerce_query_key(key)
            return coerce_key(self.key_type, key)
        except KeyTypeError as exc:
            raise BatchError(f"{where}: key column {self.spec.key.name!r}: {exc}") from None

    def write_value(self, value: Any, where: str) -> tuple[Any, ...]:
        """Validate and canonicalise one value tuple (or mapping by column name)."""
        if isinstance(value, Mapping):
            extra = sorted(set(value) - {c.name for c in self.columns})
            if extra:
                raise BatchError(
                    f"{where}: unknown value column(s) {extra}; store columns are {list(self.spec.value_names())}"
                )
            value = tuple(value.get(c.name) for c in self.columns)
        if not isinstance(value, (tuple, list)):
            raise BatchError(f"{where}: value must be a tuple of {self.n} column(s), got {type(value).__name__}")
        if len(value) != self.n:
            raise BatchError(
                f"{where}: value has {len(value)} column(s), store {self.spec.name!r} has {self.n} "
                f"({', '.join(self.spec.value_names())})"
            )
        out = []
        for col, fast, v in zip(self.columns, self._fast, value):
            if type(v) is fast:
                out.append(v)
                continue
            if v is None:
                if not col.nullable:
                    raise BatchError(f"{where}: value column {col.name!r} is NOT NULL but got None")
                out.append(None)
                continue
            try:
                out.append(coerce_key(col.type, v))
            except KeyTypeError as exc:
                raise BatchError(f"{where}: value column {col.name!r}: {exc}") from None
        return tuple(out)

