"""The store engine: one SQLite file per store partition, one class per store kind."""

from __future__ import annotations

import os

from ..catalog.schema import StoreKind, StoreSpec
from .base import Handler, PartitionStore, StoreClosedError, is_permitted
from .change import Change
from .codec import BatchError
from .history import Retention
from .kv import KeyValueStore, TimestampedKeyValueStore
from .rows import RowIterator
from .versioned import VersionedStore
from .window import SessionStore, WindowStore

__all__ = [
    "Change", "PartitionStore", "Handler", "StoreClosedError", "BatchError", "is_permitted", "RowIterator",
    "KeyValueStore", "TimestampedKeyValueStore", "WindowStore", "SessionStore", "VersionedStore",
    "STORE_CLASSES", "open_partition", "Retention",
]

STORE_CLASSES: dict[StoreKind, type[PartitionStore]] = {
    StoreKind.KEY_VALUE: KeyValueStore,
    StoreKind.TIMESTAMPED_KEY_VALUE: TimestampedKeyValueStore,
    StoreKind.WINDOW: WindowStore,
    StoreKind.SESSION: SessionStore,
    StoreKind.VERSIONED: VersionedStore,
}


def open_partition(
    spec: StoreSpec, partition: int, path: str | os.PathLike[str], *, read_only: bool = False,
    synchronous: str = "FULL", adbc_min_rows: int | None = None, history: Retention | None = None,
) -> PartitionStore:
    """Open (creating unless read-only) the file of one store partition with the class of its kind.

    ``adbc_min_rows``: from how many rows a partition's batch is staged through ADBC (engine/staging.py);
    ``history``: how much of its past a writer keeps for as-of reads (engine/history.py; default: the spec's
    options ``history_batches``/``history_ms``, else 16 batches and 10 s).
    """
    extra = {} if adbc_min_rows is None else {"adbc_min_rows": adbc_min_rows}
    return STORE_CLASSES[spec.kind](spec, partition, path, read_only=read_only, synchronous=synchronous,
                                    history=history, **extra)
