"""The write path of a store partition: a batch's rows, its Position and its history in ONE transaction.

Why one transaction: a reader (any process) sees the rows, the Position and
the history of a batch together or not at all, and a kill -9 leaves the old
or the new batch, never a mix (base.py's module doc). Why in its own module:
``PartitionStore`` (base.py) reads and answers queries; this mixin is what a
writer adds, and each kind (kv.py, window.py, versioned.py) supplies its
``merge`` and, where the merge changes more rows than it is handed, their
``capture`` (history.py).
"""

from __future__ import annotations

import contextlib
import errno
import sqlite3
import threading
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any, ClassVar

import pyarrow as pa

from ..catalog.schema import StoreSpec
from ..iqv2.position import Position
from . import history
from .batch import changes_to_table, encode, final_deletes, stream_time
from .change import Change
from .codec import ValueCodec
from .files import writable as _writable
from .history import Retention
from .key_order import sort_order
from .staging import Stager

__all__ = ["PartitionWrites"]


class PartitionWrites:
    """The writes of ``PartitionStore`` (a mixin: the attributes below are the store's, set in its ``__init__``)."""

    TABLE: ClassVar[str] = ""
    spec: StoreSpec
    name: str
    partition: int
    path: Path
    codec: ValueCodec
    retention: Retention
    _write_lock: threading.Lock
    _stager: Stager
    _undo_b: int | None
    _writer_conn: Callable[[], sqlite3.Connection]
    cached_sql: Callable[[Any, Callable[[], str]], str]

    # -- writes ----------------------------------------------------------------------
    # The columnar write path: a batch arrives as canonical Arrow rows (engine/batch.py), is staged
    # (engine/staging.py) and merged by the kind's set-based SQL, with the Position, in ONE transaction.
    IDENTITY: ClassVar[tuple[str, ...]] = ("k",)  # the change-table columns that name a row of this kind

    def _refuse_if_unwritable(self) -> None:
        """A PermissionError (a fault: ingest pauses and retries) when the file or its WAL companions cannot be
        written, before SQLite tries to.

        Why: SQLite writes its WAL index through a shared mapping of the
        ``-shm`` file (a new WAL's header, at a commit's start), and a write
        to that mapping once the file is immutable or on a read-only file
        system is a SIGBUS that kills the whole process, pipeline and
        gateway with it (issue 13 item 6: seen again in a CI rehearsal,
        2026-12-01, in COMMIT). A few ``access`` calls per batch.
        """
        if not _writable(self.path):
            raise PermissionError(errno.EPERM, f"Operation not permitted: store {self.name!r} partition "
                                  f"{self.partition}: {self.path} (or its -wal/-shm) cannot be written (read-only "
                                  "or immutable); not writing to it")

    @contextlib.contextmanager
    def _write_txn(self) -> Iterator[sqlite3.Connection]:
        """One write transaction under the writer lock: committed on success, rolled back on any error."""
        with self._write_lock:
            self._refuse_if_unwritable()
            c = self._writer_conn()
            c.execute("BEGIN IMMEDIATE")
            try:
                yield c
                c.execute("COMMIT")
            except BaseException:
                if c.in_transaction:
                    c.execute("ROLLBACK")
                raise

    def apply_batch(self, batch_id: int, changes: Sequence[Change], position: Position) -> bool:
        """Apply ``changes`` (this partition's) and merge ``position`` in one transaction; False if already applied.

        A thin adapter onto ``apply_rows``: the changes become a change table
        first, checked as the writer checks them.
        """
        where = f"store {self.name!r} batch {batch_id} partition {self.partition}"
        rows = encode(self.spec, changes_to_table(self.spec, self.codec, changes, where), where)
        return self.apply_rows(batch_id, rows, position, stream_time(self.spec.kind, rows))

    def apply_rows(self, batch_id: int, rows: Any, position: Position, observed: int | None,
                   *, presorted: bool = False, before_commit: Callable[[], object] | None = None) -> bool:
        """Write canonical Arrow rows of this partition and merge ``position``, in ONE transaction, idempotently.

        ``rows`` is a change table from ``batch.encode`` (this partition's
        share, in arrival order, or with ``presorted`` already stably sorted
        by ``IDENTITY`` as ``split_by_partition`` leaves it); ``observed`` its
        newest record time. A batch id at or below the last applied one
        changes nothing (a replay).

        ``before_commit`` runs inside the transaction, after the merge and
        just before COMMIT; if it raises, the transaction rolls back. The
        changelog writer waits there for its record to be durable, so the
        staging and merge overlap the changelog append while the store still
        commits only after it (issue 22).
        """
        with self._write_lock:
            c = self._writer_conn()
            last = c.execute("SELECT last_batch_id FROM meta").fetchone()[0]
            if last is not None and batch_id <= last:
                return False  # only this thread writes the file, so no one can apply it between here and BEGIN
            self._refuse_if_unwritable()
            rows = self.rows_to_stage(rows)
            if len(rows) > 1 and not presorted:  # key order for B-tree locality; stable: arrival order stays within a row
                rows = rows.take(pa.array(sort_order(rows, self.IDENTITY)))
            with contextlib.ExitStack() as stack:
                src = stack.enter_context(self._stager.staged(c, rows)) if len(rows) else None
                c.execute("BEGIN IMMEDIATE")
                try:
                    text, before, version, last = c.execute(
                        "SELECT position, observed_ts, version, last_batch_id FROM meta").fetchone()
                    was = (version, last, text, before)
                    if before is not None and (observed is None or before > observed):
                        observed = before
                    keep = self.retention.enabled
                    if src is not None:
                        self._undo_b = version if keep else None
                        try:
                            if keep:
                                self.capture(c, src)
                            self.merge(c, src, rows, observed)
                        finally:
                            self._undo_b = None
                    text = Position.from_json(text).merge(position).to_json()
                    c.execute("UPDATE meta SET last_batch_id = ?, position = ?, version = version + 1, observed_ts = ?"
                              " WHERE id = 0", (batch_id, text, observed))
                    if keep:  # the batch's history, and what is now too old to keep, in its own transaction
                        history.record(c, version, batch_id, was, (version + 1, batch_id, text, observed))
                        history.prune(c, self.TABLE, self.retention)
                    if before_commit is not None:
                        before_commit()
                    c.execute("COMMIT")
                except BaseException:
                    if c.in_transaction:
                        c.execute("ROLLBACK")
                    raise
        return True

    ROW_KEY: ClassVar[tuple[str, ...]] = ("k",)  # the table's primary key (IDENTITY's columns as the table names them)

    def row_columns(self) -> list[str]:
        """The table's columns after ``ROW_KEY``, in table order (what a row's history keeps)."""
        return ["ts", *self.value_columns()]

    def capture(self, c: sqlite3.Connection, src: str) -> None:
        """Keep the before-image of every row the staged rows name, before ``merge`` changes them (history.py).

        A kind whose merge changes other rows too captures those as well
        (versioned: each new version's predecessor); a delete by a condition
        calls ``capture_where`` with it first.
        """
        c.execute(self.cached_sql(("capture", src), lambda: history.capture_sql(
            self.TABLE, self.ROW_KEY, self.IDENTITY, self.row_columns(), src)), (self._undo_b,))

    def capture_where(self, c: sqlite3.Connection, where: str, params: Sequence[Any]) -> None:
        """Keep the before-image of the rows ``DELETE … WHERE <where>`` is about to delete (while history is kept)."""
        if self._undo_b is not None:
            c.execute(self.cached_sql(("capture_where", where), lambda: history.capture_where_sql(
                self.TABLE, self.ROW_KEY, self.row_columns(), where)), (self._undo_b, *params))

    def rows_to_stage(self, rows: Any) -> Any:
        """The rows the merge needs (by default all; kinds whose deletes remove rows drop superseded deletes)."""
        return final_deletes(rows, self.IDENTITY)

    def merge(self, c: sqlite3.Connection, src: str, rows: Any, observed: int | None) -> None:
        """Merge the staged rows into the kind's table, in the open transaction.

        ``src`` holds the rows sorted by ``IDENTITY`` then arrival, its rowid
        following that order: ``ORDER BY rowid`` reads them so without a sort.

        ``rows`` is the same data as Arrow (for counts), ``observed`` the
        partition's stream time after this batch.
        """
        raise NotImplementedError

    def value_columns(self) -> list[str]:
        """The table's value columns: v0 … v{n-1}, then the internal ones (written, never read by queries)."""
        return [f"v{i}" for i in range(len(self.spec.stored_values()))]

    STAGED: tuple[str, ...] = ("k", "ts", "ws", "we", "del")  # the change-table columns the kind's merge reads

    def stage_columns(self) -> list[str]:
        """The change-table columns a kind's merge reads from the staged rows: ``STAGED``, then the values.

        Why not every column: the staging insert binds each column of each
        row, so a kind without windows leaves out ``ws`` and ``we`` (for a
        key-value store of two values, 14% less of a 250k-row share's ADBC
        insert; issue 22).
        """
        return [*self.STAGED, *self.value_columns()]

    def reset(self) -> None:
        """Empty the partition and forget its position and last batch, in one transaction.

        For rebuilding a store from its source (e.g. its checkpoint is gone):
        readers, in this process or others, see the old or the empty store,
        and a reader holding a bound gets NOT_UP_TO_BOUND until it is rebuilt.
        """
        with self._write_txn() as c:
            c.execute(f"DELETE FROM {self.TABLE}")
            history.clear(c, self.TABLE)  # a reset store is behind every Position it held
            c.execute("UPDATE meta SET last_batch_id = NULL, position = '{}', version = version + 1,"
                      " observed_ts = NULL WHERE id = 0")
