"""Stored forms → a store relation's rows: changelog records and partition files alike, decoded once.

A changelog record holds one batch's canonical change rows of one partition (``engine/batch.py``: ``k``, ``ts``,
``ws``, ``we``, ``del``, ``v0`` …, internal columns after the values), in arrival order: of several changes to one
row the last wins, as the store's merge applies them. So for key-value, window and session stores a record alone
says each touched row's new contents (or that it is gone). Versioned records are versions whose effect on the
current versions depends on what the store held (``versioned.py``).
"""

from __future__ import annotations

from collections.abc import Iterable
from itertools import repeat
from typing import Any

import pyarrow as pa

from ..catalog.schema import SqlType, StoreKind, StoreSpec
from ..engine.batch import DELETED, KEY, TS, WE, WS, value_name
from ..engine.codec import ValueCodec

__all__ = ["RowMaker", "record_changes", "snapshot_sql"]

Row = tuple[Any, ...]


class RowMaker:
    """Builds rows in ``spec.columns()`` order from stored forms, and the identity a row is known by (stored)."""

    def __init__(self, spec: StoreSpec) -> None:
        self.spec = spec
        self.kind = spec.kind
        self.n = len(spec.values)
        self.codec = ValueCodec(spec)
        self.composite = spec.composite
        self.windowed = spec.kind in (StoreKind.WINDOW, StoreKind.SESSION)
        self.nulls = (None,) * self.n
        # stored forms readers get as they are, but for booleans (0/1): rows of whole columns at once (``columns``)
        plain = (SqlType.BIGINT, SqlType.INTEGER, SqlType.DOUBLE, SqlType.VARCHAR, SqlType.TIMESTAMP, SqlType.DATE,
                 SqlType.BLOB, SqlType.BOOLEAN)
        self.whole_columns = (not spec.composite and spec.key.type in plain and spec.key.type is not SqlType.BOOLEAN
                              and all(c.type in plain for c in spec.values) and spec.kind is not StoreKind.VERSIONED)
        self.booleans = frozenset(i for i, c in enumerate(spec.values) if c.type is SqlType.BOOLEAN)

    def key_columns(self, raw_key: Any) -> tuple[Any, ...]:
        key = self.codec.key(raw_key)
        return tuple(key) if self.composite else (key,)

    def row(self, raw_key: Any, values: Any, ts: Any = None, ws: Any = None, we: Any = None) -> Row:
        """A row; ``values`` the stored value columns (None: a deleted row, whose values are all None). For a
        versioned store ``ts`` is the version's valid_from (a current version: valid_to None)."""
        keys = self.key_columns(raw_key)
        vals = self.nulls if values is None else self.codec.plain_value(values, 0)
        kind = self.kind
        if kind is StoreKind.KEY_VALUE:
            return (*keys, *vals)
        if kind is StoreKind.TIMESTAMPED_KEY_VALUE:
            return (*keys, *vals, None if values is None else ts)
        if kind is StoreKind.VERSIONED:
            return (*keys, *vals, None if values is None else ts, None)
        return (*keys, ws, we, *vals)


class RecordRows:
    """One non-versioned record's rows as column lists (read from Arrow in C), with the index of the last change
    of each row it touches; rows are built only when asked for (``row``)."""

    __slots__ = ("maker", "keys", "dels", "vals", "ts", "ws", "we", "final")

    def __init__(self, maker: RowMaker, rows: pa.Table) -> None:
        n = len(rows)
        self.maker = maker
        self.keys = rows.column(KEY).to_pylist() if n else []
        self.dels = rows.column(DELETED).to_pylist() if n and DELETED in rows.column_names else [False] * n
        self.vals = [rows.column(value_name(i)).to_pylist() for i in range(maker.n)] if n else []
        self.ts = rows.column(TS).to_pylist() if n and TS in rows.column_names else [None] * n
        final: dict[Any, int] = {}
        if maker.windowed and n:
            self.ws, self.we = rows.column(WS).to_pylist(), rows.column(WE).to_pylist()
            for i, ident in enumerate(zip(self.keys, self.ws, self.we)):
                final[ident] = i
        else:
            self.ws = self.we = None
            for i, k in enumerate(self.keys):
                final[k] = i
        self.final = final  # identity -> the index of its last change: the one the store kept

    def row(self, i: int) -> Row | None:
        """The row change ``i`` leaves (None: it deletes)."""
        if self.dels[i]:
            return None
        ws = self.ws[i] if self.ws is not None else None
        we = self.we[i] if self.we is not None else None
        return self.maker.row(self.keys[i], [c[i] for c in self.vals], self.ts[i], ws, we)

    def changes(self) -> dict[Any, Row | None]:
        return {ident: self.row(i) for ident, i in self.final.items()}

    def whole(self, p: int, tail: str) -> tuple[list[Row], list[Row], list[tuple[int, Any, Row, bool]]]:
        """(upserts, deletes, (partition, key, row, deleted) of each) with ``p`` and ``tail`` after each row, built
        column-wise (zip in C, no Python frame per row): for ``maker.whole_columns`` specs."""
        maker = self.maker
        n = len(self.keys)
        if n == 0:
            return [], [], []
        if len(self.final) == n:
            def pick(col: list[Any]) -> list[Any]:
                return col
        else:
            idx = sorted(self.final.values())

            def pick(col: list[Any]) -> list[Any]:
                return [col[i] for i in idx]
        keys, dels = pick(self.keys), pick(self.dels)
        vals = [pick(c) for c in self.vals]
        for i in maker.booleans:
            vals[i] = [None if v is None else bool(v) for v in vals[i]]
        if maker.kind is StoreKind.KEY_VALUE:
            cols = [keys, *vals]
        elif maker.kind is StoreKind.TIMESTAMPED_KEY_VALUE:
            cols = [keys, *vals, pick(self.ts)]
        else:
            assert self.ws is not None and self.we is not None
            cols = [keys, pick(self.ws), pick(self.we), *vals]
        rows = list(zip(*cols, repeat(p), repeat(tail)))
        if not any(dels):
            return rows, [], list(zip(repeat(p), keys, rows, repeat(False)))
        ident_width = 3 if maker.windowed else 1
        blank = (None,) * (len(cols) - ident_width)
        upserts, deletes, marked = [], [], []
        for key, row, gone in zip(keys, rows, dels):
            if gone:
                row = (*row[:ident_width], *blank, p, tail) if maker.windowed else (row[0], *blank, p, tail)
                deletes.append(row)
            else:
                upserts.append(row)
            marked.append((p, key, row, bool(gone)))
        return upserts, deletes, marked


def record_changes(maker: RowMaker, rows: pa.Table) -> dict[Any, Row | None]:
    """Each row a non-versioned record touches → its new row, or None when it is deleted (the last change wins).

    Keys are stored identities: the stored key, with ``(ws, we)`` for window and session stores.
    """
    return RecordRows(maker, rows).changes()


def deleted_row(maker: RowMaker, ident: Any) -> Row:
    """The row a delete shows: the identity columns, every other store column None."""
    if maker.windowed:
        k, ws, we = ident
        return maker.row(k, None, None, ws, we)
    return maker.row(ident, None)


def snapshot_sql(spec: StoreSpec) -> str:
    """A partition's rows in stored forms, as ``raw_rows`` reads them (a versioned store: each key's latest
    version, tombstones too, which a catch-up needs and the answer leaves out)."""
    v = "".join(f", v{i}" for i in range(len(spec.values)))
    if spec.kind in (StoreKind.KEY_VALUE, StoreKind.TIMESTAMPED_KEY_VALUE):
        return f"SELECT k, ts{v} FROM kv"
    if spec.kind is StoreKind.VERSIONED:
        return f"SELECT k, vf, tomb{v} FROM ver WHERE vt IS NULL"
    return f"SELECT k, ws, we, ts{v} FROM win"


def raw_rows(maker: RowMaker, raw: Iterable[tuple[Any, ...]]) -> dict[Any, Row | None]:
    """``snapshot_sql``'s rows → identity → row (a versioned key whose latest version is a tombstone → None)."""
    out: dict[Any, Row | None] = {}
    n = maker.n
    if maker.windowed:
        for r in raw:
            out[(r[0], r[1], r[2])] = maker.row(r[0], r[4:4 + n], r[3], r[1], r[2])
    elif maker.kind is StoreKind.VERSIONED:
        for r in raw:
            out[r[0]] = None if r[2] else maker.row(r[0], r[3:3 + n], r[1])
    else:
        for r in raw:
            out[r[0]] = maker.row(r[0], r[2:2 + n], r[1])
    return out
