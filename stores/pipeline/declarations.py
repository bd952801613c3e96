"""What a store declaration is, and the checks Topology and the stateful-table builders share.

``StoreDecl`` is the contract between a Topology and the runtime/materializer;
the helpers read a DataFrame's analyzed plan and refuse what cannot work with
a ``TopologyError`` naming the store.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from pyspark.sql import DataFrame
from pyspark.sql.types import TimestampNTZType, TimestampType

from ..catalog.schema import Column, SqlType, StoreSpec, parse_type

__all__ = ["StoreDecl", "TopologyError", "key_names", "number_kind", "duration_ms", "check_tombstones",
           "TOMBSTONE_RULES"]

#: How a table of records tells a delete: Kafka's rule (the default) or the rule before issue 51.
TOMBSTONE_RULES = ("kafka", "all_null")

_UNITS_MS = {"millisecond": 1, "second": 1000, "minute": 60_000, "hour": 3_600_000, "day": 86_400_000}


class TopologyError(ValueError):
    """A store declaration that cannot work; the message names the store and the problem."""


@dataclass(frozen=True)
class StoreDecl:
    """One declared store: its spec plus what the materializer needs to turn rows into Changes."""

    spec: StoreSpec
    df: DataFrame
    shape: str  # "aggregate" | "window" | "session" | "latest" | "versioned" | "table_aggregate" | "open_session" | "join"
    output_mode: str
    key_col: str  # the key column, or the first of a composite key's (``key_cols``)
    value_cols: tuple[str, ...]
    window_col: str | None
    timestamp_col: str | None
    streams: frozenset[str] = frozenset()  # the Topology.stream ids it reads (stores reading the same share a query)
    key_cols: tuple[str, ...] = ()  # every key column, in key order (one for a simple key)
    having: str | None = None  # a filter after the aggregation (Spark SQL): rows failing it delete their key
    sum_types: tuple[str, ...] = ()  # table aggregates: "int" or "float" per summed column
    # tables of records, versioned tables: "kafka" (a null value deletes) or "all_null" (all-null values delete too)
    tombstones: str | None = None
    # what a kind of store adds to its definition (upgrades.py fingerprints it): (name, JSON-able value) pairs
    definition_extra: tuple[tuple[str, Any], ...] = ()
    # what foreachBatch runs on the driver for this kind (a table aggregate's or a join's plan), or None
    driver_plan: Any = field(default=None, compare=False, hash=False)


def key_names(store: str, key: Any) -> tuple[str, ...]:
    """``key=`` as given (a column name, or a list/tuple of them for a composite key) → the key column names."""
    names = (key,) if isinstance(key, str) else tuple(key) if isinstance(key, (list, tuple)) else None
    if not names or not all(isinstance(n, str) and n for n in names):
        raise TopologyError(f"store {store!r}: key must be a column name or a list of column names, got {key!r}")
    if len(set(names)) != len(names):
        raise TopologyError(f"store {store!r}: key columns {list(names)} name a column twice")
    return names


def check_tombstones(store: str, df: DataFrame, rule: Any) -> str:
    """``tombstones=`` checked against the DataFrame: Kafka's rule needs the stream's tombstone column.

    Why refuse instead of guessing: once a projection has dropped the column, a tombstone and a value whose
    fields are all null look alike, and either guess silently changes what the store holds.
    """
    if rule not in TOMBSTONE_RULES:
        raise TopologyError(f"store {store!r}: tombstones must be one of {', '.join(map(repr, TOMBSTONE_RULES))}, "
                            f"got {rule!r}")
    if rule == "kafka" and "tombstone" not in df.columns:
        raise TopologyError(
            f"store {store!r}: a record whose value is null (a tombstone) deletes its key, and the stream's "
            "'tombstone' column says which records those are; this DataFrame has dropped it (its columns are "
            f"{df.columns}). Keep it in the projection (select(..., 'tombstone')), or pass tombstones='all_null' "
            "to delete on records whose value columns are all null")
    return rule


def _plan_text(df: DataFrame) -> str:
    return str(df._jdf.queryExecution().analyzed().toString())


def _is_aggregate(plan: str) -> bool:
    return re.search(r"^[\s:+\-!~]*Aggregate \[", plan, re.MULTILINE) is not None


def _split_having(store: str, df: DataFrame, plan: str) -> tuple[DataFrame, str | None]:
    """``agg.filter(cond)`` → (agg, cond as Spark SQL): the store gets every aggregate row, and a row failing
    ``cond`` deletes its key (a tombstone), as a ksqlDB table with HAVING does (issue 16 item 5).

    Left in the streaming query, the filter would only drop output rows, so a key whose aggregate stops
    qualifying would keep its last qualifying row forever. Filters stacked at the top are joined with AND;
    a filter after the aggregation that is not at the top (under a projection) is refused with the fix.
    """
    conds: list[str] = []
    node = df._jdf.queryExecution().analyzed()
    while node.nodeName() == "Filter":
        conds.append(str(node.condition().sql()))
        node = node.child()
    lines = plan.splitlines()
    agg_line = next(i for i, line in enumerate(lines) if re.search(r"^[\s:+\-!~]*Aggregate \[", line))
    if any(re.search(r"^[\s:+\-!~]*Filter ", line) for line in lines[len(conds):agg_line]):
        raise TopologyError(f"store {store!r}: a filter after the aggregation must be the last step "
                            "(agg.withColumn(...).filter(...)), so rows that stop qualifying can be deleted")
    if not conds:
        return df, None
    session = df.sparkSession
    jds = session._jvm.org.apache.spark.sql.classic.Dataset.ofRows(df._jdf.sparkSession(), node)  # type: ignore[union-attr]
    return DataFrame(jds, session), " AND ".join(f"({c})" for c in reversed(conds))


def number_kind(store: str, out: str, col: str, spark_type: str, decimals: bool = False) -> str:
    """``int``, ``float`` or (with ``decimals``) ``decimal(p,s)``: how an aggregated column adds up (exact int64,
    double, or exact decimal)."""
    if spark_type in ("bigint", "int", "smallint", "tinyint"):
        return "int"
    if spark_type in ("double", "float"):
        return "float"
    if spark_type.startswith("decimal("):
        if decimals:
            return spark_type.replace(" ", "")
        raise TopologyError(f"store {store!r}: aggregate {out!r}: column {col!r} is {spark_type}; this store's "
                            "aggregates take integers or doubles (exact DECIMAL aggregates: table_aggregate, or "
                            "F.sum in a Spark aggregation); cast it to double to aggregate it here")
    takes = "integers, doubles or decimals" if decimals else "integers or doubles"
    raise TopologyError(f"store {store!r}: aggregate {out!r}: column {col!r} is {spark_type}, not a number "
                        f"(sum, min, max and avg take {takes})")


def duration_ms(store: str, value: str | int, what: str) -> int:
    """``30000`` or ``"30 seconds"`` → ms (units of ``_UNITS_MS``, singular or plural)."""
    if isinstance(value, int) and not isinstance(value, bool) and value > 0:
        return value
    m = re.fullmatch(r"\s*(\d+)\s*(millisecond|second|minute|hour|day)s?\s*", str(value))
    if m is None or int(m.group(1)) <= 0:
        raise TopologyError(f"store {store!r}: {what} {value!r} must be a positive number of ms or like '30 seconds'")
    return int(m.group(1)) * _UNITS_MS[m.group(2)]


def _require_col(store: str, cols: dict[str, str], col: Any, role: str) -> None:
    if not isinstance(col, str) or col not in cols:
        raise TopologyError(f"store {store!r}: no {role} column {col!r}; the DataFrame's columns are "
                            f"{list(cols)}")


def _column(store: str, name: str, dt: Any) -> Column:
    if isinstance(dt, (TimestampType, TimestampNTZType)):
        return Column(name, SqlType.TIMESTAMP)
    try:
        return Column(name, parse_type(dt.simpleString()))
    except ValueError:
        raise TopologyError(f"store {store!r}: column {name!r} has type {dt.simpleString()}, which a store "
                            "cannot hold; cast it or drop it") from None


_UNITS_MS = {"millisecond": 1, "second": 1000, "minute": 60_000, "hour": 3_600_000, "day": 86_400_000}
