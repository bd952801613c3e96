"""The system tables a statement reads (information_schema, pg_catalog), as relations on its DuckDB cursor.

The planner names them and defines their rows (``planner.systables``: pure,
from the store catalog); this module only makes Arrow tables of those rows
and registers them under the names the residual SQL uses. The session's
settings are added to ``pg_settings`` (what ``current_setting`` and ``SHOW``
read) beside the settings the face itself reports (a PG client's
``DateStyle``, ``application_name``…).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any

import pyarrow as pa

from planner.settings import SESSION_SETTINGS
from planner.systables import SYSTEM_TABLES, SystemContext, relation_name, table_rows
from stores.catalog.schema import StoreSpec

from .statements import setting_text

__all__ = ["register_system_tables", "session_settings_text"]

_ARROW = {"BIGINT": pa.int64(), "INTEGER": pa.int32(), "VARCHAR": pa.string(), "BOOLEAN": pa.bool_(),
          "DOUBLE": pa.float64(), "TIMESTAMPTZ": pa.timestamp("us", tz="UTC")}


def _arrow_type(duck: str) -> pa.DataType:
    if duck.endswith("[]"):
        return pa.list_(_arrow_type(duck[:-2]))
    return _ARROW[duck]


def session_settings_text(settings: Mapping[str, Any]) -> dict[str, str]:
    """Every gateway setting (defaults included) as the text SHOW prints."""
    out = {}
    for name, s in SESSION_SETTINGS.items():
        text = setting_text(settings.get(name, s.default))
        out[name] = "" if text is None else text
    return out


def register_system_tables(cur: Any, keys: tuple[str, ...], catalog: Mapping[str, StoreSpec],
                           context: SystemContext | None, settings: Mapping[str, Any],
                           partitions: Callable[[], Iterable[tuple[Any, ...]]] | None = None) -> None:
    """``partitions``: the rows of ``system.partitions``, asked only when the statement reads it."""
    ctx = (context or SystemContext()).with_settings(session_settings_text(settings))
    if partitions is not None and "system.partitions" in keys:
        ctx = ctx.with_partitions(partitions())
    for key in keys:
        table = SYSTEM_TABLES[key]
        rows = table_rows(key, catalog, ctx)
        arrays = [pa.array([r[i] for r in rows], type=_arrow_type(t)) for i, (_, t) in enumerate(table.columns)]
        cur.register(relation_name(key), pa.Table.from_arrays(arrays, names=[n for n, _ in table.columns]))
