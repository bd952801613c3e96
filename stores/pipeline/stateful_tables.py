"""Stores Spark's own aggregations cannot express, built on one ``applyInPandasWithState`` operator (issue 16).

- ``table_aggregate_decl``: count, sum, min, max, avg per group over the TABLE a changelog stream describes, with
  retraction when a key's row changes group or is deleted (``table_aggregate.py``; item 6);
- ``session_table_decl``: session windows in update mode, visible while open and merged when a record
  bridges two (``open_sessions.py``; item 4).

Each returns a ``StoreDecl`` whose DataFrame is the stateful step; the sink (materializer.py) turns its
rows into the store's changes.
"""

from __future__ import annotations

import functools
from typing import Any

from pyspark.sql import DataFrame
from pyspark.sql.types import BooleanType, DoubleType, LongType, StringType, StructField, StructType

from ..catalog.schema import Column, SqlType, StoreKind, StoreSpec
from .declarations import (
    StoreDecl,
    TopologyError,
    _column,
    _is_aggregate,
    _plan_text,
    _require_col,
    duration_ms,
    number_kind,
)
from .open_sessions import open_session_rows, session_output_columns
from .stream_rows import HEADERS, METADATA_COLUMNS
from .table_aggregate import needs_state, result_decimal, retract_rows, retraction_columns

__all__ = ["table_aggregate_decl", "session_table_decl"]

_INT_TYPES = ("bigint", "int", "smallint", "tinyint")


#: The internal column of a table aggregate with min/max/avg: per aggregate its multiset or (sum, count), JSON.
STATE_COLUMN = Column("__aggregate_state", SqlType.VARCHAR)


def _aggregates(name: str, cols: dict[str, str], sums: dict[str, str] | None, mins: dict[str, str] | None,
                maxs: dict[str, str] | None, avgs: dict[str, str] | None, decimals: bool = False
                ) -> list[tuple[str, str, str, str]]:
    """``sums``/``mins``/``maxs``/``avgs`` (output name → column) → ``[(output, function, column, kind)]``."""
    out = []
    for fn, given in (("sum", sums), ("min", mins), ("max", maxs), ("avg", avgs)):
        if given is not None and not isinstance(given, dict):
            raise TopologyError(f"store {name!r}: {fn}s must map output column names to columns, got {given!r}")
        for o, c in (given or {}).items():
            _require_col(name, cols, c, f"{fn}s")
            out.append((o, fn, c, number_kind(name, o, c, cols[c], decimals)))
    return out


def _values(count: str, aggs: list[tuple[str, str, str, str]]) -> tuple[Column, ...]:
    """count BIGINT, then per aggregate: sum/min/max BIGINT (integers) or DOUBLE, avg DOUBLE; over a DECIMAL(p,s)
    column Spark's result types: sum DECIMAL(p+10,s), min/max DECIMAL(p,s), avg DECIMAL(p+4,s+4) (capped at 38)."""
    def typ(fn: str, kind: str) -> Any:
        if kind.startswith("decimal("):
            return result_decimal(fn, kind)
        return SqlType.BIGINT if kind == "int" and fn != "avg" else SqlType.DOUBLE
    return (Column(count, SqlType.BIGINT), *(Column(o, typ(fn, k)) for o, fn, _c, k in aggs))


def _out_type(fn: str, kind: str) -> Any:
    return LongType() if kind == "int" and fn != "avg" else DoubleType()


def table_aggregate_decl(name: str, df: DataFrame, *, key: str, group_by: str, count: str,
                         sums: dict[str, str] | None, topics: tuple[str, ...], partitions: int,
                         mins: dict[str, str] | None = None, maxs: dict[str, str] | None = None,
                         avgs: dict[str, str] | None = None) -> StoreDecl:
    """``df`` is a stream of records read as a table: a key's latest record is its row, a record with all-null
    values deletes it. When a key's row changes, its old group is retracted (count -1, its old values taken
    out of every aggregate) and its new group gains it; a group whose count reaches 0 is deleted: the store
    always equals ``SELECT group_by, count(*), sum(…), min(…), max(…), avg(…) FROM <table> GROUP BY group_by``.

    ``sums``/``mins``/``maxs``/``avgs`` map output names to numeric columns. An avg is its exact sum over its
    exact non-null count; a min/max keeps its group's multiset of current values (at most ``MAX_DISTINCT``
    distinct values per group, else the store fails saying so), both in the store's internal state column.
    """
    if _is_aggregate(_plan_text(df)):
        raise TopologyError(f"store {name!r}: table_aggregate takes the table's records, not an aggregation")
    cols = dict(df.dtypes)
    for c, role in [(key, "key"), (group_by, "group_by")]:
        _require_col(name, cols, c, role)
    aggs = _aggregates(name, cols, sums, mins, maxs, avgs, decimals=True)
    sources = [c for _o, _fn, c, _k in aggs]
    types = tuple(f"{fn}:{k}" for _o, fn, _c, k in aggs)
    value_cols = tuple(c for c in df.columns if c not in (key, *METADATA_COLUMNS, HEADERS))  # a tombstone: all null
    fields = {f.name: f.dataType for f in df.schema.fields}
    state_cols, _out = retraction_columns(group_by, sources)
    src_fields = [fields[c] for c in sources]
    state_schema = StructType([StructField(state_cols[0], fields[group_by]),
                               *(StructField(n, t) for n, t in zip(state_cols[1:], src_fields))])
    out_schema = StructType([StructField("k", fields[key]),
                             StructField("old_g", fields[group_by]),
                             *(StructField(f"old_s{i}", t) for i, t in enumerate(src_fields)),
                             StructField("new_g", fields[group_by]),
                             *(StructField(f"new_s{i}", t) for i, t in enumerate(src_fields))])
    group_kind = "int" if cols[group_by] in _INT_TYPES else "float" if cols[group_by] in ("double", "float") else None
    func = functools.partial(retract_rows, group=group_by, sums=sources, value_cols=value_cols,
                             kinds=[group_kind, *(k for _o, _fn, _c, k in aggs)])
    derived = df.groupBy(key).applyInPandasWithState(func, out_schema, state_schema, "Update", "NoTimeout")
    try:
        spec = StoreSpec(name=name, kind=StoreKind.KEY_VALUE, key=_column(name, group_by, fields[group_by]),
                         values=_values(count, aggs), partitions=partitions, source_topics=topics,
                         internal=(STATE_COLUMN,) if needs_state(types) else ())
    except ValueError as exc:
        raise TopologyError(str(exc)) from None
    return StoreDecl(spec, derived, "table_aggregate", "update", group_by, spec.value_names(), None, None,
                     key_cols=(group_by,), sum_types=types)


def session_table_decl(name: str, df: DataFrame, *, key: str, gap: str | int, timestamp: str, count: str,
                       sums: dict[str, str] | None, retention_ms: int | None, topics: tuple[str, ...],
                       partitions: int, mins: dict[str, str] | None = None, maxs: dict[str, str] | None = None,
                       avgs: dict[str, str] | None = None) -> StoreDecl:
    """``gap`` is the inactivity gap (ms, or ``"30 seconds"``); the store is a session store with ``count``
    and the ``sums``/``mins``/``maxs``/``avgs`` (output name → column) per session, updated by every record
    and merged when a record bridges two sessions (the merged-away sessions are deleted). Sessions only grow
    (no retraction), so min/max are running values and avg an exact sum over a non-null count, kept in the
    operator's state.
    """
    if _is_aggregate(_plan_text(df)):
        raise TopologyError(f"store {name!r}: session_table takes the records, not an aggregation")
    cols = dict(df.dtypes)
    for c, role in [(key, "key"), (timestamp, "timestamp")]:
        _require_col(name, cols, c, role)
    aggs = _aggregates(name, cols, sums, mins, maxs, avgs)
    if cols[timestamp] not in ("timestamp", "timestamp_ntz"):
        raise TopologyError(f"store {name!r}: timestamp column {timestamp!r} is {cols[timestamp]}, not a timestamp")
    gap_ms = duration_ms(name, gap, "gap")
    fields = {f.name: f.dataType for f in df.schema.fields}
    names = session_output_columns(len(aggs))
    out_schema = StructType([StructField(names[0], fields[key]), StructField("ws", LongType()),
                             StructField("we", LongType()), StructField("cnt", LongType()),
                             *(StructField(n, _out_type(fn, k)) for n, (_o, fn, _c, k) in zip(names[4:-1], aggs)),
                             StructField("deleted", BooleanType())])
    retention = retention_ms if retention_ms is not None else max(gap_ms * 10, 24 * 3_600_000)
    func = functools.partial(open_session_rows, timestamp=timestamp, sums=[c for _o, _fn, c, _k in aggs],
                             kinds=[k for *_x, k in aggs], gap=gap_ms, retention=retention,
                             functions=[fn for _o, fn, _c, _k in aggs])
    derived = df.groupBy(key).applyInPandasWithState(
        func, out_schema, StructType([StructField("sessions", StringType())]), "Update", "NoTimeout")
    try:
        spec = StoreSpec(name=name, kind=StoreKind.SESSION, key=_column(name, key, fields[key]),
                         values=_values(count, aggs), partitions=partitions, source_topics=topics,
                         gap_ms=gap_ms)
    except ValueError as exc:
        raise TopologyError(str(exc)) from None
    return StoreDecl(spec, derived, "open_session", "update", key, spec.value_names(), None, None,
                     key_cols=(key,), sum_types=tuple(f"{fn}:{k}" for _o, fn, _c, k in aggs))
