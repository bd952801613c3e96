"""PEP 249 type objects and constructors, and the conversion of wire values to Python values.

``cursor.description`` carries the column's DuckDB type name (``"VARCHAR"``,
``"DECIMAL(18,3)"``, ``"TIMESTAMP WITH TIME ZONE"`` …) as its type code,
because that is what the gateway reports and what a user can read; the type
objects below compare equal to every type name of their group, which is the
PEP 249 rule ("type objects must compare equal to the type codes").

The remote transport gets JSON, which cannot carry every SQL type, so the
gateway sends timestamps, dates, times, decimals and UUIDs as strings and bytes as
base64; ``decoder_for`` turns them back into the Python values the
in-process path returns, guided by the column's type name, inside LIST and
STRUCT values too. A value a decoder cannot read stays as sent (DuckDB itself
hands out text for a TIME of 24:00:00 or a date past year 9999). One thing JSON
loses for good: NaN and infinite floats arrive as null (the gateway's JSON
contract; read such columns in process, or over the PG port).
"""

from __future__ import annotations

import base64
import binascii
import datetime as _dt
import decimal
import re
import time
import uuid
from collections.abc import Callable
from typing import Any

__all__ = [
    "DBAPITypeObject", "STRING", "BINARY", "NUMBER", "DATETIME", "ROWID",
    "Date", "Time", "Timestamp", "DateFromTicks", "TimeFromTicks", "TimestampFromTicks", "Binary",
    "base_type", "decoder_for", "native_fix_for",
]


def base_type(type_name: str) -> str:
    """``"DECIMAL(18,3)"`` -> ``"DECIMAL"``, ``"VARCHAR[]"`` -> ``"LIST"``: the part type groups match on."""
    t = type_name.strip().upper()
    if t.endswith("]") or t.startswith(("LIST", "ARRAY")):
        return "LIST"
    return t.split("(", 1)[0].strip()


class DBAPITypeObject:
    """Equal to every type code (a type name string) of its group, as PEP 249 asks.

    >>> STRING == "VARCHAR", "VARCHAR" == STRING, NUMBER == "DECIMAL(18,3)", NUMBER == "VARCHAR"
    (True, True, True, False)
    """

    __slots__ = ("name", "values")

    def __init__(self, name: str, *values: str) -> None:
        self.name = name
        self.values = frozenset(values)

    def __eq__(self, other: object) -> bool:
        if isinstance(other, DBAPITypeObject):
            return self is other
        if isinstance(other, str):
            return base_type(other) in self.values
        return NotImplemented

    def __ne__(self, other: object) -> bool:
        eq = self.__eq__(other)
        return eq if eq is NotImplemented else not eq

    def __hash__(self) -> int:
        return hash((DBAPITypeObject, self.name))

    def __repr__(self) -> str:
        return f"<DBAPITypeObject {self.name}>"


STRING = DBAPITypeObject("STRING", "VARCHAR", "CHAR", "BPCHAR", "TEXT", "STRING", "UUID", "JSON", "ENUM")
BINARY = DBAPITypeObject("BINARY", "BLOB", "BYTEA", "VARBINARY", "BINARY", "BIT", "BITSTRING")
NUMBER = DBAPITypeObject(
    "NUMBER", "TINYINT", "SMALLINT", "INTEGER", "INT", "BIGINT", "HUGEINT", "UTINYINT", "USMALLINT",
    "UINTEGER", "UBIGINT", "UHUGEINT", "FLOAT", "REAL", "DOUBLE", "DECIMAL", "NUMERIC", "BOOLEAN",
)
DATETIME = DBAPITypeObject(
    "DATETIME", "DATE", "TIME", "TIMESTAMP", "TIMESTAMP WITH TIME ZONE", "TIMESTAMPTZ", "TIMESTAMP_S",
    "TIMESTAMP_MS", "TIMESTAMP_NS", "TIME WITH TIME ZONE", "TIMETZ", "INTERVAL",
)
# Stores have no row ids: nothing compares equal to ROWID, but PEP 249 requires the name.
ROWID = DBAPITypeObject("ROWID")

# -- constructors (PEP 249 "Type Objects and Constructors") -------------------------
Date = _dt.date
Time = _dt.time
Timestamp = _dt.datetime
Binary = bytes


def DateFromTicks(ticks: float) -> _dt.date:  # noqa: N802 - the PEP 249 name
    return Date(*time.localtime(ticks)[:3])


def TimeFromTicks(ticks: float) -> _dt.time:  # noqa: N802
    return Time(*time.localtime(ticks)[3:6])


def TimestampFromTicks(ticks: float) -> _dt.datetime:  # noqa: N802
    return Timestamp(*time.localtime(ticks)[:6])


# -- JSON wire values -> Python values ---------------------------------------------
def _timestamp(v: Any) -> Any:
    if not isinstance(v, str):
        return v
    return _dt.datetime.fromisoformat(v.replace("Z", "+00:00") if v.endswith("Z") else v)


def _naive_timestamp(v: Any) -> Any:
    """A TIMESTAMP (without zone) column: the gateway may mark it UTC with 'Z'; return it naive like DuckDB."""
    out = _timestamp(v)
    if isinstance(out, _dt.datetime) and out.tzinfo is not None:
        out = out.astimezone(_dt.timezone.utc).replace(tzinfo=None)
    return out


def _date(v: Any) -> Any:
    return _dt.date.fromisoformat(v) if isinstance(v, str) else v


def _time(v: Any) -> Any:
    return _dt.time.fromisoformat(v) if isinstance(v, str) else v


def _decimal(v: Any) -> Any:
    if isinstance(v, (str, int)) and not isinstance(v, bool):
        return decimal.Decimal(v)
    if isinstance(v, float):
        return decimal.Decimal(repr(v))
    return v


def _blob(v: Any) -> Any:
    return base64.b64decode(v) if isinstance(v, str) else v


_INTERVAL = re.compile(r"^(?:(-?\d+) days?, )?(-?\d+):(\d{2}):(\d{2})(?:\.(\d{1,6}))?$")


def _interval(v: Any) -> Any:
    """An INTERVAL as a timedelta, as DuckDB's own Python API returns it (a month counts 30 days).

    Through Arrow an interval is (months, days, nanoseconds) — pyarrow's
    MonthDayNano in-process, a 3-element array in JSON; older servers may send
    ``str(timedelta)``. Text that is neither stays text.
    """
    if isinstance(v, (list, tuple)) and len(v) == 3 and all(isinstance(x, int) for x in v):
        months, days, nanos = v
        return _dt.timedelta(days=months * 30 + days, microseconds=nanos // 1000)
    if not isinstance(v, str):
        return v
    m = _INTERVAL.match(v.strip())
    if m is None:
        return v
    days, h, mi, sec, frac = m.groups()
    return _dt.timedelta(days=int(days or 0), hours=int(h), minutes=int(mi), seconds=int(sec),
                         microseconds=int((frac or "0").ljust(6, "0")))


def _hugeint(v: Any) -> Any:
    return int(v) if isinstance(v, str) else v


def _uuid(v: Any) -> Any:
    return uuid.UUID(v) if isinstance(v, str) else v


_DECODERS: dict[str, Callable[[Any], Any]] = {
    "TIMESTAMP WITH TIME ZONE": _timestamp,
    "TIMESTAMPTZ": _timestamp,
    "TIMESTAMP": _naive_timestamp,
    "TIMESTAMP_S": _naive_timestamp,
    "TIMESTAMP_MS": _naive_timestamp,
    "TIMESTAMP_NS": _naive_timestamp,
    "DATE": _date,
    "TIME": _time,
    "TIME WITH TIME ZONE": _time,
    "TIMETZ": _time,
    "UUID": _uuid,
    "DECIMAL": _decimal,
    "NUMERIC": _decimal,
    "BLOB": _blob,
    "BYTEA": _blob,
    "GEOMETRY": _blob,
    "INTERVAL": _interval,
    "HUGEINT": _hugeint,
    "UHUGEINT": _hugeint,
    "UBIGINT": _hugeint,
}


_UNREADABLE = (ValueError, TypeError, OverflowError, decimal.InvalidOperation, binascii.Error)


def _lenient(fn: Callable[[Any], Any]) -> Callable[[Any], Any]:
    """``fn``, except that a value it cannot read stays as sent instead of failing the fetch."""
    def decode(v: Any) -> Any:
        try:
            return fn(v)
        except _UNREADABLE:
            return v
    return decode


def decoder_for(type_name: str) -> Callable[[Any], Any] | None:
    """The function that turns a JSON value of this column type into its Python value (None: as is)."""
    t = type_name.strip()
    if t.endswith("]") and "[" in t:  # LIST (``X[]``) or ARRAY (``X[3]``)
        inner = decoder_for(t[:t.rindex("[")])
        return None if inner is None else _each(inner)
    if t.upper().startswith("STRUCT(") and t.endswith(")"):
        fields = {name: decoder_for(ft) for name, ft in map(_struct_field, _top_level(t[7:-1]))}
        fields = {name: d for name, d in fields.items() if d is not None}
        return _struct(fields) if fields else None
    fn = _DECODERS.get(base_type(t))
    return None if fn is None else _lenient(fn)


def _each(inner: Callable[[Any], Any]) -> Callable[[Any], Any]:
    return lambda v: [None if x is None else inner(x) for x in v] if isinstance(v, list) else v


def _struct(fields: dict[str, Callable[[Any], Any]]) -> Callable[[Any], Any]:
    def decode(v: Any) -> Any:
        if not isinstance(v, dict):
            return v
        return {k: (fields[k](x) if x is not None and k in fields else x) for k, x in v.items()}
    return decode


def _top_level(text: str) -> list[str]:
    """``a INTEGER, b DECIMAL(4,1), "c,d" VARCHAR`` split at the commas outside parentheses and quotes."""
    parts, depth, quoted, start = [], 0, False, 0
    for i, ch in enumerate(text):
        if ch == '"':
            quoted = not quoted
        elif not quoted and ch == "(":
            depth += 1
        elif not quoted and ch == ")":
            depth -= 1
        elif not quoted and depth == 0 and ch == ",":
            parts.append(text[start:i].strip())
            start = i + 1
    parts.append(text[start:].strip())
    return [p for p in parts if p]


def _struct_field(text: str) -> tuple[str, str]:
    """``name TYPE``, or a double-quoted name (a quote inside doubled) and its TYPE -> (name, TYPE)."""
    if text.startswith('"'):
        i = 1
        while i < len(text):
            if text[i] == '"':
                if text[i + 1:i + 2] == '"':
                    i += 2
                    continue
                break
            i += 1
        return text[1:i].replace('""', '"'), text[i + 1:].strip()
    name, _, rest = text.partition(" ")
    return name, rest.strip()


# In-process rows are Python values already, except where Arrow's own Python form differs from
# DuckDB's (the DB-API promises the same values on both transports).
_NATIVE_FIXES: dict[str, Callable[[Any], Any]] = {"INTERVAL": _interval}


def native_fix_for(type_name: str) -> Callable[[Any], Any] | None:
    """For in-process rows: the conversion this column type needs (None for nearly every type)."""
    return _NATIVE_FIXES.get(base_type(type_name))
