"""Aggregating a table (issue 16 item 6): counts and sums per group of each key's CURRENT value, with retraction.

A changelog topic is a table: the latest record of a key is its row, a
record with all-null values deletes it. ``GROUP BY category`` over that
table must move a key from its old group to its new one when its row
changes (ksqlDB's table aggregation, Kafka Streams' ``KGroupedTable`` adder
and subtractor). Spark's update-mode aggregation has no subtractor, so:

1. one stateful operator, keyed by the table key (``applyInPandasWithState``,
   state in the checkpoint), remembers each key's previous row and emits, per
   key and batch, ``(old group, old values, new group, new values)``;
2. foreachBatch turns those into deltas per group (-1/-old for the old row,
   +1/+new for the new), reads the groups' current aggregates from the store
   and writes the new ones (a group whose count reaches 0 is deleted),
   with the batch's Position and id.

Exactly once: a replayed batch recomputes the same deltas from the same
checkpointed state, and every store partition that applied the batch id
skips it; the ones that did not read the aggregates as they were before it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ..catalog.partitioner import partition_for_key
from ..catalog.schema import coerce_key
from ..iqv2.position import PositionBound
from ..iqv2.query import MultiKeyQuery

__all__ = ["retraction_columns", "retract_rows", "group_deltas", "aggregate_rows"]


def retraction_columns(group: str, sums: Sequence[str]) -> tuple[list[str], list[str]]:
    """(state columns, output columns) of the stateful step; state = the key's previous group and summed values."""
    state = ["g", *(f"s{i}" for i in range(len(sums)))]
    out = ["k", "old_g", *(f"old_s{i}" for i in range(len(sums))), "new_g", *(f"new_s{i}" for i in range(len(sums)))]
    return state, out


def _plain(v: Any, kind: str | None) -> Any:
    """A pandas cell → the Python value Spark's state encoder takes (a float64 cell of a bigint column → int)."""
    if v is None or v != v:  # None, NaN, NaT
        return None
    v = v.item() if hasattr(v, "item") else v
    if kind == "int":
        return int(v)
    if kind == "float":
        return float(v)
    return v


def retract_rows(key: tuple[Any, ...], frames: Iterator[Any], state: Any, *, group: str, sums: Sequence[str],
                 value_cols: Sequence[str], kinds: Sequence[str | None] = ()) -> Iterator[Any]:
    """The ``applyInPandasWithState`` function: one output row per key and batch (old row → new row).

    ``kinds`` ("int", "float" or None) per (group, sums…): pandas turns an integer column holding a null into
    float64, and Spark's state encoder would store such a float in a bigint field as null.
    """
    import pandas as pd

    pdf = pd.concat(list(frames), ignore_index=True)
    order = [c for c in ("topic", "partition", "offset") if c in pdf.columns]
    if order:
        pdf = pdf.sort_values(order, kind="stable")
    old = state.get if state.exists else None
    last = pdf.iloc[-1]
    deleted = all(pd.isna(last[c]) for c in value_cols)  # a tombstone: the key's row is gone
    kinds = list(kinds) or [None] * (1 + len(sums))
    new = None if deleted else tuple(_plain(last[c], k) for c, k in zip((group, *sums), kinds))
    if new is not None and new[0] is None:
        new = None  # a row without a group is in no group (as Kafka Streams drops null group keys)
    if new is None:
        state.remove()
    else:
        state.update(new)
    none = (None,) * (1 + len(sums))
    row = (key[0], *(old if old is not None else none), *(new if new is not None else none))
    yield pd.DataFrame([row], columns=retraction_columns(group, sums)[1])


def group_deltas(table: pa.Table, sum_types: Sequence[str]) -> pa.Table:
    """The stateful step's rows → one row per touched group: ``g``, ``dc`` (count delta), ``d0``… (sum deltas).

    ``sum_types`` says per sum whether it is ``int`` (exact int64 arithmetic) or ``float``.
    """
    n_sums = len(sum_types)
    parts = []
    for side, sign in (("old", -1), ("new", 1)):
        g = table.column(f"{side}_g")
        keep = pc.is_valid(g)
        cols = {"g": pc.filter(g, keep), "dc": pa.array(np.full(pc.sum(keep.cast(pa.int64())).as_py() or 0, sign,
                                                               dtype=np.int64))}
        for i in range(n_sums):
            t = pa.int64() if sum_types[i] == "int" else pa.float64()
            v = pc.fill_null(pc.filter(table.column(f"{side}_s{i}"), keep).cast(t), 0)
            cols[f"d{i}"] = pc.multiply_checked(v, pa.scalar(sign, t))
        parts.append(pa.table(cols))
    both = pa.concat_tables(parts, promote_options="permissive")
    aggs = [("dc", "sum"), *((f"d{i}", "sum") for i in range(n_sums))]
    out = both.group_by("g", use_threads=False).aggregate(aggs)
    names = ["dc", *(f"d{i}" for i in range(n_sums))]
    return pa.table({"g": out.column("g"), **{n: out.column(f"{n}_sum") for n in names}})


def aggregate_rows(spec: Any, store_of: Callable[[int], Any], deltas: pa.Table, batch_ts: int | None,
                   sum_types: Sequence[Any]) -> pa.Table:
    """Current aggregates of the touched groups (read from the store's partitions) plus the deltas → a change table.

    ``store_of(partition)`` is the derived store's PartitionStore (its writer's); a group whose count
    reaches 0 (or below, which a consistent changelog never gives) is deleted.
    """
    groups = [coerce_key(spec.key.type, g) for g in deltas.column("g").to_pylist()]
    current: dict[Any, Any] = {}
    by_part: dict[int, list[Any]] = {}
    for g in groups:
        by_part.setdefault(partition_for_key(g, spec.partitions, spec.key.type), []).append(g)
    for p, keys in by_part.items():
        res = store_of(p).query(MultiKeyQuery.with_keys(keys), PositionBound.unbounded())
        if res.is_failure:
            raise RuntimeError(f"store {spec.name!r} partition {p}: cannot read the current aggregates: "
                               f"{res.failure_message}")
        for kv in res.result:
            current[kv.key] = kv.value
    n_sums = len(sum_types)
    counts, sums_out, deleted = [], [[] for _ in range(n_sums)], []
    dc = deltas.column("dc").to_pylist()
    ds = [deltas.column(f"d{i}").to_pylist() for i in range(n_sums)]
    for j, g in enumerate(groups):
        cur = current.get(g)
        count = (cur[0] if cur is not None else 0) + dc[j]
        deleted.append(count <= 0)
        counts.append(None if count <= 0 else count)
        for i in range(n_sums):
            base = (cur[1 + i] or 0) if cur is not None else 0
            sums_out[i].append(None if count <= 0 else base + ds[i][j])
    n = len(groups)
    cols: dict[str, Any] = {"k": deltas.column("g"), "v0": pa.array(counts, pa.int64())}
    for i in range(n_sums):
        cols[f"v{i + 1}"] = pa.array(sums_out[i], pa.int64() if sum_types[i] == "int" else pa.float64())
    ts = pa.nulls(n, pa.int64()) if batch_ts is None else pa.array(np.full(n, batch_ts, dtype=np.int64))
    cols["ts"] = ts
    cols["del"] = pa.array(deleted, pa.bool_())
    return pa.table(cols)
