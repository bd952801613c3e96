"""Aggregating a table (issue 16 item 6): count, sum, min, max, avg per group of each key's CURRENT value,
with retraction.

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

import json
from collections.abc import Callable, Iterator, Sequence
from decimal import ROUND_HALF_UP, Decimal
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ..catalog.decimals import EXACT, DecimalType, decode_decimal, parse_decimal
from ..catalog.partitioner import partition_for_key
from ..catalog.schema import coerce_key

__all__ = ["retraction_columns", "retract_rows", "group_deltas", "aggregate_rows", "parse_aggregates", "needs_state",
           "AGG_FUNCTIONS", "MAX_DISTINCT"]


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


AGG_FUNCTIONS = ("sum", "min", "max", "avg")
MAX_DISTINCT = 10_000  # distinct values a group's min/max keeps (its multiset); more fails the store, saying so


def parse_aggregates(sum_types: Sequence[str]) -> list[tuple[str, str]]:
    """``("int", "min:float", "avg:int")`` → ``[("sum", "int"), ("min", "float"), ("avg", "int")]``.

    A bare kind is a sum (what ``StoreDecl.sum_types`` held before min/max/avg).
    """
    out = []
    for t in sum_types:
        fn, _, kind = t.rpartition(":")
        out.append((fn or "sum", kind))
    return out


def result_decimal(fn: str, kind: str) -> DecimalType:
    """The DECIMAL an aggregate of a ``decimal(p,s)`` column has, as Spark types it (``DecimalType.bounded``):
    sum (p+10, s), min/max (p, s), avg (p+4, s+4), precision and scale each capped at 38."""
    d = parse_decimal(kind)
    assert d is not None
    p, s = {"sum": (d.precision + 10, d.scale), "avg": (d.precision + 4, d.scale + 4)}.get(fn, (d.precision, d.scale))
    return DecimalType(min(p, 38), min(s, 38))


def _arrow_kind(kind: str) -> pa.DataType:
    """The Arrow type deltas of a kind add up in: int64, float64, or decimal128(38, s) (exact)."""
    if kind == "int":
        return pa.int64()
    if kind.startswith("decimal("):
        d = parse_decimal(kind)
        assert d is not None
        return pa.decimal128(38, d.scale)
    return pa.float64()


def _jsonable(v: Any) -> Any:
    return str(v) if isinstance(v, Decimal) else v


def needs_state(sum_types: Sequence[str]) -> bool:
    """Does the store keep an internal state column (min/max multisets, avg sums and counts)?"""
    return any(fn != "sum" for fn, _k in parse_aggregates(sum_types))


def group_deltas(table: pa.Table, sum_types: Sequence[str]) -> pa.Table:
    """The stateful step's rows → one row per touched group: ``g``, ``dc`` (count delta), ``d0``… (sum deltas).

    ``sum_types`` says per aggregate (``parse_aggregates``) whether its values are ``int`` (exact int64
    arithmetic) or ``float``. An avg also gets ``n<i>`` (the delta of its non-null count); a min/max gets
    ``m<i>``: the JSON of its multiset delta ``[[value, ±count], …]`` (built in Python: a batch's touched keys).
    """
    aggs = parse_aggregates(sum_types)
    parts = []
    for side, sign in (("old", -1), ("new", 1)):
        g = table.column(f"{side}_g")
        keep = pc.is_valid(g)
        cols = {"g": pc.filter(g, keep), "dc": pa.array(np.full(pc.sum(keep.cast(pa.int64())).as_py() or 0, sign,
                                                               dtype=np.int64))}
        for i, (fn, kind) in enumerate(aggs):
            t = _arrow_kind(kind)
            raw = pc.filter(table.column(f"{side}_s{i}"), keep).cast(t)
            filled = pc.fill_null(raw, pa.scalar(0, pa.int64()).cast(t))
            cols[f"d{i}"] = filled if sign > 0 else pc.negate_checked(filled)
            if fn == "avg":
                cols[f"n{i}"] = pc.multiply(pc.is_valid(raw).cast(pa.int64()), pa.scalar(sign, pa.int64()))
        parts.append(pa.table(cols))
    both = pa.concat_tables(parts, promote_options="permissive")
    names = ["dc", *(f"d{i}" for i in range(len(aggs))), *(f"n{i}" for i, (fn, _k) in enumerate(aggs) if fn == "avg")]
    out = both.group_by("g", use_threads=False).aggregate([(n, "sum") for n in names])
    result = {"g": out.column("g"), **{n: out.column(f"{n}_sum") for n in names}}
    multi = [i for i, (fn, _k) in enumerate(aggs) if fn in ("min", "max")]
    if multi:
        result.update(_multiset_deltas(table, out.column("g").to_pylist(), multi))
    return pa.table(result)


def _multiset_deltas(table: pa.Table, groups: list[Any], aggs: Sequence[int]) -> dict[str, pa.Array]:
    """Per min/max aggregate ``i``: ``m<i>``, each group's multiset delta as JSON ``[[value, ±count], …]``."""
    index = {g: j for j, g in enumerate(groups)}
    out = {}
    for i in aggs:
        acc: list[dict[Any, int]] = [{} for _ in groups]
        for side, sign in (("old", -1), ("new", 1)):
            for g, v in zip(table.column(f"{side}_g").to_pylist(), table.column(f"{side}_s{i}").to_pylist()):
                if g is not None and v is not None and v == v:  # NaN is no value (as a null)
                    d = acc[index[g]]
                    d[v] = d.get(v, 0) + sign
        out[f"m{i}"] = pa.array([json.dumps([[_jsonable(v), c] for v, c in d.items() if c]) for d in acc], pa.string())
    return out


def aggregate_rows(spec: Any, store_of: Callable[[int], Any], deltas: pa.Table, batch_ts: int | None,
                   sum_types: Sequence[Any]) -> pa.Table:
    """Current aggregates of the touched groups (read from the store's partitions) plus the deltas → a change table.

    ``store_of(partition)`` is the derived store's PartitionStore (its writer's); a group whose count
    reaches 0 (or below, which a consistent changelog never gives) is deleted. Min/max and avg read and
    write the store's internal state column (``StoreSpec.internal``): each min/max's multiset of the
    group's current values (value → how many rows hold it), each avg's exact sum and non-null count, so a
    retracted row takes its value out exactly (a min whose last holder moved away falls to the next value).
    """
    aggs = parse_aggregates(sum_types)
    stateful = needs_state(sum_types)
    groups = [coerce_key(spec.key.type, g) for g in deltas.column("g").to_pylist()]
    current: dict[Any, Any] = {}
    by_part: dict[int, list[Any]] = {}
    for g in groups:
        by_part.setdefault(partition_for_key(g, spec.partitions, spec.key.type), []).append(g)
    for p, keys in by_part.items():
        try:
            current.update(store_of(p).stored_rows(keys))
        except Exception as exc:  # noqa: BLE001 - named with the store and partition
            raise RuntimeError(f"store {spec.name!r} partition {p}: cannot read the current aggregates: "
                               f"{type(exc).__name__}: {exc}") from exc
    n_aggs = len(aggs)
    counts: list[Any] = []
    outs: list[list[Any]] = [[] for _ in range(n_aggs)]
    states: list[str | None] = []
    deleted = []
    dc = deltas.column("dc").to_pylist()
    ds = [deltas.column(f"d{i}").to_pylist() for i in range(n_aggs)]
    extra = {n: deltas.column(n).to_pylist() for n in deltas.column_names if n[0] in "nm" and n[1:].isdigit()}
    types = [c.type for c in spec.values[1:1 + n_aggs]]
    for g, cur in list(current.items()):  # stored DECIMALs are their 16 bytes: the numbers, to add to
        if any(isinstance(t, DecimalType) for t in types):
            current[g] = (cur[0], *(decode_decimal(t, v) if isinstance(t, DecimalType) and v is not None else v
                                    for t, v in zip(types, cur[1:1 + n_aggs])), *cur[1 + n_aggs:])
    for j, g in enumerate(groups):
        cur = current.get(g)
        count = (cur[0] if cur is not None else 0) + dc[j]
        gone = count <= 0
        deleted.append(gone)
        counts.append(None if gone else count)
        state = json.loads(cur[1 + n_aggs]) if stateful and cur is not None and cur[1 + n_aggs] else {}
        for i, (fn, kind) in enumerate(aggs):
            if gone:
                outs[i].append(None)
            elif fn == "sum":
                base = (cur[1 + i] or 0) if cur is not None else 0
                outs[i].append(EXACT.add(base, ds[i][j]) if isinstance(ds[i][j], Decimal) else base + ds[i][j])
            elif fn == "avg":
                total, n = state.get(str(i), (0, 0))
                if isinstance(types[i], DecimalType):  # exact: the sum as text, the mean rounded half up, as Spark
                    total = EXACT.add(Decimal(total), ds[i][j])
                    n = n + extra[f"n{i}"][j]
                    state[str(i)] = [str(total), n]
                    step = Decimal(1).scaleb(-types[i].scale, EXACT)
                    outs[i].append(EXACT.divide(total, n).quantize(step, ROUND_HALF_UP, EXACT) if n > 0 else None)
                    continue
                total, n = total + ds[i][j], n + extra[f"n{i}"][j]
                state[str(i)] = [total, n]
                outs[i].append(total / n if n > 0 else None)
            else:
                outs[i].append(_apply_multiset(spec, g, i, fn, kind, state, extra[f"m{i}"][j]))
        states.append(None if gone or not stateful else json.dumps(state, separators=(",", ":")))
    n = len(groups)
    cols: dict[str, Any] = {"k": deltas.column("g"), "v0": pa.array(counts, pa.int64())}
    for i, (fn, kind) in enumerate(aggs):
        t = types[i]
        at = (pa.decimal128(t.precision, t.scale) if isinstance(t, DecimalType)
              else pa.int64() if kind == "int" and fn != "avg" else pa.float64())
        cols[f"v{i + 1}"] = pa.array(outs[i], at)
    if stateful:
        cols[f"v{n_aggs + 1}"] = pa.array(states, pa.string())
    ts = pa.nulls(n, pa.int64()) if batch_ts is None else pa.array(np.full(n, batch_ts, dtype=np.int64))
    cols["ts"] = ts
    cols["del"] = pa.array(deleted, pa.bool_())
    return pa.table(cols)


def _apply_multiset(spec: Any, group: Any, i: int, fn: str, kind: str, state: dict[str, Any], delta: str) -> Any:
    """A min/max's multiset (in ``state[str(i)]``) plus this batch's delta → the new min or max (None: empty)."""
    cast: Callable[[Any], Any] = int if kind == "int" else Decimal if kind.startswith("decimal(") else float
    bag = {cast(v): c for v, c in state.get(str(i), ())}
    for v, c in json.loads(delta):
        v = cast(v)
        left = bag.get(v, 0) + c
        if left > 0:
            bag[v] = left
        else:
            bag.pop(v, None)
    if len(bag) > MAX_DISTINCT:
        raise RuntimeError(
            f"store {spec.name!r}: group {group!r}: {fn} of value column {spec.values[1 + i].name!r} would keep "
            f"{len(bag)} distinct values (at most {MAX_DISTINCT}): a min/max under retraction must remember every "
            "current value of its group; aggregate a coarser column, or use a windowed or append-only aggregate")
    state[str(i)] = [[_jsonable(v), c] for v, c in sorted(bag.items())]
    if not bag:
        return None
    return min(bag) if fn == "min" else max(bag)
