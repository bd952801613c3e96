"""A request head remembered by ``MemoParser`` parses to exactly what waitress's own parser makes of it.

Every request below goes through waitress's ``HTTPRequestParser`` and twice
through ``MemoParser`` (the first time parsed, the second remembered), fed
in one piece and byte by byte; the parsers' whole state (every attribute,
the error and its text, the body) must be equal. Then the memo's bounds,
and a real server answering different bodies under one repeated head.
"""

from __future__ import annotations

import json
import socket
from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from waitress.adjustments import Adjustments
from waitress.parser import HTTPRequestParser

from gateway.serving import head_memo
from gateway.serving.head_memo import MAX_HEAD_BYTES, MAX_HEADS, MemoParser
from gateway.serving.http_server import ServerThread

HTTP = Adjustments()
HTTPS = Adjustments(url_scheme="https")
BODY = b'{"sql": "SELECT 1", "params": []}'


def _post(head_extra: bytes = b"", body: bytes = BODY, line: bytes = b"POST /v1/sql HTTP/1.1") -> bytes:
    return (line + b"\r\nHost: 127.0.0.1:8080\r\nContent-Type: application/json\r\nContent-Length: "
            + str(len(body)).encode() + b"\r\n" + head_extra + b"\r\n" + body)


REQUESTS = [
    b"GET /v1/ping HTTP/1.1\r\nHost: h\r\n\r\n",
    _post(),
    _post(b"Authorization: Bearer s3cret\r\nAccept: application/json\r\n"),
    _post(line=b"POST /v1/sql HTTP/1.0"),
    _post(b"Connection: keep-alive\r\n", line=b"POST /v1/sql HTTP/1.0"),
    _post(b"Connection: close\r\n"),
    _post(b"Expect: 100-continue\r\n"),
    _post(b"X-Twice: a\r\nX-Twice: b\r\n"),  # joined with ", "
    _post(b"X_Underscore: dropped\r\n"),
    _post(b"X-Folded: a\r\n  b\r\n"),  # an obsolete line folding: waitress refuses it
    _post(b"X-Ws: \t padded \t\r\n"),
    b"GET /a%20b/%2Fc?q=1&r=%41#frag HTTP/1.1\r\nHost: h\r\n\r\n",
    b"GET http://other:81/abs?x=1 HTTP/1.1\r\nHost: h\r\n\r\n",
    b"GET //double/slash?y HTTP/1.1\r\nHost: h\r\n\r\n",
    b"GET / HTTP/1.1\r\nHost: h\r\nContent-Length: 0\r\n\r\n",
    b"\r\n\r\n",  # nothing but blank lines
    # refused by waitress: each must be refused again, the same way, on a repeat
    b"get / HTTP/1.1\r\nHost: h\r\n\r\n",
    b"GET / HTTP/1.1\r\nHost: h\r\nContent-Length: 12x\r\n\r\n",
    b"GET / HTTP/1.1\r\nHost: h\r\nContent-Length: -1\r\n\r\n",
    b"GET / HTTP/1.1\r\nBad Header: x\r\n\r\n",
    b"GET / HTTP/1.1\r\nHost: h\rx\r\n\r\n",
    b"GET / HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: gzip\r\n\r\n",
    b"GET / HTTP/1.1\r\nHost: h\r\nContent-Length: 99999999999\r\n\r\n",
    b"NOT A REQUEST LINE\r\nHost: h\r\n\r\n",
    # chunked: parsed every time, never remembered
    b"POST /v1/sql HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\n4\r\nabcd\r\n0\r\n\r\n",
    b"POST /v1/sql HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n",
]


def _fed(parser_class: type, adj: Adjustments, data: bytes, step: int | None) -> HTTPRequestParser:
    parser = parser_class(adj)
    chunks = [data] if step is None else [data[i:i + step] for i in range(0, len(data), step)]
    for chunk in chunks:
        while chunk and not parser.completed:
            chunk = chunk[parser.received(chunk):]
    return parser


def _state(parser: HTTPRequestParser) -> dict[str, Any]:
    state = {k: v for k, v in vars(parser).items() if k not in ("adj", "body_rcv", "error")}
    error = parser.error
    state["error"] = None if error is None else (type(error).__name__, error.body)
    state["body"] = parser.get_body_stream().read() if parser.completed and error is None else None
    state["body_rcv"] = type(parser.body_rcv).__name__
    return state


def _head(data: bytes) -> bytes:
    return data[:data.index(b"\r\n\r\n") + 4]


def _check(data: bytes, adj: Adjustments = HTTP) -> None:
    for step in (None, 1, 7):
        plain = _state(_fed(HTTPRequestParser, adj, data, step))
        first = _state(_fed(MemoParser, adj, data, step))
        again = _state(_fed(MemoParser, adj, data, step))
        assert first == plain, data
        assert again == plain, data


@pytest.fixture(autouse=True)
def _fresh_memo() -> Iterator[None]:
    head_memo._memo.clear()
    yield
    head_memo._memo.clear()


@pytest.mark.parametrize("data", REQUESTS, ids=range(len(REQUESTS)))
def test_a_remembered_head_parses_as_waitress_parses_it(data: bytes) -> None:
    _check(data)


def test_the_url_scheme_is_part_of_what_is_remembered() -> None:
    data = REQUESTS[1]
    _check(data, HTTP)
    _check(data, HTTPS)
    assert _fed(MemoParser, HTTPS, data, None).url_scheme == "https"
    assert _fed(MemoParser, HTTP, data, None).url_scheme == "http"


def test_what_is_remembered_and_what_is_not() -> None:
    ok, refused, chunked = REQUESTS[1], REQUESTS[16], REQUESTS[24]
    for data in (ok, refused, chunked):
        _fed(MemoParser, HTTP, data, None)
    assert [head for _, head in head_memo._memo] == [_head(ok)]
    long_head = _post(b"X-Long: " + b"a" * MAX_HEAD_BYTES + b"\r\n")
    _check(long_head)
    assert len(head_memo._memo) == 1


def test_the_memo_starts_again_when_full() -> None:
    for i in range(MAX_HEADS + 50):
        parser = _fed(MemoParser, HTTP, b"GET /k%d HTTP/1.1\r\nHost: h\r\n\r\n" % i, None)
        assert parser.path == f"/k{i}"
        assert len(head_memo._memo) <= MAX_HEADS
    assert len(head_memo._memo) == 50


_TOKEN = st.text("abcXYZ-_09!#", min_size=0, max_size=6)
_VALUE = st.text("ab \t,;=:/\x7f\x85\u00e9", min_size=0, max_size=8)


@settings(max_examples=150, deadline=None)
@given(method=st.sampled_from(["GET", "POST", "get", "PO ST"]),
       path=st.text("/a%2F?#&= ", min_size=0, max_size=8),
       version=st.sampled_from(["HTTP/1.1", "HTTP/1.0", "HTTP/2", ""]),
       headers=st.lists(st.tuples(_TOKEN, _VALUE), max_size=5),
       length=st.sampled_from([None, "0", "3", "03", "x", "3, 3"]))
def test_any_head_parses_alike(method: str, path: str, version: str, headers: list[tuple[str, str]],
                               length: str | None) -> None:
    lines = [f"{method} {path} {version}".rstrip()] + [f"{k}: {v}" for k, v in headers]
    if length is not None:
        lines.append(f"Content-Length: {length}")
    data = ("\r\n".join(lines) + "\r\n\r\nabc").encode("latin-1")
    _check(data)


def _echo(environ: dict[str, Any], start_response: Any) -> list[bytes]:
    body = environ["wsgi.input"].read(int(environ.get("CONTENT_LENGTH") or 0))
    answer = json.dumps({"body": body.decode(), "path": environ["PATH_INFO"],
                         "query": environ["QUERY_STRING"], "x": environ.get("HTTP_X_ONE")}).encode()
    start_response("200 OK", [("Content-Type", "application/json"), ("Content-Length", str(len(answer)))])
    return [answer]


def test_a_server_answers_each_body_under_one_repeated_head() -> None:
    """One keep-alive connection, one head sent again and again with other bodies of its length: the head is
    remembered, every body is each request's own."""
    with ServerThread(_echo, threads=2) as server, socket.create_connection(("127.0.0.1", server.port), timeout=10) as sock:
            reader = sock.makefile("rb")
            for i in range(20):
                body = b'{"k": "c%07d"}' % i
                head = (b"POST /echo?n=1 HTTP/1.1\r\nHost: h\r\nX-One: y\r\nContent-Length: %d\r\n\r\n"
                        % len(body))
                sock.sendall(head + body)
                assert reader.readline().startswith(b"HTTP/1.1 200")
                length = 0
                while (line := reader.readline()) != b"\r\n":
                    if line.lower().startswith(b"content-length:"):
                        length = int(line.split(b":")[1])
                answer = json.loads(reader.read(length))
                assert answer == {"body": body.decode(), "path": "/echo", "query": "n=1", "x": "y"}
    assert ("http", _head(head)) in head_memo._memo
