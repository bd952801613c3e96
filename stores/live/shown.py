"""ShownKeys: which rows a subscription has shown, so a row leaving its filter is deleted exactly once.

A subscription whose filter reads value columns can drop a row it showed when the row's values change; it must
then send a delete, but only if it showed the row (a delete of a row never shown is noise to a consumer that
counts, and telling the two apart is what the set is for). The set holds a 64-bit hash per identity shown,
within a byte budget. Past the budget it stops remembering and answers "maybe shown" for every identity: from
then on a delete may name a row the subscriber does not hold (applying it changes nothing), never is a delete
missed. A hash collision errs the same safe way.
"""

from __future__ import annotations

from collections.abc import Hashable, Iterable

__all__ = ["ShownKeys", "BYTES_PER_KEY"]

BYTES_PER_KEY = 72  # a Python int in a set: the object and its share of the table (measured ~60-80)


class ShownKeys:
    """Identities (hashable tuples of the answer's identity values) a subscription has shown, bounded."""

    __slots__ = ("_keys", "_limit", "overflowed")

    def __init__(self, max_bytes: int = 1 << 20) -> None:
        self._keys: set[int] = set()
        self._limit = max(0, max_bytes) // BYTES_PER_KEY
        self.overflowed = False

    def add(self, identities: Iterable[Hashable]) -> None:
        if self.overflowed:
            return
        keys = self._keys
        for ident in identities:
            keys.add(hash(ident))
        if len(keys) > self._limit:
            self.overflowed = True
            self._keys = set()

    def take(self, identities: Iterable[Hashable]) -> list[Hashable]:
        """The identities that may have been shown (each forgotten: it is being deleted), in order."""
        if self.overflowed:
            return list(identities)
        keys = self._keys
        out = []
        for ident in identities:
            h = hash(ident)
            if h in keys:
                keys.discard(h)
                out.append(ident)
        return out

    def clear(self) -> None:
        """A new snapshot (a rebuilt generation): nothing is shown; remembering starts again within the budget."""
        self._keys = set()
        self.overflowed = False

    def __len__(self) -> int:
        return len(self._keys)

    @property
    def nbytes(self) -> int:
        return len(self._keys) * BYTES_PER_KEY
