"""Read connections to the store files, shared across threads and bounded in number (issue 23 item 1).

One connection per thread and partition made open files grow with stores ×
partitions × threads (26 per partition at 20 stores: past 1,024 descriptors
the HTTP loop died). Now each partition has at most ``max_readers`` read
connections, which any thread borrows for one snapshot and gives back
(a thread waits briefly when all are busy), and a process keeps at most
``budget()`` of them idle — half the open partitions, at least 16 — closing
the least recently used beyond that.

What a partition costs in files: SQLite opens the file and its WAL per
connection and maps the ``-shm`` once per process, so a writer is 3 files and
each reader 2 more. In the writing process a reader's files stay open until
the writer closes (SQLite defers closing a descriptor while the process holds
a lock on the file, and a WAL connection always does), so there reads first
try the idle writer connection and open the one reader only when the writer
stays busy: 3 files per partition, 5 at most.
"""

from __future__ import annotations

import collections
import contextlib
import os
import sqlite3
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

__all__ = ["ReadPool", "budget", "stats", "IDLE_PER_PARTITION", "MIN_BUDGET", "open_files", "fd_limit"]

IDLE_PER_PARTITION = 2
MIN_BUDGET = 16

_lock = threading.Lock()
_partitions = 0  # open ReadPools (one per open partition store)
_idle_total = 0
_open_total = 0
_lru: collections.OrderedDict[int, ReadPool] = collections.OrderedDict()  # pools holding idle connections


def budget() -> int:
    """How many idle read connections the process keeps: half the open partitions, at least MIN_BUDGET."""
    return max(MIN_BUDGET, _partitions // 2)


def stats() -> dict[str, int]:
    """Open partitions, open read connections, idle ones, and the idle budget (for /metrics)."""
    with _lock:
        return {"partitions": _partitions, "read_connections": _open_total, "idle_read_connections": _idle_total,
                "idle_budget": budget()}


def open_files() -> int | None:
    """File descriptors this process has open (Linux: /proc/self/fd), None where that cannot be counted."""
    try:
        return len(os.listdir("/proc/self/fd"))
    except OSError:
        return None


def fd_limit() -> tuple[int, int] | None:
    """(soft, hard) RLIMIT_NOFILE, None where the platform has no such limit."""
    try:
        import resource
    except ImportError:  # pragma: no cover - not POSIX
        return None
    return resource.getrlimit(resource.RLIMIT_NOFILE)


class ReadPool:
    """The read connections of one partition file: borrowed per snapshot, shared by every thread."""

    def __init__(self, path: Path, configure: Callable[[sqlite3.Connection], None] | None = None, *,
                 max_readers: int = 2, counts_partition: bool = True) -> None:
        """``configure`` runs on each new connection (after ``query_only`` is set); ``counts_partition`` False for
        a partition's second pool (its as-of reads, asof.py), which must not count as another open partition."""
        global _partitions
        self.path = path
        self._counts = counts_partition
        self.max_readers = max_readers
        self._open = 0
        self._freed = threading.Condition()
        self._waiting = 0  # threads waiting in _take for a connection to come back
        self._uri = f"{path.resolve().as_uri()}?mode=ro"
        self._configure = configure
        self._idle: list[sqlite3.Connection] = []
        self._lock = threading.Lock()
        self._epoch = 0  # bumped when the file is replaced: connections of older epochs are closed on return
        self._ino: int | None = None
        self._closed = False
        self._before_close: Callable[[sqlite3.Connection], None] | None = None
        if counts_partition:
            with _lock:
                _partitions += 1

    @contextlib.contextmanager
    def connection(self, fallback: Callable[[], contextlib.AbstractContextManager[sqlite3.Connection | None]]
                   | None = None, fallback_wait_s: float = 0.01) -> Iterator[sqlite3.Connection]:
        """A read connection for the duration of the ``with`` block (one snapshot).

        ``fallback`` (the writer, in the writing process) yields a connection
        or None when busy; it is tried first, for ``fallback_wait_s``, before
        a reader is opened.
        """
        if fallback is not None and not self._idle:
            deadline = time.monotonic() + fallback_wait_s
            for _ in range(1000):  # bounded: the deadline ends it
                with fallback() as c:
                    if c is not None:
                        yield c
                        return
                if time.monotonic() >= deadline:
                    break
                time.sleep(0.0005)
        c, epoch = self._take()
        try:
            yield c
        finally:
            self.give(c, epoch)

    def take_idle(self) -> tuple[sqlite3.Connection, int] | None:
        """(an idle connection, its epoch) at once, or None: none idle (or closed), so ``connection()`` must
        wait for one or open one. Hand it back with ``give``.

        Why beside ``connection()``: a point lookup is one statement, and the
        context managers around it cost more than SQLite's own work (issue 14).
        """
        global _idle_total
        with self._lock:
            if self._closed or not self._idle:
                return None
            c = self._idle.pop()
            epoch = self._epoch
            with _lock:
                _idle_total -= 1
                if not self._idle:
                    _lru.pop(id(self), None)
        return c, epoch

    def borrow(self) -> tuple[sqlite3.Connection, int] | None:
        """(an idle connection, its epoch) for one statement, at once, or None; hand it back with ``give_back``.

        Why beside ``take_idle``: a point lookup is one statement of a few
        microseconds, and ``take_idle``/``give`` keep the process-wide idle
        count and LRU order exact at the cost of four locks (issue 14). A
        connection out on a borrow still counts as idle (it is back within
        the statement), so the counts stay right without touching them.
        """
        with self._lock:
            if self._closed or not self._idle:
                return None
            return self._idle.pop(), self._epoch

    def give_back(self, c: sqlite3.Connection, epoch: int) -> None:
        """A borrowed connection back: idle again, or closed if the file was replaced or the pool closed meanwhile."""
        global _idle_total
        with self._lock:
            keep = not self._closed and epoch == self._epoch
            if keep:
                self._idle.append(c)
        if not keep:
            with _lock:
                _idle_total -= 1  # it was still counted as idle
            self._close_one(c)
            return
        if self._waiting:
            with self._freed:
                self._freed.notify()
        try:
            _lru.move_to_end(id(self))  # one C call: atomic under the GIL, as the lock-held updates are
        except KeyError:  # evicted (its other idle connections closed) while this one was out: listed again
            with _lock:
                if self._idle and not self._closed:
                    _lru[id(self)] = self

    def _take(self) -> tuple[sqlite3.Connection, int]:
        global _open_total
        for _ in range(100_000):  # bounded: waits at most ~30 s for a busy reader
            got = self.take_idle()
            if got is not None:
                return got
            with self._lock:
                if self._closed:
                    raise RuntimeError("closed")
                epoch = self._epoch
                if self._idle:
                    continue  # given back since take_idle looked
                if self._open < self.max_readers:
                    self._open += 1
                    break
            with self._freed:
                self._waiting += 1
                try:
                    self._freed.wait(0.0003)
                finally:
                    self._waiting -= 1
        else:
            raise TimeoutError(f"no read connection to {self.path} came free")
        try:
            ino = os.stat(self.path).st_ino  # FileNotFoundError when the file is gone
            c = sqlite3.connect(self._uri, uri=True, isolation_level=None, check_same_thread=False, timeout=30.0)
            c.execute("PRAGMA query_only=1")
            if self._configure is not None:
                self._configure(c)
        except BaseException:
            with self._lock:
                self._open -= 1
            raise
        with self._lock:
            if self._ino is None:
                self._ino = ino
        with _lock:
            _open_total += 1
        return c, epoch

    def give(self, c: sqlite3.Connection, epoch: int) -> None:
        """A connection back (from ``take_idle``): kept idle, or closed when the file was replaced or enough idle."""
        global _idle_total
        keep = False
        with self._lock:
            if not self._closed and epoch == self._epoch and len(self._idle) < IDLE_PER_PARTITION:
                self._idle.append(c)
                keep = True
        if not keep:
            self._close_one(c)
            return
        if self._waiting:  # a waiter also wakes on its own within 0.3 ms: the notify only saves that
            with self._freed:
                self._freed.notify()
        with _lock:
            _idle_total += 1
            _lru[id(self)] = self
            _lru.move_to_end(id(self))
            over = _idle_total > budget()
        if over:
            _evict()

    def _close_one(self, c: sqlite3.Connection) -> None:
        global _open_total
        with self._lock:
            self._open -= 1
        with self._freed:
            self._freed.notify()
        try:
            if self._before_close is not None:
                self._before_close(c)
            c.close()
        except sqlite3.Error:  # pragma: no cover - closing is best effort
            pass
        with _lock:
            _open_total -= 1

    def _drop_idle(self, n: int | None = None) -> int:
        """Close up to ``n`` (all) idle connections; how many were closed."""
        global _idle_total
        with self._lock:
            k = len(self._idle) if n is None else min(n, len(self._idle))
            victims, self._idle = self._idle[:k], self._idle[k:]
        with _lock:
            _idle_total -= len(victims)
            if not self._idle:
                _lru.pop(id(self), None)
        for c in victims:
            self._close_one(c)
        return len(victims)

    def check_replaced(self) -> None:
        """The file was replaced (new inode) or deleted: idle connections go; in-use ones close when returned."""
        try:
            ino = os.stat(self.path).st_ino
        except FileNotFoundError:
            raise FileNotFoundError(f"file {self.path} is gone") from None
        with self._lock:
            if self._ino is None or ino == self._ino:
                self._ino = ino
                return
            self._ino = ino
            self._epoch += 1
        self._drop_idle()

    def close(self, before_close: Callable[[sqlite3.Connection], None] | None = None) -> None:
        global _partitions
        with self._lock:
            if self._closed:
                return
            self._closed = True
            self._epoch += 1
            self._before_close = before_close
        self._drop_idle()
        if self._counts:
            with _lock:
                _partitions -= 1


def _evict() -> None:
    """Close least recently used idle connections while the process holds more than the budget."""
    for _ in range(1000):  # bounded: each round closes one connection or stops
        with _lock:
            if _idle_total <= budget() or not _lru:
                return
            _, pool = next(iter(_lru.items()))
        if pool._drop_idle(1) == 0:
            with _lock:
                _lru.pop(id(pool), None)
