"""PostgreSQL's built-in types as PG clients know them: OIDs, names, sizes, and the map from our SQL types.

One table serves the PG catalog emulation (``pg_type``, ``format_type``,
``pg_attribute.atttypid``) and the PG wire face (the type OID of each result
column in RowDescription), so a column is described the same way by both.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from stores.catalog.decimals import DecimalType
from stores.catalog.nested import NestedType
from stores.catalog.schema import SqlType

__all__ = ["PgType", "PG_TYPES", "BY_OID", "BY_NAME", "pg_type_for_sql", "pg_type_for_duck", "TEXT", "UNKNOWN"]


@dataclass(frozen=True, slots=True)
class PgType:
    oid: int
    name: str          # typname
    length: int        # typlen (-1 variable)
    category: str      # typcategory
    array_oid: int     # typarray (0: none)
    formatted: str     # format_type(oid, -1)
    element: int = 0   # typelem for array types


_BASE = (
    PgType(16, "bool", 1, "B", 1000, "boolean"),
    PgType(17, "bytea", -1, "U", 1001, "bytea"),
    PgType(18, "char", 1, "Z", 1002, '"char"'),
    PgType(19, "name", 64, "S", 1003, "name"),
    PgType(20, "int8", 8, "N", 1016, "bigint"),
    PgType(21, "int2", 2, "N", 1005, "smallint"),
    PgType(23, "int4", 4, "N", 1007, "integer"),
    PgType(25, "text", -1, "S", 1009, "text"),
    PgType(26, "oid", 4, "N", 1028, "oid"),
    PgType(114, "json", -1, "U", 199, "json"),
    PgType(700, "float4", 4, "N", 1021, "real"),
    PgType(701, "float8", 8, "N", 1022, "double precision"),
    PgType(705, "unknown", -2, "X", 0, "unknown"),
    PgType(1043, "varchar", -1, "S", 1015, "character varying"),
    PgType(1082, "date", 4, "D", 1182, "date"),
    PgType(1083, "time", 8, "D", 1183, "time without time zone"),
    PgType(1114, "timestamp", 8, "D", 1115, "timestamp without time zone"),
    PgType(1184, "timestamptz", 8, "D", 1185, "timestamp with time zone"),
    PgType(1186, "interval", 16, "T", 1187, "interval"),
    PgType(1700, "numeric", -1, "N", 1231, "numeric"),
    PgType(2950, "uuid", 16, "U", 2951, "uuid"),
    PgType(3802, "jsonb", -1, "U", 3807, "jsonb"),
)
_ARRAYS = tuple(PgType(t.array_oid, "_" + t.name, -1, "A", 0, t.formatted + "[]", element=t.oid)
                for t in _BASE if t.array_oid)
PG_TYPES: tuple[PgType, ...] = _BASE + _ARRAYS
BY_OID = {t.oid: t for t in PG_TYPES}
BY_NAME = {t.name: t for t in PG_TYPES} | {t.formatted: t for t in PG_TYPES} | {
    "int": BY_OID[23], "integer": BY_OID[23], "bigint": BY_OID[20], "smallint": BY_OID[21], "boolean": BY_OID[16],
    "float": BY_OID[701], "double": BY_OID[701], "real": BY_OID[700], "decimal": BY_OID[1700],
    "timestamp with time zone": BY_OID[1184], "timestamp without time zone": BY_OID[1114],
}
TEXT = BY_OID[25]
UNKNOWN = BY_OID[705]

_FOR_SQL = {
    SqlType.BIGINT: BY_OID[20], SqlType.INTEGER: BY_OID[23], SqlType.DOUBLE: BY_OID[701],
    SqlType.VARCHAR: BY_OID[25], SqlType.BOOLEAN: BY_OID[16], SqlType.TIMESTAMP: BY_OID[1184],
    SqlType.DATE: BY_OID[1082], SqlType.BLOB: BY_OID[17],
}

_FOR_DUCK = {
    "BOOLEAN": 16, "BLOB": 17, "BIGINT": 20, "SMALLINT": 21, "TINYINT": 21, "UTINYINT": 21, "INTEGER": 23,
    "USMALLINT": 23, "UINTEGER": 26, "UBIGINT": 1700, "HUGEINT": 1700, "UHUGEINT": 1700, "VARCHAR": 25,
    "FLOAT": 700, "DOUBLE": 701, "DATE": 1082, "TIME": 1083, "TIMESTAMP": 1114, "TIMESTAMP_S": 1114,
    "TIMESTAMP_MS": 1114, "TIMESTAMP_NS": 1114, "TIMESTAMP WITH TIME ZONE": 1184, "TIMESTAMPTZ": 1184,
    "INTERVAL": 1186, "UUID": 2950, "JSON": 114, "DECIMAL": 1700,
}
_LIST = re.compile(r"^(.*)\[\d*\]$")


def pg_type_for_sql(t: SqlType | DecimalType | NestedType) -> PgType:
    """The PG type of a store column (an ARRAY its element's array type; STRUCT and MAP travel as text)."""
    if isinstance(t, DecimalType):
        return BY_OID[1700]
    if isinstance(t, NestedType):
        if t.kind == "ARRAY" and not isinstance(t.element, NestedType):
            element = _FOR_SQL[t.element]
            return BY_OID.get(element.array_oid, TEXT) if element.array_oid else TEXT
        return TEXT
    return _FOR_SQL[t]


def pg_type_for_duck(type_name: str) -> PgType:
    """The PG type of a DuckDB result column (lists of a known type are its array type; the rest is text)."""
    t = type_name.strip().upper()
    m = _LIST.match(t)
    if m is not None:
        element = pg_type_for_duck(m.group(1))
        return BY_OID.get(element.array_oid, BY_OID[1009]) if element.array_oid else BY_OID[1009]
    base = t.split("(", 1)[0].strip()
    return BY_OID[_FOR_DUCK.get(base, 25)]
