"""SCRAM-SHA-256 verifiers and exchanges: RFC 7677's vector, independent client code, real PG drivers."""

from __future__ import annotations

import asyncio
import base64
from pathlib import Path

import asyncpg
import pg8000.native
import psycopg
import pytest
import scramp
from scramp.core import saslprep as scramp_saslprep

from gateway.access import ScramExchange, ScramMalformed, ScramRejected, ScramVerifier, Users
from gateway.access.scram import mock_verifier, saslprep
from gateway.access.users_cmd import main as users_main
from tests.gateway.access.scram_server import ScramOnlyServer

# RFC 7677 section 3
SALT = base64.b64decode("W22ZaJ0SNY7soEsUEjb6gQ==")
CLIENT_FIRST = "n,,n=user,r=rOprNGfwEbeRWgbNEkqO"
SERVER_NONCE = "%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0"
SERVER_FIRST = "r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096"
CLIENT_FINAL = ("c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,"
                "p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ=")
SERVER_FINAL = "v=6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4="


def test_rfc7677_test_vector() -> None:
    verifier = ScramVerifier.from_password("pencil", salt=SALT, iterations=4096)
    ex = ScramExchange(ScramVerifier.parse(str(verifier)), server_nonce=SERVER_NONCE)
    assert ex.server_first(CLIENT_FIRST) == SERVER_FIRST
    assert ex.server_final(CLIENT_FINAL) == SERVER_FINAL


def test_rfc7677_vector_with_the_wrong_password_is_rejected() -> None:
    ex = ScramExchange(ScramVerifier.from_password("pencils", salt=SALT), server_nonce=SERVER_NONCE)
    ex.server_first(CLIENT_FIRST)
    with pytest.raises(ScramRejected):
        ex.server_final(CLIENT_FINAL)


def test_verifier_text_round_trips_and_checks_passwords() -> None:
    v = ScramVerifier.from_password("s3cret")
    text = str(v)
    assert text.startswith("SCRAM-SHA-256$4096:") and "s3cret" not in text
    assert ScramVerifier.parse(text) == v
    assert v.verify_password("s3cret") and not v.verify_password("s3cret ") and not v.verify_password("")
    assert ScramVerifier.from_password("s3cret").salt != v.salt  # a fresh salt each time


@pytest.mark.parametrize("text, says", [
    ("md5abcdef", "SCRAM-SHA-256$<iterations>"),
    ("SCRAM-SHA-256$4096:c2FsdA==$AAAA", "SCRAM-SHA-256$<iterations>"),
    ("SCRAM-SHA-256$0:c2FsdA==$" + "A" * 44 + ":" + "A" * 44, "iteration count"),
    ("SCRAM-SHA-256$99999999:c2FsdA==$" + "A" * 44 + ":" + "A" * 44, "iteration count"),
    ("SCRAM-SHA-256$4096:not base64!$" + "A" * 44 + ":" + "A" * 44, "salt is not base64"),
    ("SCRAM-SHA-256$4096:c2FsdA==$AAAA:AAAA", "32-byte keys"),
    ("SCRAM-SHA-256$4096:$" + "A" * 44 + ":" + "A" * 44, "needs a salt"),
])
def test_malformed_verifiers_are_named(text: str, says: str) -> None:
    with pytest.raises(ScramMalformed, match=None) as err:
        ScramVerifier.parse(text)
    assert says in str(err.value)


def _client_exchange(password: str, verifier: ScramVerifier, user: str = "alice") -> str:
    """scramp's client (pg8000's SCRAM code) against our server side; returns the server's final message."""
    client = scramp.ScramClient(["SCRAM-SHA-256"], user, password)
    ex = ScramExchange(verifier)
    client.set_server_first(ex.server_first(client.get_client_first()))
    final = ex.server_final(client.get_client_final())
    client.set_server_final(final)  # raises unless our server signature proves the verifier
    return final


def test_an_independent_client_accepts_our_server_and_we_accept_it() -> None:
    v = ScramVerifier.from_password("correct horse")
    assert _client_exchange("correct horse", ScramVerifier.parse(str(v))).startswith("v=")
    with pytest.raises(ScramRejected):
        _client_exchange("wrong horse", v)


@pytest.mark.parametrize("password", ["I\u00adX", "\u2168", "p\u00e4ssw\u00f6rd", "\u00aa", "a\u3000b",
                                      "\u0007bell", "\u0627\u0031"])
def test_saslprep_agrees_with_an_independent_implementation(password: str) -> None:
    try:
        want = scramp_saslprep(password).encode()
    except (ValueError, scramp.ScramException):  # scramp refuses; PostgreSQL (and we) fall back on the raw bytes
        want = password.encode()
    assert saslprep(password) == want
    v = ScramVerifier.from_password(password)
    assert v.verify_password(password)


def test_saslprep_examples_of_rfc4013() -> None:
    assert saslprep("I\u00adX") == b"IX" and saslprep("user") == b"user" and saslprep("\u00aa") == b"a"
    assert saslprep("\u2168") == b"IX" and saslprep("\u0007") == "\u0007".encode()  # prohibited: raw


@pytest.mark.parametrize("first, final, says", [
    ("p=tls-server-end-point,,n=u,r=abc", None, "channel binding"),
    ("x,,n=u,r=abc", None, "must start with"),
    ("n,,r=abc", None, "n=<user>,r=<nonce>"),
    ("n,,n=u,r=", None, "n=<user>,r=<nonce>"),
    ("n,,garbage", None, "attribute"),
    ("n,,n=u,r=abc", "c=biws,r=abcX,p=AAAA", "nonce mismatch"),
    ("n,,n=u,r=abc", "c=eSws,r={nonce},p=AAAA", "channel-binding data"),
    ("n,,n=u,r=abc", "c=biws,r={nonce}", "no proof"),
    ("n,,n=u,r=abc", "c=biws,r={nonce},p=***", "not base64"),
])
def test_malformed_exchanges_are_protocol_errors(first: str, final: str | None, says: str) -> None:
    ex = ScramExchange(ScramVerifier.from_password("pw"))
    with pytest.raises(ScramMalformed) as err:
        server_first = ex.server_first(first)
        nonce = server_first.split(",")[0][2:]
        ex.server_final(final.format(nonce=nonce))
    assert says in str(err.value)


def test_final_before_first_is_a_protocol_error() -> None:
    with pytest.raises(ScramMalformed, match="before"):
        ScramExchange(ScramVerifier.from_password("pw")).server_final("c=biws,r=x,p=AAAA")


def test_a_short_proof_is_rejected_not_crashed() -> None:
    ex = ScramExchange(ScramVerifier.from_password("pw"))
    nonce = ex.server_first("n,,n=u,r=abc").split(",")[0][2:]
    with pytest.raises(ScramRejected):
        ex.server_final(f"c=biws,r={nonce},p=AAAA")


def test_mock_verifiers_are_stable_per_name_and_never_match() -> None:
    a1, a2, b = mock_verifier(b"seed", "mallory"), mock_verifier(b"seed", "mallory"), mock_verifier(b"seed", "eve")
    assert a1.salt == a2.salt and a1.salt != b.salt and len(a1.salt) == 16 and a1.iterations == 4096
    assert a1.stored_key != a2.stored_key  # unforgeable even knowing the seed
    assert mock_verifier(b"other", "mallory").salt != a1.salt
    with pytest.raises(ScramRejected):
        _client_exchange("", a1)


# -- real drivers --------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def pg_users(tmp_path_factory: pytest.TempPathFactory) -> tuple[Users, dict[str, str]]:
    path = tmp_path_factory.mktemp("scram") / "users.toml"
    secrets: dict[str, str] = {}
    assert users_main(["--file", str(path), "grant", "all", "*"]) == 0
    import io

    for name in ("alice", "bob"):
        out = io.StringIO()
        assert users_main(["--file", str(path), "add", name, "--role", "all"], stdout=out) == 0
        secrets[name + ".token"] = out.getvalue().strip()
    secrets["alice.password"] = "p\u00e4ss w\u00f6rd"
    assert users_main(["--file", str(path), "password", "alice"],
                      stdin=io.StringIO(secrets["alice.password"] + "\n")) == 0
    return Users.load(path), secrets


def _psycopg(port: int, user: str, password: str) -> None:
    with psycopg.connect(host="127.0.0.1", port=port, user=user, password=password, dbname="iqgate",
                         sslmode="disable", gssencmode="disable", connect_timeout=10):
        pass


def _pg8000(port: int, user: str, password: str) -> None:
    pg8000.native.Connection(user, host="127.0.0.1", port=port, password=password, database="iqgate",
                             timeout=10).close()


def _asyncpg(port: int, user: str, password: str) -> None:
    async def run() -> None:
        conn = await asyncpg.connect(host="127.0.0.1", port=port, user=user, password=password, database="iqgate",
                                     ssl=False, timeout=10)
        await conn.close()

    asyncio.run(run())


@pytest.mark.parametrize("connect", [_psycopg, _pg8000, _asyncpg], ids=["libpq", "pg8000", "asyncpg"])
def test_real_drivers_log_in_with_passwords_and_tokens(connect, pg_users) -> None:  # type: ignore[no-untyped-def]
    users, secrets = pg_users
    with ScramOnlyServer(users.scram_verifier) as srv:
        connect(srv.port, "alice", secrets["alice.password"])  # her PG password (SASLprep'ed, non-ASCII)
        connect(srv.port, "bob", secrets["bob.token"])  # no password: the token is the password
        for user, password in (("alice", secrets["alice.token"]),  # a password set: the token is not it
                               ("bob", secrets["alice.token"]), ("mallory", secrets["bob.token"]),
                               ("alice", "p\u00e4ss w\u00f6rd ")):
            with pytest.raises(Exception) as err:
                connect(srv.port, user, password)
            assert "password authentication failed" in str(err.value) or "28P01" in repr(err.value)
    assert srv.outcomes == [("alice", "ok"), ("bob", "ok"), ("alice", "rejected"), ("bob", "rejected"),
                            ("mallory", "rejected"), ("alice", "rejected")]


def test_single_token_mode_verifier_takes_the_token_for_any_name(tmp_path: Path) -> None:
    users = Users.single_token("tok-123")
    with ScramOnlyServer(users.scram_verifier) as srv:
        _psycopg(srv.port, "whoever", "tok-123")
        with pytest.raises(psycopg.OperationalError, match="password authentication failed"):
            _psycopg(srv.port, "whoever", "tok-124")
