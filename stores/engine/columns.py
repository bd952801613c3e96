"""Column types on the columnar write path: Arrow input → the stored form, and keys → their Kafka bytes.

Every SQL type has one ``ColumnType``: which Arrow input types it accepts,
how it turns them into the form the store keeps (the vectorized twin of
``schema.coerce_key``: epoch ms for TIMESTAMP, days for DATE, 0/1 for
BOOLEAN), and how a key of that type is serialized for the partitioner.
A new value type is a new entry in ``COLUMN_TYPES``; a composite key
serializes each key column with the same functions.

Errors come back as ``ColumnError(row, message)`` so the caller can name the
store, the batch and the column.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ..catalog.decimals import WIDTH, DecimalType
from ..catalog.nested import NestedType
from ..catalog.partitioner import fixed_width_key_bytes
from ..catalog.schema import KeyTypeError, SqlType, StoreSpec, coerce_key
from ..catalog.tuple_keys import PART_TAG

__all__ = ["ColumnError", "ColumnType", "COLUMN_TYPES", "column_type", "key_column_type", "serialized_keys",
           "encode_decimal_array",
           "first_true"]

_MS_PER_DAY = 86_400_000
_PER_MS = {"s": None, "ms": 1, "us": 1000, "ns": 1_000_000}


class ColumnError(ValueError):
    """An Arrow column that cannot become its SQL type; ``row`` is the first culprit (None: the whole column)."""

    def __init__(self, row: int | None, message: str) -> None:
        super().__init__(message)
        self.row = row


def first_true(mask: pa.Array | pa.ChunkedArray | np.ndarray) -> int | None:
    """Index of the first true (non-null) entry of a boolean mask, or None."""
    if not isinstance(mask, np.ndarray):
        mask = pc.fill_null(mask, False)
        if not pc.any(mask).as_py():
            return None
        mask = mask.to_numpy(zero_copy_only=False)
    hits = np.flatnonzero(mask)
    return int(hits[0]) if len(hits) else None


def _chunks(arr: pa.Array | pa.ChunkedArray) -> pa.Array:
    """One contiguous array (a single chunk as it is: ``combine_chunks`` would copy it)."""
    if isinstance(arr, pa.ChunkedArray):
        return arr.chunk(0) if arr.num_chunks == 1 else arr.combine_chunks()
    return arr


def _refuse(arr: pa.Array, sql: str) -> ColumnError:
    return ColumnError(None, f"an Arrow {arr.type} column cannot hold {sql} values")


def _to_int64(arr: pa.Array, sql: str) -> pa.Array:
    """Integers (and integral floats, as ``coerce_key`` takes 1.0 for 1) → int64, naming the first that does not fit."""
    t = arr.type
    if pa.types.is_null(t):
        return pa.nulls(len(arr), pa.int64())
    if pa.types.is_integer(t):
        if pa.types.is_uint64(t):
            bad = first_true(pc.greater(arr, pa.scalar(2**63 - 1, pa.uint64())))
            if bad is not None:
                raise ColumnError(bad, f"{arr[bad].as_py()!r} is out of range for {sql}")
        return arr.cast(pa.int64())
    if pa.types.is_floating(t):
        vals = arr.cast(pa.float64())
        bad = first_true(pc.or_(pc.not_equal(pc.floor(vals), vals),
                                pc.greater(pc.abs(vals), pa.scalar(2.0**63, pa.float64()))))
        if bad is not None:
            raise ColumnError(bad, f"{arr[bad].as_py()!r} cannot be converted to {sql}")
        return vals.cast(pa.int64(), safe=False)
    raise _refuse(arr, sql)


def _floor_div(arr: pa.Array, by: int) -> pa.Array:
    """Floor division of an int64 array keeping nulls (Arrow's integer divide truncates toward zero)."""
    if by == 1:
        return arr
    vals = arr.to_numpy(zero_copy_only=False) if arr.null_count else arr.to_numpy()
    if arr.null_count:
        mask = arr.is_null().to_numpy(zero_copy_only=False)
        vals = np.where(mask, 0, vals).astype(np.int64)
        return pa.array(np.floor_divide(vals, by), pa.int64(), mask=mask)
    return pa.array(np.floor_divide(vals, by), pa.int64())


def _epoch_ms(arr: pa.Array, sql: str) -> pa.Array:
    """TIMESTAMP: epoch ms from timestamps of any unit (floored, as ``to_epoch_ms``), dates, or ints taken as ms."""
    t = arr.type
    if pa.types.is_timestamp(t):
        raw = arr.cast(pa.int64())
        if t.unit == "s":
            return pc.multiply_checked(raw, 1000)
        return _floor_div(raw, _PER_MS[t.unit])  # type: ignore[arg-type]
    if pa.types.is_date32(t):
        return pc.multiply_checked(arr.cast(pa.int32()).cast(pa.int64()), _MS_PER_DAY)
    if pa.types.is_date64(t):
        return arr.cast(pa.int64())
    if pa.types.is_integer(t) or pa.types.is_null(t):
        return _to_int64(arr, sql)
    raise _refuse(arr, sql)


def _days(arr: pa.Array, sql: str) -> pa.Array:
    """DATE: days since the epoch from dates, timestamps (their UTC day) or ints taken as days."""
    t = arr.type
    if pa.types.is_date32(t):
        return arr.cast(pa.int32()).cast(pa.int64())
    if pa.types.is_date64(t):
        return _floor_div(arr.cast(pa.int64()), _MS_PER_DAY)
    if pa.types.is_timestamp(t):
        return _floor_div(_epoch_ms(arr, sql), _MS_PER_DAY)
    if pa.types.is_integer(t) or pa.types.is_null(t):
        return _to_int64(arr, sql)
    raise _refuse(arr, sql)


def _double(arr: pa.Array, sql: str) -> pa.Array:
    t = arr.type
    if pa.types.is_floating(t) or pa.types.is_integer(t) or pa.types.is_decimal(t) or pa.types.is_null(t):
        return arr.cast(pa.float64())
    raise _refuse(arr, sql)


def _text(arr: pa.Array, sql: str) -> pa.Array:
    t = arr.type
    if pa.types.is_dictionary(t):
        arr, t = arr.dictionary_decode(), t.value_type
    if pa.types.is_string(t) or pa.types.is_large_string(t):
        return arr
    if pa.types.is_string_view(t):
        return arr.cast(pa.string())
    if pa.types.is_null(t):
        return pa.nulls(len(arr), pa.string())
    raise _refuse(arr, sql)


def _boolean(arr: pa.Array, sql: str) -> pa.Array:
    t = arr.type
    if pa.types.is_boolean(t) or pa.types.is_null(t):
        return arr.cast(pa.int64())  # SQLite keeps booleans as 0/1; readers turn them back into bools
    raise _refuse(arr, sql)


def _blob(arr: pa.Array, sql: str) -> pa.Array:
    t = arr.type
    if pa.types.is_binary(t) or pa.types.is_fixed_size_binary(t) or pa.types.is_large_binary(t) or pa.types.is_null(t):
        return arr.cast(pa.binary())
    if pa.types.is_binary_view(t):
        return arr.cast(pa.binary())
    raise _refuse(arr, sql)


@dataclass(frozen=True)
class ColumnType:
    """One SQL type on the write path: Arrow input → stored form (``encode``), and the Arrow type of that form."""

    sql: SqlType | DecimalType | NestedType
    storage: pa.DataType
    convert: Callable[[pa.Array, str], pa.Array]

    def encode(self, arr: pa.Array | pa.ChunkedArray) -> pa.Array:
        return self.convert(_chunks(arr), self.sql.value)

    def input_type(self) -> pa.DataType:
        """The Arrow type of the canonical Python values ``coerce_key`` returns (booleans stay bool)."""
        return pa.bool_() if self.sql is SqlType.BOOLEAN else self.storage


COLUMN_TYPES: dict[SqlType, ColumnType] = {
    SqlType.BIGINT: ColumnType(SqlType.BIGINT, pa.int64(), _to_int64),
    SqlType.INTEGER: ColumnType(SqlType.INTEGER, pa.int64(), _to_int64),
    SqlType.DOUBLE: ColumnType(SqlType.DOUBLE, pa.float64(), _double),
    SqlType.VARCHAR: ColumnType(SqlType.VARCHAR, pa.string(), _text),
    SqlType.BOOLEAN: ColumnType(SqlType.BOOLEAN, pa.int64(), _boolean),
    SqlType.TIMESTAMP: ColumnType(SqlType.TIMESTAMP, pa.int64(), _epoch_ms),
    SqlType.DATE: ColumnType(SqlType.DATE, pa.int64(), _days),
    SqlType.BLOB: ColumnType(SqlType.BLOB, pa.binary(), _blob),
}


def column_type(t: SqlType | DecimalType | NestedType) -> ColumnType:
    """The write-path type of a column (a nested type: its values as canonical JSON text; a decimal: 16 bytes)."""
    if isinstance(t, NestedType):
        return ColumnType(t, pa.string(), lambda arr, sql: _nested_json(arr, t))
    if isinstance(t, DecimalType):
        return ColumnType(t, pa.binary(), lambda arr, sql: _decimal(arr, t))
    return COLUMN_TYPES[t]


def _decimal(arr: pa.Array, t: DecimalType) -> pa.Array:
    """DECIMAL: decimal128/256 or integer Arrow values (rescaled exactly, refused where digits would be lost),
    or already-stored 16-byte values → the stored bytes (``catalog/decimals.py``). Floats are refused: they
    are not exact (cast to DECIMAL in Spark)."""
    ty = arr.type
    if pa.types.is_null(ty) or len(arr) == 0:  # an empty batch's placeholder columns carry no values
        return pa.nulls(len(arr), pa.binary())
    if pa.types.is_binary(ty) or pa.types.is_large_binary(ty) or pa.types.is_fixed_size_binary(ty):
        raw = arr.cast(pa.binary())
        bad = first_true(pc.not_equal(pc.binary_length(raw), WIDTH))
        if bad is not None:
            raise ColumnError(bad, f"a stored {t.value} value is {WIDTH} bytes, got {raw[bad].as_py()!r}")
        return raw
    if not (pa.types.is_decimal(ty) or pa.types.is_integer(ty)):
        raise ColumnError(None, f"an Arrow {ty} column cannot hold {t.value} values exactly"
                                + ("; cast it to a DECIMAL in the pipeline" if pa.types.is_floating(ty) else ""))
    try:
        if pa.types.is_integer(ty):
            arr = arr.cast(pa.decimal128(20, 0))  # every 64-bit integer exactly; the value check comes next
        exact = arr.cast(pa.decimal128(t.precision, t.scale))  # safe cast: refuses overflow and lost decimal places
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as exc:
        raise ColumnError(None, f"cannot hold these {ty} values as {t.value} exactly: {exc}") from None
    return encode_decimal_array(exact)


def _nested_json(arr: pa.Array, t: NestedType) -> pa.Array:
    """ARRAY/STRUCT/MAP Arrow values (or JSON text of them) → canonical JSON text, one Python value per row.

    Nested columns are the one place the write path goes through Python per
    row: their JSON has to be built anyway, and Arrow has no kernel for it.
    """
    ty = arr.type
    if pa.types.is_null(ty):
        return pa.nulls(len(arr), pa.string())
    text = pa.types.is_string(ty) or pa.types.is_large_string(ty)
    if not (text or pa.types.is_list(ty) or pa.types.is_large_list(ty) or pa.types.is_struct(ty)
            or pa.types.is_map(ty) or pa.types.is_fixed_size_list(ty)):
        raise _refuse(arr, t.value)
    out: list[str | None] = []
    for i, v in enumerate(arr.to_pylist()):
        if v is None:
            out.append(None)
            continue
        try:
            if text:
                v = json.loads(v)
                if t.kind == "MAP" and isinstance(v, list):
                    v = [tuple(p) for p in v]
            out.append(coerce_key(t, v))
        except (KeyTypeError, ValueError) as exc:
            raise ColumnError(i, str(exc)) from None
    return pa.array(out, pa.string())


_SIGN_BIT = np.uint64(1 << 63)


def encode_decimal_array(arr: pa.Array) -> pa.Array:
    """A decimal128 Arrow array → its stored bytes (binary), vectorized: no Python value per row.

    decimal128 holds each value as a 16-byte little-endian two's complement of the
    unscaled integer; the stored form is the same 128 bits big-endian with the sign flipped.
    """
    n = len(arr)
    words = np.frombuffer(arr.buffers()[1], dtype="<u8")[2 * arr.offset: 2 * (arr.offset + n)].reshape(n, 2)
    out = np.empty((n, 2), dtype=">u8")
    out[:, 0] = words[:, 1] ^ _SIGN_BIT
    out[:, 1] = words[:, 0]
    validity = None
    if arr.null_count:
        validity = pa.py_buffer(np.packbits(arr.is_valid().to_numpy(zero_copy_only=False), bitorder="little"))
    fixed = pa.FixedSizeBinaryArray.from_buffers(pa.binary(WIDTH), n, [validity, pa.py_buffer(out.tobytes())])
    return fixed.cast(pa.binary())


# -- composite keys: a struct of the key columns → the tuple_keys bytes, vectorized -------------------------------
_BIAS = np.uint64(1 << 63)
_ESC_IN, _ESC_OUT, _END = b"\x00", b"\x00\xff", b"\x00\x01"


def _fixed_parts(vals: np.ndarray, width: int) -> pa.Array:
    """Big-endian ``width``-byte values (one row of ``vals`` per key) with the part tag in front, as binary."""
    n = len(vals)
    buf = np.empty((n, width + 1), dtype=np.uint8)
    buf[:, 0] = PART_TAG[0]
    buf[:, 1:] = vals.reshape(n, width)
    return pa.FixedSizeBinaryArray.from_buffers(pa.binary(width + 1), n, [None, pa.py_buffer(buf.tobytes())]).cast(
        pa.binary())


def _key_part(arr: pa.Array, t: SqlType | DecimalType, name: str) -> pa.Array:
    """One key column (already in its stored form) → its order-preserving bytes (see catalog/tuple_keys.py)."""
    if isinstance(t, DecimalType):  # stored form: already fixed-width and order-preserving
        return pc.binary_join_element_wise(pa.scalar(PART_TAG, pa.binary()), arr.cast(pa.binary()), b"")
    if t in (SqlType.BIGINT, SqlType.INTEGER, SqlType.DATE, SqlType.TIMESTAMP, SqlType.BOOLEAN):
        vals = arr.to_numpy(zero_copy_only=False).astype(np.int64)
        if t is SqlType.BOOLEAN:
            return _fixed_parts(vals.astype(np.uint8), 1)
        return _fixed_parts((vals.view(np.uint64) ^ _BIAS).astype(">u8").view(np.uint8).reshape(-1, 8), 8)
    if t is SqlType.DOUBLE:
        vals = arr.to_numpy(zero_copy_only=False).astype(np.float64) + 0.0  # -0.0 is 0.0
        bad = first_true(np.isnan(vals))
        if bad is not None:
            raise ColumnError(bad, f"key column {name!r}: NaN is not a key")
        bits = vals.view(np.uint64)
        neg = (bits & _BIAS) != 0
        bits = np.where(neg, ~bits, bits | _BIAS)
        return _fixed_parts(bits.astype(">u8").view(np.uint8).reshape(-1, 8), 8)
    raw = arr.cast(pa.binary())
    esc = pc.replace_substring(raw, _ESC_IN, _ESC_OUT)
    return pc.binary_join_element_wise(pa.scalar(PART_TAG, pa.binary()), esc, pa.scalar(_END, pa.binary()), b"")


def _composite(spec: StoreSpec) -> Callable[[pa.Array, str], pa.Array]:
    parts = spec.key_parts

    def convert(arr: pa.Array, sql: str) -> pa.Array:
        ty = arr.type
        if pa.types.is_binary(ty) or pa.types.is_large_binary(ty):
            return arr.cast(pa.binary())  # already stored keys (Change objects' keys, encoded by the codec)
        if not pa.types.is_struct(ty) or ty.num_fields != len(parts):
            raise ColumnError(None, f"a composite key ({', '.join(c.name for c in parts)}) arrives as a struct of "
                                    f"{len(parts)} fields, got an Arrow {ty} column")
        if arr.null_count:
            raise ColumnError(first_true(arr.is_null()), "the key should not be null")
        pieces = []
        for i, col in enumerate(parts):
            field = arr.field(i)
            try:
                stored = column_type(col.type).convert(field, col.type.value)
            except ColumnError as exc:
                raise ColumnError(exc.row, f"key column {col.name!r}: {exc}") from None
            bad = first_true(stored.is_null())
            if bad is not None:
                raise ColumnError(bad, f"key column {col.name!r}: the key should not be null")
            pieces.append(_key_part(stored, col.type, col.name))
        return pc.binary_join_element_wise(*pieces, b"")
    return convert


def key_column_type(spec: StoreSpec) -> ColumnType:
    """The write-path type of the stored key: the key column's, or a composite key's bytes."""
    if spec.composite:
        return ColumnType(SqlType.BLOB, pa.binary(), _composite(spec))
    return column_type(spec.key.type)


def serialized_keys(keys: pa.Array, sql_type: SqlType | DecimalType) -> tuple[np.ndarray, np.ndarray]:
    """(data, offsets) of the Kafka serializer bytes of stored-form keys (no nulls), for the partitioner.

    Strings are their UTF-8 bytes as Arrow holds them (no copy); the
    fixed-width types are packed as ``partitioner.key_bytes`` packs them.
    """
    keys = _chunks(keys)
    if sql_type in (SqlType.VARCHAR, SqlType.BLOB) or isinstance(sql_type, (DecimalType, NestedType)):
        # decimals: their stored bytes; ARRAY/STRUCT keys: their canonical JSON text
        width = np.int64 if pa.types.is_large_string(keys.type) or pa.types.is_large_binary(keys.type) else np.int32
        _validity, offs, data = keys.buffers()
        offsets = np.frombuffer(offs, dtype=width)[keys.offset:keys.offset + len(keys) + 1].astype(np.int64)
        raw = np.frombuffer(data, dtype=np.uint8) if data is not None else np.zeros(0, np.uint8)
        return raw, offsets
    return fixed_width_key_bytes(keys.to_numpy(zero_copy_only=False), sql_type)
