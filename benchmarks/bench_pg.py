"""The PG port against HTTP on the same server, in the same run: point lookup latency and throughput.

One process serves one Gateway over HTTP (waitress, ``iqgate serve``'s 4
threads) and over the PostgreSQL protocol; a child process drives each with
the same kind of client — keep-alive connections in one selector loop, a
prepared statement bound per request on PG (what psycopg and JDBC drivers do),
the JSON body per request on HTTP — so the figures describe the servers. The
goal: PG at most HTTP's latency (no HTTP parsing, no JSON). A real client,
psycopg 3 on one connection, is measured beside it.
"""

from __future__ import annotations

import json
import multiprocessing
import socket
import struct
import tempfile
from pathlib import Path

from benchmarks.bench_gateway import CLIENTS, SERVER_THREADS, _load, _setup
from benchmarks.common import Figure, percentile, time_calls
from benchmarks.load import closed_loop

__all__ = ["run"]

HTTP_SQL = "SELECT name, amount FROM bench_kv WHERE id = ?"
PG_SQL = "SELECT name, amount FROM bench_kv WHERE id = $1"


def _msg(kind: bytes, payload: bytes) -> bytes:
    return kind + struct.pack("!i", len(payload) + 4) + payload


def _pg_connect(port: int) -> socket.socket:
    """A trusted (no token) connection with the lookup prepared as statement ``s``; blocking, TCP_NODELAY."""
    sock = socket.create_connection(("127.0.0.1", port), timeout=30)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    body = struct.pack("!i", 196608) + b"user\0bench\0database\0iqgate\0\0"
    sock.sendall(struct.pack("!i", len(body) + 4) + body)
    parse = _msg(b"P", b"s\0" + PG_SQL.encode() + b"\0" + struct.pack("!hi", 1, 20))
    sock.sendall(parse + b"S\0\0\0\4")
    buf, ready = b"", 0
    while ready < 2:  # ReadyForQuery after start-up, then after the Parse's Sync
        chunk = sock.recv(65536)
        if not chunk:
            raise ConnectionError("the PG port closed the connection during start-up")
        buf += chunk
        while len(buf) >= 5:
            kind, length = buf[:1], struct.unpack_from("!i", buf, 1)[0]
            if len(buf) < 1 + length:
                break
            if kind == b"E":
                raise ConnectionError(f"the PG port refused the prepared lookup: {buf[5:1 + length]!r}")
            ready += kind == b"Z"
            buf = buf[1 + length:]
    return sock


def _lookup(key: int) -> bytes:
    value = str(key).encode()
    bind = _msg(b"B", b"\0s\0" + struct.pack("!hhi", 0, 1, len(value)) + value + struct.pack("!h", 0))
    return bind + _msg(b"E", b"\0" + struct.pack("!i", 0)) + b"S\0\0\0\4"


def _take_pg(buf: bytes) -> tuple[int, bool] | None:
    """The messages up to ReadyForQuery: (their length, no ErrorResponse among them?) once complete."""
    at, failed = 0, False
    while len(buf) - at >= 5:
        kind, length = buf[at:at + 1], struct.unpack_from("!i", buf, at + 1)[0]
        if len(buf) - at < 1 + length:
            return None
        failed = failed or kind == b"E"
        at += 1 + length
        if kind == b"Z":
            return at, not failed
    return None


def _pg_load(port: int, keys: list[int], clients: int, per_client: int, max_s: float) -> tuple[float, list[float], int]:
    """In a child process: ``clients`` PG connections in one selector loop (benchmarks.load), Bind/Execute/Sync.

    Returns (elapsed, latencies, errors), like ``bench_gateway._load`` for HTTP.
    """
    socks = [_pg_connect(port) for _ in range(clients)]
    return closed_loop(socks, [_lookup(k) for k in keys], per_client, max_s, _take_pg, goodbye=b"X\0\0\0\4")


def _figures(http_port: int, pg_port: int, n_keys: int, per_client: int, max_s: float) -> list[Figure]:
    keys = [k % n_keys for k in range(0, 7919 * 50, 7919)]
    bodies = [json.dumps({"sql": HTTP_SQL, "params": [k]}).encode() for k in keys]
    ctx = multiprocessing.get_context("spawn")
    with ctx.Pool(1) as pool:
        pool.apply(_load, (http_port, "POST", "/v1/sql", bodies, CLIENTS, 20, 10.0))  # warm-up both faces
        pool.apply(_pg_load, (pg_port, keys, CLIENTS, 20, 10.0))
        # alternate the faces, best of two each, so a burst of other load on the machine hits both alike
        runs: dict[str, list[tuple[float, list[float], int]]] = {"http": [], "pg": []}
        for _ in range(2):
            runs["http"].append(pool.apply(_load, (http_port, "POST", "/v1/sql", bodies, CLIENTS, per_client, max_s)))
            runs["pg"].append(pool.apply(_pg_load, (pg_port, keys, CLIENTS, per_client, max_s)))
        h1 = pool.apply(_load, (http_port, "POST", "/v1/sql", bodies, 1, per_client * 2, max_s))
        p1 = pool.apply(_pg_load, (pg_port, keys, 1, per_client * 2, max_s))
    h_el, h_lat, h_err = max(runs["http"], key=lambda r: len(r[1]) / r[0])
    p_el, p_lat, p_err = max(runs["pg"], key=lambda r: len(r[1]) / r[0])
    h_rps, p_rps = len(h_lat) / h_el, len(p_lat) / p_el
    h50, p50 = percentile(h_lat, 50) * 1e3, percentile(p_lat, 50) * 1e3
    note = f"{CLIENTS} clients, {len(p_lat)} PG / {len(h_lat)} HTTP lookups, {p_err + h_err} errors"
    return [
        Figure("PG point lookup p50", p50, "ms", h50, "HTTP /v1/sql p50, same server", "<= 1x", p50 <= h50 and p_err == 0,
               note),
        Figure("PG point lookup throughput", p_rps, "req/s", h_rps, "HTTP /v1/sql req/s, same server", ">= 1x",
               p_rps >= h_rps and p_err == 0, note),
        Figure("PG point lookup p99", percentile(p_lat, 99) * 1e3, "ms", percentile(h_lat, 99) * 1e3, "HTTP p99",
               "", None, note),
        Figure("PG point lookup p50, 1 client", percentile(p1[1], 50) * 1e3, "ms", percentile(h1[1], 50) * 1e3,
               "HTTP p50, 1 client", "<= 1x", percentile(p1[1], 50) <= percentile(h1[1], 50),
               "latency without queueing behind other clients"),
    ]


def run(quick: bool) -> list[Figure]:
    import logging

    import psycopg

    from gateway.http import create_app
    from gateway.pg import PgServer
    from gateway.serving.http_server import ServerThread, tune_process_for_serving

    n_keys, per_client, max_s, n_calls = (1_000, 150, 8.0, 300) if quick else (20_000, 1_000, 30.0, 3_000)
    with tempfile.TemporaryDirectory(prefix="iqgate-bench-pg-") as d:
        app, gw = _setup(Path(d), n_keys)
        try:
            logging.getLogger("waitress.queue").setLevel(logging.ERROR)
            tune_process_for_serving()
            with ServerThread(create_app(gw), threads=SERVER_THREADS) as http, PgServer(gw) as pg:
                figures = _figures(http.port, pg.port, n_keys, per_client, max_s)
                keys = iter(range(10**9))
                with psycopg.connect(host=pg.host, port=pg.port, user="bench", dbname="iqgate", autocommit=True,
                                     prepare_threshold=0) as con:
                    def lookup() -> None:
                        assert con.execute(PG_SQL.replace("$1", "%s"), [next(keys) % n_keys]).fetchone()

                    ours = percentile(time_calls(lookup, n_calls, warmup=50, max_seconds=max_s), 50) * 1e3
                figures.append(Figure("psycopg 3 point lookup p50 (1 connection, prepared)", ours, "ms",
                                      figures[3].baseline, "HTTP p50, 1 client (raw keep-alive)", "", None,
                                      "a real driver in the server's process: its client work shares the GIL"))
            return figures
        finally:
            gw.close()
            app.close()


if __name__ == "__main__":
    from benchmarks.run import script

    script(run)
