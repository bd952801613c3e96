"""A statement's result columns without running it: what PostgreSQL's Describe of a prepared statement needs.

The planner gives the plan's shape (``planner.plan_shape``: no parameter
values, residual SQL with NULL for each). Each store (and stream) scan is registered as an
empty relation with the store's columns, the system tables as they are, and
DuckDB binds the residual SQL without executing it: its column names and
types are exactly those the statement will answer with, and no store is read.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import duckdb

from planner.plan import Plan, StatementKind
from planner.systables import SystemContext
from stores.catalog.schema import StoreSpec
from stores.catalog.streams import streams_of

from .arrow_rows import ScanRows
from .duck import duck_error
from .stream_reads import empty_stream_table
from .system_tables import register_system_tables

__all__ = ["shape_columns"]

_STATIC: dict[StatementKind, list[tuple[str, str]]] = {
    StatementKind.SET: [],
    StatementKind.EXPLAIN: [("plan", "VARCHAR")],
    StatementKind.SHOW_TABLES: [("name", "VARCHAR"), ("kind", "VARCHAR"), ("partitions", "INTEGER"), ("key", "VARCHAR")],
    StatementKind.DESCRIBE: [("column_name", "VARCHAR"), ("column_type", "VARCHAR"), ("null", "VARCHAR"),
                             ("key", "VARCHAR"), ("default", "VARCHAR"), ("extra", "VARCHAR")],
}


def shape_columns(shape: Plan, catalog: Mapping[str, StoreSpec], settings: Mapping[str, Any],
                  context: SystemContext | None, cursor_factory: Callable[[], Any]) -> list[tuple[str, str]]:
    if shape.kind is StatementKind.SUBSCRIBE and shape.subscription is not None:  # the rows its changes carry
        from .live.changes import subscription_columns

        sub = shape.subscription
        cur = cursor_factory()
        try:
            return subscription_columns(cur, sub, catalog[sub.store])
        finally:
            cur.close()
    if shape.kind is not StatementKind.SELECT:
        return list(_STATIC[shape.kind])
    cur = cursor_factory()
    try:
        for scan in shape.scans:
            cur.register(scan.relation, ScanRows(catalog[scan.store]).to_arrow(scan.include_failures))
        for stream in shape.streams:
            cur.register(stream.relation, empty_stream_table(streams_of(catalog)[stream.stream]))
        if shape.system_tables:
            register_system_tables(cur, shape.system_tables, catalog, context, settings)
        rel = cur.sql(shape.residual_sql or "")
        return [(str(n), str(t)) for n, t in zip(rel.columns, rel.types)]
    except duckdb.Error as exc:
        raise duck_error(exc, 0) from exc
    finally:
        cur.close()
