"""What a live feed yields: the snapshot in chunks, then each batch's changes, progress, and rebuilds.

Rows have the shape of a store relation's rows (``spec.columns()`` in order, then ``_partition`` and
``_position`` as compact JSON): the rows a pull query's scan hands DuckDB, so the gateway can evaluate a
subscription's SQL over a batch of changed rows exactly as over a pull query's rows. Stored forms are decoded as
the row path decodes them (TIMESTAMP as epoch ms, DATE as days, booleans, nested values, decimals, composite keys
as their columns).

Events are shared: every feed of a store gets the same ``Changes`` object of a batch (``memo`` is a scratch
dict for forms derived from it once, e.g. the Arrow table the engine builds).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Union

from ..catalog.schema import StoreKind, StoreSpec
from ..iqv2.position import Position

__all__ = ["Snapshot", "Changes", "Progress", "Rebuilt", "Event", "identity_names", "ROW_TAIL"]

ROW_TAIL = ("_partition", "_position")  # what follows a row's store columns

Row = tuple[Any, ...]


def identity_names(spec: StoreSpec) -> tuple[str, ...]:
    """The store columns that name one row: the key column(s), and the window bounds of window and session
    stores. (A versioned store's plain table holds one current version per key: its key names the row.)"""
    keys = tuple(c.name for c in spec.key_columns())
    if spec.kind in (StoreKind.WINDOW, StoreKind.SESSION):
        keys += ("window_start", "window_end")
    return keys


@dataclass(frozen=True, slots=True, eq=False)
class Snapshot:
    """One chunk of the snapshot: rows of the whole answer at ``position`` (every chunk of one snapshot has the
    same position; ``last`` marks the final chunk, possibly empty)."""

    position: Position
    spec: StoreSpec
    rows: tuple[Row, ...]
    last: bool
    kind: str = "snapshot"


@dataclass(frozen=True, slots=True, eq=False)
class Changes:
    """One batch's changes, at ``position``: ``upserts`` are rows' new contents, ``deletes`` rows that are gone
    (their identity columns set, every other store column None).

    ``complete``: the subscriber that applied every event so far holds exactly the store's answer at
    ``position`` (a progress point). False only inside a catch-up where the feed merged several batches'
    changes of a key into the last one (versioned stores read while behind); a later complete batch follows.
    """

    position: Position
    spec: StoreSpec
    upserts: tuple[Row, ...]
    deletes: tuple[Row, ...]
    complete: bool = True
    kind: str = "changes"
    memo: dict[str, Any] = field(default_factory=dict, compare=False, repr=False)


@dataclass(frozen=True, slots=True, eq=False)
class Progress:
    """Every partition of the store has passed ``position``: the subscriber holds the whole answer at it.

    Sent after each complete batch that changed something the feed shows, and at least every heartbeat (one
    second by default) while nothing does."""

    position: Position
    kind: str = "progress"


@dataclass(frozen=True, slots=True, eq=False)
class Rebuilt:
    """The store answers from a rebuilt generation now (an upgrade, or damaged files rebuilt): drop every row
    held; a snapshot of the new generation (``spec``: its definition, whose columns may differ) follows, at
    ``position``, then its changes."""

    position: Position
    spec: StoreSpec
    topic: str
    kind: str = "rebuilt"


Event = Union[Snapshot, Changes, Progress, Rebuilt]
