"""Pings and point lookups answered on the serving loop itself (serving/inline.py), everything else handed on.

Real servers on 127.0.0.1 over the shop's stores; what is answered where is read from the server's own counts,
and every answer is checked against the store.
"""

from __future__ import annotations

import json
import socket
import ssl
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from gateway import Gateway, GatewayConfig
from gateway.access import AccessContext, Admission, AuditLog, Users
from gateway.http import create_app
from gateway.http.fast import INLINE_KEY, NotInline
from gateway.serving.http_server import ServerThread
from gateway.serving.tls_channel import tls_context
from stores.engine.change import Change
from stores.iqv2.position import Position
from tests.gateway.access.team import make_team, users
from tests.gateway.gwfixtures import Shop, make_app
from tests.gateway.http.test_https import make_cert
from tests.gateway.live.livefixtures import live_env

LOOKUP = "SELECT customer, revenue, orders FROM revenue WHERE customer = ?"
FAR = {"orders": {"0": 10**12}}  # a bound no store reaches: a statement waiting for it holds its slot


def _post(sql: str, params: list[object] | None = None, headers: dict[str, str] | None = None,
          **fields: object) -> bytes:
    body = json.dumps({"sql": sql, **({"params": params} if params is not None else {}), **fields}).encode()
    head = "POST /v1/sql HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
    for k, v in (headers or {}).items():
        head += f"{k}: {v}\r\n"
    return (head + f"Content-Length: {len(body)}\r\n\r\n").encode() + body


def _read(sock: socket.socket, n: int, buf: bytes = b"") -> tuple[list[tuple[int, dict[str, str], bytes]], bytes]:
    """``n`` answers (status, headers, body) read off a keep-alive connection, and what is left over."""
    out = []
    while len(out) < n:
        end = buf.find(b"\r\n\r\n")
        if end >= 0:
            lines = buf[:end].decode("latin-1").split("\r\n")
            headers = {k.lower(): v for k, v in (line.split(": ", 1) for line in lines[1:])}
            length = int(headers["content-length"])
            if len(buf) >= end + 4 + length:
                out.append((int(lines[0].split()[1]), headers, buf[end + 4:end + 4 + length]))
                buf = buf[end + 4 + length:]
                continue
        chunk = sock.recv(1 << 20)
        assert chunk, "the server closed the connection"
        buf += chunk
    return out, buf


def _ask(port: int, *raws: bytes) -> list[tuple[int, dict[str, str], bytes]]:
    with socket.create_connection(("127.0.0.1", port), timeout=30) as s:
        s.sendall(b"".join(raws))  # pipelined where there are several
        return _read(s, len(raws))[0]


@pytest.fixture(scope="module")
def srv(gw: Gateway) -> Iterator[ServerThread]:
    with ServerThread(create_app(gw), threads=4) as s:
        yield s


def _counts(s: ServerThread) -> tuple[int, int]:
    c = s.inline_counts
    return c.answered, c.handed_on


def test_a_point_lookup_is_answered_by_the_serving_loop_once_planned(srv: ServerThread, shop: Shop) -> None:
    c = sorted(shop.revenue)[2]
    a0, h0 = _counts(srv)
    first = _ask(srv.port, _post(LOOKUP, [c]))  # a new text: the lane has no plan yet; a handler thread plans it
    a1, h1 = _counts(srv)
    assert (a1 - a0, h1 - h0) == (0, 1)
    answers = _ask(srv.port, *(_post(LOOKUP, [k]) for k in sorted(shop.revenue)[:5]), _post(LOOKUP, ["nobody"]))
    a2, h2 = _counts(srv)
    assert a2 - a1 >= 1 and h2 == h1  # the first on the loop; those pipelined behind it by a handler thread
    assert [json.loads(b)["rows"] for _, _, b in answers] == (
        [[[k, *shop.revenue[k]]] for k in sorted(shop.revenue)[:5]] + [[]])
    assert json.loads(first[0][2])["rows"] == [[c, *shop.revenue[c]]]
    for status, headers, _ in answers:
        assert status == 200 and "x-iq-position" in headers and headers["server"] == "iqgate"
    a3, _ = _counts(srv)
    for k in sorted(shop.revenue)[:20]:  # one at a time on one connection: every one on the loop
        assert json.loads(_ask(srv.port, _post(LOOKUP, [k]))[0][2])["rows"] == [[k, *shop.revenue[k]]]
    assert _counts(srv)[0] - a3 == 20


@pytest.mark.parametrize("raw", [
    _post("SELECT count(*) FROM revenue"),  # a scan: DuckDB's
    _post(LOOKUP, ["c01"], position={"orders": {"0": 0}}),  # a Position bound may wait
    _post(LOOKUP, ["c01"], wait_ms=10),
    _post(LOOKUP, ["c01"], session={"statement_timeout_ms": 1000}),
    _post(LOOKUP, ["c01"], headers={"X-IQ-Session": "x"}),  # a session token: the general way checks it
    _post(LOOKUP, ["c01" + " " * 5000]),  # a body past the loop's 4 KiB: parsed on a handler thread
    _post("SELECT * FROM nowhere WHERE k = 1"),  # an error the general way names
    b"GET /v1/health HTTP/1.1\r\nHost: x\r\n\r\n",  # not a path the loop answers at all
], ids=["scan", "position", "wait", "session", "token", "big-body", "unknown-store", "health"])
def test_what_may_wait_plan_or_scan_goes_to_a_handler_thread_with_the_same_answer(
        srv: ServerThread, gw: Gateway, raw: bytes) -> None:
    _ask(srv.port, _post(LOOKUP, ["c01"]))  # the lane planned
    a0, h0 = _counts(srv)
    answers = [_ask(srv.port, raw)[0] for _ in range(2)]
    a1, h1 = _counts(srv)
    assert a1 == a0, "answered on the serving loop"
    assert h1 - h0 == (0 if raw.startswith(b"GET") else 2)
    assert answers[0][0] == answers[1][0] and answers[0][2] == answers[1][2]
    assert answers[0][0] in (200, 400, 404), answers[0]


def test_pipelined_lookups_and_scans_keep_their_order(srv: ServerThread, shop: Shop) -> None:
    keys = sorted(shop.revenue)[:4]
    _ask(srv.port, _post(LOOKUP, [keys[0]]))
    raws = [_post(LOOKUP, [keys[0]]), _post("SELECT count(*) FROM revenue"), _post(LOOKUP, [keys[1]]),
            _post(LOOKUP, [keys[2]]), _post("SELECT sum(orders) FROM revenue"), _post(LOOKUP, [keys[3]])]
    got = [json.loads(b)["rows"] for _, _, b in _ask(srv.port, *raws)]
    assert got == [[[keys[0], *shop.revenue[keys[0]]]], [[len(shop.revenue)]], [[keys[1], *shop.revenue[keys[1]]]],
                   [[keys[2], *shop.revenue[keys[2]]]], [[sum(v[1] for v in shop.revenue.values())]],
                   [[keys[3], *shop.revenue[keys[3]]]]]


def test_a_large_answer_to_a_client_that_does_not_read_never_holds_the_loop(tmp_path: Path) -> None:
    """A lookup whose answer is far larger than the socket takes, asked by a client that then reads nothing: the
    loop leaves the rest in the connection's buffer and answers another client at once."""
    app = make_app(tmp_path / "big")
    app.start()
    name = "n" * (16 << 20)  # more than loopback's socket buffers take at once
    app.writer("accounts").write_batch(0, [Change(1, (name, 1.0, True, 0)), Change(2, ("small", 2.0, False, 0))],
                                       Position.from_map({"orders": {0: 0}}))
    gw = Gateway(app)
    sql = "SELECT id, name FROM accounts WHERE id = ?"
    try:
        with ServerThread(create_app(gw), threads=2) as s:
            _ask(s.port, _post(sql, [2]))  # planned
            a0, _ = _counts(s)
            with socket.create_connection(("127.0.0.1", s.port), timeout=30) as stuck:
                stuck.sendall(_post(sql, [1]))
                time.sleep(0.3)  # the big answer made and partly sent; nothing read
                for _ in range(20):
                    other = _ask(s.port, _post(sql, [2]))
                    assert json.loads(other[0][2])["rows"] == [[2, "small"]]
                assert _counts(s)[0] - a0 == 21  # the big one and the 20 others, all on the loop
                answers, _ = _read(stuck, 1)
            assert json.loads(answers[0][2])["rows"] == [[1, name]]
    finally:
        gw.close()
        app.close()


def test_a_token_not_yet_verified_is_checked_on_a_handler_thread_then_on_the_loop(
        tmp_path: Path, gw: Gateway, shop: Shop) -> None:
    team = make_team(tmp_path)
    access = AccessContext(Users.load(team.path))
    c = sorted(shop.revenue)[0]
    with ServerThread(create_app(gw, GatewayConfig(), access=access), threads=2) as s:
        auth = team.bearer("alice")
        _ask(s.port, _post(LOOKUP, [c], headers=auth))  # planned, and the token verified (PBKDF2) off the loop
        a0, h0 = _counts(s)
        ok = _ask(s.port, _post(LOOKUP, [c], headers=auth))
        assert _counts(s) == (a0 + 1, h0)
        assert json.loads(ok[0][2])["rows"] == [[c, *shop.revenue[c]]]
        forbidden = _ask(s.port, _post(LOOKUP, [c], headers=team.bearer("bob")))  # bob may not read revenue
        assert forbidden[0][0] == 404 and "revenue" in json.loads(forbidden[0][2])["error"]["message"]
        a1, h1 = _counts(s)
        wrong = _ask(s.port, _post(LOOKUP, [c], headers={"Authorization": "Bearer iqt_mallory_" + "b" * 32}))
        assert wrong[0][0] == 401 and _counts(s) == (a1, h1 + 1)  # an unknown token: verified off the loop
        none = _ask(s.port, _post(LOOKUP, [c]))
        assert none[0][0] == 401 and _counts(s) == (a1 + 1, h1 + 1)  # no header at all: cheap, on the loop


def test_over_https_lookups_on_the_loop_and_live_answers_sent_at_once(tmp_path: Path, gw: Gateway,
                                                                      shop: Shop) -> None:
    """The TLS channel keeps the server's own channel class: lookups are answered on the loop (they were not, the
    TLS channel replaced the class), and a live answer still streams over it."""
    cert, key = make_cert(str(tmp_path))
    client = ssl.create_default_context(cafile=cert)

    def tls(port: int) -> ssl.SSLSocket:
        return client.wrap_socket(socket.create_connection(("127.0.0.1", port), timeout=15),
                                  server_hostname="127.0.0.1")

    c = sorted(shop.revenue)[1]
    with ServerThread(create_app(gw), threads=2, tls=tls_context(cert, key)) as s:
        for _ in range(2):
            with tls(s.port) as t:
                t.sendall(_post(LOOKUP, [c]))
                answer = _read(t, 1)[0][0]
            assert json.loads(answer[2])["rows"] == [[c, *shop.revenue[c]]]
        assert _counts(s)[0] >= 1
    with live_env(tmp_path / "live", faces=False, kinds=("kv",)) as env, \
            ServerThread(create_app(env.gw), threads=2, tls=tls_context(cert, key)) as s, tls(s.port) as t:
        body = json.dumps({"sql": "SUBSCRIBE kv"}).encode()
        t.sendall(b"POST /v1/sql HTTP/1.1\r\nHost: x\r\nAccept: application/x-ndjson\r\n"
                  b"Content-Type: application/json\r\nContent-Length: " + str(len(body)).encode() + b"\r\n\r\n" + body)
        got = b""
        while b'"columns"' not in got:  # the head line
            chunk = t.recv(65536)
            assert chunk, "the server ended the live answer"
            got += chunk
        assert got.startswith(b"HTTP/1.1 200")


class _Echo:
    """A WSGI app that may be run on the serving loop: it reads the whole body there, then says NotInline for
    bodies starting with ``later``, fails for bodies starting with ``boom``, and fails half-way through its answer
    for ``half``; on a handler thread it echoes the body with the thread's name."""

    answers_inline = True

    def __call__(self, environ: dict[str, object], start_response: Any) -> Any:
        body = environ["wsgi.input"].read(int(environ.get("CONTENT_LENGTH") or 0))  # type: ignore[union-attr]
        if environ.get(INLINE_KEY):
            if body.startswith(b"later"):
                raise NotInline("later")
            if body.startswith(b"boom"):
                raise RuntimeError("boom on the loop")
            if body.startswith(b"half"):
                start_response("200 OK", [("Content-Type", "text/plain"), ("Content-Length", "1000")])
                return _half()
        out = body + b" " + threading.current_thread().name.encode()
        start_response("200 OK", [("Content-Type", "text/plain"), ("Content-Length", str(len(out)))])
        return [out]


def _half() -> Any:
    yield b"h" * 400
    raise RuntimeError("failed half-way on the loop")


def test_an_answer_that_fails_half_way_on_the_loop_ends_its_connection_and_the_server_answers_on(
        caplog: pytest.LogCaptureFixture) -> None:
    """The status line went out: the connection is closed after what was sent (the client sees a short body,
    never a second answer glued on), and the loop goes on answering."""
    raw = b"POST /v1/sql HTTP/1.1\r\nHost: x\r\nContent-Length: 4\r\n\r\nhalf"
    with ServerThread(_Echo(), threads=2) as s:
        with socket.create_connection(("127.0.0.1", s.port), timeout=30) as c:
            c.sendall(raw)
            got = b""
            while chunk := c.recv(65536):
                got += chunk
        assert got.startswith(b"HTTP/1.1 200 OK") and got.endswith(b"h" * 400)
        assert "failed half-way on the loop" in caplog.text
        assert _counts(s) == (1, 0)
        ok = b"POST /v1/sql HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n\r\nlater"
        assert _ask(s.port, ok)[0][0] == 200


def test_answers_ended_early_on_the_loop_say_why(gw: Gateway, shop: Shop) -> None:
    """A lookup over the response size limit, and one over its own max_rows, answered on the loop or handed on,
    end with the error the general way gives, and the server answers the next lookup."""
    c = sorted(shop.revenue)[0]
    with ServerThread(create_app(gw, GatewayConfig(max_response_bytes=100)), threads=2) as small, \
            ServerThread(create_app(gw), threads=2) as s:
        for srv in (small, s):
            _ask(srv.port, _post(LOOKUP, [c]))  # planned
        a0, _ = _counts(small)
        status, _, body = _ask(small.port, _post(LOOKUP, [c]))[0]
        assert status == 422 and json.loads(body)["error"]["code"] == "RESPONSE_TOO_LARGE"
        assert _counts(small)[0] == a0 + 1
        status, _, body = _ask(s.port, _post(LOOKUP, [c], max_rows=0))[0]  # the lane hands on; the general way
        assert status == 422 and json.loads(body)["error"]["code"] == "ROW_LIMIT_EXCEEDED"
        assert json.loads(_ask(s.port, _post(LOOKUP, [c]))[0][2])["rows"] == [[c, *shop.revenue[c]]]


@pytest.mark.parametrize("first", [b"later", b"boom"])
def test_a_request_handed_on_after_the_loop_read_its_body_is_read_whole_again(first: bytes,
                                                                             caplog: pytest.LogCaptureFixture) -> None:
    body = first + b" " + b"x" * 3000
    raw = (f"POST /v1/sql HTTP/1.1\r\nHost: x\r\nContent-Length: {len(body)}\r\n\r\n").encode() + body
    with ServerThread(_Echo(), threads=2) as s:
        answers = _ask(s.port, raw, raw)  # pipelined: the second waits behind the first, on its handler thread
        assert _counts(s) == (0, 1)
        answers += [_ask(s.port, raw)[0]]
        assert _counts(s) == (0, 2)
    for status, _, got in answers:
        assert status == 200 and got.startswith(body + b" ") and not got.endswith(b"iqgate-http")
    assert ("boom on the loop" in caplog.text) == (first == b"boom")


def test_admission_never_waits_on_the_loop_and_a_withdrawn_attempt_holds_no_slot(tmp_path: Path, gw: Gateway,
                                                                                 shop: Shop) -> None:
    """A user at their own concurrency limit: their lookup would wait for a slot, so the loop hands it on (the
    handler thread waits) and goes on answering another user's lookups at once; a statement the lane does not
    answer, tried on the loop after admission, gives its slot back and writes no audit line there."""
    path = tmp_path / "users.toml"
    users(path, "grant", "r", "revenue")
    lim = users(path, "add", "lim", "--role", "r")
    free = users(path, "add", "free", "--role", "r")
    users(path, "limit", "--user", "lim", "concurrent_statements=1")
    audit = tmp_path / "audit.log"
    access = AccessContext(Users.load(path), audit=AuditLog(str(audit)), admission=Admission(4, wait_s=5.0))
    c = sorted(shop.revenue)[0]
    as_lim, as_free = {"Authorization": f"Bearer {lim}"}, {"Authorization": f"Bearer {free}"}
    try:
        with ServerThread(create_app(gw, access=access), threads=4) as s:
            for who in (as_lim, as_free):
                assert _ask(s.port, _post(LOOKUP, [c], headers=who))[0][0] == 200  # tokens verified, lane planned
            a0, h0 = _counts(s)
            for _ in range(5):  # admitted on the loop, then not the lane's: the slot goes back, one line each
                assert _ask(s.port, _post("SELECT count(*) FROM revenue", headers=as_free))[0][0] == 200
            assert _counts(s) == (a0, h0 + 5) and not access.admission.usage()  # type: ignore[union-attr]
            lines = [json.loads(x) for x in audit.read_text().splitlines()]
            assert sum(x.get("statement") == "SELECT count(*) FROM revenue" for x in lines) == 5
            held = threading.Thread(target=_ask, args=(s.port, _post("SELECT * FROM revenue", headers=as_lim,
                                                                      position=FAR, wait_ms=2000)), daemon=True)
            held.start()
            deadline = time.monotonic() + 10
            while access.admission.usage().get("lim", (0, 0))[0] != 1:  # type: ignore[union-attr]
                assert time.monotonic() < deadline, "lim's statement never held its slot"
                time.sleep(0.01)
            queued: list[Any] = []
            waiting = threading.Thread(target=lambda: queued.append(_ask(s.port, _post(LOOKUP, [c],
                                                                                         headers=as_lim))))
            t0 = time.monotonic()
            waiting.start()
            a1, h1 = _counts(s)
            for _ in range(10):  # free's lookups while lim's waits for its slot: on the loop, at once
                got = _ask(s.port, _post(LOOKUP, [c], headers=as_free))[0]
                assert got[0] == 200 and json.loads(got[2])["rows"] == [[c, *shop.revenue[c]]]
            assert time.monotonic() - t0 < 1.5 and not queued
            assert _counts(s)[0] - a1 == 10
            waiting.join(15)
            held.join(15)
            assert queued and queued[0][0][0] == 200 and time.monotonic() - t0 >= 1.0  # after lim's first ended
            assert _counts(s)[1] - h1 == 1
    finally:
        access.close()
