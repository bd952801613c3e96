"""The shapes of system tables and of who asks for them (kept apart so the table modules import no package)."""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from stores.catalog.schema import Column, StoreSpec
from stores.catalog.streams import StreamSpec, streams_of

__all__ = ["SystemContext", "SystemTable", "columns", "STORE_NAMESPACE_OID", "SERVER_VERSION", "VERSION_STRING",
           "relations", "relation_columns", "not_null", "describe_relation"]

#: the PostgreSQL version PG clients are told (features they may use are PG 16's)
SERVER_VERSION = "16.4"
VERSION_STRING = f"PostgreSQL {SERVER_VERSION} (iqgate; read-only SQL over streaming state stores)"
STORE_NAMESPACE_OID = 2200  # PostgreSQL's oid of ``public``: the stores' schema


@dataclass(frozen=True)
class SystemContext:
    """Who asks: the face's name for the stores' schema, and the session as catalog functions report it.

    ``flavor`` is ``postgres`` on the PG port (PostgreSQL type names in
    ``information_schema.columns``) and ``iqgate`` elsewhere (DuckDB's).
    ``settings`` feed ``pg_settings``, ``current_setting()`` and ``SHOW``.
    """

    schema: str = "main"
    database: str = "iqgate"
    user: str = "iqgate"
    flavor: str = "iqgate"
    settings: Mapping[str, str] = field(default_factory=dict)
    backend_pid: int = 0
    application_name: str = ""
    #: rows of ``system.partitions`` (host, store, partition, role, position, lags …), filled by the gateway
    partitions: tuple[tuple[Any, ...], ...] = ()

    #: rows of ``system.stores`` (store, status, rebuild progress, upcoming columns, history …), by the gateway
    stores: tuple[tuple[Any, ...], ...] = ()

    def with_partitions(self, rows: Iterable[tuple[Any, ...]]) -> SystemContext:
        return replace(self, partitions=tuple(rows))

    def with_stores(self, rows: Iterable[tuple[Any, ...]]) -> SystemContext:
        return replace(self, stores=tuple(rows))

    def with_settings(self, extra: Mapping[str, str]) -> SystemContext:
        """The context with ``extra`` settings added beneath its own (its own win)."""
        return replace(self, settings={**extra, **self.settings})


Rows = Callable[[Mapping[str, StoreSpec], SystemContext], Iterable[tuple[Any, ...]]]


@dataclass(frozen=True)
class SystemTable:
    """``columns`` as (name, DuckDB type); ``rows`` builds the content (None: always empty)."""

    schema: str
    name: str
    columns: tuple[tuple[str, str], ...]
    rows: Rows | None = None


def columns(spec: str) -> tuple[tuple[str, str], ...]:
    """``"oid bigint, relname varchar"`` → ((oid, BIGINT), (relname, VARCHAR))."""
    out = []
    for part in spec.split(","):
        name, typ = part.split(None, 1)
        out.append((name.strip(), _OID.sub("UINTEGER", typ.strip().upper())))
    return tuple(out)


# PostgreSQL's oid is an unsigned 32-bit integer: DuckDB's UINTEGER, which the PG port describes as oid (26), so
# clients that decode catalog rows by type (asyncpg's type introspection reads oid and oid[]) get PostgreSQL's.
_OID = re.compile(r"^OID\b")


def relations(catalog: Mapping[str, StoreSpec]) -> dict[str, StoreSpec | StreamSpec]:
    """The tables a catalog shows: its stores and, beside them, its streams, by name."""
    return {**streams_of(catalog), **catalog}


def relation_columns(spec: StoreSpec | StreamSpec) -> tuple[Column, ...]:
    """Every column a statement can name: a store's, or a stream's key, values and record columns."""
    return spec.all_columns() if isinstance(spec, StreamSpec) else spec.columns()


def not_null(spec: StoreSpec | StreamSpec, c: Column) -> bool:
    """A store's key columns are its primary key (NOT NULL); a stream has no primary key (keys repeat, or are
    missing)."""
    return not c.nullable or (isinstance(spec, StoreSpec) and c in spec.key_columns())


def describe_relation(spec: StoreSpec | StreamSpec) -> str:
    """The one-line description a table's comment carries."""
    n = spec.partitions
    if isinstance(spec, StreamSpec):
        return f"stream of topic {spec.topic}, {n} partitions when declared"
    return f"{spec.kind.value} store, key {', '.join(c.name for c in spec.key_columns())}, {n} partitions"
