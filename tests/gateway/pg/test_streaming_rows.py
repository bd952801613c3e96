"""PG answers stream chunk by chunk (issue 14): the same rows, Execute row limits across chunk boundaries, and an
error found after DataRows went out ends the statement with an ErrorResponse (no CommandComplete), as
PostgreSQL does; the connection stays usable.

A gateway with 2-row chunks makes every boundary reachable with the shop's 25 customers.
"""

from __future__ import annotations

import socket
import struct
from collections.abc import Iterator

import psycopg
import pytest

from gateway import Gateway, GatewayConfig
from gateway.pg import PgServer
from stores.app.streams import StreamsApp
from tests.gateway.gwfixtures import Shop

SQL = "SELECT customer, orders FROM revenue ORDER BY customer"


@pytest.fixture(scope="module")
def small_chunks(shop_app: StreamsApp) -> Iterator[PgServer]:
    g = Gateway(shop_app, config=GatewayConfig(ndjson_batch_rows=2))
    with PgServer(g, body_timeout_s=5.0) as srv:
        yield srv
    g.close()


def _connect(srv: PgServer) -> psycopg.Connection:
    return psycopg.connect(host=srv.host, port=srv.port, user="t", dbname="iqgate", autocommit=True,
                           connect_timeout=10)


def test_rows_stream_and_match(small_chunks: PgServer, shop: Shop) -> None:
    with _connect(small_chunks) as con:
        cur = con.execute(SQL)
        assert cur.fetchall() == [(c, shop.revenue[c][1]) for c in sorted(shop.revenue)]
        assert cur.rowcount == len(shop.revenue)  # the tag counts every streamed row
        cur = con.execute(SQL.replace("ORDER BY", "WHERE customer = %s ORDER BY"), [sorted(shop.revenue)[3]])
        assert len(cur.fetchall()) == 1


def test_error_after_rows_went_out_is_an_error_response(small_chunks: PgServer) -> None:
    with _connect(small_chunks) as con:
        con.execute("SET max_rows = 5")
        with pytest.raises(psycopg.Error, match="row limit"):
            con.execute(SQL).fetchall()
        con.execute("SET max_rows = 0")
        assert con.execute("SELECT count(*) FROM revenue").fetchone()[0] > 5  # the connection still serves


# -- the extended protocol by hand: Execute with a row limit -----------------------------------------------------
def _msg(kind: bytes, body: bytes) -> bytes:
    return kind + struct.pack("!i", len(body) + 4) + body


def _messages(s: socket.socket) -> Iterator[tuple[bytes, bytes]]:
    data = b""
    while True:
        while len(data) < 5 or len(data) < 1 + struct.unpack_from("!i", data, 1)[0]:
            chunk = s.recv(65536)
            assert chunk, "the server closed the connection"
            data += chunk
        (length,) = struct.unpack_from("!i", data, 1)
        kind, body, data = data[:1], data[5:1 + length], data[1 + length:]
        yield kind, body
        if kind == b"Z":
            return


def test_execute_with_a_row_limit_suspends_across_chunks(small_chunks: PgServer, shop: Shop) -> None:
    with socket.create_connection((small_chunks.host, small_chunks.port), timeout=10) as s:
        body = struct.pack("!i", 196608) + b"user\0t\0database\0iqgate\0\0"
        s.sendall(struct.pack("!i", len(body) + 4) + body)
        list(_messages(s))
        execute = _msg(b"E", b"\0" + struct.pack("!i", 3))
        s.sendall(_msg(b"P", b"\0" + SQL.encode() + b"\0" + struct.pack("!h", 0))
                  + _msg(b"B", b"\0\0" + struct.pack("!hhh", 0, 0, 0))
                  + execute * 10 + _msg(b"S", b""))
        got: list[str] = []
        kinds: list[bytes] = []
        for kind, payload in _messages(s):
            kinds.append(kind)
            if kind == b"D":
                (size,) = struct.unpack_from("!i", payload, 2)
                got.append(payload[6:6 + size].decode())
            if kind == b"C":
                tag = payload.rstrip(b"\0").decode()
        assert got == sorted(shop.revenue)  # every row once, in order, 3 per Execute
        n = len(shop.revenue)
        # PortalSuspended after each Execute that left rows; the one that sent the last row completes
        assert kinds.count(b"s") == (n // 3 if n % 3 else n // 3 - 1)
        assert kinds.index(b"C") > max(i for i, k in enumerate(kinds) if k == b"D")
        assert tag == f"SELECT {n}"
