"""The iterator range-style results come back in: built lazily from the rows of one snapshot.

Building a KeyValue per row costs more than reading it, so rows stay raw
until consumed; bulk consumers (Arrow building in the gateway) take the raw
rows with ``remaining_rows()`` and skip the per-row objects entirely.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, overload

from ..iqv2.values import KeyValueIterator

__all__ = ["RowIterator", "LazyRows"]


class LazyRows(Sequence[Any]):
    """A read-only sequence that converts a raw row on access."""

    __slots__ = ("raw", "convert")

    def __init__(self, raw: list[Any], convert: Callable[[Any], Any]) -> None:
        self.raw = raw
        self.convert = convert

    def __len__(self) -> int:
        return len(self.raw)

    @overload
    def __getitem__(self, i: int) -> Any: ...
    @overload
    def __getitem__(self, i: slice) -> list[Any]: ...
    def __getitem__(self, i: int | slice) -> Any:
        if isinstance(i, slice):
            return list(map(self.convert, self.raw[i]))
        return self.convert(self.raw[i])


class RowIterator(KeyValueIterator[Any]):
    """A KeyValueIterator over one snapshot, with a raw fast path.

    ``row_columns`` names the leading raw columns before the value columns,
    e.g. ``("key", "timestamp")`` for key-value stores: a raw row is
    ``(key, timestamp, v0, v1, ...)``.
    """

    __slots__ = ("row_columns", "key_decoder")

    def __init__(self, raw: list[Any], convert: Callable[[Any], Any], row_columns: tuple[str, ...],
                 key_decoder: Callable[[Any], Any] | None = None) -> None:
        super().__init__(LazyRows(raw, convert))
        self.row_columns = row_columns
        self.key_decoder = key_decoder  # an ARRAY/STRUCT key: its JSON text → the value (bulk readers get values)

    def remaining_rows(self) -> list[Any]:
        """The unconsumed rows as raw tuples (leading ``row_columns`` then the value columns); consumes them.

        Raw values are the stored forms: BOOLEAN as 0/1, TIMESTAMP as epoch ms, DATE as days; but an ARRAY or
        STRUCT key comes decoded (a list or dict), as readers of the key column take it.
        """
        items = self._items
        assert isinstance(items, LazyRows)
        rest = items.raw[self._i :] if self._i else items.raw
        self._i = len(items.raw)
        if self.key_decoder is not None:
            dec = self.key_decoder
            return [(dec(r[0]), *r[1:]) for r in rest]
        return rest
