"""The status line and headers our task class writes are waitress's own, byte for byte.

``WholeAnswerTask.build_response_header`` builds the common answer's head
itself (HTTP/1.1, a body with its length, the connection kept) for speed;
here the same WSGI app is served by plain waitress (its own task class) and
by ``ServerThread``, and every answer's bytes are compared across HTTP
versions, Connection headers, answers with and without a length, bodiless
statuses, an app's own Server and Date, repeated and lower-case header names.
"""

from __future__ import annotations

import re
import socket
import threading
import warnings
from collections.abc import Iterator
from typing import Any

import pytest
from waitress import create_server

from gateway.serving.http_server import SEND_BYTES, ServerThread
from gateway.serving.whole_answer import http_date


def _app(environ: dict[str, Any], start_response: Any) -> Iterator[bytes] | list[bytes]:
    path = environ["PATH_INFO"]
    body = b'{"rows":[[1,"a"]]}'
    if path == "/length":
        start_response("200 OK", [("Content-Type", "application/json"), ("Content-Length", str(len(body))),
                                  ("X-IQ-Position", '{"t":{"0":4}}'), ("x-lower-case", "yes")])
        return [body]
    if path == "/no-length":  # one piece: waitress learns its length
        start_response("200 OK", [("Content-Type", "application/json")])
        return [body]
    if path == "/stream":  # pieces without a length: chunked (HTTP/1.1) or closed (HTTP/1.0)
        start_response("200 OK", [("Content-Type", "application/x-ndjson")])
        return iter([b"1\n", b"2\n"])
    if path == "/no-content":
        start_response("204 No Content", [("X-Kept", "1")])
        return []
    if path == "/own-server":
        start_response("200 OK", [("Server", "mine"), ("Date", "Thu, 01 Jan 1970 00:00:00 GMT"),
                                  ("Content-Length", str(len(body)))])
        return [body]
    if path == "/repeated":
        start_response("422 Unprocessable Entity", [("Set-Cookie", "a=1"), ("Content-Length", str(len(body))),
                                                    ("set-cookie", "b=2"), ("Set-Cookie", "c=3")])
        return [body]
    start_response("404 Not Found", [("Content-Length", "0")])
    return [b""]


@pytest.fixture(scope="module")
def servers() -> Iterator[tuple[int, int]]:
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", "send_bytes", DeprecationWarning)
        plain = create_server(_app, host="127.0.0.1", port=0, threads=2, ident="iqgate", asyncore_use_poll=True,
                              send_bytes=SEND_BYTES)
    runner = threading.Thread(target=plain.run, daemon=True)
    runner.start()
    try:
        with ServerThread(_app, threads=2) as ours:
            yield int(plain.effective_port), ours.port
    finally:
        plain.close()
        runner.join(5)


def _exchange(port: int, request: bytes) -> bytes:
    """Everything the server sends for ``request`` on a fresh connection, up to its answer's end."""
    with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
        s.sendall(request)
        got = b""
        while True:
            head, sep, rest = got.partition(b"\r\n\r\n")
            if sep:
                length = re.search(rb"\r\nContent-Length: (\d+)", head)
                if length is not None and len(rest) >= int(length.group(1)):
                    return got
                if b"Transfer-Encoding: chunked" in head and rest.endswith(b"0\r\n\r\n"):
                    return got
                if head.startswith((b"HTTP/1.1 204", b"HTTP/1.0 204")):
                    return got
            piece = s.recv(65536)
            if not piece:  # the server closed: the answer ended with the connection
                return got
            got += piece


def _dated(answer: bytes) -> bytes:
    return re.sub(rb"\r\nDate: [^\r]*GMT", lambda m: b"\r\nDate: <now>" if b"1970" not in m.group(0)
                  else m.group(0), answer)


REQUESTS = [
    b"GET %s HTTP/1.1\r\nHost: x\r\n\r\n",
    b"GET %s HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
    b"GET %s HTTP/1.1\r\nHost: x\r\nConnection: keep-alive\r\n\r\n",
    b"GET %s HTTP/1.0\r\n\r\n",
    b"GET %s HTTP/1.0\r\nConnection: keep-alive\r\n\r\n",
]


@pytest.mark.parametrize("path", ["/length", "/no-length", "/stream", "/no-content", "/own-server", "/repeated",
                                  "/missing"])
@pytest.mark.parametrize("request_template", REQUESTS, ids=["1.1", "1.1-close", "1.1-keep", "1.0", "1.0-keep"])
def test_our_answer_head_is_waitress_s_byte_for_byte(servers: tuple[int, int], path: str,
                                                     request_template: bytes) -> None:
    plain_port, our_port = servers
    request = request_template % path.encode()
    theirs, ours = _exchange(plain_port, request), _exchange(our_port, request)
    assert theirs.startswith(b"HTTP/1.")
    assert _dated(ours) == _dated(theirs)


def test_the_date_is_formatted_once_a_second_and_as_waitress_formats_it() -> None:
    from waitress.utilities import build_http_date

    for when in (0.0, 86_399.9, 1_765_000_000.25, 1_765_000_000.75, 1_765_000_001.0):
        assert http_date(when) == build_http_date(when)
    assert http_date(1_765_000_000.9) is http_date(1_765_000_000.1)  # the same second: the same string
