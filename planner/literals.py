"""Literal values: reading them from the AST, coercing them to a column's type, writing them as SQL.

A predicate is only pushed into an IQv2 query when the planner can compute,
ahead of DuckDB, exactly what DuckDB would compare (timestamps with UTC
offsets read as DuckDB reads them, see ``_parse_timestamp``); anything
ambiguous (``'infinity'``, a DATE compared with a TIMESTAMP) is left to the
residual SQL instead of being guessed.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from datetime import date, datetime, time, timezone
from decimal import Decimal, InvalidOperation
from typing import Any

from sqlglot import exp

from stores.catalog.decimals import EXACT, DecimalType
from stores.catalog.schema import SqlType

from .errors import ParameterError, TypeMismatchError
from .folding import fold_constant

__all__ = ["Const", "Param", "ValueRef", "value_ref", "coerce_bound", "NO_MATCH", "NOT_PUSHABLE", "sql_literal"]


@dataclass(frozen=True, slots=True)
class Const:
    """A literal from the text: its Python value and the SQL type it was written as."""

    value: Any
    sql_type: str
    start: int | None = None


@dataclass(frozen=True, slots=True)
class Param:
    """A placeholder: ``key`` is its 0-based index (``?``, ``$n`` is n-1) or its name (``:name``)."""

    key: int | str
    start: int | None = None


ValueRef = Const | Param


class _Marker:
    def __init__(self, name: str) -> None:
        self.name = name

    def __repr__(self) -> str:
        return self.name


NO_MATCH = _Marker("NO_MATCH")  # the comparison can never be true (1.5 = an integer key)
NOT_PUSHABLE = _Marker("NOT_PUSHABLE")  # valid SQL, but left to DuckDB to decide

_TIME_TYPES = {
    exp.DType.TIMESTAMP: "TIMESTAMP",
    exp.DType.TIMESTAMPNTZ: "TIMESTAMP",
    exp.DType.DATETIME: "TIMESTAMP",
    exp.DType.TIMESTAMPTZ: "TIMESTAMPTZ",
    exp.DType.TIMESTAMPLTZ: "TIMESTAMPTZ",
    exp.DType.DATE: "DATE",
}
_SPECIAL_TIMES = {"epoch", "infinity", "-infinity"}  # DuckDB reads these; left to it
_INT_LIMITS = {
    SqlType.BIGINT: (-(2**63), 2**63 - 1),
    SqlType.INTEGER: (-(2**31), 2**31 - 1),
    SqlType.TIMESTAMP: (-(2**63), 2**63 - 1),
}
_INT_RE = re.compile(r"^[+-]?\d+$")


def _number(text: str) -> tuple[Any, str]:
    if _INT_RE.match(text):
        return int(text), "INTEGER"
    if "e" in text.lower():
        return float(text), "DOUBLE"
    return Decimal(text), "DECIMAL"


def value_ref(node: exp.Expression, param_index: dict[int, int]) -> ValueRef | None:
    """The constant ``node`` denotes, or None when it is not a plain literal or placeholder."""
    if isinstance(node, exp.Paren):
        return value_ref(node.this, param_index)
    start = node.meta.get("start") if node._meta else None
    if isinstance(node, exp.Placeholder):
        if node.this and str(node.this).isdigit():
            return Param(int(str(node.this)) - 1, start)  # $n: the n-th parameter
        if node.this:
            return Param(str(node.this), start)
        return Param(param_index[id(node)], start)
    if isinstance(node, exp.Literal):
        if node.is_string:
            return Const(node.this, "VARCHAR", start)
        value, typ = _number(node.this)
        return Const(value, typ, start)
    if isinstance(node, exp.Neg) and isinstance(node.this, exp.Literal) and not node.this.is_string:
        value, typ = _number(node.this.this)
        return Const(-value, typ, node.this.meta.get("start") if node.this._meta else None)
    if isinstance(node, exp.Boolean):
        return Const(bool(node.this), "BOOLEAN", start)
    if isinstance(node, exp.Null):
        return Const(None, "NULL", start)
    if isinstance(node, exp.Cast) and isinstance(node.this, exp.Literal) and node.this.is_string:
        to = node.to.this if isinstance(node.to, exp.DataType) else None
        typ = _TIME_TYPES.get(to)
        if typ is not None:
            return Const(node.this.this, typ, node.this.meta.get("start") if node.this._meta else None)
    folded = fold_constant(node)  # ``10 + 1``, ``lower('C0001')``, ``CAST('11' AS INT)`` (issue 16 item 3)
    if folded is not None:
        return Const(folded[0], folded[1], start if start is not None else _first_start(node))
    return None


def _first_start(node: exp.Expression) -> int | None:
    for sub in node.walk():
        if sub._meta and sub.meta.get("start") is not None:
            return sub.meta["start"]
    return None


def resolve(ref: ValueRef, params: Any) -> tuple[Any, str]:
    """A (value, sql type) pair; parameters are typed by their Python type."""
    if isinstance(ref, Const):
        return ref.value, ref.sql_type
    value = params[ref.key]
    return value, python_sql_type(value)


def python_sql_type(value: Any) -> str:
    if value is None:
        return "NULL"
    if isinstance(value, bool):
        return "BOOLEAN"
    if isinstance(value, int):
        return "INTEGER"
    if isinstance(value, float):
        return "DOUBLE"
    if isinstance(value, Decimal):
        return "DECIMAL"
    if isinstance(value, str):
        return "VARCHAR"
    if isinstance(value, datetime):
        return "TIMESTAMP" if value.tzinfo is None else "TIMESTAMPTZ_VALUE"
    if isinstance(value, date):
        return "DATE_VALUE"
    if isinstance(value, (bytes, bytearray, memoryview)):
        return "BLOB"
    return type(value).__name__


def show(value: Any, sql_type: str) -> str:
    """How a value appears in a message: as the user would write it."""
    if sql_type in ("VARCHAR", "TIMESTAMP", "DATE", "TIMESTAMPTZ") and isinstance(value, str):
        return "'" + value.replace("'", "''") + "'"
    if value is None:
        return "NULL"
    return str(value)


def _type_label(sql_type: str) -> str:
    return {"DECIMAL": "DECIMAL", "TIMESTAMPTZ_VALUE": "TIMESTAMPTZ", "DATE_VALUE": "DATE"}.get(sql_type, sql_type)


def _mismatch(column: str, what: str, target: SqlType, value: Any, sql_type: str, line: int | None, col: int | None) -> TypeMismatchError:
    return TypeMismatchError(
        f"cannot compare {what} {column} ({target.value}) with {show(value, sql_type)} ({_type_label(sql_type)})",
        line=line,
        col=col,
    )


def _micros_to_bound(micros: int, op: str) -> tuple[Any, str]:
    """Epoch microseconds to a millisecond bound, exact for ms-precision stores."""
    ms, rest = divmod(micros, 1000)
    if rest == 0:
        return ms, op
    if op == "=":
        return NO_MATCH, op
    if op in (">", ">="):
        return ms + 1, ">="
    return ms, "<="


def _epoch_micros(dt: datetime) -> int:
    if dt.tzinfo is None:
        dt = dt.replace(tzinfo=timezone.utc)
    delta = dt - datetime(1970, 1, 1, tzinfo=timezone.utc)
    return (delta.days * 86_400 + delta.seconds) * 1_000_000 + delta.microseconds


def _parse_timestamp(text: str, sql_type: str) -> datetime:
    """A timestamp string as DuckDB reads it against a TIMESTAMP WITH TIME ZONE store column (UTC session).

    A ``TIMESTAMP '…+02'`` literal keeps its wall clock and drops the offset
    (DuckDB and PostgreSQL alike); a ``TIMESTAMPTZ`` literal or a bare string
    with an offset is that instant. Naive results mean UTC.
    """
    try:
        dt = datetime.fromisoformat(text.strip())
    except ValueError:
        d = date.fromisoformat(text.strip())
        return datetime.combine(d, time())
    if dt.tzinfo is None:
        return dt
    if sql_type == "TIMESTAMP":
        return dt.replace(tzinfo=None)
    return dt.astimezone(timezone.utc).replace(tzinfo=None)


def coerce_bound(
    value: Any, sql_type: str, target: SqlType, op: str, *, column: str, what: str, line: int | None, col: int | None
) -> tuple[Any, str]:
    """``column op value`` as ``column op' canonical`` in the store's key/time representation.

    Exclusive bounds on integral types (integers, epoch ms) become the exact
    inclusive bound (``k > 5`` is ``k >= 6``).
    """
    v, op2 = _coerce(value, sql_type, target, op, column=column, what=what, line=line, col=col)
    if isinstance(v, int) and not isinstance(v, bool) and target in _INT_LIMITS:
        if op2 == ">":
            v, op2 = v + 1, ">="
        elif op2 == "<":
            v, op2 = v - 1, "<="
        lo, hi = _INT_LIMITS[target]
        if lo <= v <= hi:
            return v, op2
        # beyond the column's range: the bound is either always true (clamp) or never true
        if op2 == ">=" and v < lo:
            return lo, op2
        if op2 == "<=" and v > hi:
            return hi, op2
        return NO_MATCH, op2
    return v, op2


def _coerce(
    value: Any, sql_type: str, target: SqlType, op: str, *, column: str, what: str, line: int | None, col: int | None
) -> tuple[Any, str]:
    """The conversion itself (see ``coerce_bound``).

    Returns (NO_MATCH, op) when nothing can match, (NOT_PUSHABLE, op) when
    DuckDB must decide, and raises TypeMismatchError when DuckDB would refuse
    the comparison or the literal cannot be converted.
    """
    if sql_type == "NULL":
        why = ("to find the current versions, write valid_to IS NULL" if column == "valid_to"
               else "keys and window bounds are never NULL")
        raise TypeMismatchError(
            f"cannot compare {what} {column} ({target.value}) with NULL: the comparison is never true ({why})",
            line=line,
            col=col,
        )
    fail = lambda: _mismatch(column, what, target, value, sql_type, line, col)  # noqa: E731
    if isinstance(target, DecimalType):
        return _decimal_bound(value, sql_type, target, op, fail)
    if target in (SqlType.BIGINT, SqlType.INTEGER):
        if sql_type == "INTEGER":
            return int(value), op
        if sql_type in ("DECIMAL", "DOUBLE"):
            if isinstance(value, float) and not math.isfinite(value):
                return NOT_PUSHABLE, op
            d = Decimal(value)
            if d == d.to_integral_value():
                return int(d), op
            if op == "=":
                return NO_MATCH, op
            if op in (">", ">="):
                return int(math.ceil(d)), ">="
            return int(math.floor(d)), "<="
        if sql_type == "VARCHAR":
            try:
                return int(value.strip(), 10), op
            except ValueError:
                pass
            try:
                number = Decimal(value.strip())
            except InvalidOperation:
                raise fail() from None
            if not number.is_finite():
                return NOT_PUSHABLE, op
            return _coerce(number, "DECIMAL", target, op, column=column, what=what, line=line, col=col)
        raise fail()
    if target is SqlType.DOUBLE:
        if sql_type in ("INTEGER", "DECIMAL", "DOUBLE"):
            f = float(value)
            if math.isnan(f):
                return NOT_PUSHABLE, op
            if op == ">":
                return math.nextafter(f, math.inf), ">="
            if op == "<":
                return math.nextafter(f, -math.inf), "<="
            return f, op
        if sql_type == "VARCHAR":
            try:
                return _coerce(float(value), "DOUBLE", target, op, column=column, what=what, line=line, col=col)
            except ValueError:
                raise fail() from None
        raise fail()
    if target is SqlType.VARCHAR:
        if sql_type != "VARCHAR":
            raise fail()
        if op == ">":
            return value + "\x00", ">="  # the least string greater than value, by code point
        return value, op
    if target is SqlType.BOOLEAN:
        if sql_type == "BOOLEAN" or sql_type == "INTEGER":  # DuckDB casts integers to booleans (0 is false)
            return bool(value), op
        if sql_type == "VARCHAR" and value.strip().lower() in ("true", "false"):
            return value.strip().lower() == "true", op
        raise fail()
    if target is SqlType.TIMESTAMP:
        if sql_type in ("TIMESTAMP", "TIMESTAMPTZ", "VARCHAR", "DATE") and isinstance(value, str):
            if value.strip().lower() in _SPECIAL_TIMES:
                return NOT_PUSHABLE, op
            try:
                dt = _parse_timestamp(value, sql_type)
            except ValueError:
                raise fail() from None
            except OverflowError:  # '9999-12-31 23:00:00-05' is year 10000 in UTC: DuckDB compares it
                return NOT_PUSHABLE, op
            return _micros_to_bound(_epoch_micros(dt), op)
        if isinstance(value, datetime):  # parameters: aware ones are rendered in UTC, like this
            return _micros_to_bound(_epoch_micros(value), op)
        if sql_type == "DATE_VALUE":
            return _micros_to_bound(_epoch_micros(datetime.combine(value, time())), op)
        raise fail()
    if target is SqlType.DATE:
        if sql_type in ("DATE", "VARCHAR") and isinstance(value, str):
            if value.strip().lower() in _SPECIAL_TIMES:
                return NOT_PUSHABLE, op
            try:
                d = date.fromisoformat(value.strip())
            except ValueError:
                raise fail() from None
            days = (d - date(1970, 1, 1)).days
        elif sql_type == "DATE_VALUE":
            days = (value - date(1970, 1, 1)).days
        elif sql_type in ("TIMESTAMP", "TIMESTAMPTZ", "TIMESTAMPTZ_VALUE"):
            return NOT_PUSHABLE, op
        else:
            raise fail()
        if op == ">":
            return days + 1, ">="
        if op == "<":
            return days - 1, "<="
        return days, op
    if target is SqlType.BLOB:
        if sql_type == "BLOB":
            return bytes(value), op
        if sql_type == "VARCHAR":  # DuckDB casts the text: ASCII, bytes above 0x7f written \xNN
            blob = _blob_text(value)
            return (NOT_PUSHABLE, op) if blob is None else (blob, op)  # None: DuckDB's to accept or refuse
        raise fail()
    return NOT_PUSHABLE, op


def _decimal_bound(value: Any, sql_type: str, target: DecimalType, op: str, fail: Any) -> tuple[Any, str]:
    """``dec_col op value`` as an exact Decimal bound of the column's scale (DuckDB compares DECIMALs exactly).

    A value with more decimal places than the scale equals no key (``=``) and
    rounds inward for a bound; ``>``/``<`` become the next value of the scale
    with ``>=``/``<=``. DOUBLE operands (DuckDB compares them as doubles) and
    values beyond the precision are left to DuckDB.
    """
    if sql_type == "VARCHAR":
        try:
            value = Decimal(value.strip())
        except InvalidOperation:
            raise fail() from None
    elif sql_type == "INTEGER":
        value = Decimal(int(value))
    elif sql_type != "DECIMAL" or not isinstance(value, Decimal):
        if sql_type in ("DOUBLE", "DECIMAL"):
            return NOT_PUSHABLE, op
        raise fail()
    if not value.is_finite():
        return NOT_PUSHABLE, op
    step = Decimal(1).scaleb(-target.scale, EXACT)  # EXACT: 38 digits (the default context rounds past 28)
    limit = EXACT.power(Decimal(10), target.precision - target.scale)
    if abs(value) >= limit:
        return (NO_MATCH, op) if op == "=" else (NOT_PUSHABLE, op)
    down = value.quantize(step, rounding="ROUND_FLOOR", context=EXACT)
    if down == value:
        v = value.quantize(step, context=EXACT)
        v, op = (EXACT.add(v, step), ">=") if op == ">" else (EXACT.subtract(v, step), "<=") if op == "<" else (v, op)
    elif op == "=":
        return NO_MATCH, op
    else:
        v, op = (EXACT.add(down, step), ">=") if op in (">", ">=") else (down, "<=")
    return (v, op) if abs(v) < limit else (NO_MATCH, op)  # past the column's largest value: no key is


_BLOB_ESCAPE = re.compile(r"\\x([0-9a-fA-F]{2})")


def _blob_text(text: str) -> bytes | None:
    """A string literal as DuckDB casts it to BLOB (``'a\\xFF'`` is ``b'a\\xff'``), or None if DuckDB refuses it."""
    out = bytearray()
    pos = 0
    for m in _BLOB_ESCAPE.finditer(text):
        chunk = text[pos:m.start()]
        if not chunk.isascii() or "\\" in chunk:
            return None
        out += chunk.encode("ascii") + bytes([int(m.group(1), 16)])
        pos = m.end()
    rest = text[pos:]
    if not rest.isascii() or "\\" in rest:
        return None
    return bytes(out + rest.encode("ascii"))


def sql_literal(value: Any) -> str:
    """A Python parameter as a DuckDB literal for the residual SQL."""
    if value is None:
        return "NULL"
    if isinstance(value, bool):
        return "TRUE" if value else "FALSE"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        if math.isfinite(value):
            return repr(value)
        return f"CAST('{value}' AS DOUBLE)"
    if isinstance(value, Decimal):
        try:
            return str(value) if value.is_finite() else f"CAST('{value}' AS DOUBLE)"
        except InvalidOperation:  # pragma: no cover - defensive
            raise ParameterError(f"cannot use decimal parameter {value!r}") from None
    if isinstance(value, str):
        quoted = "'" + value.replace("'", "''") + "'"
        if "\x00" in value:  # a NUL cannot sit inside SQL text: spell it chr(0)
            return "(" + quoted.replace("\x00", "' || chr(0) || '") + ")"
        return quoted
    if isinstance(value, datetime):
        if value.tzinfo is not None:
            try:
                value = value.astimezone(timezone.utc).replace(tzinfo=None)
            except OverflowError:  # in UTC past Python's years 1-9999 (DuckDB's are wider): DuckDB converts it
                return f"CAST(TIMESTAMPTZ '{value.isoformat(sep=' ')}' AS TIMESTAMP)"
        return f"TIMESTAMP '{value.isoformat(sep=' ')}'"
    if isinstance(value, date):
        return f"DATE '{value.isoformat()}'"
    if isinstance(value, bytes):
        return "'" + "".join(f"\\x{b:02x}" for b in value) + "'::BLOB"
    if isinstance(value, list):  # a PostgreSQL array parameter (limits.check_param_values bounds its depth)
        return "[" + ", ".join(sql_literal(v) for v in value) + "]"
    raise ParameterError(f"unsupported parameter type {type(value).__name__}: {value!r}")
