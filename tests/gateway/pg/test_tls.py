"""TLS on the PG port (``--tls-cert``/``--tls-key``): SSLRequest answered 'S', then the whole session encrypted;
without a certificate 'N', so ``sslmode=require`` clients are told, and ``prefer`` clients go on in clear."""

from __future__ import annotations

import shutil
import socket
import struct
import subprocess
from pathlib import Path

import psycopg
import pytest

from gateway.engine.gateway import Gateway
from gateway.pg import PgServer

OPENSSL = shutil.which("openssl")


@pytest.fixture(scope="module")
def cert(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, str]:
    if OPENSSL is None:
        pytest.skip("openssl is needed to make a test certificate")
    d = tmp_path_factory.mktemp("tls")
    subprocess.run([OPENSSL, "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj", "/CN=127.0.0.1",
                    "-keyout", str(d / "key.pem"), "-out", str(d / "cert.pem")], check=True, capture_output=True,
                   timeout=60)
    return str(d / "cert.pem"), str(d / "key.pem")


def test_tls_session_with_the_token(gw: Gateway, cert: tuple[str, str]) -> None:
    with PgServer(gw, token="tls-token", tls_cert=cert[0], tls_key=cert[1]) as srv:
        with psycopg.connect(host=srv.host, port=srv.port, user="u", password="tls-token", dbname="iqgate",
                             sslmode="require", autocommit=True, connect_timeout=10) as con:
            assert con.pgconn.ssl_in_use
            assert con.execute("SELECT count(*) FROM revenue").fetchone()[0] > 0
        with pytest.raises(psycopg.OperationalError):
            psycopg.connect(host=srv.host, port=srv.port, user="u", password="bad", dbname="iqgate",
                            sslmode="require", connect_timeout=10)


def test_without_a_certificate_ssl_is_declined(gw: Gateway) -> None:
    with PgServer(gw) as srv:
        with pytest.raises(psycopg.OperationalError) as info:
            psycopg.connect(host=srv.host, port=srv.port, user="u", dbname="iqgate", sslmode="require",
                            connect_timeout=10)
        assert "does not support SSL" in str(info.value)
        with psycopg.connect(host=srv.host, port=srv.port, user="u", dbname="iqgate", sslmode="prefer",
                             autocommit=True, connect_timeout=10) as con:
            assert not con.pgconn.ssl_in_use


def test_half_a_tls_configuration_is_refused(gw: Gateway, cert: tuple[str, str]) -> None:
    with pytest.raises(ValueError, match="both --tls-cert and --tls-key"):
        PgServer(gw, tls_cert=cert[0])
    assert Path(cert[1]).exists()


def test_a_certificate_that_cannot_be_loaded_is_named(gw: Gateway, cert: tuple[str, str], tmp_path: Path) -> None:
    with pytest.raises(ValueError, match=r"--tls-cert /nonexistent/cert.pem with --tls-key .*: No such file"):
        PgServer(gw, tls_cert="/nonexistent/cert.pem", tls_key=cert[1])
    junk = tmp_path / "junk.pem"
    junk.write_text("not a certificate")
    with pytest.raises(ValueError, match=f"--tls-cert {junk} with --tls-key {junk}: .*PEM"):
        PgServer(gw, tls_cert=str(junk), tls_key=str(junk))


def test_plaintext_sent_behind_the_ssl_request_is_refused(gw: Gateway, cert: tuple[str, str]) -> None:
    """Only the TLS handshake may follow an SSLRequest that will be accepted: bytes already there were sent in the
    clear, maybe by someone else (CVE-2021-23214). PostgreSQL refuses them; so does the PG port, before 'S'."""
    startup = struct.pack("!i", 196608) + b"user\0u\0database\0iqgate\0\0"
    with PgServer(gw, tls_cert=cert[0], tls_key=cert[1]) as srv:
        with socket.create_connection((srv.host, srv.port), timeout=10) as s:
            s.sendall(struct.pack("!ii", 8, 80877103) + struct.pack("!i", len(startup) + 4) + startup)
            data = b""
            while chunk := s.recv(65536):
                data += chunk
        assert data[:1] == b"E" and b"C08P01\0" in data and b"received unencrypted data after SSL request" in data
        with psycopg.connect(host=srv.host, port=srv.port, user="u", dbname="iqgate", sslmode="require",
                             autocommit=True, connect_timeout=10) as con:
            assert con.execute("SELECT 1").fetchone() == (1,)
