"""Values at and past the edges of Python's types on the PG wire: each is sent right or refused with the
SQLSTATE PostgreSQL uses, never an internal error.

Found by a random-protocol fuzz: a binary DATE/TIMESTAMP parameter past Python's years 1-9999 (PostgreSQL's
``infinity`` among them) was XX000 OverflowError; a binary NUMERIC with a bad sign, scale or digit was read
as a wrong number (infinity as 0) instead of refused; a DATE past 9999 or a TIME of 24:00 in a binary
result column was XX000 TypeError.
"""

from __future__ import annotations

import datetime as dt
import decimal
import socket
import struct
from collections.abc import Iterator

import pytest

from gateway.engine.gateway import Gateway
from gateway.pg import PgServer
from gateway.pg.types import decode_param
from gateway.pg.wire import ProtocolError


@pytest.fixture(scope="module")
def open_pg(gw: Gateway) -> Iterator[PgServer]:
    with PgServer(gw, body_timeout_s=5.0) as srv:
        yield srv


def _msg(kind: bytes, body: bytes) -> bytes:
    return kind + struct.pack("!i", len(body) + 4) + body


def _read_until_ready(s: socket.socket) -> list[tuple[bytes, bytes]]:
    out, buf = [], b""
    while True:
        chunk = s.recv(65536)
        assert chunk, f"closed; got {out}"
        buf += chunk
        while len(buf) >= 5 and len(buf) >= 1 + struct.unpack_from("!i", buf, 1)[0]:
            n = struct.unpack_from("!i", buf, 1)[0]
            out.append((buf[:1], buf[5:1 + n]))
            buf = buf[1 + n:]
            if out[-1][0] == b"Z":
                return out


def _run(srv: PgServer, sql: str, oids: list[int] = (), values: list[bytes] = (), binary_params: bool = True,
         binary_result: bool = False) -> list[tuple[bytes, bytes]]:
    """One Parse/Bind/Execute/Sync round over a fresh connection; the messages up to ReadyForQuery."""
    with socket.create_connection((srv.host, srv.port), timeout=10) as s:
        body = struct.pack("!i", 196608) + b"user\0u\0database\0iqgate\0\0"
        s.sendall(struct.pack("!i", len(body) + 4) + body)
        _read_until_ready(s)
        parse = b"\0" + sql.encode() + b"\0" + struct.pack("!h", len(oids)) + b"".join(struct.pack("!I", o) for o in oids)
        bind = b"\0\0" + struct.pack("!hh", 1, int(binary_params)) + struct.pack("!h", len(values))
        bind += b"".join(struct.pack("!i", len(v)) + v for v in values) + struct.pack("!hh", 1, int(binary_result))
        s.sendall(_msg(b"P", parse) + _msg(b"B", bind) + _msg(b"E", b"\0" + struct.pack("!i", 0)) + _msg(b"S", b""))
        return _read_until_ready(s)


def _error(messages: list[tuple[bytes, bytes]]) -> dict[str, str]:
    [body] = [b for t, b in messages if t == b"E"]
    return {chr(p[0]): p[1:].decode() for p in body.split(b"\0") if p}


def _cells(messages: list[tuple[bytes, bytes]]) -> list[bytes]:
    [body] = [b for t, b in messages if t == b"D"]
    (n,) = struct.unpack_from("!h", body)
    pos, out = 2, []
    for _ in range(n):
        (size,) = struct.unpack_from("!i", body, pos)
        out.append(body[pos + 4:pos + 4 + size])
        pos += 4 + size
    return out


def _numeric(ndigits: int, weight: int, sign: int, dscale: int, *digits: int) -> bytes:
    return struct.pack(f"!HhHH{len(digits)}H", ndigits, weight, sign, dscale, *digits)


@pytest.mark.parametrize("oid, raw", [
    (1082, struct.pack("!i", 2**31 - 1)),        # PostgreSQL's date 'infinity'
    (1082, struct.pack("!i", -2**31)),           # '-infinity'
    (1082, struct.pack("!i", 3_000_000)),        # year 10213
    (1114, struct.pack("!q", 2**63 - 1)),        # timestamp 'infinity'
    (1184, struct.pack("!q", 2**62)),            # a timestamptz far past 9999
], ids=["date-infinity", "date-minus-infinity", "date-10213", "timestamp-infinity", "timestamptz-far"])
def test_a_binary_date_or_timestamp_python_cannot_hold_is_22008(open_pg: PgServer, oid: int, raw: bytes) -> None:
    err = _error(_run(open_pg, "SELECT $1", [oid], [raw]))
    assert (err["S"], err["C"]) == ("ERROR", "22008") and "years 1-9999" in err["M"], err


def test_binary_numeric_parameters_are_exact_and_checked_as_postgresql_checks_them() -> None:
    def dec(raw: bytes) -> decimal.Decimal:
        return decode_param(raw, 1700, True)

    assert str(dec(_numeric(2, 0, 0, 4, 12, 3456))) == "12.3456"
    assert str(dec(_numeric(2, 0, 0x4000, 2, 12, 3456))) == "-12.34"  # truncated to its scale, as numeric_recv
    assert str(dec(_numeric(1, 1, 0, 0, 5))) == "50000"
    assert format(dec(_numeric(1, -2, 0, 8, 7)), "f") == "0.00000007"
    assert str(dec(_numeric(1, 0, 0, 3, 5))) == "5.000"
    assert dec(_numeric(7, 6, 0, 0, *[9999] * 7)) == decimal.Decimal("9" * 28)  # past the default 28 digits
    assert dec(_numeric(0, 0, 0xC000, 0)).is_nan()
    assert dec(_numeric(0, 0, 0xD000, 0)) == decimal.Decimal("Infinity")  # was read as 0.000
    assert dec(_numeric(0, 0, 0xF000, 0)) == decimal.Decimal("-Infinity")
    for raw, what in [(_numeric(1, 0, 0x1234, 0, 5), "sign"), (_numeric(1, 0, 0, 0x4000, 5), "scale"),
                      (_numeric(1, 0, 0, 0, 10000), "digit"), (_numeric(3, 0, 0, 0, 5), "length"),
                      (_numeric(1, 0, 0, 65535, 5), "scale")]:
        with pytest.raises(ProtocolError, match=what) as info:
            dec(raw)
        assert info.value.sqlstate == "22P03"


def test_a_bad_binary_numeric_is_22p03_on_the_wire(open_pg: PgServer) -> None:
    err = _error(_run(open_pg, "SELECT $1", [1700], [_numeric(1, 0, 0, 0xFFFF, 5)]))
    assert err["C"] == "22P03" and "scale" in err["M"]
    assert _cells(_run(open_pg, "SELECT CAST($1 AS VARCHAR)", [1700], [_numeric(2, 0, 0, 2, 12, 3456)])) == [b"12.34"]


def test_a_binary_array_must_hold_its_declared_element_type() -> None:
    int8_items = struct.pack("!iiI", 1, 0, 20) + struct.pack("!ii", 1, 1) + struct.pack("!iq", 8, 7)
    assert decode_param(int8_items, 1016, True) == [7]  # int8[] of int8
    with pytest.raises(ProtocolError, match="element type 20 instead of the declared 23") as info:
        decode_param(int8_items, 1007, True)  # int4[] declared, int8 items sent
    assert info.value.sqlstate == "42804"
    nested = struct.pack("!iiI", 1, 0, 1007) + struct.pack("!ii", 1, 1)  # an int4[] whose items say int4[]
    for _ in range(3):
        nested = struct.pack("!iiI", 1, 0, 1007) + struct.pack("!ii", 1, 1) + struct.pack("!i", len(nested)) + nested
    with pytest.raises(ProtocolError, match="element type 1007"):
        decode_param(nested, 1007, True)


@pytest.mark.parametrize("sql, text, binary", [
    ("SELECT DATE '9999-12-31' + 1", b"10000-01-01", struct.pack("!i", (dt.date(9999, 12, 31) - dt.date(2000, 1, 1)).days + 1)),
    ("SELECT DATE '0001-01-01' - 1", b"0001-12-31 BC", struct.pack("!i", (dt.date(1, 1, 1) - dt.date(2000, 1, 1)).days - 1)),
    ("SELECT TIMESTAMP '9999-12-31 23:00:00' + INTERVAL 2 HOUR", b"10000-01-01 01:00:00",
     struct.pack("!q", ((dt.date(9999, 12, 31) - dt.date(2000, 1, 1)).days * 86400 + 25 * 3600) * 10**6)),
    ("SELECT TIMESTAMP '0001-01-01 12:00:00' - INTERVAL 1 DAY", b"0001-12-31 12:00:00 BC",
     struct.pack("!q", ((dt.date(1, 1, 1) - dt.date(2000, 1, 1)).days * 86400 - 12 * 3600) * 10**6)),
    ("SELECT TIMESTAMPTZ '9999-12-31 23:00:00.5+00' + INTERVAL 2 HOUR", b"10000-01-01 01:00:00.5+00",
     struct.pack("!q", ((dt.date(9999, 12, 31) - dt.date(2000, 1, 1)).days * 86400 + 25 * 3600) * 10**6 + 500_000)),
    ("SELECT TIME '24:00:00'", b"24:00:00", struct.pack("!q", 24 * 3600 * 10**6)),
], ids=["date-10000", "date-bc", "timestamp-10000", "timestamp-bc", "timestamptz-10000", "time-24"])
def test_result_values_past_pythons_range_in_text_and_binary(open_pg: PgServer, sql: str, text: bytes,
                                                            binary: bytes) -> None:
    """DuckDB hands these out as its own text; binary counts days or microseconds from 2000-01-01 as
    PostgreSQL does, and text writes a BC era last, as PostgreSQL does."""
    assert _cells(_run(open_pg, sql)) == [text]
    assert _cells(_run(open_pg, sql, binary_result=True)) == [binary]


def test_an_interval_rows_cannot_carry_is_an_error_not_internal(open_pg: PgServer) -> None:
    err = _error(_run(open_pg, "SELECT to_days(2000000000)"))
    assert err["C"] == "22000" and "VARCHAR" in err["M"], err


@pytest.mark.parametrize("duck_type, text", [
    ("DATE", "someday"), ("TIMESTAMP", "10000-01-01 01:00:00.123456789"), ("TIME", "25 o'clock")])
def test_text_the_binary_encoders_cannot_read_is_22008(duck_type: str, text: str) -> None:
    """Strings DuckDB might hand out in a form we do not read: a clear error asking for text, not a wrong value."""
    from gateway.pg.types import column_type, encoder

    with pytest.raises(ProtocolError, match="ask for text") as info:
        encoder(column_type(duck_type), True)(text)
    assert info.value.sqlstate == "22008"
