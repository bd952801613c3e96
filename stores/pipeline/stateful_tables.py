"""Stores Spark's own aggregations cannot express (issues 16 and 51).

- ``table_aggregate_decl``: count, sum, min, max, avg, collect_list/set and topk per group (one column or
  several) over the TABLE a changelog stream describes, with WHERE and HAVING, and retraction when a key's
  row changes group or is deleted: the query projects the records, foreachBatch aggregates them in the
  store's side state (``table_aggregate.py``);
- ``session_table_decl``: session windows in update mode, visible while open and merged when a record
  bridges two, on one ``applyInPandasWithState`` operator (``open_sessions.py``; issue 16 item 4).

Each returns a ``StoreDecl``; the sink (materializer.py) turns its DataFrame's rows into the store's changes.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import Any

from pyspark.sql import DataFrame
from pyspark.sql import functions as F
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    BooleanType,
    DateType,
    DoubleType,
    IntegerType,
    LongType,
    MapType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)
from pyspark.sql.types import DecimalType as SparkDecimal

from ..catalog.decimals import DecimalType
from ..catalog.nested import NestedType
from ..catalog.schema import Column, SqlType, StoreKind, StoreSpec
from .conditions import compile_condition
from .declarations import (
    StoreDecl,
    TopologyError,
    _column,
    _is_aggregate,
    _plan_text,
    _require_col,
    duration_ms,
    key_names,
    number_kind,
)
from .open_sessions import open_session_rows, session_output_columns
from .stream_rows import TOMBSTONE
from .table_aggregate import Aggregate, AggregatePlan, result_decimal

__all__ = ["table_aggregate_decl", "session_table_decl", "spark_type"]

_INT_TYPES = ("bigint", "int", "smallint", "tinyint")


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


def table_aggregate_decl(name: str, df: DataFrame, *, key: str, group_by: str | Sequence[str], count: str,
                         sums: dict[str, str] | None, topics: tuple[str, ...], partitions: int,
                         mins: dict[str, str] | None = None, maxs: dict[str, str] | None = None,
                         avgs: dict[str, str] | None = None, collect_lists: dict[str, str] | None = None,
                         collect_sets: dict[str, str] | None = None, topks: dict[str, Any] | None = None,
                         topk_distincts: dict[str, Any] | None = None, where: Any = None,
                         having: Any = None) -> StoreDecl:
    """``df`` is a stream of records read as a table: a key's latest record is its row, a tombstone deletes it.
    The store always equals ``SELECT group_by…, count(*), <aggregates> FROM <table> [WHERE where] GROUP BY
    group_by… [HAVING having]`` (see ``table_aggregate.py`` for how).

    ``sums``/``avgs`` map output names to numeric columns; ``mins``/``maxs`` to numeric or other scalar columns;
    ``collect_lists``/``collect_sets`` to scalar columns; ``topks``/``topk_distincts`` to ``(column, k)``.
    ``where`` is a Spark SQL condition on the table's columns (a row failing it is in no group), ``having`` one on
    the store's columns (a group failing it is not in the store until it qualifies again).
    """
    if _is_aggregate(_plan_text(df)):
        raise TopologyError(f"store {name!r}: table_aggregate takes the table's records, not an aggregation")
    cols = dict(df.dtypes)
    _require_col(name, cols, key, "key")
    groups = key_names(name, group_by)
    for g in groups:
        _require_col(name, cols, g, "group_by")
    fields = {f.name: f.dataType for f in df.schema.fields}
    aggs, sources = _table_aggregates(name, cols, fields, sums, mins, maxs, avgs, collect_lists, collect_sets,
                                      topks, topk_distincts)
    group_types = tuple(_column(name, g, fields[g]).type for g in groups)
    source_types = tuple(_column(name, c, fields[c]).type for c in sources)
    key_type = _column(name, key, fields[key]).type
    value_types = (SqlType.BIGINT, *(_agg_type(a, source_types[a.source]) for a in aggs))
    values = tuple(Column(n, t) for n, t in zip((count, *(a.out for a in aggs)), value_types))
    try:
        key_cols = tuple(Column(g, t) for g, t in zip(groups, group_types))
        spec = StoreSpec(name=name, kind=StoreKind.KEY_VALUE, key=key_cols if len(key_cols) > 1 else key_cols[0],
                         values=values, partitions=partitions, source_topics=topics)
    except ValueError as exc:
        raise TopologyError(str(exc)) from None
    proj = [_ms(F.col(f"`{key}`"), cols[key]).alias("__k"),
            *(_ms(F.col(f"`{g}`"), cols[g]).alias(f"__g{i}") for i, g in enumerate(groups)),
            *(_ms(F.col(f"`{c}`"), cols[c]).alias(f"__s{i}") for i, c in enumerate(sources))]
    where_text = None
    if where is not None:
        cond = F.expr(where) if isinstance(where, str) else where
        try:
            where_text = str(df.select(F.coalesce(cond, F.lit(False)).alias("__keep"))._jdf.queryExecution()
                             .analyzed().expressions().apply(0).sql())
        except Exception as exc:  # noqa: BLE001 - Spark's AnalysisException: say it with the store
            raise TopologyError(f"store {name!r}: where {where!s} cannot be read over the columns {list(cols)}: "
                                f"{str(exc).strip().splitlines()[0] if str(exc).strip() else exc!r}") from None
        proj.append(F.coalesce(cond, F.lit(False)).alias("__keep"))
    if TOMBSTONE in cols:
        proj.append(F.col(TOMBSTONE).alias("__tomb"))
    proj += [F.col(c).alias(f"__{c}") for c in ("topic", "partition", "offset") if c in cols]
    derived = df.select(*proj)
    having_cond = None
    if having is not None:
        having_fields = {g: (fields[g], t) for g, t in zip(groups, group_types)}
        having_fields.update({c.name: (spark_type(c.type), c.type) for c in values})
        having_cond = compile_condition(df.sparkSession, name, "having", having, having_fields)
    plan = AggregatePlan(name, key_type, group_types, source_types, tuple(aggs), value_types,
                         tuple(c.name for c in values), groups, having_cond)
    extra = (("aggregates", [[a.out, a.fn, sources[a.source], a.kind, a.k] for a in aggs]),
             ("where", where_text), ("having", None if having_cond is None else having_cond.text))
    return StoreDecl(spec, derived, "table_aggregate", "append", groups[0], spec.value_names(), None, None,
                     key_cols=groups, driver_plan=plan, definition_extra=extra)


def _ms(col: Any, spark_type: str) -> Any:
    """Timestamps as epoch ms (the stores' form), other columns as they are."""
    if spark_type.startswith("timestamp"):
        return F.when(col.isNull(), F.lit(None)).otherwise(F.unix_millis(col.cast("timestamp")))
    return col


_ORDERED = ("string", "boolean", "date", "timestamp", "timestamp_ntz", "bigint", "int", "smallint", "tinyint",
            "double", "float")


def _table_aggregates(name: str, cols: dict[str, str], fields: dict[str, Any], sums: Any, mins: Any, maxs: Any,
                      avgs: Any, collect_lists: Any, collect_sets: Any, topks: Any, topk_distincts: Any
                      ) -> tuple[list[Aggregate], list[str]]:
    """The aggregate arguments → ``Aggregate``s over a de-duplicated list of source columns."""
    sources: list[str] = []
    out: list[Aggregate] = []

    def source(c: str) -> int:
        if c not in sources:
            sources.append(c)
        return sources.index(c)

    for fn, given in (("sum", sums), ("min", mins), ("max", maxs), ("avg", avgs), ("collect_list", collect_lists),
                      ("collect_set", collect_sets), ("topk", topks), ("topk_distinct", topk_distincts)):
        if given is not None and not isinstance(given, dict):
            raise TopologyError(f"store {name!r}: {fn}s must map output column names to columns, got {given!r}")
        for o, c in (given or {}).items():
            k = 0
            if fn.startswith("topk"):
                if not (isinstance(c, (tuple, list)) and len(c) == 2 and isinstance(c[1], int)
                        and not isinstance(c[1], bool) and c[1] > 0):
                    raise TopologyError(f"store {name!r}: {fn}s[{o!r}] must be (column, k) with k a positive integer, "
                                        f"got {c!r}")
                c, k = c
            _require_col(name, cols, c, f"{fn}s")
            t = cols[c]
            if fn in ("sum", "avg"):
                kind = number_kind(name, o, c, t, decimals=True)
            elif fn in ("min", "max"):
                if t.startswith("decimal("):
                    kind = t.replace(" ", "")
                elif t in _ORDERED:
                    kind = {"double": "float", "float": "float"}.get(t, "int" if t in _INT_TYPES else "")
                else:
                    raise TopologyError(f"store {name!r}: aggregate {o!r}: column {c!r} is {t}, which {fn} cannot "
                                        "order; use a number, string, date or timestamp column")
            else:
                if t not in _ORDERED:
                    raise TopologyError(f"store {name!r}: aggregate {o!r}: column {c!r} is {t}; {fn} keeps lists of "
                                        "scalar values (numbers but DECIMAL, strings, booleans, dates, timestamps); "
                                        "cast it first")
                kind = ""
            out.append(Aggregate(o, fn, source(c), kind, k))
    return out, sources


def _agg_type(a: Aggregate, source: Any) -> Any:
    """An aggregate's column type: count/sum/min/max BIGINT (integers) or DOUBLE, avg DOUBLE; DECIMAL as Spark
    types it (sum DECIMAL(p+10,s), min/max DECIMAL(p,s), avg DECIMAL(p+4,s+4)); min/max of other scalars their
    column's type; lists an ARRAY of it."""
    if a.fn in ("collect_list", "collect_set", "topk", "topk_distinct"):
        return NestedType("ARRAY", element=source)
    if a.kind.startswith("decimal("):
        return result_decimal(a.fn, a.kind)
    if a.fn == "avg" or a.kind == "float":
        return SqlType.DOUBLE
    if a.kind == "int":
        return SqlType.BIGINT
    return source


def spark_type(t: Any) -> Any:
    """A catalog type → the Spark type a value of it has (for conditions over a store's columns)."""
    if isinstance(t, DecimalType):
        return SparkDecimal(t.precision, t.scale)
    if isinstance(t, NestedType):
        if t.kind == "ARRAY":
            return ArrayType(spark_type(t.element), True)
        if t.kind == "MAP":
            return MapType(spark_type(t.key), spark_type(t.element), True)
        return StructType([StructField(n, spark_type(ft), True) for n, ft in t.fields])
    return {SqlType.BIGINT: LongType(), SqlType.INTEGER: IntegerType(), SqlType.DOUBLE: DoubleType(),
            SqlType.VARCHAR: StringType(), SqlType.BOOLEAN: BooleanType(), SqlType.TIMESTAMP: TimestampType(),
            SqlType.DATE: DateType(), SqlType.BLOB: BinaryType()}[t]


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
