"""Names to catalog entries: stores by every spelling a BI tool writes, system tables, did-you-mean.

The stores are the tables of one schema. iqgate's own faces (HTTP, DB-API,
SQLAlchemy) report it as ``main``; PostgreSQL clients expect ``public`` and the
PG port reports that. A tool that lists a schema writes it back, quoted or
not (``main.revenue``, ``"public"."revenue"``, ``iqgate.main.revenue``), so a
store answers to its bare name and to each of ``STORE_SCHEMAS``, optionally
behind the database name. ``information_schema`` and ``pg_catalog`` hold the
system tables (``planner.systables``), built from the store catalog.

DuckDB matches identifiers case-insensitively, so the planner does too: the
exact spelling wins, then a unique case-insensitive match.
"""

from __future__ import annotations

from collections.abc import Mapping

from sqlglot import exp

from stores.catalog.schema import StoreSpec
from stores.catalog.streams import StreamSpec, streams_of

from .errors import UnknownSchemaError, UnknownStoreError, UnsupportedSqlError
from .suggest import closest
from .systables import SYSTEM_SCHEMAS, SYSTEM_TABLES, UNQUALIFIED_SYSTEM_TABLES

__all__ = ["find_store", "resolve_store", "resolve_relation", "resolve_system_table", "unknown_store",
           "store_column_names", "STORE_SCHEMAS", "DATABASE"]

#: The schema names the stores answer to: ``main`` (iqgate's faces) and ``public`` (what PG clients expect).
STORE_SCHEMAS = ("main", "public")
#: The database (PG) / catalog name a fully qualified reference may start with.
DATABASE = "iqgate"


def find_store(catalog: Mapping[str, StoreSpec], name: str) -> tuple[str, StoreSpec] | None:
    spec = catalog.get(name)
    if spec is not None:
        return name, spec
    lowered = name.lower()
    matches = [n for n in catalog if n.lower() == lowered]
    if len(matches) == 1:
        return matches[0], catalog[matches[0]]
    return None


def find_stream(catalog: Mapping[str, StoreSpec], name: str) -> tuple[str, StreamSpec] | None:
    """The stream a name means (exact spelling first, then a unique case-insensitive match), or None."""
    found = find_store(streams_of(catalog), name)  # type: ignore[arg-type]
    return found  # type: ignore[return-value]


def unknown_store(
    catalog: Mapping[str, StoreSpec], name: str, *, line: int | None, col: int | None, what: str = "store",
    shown: str | None = None,
) -> UnknownStoreError:
    streams = sorted(streams_of(catalog)) if what != "table function" else []
    names = sorted(catalog)
    suggestion = closest(name, names + streams)
    if suggestion is not None:
        hint = f"; did you mean {suggestion!r}?"
    elif names or streams:
        hint = f"; known stores: {', '.join(names) or 'none'}" + (f"; streams: {', '.join(streams)}" if streams else "")
    else:
        hint = "; the catalog has no stores"
    return UnknownStoreError(f"unknown {what} {(shown or name)!r}{hint}", line=line, col=col)


def _qualifier(table: exp.Table, *, line: int | None, col: int | None) -> str | None:
    """The table's schema in lower case (None when unqualified); an unknown database or schema is an error."""
    written = table.sql(dialect="duckdb")
    catalog_part = table.args.get("catalog")
    if catalog_part is not None and catalog_part.name.lower() != DATABASE:
        raise UnknownSchemaError(
            f"unknown database {catalog_part.name!r} in {written}; the database is {DATABASE!r} "
            f"(schemas: {_schema_list()})", line=line, col=col)
    db = table.args.get("db")
    if db is None:
        return None
    schema = db.name.lower()
    if schema not in STORE_SCHEMAS and schema not in SYSTEM_SCHEMAS:
        close = closest(schema, [*STORE_SCHEMAS, *SYSTEM_SCHEMAS])
        hint = f"; did you mean {close!r}?" if close else ""
        raise UnknownSchemaError(f"unknown schema {db.name!r} in {written}{hint} (schemas: {_schema_list()})",
                                 line=line, col=col)
    return schema


def _schema_list() -> str:
    return (f"{' and '.join(STORE_SCHEMAS)} hold the stores; {', '.join(SYSTEM_SCHEMAS[:-1])} and "
            f"{SYSTEM_SCHEMAS[-1]} describe them")


def resolve_system_table(
    catalog: Mapping[str, StoreSpec], table: exp.Table, *, line: int | None, col: int | None
) -> str | None:
    """``schema.name`` of the system table a reference names, or None when it names a store (or nothing known).

    ``information_schema.x`` and ``pg_catalog.x`` must exist; an unqualified
    ``pg_class`` (PostgreSQL searches pg_catalog first) is a system table
    unless a store has that name.
    """
    schema = _qualifier(table, line=line, col=col)
    name = table.name.lower()
    if schema in SYSTEM_SCHEMAS:
        key = f"{schema}.{name}"
        if key not in SYSTEM_TABLES:
            known = sorted(k.split(".", 1)[1] for k in SYSTEM_TABLES if k.startswith(schema + "."))
            close = closest(name, known)
            hint = f"; did you mean {schema}.{close}?" if close else f"; {schema} has: {', '.join(known)}"
            raise UnknownStoreError(f"unknown system table {schema}.{table.name}{hint}", line=line, col=col)
        return key
    if schema is None and name in UNQUALIFIED_SYSTEM_TABLES and find_store(catalog, table.name) is None:
        return UNQUALIFIED_SYSTEM_TABLES[name]
    return None


def resolve_store(
    catalog: Mapping[str, StoreSpec], table: exp.Table, *, line: int | None, col: int | None
) -> tuple[str, StoreSpec]:
    """The store a table reference names (bare, ``main.``/``public.``, ``iqgate.main.``), or a clear error."""
    schema = _qualifier(table, line=line, col=col)
    if schema in SYSTEM_SCHEMAS:
        raise UnknownStoreError(f"{table.sql(dialect='duckdb')} is a system table, not a store", line=line, col=col)
    found = find_store(catalog, table.name)
    if found is None:
        if find_stream(catalog, table.name) is not None:
            raise UnsupportedSqlError(
                f"{table.name!r} is a stream, not a store: this statement needs a store (SUBSCRIBE and EMIT CHANGES "
                "follow a store's changes); read a stream's records with SELECT", line=line, col=col)
        raise unknown_store(catalog, table.name, line=line, col=col,
                            shown=None if schema is None else f"{schema}.{table.name}")
    return found


def resolve_relation(
    catalog: Mapping[str, StoreSpec], table: exp.Table, *, line: int | None, col: int | None
) -> tuple[str, StoreSpec | StreamSpec]:
    """The store, else the stream, a table reference names (as ``resolve_store`` spells them), or a clear error."""
    schema = _qualifier(table, line=line, col=col)
    if schema in SYSTEM_SCHEMAS:
        raise UnknownStoreError(f"{table.sql(dialect='duckdb')} is a system table, not a store", line=line, col=col)
    found: tuple[str, StoreSpec | StreamSpec] | None = find_store(catalog, table.name) or find_stream(catalog,
                                                                                                    table.name)
    if found is None:
        raise unknown_store(catalog, table.name, line=line, col=col,
                            shown=None if schema is None else f"{schema}.{table.name}")
    return found


def store_column_names(spec: StoreSpec) -> tuple[str, ...]:
    return tuple(c.name for c in spec.columns())
