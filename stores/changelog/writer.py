"""ChangelogWriter: a StoreWriter that logs each partition's share of a batch before the store commits it.

A store's generation N (a rebuild beside generation N-1, see ``stores.app.generations``) has a topic of its
own (``topics.changelog_topic``), written from its batch 0 by the same steps below.

Exactly-once, per store partition ``p`` and batch ``b`` (Spark replays a
failed batch with the same id and offsets):

1. the store already applied ``b`` (its ``last_batch_id`` ≥ b): nothing to do —
   the changelog got ``b`` before the store did;
2. the changelog already holds ``b`` for ``p`` (a crash after the append and
   before the commit): the store applies *that record* — not the recomputed
   rows — so store and changelog hold the very same change even if a replay
   computed something else;
3. otherwise the record is appended (and its delivery awaited), then the
   store applies it.

So every record in a changelog partition is a batch the store applied or is
about to apply, in batch order, each exactly once; a replica that applies
them in order with the same merge code reaches the same rows and Position.
Empty shares are logged too: the Position moves with every batch.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterable, Mapping
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pyarrow as pa

from ..catalog.schema import StoreSpec
from ..engine.base import PartitionStore
from ..engine.batch import changes_to_table, encode, split_by_partition
from ..engine.codec import BatchError, ValueCodec
from ..engine.writer import apply_shares
from ..iqv2.position import Position
from .record import ChangelogRecord
from .topics import ChangelogLog, changelog_topic

__all__ = ["ChangelogWriter"]

log = logging.getLogger(__name__)


class ChangelogWriter:
    """Wraps a store's writer (its ``spec`` and ``partition_stores``) with the store's changelog topic."""

    def __init__(self, inner: Any, changelog: ChangelogLog, application_id: str, generation: int = 0) -> None:
        self.inner = inner
        self.spec: StoreSpec = inner.spec
        self.stores: Mapping[int, PartitionStore] = inner.partition_stores
        self.changelog = changelog
        self.generation = generation
        self.topic = changelog_topic(application_id, self.spec.name, generation)
        self.topic_id: str | None = None  # stamped on every record (read with the tail)
        self._codec = ValueCodec(self.spec)
        self._lock = threading.Lock()
        self._logged: dict[int, int] | None = None  # partition -> last batch id in the changelog (-1: none)

    # -- the StoreWriter protocol --------------------------------------------------------------------
    @property
    def partition_stores(self) -> Mapping[int, PartitionStore]:
        """The store's partitions (a sink that reads what it writes, such as a table aggregate, reads them)."""
        return self.stores

    def write_batch(self, batch_id: int, changes: Iterable[Any], position: Position) -> None:
        where = f"store {self.spec.name!r} batch {batch_id}"
        self.write_table(batch_id, changes_to_table(self.spec, self._codec, changes, where), position)

    def write_table(self, batch_id: int, table: pa.Table, position: Position | Mapping[str, Any]) -> None:
        if isinstance(batch_id, bool) or not isinstance(batch_id, int) or batch_id < 0:
            raise BatchError(f"store {self.spec.name!r}: batch_id must be a non-negative int, got {batch_id!r}")
        if not isinstance(position, Position):
            if not isinstance(position, Mapping):
                raise BatchError(f"store {self.spec.name!r} batch {batch_id}: position must be a Position")
            position = Position.from_map(position)
        if not isinstance(table, pa.Table):
            raise BatchError(f"store {self.spec.name!r} batch {batch_id}: expected a pyarrow.Table, "
                             f"got {type(table).__name__}")
        check = getattr(self.inner, "_check", None)
        if check is not None:
            check()
        where = f"store {self.spec.name!r} batch {batch_id}"
        threads_for = getattr(self.inner, "threads_for", None)
        threads = threads_for(len(table)) if threads_for is not None else 1
        # one thread: one stable sort of the whole batch by (partition, key); several: each partition's share is
        # sorted in its own writer thread (apply_rows), and its record keeps the arrival order (any record is
        # applied that way: one read back from the changelog, and a replica's, are sorted as they are applied)
        sort_now = threads < 2
        identity = next(iter(self.stores.values())).IDENTITY if sort_now else None
        shares = split_by_partition(self.spec, encode(self.spec, table, where), identity)
        with self._lock:
            logged = self._logged_batches()
            todo: dict[int, ChangelogRecord] = {}
            fresh: dict[int, ChangelogRecord] = {}
            for p, share in enumerate(shares):
                store = self.stores[p]
                applied = store.last_batch_id()
                if applied is not None and applied >= batch_id:
                    continue
                if logged.get(p, -1) >= batch_id:
                    item = self.changelog.last(self.topic, p)
                    if item is None or item.record.batch_id != batch_id:
                        raise BatchError(
                            f"{where}: changelog {self.topic!r} partition {p} is at batch "
                            f"{None if item is None else item.record.batch_id}, the store at {applied}: "
                            "they disagree; delete the changelog topic to rewrite it, or rebuild the store")
                    todo[p] = item.record
                    log.warning("%s partition %d: applying the changelog's record of this batch (a replay after "
                                "a crash between the changelog append and the store commit)", where, p)
                    continue
                fresh[p] = ChangelogRecord(self.spec, batch_id, position, share.observed, share.rows, self.topic_id)
            todo.update(fresh)
            # fresh records sorted by the split are applied as they are; big batches merge partitions in parallel
            jobs = [(self.stores[p], rec.rows, rec.observed, rec.position, sort_now and p in fresh)
                    for p, rec in sorted(todo.items())]
            if fresh and threads > 1:
                self._append_beside(fresh, logged, jobs, batch_id, threads)
                return
            if fresh:
                self.changelog.append(self.topic, fresh)
                for p in fresh:
                    logged[p] = batch_id
        apply_shares(jobs, batch_id, threads, self.spec.name)

    def _append_beside(self, fresh: dict[int, ChangelogRecord], logged: dict[int, int], jobs: list[Any],
                       batch_id: int, threads: int) -> None:
        """A big batch: append its records in a thread of their own while the partitions stage and merge.

        Why: the append (Arrow IPC, zstd, the log's encoding and write) took
        ~0.6 s of a 3M-row batch's ~3 s write, alone, before any partition
        began. Each partition's transaction now waits for the append just
        before its COMMIT (``before_commit``), so a store still never holds a
        batch its changelog lacks: if the append fails, every partition rolls
        back and the batch fails with the append's error. The partitions know
        their records are logged once the append succeeded, whatever the
        merges did (a retry must not log them twice).
        """
        with ThreadPoolExecutor(max_workers=1, thread_name_prefix=f"iqgate-changelog-{self.spec.name}") as pool:
            appended = pool.submit(self.changelog.append, self.topic, fresh)
            try:
                apply_shares(jobs, batch_id, threads, self.spec.name, before_commit=appended.result)
            finally:
                if appended.exception() is None:  # waits for the append, if a merge failed before it ended
                    for p in fresh:
                        logged[p] = batch_id

    def last_batch_id(self) -> int | None:
        return self.inner.last_batch_id()

    # -- the changelog's tail ----------------------------------------------------------------------
    def prepare(self) -> None:
        """Find the changelog's tail now: create the topic, fence an earlier writer, read each partition's last record.

        Why: on Kafka that is several round trips to the brokers (~0.2 s of a
        30,000-record ingest's 3.7 s against a local broker) that the first
        batch would otherwise wait for after Spark's job. The pipeline calls
        this beside its query's start, so it overlaps the first batch's Spark
        job (issue 22). A failure here is met again, and reported, by the
        first batch.
        """
        with self._lock:
            self._logged_batches()

    def _logged_batches(self) -> dict[int, int]:
        """Per partition the last batch id the changelog holds, read once from the topic's tail."""
        if self._logged is None:
            self.changelog.ensure(self.topic, self.spec.partitions)
            self.changelog.prepare(self.topic)  # fence an earlier writer first: its open batch ends before we read
            self.topic_id = self.changelog.topic_id(self.topic)
            logged = {}
            for p in range(self.spec.partitions):
                item = self.changelog.last(self.topic, p)
                logged[p] = -1 if item is None else item.record.batch_id
                applied = self.stores[p].last_batch_id()
                if applied is not None and logged[p] < applied:
                    log.warning("store %s partition %d has applied batch %d but changelog %s holds batches up to %d:"
                                " replicas restoring from it will miss the changes written without a changelog",
                                self.spec.name, p, applied, self.topic, logged[p])
            self._logged = logged
        return self._logged
