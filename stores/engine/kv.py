"""Key-value stores, plain and timestamped (Kafka's MeteredKeyValueStore / MeteredTimestampedKeyValueStore).

Plain stores answer KeyQuery and RangeQuery; timestamped stores also answer
TimestampedKeyQuery and TimestampedRangeQuery (KIP-992), while their
KeyQuery/RangeQuery return the plain value, as Kafka does since 3.7.
"""

from __future__ import annotations

import functools
import logging
import sqlite3
import threading
import time
from collections.abc import Sequence
from typing import Any, NamedTuple

import pyarrow.compute as pc

from ..catalog.nested import NestedType
from ..iqv2.position import Position, PositionBound
from ..iqv2.query import (
    KeyQuery,
    MultiKeyQuery,
    RangeQuery,
    ResultOrder,
    TimestampedKeyQuery,
    TimestampedRangeQuery,
)
from ..iqv2.values import KeyValue, ValueAndTimestamp
from .base import EXISTS_CHECK_S, Handler, PartitionStore, upsert_set
from .rows import RowIterator

__all__ = ["KeyValueStore", "TimestampedKeyValueStore", "PointRead"]

# What ``KeyValueStore.point_read`` answers: (position, the value as a plain tuple, or None when the key is
# absent, the record timestamp). Plain tuples: a namedtuple's constructor alone costs a tenth of the read.
PointRead = tuple[Position, "tuple[Any, ...] | None", "int | None"]

log = logging.getLogger(__name__)


class _Range(NamedTuple):
    lo: Any
    hi: Any
    descending: bool
    empty: bool


def _prep_key(store: KeyValueStore, q: Any) -> Any:
    return store.codec.coerce_query_key(q.key)


WARN_EVERY_S = 60.0  # an inverted range's warning, per store: SQL (k BETWEEN 9 AND 1) can send one per statement
_warned: dict[str, tuple[float, int]] = {}  # store -> (when last logged, how many since then were not)
_warned_lock = threading.Lock()


def _prep_range(store: KeyValueStore, q: Any) -> _Range:
    coerce = store.codec.coerce_query_key
    lo = None if q.lower is None else coerce(q.lower)
    hi = None if q.upper is None else coerce(q.upper)
    empty = lo is not None and hi is not None and lo > hi
    if empty:
        _warn_inverted(store, q)
    return _Range(lo, hi, q.result_order is ResultOrder.DESCENDING, empty)


def _warn_inverted(store: KeyValueStore, q: Any) -> None:
    """Kafka's warning for a range set in the wrong order, at most once per store every WARN_EVERY_S.

    Why: Kafka logs it on every call, but here a client's SQL reaches it on
    every partition of every statement; a careless or hostile client would
    fill the log (and the disk under it).
    """
    now = time.monotonic()
    with _warned_lock:
        last, quiet = _warned.get(store.name, (float("-inf"), 0))
        if now - last < WARN_EVERY_S:
            _warned[store.name] = (last, quiet + 1)
            return
        _warned[store.name] = (now, 0)
    log.warning(
        "Returning empty iterator for %r on store %s partition %d: the lower bound is greater than the upper"
        " bound. This may be due to range arguments set in the wrong order.%s", q, store.name, store.partition,
        f" ({quiet} more such range(s) on this store since the last warning)" if quiet else "",
    )


def _fetch_point(store: KeyValueStore, key: Any) -> tuple[Position, Any]:
    return store.point(store.point_sql, (key,))


def _fetch_range(store: KeyValueStore, r: _Range, with_ts: bool = False) -> tuple[Position, list[Any]]:
    if r.empty:
        return store.current_position(), []
    sql = store.cached_sql(
        ("range", r.lo is not None, r.hi is not None, r.descending, with_ts),
        lambda: store.range_sql(r.lo is not None, r.hi is not None, r.descending, with_ts),
    )
    params = tuple(b for b in (r.lo, r.hi) if b is not None)
    return store.snapshot(sql, params)


def _fetch_ts_range(store: KeyValueStore, r: _Range) -> tuple[Position, list[Any]]:
    return _fetch_range(store, r, with_ts=True)


_KEYS_PER_STATEMENT = 500  # well under SQLite's variable limit; every chunk reads the same snapshot


def _prep_keys(store: KeyValueStore, q: MultiKeyQuery) -> tuple[Any, ...]:
    coerce = store.codec.coerce_query_key
    return tuple(sorted(dict.fromkeys(coerce(k) for k in q.keys)))


def _fetch_keys(store: KeyValueStore, keys: tuple[Any, ...], with_ts: bool = False) -> tuple[Position, list[Any]]:
    ts = ", ts" if with_ts else ""
    statements = []
    for i in range(0, len(keys), _KEYS_PER_STATEMENT):
        chunk = keys[i:i + _KEYS_PER_STATEMENT]
        sql = store.cached_sql(("keys", len(chunk), with_ts),
                               lambda n=len(chunk): f"SELECT k{ts}{store.vcols_tail} FROM kv WHERE k IN ({', '.join('?' * n)})"
                               " ORDER BY k")
        statements.append((sql, chunk))
    return store.snapshot_many(statements)


def _fetch_ts_keys(store: KeyValueStore, keys: tuple[Any, ...]) -> tuple[Position, list[Any]]:
    return _fetch_keys(store, keys, with_ts=True)


def _build_value(store: KeyValueStore, _key: Any, row: Any) -> Any:
    if row[1] is None:
        return None
    return store.codec.value(row, 3)


def _build_vat(store: KeyValueStore, _key: Any, row: Any) -> Any:
    if row[1] is None:
        return None
    return ValueAndTimestamp(store.codec.value(row, 3), row[2])


def _nested_key(store: KeyValueStore) -> Any:
    """The key decoder bulk readers need (an ARRAY/STRUCT key's JSON text → its value), or None."""
    return store.codec.key if isinstance(store.spec.key.type, NestedType) else None


def _build_range(store: KeyValueStore, _r: _Range, rows: list[Any]) -> RowIterator:
    return RowIterator(rows, store.codec.pair_converter(1), ("key",), _nested_key(store))


def _build_ts_range(store: KeyValueStore, _r: _Range, rows: list[Any]) -> RowIterator:
    codec = store.codec
    return RowIterator(
        rows, lambda row: KeyValue(codec.key(row[0]), ValueAndTimestamp(codec.value(row, 2), row[1])),
        ("key", "timestamp"), _nested_key(store),
    )


class KeyValueStore(PartitionStore):
    """A plain key-value store partition: KeyQuery and RangeQuery."""

    TABLE = "kv"

    HANDLERS = {
        KeyQuery: Handler(_prep_key, _fetch_point, _build_value),
        MultiKeyQuery: Handler(_prep_keys, _fetch_keys, _build_range),
        RangeQuery: Handler(_prep_range, _fetch_range, _build_range),
    }

    @functools.cached_property
    def point_sql(self) -> str:
        """The KeyQuery statement: the position and the key's row in one read. An attribute once made, as the
        lookup path reads it every call (``cached_sql`` would build its maker each time: issue 14 item 6)."""
        return f"SELECT m.position, t.k, t.ts{self.vcols_tail} FROM meta m LEFT JOIN kv t ON t.k = ?"

    STAGED = ("k", "ts", "del")

    def ddl(self) -> Sequence[str]:
        return [f"CREATE TABLE IF NOT EXISTS kv ({self.key_decl()} PRIMARY KEY, ts INTEGER{self.value_decls()}) WITHOUT ROWID"]

    def point_read(self, key: Any, bound: PositionBound) -> PointRead | None:
        """A KeyQuery's answer without the IQv2 objects around it, or None where ``query()`` must answer.

        Why: a point lookup is what services and BI tools send most, and the
        request, result and handler objects around its one SQLite read cost
        more than the read (issue 14). The same snapshot (the position is read
        in the lookup's own statement) and the same bound check as ``query()``.
        None for everything out of the common case, where ``query()`` says
        what happened: a key the store refuses, a closed or missing file, no
        idle connection (``query()`` waits for one), a store error,
        a bound the partition has not reached.
        """
        if self._closed:
            return None
        now = time.monotonic()
        if now - self._checked_at > EXISTS_CHECK_S:  # as query() looks at the file
            try:
                self._check_file(now)
            except Exception:  # noqa: BLE001 - gone: query() looks again and answers STORE_EXCEPTION
                self._checked_at = -1e9
                return None
        codec = self.codec
        try:
            row = self._point_at_once(self.point_sql, (codec.coerce_query_key(key),))
            if row is None:
                return None
            position = self.position_of(row[0])
            if not (bound.is_unbounded() or self._permitted(position, bound)):
                return None
            if row[1] is None:
                return position, None, None
            return position, codec.plain_value(row, 3), row[2]
        except Exception:  # noqa: BLE001 - query() answers it, as STORE_EXCEPTION or the error it is
            return None

    def range_sql(self, has_lo: bool, has_hi: bool, descending: bool, with_ts: bool) -> str:
        where = []
        if has_lo:
            where.append("k >= ?")
        if has_hi:
            where.append("k <= ?")
        cond = f" WHERE {' AND '.join(where)}" if where else ""
        ts = ", ts" if with_ts else ""
        return f"SELECT k{ts}{self.vcols_tail} FROM kv{cond} ORDER BY k {'DESC' if descending else 'ASC'}"

    def merge(self, c: sqlite3.Connection, src: str, rows: Any, observed: int | None) -> None:
        """Upserts in key order (of two for one key the later wins), then the deletes that came last."""
        v = "".join(f", {c}" for c in self.value_columns())  # internal columns too
        deletes = pc.sum(rows.column("del")).as_py() or 0
        if deletes < len(rows):
            # an UPSERT updates a row in place; INSERT OR REPLACE would delete and reinsert it (~15% more CPU)
            c.execute(self.cached_sql(("merge_upsert", src), lambda: (
                f"INSERT INTO kv (k, ts{v}) SELECT k, ts{v} FROM {src} WHERE del = 0 ORDER BY rowid"
                f" ON CONFLICT (k) DO UPDATE SET {upsert_set(('ts', *self.value_columns()))}")))
        if deletes:
            c.execute(f"DELETE FROM kv WHERE k IN (SELECT k FROM {src} WHERE del = 1)")

    def stored_rows(self, keys: Sequence[Any]) -> dict[Any, tuple[Any, ...]]:
        """Stored key → every stored value (internal columns included, raw) of ``keys`` present: for the writer's
        upkeep (a table aggregate reads its groups' state), not for queries."""
        cols = "".join(f", {c}" for c in self.value_columns())
        out: dict[Any, tuple[Any, ...]] = {}
        for i in range(0, len(keys), 500):
            chunk = list(keys[i:i + 500])
            _pos, rows = self.snapshot(f"SELECT k{cols} FROM kv WHERE k IN ({', '.join('?' * len(chunk))})", chunk)
            out.update((r[0], tuple(r[1:])) for r in rows)
        return out

    # -- classic read-only API (handles) ---------------------------------------------
    def count(self) -> int:
        return self.snapshot("SELECT count(*) FROM kv", ())[1][0][0]


class TimestampedKeyValueStore(KeyValueStore):
    """A timestamped key-value partition: also TimestampedKeyQuery and TimestampedRangeQuery (KIP-992)."""

    HANDLERS = {
        **KeyValueStore.HANDLERS,
        TimestampedKeyQuery: Handler(_prep_key, _fetch_point, _build_vat),
        TimestampedRangeQuery: Handler(_prep_range, _fetch_ts_range, _build_ts_range),
        MultiKeyQuery: Handler(_prep_keys, _fetch_ts_keys, _build_ts_range),
    }
