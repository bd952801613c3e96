"""A column the new version of a store has before its rebuild swapped in: COLUMN_NOT_YET_AVAILABLE (issue 20).

While a store whose definition changed is rebuilt beside its old version,
the old version answers under the store's name with its old columns. A
statement naming a column only the new version has is not a mistake in the
SQL (it will be right in a moment), so instead of UNKNOWN_COLUMN it gets a
retryable error saying the column arrives with the swap, and how far the
rebuild is.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from .errors import ColumnNotYetAvailableError
from .sources import Capabilities

__all__ = ["not_yet_available"]


def not_yet_available(caps: Capabilities, exc: BaseException) -> ColumnNotYetAvailableError | None:
    """The error for ``exc`` (a planner UnknownColumnError) when the column arrives with a rebuild, else None."""
    store, column = getattr(exc, "store", None), getattr(exc, "column", None)
    upcoming = caps.upcoming_columns
    if not isinstance(store, str) or not isinstance(column, str) or upcoming is None:
        return None
    try:
        info = upcoming(store)
    except Exception:  # noqa: BLE001 - the source closing: the planner's own error stands
        return None
    if not info or column.lower() not in {c.lower() for c in info.get("columns", ())}:
        return None
    return ColumnNotYetAvailableError(
        f"column {column!r} of store {store} arrives when the store's rebuild completes: its definition changed "
        f"and the new version is being rebuilt beside the old one, which answers meanwhile with its columns "
        f"({', '.join(info.get('serving', ()))}){_progress(info.get('progress'))}",
        line=getattr(exc, "line", None), col=getattr(exc, "col", None))


def _progress(progress: Mapping[str, Any] | None) -> str:
    if not progress or "target" not in progress:
        return "; the rebuild has not started yet"
    eta = progress.get("eta_s")
    rate = progress.get("records_per_s")
    return (f"; rebuild progress: {progress.get('reached', 0):,} of {progress.get('target', 0):,} records"
            + (f" at {rate:,.0f} records/s" if rate else "") + (f", ETA {eta:.0f} s" if eta is not None else ""))
