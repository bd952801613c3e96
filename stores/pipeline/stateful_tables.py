"""Stores Spark's own aggregations cannot express, built on one ``applyInPandasWithState`` operator (issue 16).

- ``table_aggregate_decl``: counts and sums per group over the TABLE a changelog stream describes, with
  retraction when a key's row changes group or is deleted (``table_aggregate.py``; item 6);
- ``session_table_decl``: session windows in update mode, visible while open and merged when a record
  bridges two (``open_sessions.py``; item 4).

Each returns a ``StoreDecl`` whose DataFrame is the stateful step; the sink (materializer.py) turns its
rows into the store's changes.
"""

from __future__ import annotations

import functools

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
from .stream_rows import METADATA_COLUMNS
from .table_aggregate import retract_rows, retraction_columns

__all__ = ["table_aggregate_decl", "session_table_decl"]

_INT_TYPES = ("bigint", "int", "smallint", "tinyint")


def _values(count: str, sums: dict[str, str], kinds: list[str]) -> tuple[Column, ...]:
    return (Column(count, SqlType.BIGINT),
            *(Column(out, SqlType.BIGINT if k == "int" else SqlType.DOUBLE) for out, k in zip(sums, kinds)))


def table_aggregate_decl(name: str, df: DataFrame, *, key: str, group_by: str, count: str,
                         sums: dict[str, str] | None, topics: tuple[str, ...], partitions: int) -> StoreDecl:
    """``df`` is a stream of records read as a table: a key's latest record is its row, a record with all-null
    values deletes it. When a key's row changes, its old group is retracted (count -1, sums minus the old
    values) and its new group gains it; a group whose count reaches 0 is deleted: the store always equals
    ``SELECT group_by, count(*), sum(…) FROM <table> GROUP BY group_by``.
    """
    if _is_aggregate(_plan_text(df)):
        raise TopologyError(f"store {name!r}: table_aggregate takes the table's records, not an aggregation")
    cols = dict(df.dtypes)
    sums = dict(sums or {})
    for c, role in [(key, "key"), (group_by, "group_by"), *((s, "sums") for s in sums.values())]:
        _require_col(name, cols, c, role)
    kinds = [number_kind(name, out, c, cols[c]) for out, c in sums.items()]
    value_cols = tuple(c for c in df.columns if c not in (key, *METADATA_COLUMNS))
    fields = {f.name: f.dataType for f in df.schema.fields}
    state_cols, _out = retraction_columns(group_by, list(sums.values()))
    sum_fields = [fields[c] for c in sums.values()]
    state_schema = StructType([StructField(state_cols[0], fields[group_by]),
                               *(StructField(n, t) for n, t in zip(state_cols[1:], sum_fields))])
    out_schema = StructType([StructField("k", fields[key]),
                             StructField("old_g", fields[group_by]),
                             *(StructField(f"old_s{i}", t) for i, t in enumerate(sum_fields)),
                             StructField("new_g", fields[group_by]),
                             *(StructField(f"new_s{i}", t) for i, t in enumerate(sum_fields))])
    group_kind = "int" if cols[group_by] in _INT_TYPES else "float" if cols[group_by] in ("double", "float") else None
    func = functools.partial(retract_rows, group=group_by, sums=list(sums.values()), value_cols=value_cols,
                             kinds=[group_kind, *kinds])
    derived = df.groupBy(key).applyInPandasWithState(func, out_schema, state_schema, "Update", "NoTimeout")
    try:
        spec = StoreSpec(name=name, kind=StoreKind.KEY_VALUE, key=_column(name, group_by, fields[group_by]),
                         values=_values(count, sums, kinds), partitions=partitions, source_topics=topics)
    except ValueError as exc:
        raise TopologyError(str(exc)) from None
    return StoreDecl(spec, derived, "table_aggregate", "update", group_by, spec.value_names(), None, None,
                     key_cols=(group_by,), sum_types=tuple(kinds))


def session_table_decl(name: str, df: DataFrame, *, key: str, gap: str | int, timestamp: str, count: str,
                       sums: dict[str, str] | None, retention_ms: int | None, topics: tuple[str, ...],
                       partitions: int) -> StoreDecl:
    """``gap`` is the inactivity gap (ms, or ``"30 seconds"``); the store is a session store with ``count``
    and the ``sums`` (output name → column) per session, updated by every record and merged when a record
    bridges two sessions (the merged-away sessions are deleted).
    """
    if _is_aggregate(_plan_text(df)):
        raise TopologyError(f"store {name!r}: session_table takes the records, not an aggregation")
    cols = dict(df.dtypes)
    sums = dict(sums or {})
    for c, role in [(key, "key"), (timestamp, "timestamp"), *((c, "sums") for c in sums.values())]:
        _require_col(name, cols, c, role)
    if cols[timestamp] not in ("timestamp", "timestamp_ntz"):
        raise TopologyError(f"store {name!r}: timestamp column {timestamp!r} is {cols[timestamp]}, not a timestamp")
    gap_ms = duration_ms(name, gap, "gap")
    kinds = [number_kind(name, out, c, cols[c]) for out, c in sums.items()]
    fields = {f.name: f.dataType for f in df.schema.fields}
    names = session_output_columns(len(sums))
    out_schema = StructType([StructField(names[0], fields[key]), StructField("ws", LongType()),
                             StructField("we", LongType()), StructField("cnt", LongType()),
                             *(StructField(n, LongType() if k == "int" else DoubleType())
                               for n, k in zip(names[4:-1], kinds)),
                             StructField("deleted", BooleanType())])
    retention = retention_ms if retention_ms is not None else max(gap_ms * 10, 24 * 3_600_000)
    func = functools.partial(open_session_rows, timestamp=timestamp, sums=list(sums.values()), kinds=kinds,
                             gap=gap_ms, retention=retention)
    derived = df.groupBy(key).applyInPandasWithState(
        func, out_schema, StructType([StructField("sessions", StringType())]), "Update", "NoTimeout")
    try:
        spec = StoreSpec(name=name, kind=StoreKind.SESSION, key=_column(name, key, fields[key]),
                         values=_values(count, sums, kinds), partitions=partitions, source_topics=topics,
                         gap_ms=gap_ms)
    except ValueError as exc:
        raise TopologyError(str(exc)) from None
    return StoreDecl(spec, derived, "open_session", "update", key, spec.value_names(), None, None,
                     key_cols=(key,), sum_types=tuple(kinds))
