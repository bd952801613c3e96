"""Small whole answers go out from the handler thread in one send (serving/whole_answer.py): still whole, in order."""

from __future__ import annotations

import socket
from collections.abc import Callable, Iterable, Iterator
from typing import Any

import pytest

from gateway.serving.http_server import SEND_BYTES, ServerThread


def _app(environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
    """Answers ``/n/<size>`` with <size> bytes of the path's first letter after ``/n/`` (one piece, its length)."""
    size = int(environ["PATH_INFO"].rsplit("/", 1)[1])
    body = (environ["PATH_INFO"][1:2] * size).encode()
    start_response("200 OK", [("Content-Type", "text/plain"), ("Content-Length", str(size))])
    return [body]


@pytest.fixture
def server() -> Iterator[ServerThread]:
    with ServerThread(_app, threads=2) as s:
        yield s


def _read_answers(sock: socket.socket, n: int) -> list[bytes]:
    buf = b""
    out: list[bytes] = []
    while len(out) < n:
        chunk = sock.recv(1 << 20)
        assert chunk, "the server closed the connection"
        buf += chunk
        while True:
            head_end = buf.find(b"\r\n\r\n")
            if head_end < 0:
                break
            head = buf[:head_end].decode("latin-1")
            length = int(next(line.split(":", 1)[1] for line in head.split("\r\n")
                              if line.lower().startswith("content-length:")))
            if len(buf) < head_end + 4 + length:
                break
            assert head.startswith("HTTP/1.1 200 OK"), head
            out.append(buf[head_end + 4:head_end + 4 + length])
            buf = buf[head_end + 4 + length:]
    return out


@pytest.mark.parametrize("sizes", [(300,), (300, 10, 5000), (SEND_BYTES + 1, 300), (300, SEND_BYTES * 3, 20)])
def test_pipelined_answers_small_and_large_arrive_whole_and_in_order(server: ServerThread,
                                                                     sizes: tuple[int, ...]) -> None:
    letters = "abcdefgh"
    with socket.create_connection(("127.0.0.1", server.port), timeout=30) as s:
        s.sendall(b"".join(f"GET /{letters[i]}/{n} HTTP/1.1\r\nHost: x\r\n\r\n".encode()
                           for i, n in enumerate(sizes)))
        answers = _read_answers(s, len(sizes))
    assert answers == [(letters[i] * n).encode() for i, n in enumerate(sizes)]


def test_many_small_answers_on_one_keep_alive_connection(server: ServerThread) -> None:
    with socket.create_connection(("127.0.0.1", server.port), timeout=30) as s:
        for i in range(200):
            s.sendall(f"GET /{'xyz'[i % 3]}/{100 + i} HTTP/1.1\r\nHost: x\r\n\r\n".encode())
            assert _read_answers(s, 1) == [('xyz'[i % 3] * (100 + i)).encode()]
