"""One store partition in one SQLite file: snapshot reads, atomic idempotent batch writes, query dispatch.

Why SQLite in WAL mode: one writer and many reader processes on the same
file, each read a consistent snapshot, and data plus Position committed in
one transaction, so a reader can never see rows and a Position out of step
and a kill -9 leaves the old or the new batch, never a mix.

Subclasses (one per store kind) declare their table and a handler table
``HANDLERS = {QueryType: Handler(prepare, fetch, build)}``; ``query()`` runs
the IQv2 ``handleBasicQueries`` order: exact-type lookup (none ->
UNKNOWN_QUERY_TYPE), then the bound check against the position read in the
same snapshot as the data, then the result, with the position always attached.
"""

from __future__ import annotations

import contextlib
import logging
import os
import sqlite3
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any, ClassVar, NamedTuple

from ..catalog.schema import StoreSpec
from ..iqv2.position import Position, PositionBound
from ..iqv2.result import FailureReason, QueryResult
from . import asof, history
from .arrow_reads import AdbcReaders, ArrowQuery, ArrowRows, raw_columns
from .codec import ValueCodec, affinity
from .connections import ReadPool
from .files import CORRUPTION_TEXTS, QUICK_CHECK_MAX_BYTES, integrity_problem, no_checkpoint_on_close
from .files import rollback as _rollback
from .files import writable as _writable
from .history import Retention
from .sqlite_scans import SqliteScans, mark_writing, unmark_writing, writing_here
from .staging import ADBC_MIN_ROWS, Stager
from .writes import PartitionWrites

__all__ = ["PartitionStore", "Handler", "StoreClosedError", "is_permitted", "integrity_problem", "CORRUPTION_TEXTS", "upsert_set",
           "QUICK_CHECK_MAX_BYTES"]

log = logging.getLogger(__name__)

FORMAT_VERSION = 1
EXISTS_CHECK_S = 0.1  # how stale "the file still exists" may be: a stat per query would cost ~2-4 us


def upsert_set(columns: Sequence[str]) -> str:
    """``a = excluded.a, b = excluded.b``: an UPSERT's update of every non-key column (the later change wins)."""
    return ", ".join(f"{c} = excluded.{c}" for c in columns)


class StoreClosedError(RuntimeError):
    """The partition store was closed (app shutting down or partitions moved)."""


class Handler(NamedTuple):
    """How one query type runs on one store kind.

    ``prepare(store, query)`` validates and coerces (raising for a malformed
    request) or returns a failed QueryResult for an unsupported variant;
    ``fetch(store, prepared)`` reads ``(position, raw)`` in one snapshot;
    ``build(store, prepared, raw)`` turns raw rows into the result value
    (only once the bound check passed).
    """

    prepare: Callable[[Any, Any], Any]
    fetch: Callable[[Any, Any], tuple[Position, Any]]
    build: Callable[[Any, Any, Any], Any]


def is_permitted(position: Position, bound: PositionBound, topics: frozenset[str] | None) -> bool:
    """docs/DESIGN.md §3: up to the bound when every bounded partition of every topic the store reads is reached.

    ``topics`` None means the store declares no source topics; then every
    topic named in the bound counts (the strict reading).
    """
    if bound.is_unbounded():
        return True
    bpos = bound.position
    for topic in bpos.topics():
        if topics is not None and topic not in topics:
            continue
        seen = position.partition_positions(topic)
        for p, off in bpos.partition_positions(topic).items():
            s = seen.get(p)
            if s is None or s < off:
                return False
    return True


class _ArrowTarget:
    """The store as a handler's ``fetch`` sees it, but whose snapshots are Arrow streams (ArrowQuery)."""

    __slots__ = ("_store", "_columns", "_batch_rows")

    def __init__(self, store: PartitionStore, columns: tuple[str, ...], batch_rows: int) -> None:
        self._store, self._columns, self._batch_rows = store, columns, batch_rows

    def snapshot(self, sql: str, params: Sequence[Any]) -> tuple[Position, ArrowRows]:
        return self._store.arrow_snapshot(sql, params, self._columns, self._batch_rows)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._store, name)


class PartitionStore(PartitionWrites):
    """Base of every store kind; one instance per (store, partition) file."""

    HANDLERS: ClassVar[dict[type, Handler]] = {}
    TABLE: ClassVar[str] = ""

    def __init__(
        self,
        spec: StoreSpec,
        partition: int,
        path: str | os.PathLike[str],
        *,
        read_only: bool = False,
        synchronous: str = "FULL",
        adbc_min_rows: int = ADBC_MIN_ROWS,
        history: Retention | None = None,
    ) -> None:
        self.spec = spec
        self.name = spec.name
        self.partition = partition
        self.path = Path(path)
        self._path_str = str(self.path)
        self.read_only = read_only
        self.codec = ValueCodec(spec)
        self._topics = frozenset(spec.source_topics) or None
        self.retention = Retention.of(spec.options, history)  # what a writer keeps of the past (history.py)
        self._asof: ReadPool | None = None  # the as-of reads' own connections (asof.py), from the first one on
        self._asof_lock = threading.Lock()
        self._undo_b: int | None = None  # while a batch is merged: its history tag (``capture_where``)
        self._synchronous = synchronous
        # The writing process reads through the idle writer first and keeps at most one reader (see connections.py)
        self._pool = ReadPool(self.path, max_readers=2 if read_only else 1)
        self._checked_at = -1e9
        self._write_lock = threading.Lock()
        self._closed = False
        self._pos_cache: tuple[str | None, Position] = (None, Position.empty())
        self._last_permit: tuple[Any, Any, bool] = (None, None, False)  # (position, bound, permitted): _permitted
        self._wconn: sqlite3.Connection | None = None
        self._sql_cache: dict[Any, str] = {}
        # ", v0, v1" — empty for a store with no value columns, so SQL built from it stays valid
        self.vcols_tail = "".join(f", v{i}" for i in range(self.codec.n))
        self._stager = Stager(self.path, self.stage_columns(), adbc_min_rows)
        if not read_only:
            self._stager.clear_leftover()
            self._wconn = self._open_writer()
        elif not self.path.exists():
            raise FileNotFoundError(f"store {self.name!r} partition {partition}: no file {self.path}")
        self._arrow = AdbcReaders(self.path, self._wconn)  # opens nothing until the first Arrow scan
        self._sqlite_scans = SqliteScans(self.path)  # Arrow scans while this process writes the file (sqlite_scans.py)
        if self._wconn is not None:
            mark_writing(self.path)

    # -- connections -----------------------------------------------------------
    def _open_writer(self) -> sqlite3.Connection:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        c = sqlite3.connect(self.path, isolation_level=None, check_same_thread=False, timeout=30.0)
        c.execute("PRAGMA journal_mode=WAL")
        c.execute(f"PRAGMA synchronous={self._synchronous}")
        c.execute("BEGIN IMMEDIATE")
        try:
            c.execute(
                "CREATE TABLE IF NOT EXISTS meta (id INTEGER PRIMARY KEY CHECK (id = 0), version INTEGER NOT NULL,"
                " last_batch_id INTEGER, position TEXT NOT NULL, observed_ts INTEGER, format INTEGER NOT NULL,"
                " kind TEXT NOT NULL)"
            )
            c.execute(
                "INSERT OR IGNORE INTO meta VALUES (0, 0, NULL, '{}', NULL, ?, ?)", (FORMAT_VERSION, self.spec.kind.value)
            )
            for ddl in self.ddl():
                c.execute(ddl)
            history.migrate(c, self.TABLE, self.retention)
            kind = c.execute("SELECT kind FROM meta").fetchone()[0]
            if kind != self.spec.kind.value:
                raise ValueError(
                    f"store {self.name!r} partition {self.partition}: file {self.path} holds a {kind} store,"
                    f" not {self.spec.kind.value}"
                )
            c.execute("COMMIT")
        except BaseException:
            c.execute("ROLLBACK")
            c.close()
            raise
        return c

    def _check_file(self, now: float) -> None:
        """An open connection would go on reading a deleted or replaced file: notice both.

        Gone -> FileNotFoundError (STORE_EXCEPTION); replaced (new inode) ->
        the pooled connections reconnect to the new file. Done at most every
        EXISTS_CHECK_S per partition, since a stat per query costs 2-4 us.
        """
        self._checked_at = now
        self._pool.check_replaced()
        if self._asof is not None:
            self._asof.check_replaced()

    @contextlib.contextmanager
    def _reader(self, *, as_of: bool = False) -> Iterator[sqlite3.Connection]:
        """A read connection borrowed from the partition's pool (shared by every thread) for one snapshot; with
        ``as_of``, from its as-of pool (asof.py), which never lends the writer."""
        if self._closed:
            raise StoreClosedError(f"store {self.name!r} partition {self.partition} is closed")
        try:
            if as_of:
                with self._asof_lock:
                    if self._closed:
                        raise RuntimeError("closed")
                    if self._asof is None:
                        self._asof = asof.make_pool(self)
                    connection = self._asof.connection()
            else:
                connection = self._pool.connection(self._idle_writer if self._wconn is not None else None)
            with connection as c:
                yield c
        except FileNotFoundError as exc:
            if self.path.exists():
                raise
            raise FileNotFoundError(
                f"store {self.name!r} partition {self.partition}: file {self.path} is gone") from exc
        except RuntimeError as exc:
            if str(exc) == "closed":
                raise StoreClosedError(f"store {self.name!r} partition {self.partition} is closed") from None
            raise

    @contextlib.contextmanager
    def _idle_writer(self) -> Iterator[sqlite3.Connection | None]:
        """The writer connection for a read if no batch is being written right now, else None."""
        c = self._writer_if_idle()
        try:
            yield c
        finally:
            if c is not None:
                self._write_lock.release()

    def _writer_if_idle(self) -> sqlite3.Connection | None:
        """The writer connection with the write lock held (release it when done) if no batch is being written
        right now; else None, the lock not held."""
        if self._wconn is None or not self._write_lock.acquire(blocking=False):
            return None
        c = self._wconn
        if c is None or c.in_transaction:
            self._write_lock.release()
            return None
        return c

    def ddl(self) -> Sequence[str]:
        """CREATE statements of the kind's table(s)."""
        raise NotImplementedError

    def key_decl(self) -> str:
        return f"k {affinity(self.spec.key.type)} NOT NULL"

    def value_decls(self) -> str:
        return "".join(f", v{i} {affinity(c.type)}" for i, c in enumerate(self.spec.stored_values()))

    def close(self) -> None:
        """Close every connection; waits for an in-flight batch so it commits or rolls back whole.

        On files that cannot be written (read-only or immutable), SQLite's
        checkpoint when the last connection closes faults on the mapped
        ``-shm`` file (SIGBUS, issue 13 item 6): then the connections close
        without that checkpoint, and the WAL is applied at the next open.
        """
        frozen = not _writable(self.path)
        if frozen:
            log.warning("store %s partition %d: %s cannot be written; closing without a checkpoint",
                        self.name, self.partition, self.path)
        finish_arrow = self._arrow.close()  # waits (bounded) for Arrow scans in flight
        self._sqlite_scans.close()
        before_close = (lambda c: no_checkpoint_on_close(c, self.path)) if frozen else None
        with self._write_lock:
            with self._asof_lock:
                self._closed = True
            self._pool.close(before_close=before_close)
            if self._asof is not None:
                self._asof.close(before_close=before_close)
            if self._wconn is not None:  # last: the last connection to close checkpoints and removes the WAL
                if frozen:
                    no_checkpoint_on_close(self._wconn, self.path)
                self._wconn.close()
                self._wconn = None
                unmark_writing(self.path)
        finish_arrow()  # after sqlite3's connections: the read-only ADBC ones never checkpoint (arrow_reads.py)

    @property
    def closed(self) -> bool:
        return self._closed

    @property
    def arrow_scans_in_flight(self) -> int:
        """Arrow scans still reading this partition: closing its ``sqlite3`` side under them is unsafe
        (two SQLite copies in one process, see arrow_reads.py), so a retired store waits for them."""
        return self._arrow.busy + self._sqlite_scans.busy

    # -- snapshots ---------------------------------------------------------------
    def position_of(self, text: str) -> Position:
        """Parse the stored position JSON once per change, not once per read."""
        cached_text, cached = self._pos_cache  # one tuple: threads never pair one text with another position
        if text != cached_text:
            cached = Position.from_json(text)
            self._pos_cache = (text, cached)
        return cached

    def snapshot(self, sql: str, params: Sequence[Any]) -> tuple[Position, list[Any]]:
        """Rows and the position from ONE read transaction, so they always agree."""
        with self._reader() as c:
            c.execute("BEGIN")
            try:
                rows = c.execute(sql, params).fetchall()
                text = c.execute("SELECT position FROM meta").fetchone()[0]
            except BaseException:
                _rollback(c)
                raise
            c.execute("COMMIT")
        return self.position_of(text), rows

    def snapshot_many(self, statements: Sequence[tuple[str, Sequence[Any]]]) -> tuple[Position, list[Any]]:
        """The rows of several statements and the position, all from ONE read transaction."""
        with self._reader() as c:
            c.execute("BEGIN")
            try:
                rows: list[Any] = []
                for sql, params in statements:
                    rows.extend(c.execute(sql, params).fetchall())
                text = c.execute("SELECT position FROM meta").fetchone()[0]
            except BaseException:
                _rollback(c)
                raise
            c.execute("COMMIT")
        return self.position_of(text), rows

    def point(self, sql: str, params: Sequence[Any]) -> tuple[Position, Any]:
        """One-statement snapshot: ``sql`` selects the position as its first column (meta LEFT JOIN data)."""
        row = None if self._closed else self._point_at_once(sql, params)
        if row is None:  # no connection free at once: wait for one or open one, as every snapshot does
            with self._reader() as c:
                row = c.execute(sql, params).fetchone()
        return self.position_of(row[0]), row

    def _point_at_once(self, sql: str, params: Sequence[Any]) -> Any:
        """``point``'s row on an idle read connection, else on the idle writer (the order ``_reader`` takes
        them in), without ``_reader``'s context managers, which cost more than the lookup (issue 14); None
        when neither is free."""
        got = self._pool.borrow()
        if got is not None:
            try:
                return got[0].execute(sql, params).fetchone()
            finally:
                self._pool.give_back(*got)
        c = self._writer_if_idle()
        if c is None:
            return None
        try:
            return c.execute(sql, params).fetchone()
        finally:
            self._write_lock.release()

    def current_position(self) -> Position:
        with self._reader() as c:
            return self.position_of(c.execute("SELECT position FROM meta").fetchone()[0])

    def kept_positions(self) -> list[Position]:
        """The current Position, then each earlier one this partition can still be read as of, newest first."""
        with self._reader() as c:
            c.execute("BEGIN")
            try:
                out = asof.kept_positions(c, self.position_of)
            except BaseException:
                _rollback(c)
                raise
            c.execute("COMMIT")
        return out

    @property
    def source_topics(self) -> frozenset[str] | None:
        """The topics whose offsets make up this store's Position (None: it declares none, so every topic counts)."""
        return self._topics

    def meta(self) -> dict[str, Any]:
        with self._reader() as c:
            row = c.execute("SELECT version, last_batch_id, position, observed_ts FROM meta").fetchone()
        return {"version": row[0], "last_batch_id": row[1], "position": self.position_of(row[2]), "observed_ts": row[3]}

    def last_batch_id(self) -> int | None:
        return self.meta()["last_batch_id"]

    def _safe_position(self) -> Position | None:
        try:
            return self.current_position()
        except Exception:  # noqa: BLE001 - a failing store still answers, without a position
            return None

    # -- IQv2 ------------------------------------------------------------------------
    def query(self, query: Any, bound: PositionBound, *, execution_info: bool = False,
              snapshot: Position | None = None) -> QueryResult:
        """Run one query on this partition; failures come back as data, malformed requests raise.

        ``snapshot``: the state as of that Position (asof.py): NOT_UP_TO_BOUND while the partition is behind it,
        POSITION_NOT_KEPT when it is past it and kept no state at exactly it; the bound applies to that state.
        """
        t0 = time.perf_counter_ns() if execution_info else 0
        target: Any = self
        arrow = type(query) is ArrowQuery
        if arrow:  # the inner query's own handler, reading through the Arrow path (arrow_reads.py)
            inner = query.query
            handler = self.HANDLERS.get(type(inner)) if ArrowQuery.supports(inner) else None
            target = _ArrowTarget(self, raw_columns(self.spec, inner), query.batch_rows) if handler else None
        else:
            inner = query
            handler = self.HANDLERS.get(type(query))
        if handler is None:
            res = QueryResult.for_unknown_query_type(query, self).with_position(self._safe_position())
        else:
            prepared = handler.prepare(self, inner)
            if isinstance(prepared, QueryResult):
                res = prepared.with_position(self._safe_position())
            else:
                try:
                    now = time.monotonic()
                    if now - self._checked_at > EXISTS_CHECK_S:
                        self._check_file(now)
                    if snapshot is None:
                        position, raw = handler.fetch(target, prepared)
                    else:
                        position, raw = asof.fetch_as_of(self, lambda base: handler.fetch(
                            _ArrowTarget(base, target._columns, target._batch_rows) if arrow else base, prepared),
                            snapshot)
                except asof.AsOfMiss as miss:
                    res = miss.result
                except Exception as exc:  # noqa: BLE001 - store failures are data (STORE_EXCEPTION)
                    res = self._store_exception(exc, self._safe_position())
                else:
                    if arrow and not isinstance(raw, ArrowRows):
                        raw = ArrowRows.empty(self.spec)  # an empty range: nothing was read
                    if bound.is_unbounded() or self._permitted(position, bound):
                        try:
                            res = QueryResult.for_result(raw if arrow else handler.build(self, prepared, raw),
                                                         position)
                        except Exception as exc:  # noqa: BLE001
                            res = self._store_exception(exc, position)
                    else:
                        res = QueryResult.not_up_to_bound(position, bound, self.partition)
                    if arrow and res.is_failure:
                        raw.close()  # ends the snapshot it holds
        if execution_info:
            res = res.with_execution_info(
                f"Handled in {type(self).__name__} (store {self.name}, partition {self.partition})"
                f" in {time.perf_counter_ns() - t0}ns"
            )
        return res

    def _permitted(self, position: Position, bound: PositionBound) -> bool:
        """``is_permitted`` for this store's topics, remembered for the last (position, bound) pair by identity:
        a store's position object lasts until its next batch, and a statement's bound is one object for all its
        lookups (issue 14 item 6: the check was a tenth of a KeyQuery)."""
        last = self._last_permit
        if last[0] is position and last[1] is bound:
            return last[2]
        ok = is_permitted(position, bound, self._topics)
        self._last_permit = (position, bound, ok)
        return ok

    def arrow_snapshot(self, sql: str, params: Sequence[Any], columns: tuple[str, ...],
                       batch_rows: int) -> tuple[Position, ArrowRows]:
        """The Position and the rows of ``sql`` as Arrow batches, from ONE read transaction held by the stream."""
        if self._closed:
            raise StoreClosedError(f"store {self.name!r} partition {self.partition} is closed")
        try:
            scans = self._sqlite_scans if self._wconn is not None or writing_here(self.path) else self._arrow
            return scans.scan(sql, params, self.spec, columns, batch_rows, self.position_of)
        except RuntimeError as exc:
            if str(exc) == "closed":
                raise StoreClosedError(f"store {self.name!r} partition {self.partition} is closed") from None
            raise

    def _store_exception(self, exc: BaseException, position: Position | None) -> QueryResult:
        if not isinstance(exc, FileNotFoundError) and not self.path.exists():
            msg = f"FileNotFoundError: file {self.path} is gone ({type(exc).__name__}: {exc})"
        else:
            msg = f"{type(exc).__name__}: {exc}"
        return QueryResult.for_failure(
            FailureReason.STORE_EXCEPTION,
            f"Store {self.name} partition {self.partition} failed to execute the query: {msg}",
            position,
        )

    def unsupported(self, query: Any, why: str) -> QueryResult:
        """UNKNOWN_QUERY_TYPE for a query variant the kind refuses, with Kafka's explanation."""
        return QueryResult.for_failure(
            FailureReason.UNKNOWN_QUERY_TYPE,
            f"This store ({type(self).__name__}) doesn't know how to execute the given query ({query!r})"
            f" because {why}. Contact the store maintainer if you need support for a new query type.",
        )

    def cached_sql(self, key: Any, make: Callable[[], str]) -> str:
        sql = self._sql_cache.get(key)
        if sql is None:
            sql = self._sql_cache[key] = make()
        return sql

    def _writer_conn(self) -> sqlite3.Connection:
        c = self._wconn
        if c is None:
            raise StoreClosedError(f"store {self.name!r} partition {self.partition} is closed for writing")
        return c

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.name!r}, partition={self.partition}, path={str(self.path)!r})"
