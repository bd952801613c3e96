"""A batch of changes as one Arrow table: checked and encoded at once, split by partition without Python per row.

The change table has the columns of the store tables: ``k`` (the key),
``v0`` … ``v{n-1}`` (the value columns in ``StoreSpec.values`` order), and
the optional ``ts`` (record time, epoch ms), ``ws``/``we`` (window bounds)
and ``del`` (true: the row deletes; for versioned stores it is a tombstone).
Rows apply in table order, so of two changes to the same row the later wins,
exactly as a list of ``Change`` objects applies.

``encode`` is the vectorized twin of the per-change checks: every rule has a
message naming the store, the batch, the change (its index in the table) and
its key, and a batch with one bad change writes nothing. ``changes_to_table``
turns ``Change`` objects into the same table (their Python values go through
``ValueCodec`` first), so both entry points share one write path.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any, NamedTuple

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ..catalog.partitioner import partitions_for_serialized
from ..catalog.schema import SqlType, StoreKind, StoreSpec
from .change import Change
from .codec import BatchError, ValueCodec
from .columns import COLUMN_TYPES, ColumnError, column_type, first_true, key_column_type, serialized_keys
from .key_order import sort_order

__all__ = ["KEY", "TS", "WS", "WE", "DELETED", "value_name", "encode", "changes_to_table", "PartitionRows",
           "split_by_partition", "final_deletes", "stream_time"]

KEY, TS, WS, WE, DELETED = "k", "ts", "ws", "we", "del"
_TIMES = (TS, WS, WE)
_TIME_NAMES = {TS: "timestamp", WS: "window_start", WE: "window_end"}


def value_name(i: int) -> str:
    return f"v{i}"


def _row(where: str, table: pa.Table, i: int) -> str:
    """``<where> change #i (key …)``: the row a message is about, with its key when it has one."""
    key = table.column(KEY)[i].as_py() if KEY in table.column_names and i < len(table) else None
    return f"{where} change #{i}" + ("" if key is None else f" (key {key!r})")


def encode(spec: StoreSpec, table: pa.Table, where: str) -> pa.Table:
    """The canonical table (k, ts, ws, we, del, v0…) in stored forms, or BatchError naming the first bad change.

    ``where`` is ``store 'x' batch N``. Deleted rows keep no values (a
    versioned tombstone has none); a window store's missing ``we`` is
    ``ws + window_size_ms``.
    """
    n_vals = len(spec.values)
    names = [value_name(i) for i in range(n_vals)]
    stored = spec.stored_values()
    internal = [value_name(i) for i in range(n_vals, len(stored))]  # optional: null when absent
    allowed = {KEY, DELETED, *_TIMES, *names, *internal}
    unknown = [c for c in table.column_names if c not in allowed]
    if unknown:
        raise BatchError(f"{where}: unknown column(s) {unknown}; a change table has {KEY}, "
                         f"{', '.join(names) + ', ' if names else ''}{TS}, {WS}, {WE}, {DELETED}")
    if KEY not in table.column_names:
        raise BatchError(f"{where}: the change table has no key column {KEY!r}")
    missing = [c for c in names if c not in table.column_names]
    if missing:
        raise BatchError(f"{where}: the change table lacks value column(s) {missing} "
                         f"({', '.join(spec.value_names())})")
    n = len(table)
    key = _encode_column(table, KEY, key_column_type(spec), where, f"key column {spec.key.name!r}")
    bad = first_true(key.is_null())
    if bad is not None:
        raise BatchError(f"{where} change #{bad}: key column {spec.key.name!r}: the key should not be null")
    if spec.key.type is SqlType.DOUBLE:
        bad = first_true(pc.is_nan(key))
        if bad is not None:
            raise BatchError(f"{_row(where, table, bad)}: key column {spec.key.name!r}: NaN is not a key")
    deleted = _deleted(table, n, where)
    any_deleted = bool(pc.any(deleted).as_py())
    times = {t: _time_column(table, t, n, where) for t in _TIMES}
    cols: dict[str, pa.Array] = {KEY: key, **times, DELETED: deleted}
    for i, col in enumerate(spec.values):
        arr = _encode_column(table, names[i], column_type(col.type), where, f"value column {col.name!r}")
        if any_deleted:
            arr = pc.if_else(deleted, pa.nulls(n, arr.type), arr)
        if not col.nullable:
            bad = first_true(pc.and_(arr.is_null(), pc.invert(deleted)))
            if bad is not None:
                raise BatchError(f"{_row(where, table, bad)}: value column {col.name!r} is NOT NULL but got None")
        cols[names[i]] = arr
    for i, name in enumerate(internal, start=n_vals):
        ctype = column_type(stored[i].type)
        cols[name] = (_encode_column(table, name, ctype, where, f"internal column {stored[i].name!r}")
                      if name in table.column_names else pa.nulls(n, ctype.storage))
    cols[WE] = _check_kind(spec, table, cols, deleted, where)
    return pa.table(cols)


def _encode_column(table: pa.Table, name: str, ctype: Any, where: str, what: str) -> pa.Array:
    try:
        return ctype.encode(table.column(name))
    except ColumnError as exc:
        at = f"{where} change #{exc.row}" if exc.row is not None else where
        raise BatchError(f"{at}: {what}: {exc}") from None
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError, OverflowError) as exc:
        raise BatchError(f"{where}: {what}: {exc}") from None


def _deleted(table: pa.Table, n: int, where: str) -> pa.Array:
    if DELETED not in table.column_names:
        return pa.array(np.zeros(n, dtype=bool))
    col = table.column(DELETED).combine_chunks()
    if not pa.types.is_boolean(col.type):
        raise BatchError(f"{where}: column {DELETED!r} must be boolean, got {col.type}")
    return pc.fill_null(col, False)


def _time_column(table: pa.Table, name: str, n: int, where: str) -> pa.Array:
    if name not in table.column_names:
        return pa.nulls(n, pa.int64())
    col = table.column(name)
    t = col.type
    if not (pa.types.is_integer(t) or pa.types.is_timestamp(t) or pa.types.is_null(t)):
        raise BatchError(f"{where}: {_TIME_NAMES[name]} must be epoch milliseconds (int), got an Arrow {t} column")
    return _encode_column(table, name, COLUMN_TYPES[SqlType.TIMESTAMP], where, _TIME_NAMES[name])


def _check_kind(spec: StoreSpec, table: pa.Table, cols: dict[str, pa.Array], deleted: pa.Array,
                where: str) -> pa.Array:
    """The per-kind rules of a change; returns the window ends (defaulted for window stores)."""
    kind = spec.kind
    ts, ws, we = cols[TS], cols[WS], cols[WE]
    if kind is StoreKind.TIMESTAMPED_KEY_VALUE:
        bad = first_true(pc.and_(ts.is_null(), pc.invert(deleted)))
        if bad is not None:
            raise BatchError(f"{_row(where, table, bad)}: a timestamped key-value store needs the record timestamp")
    if kind is StoreKind.VERSIONED:
        bad = first_true(ts.is_null())
        if bad is not None:
            raise BatchError(f"{_row(where, table, bad)}: a versioned store needs the version timestamp (valid_from)")
    if kind in (StoreKind.WINDOW, StoreKind.SESSION):
        bad = first_true(ws.is_null())
        if bad is not None:
            raise BatchError(f"{_row(where, table, bad)}: window_start is required for a {kind.value} store")
        if we.null_count and kind is StoreKind.WINDOW and spec.window_size_ms:
            we = pc.coalesce(we, pc.add_checked(ws, pa.scalar(spec.window_size_ms, pa.int64())))
        bad = first_true(we.is_null())
        if bad is not None:
            raise BatchError(f"{_row(where, table, bad)}: window_end is required for a {kind.value} store")
        bad = first_true(pc.less(we, ws))
        if bad is not None:
            raise BatchError(f"{_row(where, table, bad)}: window_end {we[bad].as_py()} is before window_start "
                             f"{ws[bad].as_py()}")
    return we


# -- Change objects -> the same table -----------------------------------------------------------
def _as_change(ch: Any, where: str) -> Change:
    if isinstance(ch, Change):
        return ch
    if isinstance(ch, Mapping):
        try:
            return Change(**ch)
        except TypeError as exc:
            raise BatchError(f"{where}: {exc}") from None
    if isinstance(ch, (tuple, list)) and 2 <= len(ch) <= 5:
        return Change(*ch)
    raise BatchError(f"{where}: expected a Change(key, value, timestamp, window_start, window_end), got {ch!r}")


def _int_or_none(v: Any, what: str, where: str) -> int | None:
    if v is None:
        return None
    if isinstance(v, bool) or not isinstance(v, int):
        raise BatchError(f"{where}: {what} must be epoch milliseconds (int), got {v!r}")
    return v


def changes_to_table(spec: StoreSpec, codec: ValueCodec, changes: Iterable[Any], where: str) -> pa.Table:
    """``Change`` objects (or their tuple/mapping forms) → a change table; Python values coerced per column.

    Only the Python-level coercion happens here (a string for a DATE, a
    mapping for a value); every rule the table must satisfy is ``encode``'s.
    """
    n_vals = codec.n
    keys: list[Any] = []
    vals: list[list[Any]] = [[] for _ in range(n_vals)]
    times: dict[str, list[Any]] = {TS: [], WS: [], WE: []}
    deleted: list[bool] = []
    nones = (None,) * n_vals
    for i, raw in enumerate(changes):
        at = f"{where} change #{i}"
        ch = _as_change(raw, at)
        keys.append(codec.write_key(ch.key, at))
        if ch.value is None:
            value: tuple[Any, ...] = nones
            deleted.append(True)
        else:
            value = codec.write_value(ch.value, at)
            deleted.append(False)
        for col, v in zip(vals, value):
            col.append(v)
        times[TS].append(_int_or_none(ch.timestamp, "timestamp", at))
        times[WS].append(_int_or_none(ch.window_start, "window_start", at))
        times[WE].append(_int_or_none(ch.window_end, "window_end", at))
    arrays: dict[str, pa.Array] = {KEY: _array(keys, key_column_type(spec).input_type(), where,
                                                f"key column {spec.key.name!r}")}
    for i, col in enumerate(spec.values):
        arrays[value_name(i)] = _array(vals[i], column_type(col.type).input_type(), where,
                                       f"value column {col.name!r}")
    for t, values in times.items():
        arrays[t] = _array(values, pa.int64(), where, _TIME_NAMES[t])
    arrays[DELETED] = pa.array(deleted, pa.bool_())
    return pa.table(arrays)


def _array(values: list[Any], t: pa.DataType, where: str, what: str) -> pa.Array:
    """A Python column → Arrow; a value Arrow cannot hold (an int past 64 bits) is named by its change."""
    try:
        return pa.array(values, type=t)
    except (pa.ArrowInvalid, pa.ArrowTypeError, OverflowError, TypeError, UnicodeError):
        pass
    for i, v in enumerate(values):
        try:
            pa.array([v], type=t)
        except (pa.ArrowInvalid, pa.ArrowTypeError, OverflowError, TypeError, UnicodeError) as exc:
            raise BatchError(f"{where} change #{i}: {what}: {v!r} cannot be stored ({exc})") from None
    raise BatchError(f"{where}: {what}: the column cannot be stored")  # pragma: no cover - some row must fail


# -- partitions -----------------------------------------------------------------------------------
class PartitionRows(NamedTuple):
    """One partition's share of a batch: canonical rows in application order, and its stream time."""

    rows: pa.Table
    observed: int | None


def stream_time(kind: StoreKind, rows: pa.Table) -> int | None:
    """The newest record time in ``rows`` (a window row without one counts its end), as the row path kept it."""
    if len(rows) == 0:
        return None
    ts = rows.column(TS)
    if kind in (StoreKind.WINDOW, StoreKind.SESSION):
        ts = pc.coalesce(ts, rows.column(WE))
    return pc.max(ts).as_py()


def split_by_partition(spec: StoreSpec, rows: pa.Table, identity: Sequence[str] | None = None) -> list[PartitionRows]:
    """The canonical rows of each store partition (murmur2 of the serialized key), order kept within each.

    With ``identity`` each partition's rows come sorted by it (stable: of two
    changes to one row the later stays later), the order the merge wants,
    with one ``take`` for the split and the sort together.
    """
    n = spec.partitions
    if len(rows) == 0:
        return [PartitionRows(rows, None) for _ in range(n)]
    if n == 1:
        if identity is not None and len(rows) > 1:
            rows = rows.take(pa.array(sort_order(rows, identity)))
        return [PartitionRows(rows, stream_time(spec.kind, rows))]
    data, offsets = serialized_keys(rows.column(KEY), spec.key.type)
    part = partitions_for_serialized(data, offsets, n)
    part = part.astype(np.uint8 if n <= 256 else np.uint16 if n <= 65536 else np.int64)
    order = (np.argsort(part, kind="stable") if identity is None else sort_order(rows, identity, first=part))
    bounds = np.searchsorted(part[order], np.arange(n + 1), side="left")
    grouped = rows.take(pa.array(order))
    out = []
    for p in range(n):
        share = grouped.slice(int(bounds[p]), int(bounds[p + 1] - bounds[p]))
        out.append(PartitionRows(share, stream_time(spec.kind, share)))
    return out


def final_deletes(rows: pa.Table, identity: tuple[str, ...]) -> pa.Table:
    """The rows a store whose deletes remove rows must stage: every upsert, and the deletes that come last.

    Upserts apply in order (the merge sorts by identity, then arrival), so
    only a delete followed by an upsert of the same row needs resolving: such
    a delete is dropped. Only rows sharing a key with some delete are grouped.
    """
    deleted = rows.column(DELETED)
    if not pc.any(deleted).as_py():
        return rows
    numbered = rows.select(list(identity)).append_column("__i", pa.array(np.arange(len(rows), dtype=np.int64)))
    if pa.types.is_floating(numbered.schema.field(KEY).type):  # SQLite holds -0.0 and 0.0 for one key (x + 0.0: -0.0 -> 0.0)
        numbered = numbered.set_column(numbered.column_names.index(KEY), KEY, pc.add(numbered.column(KEY), 0.0))
    keys = numbered.column(KEY)
    touched = numbered.filter(pc.is_in(keys, value_set=pc.unique(pc.filter(keys, deleted))))
    last = touched.group_by(list(identity), use_threads=False).aggregate([("__i", "max")]).column("__i_max")
    last_np = last.to_numpy()
    keep = ~deleted.to_numpy(zero_copy_only=False)
    finals = last_np[deleted.to_numpy(zero_copy_only=False)[last_np]]
    keep[finals] = True
    return rows.filter(pa.array(keep))
