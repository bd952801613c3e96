"""Finding records in a changelog partition by what they say (batch id, Position), not by offset.

Records of one partition are in batch order, and their Positions grow with their batches, so "the first record
whose batch is at least b" and "the first record whose Position covers q" are found by binary search over
offsets. Each probe reads one record (on the embedded log a line of a file; on Kafka a short-lived consumer), so
a search costs O(log n) reads: done when a feed starts or resumes, never per change.
"""

from __future__ import annotations

from collections.abc import Callable

from ..changelog.topics import ChangelogLog, Item
from ..iqv2.position import Position

__all__ = ["Locator", "restricted"]

MAX_PROBES = 200  # bounded: offsets are 63-bit, a binary search needs at most 64 probes


def restricted(position: Position, topics: frozenset[str] | None) -> Position:
    """``position`` with only ``topics`` (None: all of them): what a store's Position is compared on."""
    if topics is None:
        return position
    return Position.from_map({t: dict(position.partition_positions(t)) for t in position.topics() if t in topics})


class Locator:
    """Look-ups in one changelog topic."""

    def __init__(self, changelog: ChangelogLog, topic: str) -> None:
        self.changelog = changelog
        self.topic = topic

    def bounds(self) -> tuple[dict[int, int], dict[int, int]]:
        """(low offsets, end offsets) per partition."""
        return self.changelog.low_offsets(self.topic), self.changelog.end_offsets(self.topic)

    def record_at(self, partition: int, offset: int) -> Item | None:
        """The first record at or after ``offset`` (None past the partition's end)."""
        got = self.changelog.read_from(self.topic, partition, offset, 1)
        return got[0] if got else None

    def first(self, partition: int, low: int, end: int, pred: Callable[[Item], bool],
              guess: int | None = None) -> Item | None:
        """The first record in [low, end) for which ``pred`` holds (``pred`` false then true along the offsets);
        None if none does. ``guess``: an offset likely at or just past the answer, probed first."""
        found: Item | None = None
        lo, hi = low, end
        if guess is not None and lo <= guess < hi:
            item = self.record_at(partition, guess)
            if item is not None and pred(item):
                found, hi = item, guess
                before = self.record_at(partition, max(lo, guess - 1)) if guess > lo else None
                if before is None or before.offset >= guess or not pred(before):
                    return item  # the record before the guess does not satisfy it: the guess is the first
            else:
                lo = guess + 1 if item is None else item.offset + 1
        for _ in range(MAX_PROBES):
            if lo >= hi:
                break
            mid = (lo + hi) // 2
            item = self.record_at(partition, mid)
            if item is None or item.offset >= hi:
                hi = mid
            elif pred(item):
                found, hi = item, mid
            else:
                lo = item.offset + 1
        return found

    def batch_record(self, partition: int, batch: int, low: int, end: int) -> Item | None:
        """The record of ``batch`` in one partition, or the first of a later batch; None if every record is older.

        Probes first where it would be if the partition held one record per batch up to its last.
        """
        last = self.changelog.last(self.topic, partition) if end > low else None
        if last is None or last.record.batch_id < batch:
            return None
        guess = max(low, last.offset - (last.record.batch_id - batch))
        return self.first(partition, low, end, lambda it: it.record.batch_id >= batch, guess)
