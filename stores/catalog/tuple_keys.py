"""Composite keys as one byte string whose byte order is the key tuple's order.

A store keyed by several columns (``groupBy("region", "product")``) keeps
its key as ONE stored column: the parts encoded one after the other so
that comparing the bytes (SQLite compares BLOBs with memcmp) compares the
tuples part by part, each part by its SQL type. So a whole key is a point
lookup, a key prefix (``region = 'eu'``) is a contiguous byte range
(``prefix_range``), and the partitioner hashes these same bytes — the
planner, the writer and IQv2 callers all agree on where a key lives.

Each part is ``0x01`` followed by:

- integers, DATE (days), TIMESTAMP (epoch ms): 8 bytes big-endian of ``v + 2**63``;
- BOOLEAN: one byte 0 or 1;
- DOUBLE: the IEEE bits, sign bit flipped for positives, all bits for negatives (-0.0 is 0.0; NaN refused);
- DECIMAL: its 16 stored bytes (``decimals.py``: already order-preserving and fixed-width);
- VARCHAR (UTF-8) and BLOB: the bytes with ``00`` escaped as ``00 FF``, then ``00 01``.

Parts are self-delimiting and never start with ``FF``, so every key with
prefix P sorts between ``enc(P)`` and ``enc(P) + FF``.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from typing import Any

from .decimals import WIDTH, DecimalType, decode_decimal, encode_decimal
from .schema import Column, KeyTypeError, SqlType, coerce_key

__all__ = ["encode_tuple", "decode_tuple", "coerce_tuple", "prefix_range", "PART_TAG", "PREFIX_END"]

PART_TAG = b"\x01"
PREFIX_END = b"\xff"
_BIAS = 1 << 63
_INTS = (SqlType.BIGINT, SqlType.INTEGER, SqlType.DATE, SqlType.TIMESTAMP)


def coerce_tuple(parts: Sequence[Column], key: Any, *, prefix: bool = False) -> tuple[Any, ...]:
    """A composite key (tuple, list or mapping by column name) → the tuple of canonical part values.

    ``prefix``: a shorter tuple (the leading parts) is allowed, for range bounds.
    """
    names = [c.name for c in parts]
    if isinstance(key, dict):
        extra = sorted(set(key) - set(names))
        if extra:
            raise KeyTypeError(f"unknown key column(s) {extra}; the key columns are {names}")
        key = tuple(key[n] for n in names if n in key)
    if isinstance(key, (bytes, str)) or not isinstance(key, (tuple, list)):
        raise KeyTypeError(f"a key of this store is a tuple ({', '.join(names)}), got {key!r}")
    if len(key) > len(parts) or (len(key) < len(parts) and not prefix) or not key:
        raise KeyTypeError(f"a key of this store has {len(parts)} columns ({', '.join(names)}), got {len(key)}: {key!r}")
    out = []
    for col, v in zip(parts, key):
        try:
            out.append(coerce_key(col.type, v))
        except KeyTypeError as exc:
            raise KeyTypeError(f"key column {col.name!r}: {exc}") from None
    return tuple(out)


def _part(t: Any, v: Any) -> bytes:
    if t in _INTS:
        return PART_TAG + struct.pack(">Q", v + _BIAS)
    if t is SqlType.BOOLEAN:
        return PART_TAG + (b"\x01" if v else b"\x00")
    if t is SqlType.DOUBLE:
        if v != v:
            raise KeyTypeError("NaN is not a key")
        bits = struct.unpack(">Q", struct.pack(">d", v + 0.0))[0]
        bits = bits ^ 0xFFFFFFFFFFFFFFFF if bits & _BIAS else bits | _BIAS
        return PART_TAG + struct.pack(">Q", bits)
    if isinstance(t, DecimalType):  # stored bytes (coerce_key), or a Decimal bound from the planner
        return PART_TAG + (v if isinstance(v, bytes) else encode_decimal(t, v))
    if t is SqlType.VARCHAR:
        v = v.encode("utf-8")
    if t in (SqlType.VARCHAR, SqlType.BLOB):
        return PART_TAG + v.replace(b"\x00", b"\x00\xff") + b"\x00\x01"
    raise KeyTypeError(f"a {t} column cannot be part of a key")


def encode_tuple(parts: Sequence[Column], values: Sequence[Any]) -> bytes:
    """Canonical part values (``coerce_tuple``) → the stored key bytes (of a prefix, if fewer values)."""
    return b"".join(_part(c.type, v) for c, v in zip(parts, values))


def decode_tuple(parts: Sequence[Column], data: bytes) -> tuple[Any, ...]:
    """Stored key bytes → the tuple of canonical part values (booleans as bool, decimals as Decimal)."""
    out: list[Any] = []
    i = 0
    for col in parts:
        t = col.type
        if data[i:i + 1] != PART_TAG:
            raise ValueError(f"malformed composite key {data!r} at byte {i}")
        i += 1
        if t in _INTS:
            out.append(struct.unpack(">Q", data[i:i + 8])[0] - _BIAS)
            i += 8
        elif t is SqlType.BOOLEAN:
            out.append(data[i] == 1)
            i += 1
        elif t is SqlType.DOUBLE:
            bits = struct.unpack(">Q", data[i:i + 8])[0]
            bits = bits ^ _BIAS if bits & _BIAS else bits ^ 0xFFFFFFFFFFFFFFFF
            out.append(struct.unpack(">d", struct.pack(">Q", bits))[0])
            i += 8
        elif isinstance(t, DecimalType):
            out.append(decode_decimal(t, data[i:i + WIDTH]))
            i += WIDTH
        else:
            end = i
            while True:
                end = data.index(b"\x00", end)
                if data[end + 1] == 0xFF:
                    end += 2
                    continue
                break
            raw = data[i:end].replace(b"\x00\xff", b"\x00")
            out.append(raw.decode("utf-8") if t is SqlType.VARCHAR else raw)
            i = end + 2
    return tuple(out)


def prefix_range(parts: Sequence[Column], prefix: Sequence[Any], lo: Any = None, hi: Any = None
                 ) -> tuple[bytes | None, bytes | None]:
    """Inclusive byte bounds of the keys whose leading parts equal ``prefix`` and whose next part is in [lo, hi].

    ``lo``/``hi`` are canonical values of part ``len(prefix)`` (None: open).
    With an empty prefix and no bounds the range is the whole store (None, None).
    """
    head = encode_tuple(parts, prefix)
    nxt = parts[len(prefix)] if len(prefix) < len(parts) else None
    low = head + _part(nxt.type, lo) if lo is not None and nxt is not None else (head or None)
    high = head + _part(nxt.type, hi) + PREFIX_END if hi is not None and nxt is not None else (
        head + PREFIX_END if head else None)
    return low, high
