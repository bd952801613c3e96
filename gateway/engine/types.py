"""The one type table: each column type as DuckDB names it, and what it is in Arrow, PostgreSQL and JSON.

Every face describes a column from here, so a column has one Arrow type
whichever route answered it (DuckDB's export, or rows the engine built
without DuckDB) and one PostgreSQL type whichever catalog or wire message
names it. The table follows what DuckDB itself does, since most answers are
DuckDB's: ``TIMESTAMP WITH TIME ZONE`` is Arrow ``timestamp[us, tz=UTC]``
(DuckDB's export; rows built without DuckDB used to say ``ms``).

| DuckDB | Arrow (answers) | PostgreSQL | JSON |
|---|---|---|---|
| BIGINT / INTEGER / SMALLINT / TINYINT | int64 / int32 / int16 / int8 | int8 / int4 / int2 / int2 | number |
| UBIGINT / UINTEGER / USMALLINT / UTINYINT | uint64 / uint32 / uint16 / uint8 | numeric / int8 / int4 / int2 | number |
| HUGEINT / UHUGEINT | decimal128(38, 0) | numeric | number |
| DOUBLE / FLOAT | double / float | float8 / float4 | number (NaN, ±Inf: null) |
| DECIMAL(p,s) | decimal128(p, s) | numeric | string (exact) |
| BOOLEAN | bool | bool | true / false |
| VARCHAR | string | text | string |
| BLOB | binary | bytea | string (base64) |
| DATE | date32 | date | string (ISO-8601) |
| TIME | time64[us] | time | string (ISO-8601) |
| TIME WITH TIME ZONE | string (DuckDB's text: Arrow has no offset) | text | string |
| TIMESTAMP | timestamp[us] | timestamp | string (ISO-8601) |
| TIMESTAMP WITH TIME ZONE | timestamp[us, tz=UTC] | timestamptz | string (ISO-8601 with offset) |
| INTERVAL | month_day_nano_interval | interval | string |
| UUID | string | uuid | string |
| X[] (LIST) | list<X> | X's array type | array |
| STRUCT / MAP | struct / map | text | object |

PostgreSQL's side is the PG catalog's own table (``planner.systables.pg_types``,
which the planner's ``pg_catalog`` also answers from); JSON is written by
``json_values``; the store columns' DuckDB names are below (``duck_type``).
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence
from typing import Any

import pyarrow as pa

from planner.systables.pg_types import PgType, pg_type_for_duck
from stores.catalog.decimals import DecimalType
from stores.catalog.nested import NestedType
from stores.catalog.schema import SqlType
from stores.engine.arrow_reads import ARROW_TYPES as _STORE_ARROW_TYPES

from .errors import ExecutionError

__all__ = ["duck_type", "scan_arrow_type", "answer_arrow_type", "pg_type", "rows_table", "table_rows",
           "DUCK_TYPES", "ANSWER_ARROW"]

# -- store columns --------------------------------------------------------------------------------------------
# What a store column is called in DuckDB (DESCRIBE, /v1/stores, result metadata of rows built without DuckDB).
DUCK_TYPES: dict[SqlType, str] = {
    SqlType.BIGINT: "BIGINT",
    SqlType.INTEGER: "INTEGER",
    SqlType.DOUBLE: "DOUBLE",
    SqlType.VARCHAR: "VARCHAR",
    SqlType.BOOLEAN: "BOOLEAN",
    SqlType.TIMESTAMP: "TIMESTAMP WITH TIME ZONE",
    SqlType.DATE: "DATE",
    SqlType.BLOB: "BLOB",
}

# What a scan hands DuckDB for a store column (the stores' own Arrow: times as stored, epoch ms; DuckDB reads them
# as its TIMESTAMP WITH TIME ZONE). Not the answers' types: those are ANSWER_ARROW.
_SCAN_ARROW: dict[SqlType, pa.DataType] = {**_STORE_ARROW_TYPES, SqlType.BLOB: pa.binary()}


def duck_type(t: SqlType | DecimalType | NestedType) -> str:
    """The DuckDB type name of a store column."""
    if isinstance(t, DecimalType):
        return t.value
    return t.render(DUCK_TYPES.__getitem__) if isinstance(t, NestedType) else DUCK_TYPES[t]


def scan_arrow_type(t: SqlType | DecimalType | NestedType) -> pa.DataType:
    """The Arrow type of a store column in a scan: nested columns Arrow LIST / STRUCT / MAP, decimals
    decimal128(p, s)."""
    if isinstance(t, DecimalType):
        return pa.decimal128(t.precision, t.scale)
    if not isinstance(t, NestedType):
        return _SCAN_ARROW[t]
    if t.kind == "ARRAY":
        return pa.list_(scan_arrow_type(t.element))
    if t.kind == "MAP":
        return pa.map_(scan_arrow_type(t.key), scan_arrow_type(t.element))
    return pa.struct([pa.field(n, scan_arrow_type(ft)) for n, ft in t.fields])


# -- answers -----------------------------------------------------------------------------------------------------
# The Arrow type of an answer column, by its DuckDB type: as DuckDB exports it (arrow_faithful for the three it
# exports unfaithfully). Used for answers built from Python rows, so they read as DuckDB's Arrow would.
ANSWER_ARROW: dict[str, pa.DataType] = {
    "BIGINT": pa.int64(), "INTEGER": pa.int32(), "SMALLINT": pa.int16(), "TINYINT": pa.int8(),
    "UBIGINT": pa.uint64(), "UINTEGER": pa.uint32(), "USMALLINT": pa.uint16(), "UTINYINT": pa.uint8(),
    "HUGEINT": pa.decimal128(38, 0), "UHUGEINT": pa.decimal128(38, 0),
    "DOUBLE": pa.float64(), "FLOAT": pa.float32(),
    "BOOLEAN": pa.bool_(), "VARCHAR": pa.string(), "BLOB": pa.binary(), "UUID": pa.string(),
    "DATE": pa.date32(), "TIME": pa.time64("us"), "TIME WITH TIME ZONE": pa.string(),
    "TIMESTAMP": pa.timestamp("us"), "TIMESTAMP WITH TIME ZONE": pa.timestamp("us", tz="UTC"),
    "TIMESTAMPTZ": pa.timestamp("us", tz="UTC"), "INTERVAL": pa.month_day_nano_interval(),
}


def answer_arrow_type(duck: str) -> pa.DataType | None:
    """The Arrow type of an answer column of DuckDB type ``duck``; None where pyarrow should infer it (nested)."""
    if duck.endswith("[]"):
        inner = answer_arrow_type(duck[:-2])
        return pa.list_(inner) if inner is not None else None
    return ANSWER_ARROW.get(duck)


def pg_type(duck: str) -> PgType:
    """The PostgreSQL type of an answer column of DuckDB type ``duck`` (RowDescription, pg_attribute)."""
    return pg_type_for_duck(duck)


# -- rows <-> Arrow ------------------------------------------------------------------------------------------------
def table_rows(table: pa.Table) -> list[tuple[Any, ...]]:
    """Python tuples from Arrow, as DuckDB would hand them out (tz-aware UTC datetimes)."""
    if table.num_columns == 0:
        return [() for _ in range(table.num_rows)]
    cols = [c.to_pylist() for c in table.columns]
    return list(zip(*cols))


def _decimal128(name: str, duck: str, values: list[Any]) -> pa.Array:
    """Integers as the decimal128(38, 0) DuckDB exports HUGEINT as; one past its signed 128 bits is an error,
    as DuckDB's cast of it is (arrow_faithful), never a wrapped-around value."""
    for v in values:
        if v is not None and not -(2**127) <= v < 2**127:
            raise ExecutionError(f"column {name!r}: the {duck} value {v} is out of range for Arrow's "
                                 "decimal128(38, 0) (an answer as Arrow carries 128-bit integers as signed)")
    # from the 16-byte integers themselves, as DuckDB writes them: pyarrow's own conversion refuses 39 digits
    data = pa.py_buffer(b"".join((0 if v is None else int(v)).to_bytes(16, "little", signed=True) for v in values))
    valid = pa.array([v is not None for v in values], type=pa.bool_()).buffers()[1] if None in values else None
    return pa.Array.from_buffers(pa.decimal128(38, 0), len(values), [valid, data])


def rows_table(columns: Sequence[tuple[str, str]], rows: Sequence[tuple[Any, ...]]) -> pa.Table:
    """Arrow for rows in hand (the point lane, the fast path, the evaluator, catalog statements), typed as
    DuckDB's export of the same answer would be."""
    from .arrow_faithful import timetz_text

    arrays = []
    for i, (name, t) in enumerate(columns):
        values = [r[i] for r in rows]
        if t in ("HUGEINT", "UHUGEINT"):
            arrays.append(_decimal128(name, t, values))
            continue
        if t == "TIME WITH TIME ZONE":  # as arrow_faithful sends it: Arrow's time has no offset
            values = [timetz_text(v) for v in values]
        elif t == "UUID":  # as DuckDB exports it: text
            values = [None if v is None else str(v) for v in values]
        elif t in ("TIMESTAMP WITH TIME ZONE", "TIMESTAMPTZ"):
            values = [v.astimezone(dt.timezone.utc) if isinstance(v, dt.datetime) and v.tzinfo else v
                      for v in values]
        try:
            arrays.append(pa.array(values, type=answer_arrow_type(t)))
        except (pa.ArrowInvalid, pa.ArrowTypeError, OverflowError) as exc:  # e.g. a UHUGEINT past 2^64 in a LIST
            raise ExecutionError(f"column {name!r} of type {t} cannot be sent as Arrow: {exc}") from exc
    return pa.Table.from_arrays(arrays, names=[n for n, _ in columns]) if columns else pa.table({})
