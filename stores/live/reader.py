"""ChangeReader: one changelog topic read from given offsets, turned into whole batches of changes, in order.

Every batch writes one record to every partition of its store's changelog (empty shares too), before any
partition commits it. So a batch is whole once each partition's next record is of it; batches come out in
batch order, each with the Position its records carry. A feed never shows a batch the files it reads are more
than one batch from (``paced``): on the pipeline host that is at most the batch being committed, and on a
replica it keeps the changes in step with the copy it restores (the copy applies the very same records).
"""

from __future__ import annotations

import logging
import time
from collections import deque
from collections.abc import Iterable, Mapping
from typing import Any

import pyarrow as pa

from ..catalog.schema import StoreKind, StoreSpec
from ..changelog.topics import Item, Tail
from ..iqv2.position import Position
from .access import StoreAccess
from .errors import SUBSCRIPTION_UNAVAILABLE, SubscriptionError
from .rows import RecordRows, RowMaker
from .versioned import NeedMore, NotReady, Resolved, VersionRun, read_latest, record_versions, resolve

__all__ = ["Batch", "ChangeReader", "TopicRecreated", "token"]

log = logging.getLogger(__name__)

Row = tuple[Any, ...]


class TopicRecreated(Exception):
    """The topic was deleted and created again under the reader (a rebuild begun anew): its records are another
    attempt's."""


def token(source: Position, topic: str, offsets: Mapping[int, int]) -> Position:
    """A feed's Position: the batch's source Position and, under the changelog topic's name, the offset of the
    batch's record in each partition. A pull query ignores the changelog part (not a topic the store reads); a
    resume uses it to continue after exactly that batch, even where two batches share a source Position."""
    raw = source.to_map()
    raw[topic] = dict(offsets)
    return Position.from_map(raw)


class Batch:
    """One whole batch: per partition, each row it touched → the row's new contents (None: gone).

    Decoded on first use (``changes``) and shared: a feed following a few keys asks ``keys()`` (the stored keys
    the batch touched, read from the records' key columns without decoding a value) and needs no decoding at all
    when none of its keys is there. A versioned batch comes resolved (its rows were read against the store).
    """

    __slots__ = ("batch_id", "topic", "offsets", "source", "complete", "position", "nbytes", "_maker", "_raw",
                 "_records", "_changes", "_keys")

    def __init__(self, batch_id: int, topic: str, offsets: dict[int, int], source: Position, complete: bool, *,
                 maker: RowMaker, raw: Mapping[int, pa.Table] | None = None,
                 changes: dict[int, dict[Any, Row | None]] | None = None) -> None:
        self.batch_id = batch_id
        self.topic = topic
        self.offsets = offsets
        self.source = source
        self.complete = complete
        self.position = token(source, topic, offsets)
        self._maker = maker
        self._raw = dict(raw) if raw is not None else None
        self._records: dict[int, RecordRows] | None = None
        self._changes = changes
        self._keys: dict[Any, list[tuple[int, Any]]] | None = None
        if changes is not None:
            rows = sum(len(c) for c in changes.values())
        else:
            rows = sum(t.num_rows for t in (raw or {}).values())
        self.nbytes = 512 + rows * (160 + 40 * (len(maker.spec.columns()) + 2))  # decoded, and as the event's rows

    def records(self) -> dict[int, RecordRows] | None:
        """The records' rows by partition (None for a versioned batch, which comes resolved)."""
        return self._rows() if self._raw is not None and self._changes is None else None

    def _rows(self) -> dict[int, RecordRows]:
        got = self._records
        if got is None:
            got = self._records = {p: RecordRows(self._maker, rows) for p, rows in (self._raw or {}).items()}
        return got

    @property
    def changes(self) -> dict[int, dict[Any, Row | None]]:
        """Per partition, every row touched → its new contents (None: gone); made once, shared."""
        out = self._changes
        if out is None:  # two threads may both decode: the same result, one kept
            out = {p: r.changes() for p, r in self._rows().items()}
            self._changes = out
        return out

    def _key_index(self) -> dict[Any, list[tuple[int, Any]]]:
        got = self._keys
        if got is None:
            got = {}
            windowed = self._maker.windowed
            idents = ({p: c.keys() for p, c in self._changes.items()} if self._changes is not None
                      else {p: r.final.keys() for p, r in self._rows().items()})
            for p, ids in idents.items():
                for ident in ids:
                    got.setdefault(ident[0] if windowed else ident, []).append((p, ident))
            self._keys = got
        return got

    def keys(self) -> Iterable[Any]:
        """The stored keys this batch touched (any partition), found without building a row."""
        return self._key_index().keys()

    def touches(self, keys: Iterable[Any]) -> bool:
        """Does this batch touch any of ``keys``? (In the number of ``keys``, not of the batch's rows.)"""
        index = self._key_index()
        return any(k in index for k in keys)

    def changes_of(self, key: Any) -> list[tuple[int, Any, Row | None]]:
        """(partition, identity, new row or None) of the rows of one stored key: only those are built."""
        where = self._key_index().get(key, ())
        if self._changes is not None:
            return [(p, ident, self._changes[p][ident]) for p, ident in where]
        rows = self._rows()
        return [(p, ident, rows[p].row(rows[p].final[ident])) for p, ident in where]


class ChangeReader:
    """Reads ``serving``'s topic of ``store`` from ``starts`` ({partition: offset}) and yields whole batches."""

    def __init__(self, access: StoreAccess, store: str, spec: StoreSpec, topic: str, starts: Mapping[int, int],
                 *, paced: bool = True) -> None:
        self.access = access
        self.store = store
        self.spec = spec
        self.topic = topic
        self.maker = RowMaker(spec)
        self.versioned = spec.kind is StoreKind.VERSIONED
        self.paced = paced
        self.queues: dict[int, deque[Item]] = {p: deque() for p in range(spec.partitions)}
        self.pending: list[tuple[int, dict[int, Item]]] = []  # whole batches not given out yet
        self.topic_id: str | None = None
        self.next_offsets = {p: starts.get(p, 0) for p in range(spec.partitions)}
        self._store_batch = -2  # the furthest batch any local partition committed, as last looked at
        self._tail: Tail | None = access.changelog().tail(topic, self.next_offsets)
        self.last_batch: int | None = None

    # -- reading ------------------------------------------------------------------------------
    def poll(self, wait_s: float) -> list[Batch]:
        """The batches that became whole (and may be shown) within ``wait_s``."""
        if self._tail is None:
            raise SubscriptionError(SUBSCRIPTION_UNAVAILABLE, f"the reader of {self.topic} is closed")
        items = self._tail.poll(0.0 if self.pending else wait_s)
        for item in items:
            rec = item.record
            if rec.topic_id is not None:
                if self.topic_id is None:
                    self.topic_id = rec.topic_id
                elif rec.topic_id != self.topic_id:
                    raise TopicRecreated(f"changelog {self.topic} partition {item.partition} offset {item.offset} "
                                         f"belongs to topic id {rec.topic_id}, not {self.topic_id}")
            if item.partition in self.queues:
                self.queues[item.partition].append(item)
                self.next_offsets[item.partition] = item.offset + 1
        self._whole()
        out = self._release()
        if not out and self.pending and not items and wait_s > 0:
            time.sleep(min(wait_s, 0.005))  # waiting for a partition to commit: do not spin
        return out

    def _whole(self) -> None:
        queues = self.queues
        while all(queues.values()):
            b = min(q[0].record.batch_id for q in queues.values())
            ahead = [p for p, q in queues.items() if q[0].record.batch_id != b]
            if ahead:
                raise SubscriptionError(
                    SUBSCRIPTION_UNAVAILABLE,
                    f"changelog {self.topic} lacks batch {b} in partition(s) {ahead} (the store applied batches "
                    "its changelog never got: changelogs turned on late, or records deleted)")
            items = {p: q.popleft() for p, q in queues.items()}
            spec = items[0].record.spec
            if spec != self.spec:
                raise TopicRecreated(f"changelog {self.topic} batch {b} is of another definition of store "
                                     f"{self.store!r} than the one answering")
            self.pending.append((b, items))

    def _local_batch(self) -> int:
        best = -1
        for p in range(self.spec.partitions):
            try:
                store = self.access.partition(self.store, p)
                last = None if store is None else store.last_batch_id()
            except Exception:  # noqa: BLE001 - a partition closing or swapped out: count it as behind
                last = None
            if last is not None and last > best:
                best = last
        return best

    def _release(self) -> list[Batch]:
        if not self.pending:
            return []
        if self.versioned:
            return self._release_versioned()
        out = []
        while self.pending:
            b = self.pending[0][0]
            if self.paced and b > self._store_batch + 1:
                self._store_batch = self._local_batch()
                if b > self._store_batch + 1:
                    break
            _, items = self.pending.pop(0)
            out.append(self._batch(b, items, True, raw={p: it.record.rows for p, it in items.items()}))
        return out

    def _release_versioned(self) -> list[Batch]:
        run = VersionRun(tuple(b for b, _ in self.pending),
                         tuple({p: record_versions(self.maker, it.record.rows) for p, it in items.items()}
                               for _, items in self.pending))
        n = len(self.spec.values)

        def latest(p: int, keys: list[Any]) -> tuple[int, dict[Any, Any]]:
            store = self.access.partition(self.store, p)
            if store is None:
                return -1, {}
            return read_latest(store, n, keys)

        got = resolve(self.maker, run, range(self.spec.partitions), latest)
        if isinstance(got, (NotReady, NeedMore)):
            if isinstance(got, NeedMore) and len(self.pending) > 100_000:  # pragma: no cover - a runaway store
                raise SubscriptionError(SUBSCRIPTION_UNAVAILABLE, f"store {self.store!r} runs ahead of its changelog")
            return []
        assert isinstance(got, Resolved)
        out = [self._batch(b, items, got.complete[i], changes=got.changes[i]) for i, (b, items) in enumerate(self.pending)]
        self.pending = []
        return out

    def _batch(self, b: int, items: dict[int, Item], complete: bool, *, raw: Mapping[int, pa.Table] | None = None,
               changes: dict[int, dict[Any, Row | None]] | None = None) -> Batch:
        source = Position.empty()
        for it in items.values():
            source = source.merge(it.record.position)
        self.last_batch = b
        return Batch(b, self.topic, {p: it.offset for p, it in items.items()}, source, complete, maker=self.maker,
                     raw=raw, changes=changes)

    def close(self) -> None:
        if self._tail is not None:
            self._tail.close()
            self._tail = None
