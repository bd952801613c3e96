"""Kafka's default partitioner (murmur2 over the serialized key), shared by log, writer and planner.

One function decides where a key lives, so the planner can send a KeyQuery
to the single partition that can hold the key.
"""

from __future__ import annotations

import struct
from typing import Any

from .schema import SqlType, coerce_key

__all__ = ["murmur2", "partition_for_bytes", "key_bytes", "partition_for_key"]

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
