"""Values on the PG wire: result columns in text (every type) or binary (the common ones), parameters in.

Result columns are typed by their DuckDB type (``planner.systables.pg_types``
maps it to a PostgreSQL OID); values are the Python values the engine hands
out. Text output follows PostgreSQL's defaults (DateStyle ISO, TimeZone UTC,
``extra_float_digits`` 1: the shortest exact float). Parameters arrive as
text or binary with the OID the client declared (0 when it left the type to
the server): declared types are decoded to Python values, undeclared text
stays text and is typed by the SQL it lands in, as PostgreSQL's ``unknown``.
"""

from __future__ import annotations

import datetime as dt
import decimal
import math
import re
import struct
import uuid
from collections.abc import Callable
from typing import Any

import duckdb

from planner.pg_compat import array_literal
from planner.systables.pg_types import BY_NAME, BY_OID, PgType, pg_type_for_duck

from ..engine.json_values import dumps as json_dumps
from .wire import ProtocolError

__all__ = ["column_type", "encoder", "decode_param", "BINARY_OIDS"]

_PG_EPOCH = dt.datetime(2000, 1, 1, tzinfo=dt.timezone.utc)
_PG_EPOCH_NAIVE = dt.datetime(2000, 1, 1)
_PG_EPOCH_DATE = dt.date(2000, 1, 1)


def column_type(duck_type: str) -> PgType:
    return pg_type_for_duck(duck_type)


# sqlglot writes DuckDB's UINTEGER (pg_catalog's oid columns) as UINT, a name DuckDB does not read back
_SQLGLOT_NAMES = {"uint": "uinteger"}


def parameter_oid(type_name: str) -> int:
    """The OID a parameter of this type (as PostgreSQL writes it: ``bigint``, ``oid[]``, ``pg_catalog._int8``)
    is described with: PostgreSQL's types by name, the rest as DuckDB reads the name, like a result column of
    that type. A name neither knows is text (25), PostgreSQL's choice for a parameter of unknown type."""
    name = type_name.strip().lower().replace('"', "")
    name = name.removeprefix("pg_catalog.")
    if name.endswith("[]"):
        element = BY_OID.get(parameter_oid(name[:-2]))
        return element.array_oid if element is not None and element.array_oid else 25
    name = _SQLGLOT_NAMES.get(name, name)
    known = BY_NAME.get(name.split("(", 1)[0].strip())
    if known is not None:
        return known.oid
    try:
        duck = str(duckdb.sqltype(name))
    except (duckdb.Error, ValueError, TypeError):
        return 25
    return pg_type_for_duck(duck).oid


# -- text ----------------------------------------------------------------------------------------
def _float_text(v: Any) -> bytes:
    f = float(v)
    if math.isnan(f):
        return b"NaN"
    if math.isinf(f):
        return b"Infinity" if f > 0 else b"-Infinity"
    text = repr(f)
    return (text[:-2] if text.endswith(".0") else text).encode()


def _timestamp_text(v: Any) -> bytes:
    if isinstance(v, dt.datetime):
        if v.tzinfo is not None:
            v = v.astimezone(dt.timezone.utc)
            return (v.replace(tzinfo=None).isoformat(sep=" ") + "+00").encode()
        return v.isoformat(sep=" ").encode()
    return str(v).encode()


def _interval_text(v: Any) -> bytes:
    if not isinstance(v, dt.timedelta):
        return str(v).encode()
    sign = "-" if v < dt.timedelta(0) else ""
    v = abs(v)
    days, secs = v.days, v.seconds
    clock = f"{sign}{secs // 3600:02d}:{secs % 3600 // 60:02d}:{secs % 60:02d}"
    if v.microseconds:
        clock += f".{v.microseconds:06d}".rstrip("0")
    if days:
        return f"{sign}{days} day{'s' if days != 1 else ''} {clock}".encode()
    return clock.encode()


def _array_item(v: Any) -> str:
    if v is None:
        return "NULL"
    text = _text(v).decode()
    if text == "" or any(c in text for c in ',{}"\\ ') or text.upper() == "NULL":
        return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'
    return text


def _text(v: Any) -> bytes:
    if isinstance(v, bool):
        return b"t" if v else b"f"
    if isinstance(v, float):
        return _float_text(v)
    if isinstance(v, (int, decimal.Decimal, uuid.UUID)):
        return str(v).encode()
    if isinstance(v, str):
        return v.encode("utf-8")
    if isinstance(v, dt.datetime):
        return _timestamp_text(v)
    if isinstance(v, (dt.date, dt.time)):
        return v.isoformat().encode()
    if isinstance(v, dt.timedelta):
        return _interval_text(v)
    if isinstance(v, (bytes, bytearray, memoryview)):
        return b"\\x" + bytes(v).hex().encode()
    if isinstance(v, (list, tuple)):
        return ("{" + ",".join(_array_item(x) for x in v) + "}").encode()
    if isinstance(v, dict):
        return json_dumps(v).encode()  # a MAP's date/time/BLOB keys as text, like every other face
    return str(v).encode()


# -- binary ---------------------------------------------------------------------------------------
def _numeric_binary(v: Any) -> bytes:
    d = decimal.Decimal(v)
    if d.is_nan():
        return struct.pack("!hhHh", 0, 0, 0xC000, 0)
    sign, digits, exponent = d.as_tuple()
    assert isinstance(exponent, int)
    dscale = max(0, -exponent)
    text = "".join(map(str, digits)).rjust(-exponent, "0")  # 0.0001 is digits (1,), exponent -4: "0001"
    integer = text[:len(text) + exponent] if exponent < 0 else text + "0" * exponent
    fraction = text[len(text) + exponent:] if exponent < 0 else ""
    integer = integer.lstrip("0")
    integer = "0" * (-len(integer) % 4) + integer
    fraction = fraction + "0" * (-len(fraction) % 4)
    groups = [int(integer[i:i + 4]) for i in range(0, len(integer), 4)]
    weight = len(groups) - 1
    groups += [int(fraction[i:i + 4]) for i in range(0, len(fraction), 4)]
    while groups and groups[-1] == 0:
        groups.pop()
    while groups and groups[0] == 0:
        groups.pop(0)
        weight -= 1
    if not groups:
        weight = 0
    return struct.pack(f"!hhHh{len(groups)}H", len(groups), weight, 0x4000 if sign else 0, dscale, *groups)


def _timestamp_binary(v: Any) -> bytes:
    if isinstance(v, str):  # DuckDB's text for a timestamp Python cannot hold
        days, micros = _duck_text_days(v)
        return struct.pack("!q", days * 86_400_000_000 + micros)
    delta = (v - _PG_EPOCH) if v.tzinfo is not None else (v - _PG_EPOCH_NAIVE)
    return struct.pack("!q", (delta.days * 86_400 + delta.seconds) * 1_000_000 + delta.microseconds)


def _date_binary(v: Any) -> bytes:
    return struct.pack("!i", _duck_text_days(v)[0] if isinstance(v, str) else (v - _PG_EPOCH_DATE).days)


def _time_binary(v: Any) -> bytes:
    if isinstance(v, str):  # '24:00:00', which PostgreSQL's TIME holds and Python's does not
        m = re.fullmatch(r"(\d\d):(\d\d):(\d\d)(?:\.(\d{1,6}))?", v)
        if m is None:
            raise ProtocolError(f"cannot send the TIME {v!r} in binary; ask for text", "22008")
        return struct.pack("!q", ((int(m[1]) * 60 + int(m[2])) * 60 + int(m[3])) * 1_000_000
                           + int((m[4] or "0").ljust(6, "0")))
    return struct.pack("!q", ((v.hour * 60 + v.minute) * 60 + v.second) * 1_000_000 + v.microsecond)


# DuckDB hands out dates and timestamps outside Python's years 1-9999 as its own text:
# '10000-01-01', '0001-12-31 (BC)', '10000-01-01 01:00:00.5+00', '0044-03-15 (BC) 12:00:00'
_DUCK_TEXT = re.compile(r"(\d{4,})-(\d\d)-(\d\d)(?: \(BC\))?(?: (\d\d):(\d\d):(\d\d)(?:\.(\d{1,6}))?)?"
                        r"(?:([+-])(\d\d)(?::?(\d\d))?)?")
_DAYS_1970_TO_2000 = 10_957


def _days_from_civil(y: int, m: int, d: int) -> int:
    """Days since 1970-01-01 of a proleptic Gregorian date, any year (year 0 is 1 BC): H. Hinnant's algorithm."""
    y -= m <= 2
    era = (y if y >= 0 else y - 399) // 400
    yoe = y - era * 400
    doy = (153 * (m + (-3 if m > 2 else 9)) + 2) // 5 + d - 1
    return era * 146_097 + yoe * 365 + yoe // 4 - yoe // 100 + doy - 719_468


def _duck_text_days(text: str) -> tuple[int, int]:
    """(days since 2000-01-01, microseconds into that day, UTC) of DuckDB's text for a date or timestamp
    beyond Python's range, for the binary format, which counts from 2000-01-01 as PostgreSQL does."""
    m = _DUCK_TEXT.fullmatch(text)
    if m is None:
        raise ProtocolError(f"cannot send the value {text[:40]!r} in binary; ask for text", "22008")
    year = int(m[1])
    if "(BC)" in text:
        year = 1 - year
    days = _days_from_civil(year, int(m[2]), int(m[3])) - _DAYS_1970_TO_2000
    micros = ((int(m[4] or 0) * 60 + int(m[5] or 0)) * 60 + int(m[6] or 0)) * 1_000_000 + int((m[7] or "0").ljust(6, "0"))
    if m[8]:
        offset = (int(m[9]) * 60 + int(m[10] or 0)) * 60_000_000
        micros += -offset if m[8] == "+" else offset
    return days, micros


def _interval_binary(v: dt.timedelta) -> bytes:
    return struct.pack("!qii", v.seconds * 1_000_000 + v.microseconds, v.days, 0)


_BINARY: dict[int, Callable[[Any], bytes]] = {
    16: lambda v: b"\x01" if v else b"\x00",
    17: lambda v: bytes(v),
    20: lambda v: struct.pack("!q", int(v)),
    21: lambda v: struct.pack("!h", int(v)),
    23: lambda v: struct.pack("!i", int(v)),
    26: lambda v: struct.pack("!I", int(v)),
    25: lambda v: _text(v),
    1043: lambda v: _text(v),
    114: lambda v: _text(v),
    700: lambda v: struct.pack("!f", float(v)),
    701: lambda v: struct.pack("!d", float(v)),
    1082: _date_binary,
    1083: _time_binary,
    1114: _timestamp_binary,
    1184: _timestamp_binary,
    1186: _interval_binary,
    1700: _numeric_binary,
    2950: lambda v: uuid.UUID(str(v)).bytes,
}
BINARY_OIDS = frozenset(_BINARY)


def _array_send(element: int, send: Callable[[Any], bytes]) -> Callable[[Any], bytes]:
    """A one-dimensional array in PostgreSQL's binary format (``array_send``), elements by ``send``.

    Why: a list column was refused to every client that reads results in
    binary (psycopg's binary cursors) with "binary format is not supported
    for type _int8" (s18)."""
    def encode(v: Any) -> bytes:
        items = list(v)
        if not items:
            return struct.pack("!iiI", 0, 0, element)
        parts = [struct.pack("!iiIii", 1, int(any(x is None for x in items)), element, len(items), 1)]
        for x in items:
            if x is None:
                parts.append(b"\xff\xff\xff\xff")
            else:
                data = send(x)
                parts.append(struct.pack("!i", len(data)) + data)
        return b"".join(parts)

    return encode


def encoder(pg: PgType, binary: bool) -> Callable[[Any], bytes]:
    """The function turning a column's (non-NULL) values into wire bytes, in the format the client asked for."""
    if binary:
        fn = _BINARY.get(pg.oid)
        if fn is None and pg.element in _BINARY:
            fn = _array_send(pg.element, _BINARY[pg.element])
        if fn is None:
            raise ProtocolError(f"binary format is not supported for type {pg.name} (OID {pg.oid}); ask for text",
                                "0A000")
        return fn
    return _date_time_text if pg.oid in (1082, 1114, 1184) else _text


def _date_time_text(v: Any) -> bytes:
    """PostgreSQL writes a BC date's era last (``0044-03-15 12:00:00 BC``); DuckDB's text has ``(BC)`` after the
    date."""
    if isinstance(v, str) and " (BC)" in v:
        return (v.replace(" (BC)", "") + " BC").encode()
    return _text(v)


# -- parameters ------------------------------------------------------------------------------------
def _parse_timestamp(text: str, aware: bool) -> dt.datetime:
    t = text.strip().replace("T", " ")
    if t.endswith(("+00", "-00")) or (len(t) > 3 and t[-3] in "+-" and t[-2:].isdigit() and ":" not in t[-6:]):
        t += ":00"
    value = dt.datetime.fromisoformat(t)
    if aware and value.tzinfo is None:
        value = value.replace(tzinfo=dt.timezone.utc)
    return value


def _parse_bool(text: str) -> bool:
    """PostgreSQL's boolin: a prefix of true/false/yes/no, on/off (two letters at least), 1 or 0, else an error
    (before, anything unrecognised was silently false)."""
    t = text.strip().lower()
    if t:
        for word, value in (("true", True), ("false", False), ("yes", True), ("no", False)):
            if word.startswith(t):
                return value
        if len(t) >= 2 and "on".startswith(t):
            return True
        if len(t) >= 2 and "off".startswith(t):
            return False
        if t in ("1", "0"):
            return t == "1"
    raise ValueError(text)


def _bool_binary(raw: bytes) -> bool:
    if len(raw) != 1:
        raise ValueError(raw)
    return raw != b"\x00"


_INT_TEXT = re.compile(r"[+-]?(?:[0-9](?:_?[0-9])*|0[xX](?:_?[0-9a-fA-F])+|0[oO](?:_?[0-7])+|0[bB](?:_?[01])+)")
_INT_BASES = {"0x": 16, "0o": 8, "0b": 2}


def _int_reader(name: str, low: int, high: int) -> Callable[[str], int]:
    """PostgreSQL's integer input (version 16): ASCII digits with an optional sign, underscores between digits,
    0x/0o/0b prefixes, surrounding blanks; out of the type's range is 22003. Python's int() would also take
    other scripts' digits and no prefixes, and no range."""
    def read(text: str) -> int:
        t = text.strip(" \t\n\r\f\v")
        if not _INT_TEXT.fullmatch(t):
            raise ValueError(text)
        digits = t.replace("_", "")
        value = int(digits, _INT_BASES.get(digits.lstrip("+-")[:2].lower(), 10))
        if not low <= value <= high:
            raise ProtocolError(f'value "{text}" is out of range for type {name}', "22003")
        return value
    return read


def _number_text(digits: str) -> re.Pattern[str]:
    mantissa = rf"(?:{digits}(?:\.(?:{digits})?)?|\.{digits})"
    return re.compile(rf"[+-]?(?:{mantissa}(?:[eE][+-]?[0-9]+)?|inf|infinity)|nan", re.IGNORECASE)


_NUMERIC_TEXT = _number_text(r"[0-9](?:_?[0-9])*")  # numeric_in (PostgreSQL 16): underscores between digits
_FLOAT_TEXT = _number_text(r"[0-9]+")  # float8in: none


def _read_numeric(text: str) -> decimal.Decimal:
    """PostgreSQL's numeric input; Decimal() alone would also take other scripts' digits and 'sNaN'."""
    t = text.strip(" \t\n\r\f\v")
    if not _NUMERIC_TEXT.fullmatch(t):
        raise ValueError(text)
    return decimal.Decimal(t.replace("_", ""))


def _read_float(text: str) -> float:
    """PostgreSQL's float input; float() alone would also take underscores and other scripts' digits."""
    t = text.strip(" \t\n\r\f\v")
    if not _FLOAT_TEXT.fullmatch(t):
        raise ValueError(text)
    return float(t)


_TEXT_PARAMS: dict[int, Callable[[str], Any]] = {
    16: _parse_bool,
    20: _int_reader("int8", -2**63, 2**63 - 1), 21: _int_reader("int2", -2**15, 2**15 - 1),
    23: _int_reader("int4", -2**31, 2**31 - 1), 26: _int_reader("oid", -2**31, 2**32 - 1),
    700: _read_float, 701: _read_float,
    1700: _read_numeric,
    1082: lambda t: dt.date.fromisoformat(t.strip()),
    1114: lambda t: _parse_timestamp(t, False),
    1184: lambda t: _parse_timestamp(t, True),
}
_BINARY_PARAMS: dict[int, Callable[[bytes], Any]] = {
    16: _bool_binary,
    20: lambda b: struct.unpack("!q", b)[0],
    21: lambda b: struct.unpack("!h", b)[0],
    23: lambda b: struct.unpack("!i", b)[0],
    26: lambda b: struct.unpack("!I", b)[0],
    700: lambda b: struct.unpack("!f", b)[0],
    701: lambda b: struct.unpack("!d", b)[0],
    1082: lambda b: _PG_EPOCH_DATE + dt.timedelta(days=struct.unpack("!i", b)[0]),
    1114: lambda b: _PG_EPOCH_NAIVE + dt.timedelta(microseconds=struct.unpack("!q", b)[0]),
    1184: lambda b: _PG_EPOCH + dt.timedelta(microseconds=struct.unpack("!q", b)[0]),
    1083: lambda b: _time_param(struct.unpack("!q", b)[0]),
    1186: lambda b: "{2} months {1} days {0} microseconds".format(*struct.unpack("!qii", b)),
    2950: lambda b: str(uuid.UUID(bytes=b)),
    17: bytes,
}


def decode_param(raw: bytes | None, oid: int, binary: bool) -> Any:
    """A bound parameter as a Python value, refused with PostgreSQL's SQLSTATE when it does not fit its type:
    text that is not UTF-8 is 22021, text its type cannot read 22P02, binary data of the wrong shape 22P03."""
    if raw is None:
        return None
    pg = BY_OID.get(oid)
    try:
        if pg is not None and pg.element:
            if binary:
                return _binary_array(raw, pg.element)
            return [decode_param(None if v is None else v.encode(), pg.element, False)
                    for v in _text_array(raw.decode("utf-8"))]
        if binary:
            if oid in (25, 1043, 19, 114, 0, 705, 18):
                return raw.decode("utf-8")
            if oid == 3802:
                return raw[1:].decode("utf-8")
            if oid == 1700:
                return _numeric_from_binary(raw)
            fn = _BINARY_PARAMS.get(oid)
            if fn is None:
                raise ProtocolError(f"binary parameters of type {_type_name(oid)} are not supported; "
                                    "send them as text", "0A000")
            return fn(raw)
        text = raw.decode("utf-8")
        fn2 = _TEXT_PARAMS.get(oid)
        return text if fn2 is None else fn2(text)
    except ProtocolError:
        raise
    except OverflowError as exc:  # a binary date or timestamp past Python's years 1-9999 (PostgreSQL's infinity too)
        raise ProtocolError(f"a parameter of type {_type_name(oid)} is out of the range this server holds "
                            f"(years 1-9999): {exc}", "22008") from None
    except UnicodeDecodeError as exc:  # PostgreSQL's message for text that is not valid in the server encoding
        bad = " ".join(f"0x{b:02x}" for b in exc.object[exc.start:exc.start + 4])
        raise ProtocolError(f'invalid byte sequence for encoding "UTF8": {bad}', "22021") from None
    except (ValueError, struct.error, decimal.InvalidOperation):
        if binary:
            raise ProtocolError(f"incorrect binary data format for type {_type_name(oid)} ({len(raw)} bytes)",
                                "22P03") from None
        shown = raw.decode("utf-8")
        shown = shown if len(shown) <= 60 else shown[:60] + "..."
        raise ProtocolError(f'invalid input syntax for type {_type_name(oid)}: "{shown}"', "22P02") from None


def _time_param(micros: int) -> str:
    """A binary TIME as its text (DuckDB casts it where the SQL needs a TIME): PostgreSQL's range is 0-24 h."""
    if not 0 <= micros <= 86_400_000_000:
        raise ValueError("time out of range")
    seconds, fraction = divmod(micros, 1_000_000)
    return f"{seconds // 3600:02d}:{seconds // 60 % 60:02d}:{seconds % 60:02d}.{fraction:06d}"


def _type_name(oid: int) -> str:
    """A parameter type as PostgreSQL names it in errors: unspecified (0) is ``unknown``."""
    pg = BY_OID.get(oid)
    if pg is not None:
        return pg.name
    return "unknown" if oid == 0 else f"with OID {oid}"


_NUMERIC_SIGNS = {0x0000: 0, 0x4000: 1}
_NUMERIC_SPECIAL = {0xC000: "NaN", 0xD000: "Infinity", 0xF000: "-Infinity"}


def _numeric_from_binary(raw: bytes) -> decimal.Decimal:
    """PostgreSQL's numeric_send format, checked as numeric_recv checks it (SQLSTATE 22P03), and exact:
    base-10000 digits, the weight of the first, a sign (NaN and infinities have their own) and the display
    scale, to which the value is truncated."""
    ndigits, weight, sign, dscale = struct.unpack_from("!HhHH", raw)
    if sign in _NUMERIC_SPECIAL:
        return decimal.Decimal(_NUMERIC_SPECIAL[sign])
    if sign not in _NUMERIC_SIGNS:
        raise ProtocolError(f"invalid sign 0x{sign:04X} in a binary numeric parameter", "22P03")
    if dscale > 0x3FFF:
        raise ProtocolError(f"invalid scale {dscale} in a binary numeric parameter", "22P03")
    if ndigits > 3000 or len(raw) != 8 + 2 * ndigits:
        raise ProtocolError(f"invalid length in a binary numeric parameter: {ndigits} digits in {len(raw)} bytes",
                            "22P03")
    digits = struct.unpack_from(f"!{ndigits}H", raw, 8)
    if any(d > 9999 for d in digits):
        raise ProtocolError("invalid digit in a binary numeric parameter (each is 0-9999)", "22P03")
    text = "".join(f"{d:04d}" for d in digits) or "0"
    value = decimal.Decimal((_NUMERIC_SIGNS[sign], tuple(map(int, text)), 4 * (weight - ndigits + 1)))
    exact = decimal.Context(prec=len(text) + 4 * abs(weight) + dscale + 8, Emin=-decimal.MAX_EMAX,
                            Emax=decimal.MAX_EMAX)
    return value.quantize(decimal.Decimal((0, (1,), -dscale)), rounding=decimal.ROUND_DOWN, context=exact)


def _text_array(text: str) -> list[str | None]:
    """The elements of a one-dimensional PostgreSQL array literal: ``{1,2}``, ``{"a b",NULL,"x\\"y"}``."""
    t = text.strip()
    if t.startswith("[") and "=" in t:  # explicit bounds: [0:2]={…}
        t = t.split("=", 1)[1].strip()
    if "{" in t[1:-1]:
        raise ProtocolError("multidimensional array parameters are not supported", "0A000")
    items = array_literal(t) if t.startswith("{") and t.endswith("}") else None  # as the planner reads literals
    if items is None:
        raise ProtocolError(f'malformed array literal: "{text[:60]}"', "22P02")
    return items


def _binary_array(raw: bytes, expected: int) -> list[Any]:
    """A one-dimensional array in PostgreSQL's binary format (``array_send``) of the declared element type."""
    ndim, _has_null, element = struct.unpack_from("!iiI", raw)
    if ndim == 0:
        return []
    if element != expected:  # as array_recv: and so an element is never itself an array
        raise ProtocolError(f"binary data has array element type {element} instead of the declared {expected}",
                            "42804")
    if ndim != 1:
        raise ProtocolError("multidimensional array parameters are not supported", "0A000")
    size, _lower = struct.unpack_from("!ii", raw, 12)
    pos, out = 20, []
    for _ in range(size):
        (n,) = struct.unpack_from("!i", raw, pos)
        pos += 4
        if n < 0:
            out.append(None)
            continue
        out.append(decode_param(raw[pos:pos + n], element, True))
        pos += n
    return out
