"""System tables: ``information_schema`` and ``pg_catalog``, answered from the store catalog and nothing else.

BI tools and PostgreSQL clients find tables and columns by querying these
(psql's ``\\dt``, SQLAlchemy's inspector, DBeaver, Metabase). Each system
table here is a fixed list of typed columns plus a pure function from the
store catalog and the caller's ``SystemContext`` to rows; the gateway turns
them into small relations on the request's own DuckDB cursor, named
``relation_name(key)``. DuckDB's own catalog is never reachable: every table
a statement names is a store or one of these.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from stores.catalog.schema import StoreSpec

from .information_schema import TABLES as _INFORMATION_SCHEMA
from .iqgate_system import TABLES as _SYSTEM
from .model import SERVER_VERSION, STORE_NAMESPACE_OID, VERSION_STRING, SystemContext, SystemTable
from .pg_catalog import TABLES as _PG_CATALOG

__all__ = ["SystemContext", "SystemTable", "SYSTEM_SCHEMAS", "SYSTEM_TABLES", "UNQUALIFIED_SYSTEM_TABLES",
           "relation_name", "table_rows", "STORE_NAMESPACE_OID", "SERVER_VERSION", "VERSION_STRING"]

SYSTEM_SCHEMAS = ("information_schema", "pg_catalog", "system")
SYSTEM_TABLES: dict[str, SystemTable] = {f"{t.schema}.{t.name}": t for t in (*_INFORMATION_SCHEMA, *_PG_CATALOG,
                                                                             *_SYSTEM)}
#: PostgreSQL looks pg_catalog up first: ``FROM pg_type`` means ``pg_catalog.pg_type`` (psycopg writes that).
UNQUALIFIED_SYSTEM_TABLES = {k.split(".", 1)[1]: k for k in SYSTEM_TABLES if k.startswith("pg_catalog.")}


def relation_name(key: str) -> str:
    """The relation a system table is registered as on a request's cursor."""
    return "__iq_sys_" + key.replace(".", "__")


def table_rows(key: str, catalog: Mapping[str, StoreSpec], ctx: SystemContext) -> list[tuple[Any, ...]]:
    table = SYSTEM_TABLES[key]
    return [] if table.rows is None else [tuple(r) for r in table.rows(catalog, ctx)]
