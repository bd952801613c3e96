"""Store lookup: table names to catalog entries, with the did-you-mean a user needs after a typo.

DuckDB matches identifiers case-insensitively, so the planner does too: the
exact spelling wins, then a unique case-insensitive match.
"""

from __future__ import annotations

from collections.abc import Mapping

from sqlglot import exp

from stores.catalog.schema import StoreSpec

from .errors import UnknownStoreError
from .suggest import closest

__all__ = ["find_store", "resolve_store", "unknown_store", "store_column_names"]


def find_store(catalog: Mapping[str, StoreSpec], name: str) -> tuple[str, StoreSpec] | None:
    spec = catalog.get(name)
    if spec is not None:
        return name, spec
    lowered = name.lower()
    matches = [n for n in catalog if n.lower() == lowered]
    if len(matches) == 1:
        return matches[0], catalog[matches[0]]
    return None


def unknown_store(
    catalog: Mapping[str, StoreSpec], name: str, *, line: int | None, col: int | None, what: str = "store"
) -> UnknownStoreError:
    names = sorted(catalog)
    suggestion = closest(name, names)
    if suggestion is not None:
        hint = f"; did you mean {suggestion!r}?"
    elif names:
        hint = f"; known stores: {', '.join(names)}"
    else:
        hint = "; the catalog has no stores"
    return UnknownStoreError(f"unknown {what} {name!r}{hint}", line=line, col=col)


def resolve_store(
    catalog: Mapping[str, StoreSpec], table: exp.Table, *, line: int | None, col: int | None
) -> tuple[str, StoreSpec]:
    """The store a table reference names, or UnknownStoreError (schema-qualified names are never stores)."""
    if table.args.get("db") or table.args.get("catalog"):
        raise unknown_store(catalog, table.sql(dialect="duckdb"), line=line, col=col)
    found = find_store(catalog, table.name)
    if found is None:
        raise unknown_store(catalog, table.name, line=line, col=col)
    return found


def store_column_names(spec: StoreSpec) -> tuple[str, ...]:
    return tuple(c.name for c in spec.columns())
