"""The unit a pipeline writes: one row change of a batch, in the store's column order."""

from __future__ import annotations

from typing import Any, NamedTuple

__all__ = ["Change"]


class Change(NamedTuple):
    """One row change in a batch. ``value`` None deletes (for versioned stores: a tombstone at ``timestamp``).

    ``value`` is a tuple in the order of ``StoreSpec.values``. ``timestamp``
    (epoch ms) is the record time: required for timestamped key-value and
    versioned stores, optional elsewhere. Window and session rows are
    identified by ``(key, window_start, window_end)``.
    """

    key: Any
    value: tuple[Any, ...] | None
    timestamp: int | None = None
    window_start: int | None = None
    window_end: int | None = None
