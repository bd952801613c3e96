"""Source positions: turning character offsets and AST nodes into 1-based line/column.

sqlglot records offsets on identifiers and literals only; errors about other
nodes fall back to the first positioned node inside them, so every message
the user sees points somewhere in their text when it can.
"""

from __future__ import annotations

from sqlglot import exp

__all__ = ["line_col", "node_position"]


def line_col(sql: str, offset: int) -> tuple[int, int]:
    """1-based line and column of character ``offset`` in ``sql``."""
    offset = max(0, min(offset, len(sql)))
    line = sql.count("\n", 0, offset) + 1
    last_nl = sql.rfind("\n", 0, offset)
    return line, offset - last_nl


def node_position(sql: str, node: exp.Expression | None) -> tuple[int | None, int | None]:
    """Where ``node`` (or the first positioned node within it) starts, else (None, None)."""
    if node is None:
        return None, None
    best: int | None = None
    for sub in node.walk():
        meta = sub._meta
        if meta and meta.get("start") is not None:
            start = meta["start"]
            if best is None or start < best:
                best = start
    if best is None:
        return None, None
    return line_col(sql, best)
