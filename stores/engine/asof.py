"""Reads of a store partition as of an earlier Position it held: ``StateQueryRequest.snapshot`` (issue 47).

Why: a statement over several stores reads them all at ONE input Position. A store fed by a streaming query
that committed its batch already is read as of the lagging store's Position from the history the partition
keeps (history.py), instead of waiting for the other store to catch up.

What a snapshot means: the state the partition had when its Position equalled the snapshot's offsets on every
component of a topic the store reads (other topics are ignored; a store that declares none reads every topic, as
``is_permitted`` reads a bound). So, against the partition's current Position:

- equal on those components: the ordinary read (the ordinary connections, the ordinary SQL);
- behind on one: NOT_UP_TO_BOUND (the caller may wait, as for a bound);
- ahead: the newest kept state whose Position is equal there, answered with that state's Position; none kept:
  POSITION_NOT_KEPT, saying what was asked, the current Position and the oldest one kept.

How: ``AsOfTarget`` is the store as a query handler's ``fetch`` sees it (like ``_ArrowTarget``), whose snapshots
run on the partition's second, separate pool of read connections (never the ordinary ones, never the writer). On
those connections TEMP objects named like the store's table and ``meta`` shadow the main schema (SQLite resolves
unqualified names in ``temp`` first): the table's view is the current rows not changed since the state read,
plus the before-image each changed row had in the first batch after it, and ``meta`` holds that state's meta
row. The handlers' SQL runs unchanged, in ONE read transaction with the history it is computed from. Arrow
scans as of a snapshot are read through ``sqlite3`` into Arrow batches (the ADBC connections keep no views).
"""

from __future__ import annotations

import contextlib
import re
import sqlite3
from collections.abc import Callable, Iterator, Sequence
from typing import TYPE_CHECKING, Any, Protocol

from ..iqv2.position import Position
from ..iqv2.result import FailureReason, QueryResult
from . import history
from .arrow_reads import ArrowRows, witness_sql
from .connections import ReadPool
from .files import rollback
from .sqlite_scans import sqlite_rows

if TYPE_CHECKING:
    import contextlib as _cl
    from pathlib import Path

    from ..catalog.schema import StoreSpec


class PartitionStore(Protocol):
    """What the as-of reads use of a partition store (base.PartitionStore; a Protocol, so this module does not
    import base, which imports it)."""

    TABLE: str
    ROW_KEY: tuple[str, ...]
    name: str
    partition: int
    path: Path
    spec: StoreSpec

    def _reader(self, *, as_of: bool = False) -> _cl.AbstractContextManager[sqlite3.Connection]: ...
    def current_position(self) -> Position: ...
    def position_of(self, text: str) -> Position: ...
    @property
    def source_topics(self) -> frozenset[str] | None: ...
    def row_columns(self) -> list[str]: ...

__all__ = ["AsOfTarget", "AsOfMiss", "fetch_as_of", "wanted", "compare", "make_pool", "kept_positions",
           "AS_OF_READERS"]

AS_OF_READERS = 4  # per partition, beside the ordinary ones; an as-of Arrow scan holds one until it is read
Want = tuple[tuple[str, int, int], ...]


class AsOfMiss(Exception):
    """The partition cannot answer as of the snapshot; ``result`` is the failed partition result that says why."""

    def __init__(self, result: QueryResult) -> None:
        super().__init__(result.failure_message)
        self.result = result


def wanted(snapshot: Position, topics: frozenset[str] | None) -> Want:
    """The snapshot's components the partition is held to: those of the topics it reads (None: every topic)."""
    return tuple((t, p, o) for t in sorted(snapshot.topics()) if topics is None or t in topics
                 for p, o in snapshot.partition_positions(t).items())


def compare(position: Position, want: Want) -> int:
    """-1 when ``position`` is behind ``want`` on some component (or lacks it), 0 when equal on all, 1 ahead."""
    ahead = False
    for t, p, o in want:
        have = position.offset(t, p)
        if have is None or have < o:
            return -1
        ahead = ahead or have > o
    return 1 if ahead else 0


_PARSED: dict[str, Position] = {}  # history's Position texts, parsed once (bounded: cleared when full)
_PARSED_MAX = 4096


def _parse(text: str) -> Position:
    pos = _PARSED.get(text)
    if pos is None:
        if len(_PARSED) >= _PARSED_MAX:
            _PARSED.clear()
        pos = _PARSED[text] = Position.from_json(text)
    return pos


def fetch_as_of(store: PartitionStore, fetch: Callable[[Any], tuple[Position, Any]],
                snapshot: Position) -> tuple[Position, Any]:
    """``fetch(target)`` (a handler's fetch on the store or a stand-in) as of ``snapshot``; AsOfMiss when it cannot."""
    want = wanted(snapshot, store.source_topics)
    if not want:
        return fetch(store)
    # No look at the current Position first: ``AsOfTarget`` reads it in the same transaction and answers the
    # current state, an earlier one or AsOfMiss from there (the look was a second read, a third of the cost of a
    # one-moment point join's re-read: gateway/engine/moment.py re-reads only stores ahead of or behind the target)
    return fetch(AsOfTarget(store, snapshot, want))


def _behind(store: PartitionStore, snapshot: Position, current: Position) -> QueryResult:
    return QueryResult.for_failure(
        FailureReason.NOT_UP_TO_BOUND,
        f"For store partition {store.partition}, the current position {current} is not yet up to the snapshot"
        f" {snapshot}", current)


def _not_kept(store: PartitionStore, snapshot: Position, current: Position, kept: Sequence[history.Record],
              passed: history.Record | None) -> QueryResult:
    """POSITION_NOT_KEPT: the snapshot is older than the history kept, or ``passed`` is the batch that went past it."""
    oldest = next((p for p in (_parse(r.before_position) for r in reversed(kept)) if p), current)
    if passed is None:
        why = "that is older than the history it keeps"
    else:
        why = (f"it never held exactly that position (a batch took it from {_parse(passed.before_position)}"
               f" to {_parse(passed.after_position)})")
    return QueryResult.for_failure(
        FailureReason.POSITION_NOT_KEPT,
        f"Store {store.name} partition {store.partition} cannot be read as of the snapshot {snapshot}: its current"
        f" position is {current} and the oldest position it keeps is {oldest}; {why}", current)


def kept_positions(c: sqlite3.Connection, position_of: Callable[[str], Position]) -> list[Position]:
    """The current Position, then each earlier one the partition can be read as of, newest first (one read
    transaction on ``c``; a Position held across several batches is listed once, its newest state answers)."""
    version, text = c.execute("SELECT version, position FROM main.meta").fetchone()
    out = [position_of(text)]
    for rec in history.chain(c, version):
        pos = _parse(rec.before_position)
        if pos and pos != out[-1]:  # the empty Position (before the first batch) is no snapshot anyone can ask for
            out.append(pos)
    return out


def _view_sql(table: str, key: Sequence[str], rest: Sequence[str]) -> str:
    """The table as of the state ``temp.asof_b`` names (the batches after it): unchanged current rows, then the
    rows' images from before the first of those batches that changed them (where they existed)."""
    undo = history.undo_table(table)
    cols = (*key, *rest)
    same_t = " AND ".join(f"u.{k} = t.{k}" for k in key)
    same_u = " AND ".join(f"e.{k} = u.{k}" for k in key)
    # CROSS JOIN keeps the batch list outermost: every probe of the undo table is then a primary-key seek
    return (f"CREATE TEMP VIEW {table} AS SELECT {', '.join(f't.{c}' for c in cols)} FROM main.{table} t"
            f" WHERE NOT EXISTS (SELECT 1 FROM temp.asof_b r CROSS JOIN main.{undo} u WHERE u.b = r.b AND {same_t})"
            f" UNION ALL SELECT {', '.join(f'u.{c}' for c in cols)} FROM temp.asof_b r CROSS JOIN main.{undo} u"
            f" ON u.b = r.b WHERE u.ex = 1 AND NOT EXISTS (SELECT 1 FROM temp.asof_b r2 CROSS JOIN main.{undo} e"
            f" WHERE r2.b < r.b AND e.b = r2.b AND {same_u})")


def _configure(c: sqlite3.Connection) -> None:
    """A new as-of connection: TEMP tables for the state read (the view of the table comes with the first read that
    needs it, as a file written before history had no undo table to name). The file is open ``mode=ro``; only TEMP
    objects are written."""
    c.execute("PRAGMA query_only=0")
    c.execute("CREATE TEMP TABLE IF NOT EXISTS asof_b (b INTEGER PRIMARY KEY)")
    c.execute("CREATE TEMP TABLE IF NOT EXISTS meta (id INTEGER PRIMARY KEY, version INTEGER NOT NULL,"
              " last_batch_id INTEGER, position TEXT NOT NULL, observed_ts INTEGER, format INTEGER, kind TEXT)")
    # what the TEMP objects hold: the state read for ``want`` when the file was at ``version`` (read again as
    # long as no batch came: a batch bumps the version, and only a batch prunes)
    c.execute("CREATE TEMP TABLE IF NOT EXISTS asof_state (id INTEGER PRIMARY KEY CHECK (id = 0), version INTEGER,"
              " want TEXT, position TEXT)")


def make_pool(store: PartitionStore) -> ReadPool:
    """The partition's as-of connections: a pool of their own, so no ordinary read ever meets a shadowing view."""
    return ReadPool(store.path, _configure, max_readers=AS_OF_READERS, counts_partition=False)


_POINT = re.compile(r"SELECT m\.position, (?P<cols>.+?) FROM meta m LEFT JOIN (?P<table>\w+) t ON (?P<cond>.+)", re.S)


class AsOfTarget:
    """The store as a handler's ``fetch`` sees it, whose snapshots are the state as of ``snapshot``."""

    __slots__ = ("_store", "_snapshot", "_want")

    def __init__(self, store: PartitionStore, snapshot: Position, want: Want) -> None:
        self._store, self._snapshot, self._want = store, snapshot, want

    def __getattr__(self, name: str) -> Any:
        return getattr(self._store, name)

    def _enter(self, c: sqlite3.Connection) -> Position:
        """In ``c``'s open read transaction: find the state, point the TEMP objects at it, return its Position."""
        store = self._store
        want = repr(self._want)
        version, last, text, observed, fmt, kind, held_version, held_want, held = c.execute(
            "SELECT m.version, m.last_batch_id, m.position, m.observed_ts, m.format, m.kind, a.version, a.want,"
            " a.position FROM main.meta m LEFT JOIN temp.asof_state a").fetchone()
        if held_version == version and held_want == want:  # the TEMP objects already hold that state
            return _parse(held)
        current = store.position_of(text)
        rel = compare(current, self._want)
        if rel < 0:
            raise AsOfMiss(_behind(store, self._snapshot, current))
        c.execute("DELETE FROM temp.asof_b")
        c.execute("DELETE FROM temp.meta")
        if rel == 0:
            c.execute("INSERT INTO temp.meta VALUES (0, ?, ?, ?, ?, ?, ?)", (version, last, text, observed, fmt, kind))
            c.execute("INSERT OR REPLACE INTO temp.asof_state VALUES (0, ?, ?, ?)", (version, want, text))
            return current
        kept = history.chain(c, version)
        for rec in kept:
            pos = _parse(rec.before_position)
            r = compare(pos, self._want)
            if r == 0:
                break
            if r < 0:  # this batch went past the snapshot: every older state is behind it
                raise AsOfMiss(_not_kept(store, self._snapshot, current, kept, rec))
        else:
            raise AsOfMiss(_not_kept(store, self._snapshot, current, kept, None))
        if c.execute("SELECT count(*) FROM sqlite_temp_master WHERE type = 'view'").fetchone()[0] == 0:
            c.execute(_view_sql(store.TABLE, store.ROW_KEY, store.row_columns()))
        c.execute(f"INSERT INTO temp.asof_b SELECT b FROM main.{history.HISTORY_TABLE} WHERE b >= ? AND b < ?",
                  (rec.b, version))
        c.execute("INSERT INTO temp.meta VALUES (0, ?, ?, ?, ?, ?, ?)",
                  (rec.before_version, rec.before_last_batch_id, rec.before_position, rec.before_observed_ts, fmt, kind))
        c.execute("INSERT OR REPLACE INTO temp.asof_state VALUES (0, ?, ?, ?)", (version, want, rec.before_position))
        return pos

    @contextlib.contextmanager
    def _transaction(self) -> Iterator[tuple[sqlite3.Connection, Position]]:
        with self._store._reader(as_of=True) as c:
            c.execute("BEGIN")
            try:
                position = self._enter(c)
                yield c, position
            except BaseException:
                rollback(c)
                raise
            c.execute("COMMIT")

    def current_position(self) -> Position:
        with self._transaction() as (_c, position):
            return position

    def snapshot(self, sql: str, params: Sequence[Any]) -> tuple[Position, list[Any]]:
        with self._transaction() as (c, position):
            return position, c.execute(sql, params).fetchall()

    def snapshot_many(self, statements: Sequence[tuple[str, Sequence[Any]]]) -> tuple[Position, list[Any]]:
        with self._transaction() as (c, position):
            rows: list[Any] = []
            for sql, params in statements:
                rows.extend(c.execute(sql, params).fetchall())
            return position, rows

    def point(self, sql: str, params: Sequence[Any]) -> tuple[Position, Any]:
        """``PartitionStore.point``'s row (the position, then the row's columns or NULLs). Its ``meta LEFT JOIN
        <table>`` is read as a plain lookup: SQLite would materialize the whole view on a LEFT JOIN's right side."""
        m = _POINT.fullmatch(sql)
        with self._transaction() as (c, position):
            if m is None:
                return position, c.execute(sql, params).fetchone()
            cur = c.execute(f"SELECT {m['cols']} FROM {m['table']} t WHERE {m['cond']}", params)
            row = cur.fetchone()
            return position, (position.to_json(), *(row if row is not None else (None,) * len(cur.description)))

    def arrow_snapshot(self, sql: str, params: Sequence[Any], columns: tuple[str, ...],
                       batch_rows: int) -> tuple[Position, ArrowRows]:
        """The rows of ``sql`` as of the snapshot as Arrow batches, from one read transaction the stream holds
        until it is read to its end or closed (as ``AdbcReaders.scan``'s, but read through ``sqlite3``)."""
        spec = self._store.spec
        stack = contextlib.ExitStack()
        try:
            c, position = stack.enter_context(self._transaction())
            cur = c.execute(witness_sql(spec, columns[:len(columns) - len(spec.values)], sql), params)
        except BaseException:
            stack.close()
            raise
        return position, sqlite_rows(spec, columns, cur, batch_rows, stack.close)
