"""Answers as Arrow hold the values the JSON answer holds, for the DuckDB types DuckDB's Arrow export garbles.

Why: DuckDB exports three of its types to Arrow in a way a client cannot
read back (found by comparing the answer formats, s17):

- UHUGEINT goes out as decimal128(38, 0) through a signed 128-bit integer,
  so a value of 2^127 or more arrives negative (2^128 - 1 arrives as -1):
  a wrong answer, silently. It is cast to HUGEINT (exported as DuckDB
  exports HUGEINT), so the values that fit arrive intact and the others fail
  the statement with DuckDB's out-of-range error.
- BIT goes out as DuckDB's internal bit-string bytes (a padding count, then
  padded bits): ``'101'`` arrives as ``b'\\x05\\xfd'``. It is sent as text,
  as the JSON answer and the PG port send it.
- TIME WITH TIME ZONE goes out as an Arrow time without its offset
  (``12:00:00+05`` arrives as 12:00). Arrow has no time-with-offset type, so
  it is sent as DuckDB's text for it, ``12:00:00+05``.

The same holds inside LIST, ARRAY, STRUCT, MAP and UNION values. Every other
type is left as DuckDB exports it.
"""

from __future__ import annotations

import datetime as dt
from typing import Any

import duckdb

__all__ = ["faithful_relation", "faithful_type", "timetz_text"]

_LEAVES = {"uhugeint": "HUGEINT", "bit": "VARCHAR", "time with time zone": "VARCHAR"}


def _name(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def faithful_type(t: Any) -> str | None:
    """The type to cast a column of DuckDB type ``t`` to before exporting it as Arrow; None when it exports
    faithfully as it is."""
    kind = t.id
    if kind in _LEAVES:
        return _LEAVES[kind]
    if kind in ("list", "array"):
        child = faithful_type(t.children[0][1])
        if child is None:
            return None
        return f"{child}[]" if kind == "list" else f"{child}[{t.children[1][1]}]"
    if kind == "map":
        (_, key), (_, value) = t.children
        k, v = faithful_type(key), faithful_type(value)
        if k is None and v is None:
            return None
        return f"MAP({k or key}, {v or value})"
    if kind in ("struct", "union"):
        fields = [(n, c) for n, c in t.children if not (kind == "union" and n == "")]  # a union's tag
        fixed = [faithful_type(c) for _, c in fields]
        if all(f is None for f in fixed):
            return None
        inner = ", ".join(f"{_name(n)} {f or c}" for (n, c), f in zip(fields, fixed))
        return f"{kind.upper()}({inner})"
    return None


def faithful_relation(rel: duckdb.DuckDBPyRelation) -> duckdb.DuckDBPyRelation:
    """``rel`` with the columns DuckDB would export unfaithfully cast (by position: names may repeat)."""
    casts = [faithful_type(t) for t in rel.types]
    if all(c is None for c in casts):
        return rel
    items = [f"#{i}" if c is None else f"CAST(#{i} AS {c})" for i, c in enumerate(casts, start=1)]
    return rel.project(", ".join(f"{item} AS {_name(n)}" for item, n in zip(items, rel.columns)))


def timetz_text(v: dt.time | str | None) -> str | None:
    """A Python TIME WITH TIME ZONE value as DuckDB writes it (``12:00:00.5+05:30``), for answers built from
    Python rows, so they read as the answers DuckDB exported."""
    if v is None or isinstance(v, str):  # DuckDB hands out 24:00:00+00 as text already
        return v
    text = f"{v.hour:02d}:{v.minute:02d}:{v.second:02d}"
    if v.microsecond:
        text += f".{v.microsecond:06d}".rstrip("0")
    offset = v.utcoffset() or dt.timedelta(0)
    secs = int(offset.total_seconds())
    sign = "-" if secs < 0 else "+"
    h, rest = divmod(abs(secs), 3600)
    m, s = divmod(rest, 60)
    text += f"{sign}{h:02d}"
    if m or s:
        text += f":{m:02d}"
    if s:
        text += f":{s:02d}"
    return text
