"""Versioned key-value stores (KIP-889 stores, queried by KIP-960 and KIP-968).

Each version is a row ``(key, valid_from, valid_to, tombstone, values)``;
``valid_to`` is the next version's ``valid_from`` (NULL for the latest), kept
right on every insert, in or out of order. Versions whose validity ended
before ``observed stream time - history retention`` are dropped at write
time; the latest version of a key is always kept.

Deliberate difference from Kafka: KeyQuery and RangeQuery here return
UNKNOWN_QUERY_TYPE (failures are data, docs/DESIGN.md §3) instead of throwing
UnsupportedOperationException out of ``query()``.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence
from typing import Any, NamedTuple

from ..iqv2.position import Position
from ..iqv2.query import MultiVersionedKeyQuery, MultiVersionedRangeQuery, ResultOrder, VersionedKeyQuery
from ..iqv2.timeutil import MAX_MS, MIN_MS
from ..iqv2.values import KeyValue, VersionedRecord
from .base import Handler, PartitionStore
from .rows import RowIterator

__all__ = ["VersionedStore"]


class _Multi(NamedTuple):
    key: Any
    time_from: int
    time_to: int
    ascending: bool


def _prep_vkq(store: VersionedStore, q: VersionedKeyQuery) -> tuple[Any, int | None]:
    return store.codec.coerce_query_key(q.key), q.as_of_timestamp


def _fetch_vkq(store: VersionedStore, p: tuple[Any, int | None]) -> tuple[Position, Any]:
    key, as_of = p
    if as_of is None:
        sql = store.cached_sql(
            "latest",
            lambda: f"SELECT m.position, t.vf, t.vt, t.tomb{store.vcols_tail} FROM meta m"
            " LEFT JOIN ver t ON t.k = ? AND t.vt IS NULL",
        )
        return store.point(sql, (key,))
    sql = store.cached_sql(
        "asof",
        lambda: f"SELECT m.position, t.vf, t.vt, t.tomb{store.vcols_tail} FROM meta m LEFT JOIN ver t"
        " ON t.k = ?1 AND t.vf = (SELECT max(vf) FROM ver WHERE k = ?1 AND vf <= ?2)",
    )
    return store.point(sql, (key, as_of))


def _build_vkq(store: VersionedStore, _p: Any, row: Any) -> VersionedRecord | None:
    if row[1] is None or row[3]:
        return None  # no version valid then, or the version valid then is a tombstone
    return VersionedRecord(store.codec.value(row, 4), row[1], row[2])


def _prep_multi(store: VersionedStore, q: MultiVersionedKeyQuery) -> _Multi:
    lo = MIN_MS if q.from_timestamp is None else q.from_timestamp
    hi = MAX_MS if q.to_timestamp is None else q.to_timestamp
    if lo > hi:
        raise ValueError(f"The `fromTime` timestamp ({lo}) must be smaller than or equal to the `toTime` timestamp ({hi}).")
    return _Multi(store.codec.coerce_query_key(q.key), lo, hi, q.result_order is ResultOrder.ASCENDING)


def _fetch_multi(store: VersionedStore, p: _Multi) -> tuple[Position, list[Any]]:
    sql = store.cached_sql(
        ("multi", p.ascending),
        lambda: f"SELECT vf, vt{store.vcols_tail} FROM ver WHERE k = ? AND tomb = 0 AND vf <= ?"
        f" AND (vt IS NULL OR vt > ?) ORDER BY vf {'ASC' if p.ascending else 'DESC'}",
    )
    return store.snapshot(sql, (p.key, p.time_to, p.time_from))


def _build_multi(store: VersionedStore, _p: _Multi, rows: list[Any]) -> RowIterator:
    codec = store.codec
    return RowIterator(rows, lambda r: VersionedRecord(codec.value(r, 2), r[0], r[1]), ("valid_from", "valid_to"))


class _MultiRange(NamedTuple):
    lo: Any
    hi: Any
    time_from: int
    time_to: int
    keys_descending: bool
    newest_first: bool
    empty: bool


def _prep_multi_range(store: VersionedStore, q: MultiVersionedRangeQuery) -> _MultiRange:
    lo = MIN_MS if q.from_timestamp is None else q.from_timestamp
    hi = MAX_MS if q.to_timestamp is None else q.to_timestamp
    if lo > hi:
        raise ValueError(f"The `fromTime` timestamp ({lo}) must be smaller than or equal to the `toTime` timestamp ({hi}).")
    coerce = store.codec.coerce_query_key
    klo = None if q.lower is None else coerce(q.lower)
    khi = None if q.upper is None else coerce(q.upper)
    return _MultiRange(klo, khi, lo, hi, q.key_order is ResultOrder.DESCENDING,
                       q.result_order is ResultOrder.DESCENDING, klo is not None and khi is not None and klo > khi)


def _fetch_multi_range(store: VersionedStore, p: _MultiRange) -> tuple[Position, list[Any]]:
    if p.empty:
        return store.current_position(), []
    has_lo, has_hi = p.lo is not None, p.hi is not None

    def make() -> str:
        cond = "".join((" AND k >= ?" if has_lo else "", " AND k <= ?" if has_hi else ""))
        return (f"SELECT k, vf, vt{store.vcols_tail} FROM ver WHERE tomb = 0 AND vf <= ? AND (vt IS NULL OR vt > ?)"
                f"{cond} ORDER BY k {'DESC' if p.keys_descending else 'ASC'}, vf {'DESC' if p.newest_first else 'ASC'}")

    sql = store.cached_sql(("multi_range", has_lo, has_hi, p.keys_descending, p.newest_first), make)
    params = (p.time_to, p.time_from, *(b for b in (p.lo, p.hi) if b is not None))
    return store.snapshot(sql, params)


def _build_multi_range(store: VersionedStore, _p: _MultiRange, rows: list[Any]) -> RowIterator:
    codec = store.codec
    return RowIterator(rows, lambda r: KeyValue(codec.key(r[0]), VersionedRecord(codec.value(r, 3), r[1], r[2])),
                       ("key", "valid_from", "valid_to"))


class VersionedStore(PartitionStore):
    """A versioned key-value partition: VersionedKeyQuery, MultiVersionedKeyQuery, MultiVersionedRangeQuery."""

    TABLE = "ver"

    HANDLERS = {
        VersionedKeyQuery: Handler(_prep_vkq, _fetch_vkq, _build_vkq),
        MultiVersionedKeyQuery: Handler(_prep_multi, _fetch_multi, _build_multi),
        MultiVersionedRangeQuery: Handler(_prep_multi_range, _fetch_multi_range, _build_multi_range),
    }

    def ddl(self) -> Sequence[str]:
        return [
            f"CREATE TABLE IF NOT EXISTS ver ({self.key_decl()}, vf INTEGER NOT NULL, vt INTEGER,"
            f" tomb INTEGER NOT NULL{self.value_decls()}, PRIMARY KEY (k, vf)) WITHOUT ROWID",
            "CREATE INDEX IF NOT EXISTS ver_by_end ON ver (vt) WHERE vt IS NOT NULL",
        ]

    IDENTITY = ("k", "ts")
    ROW_KEY = ("k", "vf")
    STAGED = ("k", "ts", "del")

    def row_columns(self) -> list[str]:
        return ["vt", "tomb", *self.value_columns()]

    def capture(self, c: sqlite3.Connection, src: str) -> None:
        """The versions the batch writes, and the version before each of them (its ``valid_to`` is mended)."""
        super().capture(c, src)
        rest = self.row_columns()
        c.execute(self.cached_sql(("capture_predecessors", src), lambda: (
            f"INSERT INTO ver_undo (b, k, vf, ex, {', '.join(rest)}) SELECT ?, t.k, t.vf, 1,"
            f" {', '.join(f't.{r}' for r in rest)} FROM {src} s JOIN ver t ON t.k = s.k AND t.vf ="
            " (SELECT max(p.vf) FROM ver p WHERE p.k = s.k AND p.vf < s.ts) WHERE true ORDER BY s.rowid"
            " ON CONFLICT DO NOTHING")), (self._undo_b,))

    def rows_to_stage(self, rows: Any) -> Any:
        return rows  # a tombstone is a version too: nothing to resolve

    def merge(self, c: sqlite3.Connection, src: str, rows: Any, observed: int | None) -> None:
        """Versions (tombstones too) in (key, time) order, then each touched validity mended, then retention.

        Set-based: every new version and its predecessor get ``valid_to`` =
        the next version's ``valid_from`` once all are in, which is what
        inserting them one at a time in any order leaves.
        """
        n = self.codec.n
        v = self.vcols_tail
        c.execute(self.cached_sql(("merge_versions", src), lambda: (
            f"INSERT INTO ver (k, vf, vt, tomb{v}) SELECT k, ts, NULL, del{v} FROM {src} WHERE true"
            " ORDER BY rowid ON CONFLICT (k, vf) DO UPDATE SET tomb = excluded.tomb"
            + "".join(f", v{i} = excluded.v{i}" for i in range(n)))))
        next_vf = "(SELECT min(n.vf) FROM ver n WHERE n.k = ver.k AND n.vf > ver.vf)"
        c.execute(f"UPDATE ver SET vt = {next_vf} WHERE (k, vf) IN (SELECT k, ts FROM {src})")
        c.execute(f"UPDATE ver SET vt = {next_vf} WHERE (k, vf) IN (SELECT s.k, (SELECT max(p.vf) FROM ver p"
                  f" WHERE p.k = s.k AND p.vf < s.ts) FROM {src} s)")
        retention = self.spec.history_retention_ms
        if retention is not None and observed is not None:
            self.capture_where(c, "vt IS NOT NULL AND vt < ?", (observed - retention,))
            c.execute("DELETE FROM ver WHERE vt IS NOT NULL AND vt < ?", (observed - retention,))
