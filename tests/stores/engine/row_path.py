"""The row-at-a-time write path iqgate had until issue 22, kept as the oracle of the columnar path.

Every change was coerced in Python, routed with the scalar murmur2, and
applied with one SQLite statement per row (versioned: a look-up, then an
update or an insert with its neighbours' validity mended). It is slow and
plainly correct; the columnar writer must leave exactly the same tables,
positions and stream times. It writes its own SQLite files with the same
DDL as the store classes (``ddl()`` only: no write method of theirs is used).
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from stores.catalog.partitioner import partition_for_key
from stores.catalog.schema import StoreKind, StoreSpec
from stores.engine import STORE_CLASSES
from stores.engine.change import Change
from stores.engine.codec import BatchError, ValueCodec
from stores.iqv2.position import Position

TABLES = {StoreKind.KEY_VALUE: ("kv", "k"), StoreKind.TIMESTAMPED_KEY_VALUE: ("kv", "k"),
          StoreKind.WINDOW: ("win", "k, ws, we"), StoreKind.SESSION: ("win", "k, ws, we"),
          StoreKind.VERSIONED: ("ver", "k, vf")}


def validate(spec: StoreSpec, codec: ValueCodec, batch_id: int, changes: Iterable[Any]) -> list[Change]:
    out: list[Change] = []
    kind = spec.kind
    for i, ch in enumerate(changes):
        where = f"store {spec.name!r} batch {batch_id} change #{i}"
        key = codec.write_key(ch.key, where)
        value = None if ch.value is None else codec.write_value(ch.value, where)
        ts, ws, we = ch.timestamp, ch.window_start, ch.window_end
        if kind is StoreKind.TIMESTAMPED_KEY_VALUE and value is not None and ts is None:
            raise BatchError(f"{where}: a timestamped key-value store needs the record timestamp")
        if kind is StoreKind.VERSIONED and ts is None:
            raise BatchError(f"{where}: a versioned store needs the version timestamp (valid_from)")
        if kind in (StoreKind.WINDOW, StoreKind.SESSION):
            if ws is None:
                raise BatchError(f"{where}: window_start is required for a {kind.value} store")
            if we is None:
                if kind is StoreKind.WINDOW and spec.window_size_ms:
                    we = ws + spec.window_size_ms
                else:
                    raise BatchError(f"{where}: window_end is required for a {kind.value} store")
            if we < ws:
                raise BatchError(f"{where}: window_end {we} is before window_start {ws}")
        out.append(Change(key, value, ts, ws, we))
    return out


class RowPathStore:
    """One store's partitions in ``root``, written one row at a time."""

    def __init__(self, spec: StoreSpec, root: Path) -> None:
        self.spec = spec
        self.codec = ValueCodec(spec)
        self.n = self.codec.n
        self.vcols = "".join(f", v{i}" for i in range(self.n))
        probe = STORE_CLASSES[spec.kind].__new__(STORE_CLASSES[spec.kind])
        probe.spec, probe.codec = spec, self.codec
        self.conns = []
        for p in range(spec.partitions):
            c = sqlite3.connect(root / f"row-{p}.db", isolation_level=None)
            c.execute("CREATE TABLE meta (last_batch_id INTEGER, position TEXT NOT NULL, observed_ts INTEGER)")
            c.execute("INSERT INTO meta VALUES (NULL, '{}', NULL)")
            for ddl in probe.ddl():
                c.execute(ddl)
            self.conns.append(c)

    def write_batch(self, batch_id: int, changes: list[Change], position: Position) -> None:
        canon = validate(self.spec, self.codec, batch_id, changes)
        per: dict[int, list[Change]] = {p: [] for p in range(self.spec.partitions)}
        for ch in canon:
            per[partition_for_key(ch.key, self.spec.partitions, self.spec.key.type) if self.spec.partitions > 1
                else 0].append(ch)
        for p, c in enumerate(self.conns):
            c.execute("BEGIN")
            last, text, observed = c.execute("SELECT last_batch_id, position, observed_ts FROM meta").fetchone()
            if last is not None and batch_id <= last:
                c.execute("ROLLBACK")
                continue
            observed = self._apply(c, per[p], observed)
            c.execute("UPDATE meta SET last_batch_id = ?, position = ?, observed_ts = ?",
                      (batch_id, Position.from_json(text).merge(position).to_json(), observed))
            c.execute("COMMIT")

    def _apply(self, c: sqlite3.Connection, changes: list[Change], observed: int | None) -> int | None:
        kind = self.spec.kind
        if kind in (StoreKind.KEY_VALUE, StoreKind.TIMESTAMPED_KEY_VALUE):
            for ch in changes:
                if ch.value is None:
                    c.execute("DELETE FROM kv WHERE k = ?", (ch.key,))
                else:
                    c.execute(f"INSERT OR REPLACE INTO kv (k, ts{self.vcols}) VALUES (?, ?{', ?' * self.n})",
                              (ch.key, ch.timestamp, *ch.value))
                if ch.timestamp is not None and (observed is None or ch.timestamp > observed):
                    observed = ch.timestamp
            return observed
        if kind in (StoreKind.WINDOW, StoreKind.SESSION):
            for ch in changes:
                if ch.value is None:
                    c.execute("DELETE FROM win WHERE k = ? AND ws = ? AND we = ?",
                              (ch.key, ch.window_start, ch.window_end))
                else:
                    c.execute(f"INSERT OR REPLACE INTO win (k, ws, we, ts{self.vcols}) VALUES (?, ?, ?, ?"
                              f"{', ?' * self.n})", (ch.key, ch.window_start, ch.window_end, ch.timestamp, *ch.value))
                t = ch.timestamp if ch.timestamp is not None else ch.window_end
                if observed is None or t > observed:
                    observed = t
            return observed
        for ch in changes:
            ts = ch.timestamp
            tomb = 1 if ch.value is None else 0
            vals = (None,) * self.n if ch.value is None else tuple(ch.value)
            if c.execute("SELECT 1 FROM ver WHERE k = ? AND vf = ?", (ch.key, ts)).fetchone():
                sets = "".join(f", v{i} = ?" for i in range(self.n))
                c.execute(f"UPDATE ver SET tomb = ?{sets} WHERE k = ? AND vf = ?", (tomb, *vals, ch.key, ts))
            else:
                nxt = c.execute("SELECT min(vf) FROM ver WHERE k = ? AND vf > ?", (ch.key, ts)).fetchone()[0]
                c.execute("UPDATE ver SET vt = ? WHERE k = ? AND vf = (SELECT max(vf) FROM ver WHERE k = ? AND vf < ?)",
                          (ts, ch.key, ch.key, ts))
                c.execute(f"INSERT INTO ver (k, vf, vt, tomb{self.vcols}) VALUES (?, ?, ?, ?{', ?' * self.n})",
                          (ch.key, ts, nxt, tomb, *vals))
            if observed is None or ts > observed:
                observed = ts
        retention = self.spec.history_retention_ms
        if retention is not None and observed is not None:
            c.execute("DELETE FROM ver WHERE vt IS NOT NULL AND vt < ?", (observed - retention,))
        return observed

    def contents(self, p: int) -> tuple[list[tuple[Any, ...]], tuple[Any, ...]]:
        """(rows of the kind's table in key order, (last batch id, position JSON, observed time)) of partition p."""
        return dump(self.conns[p], self.spec.kind)

    def close(self) -> None:
        for c in self.conns:
            c.close()


def dump(c: sqlite3.Connection, kind: StoreKind) -> tuple[list[tuple[Any, ...]], tuple[Any, ...]]:
    table, pk = TABLES[kind]
    rows = c.execute(f"SELECT * FROM {table} ORDER BY {pk}").fetchall()
    last, text, observed = c.execute("SELECT last_batch_id, position, observed_ts FROM meta").fetchone()
    return rows, (last, Position.from_json(text), observed)
