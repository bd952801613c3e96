"""Kafka's default partitioner (murmur2 over the serialized key), shared by log, writer and planner.

One function decides where a key lives, so the planner can send a KeyQuery
to the single partition that can hold the key. ``partitions_for_serialized``
is the same function over a whole batch of serialized keys at once (numpy,
no Python per key): the writer partitions a million keys with it in tens of
milliseconds instead of seconds, and tests hold it equal to ``murmur2``.
"""

from __future__ import annotations

import struct
from typing import Any

import numpy as np

from .schema import SqlType, coerce_key

__all__ = [
    "murmur2", "partition_for_bytes", "key_bytes", "partition_for_key", "partition_for_long",
    "murmur2_many", "partitions_for_serialized", "fixed_width_key_bytes",
]

_M = 0x5BD1E995
_MASK = 0xFFFFFFFF


def murmur2(data: bytes) -> int:
    """Kafka's ``Utils.murmur2`` (seed 0x9747b28c), as a signed 32-bit int."""
    length = len(data)
    h = (0x9747B28C ^ length) & _MASK
    n4 = length // 4
    for (k,) in struct.iter_unpack("<I", data[: n4 * 4]):
        k = (k * _M) & _MASK
        k ^= k >> 24
        k = (k * _M) & _MASK
        h = (h * _M) & _MASK
        h ^= k
    rest = length & 3
    i = n4 * 4
    if rest == 3:
        h ^= data[i + 2] << 16
    if rest >= 2:
        h ^= data[i + 1] << 8
    if rest >= 1:
        h ^= data[i]
        h = (h * _M) & _MASK
    h ^= h >> 13
    h = (h * _M) & _MASK
    h ^= h >> 15
    return h - (1 << 32) if h & 0x80000000 else h


def partition_for_bytes(data: bytes, num_partitions: int) -> int:
    """``toPositive(murmur2(bytes)) % numPartitions``, as Kafka's BuiltInPartitioner."""
    return (murmur2(data) & 0x7FFFFFFF) % num_partitions


def key_bytes(key: Any, sql_type: SqlType | None = None) -> bytes:
    """Kafka serializer bytes: UTF-8 strings, big-endian longs/doubles, 1-byte booleans.

    With ``sql_type`` the key is first coerced to the column's canonical form,
    so ``1`` and ``1.0`` on a BIGINT key land on the same partition.
    """
    if sql_type is not None:
        key = coerce_key(sql_type, key)
    if isinstance(key, str):
        return key.encode("utf-8")
    if isinstance(key, bool):
        return b"\x01" if key else b"\x00"
    if isinstance(key, int):
        return struct.pack(">q", key)
    if isinstance(key, float):
        return struct.pack(">d", key)
    if isinstance(key, bytes):
        return key
    raise TypeError(f"cannot serialize key of type {type(key).__name__}")


def partition_for_key(key: Any, num_partitions: int, sql_type: SqlType | None = None) -> int:
    return partition_for_bytes(key_bytes(key, sql_type), num_partitions)


_LONG = struct.Struct(">q")
_TWO_BLOCKS = struct.Struct("<II")


def partition_for_long(key: int, num_partitions: int) -> int:
    """``partition_for_key`` of an int key (BIGINT and INTEGER keys serialize as 8-byte longs), unrolled.

    Why: the point lane computes one partition per lookup, and the general
    loop over ``struct.iter_unpack`` costs more than this two-block form
    (tests hold the two equal).
    """
    k1, k2 = _TWO_BLOCKS.unpack(_LONG.pack(key))
    h = 0x9747B28C ^ 8
    k = (k1 * _M) & _MASK
    k = ((k ^ (k >> 24)) * _M) & _MASK
    h = ((h * _M) & _MASK) ^ k
    k = (k2 * _M) & _MASK
    k = ((k ^ (k >> 24)) * _M) & _MASK
    h = ((h * _M) & _MASK) ^ k
    h ^= h >> 13
    h = (h * _M) & _MASK
    h ^= h >> 15
    return (h & 0x7FFFFFFF) % num_partitions


# -- the same over whole batches (numpy) ---------------------------------------------------------
_VECTOR_MAX_LEN = 256  # longer keys (rare) are hashed one by one: a block loop as long as the longest key would cost more


def murmur2_many(data: np.ndarray, offsets: np.ndarray) -> np.ndarray:
    """``murmur2`` of every key ``data[offsets[i]:offsets[i + 1]]``, as signed 32-bit ints.

    ``data`` is the keys' serialized bytes back to back (uint8) and ``offsets``
    their n + 1 boundaries, as Arrow lays out a binary or string column. The
    loop runs once per 4-byte block of the longest key, each step over every
    key that still has such a block (keys are visited longest first, so that
    set is a prefix).
    """
    data = np.ascontiguousarray(data, dtype=np.uint8)
    offsets = np.asarray(offsets, dtype=np.int64)
    starts = offsets[:-1]
    lengths = offsets[1:] - starts
    n = len(lengths)
    out = np.empty(n, dtype=np.uint32)
    if n == 0:
        return out.view(np.int32)
    long_keys = np.flatnonzero(lengths > _VECTOR_MAX_LEN)
    for i in long_keys:
        out[i] = murmur2(data[starts[i]:starts[i] + lengths[i]].tobytes()) & _MASK
    short = np.flatnonzero(lengths <= _VECTOR_MAX_LEN) if len(long_keys) else None
    if short is not None:
        starts, lengths = starts[short], lengths[short]
    h = _murmur2_short(data, starts, lengths)
    if short is None:
        out[:] = h
    else:
        out[short] = h
    return out.view(np.int32)


def _murmur2_short(data: np.ndarray, starts: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    m = np.uint32(_M)
    blocks = lengths // 4
    uniform = bool((lengths == lengths[0]).all())
    if uniform and _back_to_back(starts, int(lengths[0])):
        return _murmur2_fixed(data, int(starts[0]), len(starts), int(lengths[0]))
    order = None
    if not uniform:  # longest first: the keys that have block j are then a prefix
        order = np.argsort(-blocks, kind="stable")
        starts, lengths, blocks = starts[order], lengths[order], blocks[order]
    h = np.uint32(0x9747B28C) ^ lengths.astype(np.uint32)
    max_blocks = int(blocks[0]) if order is not None else int(blocks.max())
    have = (np.full(max_blocks, len(h)) if order is None
            else np.searchsorted(-blocks, -np.arange(max_blocks), side="left"))  # keys with more than j blocks
    for j in range(max_blocks):
        c = int(have[j])
        pos = starts[:c] + 4 * j
        k = (data[pos].astype(np.uint32) | (data[pos + 1].astype(np.uint32) << np.uint32(8))
             | (data[pos + 2].astype(np.uint32) << np.uint32(16)) | (data[pos + 3].astype(np.uint32) << np.uint32(24)))
        k *= m
        k ^= k >> np.uint32(24)
        k *= m
        hj = h[:c]
        hj *= m
        hj ^= k
    rest = lengths & 3
    tail = starts + blocks * 4
    sel = np.flatnonzero(rest == 3)
    h[sel] ^= data[tail[sel] + 2].astype(np.uint32) << np.uint32(16)
    sel = np.flatnonzero(rest >= 2)
    h[sel] ^= data[tail[sel] + 1].astype(np.uint32) << np.uint32(8)
    sel = np.flatnonzero(rest >= 1)
    h[sel] ^= data[tail[sel]].astype(np.uint32)
    h[sel] *= m
    h ^= h >> np.uint32(13)
    h *= m
    h ^= h >> np.uint32(15)
    if order is None:
        return h
    back = np.empty_like(h)
    back[order] = h
    return back


def _back_to_back(starts: np.ndarray, width: int) -> bool:
    """Do the keys lie one after another, each ``width`` bytes (a fixed-width key type, or strings of one length)?"""
    return width > 0 and bool((np.diff(starts) == width).all())


def _murmur2_fixed(data: np.ndarray, start: int, n: int, width: int) -> np.ndarray:
    """``_murmur2_short`` of ``n`` keys of ``width`` bytes back to back from ``start``: the blocks read as one
    little-endian uint32 matrix instead of four byte gathers each (longs, and ids such as ``c0000077``: the usual
    batch). Why: it was a third of a million-key batch's partitioning."""
    m = np.uint32(_M)
    rows = data[start:start + n * width].reshape(n, width)
    nb = width // 4
    words = np.ascontiguousarray(rows[:, :nb * 4]).view("<u4") if nb else None
    h = np.full(n, (0x9747B28C ^ width) & _MASK, dtype=np.uint32)
    for j in range(nb):
        k = words[:, j] * m
        k ^= k >> np.uint32(24)
        k *= m
        h *= m
        h ^= k
    rest = width & 3
    if rest == 3:
        h ^= rows[:, nb * 4 + 2].astype(np.uint32) << np.uint32(16)
    if rest >= 2:
        h ^= rows[:, nb * 4 + 1].astype(np.uint32) << np.uint32(8)
    if rest >= 1:
        h ^= rows[:, nb * 4].astype(np.uint32)
        h *= m
    h ^= h >> np.uint32(13)
    h *= m
    h ^= h >> np.uint32(15)
    return h


def partitions_for_serialized(data: np.ndarray, offsets: np.ndarray, num_partitions: int) -> np.ndarray:
    """``partition_for_bytes`` of every serialized key (see ``murmur2_many`` for the layout), as int32."""
    h = murmur2_many(data, offsets).view(np.uint32)
    return ((h & np.uint32(0x7FFFFFFF)) % np.uint32(num_partitions)).astype(np.int32)


_FIXED_WIDTH = {
    SqlType.BIGINT: ">i8", SqlType.INTEGER: ">i8", SqlType.DATE: ">i8", SqlType.TIMESTAMP: ">i8",
    SqlType.DOUBLE: ">f8", SqlType.BOOLEAN: "u1",
}


def fixed_width_key_bytes(values: np.ndarray, sql_type: SqlType) -> tuple[np.ndarray, np.ndarray]:
    """(data, offsets) of the Kafka serializer bytes of canonical keys of a fixed-width type.

    ``values`` holds the canonical forms ``key_bytes`` serializes: int64 for
    BIGINT, INTEGER, DATE (days) and TIMESTAMP (epoch ms), float64 for
    DOUBLE, 0/1 for BOOLEAN. VARCHAR keys are already bytes (their UTF-8).
    """
    fmt = _FIXED_WIDTH.get(sql_type)
    if fmt is None:
        raise TypeError(f"{sql_type} keys are not fixed-width")
    data = np.ascontiguousarray(values).astype(fmt).view(np.uint8)
    width = np.dtype(fmt).itemsize
    return data, np.arange(0, width * (len(values) + 1), width, dtype=np.int64)
