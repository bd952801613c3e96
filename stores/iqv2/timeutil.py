"""Epoch-millisecond conversion: stores keep every time as epoch ms (Kafka's convention)."""

from __future__ import annotations

import time
from datetime import date, datetime, timezone

__all__ = ["to_epoch_ms", "from_epoch_ms", "now_ms", "MIN_MS", "MAX_MS"]

MIN_MS = -(2**63)
MAX_MS = 2**63 - 1

_EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)


def to_epoch_ms(value: int | datetime | date, what: str = "timestamp") -> int:
    """Accept epoch ms or a datetime (naive means UTC, as Spark's session time zone here)."""
    if isinstance(value, bool):
        raise TypeError(f"{what} must be epoch milliseconds or a datetime, got bool")
    if isinstance(value, int):
        return value
    if isinstance(value, datetime):
        if value.tzinfo is None:
            value = value.replace(tzinfo=timezone.utc)
        delta = value - _EPOCH
        return (delta.days * 86_400 + delta.seconds) * 1000 + delta.microseconds // 1000
    if isinstance(value, date):
        return to_epoch_ms(datetime(value.year, value.month, value.day, tzinfo=timezone.utc), what)
    raise TypeError(f"{what} must be epoch milliseconds or a datetime, got {type(value).__name__}")


def from_epoch_ms(ms: int) -> datetime:
    return datetime.fromtimestamp(ms / 1000, tz=timezone.utc)


def now_ms() -> int:
    """The wall clock as epoch ms (a record produced without a timestamp gets this one)."""
    return time.time_ns() // 1_000_000
