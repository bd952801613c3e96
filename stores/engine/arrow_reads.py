"""Range scans of a store partition as Arrow record batches, read in C: no Python object per row.

Why ADBC: Python's ``sqlite3`` builds a tuple and a Python object per value
(~0.5 M rows/s here); the ADBC SQLite driver fills Arrow buffers in C
(~3 M rows/s on the same files, measured by ``benchmarks/bench_scans.py``)
and the batches go on to DuckDB and the response without ever becoming Python
values, so memory is bounded by a batch, not by the store.

``ArrowQuery(inner)`` is an IQv2 query of our own (Kafka lets stores answer
custom query types): it runs ``inner`` (a RangeQuery, TimestampedRangeQuery,
a window-start WindowRangeQuery or a MultiVersionedRangeQuery) with the
kind's own handler and SQL, but its result is an ``ArrowRows``: the rows as a
stream of record batches that holds ONE read transaction (data and Position
from the same snapshot, like every other read) until it is read to the end or
closed. Failures, bound checks and Positions are the ordinary IQv2 ones.

Two copies of SQLite in one process. The ADBC driver links its own SQLite,
and POSIX locks belong to the process: when either copy closes its last
descriptor on a file, every lock the process holds on it is dropped,
including the other copy's (https://sqlite.org/howtocorrupt.html §2.2). So:

- ADBC connections are kept for the life of the partition store and opened
  only while a ``sqlite3`` connection holds the file (the writer, or a pinned
  read-only "anchor"): neither copy then ever closes its last descriptor
  while the other still uses the file;
- they are opened ``mode=ro``: a read-only connection never checkpoints or
  deletes the WAL when it closes; and ``readonly_shm=1``: the first
  connection of a SQLite copy truncates the ``-shm`` file to reinitialize it
  when no other *process* holds it, which the other copy in this process,
  with the file mapped, would meet as SIGBUS (seen once in CI, 2026-11-26;
  ``strace`` shows ``ftruncate(shm, 3)`` without the flag, none with it);
  with it the copy reads the WAL index from a read-only mapping;
- at close, in-flight streams are waited for (bounded), the ``sqlite3`` side
  closes first and the idle ADBC connections last (a dropped lock then
  protects nothing that is still reading).

SQLite has no column types, and the driver infers each column's Arrow type
from the first batch: a column that is NULL in every row of it would become
int64 and fail on a later string. So every scan starts with one "witness"
row of the right SQLite types, sliced off the first batch.
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa

from ..catalog.schema import SqlType, StoreSpec
from ..iqv2.position import Position
from ..iqv2.query import MultiVersionedRangeQuery, RangeQuery, TimestampedRangeQuery, WindowRangeQuery

__all__ = ["ArrowQuery", "ArrowRows", "AdbcReaders", "ARROW_TYPES", "raw_columns", "store_schema", "BATCH_ROWS"]

BATCH_ROWS = 65_536
# A read transaction's start on a connection whose -shm is read-only (``readonly_shm=1``, above) meeting a
# checkpoint in another process: SQLite reads the WAL-index header, the checkpoint moves the read marks past it,
# and a reader that may not write the -shm cannot set a mark of its own, so where none fits it says
# SQLITE_READONLY_CANTINIT with this text (a reader with a writable -shm sets one and goes on). The next try reads
# the new header. About 1 start in 500,000 against a writer checkpointing after every commit (a failed query in
# CI once, 2026-12-06). Tries ~0.5 s in all, then the error as it is: a file that really cannot be read so.
READ_MARK_RACE = "attempt to write a readonly database"
READ_MARK_TRIES = 12
IDLE_CONNECTIONS = 2  # per partition kept idle; more are opened for concurrent scans and closed after
MAX_CONNECTIONS = 64  # per partition at once (one statement may scan a store several times): beyond, scans wait
_WAIT_S = 30.0
# SQLite's page cache per scan connection, in KiB (its default is 2 MiB). A scan reads each leaf page once, so
# the cache only needs the interior pages (a 1M-key partition has a few dozen); the OS page cache holds the rest
# outside the process. At the default, a worker's scan connections (partitions x threads) kept ~2 MiB each
# resident: +7 MB of a serving worker's peak over 1M keys (bench_memory, issue 14 item 2).
SCAN_CACHE_KIB = 256

ARROW_TYPES: dict[SqlType, pa.DataType] = {
    SqlType.BIGINT: pa.int64(),
    SqlType.INTEGER: pa.int32(),
    SqlType.DOUBLE: pa.float64(),
    SqlType.VARCHAR: pa.string(),
    SqlType.BOOLEAN: pa.bool_(),
    SqlType.TIMESTAMP: pa.timestamp("ms", tz="UTC"),
    SqlType.DATE: pa.date32(),
}
_WITNESS = {SqlType.DOUBLE: "0.0", SqlType.VARCHAR: "''"}  # every other type is stored as INTEGER

# The leading raw columns each supported inner query type reads (then the value columns v0, v1, ...).
_LEADS: dict[type, tuple[str, ...]] = {
    RangeQuery: ("key",),
    TimestampedRangeQuery: ("key", "timestamp"),
    WindowRangeQuery: ("key", "window_start", "window_end", "timestamp"),
    MultiVersionedRangeQuery: ("key", "valid_from", "valid_to"),
}
# Which raw column each time column of the SQL face comes from.
_SYSTEM_SOURCE = {"rowtime": "timestamp", "window_start": "window_start", "window_end": "window_end",
                  "valid_from": "valid_from", "valid_to": "valid_to"}


@dataclass(frozen=True, slots=True)
class ArrowQuery:
    """The rows ``query`` selects, as Arrow batches of ``batch_rows`` rows (a custom IQv2 query type)."""

    query: Any
    batch_rows: int = BATCH_ROWS

    @staticmethod
    def reads_spec(spec: StoreSpec) -> bool:
        """Is every column of ``spec`` stored as itself (no composite key, no nested or binary value)?"""
        return not spec.composite and all(isinstance(c.type, SqlType) and c.type in ARROW_TYPES
                                          for c in (spec.key, *spec.values))

    @staticmethod
    def supports(query: Any) -> bool:
        return type(query) in _LEADS and not (type(query) is WindowRangeQuery and query.key is not None)


def raw_columns(spec: StoreSpec, query: Any) -> tuple[str, ...]:
    """The columns a scan of ``query`` reads, in SQL order: the leading ones, then the value names."""
    return _LEADS[type(query)] + spec.value_names()


def store_schema(spec: StoreSpec) -> pa.Schema:
    return pa.schema([pa.field(c.name, ARROW_TYPES[c.type]) for c in spec.columns()])


def witness_sql(spec: StoreSpec, leads: tuple[str, ...], inner_sql: str) -> str:
    """``inner_sql`` preceded by one row of the right SQLite types (see the module doc)."""
    lits = [_WITNESS.get(spec.key.type, "0") if n == "key" else "0" for n in leads]
    lits += [_WITNESS.get(c.type, "0") for c in spec.values]
    return f"SELECT * FROM (SELECT {', '.join(lits)}) UNION ALL SELECT * FROM ({inner_sql})"


class ArrowRows:
    """One partition's rows as record batches in the store's column order, from one read transaction.

    ``batches()`` may be taken once; the transaction ends (and the connection
    goes back to its pool) when the batches are read to the end or ``close()``
    is called, whichever comes first. Converting to the store's types (
    INTEGER, BOOLEAN, TIMESTAMP, DATE) is a cast per batch, in C.

    One owner of the driver's stream at a time (issue 43). DuckDB reads a
    relation's batches on its own worker threads, and a statement that ends
    early (the row limit, a timeout, a client gone) closes its scans from the
    thread that handles the request, while a worker may be inside the
    driver's ``get_next``. Closing the ADBC statement under that read freed
    what it was reading: a segfault in ``libadbc_driver_sqlite.so`` that took
    the serving process down. So a ``close()`` that finds a read in progress
    only asks for the end; the reading thread ends the transaction as soon
    as its read returns, and no batch is read after a close was asked for.
    """

    def __init__(self, spec: StoreSpec, columns: tuple[str, ...], batches: Iterator[pa.RecordBatch] | None,
                 release: Callable[[], None] | None) -> None:
        self.spec = spec
        self._batches = batches
        self._release = release
        self._taken = False
        self._mutex = threading.Lock()
        self._reading = False  # a thread is inside the driver's next() right now
        self._close_asked = False
        index = {n: i for i, n in enumerate(columns)}
        picks, fields = [], []
        for c in spec.columns():  # the store's columns this scan reads (a RangeQuery has no rowtime)
            src = "key" if c is spec.key else _SYSTEM_SOURCE.get(c.name, c.name)
            if src in index or not columns:
                picks.append(index.get(src, -1))
                fields.append(pa.field(c.name, ARROW_TYPES[c.type]))
        self._picks = picks
        self.schema = pa.schema(fields)

    @classmethod
    def empty(cls, spec: StoreSpec) -> ArrowRows:
        return cls(spec, (), None, None)

    def batches(self) -> Iterator[pa.RecordBatch]:
        """The batches in ``schema`` (take once); the snapshot ends with the last one."""
        if self._taken:
            raise RuntimeError("the rows of this scan were already read")
        self._taken = True
        try:
            first = True
            while True:
                raw = self._next_raw()
                if raw is None:
                    return
                if first:
                    raw = raw.slice(1)  # the witness row
                    first = False
                if raw.num_rows:
                    yield self._shape(raw)
        finally:
            self.close()

    def _next_raw(self) -> pa.RecordBatch | None:
        """The driver's next batch, or None at the end or once a close was asked for (then released here)."""
        with self._mutex:
            batches = self._batches
            if batches is None or self._close_asked:
                return None
            self._reading = True
        try:
            raw = next(batches, None)
        finally:
            with self._mutex:
                self._reading = False
                closing = self._close_asked
            if closing:  # a close came while the driver was reading: this thread ends the transaction now
                self._end()
        return None if closing else raw

    def _shape(self, raw: pa.RecordBatch) -> pa.RecordBatch:
        arrays = []
        for i, field in zip(self._picks, self.schema):
            col = raw.column(i)
            if col.type != field.type:
                col = _cast(col, field.type)
            arrays.append(col)
        return pa.RecordBatch.from_arrays(arrays, schema=self.schema)

    def close(self) -> None:
        """End the snapshot now, or, while another thread is inside a read, as soon as that read returns."""
        with self._mutex:
            self._close_asked = True
            if self._reading:
                return
        self._end()

    def _end(self) -> None:
        with self._mutex:
            release, self._release = self._release, None
            batches, self._batches = self._batches, None
        if batches is not None:
            with contextlib.suppress(Exception):
                batches.close()  # type: ignore[attr-defined]
        if release is not None:
            release()

    def __del__(self) -> None:  # a stream dropped unread still ends its transaction
        with contextlib.suppress(Exception):
            self.close()


def _cast(col: pa.Array, to: pa.DataType) -> pa.Array:
    if pa.types.is_null(col.type):
        return pa.nulls(len(col), to)
    if pa.types.is_boolean(to):
        return col.cast(pa.int64()).cast(pa.bool_())
    if pa.types.is_date32(to):
        return col.cast(pa.int32()).cast(to)
    if pa.types.is_timestamp(to):
        return col.cast(pa.int64()).cast(to)
    return col.cast(to)


class _Conn:
    """One ADBC connection (the driver manager's low-level API: its DB-API module imports pandas, +50 MB)."""

    __slots__ = ("db", "conn", "ino")

    def __init__(self, uri: str, ino: int) -> None:
        import adbc_driver_manager as adm
        import adbc_driver_sqlite

        self.db = adm.AdbcDatabase(driver=adbc_driver_sqlite._driver_path(), uri=uri)
        try:
            self.conn = adm.AdbcConnection(self.db)  # autocommit: BEGIN / COMMIT are ours
        except BaseException:
            self.db.close()
            raise
        self.ino = ino
        try:
            self.run(f"PRAGMA cache_size = -{SCAN_CACHE_KIB}")
        except BaseException:
            self.close()
            raise

    def statement(self, sql: str, params: Sequence[Any] = (), options: dict[str, str] | None = None) -> Any:
        import adbc_driver_manager as adm

        stmt = adm.AdbcStatement(self.conn)
        try:
            if options:
                stmt.set_options(**options)
            stmt.set_sql_query(sql)
            if params:
                batch = pa.record_batch([pa.array([v]) for v in params], names=[f"p{i}" for i in range(len(params))])
                schema_capsule, array_capsule = batch.__arrow_c_array__()
                stmt.bind(array_capsule, schema_capsule)
        except BaseException:
            stmt.close()
            raise
        return stmt

    def run(self, sql: str) -> None:
        stmt = self.statement(sql)
        try:
            stmt.execute_update()
        finally:
            stmt.close()

    def reader(self, stmt: Any) -> pa.RecordBatchReader:
        handle, _ = stmt.execute_query()
        return pa.RecordBatchReader._import_from_c(handle.address)

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self.conn.close()
        with contextlib.suppress(Exception):
            self.db.close()


class AdbcReaders:
    """The ADBC read connections of one partition file, kept open for the store's life (see the module doc).

    ``anchor`` is the ``sqlite3`` connection that holds the file while ADBC
    uses it: the writer in the writing process; elsewhere one read-only
    connection pinned here the first time a scan runs.
    """

    def __init__(self, path: Path, writer: sqlite3.Connection | None) -> None:
        self.path = path
        # readonly_shm=1: the ADBC copy opens the -shm read-only, so its first connection never truncates it
        # (SQLite's first connection in a *process* truncates the -shm to 3 bytes, and F_GETLK cannot see
        # the sqlite3 copy's locks in this same process: its mapping of the -shm would then fault, SIGBUS)
        self._uri = f"file:{path.resolve()}?mode=ro&readonly_shm=1"
        self._has_writer = writer is not None
        self._anchor: sqlite3.Connection | None = None
        self._idle: list[_Conn] = []
        self._open = 0
        self._busy = 0
        self._closed = False
        self._cond = threading.Condition()

    def _ensure_anchor(self, ino: int) -> None:
        """Caller holds the condition's lock."""
        if self._has_writer or self._anchor is not None:
            return
        c = sqlite3.connect(f"{self.path.resolve().as_uri()}?mode=ro", uri=True, isolation_level=None,
                            check_same_thread=False, timeout=30.0)
        c.execute("SELECT 1 FROM meta").fetchone()  # opens the WAL and its index: the locks the process keeps
        self._anchor = c

    @contextlib.contextmanager
    def connection(self) -> Iterator[_Conn]:
        c = self._take()
        ok = False
        try:
            yield c
            ok = True
        finally:
            if not ok:
                self._give(c)

    def _take(self) -> _Conn:
        deadline = time.monotonic() + _WAIT_S
        ino = os.stat(self.path).st_ino  # FileNotFoundError when the file is gone
        with self._cond:
            for _ in range(100_000):  # bounded; the deadline ends it
                if self._closed:
                    raise RuntimeError("closed")
                while self._idle:
                    c = self._idle.pop()
                    if c.ino == ino:
                        self._busy += 1
                        return c
                    self._discard(c)  # the file was replaced: that connection reads the old one
                if self._open < MAX_CONNECTIONS:
                    self._ensure_anchor(ino)
                    conn = _Conn(self._uri, ino)
                    self._open += 1
                    self._busy += 1
                    return conn
                left = deadline - time.monotonic()
                if left <= 0:
                    break
                self._cond.wait(min(left, 0.5))
        raise TimeoutError(f"no Arrow read connection to {self.path} came free in {_WAIT_S:.0f} s")

    def _discard(self, c: _Conn) -> None:
        """Caller holds the lock. Only for connections to a file that was replaced (its locks are moot)."""
        self._open -= 1
        c.close()

    def _give(self, c: _Conn) -> None:
        with self._cond:
            self._busy -= 1
            if self._closed or len(self._idle) >= IDLE_CONNECTIONS:
                # Safe while another ADBC connection stays open: that copy of SQLite then defers closing the
                # descriptor (its other connections hold locks on the file), so no lock is dropped.
                self._discard(c)
            else:
                self._idle.append(c)
            self._cond.notify_all()

    def scan(self, sql: str, params: Sequence[Any], spec: StoreSpec, columns: tuple[str, ...], batch_rows: int,
             position_of: Callable[[str], Position]) -> tuple[Position, ArrowRows]:
        """The Position and a stream of the rows of ``sql``, both from ONE read transaction.

        A start that meets the read-mark race (``READ_MARK_RACE``) is tried again: nothing was read yet."""
        tries = 0
        while True:
            try:
                return self._scan(sql, params, spec, columns, batch_rows, position_of)
            except Exception as exc:
                tries += 1
                if tries >= READ_MARK_TRIES or READ_MARK_RACE not in str(exc):
                    raise
            time.sleep(min(0.001 * 2 ** (tries - 1), 0.1))

    def _scan(self, sql: str, params: Sequence[Any], spec: StoreSpec, columns: tuple[str, ...], batch_rows: int,
              position_of: Callable[[str], Position]) -> tuple[Position, ArrowRows]:
        leads = columns[:len(columns) - len(spec.values)]
        c = self._take()
        began = False
        stmt = None
        try:
            c.run("BEGIN")
            began = True
            meta = c.statement("SELECT position FROM meta")
            try:
                text = c.reader(meta).read_all().column(0)[0].as_py()
            finally:
                meta.close()
            stmt = c.statement(witness_sql(spec, leads, sql), params,
                               {"adbc.sqlite.query.batch_rows": str(int(batch_rows))})
            reader = c.reader(stmt)
        except BaseException:
            if stmt is not None:
                stmt.close()
            if began:
                with contextlib.suppress(Exception):
                    c.run("ROLLBACK")
            self._give(c)
            raise

        done = threading.Lock()
        finished = [False]

        def release() -> None:
            with done:
                if finished[0]:
                    return
                finished[0] = True
            try:
                with contextlib.suppress(Exception):
                    reader.close()
                stmt.close()
                c.run("COMMIT")
            except Exception:  # noqa: BLE001 - a connection that cannot end its transaction is not reused
                with self._cond:
                    self._busy -= 1
                    self._discard(c)
                    self._cond.notify_all()
                return
            self._give(c)

        return position_of(text), ArrowRows(spec, columns, iter(reader), release)

    @property
    def busy(self) -> int:
        """Arrow scans reading now (each holds one read transaction until read to the end or closed)."""
        with self._cond:
            return self._busy

    def close(self, wait_s: float = 5.0) -> Callable[[], None]:
        """Stop handing out connections and wait (bounded) for streams in flight; returns the finishing step.

        The caller closes its ``sqlite3`` connections and then calls the
        returned function, which closes the anchor and the ADBC connections.
        """
        deadline = time.monotonic() + wait_s
        with self._cond:
            self._closed = True
            while self._busy and time.monotonic() < deadline:
                self._cond.wait(0.05)
            idle, self._idle = self._idle, []
            anchor, self._anchor = self._anchor, None

        def finish() -> None:
            if anchor is not None:
                with contextlib.suppress(Exception):
                    anchor.close()
            with self._cond:
                for c in idle:
                    self._discard(c)

        return finish
