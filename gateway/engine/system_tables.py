"""The system tables a statement reads (information_schema, pg_catalog), as relations on its DuckDB cursor.

The planner names them and defines their rows (``planner.systables``: pure,
from the store catalog); this module only makes Arrow tables of those rows
and registers them under the names the residual SQL uses. The session's
settings are added to ``pg_settings`` (what ``current_setting`` and ``SHOW``
read) beside the settings the face itself reports (a PG client's
``DateStyle``, ``application_name``…).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Mapping
from datetime import datetime, timezone
from typing import Any

import pyarrow as pa

from planner.settings import SESSION_SETTINGS
from planner.systables import SYSTEM_TABLES, SystemContext, relation_name, table_rows
from stores.catalog.schema import StoreSpec

from .sources import Capabilities
from .statements import setting_text
from .types import answer_arrow_type

__all__ = ["register_system_tables", "session_settings_text", "store_rows"]

def session_settings_text(settings: Mapping[str, Any]) -> dict[str, str]:
    """Every gateway setting (defaults included) as the text SHOW prints."""
    out = {}
    for name, s in SESSION_SETTINGS.items():
        text = setting_text(settings.get(name, s.default))
        out[name] = "" if text is None else text
    return out


def register_system_tables(where: Any, keys: tuple[str, ...], catalog: Mapping[str, StoreSpec],
                           context: SystemContext | None, settings: Mapping[str, Any],
                           partitions: Callable[[], Iterable[tuple[Any, ...]]] | None = None,
                           stores: Callable[[], Iterable[tuple[Any, ...]]] | None = None) -> None:
    """Register the tables on ``where``: a statement's cursor lease (``bind``) or a plain cursor (``register``).
    ``partitions`` / ``stores``: the rows of ``system.partitions`` / ``system.stores``, asked only when read."""
    register = where.bind if hasattr(where, "bind") else where.register
    ctx = (context or SystemContext()).with_settings(session_settings_text(settings))
    if partitions is not None and "system.partitions" in keys:
        ctx = ctx.with_partitions(partitions())
    if stores is not None and "system.stores" in keys:
        ctx = ctx.with_stores(stores())
    for key in keys:
        table = SYSTEM_TABLES[key]
        rows = table_rows(key, catalog, ctx)
        arrays = [pa.array([r[i] for r in rows], type=answer_arrow_type(t)) for i, (_, t) in enumerate(table.columns)]
        register(relation_name(key), pa.Table.from_arrays(arrays, names=[n for n, _ in table.columns]))


def store_rows(caps: Capabilities, catalog: Mapping[str, StoreSpec]) -> list[tuple[Any, ...]]:
    """``system.stores``: each store's status as its source reports it (``status()``), progress and history."""
    statuses = caps.status()["stores"] if caps.status is not None else {}
    history_of = caps.history
    upcoming_of = caps.upcoming_columns
    rows = []
    for name, spec in sorted(catalog.items()):
        st = statuses.get(name)
        progress = dict(st.progress or {}) if st is not None else {}
        history = history_of(name) if history_of is not None else None
        upcoming = upcoming_of(name) if upcoming_of is not None else None
        last = st.last_batch_at if st is not None else None
        rows.append((
            name, spec.kind.value, st.status if st is not None else None, st.reason if st is not None else None,
            progress.get("phase"), progress.get("reached"), progress.get("target"), progress.get("records_per_s"),
            progress.get("eta_s"), _json_or_none(progress.get("position")),
            _json_or_none(progress.get("target_position")),
            list(upcoming["columns"]) if upcoming else None,
            bool(history and history.get("partial")), None if not history else _text(history.get("since")),
            st.batches if st is not None else None,
            None if last is None else datetime.fromtimestamp(last, timezone.utc)))
    return rows


def _json_or_none(value: Any) -> str | None:
    return None if value is None else json.dumps(value, sort_keys=True)


def _text(value: Any) -> str | None:
    return None if value is None else value if isinstance(value, str) else json.dumps(value, sort_keys=True)
