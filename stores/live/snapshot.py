"""The snapshot a feed starts with: the store's whole answer at ONE batch, though partitions commit one by one.

Each partition's rows are read with its last batch id in one SQLite snapshot. Partitions of a store may be a
batch apart at that moment (each commits its share in its own transaction), so the snapshot is taken at the
furthest batch read, ``b*``, and each partition still at an earlier batch is rolled forward with the changes
the shared tail already decoded for the batches it lacks (absolute contents per touched row: applying them in
order leaves the partition exactly at ``b*``). If ``b*`` is inside a versioned catch-up (not a whole answer),
the next whole batch is the target. Rows come out in the shape the feed's events carry.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any, Protocol

from ..catalog.schema import StoreSpec
from ..engine.base import PartitionStore
from ..iqv2.position import Position
from .errors import NOT_UP_TO_BOUND, SUBSCRIPTION_UNAVAILABLE, SubscriptionError
from .locate import restricted
from .rows import RowMaker, raw_rows, snapshot_sql

__all__ = ["SnapshotData", "build_snapshot", "read_partition"]

Row = tuple[Any, ...]
RETRY_PAUSE_S = 0.02


class SnapshotSource(Protocol):
    """What a snapshot needs of the hub (``hub.Hub``): the files, what answers, and the batches it decoded."""

    store: str
    access: Any

    def serving_now(self) -> tuple[Any, int]: ...

    def topics(self, spec: StoreSpec) -> frozenset[str] | None: ...

    def whole_batch_at_or_after(self, topic: str, batch_id: int, deadline: float) -> Any: ...

    def batches_between(self, topic: str, lo: int, hi: int) -> list[Any] | None: ...

    def first_seq_of(self, topic: str) -> int: ...


@dataclass(frozen=True, eq=False)
class SnapshotData:
    """The answer at ``position`` (batch ``batch_id`` of ``topic``; -1: before the first batch): ``rows`` as
    (partition, stored key, row with its tail); a feed continues with the hub's entry ``seq_after``."""

    spec: StoreSpec
    topic: str
    batch_id: int
    position: Position
    rows: tuple[tuple[int, Any, Row], ...]
    seq_after: int

    @property
    def source(self) -> Position:
        return restricted(self.position, frozenset(t for t in self.position.topics() if t != self.topic))


def read_partition(store: PartitionStore, maker: RowMaker) -> tuple[int, dict[Any, Row | None]]:
    """(last batch id, -1 for none; identity → row) of one partition, from ONE read transaction."""
    _position, rows = store.snapshot_many([("SELECT last_batch_id FROM meta", ()), (snapshot_sql(maker.spec), ())])
    last = rows[0][0]
    return (-1 if last is None else last), raw_rows(maker, rows[1:])


def build_snapshot(hub: SnapshotSource, bound: Position | None, timeout_s: float) -> SnapshotData:
    """The store's answer at one batch, at or past ``bound`` (restricted to the store's topics) if given."""
    deadline = time.monotonic() + timeout_s
    why = "the store's partitions did not reach one batch"
    for _ in range(1_000_000):  # bounded; the clock ends it
        serving, seq_mark = hub.serving_now()
        spec, topic = serving.spec, serving.topic
        maker = RowMaker(spec)
        reads: dict[int, tuple[int, dict[Any, Row | None]]] = {}
        for p in range(spec.partitions):
            store = hub.access.partition(hub.store, p)
            if store is None:
                raise SubscriptionError(SUBSCRIPTION_UNAVAILABLE, f"store {hub.store!r} partition {p} has no file here")
            reads[p] = read_partition(store, maker)
        target_batch = max(s for s, _ in reads.values())
        entry = hub.whole_batch_at_or_after(topic, target_batch, deadline) if target_batch >= 0 else None
        if hub.serving_now()[1] != seq_mark:
            continue  # another generation started answering meanwhile: read it instead
        if target_batch >= 0 and entry is None:
            why = f"the changelog {topic} did not reach batch {target_batch} (the store's)"
        elif bound is not None and not restricted(entry.batch.source if entry else Position.empty(),
                                                  hub.topics(spec)).covers(bound):
            why = f"the store did not reach the position {bound.to_json()}"
        else:
            lowest = min(s for s, _ in reads.values())
            target = entry.batch.batch_id if entry is not None else -1
            steps = hub.batches_between(topic, lowest, target) if lowest < target else []
            if steps is not None:
                for p, (s, rows) in reads.items():
                    for b in steps:
                        if s < b.batch_id <= target:
                            rows.update(b.changes.get(p, {}))
                position = entry.batch.position if entry is not None else Position.empty()
                tail_json = position.to_json()
                out = tuple((p, ident if not maker.windowed else ident[0], (*row, p, tail_json))
                            for p, (_, rows) in sorted(reads.items()) for ident, row in rows.items() if row is not None)
                seq_after = entry.seq + 1 if entry is not None else hub.first_seq_of(topic)
                return SnapshotData(spec, topic, target, position, out, seq_after)
            why = f"the batches between {lowest} and {target} are no longer held in memory"
        if time.monotonic() >= deadline:
            code = NOT_UP_TO_BOUND if bound is not None and "position" in why else SUBSCRIPTION_UNAVAILABLE
            raise SubscriptionError(code, f"no snapshot of store {hub.store!r} within {timeout_s:.0f} s: {why}")
        time.sleep(RETRY_PAUSE_S)
    raise SubscriptionError(SUBSCRIPTION_UNAVAILABLE, f"no snapshot of store {hub.store!r}: {why}")
