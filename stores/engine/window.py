"""Window stores (tumbling and hopping) and session stores.

Both keep one row per ``(key, window_start, window_end)``. Window stores
answer WindowKeyQuery and WindowRangeQuery.with_window_start_range (Kafka's
MeteredWindowStore); session stores answer WindowRangeQuery.with_key (Kafka's
MeteredSessionStore). Each refuses the other variant with Kafka's message.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence
from typing import Any, NamedTuple

import pyarrow.compute as pc

from ..iqv2.position import Position
from ..iqv2.query import WindowKeyQuery, WindowRangeQuery
from ..iqv2.values import KeyValue, TimeWindow, Windowed
from .base import Handler, PartitionStore, upsert_set
from .rows import RowIterator

__all__ = ["WindowStore", "SessionStore"]


class _WinKey(NamedTuple):
    key: Any
    time_from: int
    time_to: int


def _windowed(store: PartitionStore) -> Any:
    codec = store.codec
    return lambda r: KeyValue(Windowed(codec.key(r[0]), TimeWindow(r[1], r[2])), codec.value(r, 4))


class _WindowTable(PartitionStore):
    TABLE = "win"

    def ddl(self) -> Sequence[str]:
        return [
            f"CREATE TABLE IF NOT EXISTS win ({self.key_decl()}, ws INTEGER NOT NULL, we INTEGER NOT NULL,"
            f" ts INTEGER{self.value_decls()}, PRIMARY KEY (k, ws, we)) WITHOUT ROWID",
            "CREATE INDEX IF NOT EXISTS win_by_start ON win (ws, k)",
        ]

    IDENTITY = ("k", "ws", "we")
    ROW_KEY = ("k", "ws", "we")

    def merge(self, c: sqlite3.Connection, src: str, rows: Any, observed: int | None) -> None:
        """Upserts in (key, window) order (of two for one window the later wins), then the deletes that came last."""
        v = self.vcols_tail
        deletes = pc.sum(rows.column("del")).as_py() or 0
        if deletes < len(rows):
            c.execute(self.cached_sql(("merge_upsert", src), lambda: (
                f"INSERT INTO win (k, ws, we, ts{v}) SELECT k, ws, we, ts{v} FROM {src} WHERE del = 0"
                f" ORDER BY rowid ON CONFLICT (k, ws, we) DO UPDATE SET {upsert_set(('ts', *self.value_columns()))}")))
        if deletes:
            c.execute(f"DELETE FROM win WHERE (k, ws, we) IN (SELECT k, ws, we FROM {src} WHERE del = 1)")

    def select(self, where: str, order: str) -> str:
        return f"SELECT k, ws, we, ts{self.vcols_tail} FROM win WHERE {where} ORDER BY {order}"

    # -- classic read-only API (handles) ---------------------------------------------
    def fetch_keys(
        self, key_from: Any, key_to: Any, time_from: int | None, time_to: int | None, descending: bool = False
    ) -> tuple[Position, RowIterator]:
        """Windows of keys in [key_from, key_to] (None = open) with start in [time_from, time_to]."""
        conds, params = ["1"], []
        for col, op, v in (("k", ">=", key_from), ("k", "<=", key_to), ("ws", ">=", time_from), ("ws", "<=", time_to)):
            if v is not None:
                conds.append(f"{col} {op} ?")
                params.append(v)
        d = " DESC" if descending else ""
        pos, rows = self.snapshot(self.select(" AND ".join(conds), f"k{d}, ws{d}, we{d}"), params)
        return pos, RowIterator(rows, _windowed(self), ("key", "window_start", "window_end", "timestamp"))


def _prep_window_key(store: WindowStore, q: WindowKeyQuery) -> _WinKey:
    return _WinKey(store.codec.coerce_query_key(q.key), q.time_from, q.time_to)


def _fetch_window_key(store: WindowStore, p: _WinKey) -> tuple[Position, list[Any]]:
    sql = store.cached_sql("wkq", lambda: store.select("k = ? AND ws >= ? AND ws <= ?", "ws, we"))
    return store.snapshot(sql, (p.key, p.time_from, p.time_to))


def _build_window_key(store: WindowStore, _p: _WinKey, rows: list[Any]) -> RowIterator:
    codec = store.codec
    return RowIterator(rows, lambda r: KeyValue(r[1], codec.value(r, 4)), ("key", "window_start", "window_end", "timestamp"))


def _prep_window_range(store: WindowStore, q: WindowRangeQuery) -> Any:
    if q.key is not None or q.time_from is None or q.time_to is None:
        return store.unsupported(q, "WindowStores only supports WindowRangeQuery.withWindowStartRange")
    return (q.time_from, q.time_to)


def _fetch_window_range(store: WindowStore, p: tuple[int, int]) -> tuple[Position, list[Any]]:
    sql = store.cached_sql("wrq", lambda: store.select("ws >= ? AND ws <= ?", "k, ws, we"))
    return store.snapshot(sql, p)


def _build_windowed(store: PartitionStore, _p: Any, rows: list[Any]) -> RowIterator:
    return RowIterator(rows, _windowed(store), ("key", "window_start", "window_end", "timestamp"))


class WindowStore(_WindowTable):
    """A window store partition (tumbling or hopping windows)."""

    HANDLERS = {
        WindowKeyQuery: Handler(_prep_window_key, _fetch_window_key, _build_window_key),
        WindowRangeQuery: Handler(_prep_window_range, _fetch_window_range, _build_windowed),
    }


def _prep_session(store: SessionStore, q: WindowRangeQuery) -> Any:
    if q.key is None:
        return store.unsupported(q, "SessionStores only support WindowRangeQuery.withKey")
    return store.codec.coerce_query_key(q.key)


def _fetch_session(store: SessionStore, key: Any) -> tuple[Position, list[Any]]:
    sql = store.cached_sql("session", lambda: store.select("k = ?", "ws, we"))
    return store.snapshot(sql, (key,))


class SessionStore(_WindowTable):
    """A session store partition: one row per session ``[start, end]`` of a key."""

    HANDLERS = {
        WindowRangeQuery: Handler(_prep_session, _fetch_session, _build_windowed),
    }
