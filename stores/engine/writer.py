"""PartitionedWriter: checks a whole batch first, then applies it per partition in one transaction each.

Checking before any write is what makes bad input fail cleanly: a batch with
one malformed change touches no partition at all.

One write path: ``write_table`` takes the batch as an Arrow change table
(engine/batch.py) and does everything vectorized: checks and encoding
(pyarrow.compute), murmur2 partitioning (numpy), then each partition's rows
are staged and merged in one transaction with the Position and the batch id
(PartitionStore.apply_rows). ``write_batch`` with ``Change`` objects turns
them into such a table and takes the same path.

Big batches write their partitions in parallel threads: staging (ADBC) and the
merge SQL run in C with the GIL released, so on 2 cores two partitions
proceed at once (measured in notes/ingest.md). A partition that fails does
not undo the others; the batch then fails, and its replay (same batch id)
skips the partitions that applied it.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pyarrow as pa

from ..catalog.schema import StoreSpec
from ..iqv2.position import Position
from .base import PartitionStore
from .batch import changes_to_table, encode, split_by_partition
from .codec import BatchError, ValueCodec

__all__ = ["PartitionedWriter", "PARALLEL_MIN_ROWS", "apply_shares"]

PARALLEL_MIN_ROWS = 20_000  # below this a batch's partitions are written one after another: threads cost more


class PartitionedWriter:
    """Writes batches into every partition of one store (the StoreWriter protocol).

    ``check`` is called before each batch so a writer outliving its app
    refuses to write instead of writing into closed stores. ``threads`` caps
    the partitions written at once (default: the machine's cores), from
    batches of ``parallel_min_rows`` rows up.
    """

    def __init__(self, spec: StoreSpec, stores: Mapping[int, PartitionStore], check: Callable[[], None] | None = None,
                 *, threads: int | None = None, parallel_min_rows: int = PARALLEL_MIN_ROWS):
        missing = sorted(set(range(spec.partitions)) - set(stores))
        if missing:
            raise ValueError(f"store {spec.name!r}: writer needs every partition, missing {missing}")
        self.spec = spec
        self._stores = dict(stores)
        self._codec = ValueCodec(spec)
        self._check = check
        self.threads = max(1, threads if threads is not None else (os.cpu_count() or 1))
        self.parallel_min_rows = parallel_min_rows

    @property
    def partition_stores(self) -> Mapping[int, PartitionStore]:
        """The store's partitions this writer writes (for wrappers such as the changelog writer)."""
        return self._stores

    def write_batch(self, batch_id: int, changes: Iterable[Any], position: Position) -> None:
        """Apply ``changes`` and ``position`` to every partition, one transaction per partition, idempotently."""
        position = self._arguments(batch_id, position)
        where = f"store {self.spec.name!r} batch {batch_id}"
        self._write(batch_id, changes_to_table(self.spec, self._codec, changes, where), position, where)

    def write_table(self, batch_id: int, table: pa.Table, position: Position) -> None:
        """Apply an Arrow change table (columns ``k``, ``v0``…, ``ts``, ``ws``, ``we``, ``del``; see engine/batch.py).

        Rows apply in table order; a bad row fails the whole batch with a
        BatchError naming it, before anything is written.
        """
        position = self._arguments(batch_id, position)
        if not isinstance(table, pa.Table):
            raise BatchError(f"store {self.spec.name!r} batch {batch_id}: expected a pyarrow.Table, "
                             f"got {type(table).__name__}")
        self._write(batch_id, table, position, f"store {self.spec.name!r} batch {batch_id}")

    def _arguments(self, batch_id: int, position: Any) -> Position:
        if isinstance(batch_id, bool) or not isinstance(batch_id, int) or batch_id < 0:
            raise BatchError(f"store {self.spec.name!r}: batch_id must be a non-negative int, got {batch_id!r}")
        if not isinstance(position, Position):
            if isinstance(position, Mapping):
                position = Position.from_map(position)
            else:
                raise BatchError(f"store {self.spec.name!r} batch {batch_id}: position must be a Position")
        if self._check is not None:
            self._check()
        return position

    def threads_for(self, rows: int) -> int:
        """How many threads write a batch of ``rows`` (small ones: one, as threads would cost more than they save)."""
        return self.threads if rows >= self.parallel_min_rows else 1

    def _write(self, batch_id: int, table: pa.Table, position: Position, where: str) -> None:
        threads = self.threads_for(len(table))
        rows = encode(self.spec, table, where)
        if threads > 1:  # each partition's share sorted by key in its own thread, beside the others' writes
            shares, presorted = split_by_partition(self.spec, rows), False
        else:
            shares, presorted = split_by_partition(self.spec, rows, next(iter(self._stores.values())).IDENTITY), True
        apply_shares([(self._stores[p], share.rows, share.observed, position, presorted)
                      for p, share in enumerate(shares)], batch_id, threads, self.spec.name)

    def last_batch_id(self) -> int | None:
        """The smallest last-applied batch id over the partitions (None if some partition never applied one)."""
        ids = [s.last_batch_id() for s in self._stores.values()]
        if any(i is None for i in ids):
            return None
        return min(ids)  # type: ignore[type-var]


def apply_shares(jobs: Sequence[tuple[PartitionStore, pa.Table, int | None, Position, bool]], batch_id: int,
                 threads: int, store_name: str, before_commit: Callable[[], object] | None = None) -> None:
    """Apply each partition's share ``(store, rows, observed, position, presorted)``; in threads when ``threads`` > 1.

    Why threads help: SQLite releases the GIL while it works, so partitions
    (separate files) merge in parallel. The first error is raised after all
    threads finished (each partition is its own transaction: the others hold
    their batch, and a replay skips them). ``before_commit``: see
    ``PartitionStore.apply_rows``.
    """
    workers = min(threads, len(jobs))
    if workers < 2:
        for store, rows, observed, position, presorted in jobs:
            store.apply_rows(batch_id, rows, position, observed, presorted=presorted, before_commit=before_commit)
        return
    with ThreadPoolExecutor(max_workers=workers, thread_name_prefix=f"iqgate-write-{store_name}") as pool:
        futures = [pool.submit(store.apply_rows, batch_id, rows, position, observed, presorted=presorted,
                               before_commit=before_commit)
                   for store, rows, observed, position, presorted in jobs]
    errors = [f.exception() for f in futures if f.exception() is not None]
    if errors:
        raise errors[0]
