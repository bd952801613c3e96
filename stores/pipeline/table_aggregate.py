"""Aggregating a table (issues 16 and 51): aggregates per group of each key's CURRENT row, with retraction.

A changelog topic is a table: the latest record of a key is its row, a
tombstone deletes it. ``GROUP BY category`` over that table must move a key
from its old group to its new one when its row changes (ksqlDB's table
aggregation, Kafka Streams' ``KGroupedTable`` adder and subtractor).

How (issue 51; issue 16 kept each key's previous row in Spark state through
``applyInPandasWithState`` and the groups' totals in the store): the
streaming query only projects the records, and foreachBatch keeps the table
in the store's side state (``side_state.py``): ``rows`` holds each key's
current row (its group, the aggregated values in stored forms, and the log
position of the record that made it), ``groups`` each group's count and its
sums and averages (kept incrementally: exact integer, double and DECIMAL
arithmetic). Per batch, the last record of each key replaces its row; the
groups its old and new rows are in are *touched*; and for each touched group
the store gets its current aggregates:

- count, sum, avg from ``groups`` (an avg is its exact sum over its exact
  non-null count, rounded half up for DECIMAL as Spark does);
- min, max, topk from ``rows`` through an index on (group, value): one seek
  each, exact whatever left the group (no multiset to keep, no cap);
- collect_list / collect_set from ``rows`` in log order (by the partition and
  offset of the record that gave each member its current value: a member
  that changes moves to the end, as in ksqlDB), nulls left out as Spark's
  ``collect_list`` does; at most ``MAX_COLLECT`` members, else the store
  fails saying so.

A group whose count reaches 0 is deleted; one that fails ``having`` is
deleted from the store but keeps its state, so it comes back when it
qualifies again (ksqlDB's HAVING on a table). A row failing ``where`` (a
filter on the table, computed by Spark per record) is in no group, nor is one
whose group column is null (Kafka Streams drops null group keys).

Exactly once: see ``side_state.py``; the touched groups of the last batch are
kept with it, so a replay writes the same rows.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Sequence
from dataclasses import dataclass
from decimal import ROUND_HALF_UP, Decimal
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ..catalog.decimals import EXACT, DecimalType, decode_decimal, parse_decimal
from ..catalog.nested import NestedType
from ..catalog.schema import SqlType
from ..engine.batch import DELETED, KEY, TS, value_name
from .side_state import SideState, arrow_from_stored, sql_type_of, stored_values

__all__ = ["Aggregate", "AggregatePlan", "TableAggregator", "AGG_FUNCTIONS", "MAX_COLLECT", "result_decimal",
           "latest_per_key"]

AGG_FUNCTIONS = ("sum", "min", "max", "avg", "collect_list", "collect_set", "topk", "topk_distinct")
MAX_COLLECT = 10_000  # members a collect_list/collect_set of one group may hold; more fails the store, saying so


@dataclass(frozen=True)
class Aggregate:
    """One output column: ``fn`` over source column ``source`` (an index into the plan's sources).

    ``kind``: "int", "float" or "decimal(p,s)" for sum/avg (how it adds up); ``k``: topk's count.
    """

    out: str
    fn: str
    source: int
    kind: str = ""
    k: int = 0


@dataclass(frozen=True)
class AggregatePlan:
    """What the aggregator needs: the table key's type, the group and source columns' types, the aggregates."""

    name: str
    key_type: Any
    group_types: tuple[Any, ...]
    source_types: tuple[Any, ...]
    aggregates: tuple[Aggregate, ...]
    value_types: tuple[Any, ...]  # the store's value columns: count, then one per aggregate
    value_names: tuple[str, ...]
    group_names: tuple[str, ...]
    having: Any = None  # a conditions.RowCondition over the store's columns, or None


def result_decimal(fn: str, kind: str) -> DecimalType:
    """The DECIMAL an aggregate of a ``decimal(p,s)`` column has, as Spark types it (``DecimalType.bounded``):
    sum (p+10, s), min/max (p, s), avg (p+4, s+4), precision and scale each capped at 38."""
    d = parse_decimal(kind)
    assert d is not None
    p, s = {"sum": (d.precision + 10, d.scale), "avg": (d.precision + 4, d.scale + 4)}.get(fn, (d.precision, d.scale))
    return DecimalType(min(p, 38), min(s, 38))


def latest_per_key(table: pa.Table, key: str = "__k") -> pa.Table:
    """Each key's last record of the batch in log order (topic, partition, offset when present); null keys dropped,
    as Kafka Streams drops null-key records."""
    names = table.column_names
    order = [(c, "ascending") for c in ("__topic", "__partition", "__offset") if c in names]
    if order:
        table = table.take(pc.sort_indices(table, order))
    table = table.filter(pc.is_valid(table.column(key)))
    if len(table) == 0:
        return table
    idx = pa.array(np.arange(len(table), dtype=np.int64))
    last = (pa.table({"k": table.column(key), "i": idx}).group_by("k", use_threads=False)
            .aggregate([("i", "max")]).column("i_max"))
    return table.take(pc.take(last, pc.sort_indices(last)))  # in log order


class TableAggregator:
    """The driver side of one table aggregate store: its side state, and batch → change table."""

    def __init__(self, plan: AggregatePlan, path: Path) -> None:
        self.plan = plan
        g = [f"g{i}" for i in range(len(plan.group_types))]
        s = [f"s{i}" for i in range(len(plan.source_types))]
        self._g, self._s = g, s
        gdef = ", ".join(f"{c} {sql_type_of(t)}" for c, t in zip(g, plan.group_types))
        sdef = "".join(f", {c} {sql_type_of(t)}" for c, t in zip(s, plan.source_types))
        gl = ", ".join(g)
        tables = [f"CREATE TABLE IF NOT EXISTS rows (k {sql_type_of(plan.key_type)} PRIMARY KEY, {gdef}{sdef}, "
                  "p INTEGER, o INTEGER)",
                  f"CREATE INDEX IF NOT EXISTS rows_g ON rows ({gl})",
                  f"CREATE TABLE IF NOT EXISTS groups ({gdef}, n INTEGER NOT NULL, agg TEXT, PRIMARY KEY ({gl}))",
                  f"CREATE TABLE IF NOT EXISTS touched ({gdef})"]
        for i in sorted({a.source for a in plan.aggregates if a.fn in ("min", "max", "topk", "topk_distinct")}):
            tables.append(f"CREATE INDEX IF NOT EXISTS rows_g_s{i} ON rows ({gl}, s{i})")
        self.state = SideState(path, tables, f"store {plan.name!r}")
        self._match = " AND ".join(f"{c} = ?" for c in g)

    def close(self) -> None:
        self.state.close()

    # -- one batch ---------------------------------------------------------------------------------------------
    def apply(self, batch_id: int, table: pa.Table, batch_ts: int | None) -> pa.Table | None:
        """The projected batch (``__k``, ``__g<i>``, ``__s<i>``, and ``__keep``/``__tomb``/``__topic``/
        ``__partition``/``__offset`` when present) → the store's change table (None: nothing to change)."""
        latest = latest_per_key(table)
        with self.state.batch(batch_id) as (con, fresh):
            if fresh:
                touched = self._update(con, latest)
                con.execute("DELETE FROM touched")
                con.executemany(f"INSERT INTO touched VALUES ({', '.join('?' * len(self._g))})", touched)
            else:  # a replay: the groups this batch touched, as it recorded them
                touched = [tuple(r) for r in con.execute("SELECT * FROM touched")]
            if not touched:
                return None
            return self._rows(con, touched, batch_ts)

    def _update(self, con: sqlite3.Connection, latest: pa.Table) -> list[tuple[Any, ...]]:
        plan, n = self.plan, len(latest)
        if n == 0:
            return []
        names = latest.column_names
        keys = stored_values(latest.column("__k"), plan.key_type)
        groups = [stored_values(latest.column(f"__g{i}"), t) for i, t in enumerate(plan.group_types)]
        sources = [stored_values(latest.column(f"__s{i}"), t) for i, t in enumerate(plan.source_types)]
        present = np.ones(n, dtype=bool)
        for col in groups:
            present &= np.array([v is not None for v in col], dtype=bool)
        if "__tomb" in names:
            present &= ~pc.fill_null(latest.column("__tomb"), False).to_numpy(zero_copy_only=False)
        if "__keep" in names:
            present &= pc.fill_null(latest.column("__keep"), False).to_numpy(zero_copy_only=False)
        parts = latest.column("__partition").to_pylist() if "__partition" in names else [0] * n
        offs = latest.column("__offset").to_pylist() if "__offset" in names else list(range(n))
        old: dict[Any, tuple[Any, ...]] = {}
        cols = ", ".join(self._g + self._s)
        for i in range(0, n, 500):
            chunk = keys[i:i + 500]
            for row in con.execute(f"SELECT k, {cols} FROM rows WHERE k IN ({', '.join('?' * len(chunk))})", chunk):
                old[row[0]] = tuple(row[1:])
        ng = len(self._g)
        deltas: dict[tuple[Any, ...], list[Any]] = {}
        new_rows = []
        for j, k in enumerate(keys):
            before = old.get(k)
            if before is not None:
                self._delta(deltas, before[:ng], before[ng:], -1)
            if present[j]:
                g = tuple(c[j] for c in groups)
                s = tuple(c[j] for c in sources)
                self._delta(deltas, g, s, 1)
                new_rows.append((k, *g, *s, parts[j], offs[j]))
        for i in range(0, n, 500):
            chunk = keys[i:i + 500]
            con.execute(f"DELETE FROM rows WHERE k IN ({', '.join('?' * len(chunk))})", chunk)
        con.executemany(f"INSERT INTO rows VALUES ({', '.join('?' * (3 + ng + len(self._s)))})", new_rows)
        self._apply_deltas(con, deltas)
        return list(deltas)

    def _delta(self, deltas: dict[tuple[Any, ...], list[Any]], g: tuple[Any, ...], s: tuple[Any, ...],
               sign: int) -> None:
        """Adds one row's contribution (``sign`` ±1) to its group's delta: [count, per aggregate: sum or (sum, n)]."""
        d = deltas.get(g)
        if d is None:
            d = deltas[g] = [0] + [None] * len(self.plan.aggregates)
        d[0] += sign
        for i, a in enumerate(self.plan.aggregates):
            if a.fn not in ("sum", "avg"):
                continue
            v = self._number(a, s[a.source])
            cur = d[1 + i] or (0, 0)
            if v is None:
                d[1 + i] = cur
                continue
            d[1 + i] = (EXACT.add(cur[0], sign * v) if isinstance(v, Decimal) else cur[0] + sign * v, cur[1] + sign)

    def _number(self, a: Aggregate, v: Any) -> Any:
        if v is None:
            return None
        t = self.plan.source_types[a.source]
        if isinstance(t, DecimalType):
            return decode_decimal(t, v)
        return float(v) if a.kind == "float" else int(v)

    def _apply_deltas(self, con: sqlite3.Connection, deltas: dict[tuple[Any, ...], list[Any]]) -> None:
        """Each touched group's count, sums and avg parts plus its delta → ``groups`` (a count of 0 deletes it)."""
        ng = len(self._g)
        for g, d in deltas.items():
            row = con.execute(f"SELECT n, agg FROM groups WHERE {self._match}", g).fetchone()
            n = (row[0] if row else 0) + d[0]
            con.execute(f"DELETE FROM groups WHERE {self._match}", g)
            if n <= 0:
                continue
            agg = json.loads(row[1]) if row and row[1] else {}
            for i, a in enumerate(self.plan.aggregates):
                if a.fn not in ("sum", "avg") or d[1 + i] is None:
                    continue
                total, cnt = agg.get(str(i), (0, 0))
                dsum, dn = d[1 + i]
                if a.kind.startswith("decimal("):
                    agg[str(i)] = [str(EXACT.add(Decimal(total), dsum)), cnt + dn]
                else:
                    agg[str(i)] = [total + dsum, cnt + dn]
            con.execute(f"INSERT INTO groups VALUES ({', '.join('?' * (ng + 2))})",
                        (*g, n, json.dumps(agg, separators=(",", ":"))))

    # -- the store's rows --------------------------------------------------------------------------------------
    def _rows(self, con: sqlite3.Connection, touched: list[tuple[Any, ...]], batch_ts: int | None) -> pa.Table:
        plan = self.plan
        counts: list[Any] = []
        outs: list[list[Any]] = [[] for _ in plan.aggregates]
        for g in touched:
            row = con.execute(f"SELECT n, agg FROM groups WHERE {self._match}", g).fetchone()
            if row is None:
                counts.append(None)
                for o in outs:
                    o.append(None)
                continue
            counts.append(row[0])
            agg = json.loads(row[1]) if row[1] else {}
            for i, a in enumerate(plan.aggregates):
                outs[i].append(self._value(con, g, i, a, agg))
        n = len(touched)
        cols: dict[str, Any] = {KEY: self._keys(touched), value_name(0): pa.array(counts, pa.int64())}
        for i, (a, t) in enumerate(zip(plan.aggregates, plan.value_types[1:])):
            cols[value_name(i + 1)] = _arrow_out(outs[i], t)
        gone = pa.array([c is None for c in counts], pa.bool_())
        if plan.having is not None:
            named = {name: cols[value_name(i)] for i, name in enumerate(plan.value_names)}
            for i, name in enumerate(plan.group_names):
                named[name] = arrow_from_stored([g[i] for g in touched], plan.group_types[i])
            keep = plan.having.keep(pa.table({c: named[c] for c in plan.having.columns}) if plan.having.columns
                                    else pa.table({"_": pa.nulls(n)}))
            gone = pc.or_(gone, pc.invert(keep))
        cols[TS] = pa.nulls(n, pa.int64()) if batch_ts is None else pa.array(np.full(n, batch_ts, dtype=np.int64))
        cols[DELETED] = gone
        return pa.table(cols)

    def _keys(self, touched: list[tuple[Any, ...]]) -> pa.Array:
        types = self.plan.group_types
        parts = [arrow_from_stored([g[i] for g in touched], t) for i, t in enumerate(types)]
        if len(parts) == 1:
            return parts[0]
        return pa.StructArray.from_arrays(parts, names=list(self.plan.group_names))

    def _value(self, con: sqlite3.Connection, g: tuple[Any, ...], i: int, a: Aggregate, agg: dict[str, Any]) -> Any:
        plan, src = self.plan, f"s{a.source}"
        if a.fn == "sum":
            total = agg.get(str(i), (0, 0))[0]
            return Decimal(total) if a.kind.startswith("decimal(") else total
        if a.fn == "avg":
            total, cnt = agg.get(str(i), (0, 0))
            if cnt <= 0:
                return None
            out_t = plan.value_types[1 + i]
            if isinstance(out_t, DecimalType):  # exact: the mean rounded half up, as Spark
                step = Decimal(1).scaleb(-out_t.scale, EXACT)
                return EXACT.divide(Decimal(total), cnt).quantize(step, ROUND_HALF_UP, EXACT)
            return total / cnt
        if a.fn in ("min", "max"):
            fn = "min" if a.fn == "min" else "max"
            return con.execute(f"SELECT {fn}({src}) FROM rows WHERE {self._match}", g).fetchone()[0]
        if a.fn in ("topk", "topk_distinct"):
            distinct = "DISTINCT " if a.fn == "topk_distinct" else ""
            vals = [r[0] for r in con.execute(
                f"SELECT {distinct}{src} FROM rows WHERE {self._match} AND {src} IS NOT NULL ORDER BY {src} DESC "
                f"LIMIT {int(a.k)}", g)]
            return _json_list(vals, plan.source_types[a.source])
        vals = [r[0] for r in con.execute(f"SELECT {src} FROM rows WHERE {self._match} AND {src} IS NOT NULL "
                                          f"ORDER BY p, o LIMIT {MAX_COLLECT + 1}", g)]
        if len(vals) > MAX_COLLECT:
            raise RuntimeError(f"store {plan.name!r}: group {g!r}: {a.fn} {a.out!r} would hold more than {MAX_COLLECT} "
                               "values; collect over a finer group, or aggregate the values another way")
        if a.fn == "collect_set":
            vals = list(dict.fromkeys(vals))
        return _json_list(vals, plan.source_types[a.source])


def _json_list(vals: Sequence[Any], t: Any) -> str:
    """Stored scalar forms → the canonical JSON of an ARRAY of them (booleans as true/false)."""
    if t is SqlType.BOOLEAN:
        vals = [None if v is None else bool(v) for v in vals]
    return json.dumps(list(vals), separators=(",", ":"), ensure_ascii=False)


def _arrow_out(values: list[Any], t: Any) -> pa.Array:
    """One aggregate's values (stored forms, Python numbers, Decimals or JSON text) → the column the writer takes."""
    if isinstance(t, DecimalType):
        if any(isinstance(v, bytes) for v in values):  # min/max: the stored 16 bytes, as SQLite ordered them
            return pa.array(values, pa.binary())
        return pa.array(values, pa.decimal128(t.precision, t.scale))
    if isinstance(t, NestedType):
        return pa.array(values, pa.string())
    return arrow_from_stored(values, t)
