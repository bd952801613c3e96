"""Values that queries return: ValueAndTimestamp, VersionedRecord, windows, key-value pairs, iterators."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any, Generic, NamedTuple, TypeVar

__all__ = [
    "ValueAndTimestamp",
    "VersionedRecord",
    "TimeWindow",
    "Windowed",
    "KeyValue",
    "KeyValueIterator",
]

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class ValueAndTimestamp:
    """A value and the epoch-ms timestamp of the record that produced it."""

    value: Any
    timestamp: int

    @classmethod
    def make(cls, value: Any, timestamp: int) -> ValueAndTimestamp | None:
        """``None`` for a null value, as in Kafka."""
        return None if value is None else cls(value, timestamp)

    @classmethod
    def make_allow_nullable(cls, value: Any, timestamp: int) -> ValueAndTimestamp:
        return cls(value, timestamp)


@dataclass(frozen=True, slots=True)
class VersionedRecord:
    """One version of a key: valid over ``[timestamp, valid_to)``; ``valid_to`` is None for the latest."""

    value: Any
    timestamp: int
    valid_to: int | None = None

    def __post_init__(self) -> None:
        if self.value is None:
            raise TypeError("value cannot be null.")


class TimeWindow(NamedTuple):
    """``[start, end)`` in epoch ms (session windows: ``[start, end]``, end = last record time)."""

    start: int
    end: int


class Windowed(NamedTuple):
    key: Any
    window: TimeWindow


class KeyValue(NamedTuple):
    key: Any
    value: Any


class KeyValueIterator(Generic[T]):
    """An iterator over a snapshot, with Kafka's ``peek_next_key``.

    Stores read the whole answer inside one read transaction and hand it over
    here, so the data always agrees with the Position returned beside it.
    """

    __slots__ = ("_items", "_i", "_closed")

    def __init__(self, items: Sequence[T]) -> None:
        self._items = items
        self._i = 0
        self._closed = False

    def __iter__(self) -> Iterator[T]:
        return self

    def __next__(self) -> T:
        if self._closed:
            raise ValueError("iterator is closed")
        if self._i >= len(self._items):
            raise StopIteration
        item = self._items[self._i]
        self._i += 1
        return item

    def has_next(self) -> bool:
        return not self._closed and self._i < len(self._items)

    def peek_next_key(self) -> Any:
        """The key of the next item without consuming it; StopIteration when exhausted."""
        if not self.has_next():
            raise StopIteration("no more items")
        item = self._items[self._i]
        if not isinstance(item, tuple):  # e.g. VersionedRecord: Kafka's VersionedRecordIterator has no keys either
            raise TypeError(f"{type(item).__name__} items have no key to peek at")
        return item[0]

    def remaining(self) -> list[T]:
        """Everything not yet consumed (fast path for bulk consumers such as Arrow building)."""
        rest = list(self._items[self._i :])
        self._i = len(self._items)
        return rest

    def close(self) -> None:
        self._closed = True

    def __enter__(self) -> KeyValueIterator[T]:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __len__(self) -> int:
        return len(self._items) - self._i

    def __repr__(self) -> str:
        return f"KeyValueIterator({len(self)} remaining)"
