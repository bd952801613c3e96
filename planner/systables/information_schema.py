"""``information_schema``: the SQL-standard views of schemas, tables and columns, for the stores only.

Data types are named the way the asking client expects: PostgreSQL's names
on the PG port (``character varying``…, ``timestamp with time zone``),
DuckDB's elsewhere (``VARCHAR``, ``TIMESTAMP WITH TIME ZONE``), as each
engine's own information_schema does.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

from stores.catalog.decimals import DecimalType
from stores.catalog.nested import NestedType
from stores.catalog.schema import SqlType, StoreSpec

from .model import SystemContext, SystemTable, columns, describe_relation, not_null, relation_columns, relations
from .pg_types import pg_type_for_sql

__all__ = ["TABLES"]

_DUCK_NAMES = {SqlType.BIGINT: "BIGINT", SqlType.INTEGER: "INTEGER", SqlType.DOUBLE: "DOUBLE",
               SqlType.VARCHAR: "VARCHAR", SqlType.BOOLEAN: "BOOLEAN", SqlType.TIMESTAMP: "TIMESTAMP WITH TIME ZONE",
               SqlType.DATE: "DATE", SqlType.BLOB: "BLOB"}
_PRECISION = {SqlType.BIGINT: (64, 2, 0), SqlType.INTEGER: (32, 2, 0), SqlType.DOUBLE: (53, 2, None)}


def _duck_name(t: SqlType | DecimalType | NestedType) -> str:
    if isinstance(t, DecimalType):
        return t.value
    return t.render(_DUCK_NAMES.__getitem__) if isinstance(t, NestedType) else _DUCK_NAMES[t]


def _schemata(catalog: Mapping[str, StoreSpec], ctx: SystemContext) -> Iterator[tuple[Any, ...]]:
    for schema in (ctx.schema, "information_schema", "pg_catalog"):
        yield (ctx.database, schema, ctx.user, None, None, None, None)


def _tables(catalog: Mapping[str, StoreSpec], ctx: SystemContext) -> Iterator[tuple[Any, ...]]:
    for name, spec in sorted(relations(catalog).items()):
        yield (ctx.database, ctx.schema, name, "BASE TABLE", None, None, None, None, None, "NO", "NO", None,
               describe_relation(spec))


def _columns(catalog: Mapping[str, StoreSpec], ctx: SystemContext) -> Iterator[tuple[Any, ...]]:
    for name, spec in sorted(relations(catalog).items()):
        for i, c in enumerate(relation_columns(spec), start=1):
            pg = pg_type_for_sql(c.type)
            data_type = pg.formatted if ctx.flavor == "postgres" else _duck_name(c.type)
            precision, radix, scale = ((c.type.precision, 10, c.type.scale) if isinstance(c.type, DecimalType)
                                       else _PRECISION.get(c.type, (None, None, None)))
            nullable = "NO" if not_null(spec, c) else "YES"
            dt_precision = 3 if c.type is SqlType.TIMESTAMP else (0 if c.type is SqlType.DATE else None)
            yield (ctx.database, ctx.schema, name, c.name, i, None, nullable, data_type, None, None,
                   precision, radix, scale, dt_precision, None, ctx.database, "pg_catalog", pg.name,
                   "NO", "NEVER", "NO", None)


def _table_constraints(catalog: Mapping[str, StoreSpec], ctx: SystemContext) -> Iterator[tuple[Any, ...]]:
    """Each store's key is its primary key (a composite key: one constraint over its columns)."""
    for name in sorted(catalog):
        yield (ctx.database, ctx.schema, f"{name}_pkey", ctx.database, ctx.schema, name, "PRIMARY KEY", "NO", "NO",
               "YES")


def _key_column_usage(catalog: Mapping[str, StoreSpec], ctx: SystemContext) -> Iterator[tuple[Any, ...]]:
    for name, spec in sorted(catalog.items()):
        for i, c in enumerate(spec.key_columns(), start=1):
            yield (ctx.database, ctx.schema, f"{name}_pkey", ctx.database, ctx.schema, name, c.name, i, None)


TABLES = (
    SystemTable("information_schema", "schemata", columns(
        "catalog_name varchar, schema_name varchar, schema_owner varchar, default_character_set_catalog varchar, "
        "default_character_set_schema varchar, default_character_set_name varchar, sql_path varchar"), _schemata),
    SystemTable("information_schema", "tables", columns(
        "table_catalog varchar, table_schema varchar, table_name varchar, table_type varchar, "
        "self_referencing_column_name varchar, reference_generation varchar, user_defined_type_catalog varchar, "
        "user_defined_type_schema varchar, user_defined_type_name varchar, is_insertable_into varchar, "
        "is_typed varchar, commit_action varchar, table_comment varchar"), _tables),
    SystemTable("information_schema", "columns", columns(
        "table_catalog varchar, table_schema varchar, table_name varchar, column_name varchar, "
        "ordinal_position integer, column_default varchar, is_nullable varchar, data_type varchar, "
        "character_maximum_length integer, character_octet_length integer, numeric_precision integer, "
        "numeric_precision_radix integer, numeric_scale integer, datetime_precision integer, interval_type varchar, "
        "udt_catalog varchar, udt_schema varchar, udt_name varchar, is_identity varchar, is_generated varchar, "
        "is_updatable varchar, column_comment varchar"), _columns),
    SystemTable("information_schema", "views", columns(
        "table_catalog varchar, table_schema varchar, table_name varchar, view_definition varchar, "
        "check_option varchar, is_updatable varchar, is_insertable_into varchar")),
    SystemTable("information_schema", "table_constraints", columns(
        "constraint_catalog varchar, constraint_schema varchar, constraint_name varchar, table_catalog varchar, "
        "table_schema varchar, table_name varchar, constraint_type varchar, is_deferrable varchar, "
        "initially_deferred varchar, enforced varchar"), _table_constraints),
    SystemTable("information_schema", "key_column_usage", columns(
        "constraint_catalog varchar, constraint_schema varchar, constraint_name varchar, table_catalog varchar, "
        "table_schema varchar, table_name varchar, column_name varchar, ordinal_position integer, "
        "position_in_unique_constraint integer"), _key_column_usage),
    SystemTable("information_schema", "referential_constraints", columns(
        "constraint_catalog varchar, constraint_schema varchar, constraint_name varchar, "
        "unique_constraint_catalog varchar, unique_constraint_schema varchar, unique_constraint_name varchar, "
        "match_option varchar, update_rule varchar, delete_rule varchar")),
    SystemTable("information_schema", "routines", columns(
        "specific_catalog varchar, specific_schema varchar, specific_name varchar, routine_catalog varchar, "
        "routine_schema varchar, routine_name varchar, routine_type varchar, data_type varchar")),
)
