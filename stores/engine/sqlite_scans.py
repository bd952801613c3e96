"""Arrow scans of a partition file that THIS process writes, read through ``sqlite3``, never ADBC.

Why: the ADBC driver links its own copy of SQLite, and a copy's POSIX
locks are invisible to another copy in the same process (a process never
conflicts with its own locks). A WAL reader holds a read-mark lock on the
``-shm`` so that the writer neither checkpoints over the pages its snapshot
still reads from the database file nor restarts the WAL over frames it
still reads. When the reader is the ADBC copy and the writer is Python's
``sqlite3`` in the same process, the writer sees no reader and does both:
under a steady stream of batches an Arrow scan then read half-overwritten
pages, ``IO: Failed to step query: database disk image is malformed``
(benchmarks/bench_moment.py, 2026-12-06: a two-store join read while the
pipeline wrote ~5,000 orders/s in the same process), and nothing says a
damaged read always fails rather than returning wrong rows.

So where the writer lives in this process (``writing_here``), scans use a
``sqlite3`` connection of their own: the same SQLite copy as the writer, so
the locks are seen and the snapshot holds. It is slower per row (a Python
value per cell, ~0.5 M rows/s against ADBC's ~3 M) but only the writing
process pays it; serving processes and readers of a state dir keep ADBC.
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import pyarrow as pa

from ..catalog.schema import StoreSpec
from ..iqv2.position import Position
from .arrow_reads import SCAN_CACHE_KIB, ArrowRows, witness_sql

__all__ = ["SqliteScans", "sqlite_rows", "writing_here", "mark_writing", "unmark_writing"]

_lock = threading.Lock()
_writing: dict[str, int] = {}  # resolved path -> writers open on it in this process


def _key(path: Path) -> str:
    return str(path.resolve())


def mark_writing(path: Path) -> None:
    """A writer connection to ``path`` is open in this process (until ``unmark_writing``)."""
    with _lock:
        k = _key(path)
        _writing[k] = _writing.get(k, 0) + 1


def unmark_writing(path: Path) -> None:
    with _lock:
        k = _key(path)
        n = _writing.get(k, 0) - 1
        if n > 0:
            _writing[k] = n
        else:
            _writing.pop(k, None)


def writing_here(path: Path) -> bool:
    """Does this process hold a writer connection to ``path``? (Then its Arrow scans must not use ADBC.)"""
    if not _writing:  # a serving process writes nothing: no path resolved (syscalls) on its every scan
        return False
    with _lock:
        return _key(path) in _writing


def sqlite_rows(spec: StoreSpec, columns: tuple[str, ...], cursor: sqlite3.Cursor, batch_rows: int,
                release: Callable[[], None]) -> ArrowRows:
    """An ``ArrowRows`` over an open ``sqlite3`` cursor of a witness-led scan; ``release`` ends its transaction
    (called once, at the end of the rows or at ``close()``)."""
    names = [f"c{i}" for i in range(len(columns))]

    def batches() -> Iterator[pa.RecordBatch]:
        for _ in range(1 << 40):  # bounded by the cursor's rows
            rows = cursor.fetchmany(batch_rows)
            if not rows:
                return
            yield pa.record_batch([pa.array(col) for col in zip(*rows)], names=names)

    done = threading.Lock()

    def end() -> None:
        if done.acquire(blocking=False):  # once, whichever of the end and close() comes first
            with contextlib.suppress(Exception):
                cursor.close()
            release()

    return ArrowRows(spec, columns, batches(), end)


class SqliteScans:
    """The Arrow scans of one partition file in the process that writes it: one ``sqlite3`` connection per scan,
    opened read-only and closed when the scan ends (the same SQLite copy as the writer: closing one never drops
    another's locks)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._uri = f"{path.resolve().as_uri()}?mode=ro"
        self._busy = 0
        self._closed = False
        self._cond = threading.Condition()

    def scan(self, sql: str, params: Sequence[Any], spec: StoreSpec, columns: tuple[str, ...], batch_rows: int,
             position_of: Callable[[str], Position]) -> tuple[Position, ArrowRows]:
        """The Position and a stream of the rows of ``sql``, both from ONE read transaction."""
        with self._cond:
            if self._closed:
                raise RuntimeError("closed")
            self._busy += 1
        c: sqlite3.Connection | None = None
        try:
            os.stat(self.path)  # FileNotFoundError when the file is gone (connect would create nothing: mode=ro)
            c = sqlite3.connect(self._uri, uri=True, isolation_level=None, check_same_thread=False, timeout=30.0)
            c.execute("PRAGMA query_only=1")
            c.execute(f"PRAGMA cache_size=-{SCAN_CACHE_KIB}")
            c.execute("BEGIN")
            text = c.execute("SELECT position FROM meta").fetchone()[0]
            leads = columns[:len(columns) - len(spec.values)]
            cur = c.execute(witness_sql(spec, leads, sql), params)
        except BaseException:
            if c is not None:
                c.close()
            self._done()
            raise
        conn = c

        def release() -> None:
            try:
                with contextlib.suppress(Exception):
                    conn.execute("COMMIT")
                conn.close()
            finally:
                self._done()

        return position_of(text), sqlite_rows(spec, columns, cur, batch_rows, release)

    def _done(self) -> None:
        with self._cond:
            self._busy -= 1
            self._cond.notify_all()

    @property
    def busy(self) -> int:
        with self._cond:
            return self._busy

    def close(self, wait_s: float = 5.0) -> None:
        """No more scans; wait (bounded) for those in flight."""
        deadline = time.monotonic() + wait_s
        with self._cond:
            self._closed = True
            while self._busy and time.monotonic() < deadline:
                self._cond.wait(0.05)
