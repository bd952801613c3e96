"""HTTPS on the HTTP port (``--tls-cert``/``--tls-key``): TLS terminated in waitress's channel, checked with real
clients (urllib3 verifying a certificate made here, the remote DB-API, SQLAlchemy) against the same gateway served
over plain HTTP: every answer byte for byte the same, the query page and its links included."""

from __future__ import annotations

import json
import shutil
import socket
import ssl
import subprocess
import threading
from collections.abc import Iterator

import pytest
import urllib3

from gateway.engine.gateway import Gateway
from gateway.http import create_app
from gateway.serving.http_server import ServerThread
from gateway.serving.tls_channel import tls_context
from tests.gateway.gwfixtures import Shop

OPENSSL = shutil.which("openssl")


def make_cert(directory: str, name: str = "server") -> tuple[str, str]:
    """A self-signed certificate for 127.0.0.1 (in its subject alternative names, so hostname checks pass)."""
    if OPENSSL is None:
        pytest.skip("openssl is needed to make a test certificate")
    cert, key = f"{directory}/{name}.pem", f"{directory}/{name}.key"
    subprocess.run([OPENSSL, "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj", "/CN=127.0.0.1",
                    "-addext", "subjectAltName=IP:127.0.0.1", "-keyout", key, "-out", cert], check=True,
                   capture_output=True, timeout=60)
    return cert, key


@pytest.fixture(scope="module")
def cert(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, str]:
    return make_cert(str(tmp_path_factory.mktemp("https")))


@pytest.fixture(scope="module")
def servers(gw: Gateway, cert: tuple[str, str]) -> Iterator[tuple[str, str]]:
    """(the HTTPS server's URL, the same gateway's plain HTTP server's URL)."""
    with ServerThread(create_app(gw), threads=4, tls=tls_context(*cert)) as tls, \
            ServerThread(create_app(gw), threads=4) as plain:
        assert tls.url.startswith("https://") and plain.url.startswith("http://")
        yield tls.url, plain.url


@pytest.fixture(scope="module")
def pool(cert: tuple[str, str]) -> Iterator[urllib3.PoolManager]:
    p = urllib3.PoolManager(ca_certs=cert[0], maxsize=8, timeout=urllib3.Timeout(connect=5, read=30))
    yield p
    p.clear()


def _both(pool: urllib3.PoolManager, servers: tuple[str, str], method: str, path: str,
          **kw: object) -> tuple[urllib3.BaseHTTPResponse, urllib3.BaseHTTPResponse]:
    tls, plain = servers
    return pool.request(method, tls + path, **kw), pool.request(method, plain + path, **kw)  # type: ignore[arg-type]


STATEMENTS = ["SELECT * FROM revenue WHERE customer = 'c01'", "SELECT * FROM accounts, revenue ORDER BY 1, 6",
              "SELECT count(*) FROM per_min", "SELECT * FROM nope"]


@pytest.mark.parametrize("accept", ["application/json", "application/x-ndjson", "text/csv",
                                    "application/vnd.apache.arrow.stream"])
@pytest.mark.parametrize("sql", STATEMENTS)
def test_https_answers_are_the_http_answers(pool: urllib3.PoolManager, servers: tuple[str, str], sql: str,
                                           accept: str) -> None:
    a, b = _both(pool, servers, "POST", "/v1/sql", body=json.dumps({"sql": sql}),
                 headers={"Content-Type": "application/json", "Accept": accept})
    assert (a.status, a.data) == (b.status, b.data)
    assert a.headers.get("X-IQ-Position") == b.headers.get("X-IQ-Position")


@pytest.mark.parametrize("path", ["/", "/page/page.js", "/page/page.css", "/v1/stores", "/v1/health",
                                  "/v1/query?sql=SELECT+*+FROM+revenue&format=csv", "/v1/openapi.json"])
def test_the_query_page_works_over_https(pool: urllib3.PoolManager, servers: tuple[str, str], path: str) -> None:
    a, b = _both(pool, servers, "GET", path)
    assert a.status == b.status == 200
    if path != "/v1/health":  # health says how old its view is: the rest is the same
        assert a.data == b.data
    assert a.headers.get("Content-Type") == b.headers.get("Content-Type")


def test_the_remote_dbapi_and_sqlalchemy_over_https(servers: tuple[str, str], cert: tuple[str, str],
                                                    shop: Shop) -> None:
    import sqlalchemy as sa
    from iqgate_client import connect

    with connect(servers[0], ca_certs=cert[0]) as con:
        cur = con.cursor()
        cur.execute("SELECT count(*) FROM revenue")
        assert cur.fetchone() == (len(shop.revenue),)
    host_port = servers[0].removeprefix("https://")
    engine = sa.create_engine(f"iqgate://{host_port}?protocol=https&ca_certs={cert[0]}")
    try:
        assert "revenue" in sa.inspect(engine).get_table_names()
    finally:
        engine.dispose()


def test_tls_is_real_a_client_trusting_another_certificate_is_refused(servers: tuple[str, str],
                                                                      tmp_path_factory: pytest.TempPathFactory) -> None:
    other, _ = make_cert(str(tmp_path_factory.mktemp("other")), "other")
    stranger = urllib3.PoolManager(ca_certs=other, retries=False, timeout=5)
    with pytest.raises(urllib3.exceptions.SSLError, match="certificate verify failed"):
        stranger.request("GET", servers[0] + "/v1/ping")


def test_plain_http_to_the_https_port_is_told_so(servers: tuple[str, str], pool: urllib3.PoolManager) -> None:
    host, port = servers[0].removeprefix("https://").split(":")
    with socket.create_connection((host, int(port)), timeout=5) as s:
        s.sendall(b"GET /v1/ping HTTP/1.1\r\nHost: x\r\n\r\n")
        answer = s.recv(4096)
    assert answer.startswith(b"HTTP/1.1 400") and b"this port speaks HTTPS" in answer
    assert pool.request("GET", servers[0] + "/v1/ping").status == 200  # and it still serves


def test_half_open_and_abandoned_tls_connections_do_not_stall_the_server(servers: tuple[str, str],
                                                                        pool: urllib3.PoolManager,
                                                                        cert: tuple[str, str]) -> None:
    host, port = servers[0].removeprefix("https://").split(":")
    idle = [socket.create_connection((host, int(port)), timeout=5) for _ in range(5)]  # never say hello
    garbage = socket.create_connection((host, int(port)), timeout=5)
    garbage.sendall(b"\x16\x03\x01\x00\x05hello")  # a record header, then nonsense
    ctx = ssl.create_default_context(cafile=cert[0])
    abandoned = ctx.wrap_socket(socket.create_connection((host, int(port)), timeout=5), server_hostname=host)
    abandoned.sendall(b"POST /v1/sql HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 60\r\n"
                      b"\r\n" + json.dumps({"sql": "SELECT * FROM accounts, revenue"}).ljust(60).encode())
    abandoned.recv(100)  # the answer began; the client goes away in the middle of it
    abandoned.close()
    try:
        for _ in range(20):
            assert pool.request("POST", servers[0] + "/v1/sql", body=json.dumps({"sql": "SELECT 1 AS x"}),
                                headers={"Content-Type": "application/json"}).status == 200
    finally:
        for s in (*idle, garbage):
            s.close()


def test_concurrent_clients_over_https(pool: urllib3.PoolManager, servers: tuple[str, str], shop: Shop) -> None:
    big = json.loads(pool.request("POST", servers[1] + "/v1/sql", body=json.dumps({"sql": STATEMENTS[1]}),
                                  headers={"Content-Type": "application/json"}).data)
    errors: list[object] = []

    def client() -> None:
        mine = urllib3.PoolManager(ca_certs=pool.connection_pool_kw["ca_certs"], maxsize=1, timeout=30)
        for i in range(25):  # one keep-alive connection each: many requests per TLS session
            sql = STATEMENTS[i % 2]
            r = mine.request("POST", servers[0] + "/v1/sql", body=json.dumps({"sql": sql}),
                             headers={"Content-Type": "application/json"})
            body = json.loads(r.data)
            if r.status != 200 or (i % 2 == 1 and body["rows"] != big["rows"]):
                errors.append((r.status, sql))

    threads = [threading.Thread(target=client) for _ in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert not errors and not any(t.is_alive() for t in threads)
    assert len(big["rows"]) == len(shop.accounts) * len(shop.revenue)
