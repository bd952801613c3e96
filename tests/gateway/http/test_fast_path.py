"""The fast path (gateway/http/fast.py) answers exactly what the Flask views answer, over real sockets.

Two real servers on 127.0.0.1 over one Gateway: one with the fast path (the
default), one sending every request through Flask (``fast_path=False``).
Each request goes to both as raw bytes; the status line, every header but
Date, and the body must be the same — successes, streamed answers, errors
before and after the headers, auth, limits, the requests the fast path hands
to Flask — and so must the request metrics they leave behind.
"""

from __future__ import annotations

import json
import re
import socket
from collections.abc import Iterator

import pytest

from gateway import Gateway, GatewayConfig
from gateway.http import create_app
from gateway.http.fast import FastPath
from gateway.serving.http_server import ServerThread
from tests.gateway.gwfixtures import Shop

TOKEN = "s3cret"


def _exchange(port: int, raw: bytes) -> tuple[str, list[tuple[str, str]], bytes]:
    """Send one request (``Connection: close``), read the whole answer: (status line, headers but Date, body)."""
    with socket.create_connection(("127.0.0.1", port), timeout=30) as s:
        s.sendall(raw)
        data = b""
        while chunk := s.recv(65536):
            data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    headers = [tuple(x.split(": ", 1)) for x in lines[1:]]
    if ("Transfer-Encoding", "chunked") in headers:
        body = _dechunk(body)
    return lines[0], [(k, v) for k, v in headers if k.lower() != "date"], body


def _dechunk(data: bytes) -> bytes:
    out = b""
    while data:
        size, _, rest = data.partition(b"\r\n")
        n = int(size, 16)
        if n == 0:
            break
        out += rest[:n]
        data = rest[n + 2:]
    return out


def _request(method: str, path: str, body: bytes | None = None, **headers: str) -> bytes:
    head = f"{method} {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n"
    for k, v in headers.items():
        head += f"{k.replace('_', '-')}: {v}\r\n"
    if body is not None:
        head += f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n"
    return head.encode() + b"\r\n" + (body or b"")


def _sql(sql: str, **fields: object) -> bytes:
    return json.dumps({"sql": sql, **fields}).encode()


@pytest.fixture(scope="module")
def servers(gw: Gateway) -> Iterator[tuple[int, int]]:
    with ServerThread(create_app(gw), threads=4) as fast, ServerThread(create_app(gw, fast_path=False), threads=4) \
            as flask:
        yield fast.port, flask.port


@pytest.fixture(scope="module")
def token_servers(gw: Gateway) -> Iterator[tuple[int, int]]:
    cfg = GatewayConfig(auth_token=TOKEN, max_request_bytes=300)
    with ServerThread(create_app(gw, cfg), threads=4) as fast, \
            ServerThread(create_app(gw, cfg, fast_path=False), threads=4) as flask:
        yield fast.port, flask.port


def _same(ports: tuple[int, int], raw: bytes) -> tuple[str, list[tuple[str, str]], bytes]:
    fast, flask = (_exchange(p, raw) for p in ports)
    assert fast == flask
    return fast


def test_the_fast_path_is_in_front_of_flask(gw: Gateway) -> None:
    assert isinstance(create_app(gw).wsgi_app, FastPath)
    assert not isinstance(create_app(gw, fast_path=False).wsgi_app, FastPath)


def test_ping_and_point_lookups_match_flask(servers: tuple[int, int], shop: Shop) -> None:
    status, headers, body = _same(servers, _request("GET", "/v1/ping"))
    assert status == "HTTP/1.1 200 OK" and body == b'{"ok":true}'
    assert ("Content-Length", "11") in headers and ("Content-Type", "application/json") in headers
    c = sorted(shop.revenue)[3]
    for accept in (None, "*/*", "application/json"):
        extra = {"Accept": accept} if accept else {}
        status, headers, body = _same(servers, _request(
            "POST", "/v1/sql", _sql("SELECT customer, revenue, orders FROM revenue WHERE customer = ?", params=[c]),
            **extra))
        assert status == "HTTP/1.1 200 OK"
        assert json.loads(body)["rows"] == [[c, *shop.revenue[c]]]
        assert {k.lower() for k, _ in headers} >= {"content-type", "content-length", "x-iq-position"}


def test_the_point_lane_answers_byte_for_byte_what_the_general_way_answers(
        servers: tuple[int, int], gw: Gateway, shop: Shop) -> None:
    """The lane (``Gateway.point``, ``renderers.point_json``) against a request a session setting sends the
    general way (a Plan, ``_select``, ``json_body``), on the same server: status, headers and body."""
    c, a, latest = sorted(shop.revenue)[1], sorted(shop.accounts)[0], sorted(shop.latest)[0]
    general = {"session": {"statement_timeout_ms": 60_000}}
    cases = [
        ("SELECT customer, revenue, orders FROM revenue WHERE customer = ?", [c]),
        ("SELECT * FROM revenue WHERE customer = ?", ["nobody"]),
        ("SELECT * FROM accounts WHERE id = ?", [a]),  # TIMESTAMP and BOOLEAN values
        ("SELECT opened, id FROM accounts WHERE id = ?", [a]),
        ("SELECT * FROM latest WHERE customer = ?", [latest]),  # a timestamped store: its rowtime
        (f"SELECT * FROM revenue WHERE customer = '{c}'", None),
        ("SELECT count(*), sum(orders) FROM revenue WHERE customer = ? AND orders > 1", [c]),  # a residual program
        ("SELECT count(*) FROM revenue WHERE customer = ?", ["nobody"]),
    ]
    for sql, params in cases:
        fields = {"params": params} if params is not None else {}
        _exchange(servers[0], _request("POST", "/v1/sql", _sql(sql, **fields)))  # planned: the lane knows it now
        assert gw.point(sql, params) is not None, sql
        lane = _exchange(servers[0], _request("POST", "/v1/sql", _sql(sql, **fields)))
        assert lane == _exchange(servers[0], _request("POST", "/v1/sql", _sql(sql, **fields, **general))), sql
        assert lane == _exchange(servers[1], _request("POST", "/v1/sql", _sql(sql, **fields))), sql  # and Flask's


@pytest.mark.parametrize("body", [
    _sql("SELECT customer, orders FROM revenue ORDER BY customer"),  # several rows, one chunk
    _sql("SELECT range AS n FROM range(2500)"),  # several chunks: streamed (chunked encoding)
    _sql("SELECT customer FROM revenue ORDER BY customer", max_rows=3),  # limit hit before the headers
    _sql("SELECT range AS n FROM range(5000)", max_rows=1500),  # limit hit after them: the error in-band
    _sql("SET max_rows = 10"),
    _sql("SHOW TABLES"),
    _sql("SELEC * FROM revenue"),
    _sql("SELECT * FROM nowhere"),
    _sql("SELECT * FROM revenue WHERE customer = ?"),
    _sql("SELECT * FROM revenue", position={"orders": {"0": 10**12}}),  # NOT_UP_TO_BOUND: 503, Retry-After
    _sql("SELECT 1", bogus=1),
    b'{"sql": ',
    b"",
    b"[1, 2]",
])
def test_sql_answers_and_errors_match_flask(servers: tuple[int, int], body: bytes) -> None:
    _, headers, _ = _same(servers, _request("POST", "/v1/sql", body))
    if b"range(2500)" in body:
        assert ("Transfer-Encoding", "chunked") in headers  # the streamed path was taken


@pytest.mark.parametrize("raw", [
    _request("POST", "/v1/sql", _sql("SELECT customer FROM revenue ORDER BY customer"), Accept="application/x-ndjson"),
    _request("POST", "/v1/sql", _sql("SELECT customer FROM revenue"), Accept="text/csv"),
    _request("POST", "/v1/sql", _sql("SELECT 1"), Accept="application/json;q=0.9, text/csv;q=0.5"),
    _request("POST", "/v1/sql", _sql("SELECT 1"), Accept="image/png"),
    _request("GET", "/v1/sql"),
    _request("POST", "/v1/ping", b"{}"),
    _request("HEAD", "/v1/ping"),
    _request("GET", "/v1/ping/"),
    _request("POST", "/v1/sql/", _sql("SELECT 1")),
])
def test_requests_handed_to_flask_match(servers: tuple[int, int], raw: bytes) -> None:
    _same(servers, raw)


@pytest.mark.parametrize("raw", [
    _request("GET", "/v1/ping"),
    _request("GET", "/v1/ping", Authorization="Bearer wrong"),
    _request("GET", "/v1/ping", Authorization=f"Bearer {TOKEN}"),
    _request("POST", "/v1/sql", _sql("SELECT 1")),
    _request("POST", "/v1/sql", _sql("SELECT 1"), Authorization="Basic czNjcmV0"),
    _request("POST", "/v1/sql", _sql("SELECT 1"), Authorization=f"Bearer {TOKEN}"),
    _request("POST", "/v1/sql", _sql("SELECT 1 -- " + "x" * 400), Authorization=f"Bearer {TOKEN}"),  # 413
])
def test_auth_and_limits_match_flask(token_servers: tuple[int, int], raw: bytes) -> None:
    status, headers, _ = _same(token_servers, raw)
    if status.startswith("HTTP/1.1 401"):
        assert any(k.lower() == "www-authenticate" for k, _ in headers)


def test_metrics_count_the_fast_path_as_flask_counts_its_requests(gw: Gateway) -> None:
    lookup = _sql("SELECT revenue FROM revenue WHERE customer = ?", params=["c01"])
    requests = [_request("GET", "/v1/ping"), _request("POST", "/v1/sql", _sql("SELECT 1")),
                _request("POST", "/v1/sql", lookup), _request("POST", "/v1/sql", lookup),  # the second: the lane
                _request("POST", "/v1/sql", _sql("SELECT 1")), _request("POST", "/v1/sql", _sql("SELEC 1")),
                _request("POST", "/v1/sql", _sql("SELECT * FROM revenue", position={"orders": {"0": 10**12}}))]
    counts = []
    for fast_path in (True, False):
        with ServerThread(create_app(gw, fast_path=fast_path), threads=2) as srv:
            for raw in requests:
                _exchange(srv.port, raw)
            _, _, text = _exchange(srv.port, _request("GET", "/metrics"))
        counts.append(sorted(re.findall(r'^(iqgate_requests_total\{.*\}|iqgate_request_seconds_count\{.*\}|'
                                        r'iqgate_partition_failures_total\{.*\}) (\d+)$', text.decode(), re.M)))
    assert counts[0] == counts[1]
    assert ('iqgate_requests_total{endpoint="/v1/sql",status="200"}', "4") in counts[0]
    assert ('iqgate_requests_total{endpoint="/v1/sql",status="503"}', "1") in counts[0]
    assert ('iqgate_partition_failures_total{reason="NOT_UP_TO_BOUND"}', "4") in counts[0]
    assert ('iqgate_requests_total{endpoint="/v1/ping",status="200"}', "1") in counts[0]
