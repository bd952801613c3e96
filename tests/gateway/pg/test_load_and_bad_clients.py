"""Many connections at once, and clients that break the protocol: each gets a clean error and a closed
connection; the server, its other connections and its thread count are unharmed."""

from __future__ import annotations

import socket
import struct
import threading
import time
from collections.abc import Iterator

import psycopg
import pytest

from gateway.engine.gateway import Gateway
from gateway.pg import PgServer
from tests.gateway.gwfixtures import Shop
from tests.gateway.pg.conftest import Pg

CONNECTIONS, LOOKUPS = 8, 40


def test_eight_concurrent_connections(pg: Pg, shop: Shop) -> None:
    customers = sorted(shop.revenue)
    errors: list[BaseException] = []
    done = [0] * CONNECTIONS

    def client(i: int) -> None:
        try:
            with pg.connect(autocommit=True) as con:
                for n in range(LOOKUPS):
                    c = customers[(i * 7 + n) % len(customers)]
                    row = con.execute("SELECT orders FROM revenue WHERE customer = %s", [c]).fetchone()
                    assert row == (shop.revenue[c][1],)
                    done[i] += 1
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    threads = [threading.Thread(target=client, args=(i,), daemon=True) for i in range(CONNECTIONS)]
    for t in threads:
        t.start()
    deadline = time.monotonic() + 120
    for t in threads:
        t.join(max(0.1, deadline - time.monotonic()))
    assert not any(t.is_alive() for t in threads), "clients still running after 120 s"
    assert errors == [] and done == [LOOKUPS] * CONNECTIONS


# -- bad clients -------------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def open_server(gw: Gateway) -> Iterator[PgServer]:
    """No token (trust), a small message limit and a short stall timeout, so bad clients are quick to test."""
    with PgServer(gw, max_message_bytes=64 * 1024, body_timeout_s=1.0) as srv:
        yield srv


def _connect(srv: PgServer) -> socket.socket:
    s = socket.create_connection((srv.host, srv.port), timeout=10)
    s.settimeout(10)
    return s


def _startup(s: socket.socket) -> None:
    body = struct.pack("!i", 196608) + b"user\0bad\0database\0iqgate\0\0"
    s.sendall(struct.pack("!i", len(body) + 4) + body)
    data = b""
    while not data.endswith(b"Z\0\0\0\5I"):
        chunk = s.recv(65536)
        assert chunk, "closed during start-up"
        data += chunk


def _read_until_closed(s: socket.socket) -> bytes:
    data = b""
    for _ in range(1000):
        chunk = s.recv(65536)
        if not chunk:
            return data
        data += chunk
    raise AssertionError("the server kept the connection open")


def _error_fields(data: bytes) -> dict[str, str]:
    assert data[:1] == b"E", data[:80]
    (length,) = struct.unpack_from("!i", data, 1)
    fields = {}
    for part in data[5:1 + length].split(b"\0"):
        if part:
            fields[chr(part[0])] = part[1:].decode()
    return fields


def _still_serves(srv: PgServer) -> None:
    with psycopg.connect(host=srv.host, port=srv.port, user="after", dbname="iqgate", autocommit=True,
                         connect_timeout=10) as con:
        assert con.execute("SELECT count(*) FROM revenue").fetchone()[0] > 0


def _no_connections_left(srv: PgServer) -> None:
    for _ in range(100):
        if not srv._connections:  # noqa: SLF001 - the server's own record of open connections
            return
        time.sleep(0.05)
    raise AssertionError(f"{len(srv._connections)} connections still open")  # noqa: SLF001


@pytest.mark.parametrize("payload, sqlstate", [
    (b"GET / HTTP/1.1\r\nHost: x\r\n\r\n", "08P01"),                       # garbage: an absurd length
    (struct.pack("!i", -5) + b"\0" * 16, "08P01"),                          # a negative length
    (struct.pack("!ii", 8, 0x00020000), "0A000"),                           # protocol 2.0
    (struct.pack("!ii", 8, 0x00040000), "0A000"),                           # protocol 4.0
    (struct.pack("!ii", 8, 196609) , "0A000"),                              # protocol 3.1
    (struct.pack("!ii", 10, 196608) + b"u\0", "08P01"),                     # parameters not terminated
], ids=["garbage", "negative-length", "protocol-2", "protocol-4", "protocol-3.1", "truncated-startup"])
def test_bad_startup_gets_an_error_and_a_closed_connection(open_server: PgServer, payload: bytes,
                                                           sqlstate: str) -> None:
    with _connect(open_server) as s:
        s.sendall(payload)
        fields = _error_fields(_read_until_closed(s))
    assert fields["S"] == "FATAL" and fields["C"] == sqlstate, fields
    _still_serves(open_server)
    _no_connections_left(open_server)


def test_garbage_before_authentication_on_the_token_server(pg: Pg, pg_server: PgServer) -> None:
    with socket.create_connection((pg.host, pg.port), timeout=10) as s:
        s.sendall(b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03" + bytes(range(200)))  # a TLS ClientHello
        fields = _error_fields(_read_until_closed(s))
    assert fields["C"] == "08P01"
    with pg.connect(autocommit=True) as con:
        assert con.execute("SELECT 1").fetchone() == (1,)


@pytest.mark.parametrize("message, sqlstate", [
    (b"Q" + struct.pack("!i", 4 + 9) + b"SELECT 1;", "08P01"),               # a string without its NUL
    (b"Q" + struct.pack("!i", 2**31 - 1) + b"SELECT", "54000"),              # over-long: past the limit
    (b"Q" + struct.pack("!i", 2), "08P01"),                                  # a length shorter than itself
    (b"\x00" + struct.pack("!i", 4), "08P01"),                               # an unknown message type
], ids=["unterminated-string", "over-long", "short-length", "unknown-type"])
def test_bad_message_after_startup(open_server: PgServer, message: bytes, sqlstate: str) -> None:
    with _connect(open_server) as s:
        _startup(s)
        s.sendall(message)
        fields = _error_fields(_read_until_closed(s))
    assert fields["S"] == "FATAL" and fields["C"] == sqlstate, fields
    _still_serves(open_server)
    _no_connections_left(open_server)


def test_copy_from_is_refused_and_stray_copy_messages_ignored(open_server: PgServer) -> None:
    """COPY … FROM writes (COPY … TO STDOUT exports: test_copy_out.py)."""
    with psycopg.connect(host=open_server.host, port=open_server.port, user="u", dbname="iqgate", autocommit=True,
                         connect_timeout=10) as con:
        with pytest.raises(psycopg.Error) as info:
            with con.cursor().copy("COPY revenue FROM STDIN") as cp:
                cp.write_row(("c1", 1.0, 1))
        assert info.value.sqlstate == "25006"
        assert con.execute("SELECT 1").fetchone() == (1,)
    with _connect(open_server) as s:
        _startup(s)
        s.sendall(b"d" + struct.pack("!i", 7) + b"abc" + b"c\0\0\0\4" + b"Q" + struct.pack("!i", 13) + b"SELECT 5\0")
        data = b""
        while not data.endswith(b"Z\0\0\0\5I"):
            chunk = s.recv(65536)
            assert chunk
            data += chunk
        assert b"\x00\x00\x00\x015" in data and not data.startswith(b"E")


def test_copy_in_the_extended_protocol(open_server: PgServer) -> None:
    """Parse/Bind/Describe portal/Execute of a COPY: NoData, then CopyOutResponse, CopyData, CopyDone, COPY n."""
    def msg(kind: bytes, body: bytes) -> bytes:
        return kind + struct.pack("!i", len(body) + 4) + body
    with _connect(open_server) as s:
        _startup(s)
        s.sendall(msg(b"P", b"\0COPY (SELECT a FROM (VALUES (8), (7)) t(a) ORDER BY a) TO STDOUT\0\0\0")
                  + msg(b"B", b"\0\0\0\0\0\0\0\0") + msg(b"D", b"P\0") + msg(b"E", b"\0\0\0\0\0")
                  + msg(b"S", b""))
        data = _ready_count(s, 1)
    kinds, i = [], 0
    while i < len(data):
        n = struct.unpack("!i", data[i + 1:i + 5])[0]
        kinds.append((data[i:i + 1], data[i + 5:i + 1 + n]))
        i += 1 + n
    assert [k for k, _ in kinds] == [b"1", b"2", b"n", b"H", b"d", b"d", b"c", b"C", b"Z"]
    assert [body for k, body in kinds if k == b"d"] == [b"7\n", b"8\n"]
    assert kinds[7][1] == b"COPY 2\0"


def _ready_count(s: socket.socket, n: int, data: bytes = b"") -> bytes:
    """Read until ``n`` ReadyForQuery (idle) messages have come."""
    while data.count(b"Z\0\0\0\5I") < n:
        chunk = s.recv(65536)
        assert chunk, "the server closed the connection"
        data += chunk
    return data


def _query(sql: str) -> bytes:
    return b"Q" + struct.pack("!i", 4 + len(sql) + 1) + sql.encode() + b"\0"


def test_messages_behind_the_startup_many_in_a_packet_or_a_byte_at_a_time_are_all_answered(
        open_server: PgServer) -> None:
    """The reader is buffered (wire.MessageReader): nothing a client sends ahead is lost or misframed."""
    body = struct.pack("!i", 196608) + b"user\0ahead\0database\0iqgate\0\0"
    with _connect(open_server) as s:
        s.sendall(struct.pack("!i", len(body) + 4) + body + _query("SELECT 5"))  # a query right behind the startup
        assert b"\x00\x00\x00\x015" in _ready_count(s, 2)
        s.sendall(b"".join(_query(f"SELECT {i}") for i in range(100, 300)))  # 200 queries in one packet
        data = _ready_count(s, 200)
        at = [data.find(b"\x00\x00\x00\x03" + str(i).encode()) for i in range(100, 300)]
        assert min(at) >= 0 and at == sorted(at)  # every answer, in order
        s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        for b in _query("SELECT 77"):  # one message a byte at a time
            s.sendall(bytes([b]))
            time.sleep(0.002)
        assert b"\x00\x00\x00\x0277" in _ready_count(s, 1)
    _no_connections_left(open_server)


def test_truncated_message_then_silence_is_cut_off(open_server: PgServer) -> None:
    with _connect(open_server) as s:
        _startup(s)
        s.sendall(b"Q" + struct.pack("!i", 100) + b"SELECT")  # 94 bytes promised, 6 sent, then nothing
        t0 = time.monotonic()
        data = _read_until_closed(s)
    assert data == b"" and time.monotonic() - t0 < 9  # closed after the 1 s stall timeout, without an answer
    _still_serves(open_server)
    _no_connections_left(open_server)


def test_truncated_extended_message_is_an_error_then_sync_recovers(open_server: PgServer) -> None:
    with _connect(open_server) as s:
        _startup(s)
        parse = b"\0SELECT $1\0" + struct.pack("!h", 0)  # statement "", its text, no declared types
        bind = b"\0\0" + struct.pack("!hh", 0, 1)  # portal "", statement "", 0 formats, 1 param: it never follows
        s.sendall(b"P" + struct.pack("!i", 4 + len(parse)) + parse)
        s.sendall(b"B" + struct.pack("!i", 4 + len(bind)) + bind + b"S\0\0\0\4")
        data = b""
        while not data.endswith(b"Z\0\0\0\5I"):
            chunk = s.recv(65536)
            assert chunk
            data += chunk
        assert b"E" in data and b"08P01" in data
        s.sendall(b"Q" + struct.pack("!i", 4 + 9) + b"SELECT 7\0")
        data = b""
        while not data.endswith(b"Z\0\0\0\5I"):
            chunk = s.recv(65536)
            assert chunk
            data += chunk
        assert b"\x00\x00\x00\x017" in data  # the DataRow of SELECT 7
        s.sendall(b"X\0\0\0\4")
        assert _read_until_closed(s) == b""


def test_too_many_connections_is_53300(gw: Gateway) -> None:
    with PgServer(gw, max_connections=2) as srv:
        held = [psycopg.connect(host=srv.host, port=srv.port, user="u", dbname="iqgate", connect_timeout=10)
                for _ in range(2)]
        try:
            with pytest.raises(psycopg.OperationalError) as info:
                psycopg.connect(host=srv.host, port=srv.port, user="u", dbname="iqgate", connect_timeout=10)
            assert "too many clients" in str(info.value)
        finally:
            for con in held:
                con.close()
        _no_connections_left(srv)  # slots come back once the server has seen the clients go
        _still_serves(srv)


def test_closing_the_server_ends_its_accepting_thread(gw: Gateway) -> None:
    """close() wakes the thread blocked in accept (the listener is shut down, not only closed); before, every
    close waited out its whole timeout and left the thread behind."""
    srv = PgServer(gw).start()
    with psycopg.connect(host=srv.host, port=srv.port, user="u", dbname="iqgate", autocommit=True,
                         connect_timeout=10) as con:
        assert con.execute("SELECT 1").fetchone() == (1,)
    srv.close()
    assert not srv._thread.is_alive()  # noqa: SLF001 - the accepting thread
