"""StoreWriter: validates a whole batch first, then applies it per partition in one transaction each.

Validation before any write is what makes bad input fail cleanly: a batch
with one malformed change touches no partition at all.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any

from ..catalog.partitioner import partition_for_key
from ..catalog.schema import StoreKind, StoreSpec
from ..iqv2.position import Position
from .base import PartitionStore
from .change import Change
from .codec import BatchError, ValueCodec

__all__ = ["PartitionedWriter", "validate_batch"]


def _as_change(ch: Any, where: str) -> Change:
    if isinstance(ch, Change):
        return ch
    if isinstance(ch, Mapping):
        try:
            return Change(**ch)
        except TypeError as exc:
            raise BatchError(f"{where}: {exc}") from None
    if isinstance(ch, (tuple, list)) and 2 <= len(ch) <= 5:
        return Change(*ch)
    raise BatchError(f"{where}: expected a Change(key, value, timestamp, window_start, window_end), got {ch!r}")


def _int_or_none(v: Any, what: str, where: str) -> int | None:
    if v is None:
        return None
    if isinstance(v, bool) or not isinstance(v, int):
        raise BatchError(f"{where}: {what} must be epoch milliseconds (int), got {v!r}")
    return v


def validate_batch(spec: StoreSpec, codec: ValueCodec, batch_id: int, changes: Iterable[Any]) -> list[Change]:
    """Canonical changes (keys and values coerced to the column types) or BatchError naming the culprit."""
    out: list[Change] = []
    kind = spec.kind
    for i, raw in enumerate(changes):
        where = f"store {spec.name!r} batch {batch_id} change #{i}"
        ch = _as_change(raw, where)
        key = codec.write_key(ch.key, where)
        value = None if ch.value is None else codec.write_value(ch.value, where)
        ts = _int_or_none(ch.timestamp, "timestamp", where)
        ws = _int_or_none(ch.window_start, "window_start", where)
        we = _int_or_none(ch.window_end, "window_end", where)
        if kind is StoreKind.TIMESTAMPED_KEY_VALUE and value is not None and ts is None:
            raise BatchError(f"{where}: a timestamped key-value store needs the record timestamp")
        if kind is StoreKind.VERSIONED and ts is None:
            raise BatchError(f"{where}: a versioned store needs the version timestamp (valid_from)")
        if kind in (StoreKind.WINDOW, StoreKind.SESSION):
            if ws is None:
                raise BatchError(f"{where}: window_start is required for a {kind.value} store")
            if we is None:
                if kind is StoreKind.WINDOW and spec.window_size_ms:
                    we = ws + spec.window_size_ms
                else:
                    raise BatchError(f"{where}: window_end is required for a {kind.value} store")
            if we < ws:
                raise BatchError(f"{where}: window_end {we} is before window_start {ws}")
        out.append(Change(key, value, ts, ws, we))
    return out


class PartitionedWriter:
    """Writes batches into every partition of one store (the StoreWriter protocol).

    ``check`` is called before each batch so a writer outliving its app
    refuses to write instead of writing into closed stores.
    """

    def __init__(self, spec: StoreSpec, stores: Mapping[int, PartitionStore], check: Callable[[], None] | None = None):
        missing = sorted(set(range(spec.partitions)) - set(stores))
        if missing:
            raise ValueError(f"store {spec.name!r}: writer needs every partition, missing {missing}")
        self.spec = spec
        self._stores = dict(stores)
        self._codec = ValueCodec(spec)
        self._check = check

    def write_batch(self, batch_id: int, changes: Iterable[Any], position: Position) -> None:
        """Apply ``changes`` and ``position`` to every partition, one transaction per partition, idempotently."""
        if isinstance(batch_id, bool) or not isinstance(batch_id, int) or batch_id < 0:
            raise BatchError(f"store {self.spec.name!r}: batch_id must be a non-negative int, got {batch_id!r}")
        if not isinstance(position, Position):
            if isinstance(position, Mapping):
                position = Position.from_map(position)
            else:
                raise BatchError(f"store {self.spec.name!r} batch {batch_id}: position must be a Position")
        if self._check is not None:
            self._check()
        canon = validate_batch(self.spec, self._codec, batch_id, changes)
        n = self.spec.partitions
        per: dict[int, list[Change]] = {p: [] for p in range(n)}
        if n == 1:
            per[0] = canon
        else:
            kt = self.spec.key.type
            for ch in canon:
                per[partition_for_key(ch.key, n, kt)].append(ch)
        for p in range(n):
            self._stores[p].apply_batch(batch_id, per[p], position)

    def last_batch_id(self) -> int | None:
        """The smallest last-applied batch id over the partitions (None if some partition never applied one)."""
        ids = [s.last_batch_id() for s in self._stores.values()]
        if any(i is None for i in ids):
            return None
        return min(ids)  # type: ignore[type-var]
