"""The IQv2 query types (KIP-796, 805, 806, 960, 968, 969, 985, 992) as immutable values.

Stores dispatch on ``type(query)`` through a handler table, so each query is
its own class; builders return new objects (``dataclasses.replace``).
Times are epoch milliseconds; factories also accept datetimes.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any, Generic, TypeVar

from .timeutil import to_epoch_ms

__all__ = [
    "Query",
    "ResultOrder",
    "KeyQuery",
    "MultiKeyQuery",
    "RangeQuery",
    "TimestampedKeyQuery",
    "TimestampedRangeQuery",
    "WindowKeyQuery",
    "WindowRangeQuery",
    "VersionedKeyQuery",
    "MultiVersionedKeyQuery",
    "MultiVersionedRangeQuery",
]

R = TypeVar("R")
Time = int | datetime


class Query(Generic[R]):
    """Marker base: anything a store may be asked to run (KIP-796 ``Query<R>``)."""

    __slots__ = ()


class ResultOrder(enum.Enum):
    ANY = "ANY"
    ASCENDING = "ASCENDING"
    DESCENDING = "DESCENDING"


def _require_key(key: Any, message: str = "the key should not be null") -> Any:
    if key is None:
        raise TypeError(message)
    return key


def _opt(v: Any) -> str:
    return "Optional.empty" if v is None else f"Optional[{v}]"


@dataclass(frozen=True, slots=True)
class KeyQuery(Query[Any]):
    """Point lookup; the result is the value or ``None``."""

    key: Any
    skip_cache: bool = False

    @classmethod
    def with_key(cls, key: Any) -> KeyQuery:
        return cls(_require_key(key))

    def with_skip_cache(self) -> KeyQuery:
        return replace(self, skip_cache=True)

    def __repr__(self) -> str:
        return f"KeyQuery{{key={self.key!r}, skipCache={str(self.skip_cache).lower()}}}"


@dataclass(frozen=True, slots=True)
class MultiKeyQuery(Query[Any]):
    """Many point lookups in one snapshot of one partition (an extension: IQv2 has none).

    What ``k IN (…)`` with thousands of keys needs: one request per partition instead of one per key. The
    result iterates ``KeyValue(key, value)`` for the keys present (on timestamped stores the value is a
    ``ValueAndTimestamp``), in key order; absent keys are simply not there.
    """

    keys: tuple[Any, ...]

    @classmethod
    def with_keys(cls, keys: Any) -> MultiKeyQuery:
        keys = tuple(keys)
        if not keys:
            raise ValueError("MultiKeyQuery needs at least one key")
        for k in keys:
            _require_key(k, "the keys should not be null")
        return cls(keys)

    def __repr__(self) -> str:
        shown = ", ".join(repr(k) for k in self.keys[:5])
        more = f", … ({len(self.keys)} keys)" if len(self.keys) > 5 else ""
        return f"MultiKeyQuery{{keys=[{shown}{more}]}}"


@dataclass(frozen=True, slots=True)
class _RangeBase(Query[Any]):
    lower: Any = None
    upper: Any = None
    result_order: ResultOrder = ResultOrder.ANY

    @classmethod
    def with_range(cls, lower: Any, upper: Any):  # noqa: ANN206 - returns cls
        """Inclusive on both ends; ``None`` means open (Kafka's ``ofNullable``)."""
        return cls(lower, upper)

    @classmethod
    def with_lower_bound(cls, lower: Any):  # noqa: ANN206
        return cls(_require_key(lower, "lower bound should not be null"), None)

    @classmethod
    def with_upper_bound(cls, upper: Any):  # noqa: ANN206
        return cls(None, _require_key(upper, "upper bound should not be null"))

    @classmethod
    def with_no_bounds(cls):  # noqa: ANN206
        return cls(None, None)

    def with_descending_keys(self):  # noqa: ANN201
        return replace(self, result_order=ResultOrder.DESCENDING)

    def with_ascending_keys(self):  # noqa: ANN201
        return replace(self, result_order=ResultOrder.ASCENDING)

    @property
    def lower_bound(self) -> Any:
        return self.lower

    @property
    def upper_bound(self) -> Any:
        return self.upper

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}{{lower={_opt(self.lower)}, upper={_opt(self.upper)}, "
            f"order={self.result_order.value}}}"
        )


@dataclass(frozen=True, slots=True, repr=False)
class RangeQuery(_RangeBase):
    """Key range scan; result is an iterator of ``KeyValue(key, value)``."""


@dataclass(frozen=True, slots=True)
class TimestampedKeyQuery(Query[Any]):
    """Point lookup returning ``ValueAndTimestamp`` (KIP-992)."""

    key: Any
    skip_cache: bool = False

    @classmethod
    def with_key(cls, key: Any) -> TimestampedKeyQuery:
        return cls(_require_key(key))

    def with_skip_cache(self) -> TimestampedKeyQuery:
        return replace(self, skip_cache=True)

    def __repr__(self) -> str:
        return f"TimestampedKeyQuery{{key={self.key!r}, skipCache={str(self.skip_cache).lower()}}}"


@dataclass(frozen=True, slots=True, repr=False)
class TimestampedRangeQuery(_RangeBase):
    """Range scan returning ``KeyValue(key, ValueAndTimestamp)`` (KIP-992)."""


@dataclass(frozen=True, slots=True)
class WindowKeyQuery(Query[Any]):
    """Windows of one key whose start lies in [time_from, time_to] (KIP-806).

    Unlike Kafka, ``time_from``/``time_to`` report what the caller passed
    (Kafka's getters are swapped, reference §1.6).
    """

    key: Any
    time_from: int
    time_to: int

    @classmethod
    def with_key_and_window_start_range(cls, key: Any, time_from: Time, time_to: Time) -> WindowKeyQuery:
        _require_key(key)
        if time_from is None or time_to is None:
            raise TypeError("time_from and time_to should not be null")
        return cls(key, to_epoch_ms(time_from, "time_from"), to_epoch_ms(time_to, "time_to"))

    def __repr__(self) -> str:
        return f"WindowKeyQuery{{key={self.key!r}, timeFrom={self.time_from}, timeTo={self.time_to}}}"


@dataclass(frozen=True, slots=True)
class WindowRangeQuery(Query[Any]):
    """All windows of one key (session stores) or all keys' windows in a start range (window stores)."""

    key: Any = None
    time_from: int | None = None
    time_to: int | None = None

    @classmethod
    def with_key(cls, key: Any) -> WindowRangeQuery:
        return cls(_require_key(key), None, None)

    @classmethod
    def with_window_start_range(cls, time_from: Time, time_to: Time) -> WindowRangeQuery:
        if time_from is None or time_to is None:
            raise TypeError("time_from and time_to should not be null")
        return cls(None, to_epoch_ms(time_from, "time_from"), to_epoch_ms(time_to, "time_to"))

    def __repr__(self) -> str:
        return (
            f"WindowRangeQuery{{key={_opt(self.key)}, timeFrom={_opt(self.time_from)}, "
            f"timeTo={_opt(self.time_to)}}}"
        )


@dataclass(frozen=True, slots=True)
class VersionedKeyQuery(Query[Any]):
    """The version of a key valid at ``as_of`` (latest when unset) (KIP-960)."""

    key: Any
    as_of_timestamp: int | None = None

    @classmethod
    def with_key(cls, key: Any) -> VersionedKeyQuery:
        return cls(_require_key(key, "key cannot be null."))

    def as_of(self, timestamp: Time) -> VersionedKeyQuery:
        if timestamp is None:
            raise TypeError("asOf timestamp cannot be null.")
        return replace(self, as_of_timestamp=to_epoch_ms(timestamp, "as_of"))

    def __repr__(self) -> str:
        return f"VersionedKeyQuery{{key={self.key!r}, asOfTimestamp={_opt(self.as_of_timestamp)}}}"


@dataclass(frozen=True, slots=True)
class MultiVersionedKeyQuery(Query[Any]):
    """Versions of a key overlapping [from_time, to_time] (KIP-968).

    ANY and DESCENDING are newest-first, as in Kafka.
    """

    key: Any
    from_timestamp: int | None = None
    to_timestamp: int | None = None
    result_order: ResultOrder = ResultOrder.ANY

    @classmethod
    def with_key(cls, key: Any) -> MultiVersionedKeyQuery:
        return cls(_require_key(key, "key cannot be null."))

    def from_time(self, t: Time | None) -> MultiVersionedKeyQuery:
        return replace(self, from_timestamp=None if t is None else to_epoch_ms(t, "from_time"))

    def to_time(self, t: Time | None) -> MultiVersionedKeyQuery:
        return replace(self, to_timestamp=None if t is None else to_epoch_ms(t, "to_time"))

    def with_ascending_timestamps(self) -> MultiVersionedKeyQuery:
        return replace(self, result_order=ResultOrder.ASCENDING)

    def with_descending_timestamps(self) -> MultiVersionedKeyQuery:
        return replace(self, result_order=ResultOrder.DESCENDING)

    def __repr__(self) -> str:
        return (
            f"MultiVersionedKeyQuery{{key={self.key!r}, fromTime={_opt(self.from_timestamp)}, "
            f"toTime={_opt(self.to_timestamp)}, order={self.result_order.value}}}"
        )


@dataclass(frozen=True, slots=True)
class MultiVersionedRangeQuery(Query[Any]):
    """Versions of every key in [lower, upper] overlapping [from_time, to_time] (KIP-969's range query).

    Kafka never shipped it (its PoC was closed); it is how a versioned store is
    scanned: ``from = to = t`` gives the versions valid at ``t``, and
    ``from = to = None`` … the whole history. The result iterates
    ``(key, VersionedRecord)`` pairs, keys ascending (or descending), each key's
    versions oldest first (or newest first). Key bounds are inclusive; ``None``
    means open. Tombstones are never returned.
    """

    lower: Any = None
    upper: Any = None
    from_timestamp: int | None = None
    to_timestamp: int | None = None
    key_order: ResultOrder = ResultOrder.ANY
    result_order: ResultOrder = ResultOrder.ANY

    @classmethod
    def with_key_range(cls, lower: Any, upper: Any) -> MultiVersionedRangeQuery:
        return cls(lower, upper)

    @classmethod
    def with_no_key_bounds(cls) -> MultiVersionedRangeQuery:
        return cls()

    def from_time(self, t: Time | None) -> MultiVersionedRangeQuery:
        return replace(self, from_timestamp=None if t is None else to_epoch_ms(t, "from_time"))

    def to_time(self, t: Time | None) -> MultiVersionedRangeQuery:
        return replace(self, to_timestamp=None if t is None else to_epoch_ms(t, "to_time"))

    def with_descending_keys(self) -> MultiVersionedRangeQuery:
        return replace(self, key_order=ResultOrder.DESCENDING)

    def with_ascending_keys(self) -> MultiVersionedRangeQuery:
        return replace(self, key_order=ResultOrder.ASCENDING)

    def with_ascending_timestamps(self) -> MultiVersionedRangeQuery:
        return replace(self, result_order=ResultOrder.ASCENDING)

    def with_descending_timestamps(self) -> MultiVersionedRangeQuery:
        return replace(self, result_order=ResultOrder.DESCENDING)

    def __repr__(self) -> str:
        return (
            f"MultiVersionedRangeQuery{{lower={_opt(self.lower)}, upper={_opt(self.upper)}, "
            f"fromTime={_opt(self.from_timestamp)}, toTime={_opt(self.to_timestamp)}, "
            f"keyOrder={self.key_order.value}, order={self.result_order.value}}}"
        )
