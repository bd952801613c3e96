"""What the pipeline, the CLI and the runtime need of a source log: the embedded EventLog or Kafka.

One small protocol instead of ``hasattr`` probing, so the runtime asks every
source the same questions (does a topic exist, where does it end) and the
CLI produces to either one the same way.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any, Protocol, runtime_checkable

__all__ = ["SourceLog"]


@runtime_checkable
class SourceLog(Protocol):
    """Topics with a fixed number of partitions each, offsets per partition (Kafka's model)."""

    def describe(self) -> str:
        """Where the source is, for messages: ``event log at data/log``, ``Kafka at host:9092``."""
        ...

    def list_topics(self) -> dict[str, int]:
        """``{topic: partitions}`` of every topic."""
        ...

    def has_topic(self, topic: str) -> bool: ...

    def partitions(self, topic: str) -> int:
        """The topic's partition count; an unknown topic raises (the source's UnknownTopicError)."""
        ...

    def create_topic(self, name: str, partitions: int = 1, *, exist_ok: bool = False) -> None: ...

    def end_offsets(self, topic: str) -> dict[int, int]:
        """``{partition: next offset}`` (exclusive ends, Kafka's end offsets)."""
        ...

    def last_offsets(self, topic: str) -> dict[int, int]:
        """``{partition: offset of the last record}`` of non-empty partitions: a read-your-writes bound."""
        ...

    def read(self, topic: str, partition: int, start: int, end: int) -> Iterator[Any]:
        """The records (``eventlog.Record``) at offsets [start, end) of one partition."""
        ...

    def append_batch(self, topic: str, records: Iterable[Any]) -> list[tuple[int, int]]:
        """Write ``(key, value, timestamp)`` records; ``(partition, offset)`` of each, in order."""
        ...
