"""A Bind whose value does not fit its declared type: PostgreSQL's SQLSTATE and message, naming the parameter.

Text that is not UTF-8 is 22021 ("invalid byte sequence"), text its type
cannot read is 22P02 ("invalid input syntax for type …"), binary data of
the wrong shape is 22P03 ("incorrect binary data format"), each ending
"in bind parameter N", as PostgreSQL's own bind errors do. Before, these
carried Python's own words ("'utf-8' codec can't decode byte…", "unpack
requires a buffer of 8 bytes", "[<class 'decimal.ConversionSyntax'>]") under
22P02 whatever the cause. The session then recovers at Sync.
"""

from __future__ import annotations

import logging
import struct
from collections.abc import Iterator

import pytest

from gateway.engine.gateway import Gateway
from gateway.pg import PgServer
from tests.gateway.pg.test_load_and_bad_clients import (
    _connect,
    _error_fields,
    _query,
    _ready_count,
    _startup,
)
from tests.gateway.pg.test_protocol_fuzz import _msg


def _exchange(srv: PgServer, oids: list[int], values: list[bytes], binary: bool) -> bytes:
    """Parse ``SELECT $1, …`` with ``oids``, bind ``values`` (all text or all binary), Execute, Sync: the answer."""
    sql = "SELECT " + ", ".join(f"${i + 1}" for i in range(len(oids)))
    parse = b"\0" + sql.encode() + b"\0" + struct.pack("!h", len(oids)) + b"".join(struct.pack("!I", o) for o in oids)
    bind = b"\0\0" + struct.pack("!hh", 1, 1 if binary else 0) + struct.pack("!h", len(values))
    bind += b"".join(struct.pack("!i", len(v)) + v for v in values) + struct.pack("!h", 0)
    with _connect(srv) as s:
        _startup(s)
        s.sendall(_msg(b"P", parse) + _msg(b"B", bind) + _msg(b"E", b"\0" + struct.pack("!i", 0)) + _msg(b"S", b""))
        data = _ready_count(s, 1)
        s.sendall(_query("SELECT 7"))
        assert b"\x00\x00\x00\x017" in _ready_count(s, 1)  # the session goes on after Sync
    return data


def _bind_error(srv: PgServer, oids: list[int], values: list[bytes], binary: bool) -> dict[str, str]:
    data = _exchange(srv, oids, values, binary)
    return _error_fields(data[data.index(b"E"):])


def _bound_text(srv: PgServer, oid: int, value: bytes, binary: bool) -> bytes:
    """The one column of the DataRow that ``SELECT $1`` answers with ``value`` bound (in text format)."""
    data = _exchange(srv, [oid], [value], binary)
    assert b"E" not in data[:1] and data.count(b"D") >= 1, data
    at = data.index(b"D\0")
    (length,) = struct.unpack_from("!i", data, at + 7)
    return data[at + 11:at + 11 + length]


@pytest.fixture(scope="module")
def open_server(gw: Gateway) -> Iterator[PgServer]:
    with PgServer(gw, body_timeout_s=2.0) as srv:
        yield srv


@pytest.mark.parametrize("oid, binary, raw, sqlstate, message", [
    (23, False, b"abc", "22P02", 'invalid input syntax for type int4: "abc" in bind parameter 1'),
    (1700, False, b"12x", "22P02", 'invalid input syntax for type numeric: "12x" in bind parameter 1'),
    (1082, False, b"2024-13-45", "22P02", 'invalid input syntax for type date: "2024-13-45" in bind parameter 1'),
    (1082, False, b"9" * 200, "22P02", 'invalid input syntax for type date: "' + "9" * 60 + '..." in bind'),
    (25, False, b"ok\xff\xfe", "22021", 'invalid byte sequence for encoding "UTF8": 0xff 0xfe in bind parameter 1'),
    (0, False, b"\xc3", "22021", 'invalid byte sequence for encoding "UTF8": 0xc3 in bind parameter 1'),
    (25, True, b"\x80", "22021", 'invalid byte sequence for encoding "UTF8": 0x80 in bind parameter 1'),
    (23, False, "١٢".encode(), "22P02", 'invalid input syntax for type int4: "١٢" in bind parameter 1'),
    (23, False, b"1__0", "22P02", 'invalid input syntax for type int4: "1__0"'),
    (23, False, b"2147483648", "22003", 'value "2147483648" is out of range for type int4 in bind parameter 1'),
    (21, False, b"-32769", "22003", 'value "-32769" is out of range for type int2'),
    (20, False, b"0x8000000000000000", "22003", "out of range for type int8"),
    (1700, False, b"sNaN", "22P02", 'invalid input syntax for type numeric: "sNaN" in bind parameter 1'),
    (1700, False, "١٢".encode(), "22P02", 'invalid input syntax for type numeric: "١٢"'),
    (701, False, b"1_000", "22P02", 'invalid input syntax for type float8: "1_000" in bind parameter 1'),
    (701, False, b"1e", "22P02", 'invalid input syntax for type float8: "1e"'),
    (16, False, b"maybe", "22P02", 'invalid input syntax for type bool: "maybe" in bind parameter 1'),
    (16, False, b"o", "22P02", 'invalid input syntax for type bool: "o"'),
    (16, True, b"", "22P03", "incorrect binary data format for type bool (0 bytes) in bind parameter 1"),
    (20, True, b"\x01\x02", "22P03", "incorrect binary data format for type int8 (2 bytes) in bind parameter 1"),
    (2950, True, b"\x01\x02\x03", "22P03", "incorrect binary data format for type uuid (3 bytes) in bind parameter 1"),
    (1007, False, b"{1,2", "22P02", 'malformed array literal: "{1,2" in bind parameter 1'),
    (1007, False, b"{1,x}", "22P02", 'invalid input syntax for type int4: "x" in bind parameter 1'),
    (1007, False, b"{{1},{2}}", "0A000", "multidimensional array parameters are not supported in bind parameter 1"),
    (1007, True, struct.pack("!iiI", 2, 0, 23) + struct.pack("!iiii", 1, 1, 1, 1), "0A000", "multidimensional"),
    (1007, True, struct.pack("!iiI", 1, 0, 23), "22P03", "incorrect binary data format for type _int4 (12 bytes)"),
], ids=["int-text", "numeric-text", "date-text", "long-text-shortened", "text-not-utf8", "unknown-not-utf8",
        "binary-text-not-utf8", "int-other-digits", "int-double-underscore", "int4-range", "int2-range", "int8-range",
        "numeric-snan", "numeric-other-digits", "float-underscore", "float-exponent-cut", "bool-text",
        "bool-ambiguous", "bool-binary-empty", "int8-binary-short", "uuid-binary-short",
        "array-unclosed", "array-element", "array-2d-text", "array-2d-binary", "array-binary-short"])
def test_a_value_that_does_not_fit_its_type_is_refused_as_postgresql_does(
        open_server: PgServer, oid: int, binary: bool, raw: bytes, sqlstate: str, message: str) -> None:
    err = _bind_error(open_server, [oid], [raw], binary)
    assert (err["C"], err["S"]) == (sqlstate, "ERROR"), err
    assert message in err["M"], err["M"]
    assert "codec" not in err["M"] and "unpack" not in err["M"] and "<class" not in err["M"]


def test_the_error_names_the_parameter_that_failed(open_server: PgServer) -> None:
    err = _bind_error(open_server, [23, 23, 23], [b"1", b"2", b"three"], False)
    assert err["C"] == "22P02" and err["M"].endswith('"three" in bind parameter 3'), err


def test_a_bug_in_a_session_is_xx000_to_the_client_and_a_traceback_in_the_log(
        open_server: PgServer, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    """Fault injection: a decoder that raises what no decoder should. The client gets XX000 and its session goes
    on; the operator gets the traceback in the log, as the HTTP face logs its unexpected errors."""
    import gateway.pg.session

    def broken(raw: bytes | None, oid: int, binary: bool) -> object:
        raise KeyError("injected")

    monkeypatch.setattr(gateway.pg.session, "decode_param", broken)
    with caplog.at_level(logging.ERROR, logger="iqgate.pg"):
        err = _bind_error(open_server, [23], [b"1"], False)
    assert err["C"] == "XX000" and "KeyError" in err["M"], err
    logged = [r for r in caplog.records if r.name == "iqgate.pg" and r.exc_info]
    assert logged and logged[0].exc_info[0] is KeyError, caplog.records


@pytest.mark.parametrize("text, expected", [
    (b"t", b"t"), (b"TRUE", b"t"), (b" yes ", b"t"), (b"y", b"t"), (b"on", b"t"), (b"1", b"t"), (b"tr", b"t"),
    (b"f", b"f"), (b"False", b"f"), (b"no", b"f"), (b"n", b"f"), (b"off", b"f"), (b"of", b"f"), (b"0", b"f"),
])
def test_boolean_text_parameters_read_as_postgresql_reads_them(open_server: PgServer, text: bytes,
                                                               expected: bytes) -> None:
    assert _bound_text(open_server, 16, text, False) == expected


def test_binary_boolean_parameters(open_server: PgServer) -> None:
    assert _bound_text(open_server, 16, b"\x01", True) == b"t"
    assert _bound_text(open_server, 16, b"\x00", True) == b"f"


@pytest.mark.parametrize("oid, text, expected", [
    (23, b" 42 ", b"42"), (23, b"-2147483648", b"-2147483648"), (23, b"1_000", b"1000"), (23, b"0x1F", b"31"),
    (23, b"-0o17", b"-15"), (23, b"0b101", b"5"), (21, b"+32767", b"32767"), (20, b"-9223372036854775808",
    b"-9223372036854775808"),
])
def test_integer_text_parameters_read_as_postgresql_16_reads_them(open_server: PgServer, oid: int, text: bytes,
                                                                  expected: bytes) -> None:
    assert _bound_text(open_server, oid, text, False) == expected


@pytest.mark.parametrize("oid, text, expected", [
    (1700, b" 1_000.50 ", b"1000.50"), (1700, b"-.5e2", b"-50"), (1700, b"NaN", b"NaN"), (1700, b"5.", b"5"),
    (701, b"2.5e-1", b"0.25"), (701, b"-Infinity", b"-Infinity"), (701, b"inf", b"Infinity"), (701, b"nan", b"NaN"),
])
def test_numeric_and_float_text_parameters_read_as_postgresql_reads_them(open_server: PgServer, oid: int,
                                                                         text: bytes, expected: bytes) -> None:
    assert _bound_text(open_server, oid, text, False) == expected
