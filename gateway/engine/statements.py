"""Statements answered without reading a store: SET/RESET, SHOW TABLES, DESCRIBE, EXPLAIN.

Their results have the same shape as a SELECT's (columns, rows, an empty
Position, no partitions), so every face renders them the same way.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from planner.plan import Plan, StatementKind
from stores.catalog.schema import StoreSpec
from stores.catalog.streams import StreamSpec, streams_of
from stores.iqv2.position import Position

from .config import Session
from .result import Result
from .types import duck_type

__all__ = ["set_result", "static_result", "show_tables", "describe", "explain_result", "setting_text"]

def set_result(plan: Plan, session: Session | Mapping[str, Any] | None, settings: dict[str, Any],
               pool: Any) -> Result:
    """Apply ``SET``/``RESET`` to a Session (a mapping is per statement only) and list the settings now in force."""
    new = dict(settings)
    new.update(plan.settings)
    if isinstance(session, Session):
        session.apply(plan.settings)
        new = session.settings
    rows = [(k, setting_text(v)) for k, v in sorted(new.items())]
    return Result.in_hand([("setting", "VARCHAR"), ("value", "VARCHAR")], rows, Position.empty(), [],
                          StatementKind.SET, pool, new)


def static_result(kind: StatementKind, columns: list[tuple[str, str]], rows: list[tuple[Any, ...]],
                  pool: Any) -> Result:
    return Result.in_hand(columns, rows, Position.empty(), [], kind, pool)


def explain_result(plan: Plan, pool: Any) -> Result:
    lines = (plan.explain or "").splitlines() or [""]
    return static_result(StatementKind.EXPLAIN, [("plan", "VARCHAR")], [(ln,) for ln in lines], pool)


def show_tables(catalog: Mapping[str, StoreSpec], pool: Any) -> Result:
    """The stores and the streams (kind ``stream``), by name."""
    relations: dict[str, StoreSpec | StreamSpec] = {**streams_of(catalog), **catalog}
    rows = [(name, spec.kind.value, spec.partitions, spec.key.name) for name, spec in sorted(relations.items())]
    cols = [("name", "VARCHAR"), ("kind", "VARCHAR"), ("partitions", "INTEGER"), ("key", "VARCHAR")]
    return static_result(StatementKind.SHOW_TABLES, cols, rows, pool)


def describe(spec: StoreSpec | StreamSpec, pool: Any) -> Result:
    """A store's columns (its key the primary key), or a stream's: key and values, then the record's own columns
    (``extra`` says so: ``SELECT *`` leaves them out). A stream's key is no primary key: records repeat keys."""
    if isinstance(spec, StreamSpec):
        rows = [(c.name, duck_type(c.type), "YES" if c.nullable else "NO", None, None, None) for c in spec.columns()]
        rows += [(c.name, duck_type(c.type), "YES" if c.nullable else "NO", None, None, "record column")
                 for c in spec.record_columns()]
    else:
        keys = spec.key_columns()
        rows = [(c.name, duck_type(c.type), "YES" if c.nullable and c not in keys else "NO",
                 "PRI" if c in keys else None, None, None) for c in spec.columns()]
    cols = [("column_name", "VARCHAR"), ("column_type", "VARCHAR"), ("null", "VARCHAR"), ("key", "VARCHAR"),
            ("default", "VARCHAR"), ("extra", "VARCHAR")]
    return static_result(StatementKind.DESCRIBE, cols, rows, pool)


def setting_text(v: Any) -> str | None:
    if v is None:
        return None
    if isinstance(v, Position):
        return v.to_json()
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, (dict, list)):
        return json.dumps(v)
    return str(v)
