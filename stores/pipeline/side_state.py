"""The state a store's foreachBatch keeps beside Spark's checkpoint: one SQLite file, advanced one batch at a time.

Table aggregates and materialized joins (issue 51) need state that Spark's
stateful operators cannot hold usefully: a join needs both inputs' tables
indexed by more than one column (a foreign key, a version time), and an
aggregate over a table needs each group's members to retract, to order
(``collect_list``) and to rank (``topk``, ``min`` after its holder left).
Kept here, on the driver, next to the store writer, each batch's work is a
few set-based SQL statements over indexed tables instead of one Python call
per key (``applyInPandasWithState``).

Exactly once, with the store partitions applied in their own transactions:

- the file records the last batch id it applied, in the same transaction as
  the batch's changes; a batch id it already holds (Spark replays the last
  uncommitted batch after a crash) is not applied again (``fresh`` False);
- what a store writes is computed from the state *after* the batch, never
  from deltas alone, so a replay recomputes the same rows and each store
  partition skips the batch id it already applied;
- the file lives in the checkpoint directory, so a rebuild (new generation,
  new checkpoint) starts from an empty state, and a checkpoint with
  committed batches but no (or an older) state file is found out at start
  (``behind``) and the store is rebuilt, never run on partial state.

Values are kept in the stores' stored forms (``engine/columns.py``: epoch ms,
days, 0/1, 16 order-preserving bytes for DECIMAL, canonical JSON for nested
values), so SQLite compares and orders them as SQL does, and the rows that
come out go to the store writer as they are.
"""

from __future__ import annotations

import contextlib
import json
import sqlite3
import threading
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pyarrow as pa

from ..catalog.decimals import DecimalType
from ..catalog.nested import NestedType
from ..catalog.schema import SqlType
from ..engine.codec import affinity
from ..engine.columns import column_type

__all__ = ["SideState", "SideStateLost", "SIDE_STATE_FILE", "stored_values", "arrow_from_stored", "behind",
           "quote", "sql_type_of"]

SIDE_STATE_FILE = "side-state.db"


class SideStateLost(RuntimeError):
    """The side state is behind the checkpoint: the store must be rebuilt from its source."""


def quote(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def sql_type_of(t: SqlType | DecimalType | NestedType) -> str:
    """The SQLite column affinity a stored form of ``t`` keeps its order in."""
    return affinity(t)


def stored_values(arr: pa.Array | pa.ChunkedArray, t: SqlType | DecimalType | NestedType) -> list[Any]:
    """An Arrow column (as Spark's batch gives it, timestamps already epoch ms) → its stored forms, for SQLite."""
    return column_type(t).encode(arr).to_pylist()


def arrow_from_stored(values: Sequence[Any], t: SqlType | DecimalType | NestedType) -> pa.Array:
    """Stored forms read back from SQLite → the Arrow column the store writer takes (booleans as booleans)."""
    ctype = column_type(t)
    arr = pa.array(values, ctype.storage)
    return arr.cast(pa.bool_()) if t is SqlType.BOOLEAN else arr


def behind(path: Path, committed: int | None) -> str | None:
    """Why a store whose checkpoint committed ``committed`` cannot go on from the side state at ``path`` (or None)."""
    if committed is None:
        return None
    last = None
    if path.exists():
        try:
            con = sqlite3.connect(path)
            try:
                row = con.execute("SELECT value FROM meta WHERE name = 'last_batch'").fetchone()
            finally:
                con.close()
            last = None if row is None else int(row[0])
        except (sqlite3.Error, ValueError) as exc:
            return f"its side state {path} cannot be read ({exc})"
    if last is None or last < committed:
        return (f"its side state {path} is at batch {last} but its checkpoint committed batch {committed} "
                "(the file was lost or is older than the checkpoint)")
    return None


class SideState:
    """One store's side state: ``tables`` (DDL, run once) and the last batch applied, in one SQLite file.

    Only the store's foreachBatch thread uses it; the lock guards close() against a batch in flight.
    """

    def __init__(self, path: Path, tables: Sequence[str], what: str) -> None:
        self.path = Path(path)
        self.what = what
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._lock = threading.Lock()
        self._con = sqlite3.connect(self.path, isolation_level=None, check_same_thread=False)
        self._con.execute("PRAGMA journal_mode=WAL")
        self._con.execute("PRAGMA synchronous=FULL")  # as durable as the checkpoint that says the batch is done
        self._con.execute("PRAGMA temp_store=MEMORY")
        self._con.execute("PRAGMA cache_size=-65536")
        with self._tx():
            self._con.execute("CREATE TABLE IF NOT EXISTS meta (name TEXT PRIMARY KEY, value TEXT)")
            for ddl in tables:
                self._con.execute(ddl)

    @contextlib.contextmanager
    def _tx(self) -> Iterator[sqlite3.Connection]:
        self._con.execute("BEGIN IMMEDIATE")
        try:
            yield self._con
        except BaseException:
            self._con.execute("ROLLBACK")
            raise
        self._con.execute("COMMIT")

    def meta(self, name: str) -> Any:
        row = self._con.execute("SELECT value FROM meta WHERE name = ?", (name,)).fetchone()
        return None if row is None else json.loads(row[0])

    def set_meta(self, con: sqlite3.Connection, name: str, value: Any) -> None:
        con.execute("INSERT INTO meta (name, value) VALUES (?, ?) ON CONFLICT (name) DO UPDATE SET value = "
                    "excluded.value", (name, json.dumps(value)))

    def last_batch(self) -> int | None:
        v = self.meta("last_batch")
        return None if v is None else int(v)

    @contextlib.contextmanager
    def batch(self, batch_id: int) -> Iterator[tuple[sqlite3.Connection, bool]]:
        """One transaction for ``batch_id``: ``(connection, fresh)``; ``fresh`` False when the batch was applied
        before (a replay): the caller only reads. A gap (the state is older than the previous batch) raises."""
        with self._lock:
            last = self.last_batch()
            if last is not None and last > batch_id:
                raise SideStateLost(f"{self.what}: its side state {self.path} has applied batch {last}, after batch "
                                    f"{batch_id} that Spark runs now: the checkpoint is older than the state")
            if (last is None and batch_id > 0) or (last is not None and last < batch_id - 1):
                raise SideStateLost(f"{self.what}: its side state {self.path} is at batch {last}, Spark runs batch "
                                    f"{batch_id}: the state of the batches between is lost; the store must be rebuilt")
            fresh = last is None or last < batch_id
            with self._tx() as con:
                yield con, fresh
                if fresh:
                    self.set_meta(con, "last_batch", batch_id)

    def close(self) -> None:
        with self._lock:
            self._con.close()
