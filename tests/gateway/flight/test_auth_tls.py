"""Who may call: the token as a Bearer header or as basic auth's password (the handshake), UNAUTHENTICATED
without it; the session tokens the server issues; TLS with a certificate made here."""

from __future__ import annotations

import base64
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pyarrow.flight as fl
import pytest

from gateway.engine import Gateway
from gateway.flight import start_flight
from tests.gateway.flight.conftest import TOKEN, Flight, Raw
from tests.gateway.gwfixtures import Shop

SQL = "SELECT count(*) AS n FROM revenue"


def _count(raw: Raw) -> int:
    return raw.sql(SQL)[1].column("n")[0].as_py()


def test_bearer_token(flight: Flight, shop: Shop) -> None:
    raw = flight.client()
    try:
        assert _count(raw) == len(shop.revenue)
    finally:
        raw.close()


@pytest.mark.parametrize("header, why", [
    (None, "requires its token"),
    ("Bearer wrong", "token is not valid"),
    ("Basic " + base64.b64encode(b"someone:wrong").decode(), "token is not valid"),
    ("Basic !!!", "base64 of 'user:password'"),
    ("Token abc", "must be 'Bearer <token>' or 'Basic <user:token>'"),
    ("Bearer iqs1.00.dQ.00", "not one this server issued"),
])
def test_without_the_token_every_call_is_unauthenticated(flight: Flight, header: str | None, why: str) -> None:
    raw = Raw(fl.FlightClient(flight.location), None, [] if header is None else [(b"authorization", header.encode())])
    try:
        for call in (lambda: raw.sql(SQL), lambda: raw.fetch("CommandGetTables"),
                     lambda: list(raw.client.list_actions(raw.options()))):
            with pytest.raises(fl.FlightUnauthenticatedError, match=why):
                call()
    finally:
        raw.close()


def test_basic_auth_with_any_user_name(flight: Flight, shop: Shop) -> None:
    client = fl.FlightClient(flight.location)
    try:
        name, value = client.authenticate_basic_token("anyone at all", TOKEN)
        assert name == b"authorization" and value.startswith(b"Bearer iqs1.")
        raw = Raw(client, TOKEN, [(name, value)])
        assert _count(raw) == len(shop.revenue)
        basic = "Basic " + base64.b64encode(f"x:{TOKEN}".encode()).decode()  # basic auth on a plain call too
        assert _count(Raw(client, TOKEN, [(b"authorization", basic.encode())])) == len(shop.revenue)
        with pytest.raises(fl.FlightUnauthenticatedError, match="token is not valid"):
            client.authenticate_basic_token("anyone", "not the token")
    finally:
        client.close()


def test_adbc_with_basic_auth_or_the_bearer_header(flight: Flight, shop: Shop) -> None:
    import adbc_driver_flightsql.dbapi as dbapi
    import adbc_driver_manager

    with flight.adbc() as con, con.cursor() as cur:
        cur.execute(SQL)
        assert cur.fetchall() == [(len(shop.revenue),)]
    with dbapi.connect(flight.location, db_kwargs={"adbc.flight.sql.authorization_header": f"Bearer {TOKEN}"},
                       autocommit=True) as con, con.cursor() as cur:
        cur.execute(SQL)
        assert cur.fetchall() == [(len(shop.revenue),)]
        cur.execute("SET partial_results = true")  # on the session token the server returned: it sticks
        cur.execute("SET max_rows = 1000")  # a SET answers with every setting now in force
        assert ("partial_results", "true") in cur.fetchall()
    with pytest.raises(adbc_driver_manager.Error, match="UNAUTHENTICATED"):
        dbapi.connect(flight.location, db_kwargs={"username": "u", "password": "wrong"}, autocommit=True)


def test_a_server_without_a_token_lets_everyone_in(gw: Gateway, shop: Shop) -> None:
    with start_flight(gw) as handle:
        raw = Raw(fl.FlightClient(handle.location), None)
        try:
            assert _count(raw) == len(shop.revenue)
        finally:
            raw.close()


# -- TLS ----------------------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def cert(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, str]:
    """A self-signed certificate for 127.0.0.1 (gRPC checks the IP against the subject alternative name)."""
    d = tmp_path_factory.mktemp("flight-tls")
    cert, key = d / "cert.pem", d / "key.pem"
    try:
        _cert_with_cryptography(cert, key)
    except ImportError:
        openssl = shutil.which("openssl")
        if openssl is None:
            pytest.skip("neither the cryptography package nor openssl is here to make a test certificate")
        subprocess.run([openssl, "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj",
                        "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1", "-keyout", str(key), "-out",
                        str(cert)], check=True, capture_output=True, timeout=60)
    return str(cert), str(key)


def _cert_with_cryptography(cert: Path, key: Path) -> None:
    import datetime as dt
    import ipaddress

    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    private = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "127.0.0.1")])
    now = dt.datetime.now(dt.timezone.utc)
    certificate = (x509.CertificateBuilder().subject_name(name).issuer_name(name).public_key(private.public_key())
                   .serial_number(x509.random_serial_number()).not_valid_before(now - dt.timedelta(minutes=5))
                   .not_valid_after(now + dt.timedelta(days=1))
                   .add_extension(x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]),
                                  critical=False)
                   .sign(private, hashes.SHA256()))
    cert.write_bytes(certificate.public_bytes(serialization.Encoding.PEM))
    key.write_bytes(private.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                          serialization.NoEncryption()))


@pytest.fixture(scope="module")
def tls_flight(gw: Gateway, cert: tuple[str, str]) -> Iterator[Flight]:
    with start_flight(gw, token=TOKEN, tls_cert=cert[0], tls_key=cert[1]) as handle:
        yield Flight(handle, TOKEN)


def test_tls_with_pyarrow_and_adbc(tls_flight: Flight, cert: tuple[str, str], shop: Shop) -> None:
    import adbc_driver_flightsql.dbapi as dbapi

    assert tls_flight.location.startswith("grpc+tls://127.0.0.1:")
    pem = Path(cert[0]).read_bytes()
    raw = Raw(fl.FlightClient(tls_flight.location, tls_root_certs=pem), TOKEN)
    try:
        assert _count(raw) == len(shop.revenue)
    finally:
        raw.close()
    with dbapi.connect(tls_flight.location, autocommit=True, db_kwargs={
            "username": "u", "password": TOKEN, "adbc.flight.sql.client_option.tls_root_certs": pem.decode()}) as con:
        with con.cursor() as cur:
            cur.execute(SQL)
            assert cur.fetchall() == [(len(shop.revenue),)]


def test_tls_refuses_a_client_that_does_not_trust_it_and_plaintext(tls_flight: Flight) -> None:
    untrusting = Raw(fl.FlightClient(tls_flight.location), TOKEN)  # the system roots: not our certificate
    plain = Raw(fl.FlightClient(tls_flight.location.replace("grpc+tls", "grpc")), TOKEN)
    try:
        for raw in (untrusting, plain):
            with pytest.raises(fl.FlightUnavailableError):
                raw.client.get_flight_info(raw.command("CommandStatementQuery", query=SQL), raw.options(timeout=10))
    finally:
        untrusting.close()
        plain.close()


def test_bad_tls_files_are_named(gw: Gateway, cert: tuple[str, str], tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="both --tls-cert and --tls-key"):
        start_flight(gw, tls_cert=cert[0])
    with pytest.raises(ValueError, match="--tls-cert /nonexistent/cert.pem with --tls-key .*No such file"):
        start_flight(gw, tls_cert="/nonexistent/cert.pem", tls_key=cert[1])
    junk = tmp_path / "junk.pem"
    junk.write_text("not a certificate")
    with pytest.raises(ValueError, match="must be PEM files"):
        start_flight(gw, tls_cert=str(junk), tls_key=str(junk))
    broken = tmp_path / "broken.pem"
    broken.write_text("-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n")
    with pytest.raises(OSError, match="cannot serve Flight SQL"):
        start_flight(gw, tls_cert=str(broken), tls_key=cert[1])
