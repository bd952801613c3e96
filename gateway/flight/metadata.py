"""The Flight SQL catalog calls, answered from ``information_schema`` through the engine, in Flight SQL's shapes.

The planner answers ``information_schema`` from the store catalog (the same
tables psql, DBeaver and SQLAlchemy read over the other faces), so every
face lists the same catalog (``iqgate``), schemas and tables, and the names
they list resolve in SQL (``iqgate.main.revenue``). Flight SQL's filter
patterns are SQL LIKE patterns (``%``, ``_``, escaped with a backslash, as
GetSqlInfo's SQL_SEARCH_STRING_ESCAPE says). Each answer has exactly the
column names, types and nullability FlightSql.proto gives its command.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pyarrow as pa

from .answers import Answer, Runner
from .auth import CallState
from .protocol import Message

__all__ = ["SCHEMAS", "metadata_answer", "xdbc_type_info"]

_S, _I32 = pa.string(), pa.int32()


def _schema(*fields: tuple[str, pa.DataType, bool]) -> pa.Schema:
    return pa.schema([pa.field(name, t, nullable=nullable) for name, t, nullable in fields])


_KEYS = _schema(("pk_catalog_name", _S, True), ("pk_db_schema_name", _S, True), ("pk_table_name", _S, False),
                ("pk_column_name", _S, False), ("fk_catalog_name", _S, True), ("fk_db_schema_name", _S, True),
                ("fk_table_name", _S, False), ("fk_column_name", _S, False), ("key_sequence", _I32, False),
                ("fk_key_name", _S, True), ("pk_key_name", _S, True), ("update_rule", pa.uint8(), False),
                ("delete_rule", pa.uint8(), False))
_TABLES = _schema(("catalog_name", _S, True), ("db_schema_name", _S, True), ("table_name", _S, False),
                  ("table_type", _S, False))
SCHEMAS: dict[str, pa.Schema] = {
    "CommandGetCatalogs": _schema(("catalog_name", _S, False)),
    "CommandGetDbSchemas": _schema(("catalog_name", _S, True), ("db_schema_name", _S, False)),
    "CommandGetTables": _TABLES,
    "CommandGetTables+schema": _TABLES.append(pa.field("table_schema", pa.binary(), nullable=False)),
    "CommandGetTableTypes": _schema(("table_type", _S, False)),
    "CommandGetPrimaryKeys": _schema(("catalog_name", _S, True), ("db_schema_name", _S, True),
                                     ("table_name", _S, False), ("column_name", _S, False), ("key_name", _S, True),
                                     ("key_sequence", _I32, False)),
    "CommandGetExportedKeys": _KEYS,
    "CommandGetImportedKeys": _KEYS,
    "CommandGetCrossReference": _KEYS,
    "CommandGetXdbcTypeInfo": _schema(
        ("type_name", _S, False), ("data_type", _I32, False), ("column_size", _I32, True),
        ("literal_prefix", _S, True), ("literal_suffix", _S, True),
        ("create_params", pa.list_(pa.field("item", _S, nullable=False)), True), ("nullable", _I32, False),
        ("case_sensitive", pa.bool_(), False), ("searchable", _I32, False), ("unsigned_attribute", pa.bool_(), True),
        ("fixed_prec_scale", pa.bool_(), False), ("auto_increment", pa.bool_(), True), ("local_type_name", _S, True),
        ("minimum_scale", _I32, True), ("maximum_scale", _I32, True), ("sql_data_type", _I32, False),
        ("datetime_subcode", _I32, True), ("num_prec_radix", _I32, True), ("interval_precision", _I32, True)),
}
TABLE_TYPE = "TABLE"  # information_schema's BASE TABLE, as Flight SQL and JDBC name it


class _Where:
    """A WHERE clause built from the command's optional filters, with its parameters."""

    def __init__(self) -> None:
        self.terms: list[str] = []
        self.params: list[Any] = []

    def equals(self, column: str, value: str | None) -> None:
        if value is not None:  # "" asks for rows without one: every row here has one
            self.terms.append(f"{column} = ?")
            self.params.append(value)

    def like(self, column: str, pattern: str | None) -> None:
        if pattern is not None:
            self.terms.append(f"{column} LIKE ? ESCAPE '\\'")
            self.params.append(pattern)

    def sql(self) -> str:
        return (" WHERE " + " AND ".join(self.terms)) if self.terms else ""


def _opt(cmd: Message, name: str) -> str | None:
    return getattr(cmd, name) if cmd.HasField(name) else None


def _table(runner: Runner, call: CallState, sql: str, params: Sequence[Any]) -> pa.Table:
    result = runner.gateway.sql(sql, list(params) or None, arrow=True, context=runner.context(call),
                                principal=runner.principal(call))
    try:
        return result.to_arrow()
    finally:
        result.close()


def _rows(runner: Runner, call: CallState, sql: str, params: Sequence[Any] = ()) -> list[dict[str, Any]]:
    return _table(runner, call, sql, params).to_pylist()


def metadata_answer(runner: Runner, call: CallState, name: str, cmd: Message) -> Answer:
    """The answer to one catalog command (``name`` a key of SCHEMAS, the table one without ``+schema``)."""
    table = metadata_table(runner, call, name, cmd)
    return Answer.of_table(table, call.principal)


def metadata_table(runner: Runner, call: CallState, name: str, cmd: Message) -> pa.Table:
    if name == "CommandGetCatalogs":
        rows = _rows(runner, call, "SELECT DISTINCT catalog_name FROM information_schema.schemata ORDER BY 1")
        return pa.Table.from_pylist(rows, schema=SCHEMAS[name])
    if name == "CommandGetDbSchemas":
        where = _Where()
        where.equals("catalog_name", _opt(cmd, "catalog"))
        where.like("schema_name", _opt(cmd, "db_schema_filter_pattern"))
        rows = _rows(runner, call, "SELECT catalog_name, schema_name AS db_schema_name FROM information_schema.schemata"
                     + where.sql() + " ORDER BY 1, 2", where.params)
        return pa.Table.from_pylist(rows, schema=SCHEMAS[name])
    if name == "CommandGetTables":
        return _tables(runner, call, cmd)
    if name == "CommandGetTableTypes":
        rows = _rows(runner, call, "SELECT DISTINCT table_type FROM information_schema.tables")
        types = sorted({TABLE_TYPE} | {_flight_type(r["table_type"]) for r in rows})
        return pa.Table.from_pylist([{"table_type": t} for t in types], schema=SCHEMAS[name])
    if name == "CommandGetPrimaryKeys":
        where = _Where()
        where.equals("table_catalog", _opt(cmd, "catalog"))
        where.equals("table_schema", _opt(cmd, "db_schema"))
        where.equals("table_name", cmd.table)
        rows = _rows(runner, call, "SELECT table_catalog AS catalog_name, table_schema AS db_schema_name, table_name, "
                     "column_name, constraint_name AS key_name, ordinal_position AS key_sequence "
                     "FROM information_schema.key_column_usage" + where.sql() + " ORDER BY 1, 2, 3, 5, 6",
                     where.params)
        return pa.Table.from_pylist(rows, schema=SCHEMAS[name])
    if name in ("CommandGetExportedKeys", "CommandGetImportedKeys", "CommandGetCrossReference"):
        return SCHEMAS[name].empty_table()  # stores have no foreign keys
    if name == "CommandGetXdbcTypeInfo":
        return xdbc_type_info(_opt(cmd, "data_type"))
    raise KeyError(name)


def _flight_type(information_schema_type: str) -> str:
    return TABLE_TYPE if information_schema_type == "BASE TABLE" else information_schema_type


def _tables(runner: Runner, call: CallState, cmd: Message) -> pa.Table:
    where = _Where()
    where.equals("table_catalog", _opt(cmd, "catalog"))
    where.like("table_schema", _opt(cmd, "db_schema_filter_pattern"))
    where.like("table_name", _opt(cmd, "table_name_filter_pattern"))
    rows = _rows(runner, call, "SELECT table_catalog AS catalog_name, table_schema AS db_schema_name, table_name, "
                 "table_type FROM information_schema.tables" + where.sql() + " ORDER BY 1, 2, 3", where.params)
    wanted = set(cmd.table_types)
    for r in rows:
        r["table_type"] = _flight_type(r["table_type"])
    rows = [r for r in rows if not wanted or r["table_type"] in wanted]
    if not cmd.include_schema:
        return pa.Table.from_pylist(rows, schema=SCHEMAS["CommandGetTables"])
    columns: dict[tuple[str, str, str], list[dict[str, Any]]] = {}
    if rows:
        where = _Where()
        where.equals("table_catalog", _opt(cmd, "catalog"))
        where.like("table_schema", _opt(cmd, "db_schema_filter_pattern"))
        where.like("table_name", _opt(cmd, "table_name_filter_pattern"))
        for c in _rows(runner, call, "SELECT table_catalog, table_schema, table_name, column_name, data_type, "
                       "is_nullable FROM information_schema.columns" + where.sql()
                       + " ORDER BY table_catalog, table_schema, table_name, ordinal_position", where.params):
            columns.setdefault((c["table_catalog"], c["table_schema"], c["table_name"]), []).append(c)
    for r in rows:
        cols = columns.get((r["catalog_name"], r["db_schema_name"], r["table_name"]), [])
        r["table_schema"] = table_schema(runner, r, cols).serialize().to_pybytes()
    return pa.Table.from_pylist(rows, schema=SCHEMAS["CommandGetTables+schema"])


def table_schema(runner: Runner, table: dict[str, Any], columns: list[dict[str, Any]]) -> pa.Schema:
    """A store's Arrow schema as ``SELECT *`` answers it, each field carrying the Flight SQL column metadata."""
    arrow = runner.types.schema([(c["column_name"], c["data_type"]) for c in columns])
    fields = []
    for field, c in zip(arrow, columns):
        meta = {"ARROW:FLIGHT:SQL:CATALOG_NAME": table["catalog_name"] or "",
                "ARROW:FLIGHT:SQL:DB_SCHEMA_NAME": table["db_schema_name"] or "",
                "ARROW:FLIGHT:SQL:TABLE_NAME": table["table_name"],
                "ARROW:FLIGHT:SQL:TYPE_NAME": c["data_type"],
                "ARROW:FLIGHT:SQL:IS_READ_ONLY": "1", "ARROW:FLIGHT:SQL:IS_SEARCHABLE": "1",
                "ARROW:FLIGHT:SQL:IS_AUTO_INCREMENT": "0",
                "ARROW:FLIGHT:SQL:IS_CASE_SENSITIVE": "1" if field.type in (pa.string(), pa.large_string()) else "0"}
        fields.append(field.with_nullable(c["is_nullable"] != "NO").with_metadata(meta))
    return pa.schema(fields)


# (type_name, data_type, column_size, prefix, suffix, nullable, case_sensitive, searchable, unsigned,
#  fixed_prec_scale, sql_data_type, datetime_subcode, num_prec_radix): the types stores and answers have
_XDBC: tuple[tuple[Any, ...], ...] = (
    ("BIGINT", -5, 19, None, None, True, False, 2, False, True, -5, None, 10),
    ("BOOLEAN", -7, 1, None, None, True, False, 2, None, False, -7, None, None),
    ("BLOB", -3, None, "'", "'::BLOB", True, False, 0, None, False, -3, None, None),
    ("VARCHAR", 12, None, "'", "'", True, True, 3, None, False, 12, None, None),
    ("DECIMAL", 3, 38, None, None, True, False, 2, False, True, 3, None, 10),
    ("INTEGER", 4, 10, None, None, True, False, 2, False, True, 4, None, 10),
    ("SMALLINT", 5, 5, None, None, True, False, 2, False, True, 5, None, 10),
    ("FLOAT", 6, 24, None, None, True, False, 2, False, False, 6, None, 2),
    ("DOUBLE", 8, 53, None, None, True, False, 2, False, False, 8, None, 2),
    ("DATE", 91, 10, "DATE '", "'", True, False, 2, None, False, 9, 1, None),
    ("TIME", 92, 15, "TIME '", "'", True, False, 2, None, False, 9, 2, None),
    ("TIMESTAMP", 93, 26, "TIMESTAMP '", "'", True, False, 2, None, False, 9, 3, None),
    ("TIMESTAMP WITH TIME ZONE", 93, 32, "TIMESTAMPTZ '", "'", True, False, 2, None, False, 9, 5, None),
)


def xdbc_type_info(data_type: int | None) -> pa.Table:
    """GetXdbcTypeInfo: the SQL types (all, or those of ``data_type``), ordered by data_type then name."""
    rows = []
    for name, dt, size, prefix, suffix, nullable, case, searchable, unsigned, fixed, sql_dt, sub, radix in _XDBC:
        if data_type is not None and dt != data_type:
            continue
        rows.append({"type_name": name, "data_type": dt, "column_size": size, "literal_prefix": prefix,
                     "literal_suffix": suffix, "create_params": ["precision", "scale"] if name == "DECIMAL" else None,
                     "nullable": 1 if nullable else 0, "case_sensitive": case, "searchable": searchable,
                     "unsigned_attribute": unsigned, "fixed_prec_scale": fixed, "auto_increment": None,
                     "local_type_name": name, "minimum_scale": 0 if name == "DECIMAL" else None,
                     "maximum_scale": 38 if name == "DECIMAL" else None, "sql_data_type": sql_dt,
                     "datetime_subcode": sub, "num_prec_radix": radix, "interval_precision": None})
    rows.sort(key=lambda r: (r["data_type"], r["type_name"]))
    return pa.Table.from_pylist(rows, schema=SCHEMAS["CommandGetXdbcTypeInfo"])
