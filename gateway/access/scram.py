"""SCRAM-SHA-256 verifiers and the server's side of one exchange (RFC 5802, RFC 7677), as PostgreSQL has them.

A verifier, ``SCRAM-SHA-256$<iterations>:<salt>$<StoredKey>:<ServerKey>``,
is all a server needs to check a password: it proves the client knows the
password without either side sending it, and a stolen verifier cannot be
replayed as a password. Users' tokens and PG passwords are both stored this
way, so the PG port authenticates either with the same exchange, and a
bearer token is checked by deriving its StoredKey (PBKDF2 with the
verifier's salt) and comparing in constant time.

Passwords are SASLprep'ed (RFC 4013) before hashing, as libpq and PostgreSQL
do, so a non-ASCII password typed in psql matches the one stored here; a
password SASLprep rejects is used as its raw UTF-8 bytes (PostgreSQL's rule).
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import os
import stringprep
import unicodedata
from dataclasses import dataclass

__all__ = ["ScramVerifier", "ScramExchange", "ScramMalformed", "ScramRejected", "DEFAULT_ITERATIONS", "saslprep"]

DEFAULT_ITERATIONS = 4096  # PostgreSQL's scram_iterations default: what its clients expect to pay
MAX_ITERATIONS = 1_000_000  # a hand-edited file must not make one login cost minutes
_PREFIX = "SCRAM-SHA-256"


class ScramMalformed(ValueError):
    """A message or verifier that is not SCRAM-SHA-256 as RFC 5802 writes it (a protocol error, not a bad password)."""


class ScramRejected(Exception):
    """The client's proof does not match the verifier: the wrong password (or a mock verifier: no such user)."""


def _hmac(key: bytes, msg: bytes) -> bytes:
    return hmac.new(key, msg, hashlib.sha256).digest()


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def _unb64(text: str, what: str) -> bytes:
    try:
        return base64.b64decode(text.encode("ascii"), validate=True)
    except (binascii.Error, UnicodeEncodeError, ValueError):
        raise ScramMalformed(f"{what} is not base64: {text[:40]!r}") from None


def saslprep(password: str) -> bytes:
    """RFC 4013 SASLprep of ``password`` as UTF-8; PostgreSQL's fallback (the raw bytes) when it is prohibited."""
    if password.isascii() and all(0x20 <= ord(c) < 0x7F for c in password):
        return password.encode("utf-8")  # the common case: SASLprep is the identity on printable ASCII
    mapped = "".join(" " if stringprep.in_table_c12(c) else c for c in password if not stringprep.in_table_b1(c))
    prepped = unicodedata.normalize("NFKC", mapped)
    prohibited = (stringprep.in_table_c12, stringprep.in_table_c21, stringprep.in_table_c22, stringprep.in_table_c3,
                  stringprep.in_table_c4, stringprep.in_table_c5, stringprep.in_table_c6, stringprep.in_table_c7,
                  stringprep.in_table_c8, stringprep.in_table_c9, stringprep.in_table_a1)
    if any(check(c) for c in prepped for check in prohibited):
        return password.encode("utf-8")
    if any(stringprep.in_table_d1(c) for c in prepped):
        # RandALCat text must not contain LCat characters and must start and end with RandALCat
        if any(stringprep.in_table_d2(c) for c in prepped) or not (
                stringprep.in_table_d1(prepped[0]) and stringprep.in_table_d1(prepped[-1])):
            return password.encode("utf-8")
    return prepped.encode("utf-8")


@dataclass(frozen=True, slots=True)
class ScramVerifier:
    """What a server stores for one password: the salt and iteration count, and the two keys derived from it."""

    iterations: int
    salt: bytes
    stored_key: bytes
    server_key: bytes

    @classmethod
    def from_password(cls, password: str, *, salt: bytes | None = None,
                      iterations: int = DEFAULT_ITERATIONS) -> ScramVerifier:
        salt = os.urandom(16) if salt is None else salt
        salted = hashlib.pbkdf2_hmac("sha256", saslprep(password), salt, iterations)
        return cls(iterations, salt, hashlib.sha256(_hmac(salted, b"Client Key")).digest(),
                   _hmac(salted, b"Server Key"))

    @classmethod
    def parse(cls, text: str) -> ScramVerifier:
        """The verifier PostgreSQL's ``pg_authid.rolpassword`` would hold; ScramMalformed says what is wrong."""
        if not isinstance(text, str):
            raise ScramMalformed(f"a SCRAM verifier is a string, got {type(text).__name__}")
        mech, sep1, rest = text.partition("$")
        params, sep2, keys = rest.partition("$")
        iters, sep3, salt = params.partition(":")
        stored, sep4, server = keys.partition(":")
        if mech != _PREFIX or not (sep1 and sep2 and sep3 and sep4):
            raise ScramMalformed("a SCRAM verifier is SCRAM-SHA-256$<iterations>:<salt>$<StoredKey>:<ServerKey>")
        if not iters.isdigit() or not 1 <= int(iters) <= MAX_ITERATIONS:
            raise ScramMalformed(f"a SCRAM verifier's iteration count must be 1..{MAX_ITERATIONS}, got {iters!r}")
        out = cls(int(iters), _unb64(salt, "the salt"), _unb64(stored, "the StoredKey"),
                  _unb64(server, "the ServerKey"))
        if not out.salt or len(out.stored_key) != 32 or len(out.server_key) != 32:
            raise ScramMalformed("a SCRAM-SHA-256 verifier needs a salt and two 32-byte keys")
        return out

    def __str__(self) -> str:
        return f"{_PREFIX}${self.iterations}:{_b64(self.salt)}${_b64(self.stored_key)}:{_b64(self.server_key)}"

    def verify_password(self, password: str) -> bool:
        """True when ``password`` is the one this verifier was made from (one PBKDF2, a constant-time compare)."""
        salted = hashlib.pbkdf2_hmac("sha256", saslprep(password), self.salt, self.iterations)
        return hmac.compare_digest(hashlib.sha256(_hmac(salted, b"Client Key")).digest(), self.stored_key)

    def verify_proof(self, auth_message: bytes, proof: bytes) -> bool:
        """RFC 5802's server check: ClientKey = proof XOR HMAC(StoredKey, AuthMessage); H(ClientKey) == StoredKey."""
        signature = _hmac(self.stored_key, auth_message)
        if len(proof) != len(signature):
            return False
        client_key = bytes(a ^ b for a, b in zip(proof, signature))
        return hmac.compare_digest(hashlib.sha256(client_key).digest(), self.stored_key)

    def server_signature(self, auth_message: bytes) -> bytes:
        """What the server sends last (``v=``): proof to the client that this server holds the verifier."""
        return _hmac(self.server_key, auth_message)


def mock_verifier(seed: bytes, name: str) -> ScramVerifier:
    """A verifier for a user that does not exist: its salt is stable per name, so probing cannot tell it apart.

    PostgreSQL does the same (``scram_mock_salt``): the exchange runs to its
    end and fails like a wrong password, at the same cost. The keys are
    random each time, so not even someone who has read the users file (and
    its seed) can complete an exchange as a name that is no user.
    """
    digest = _hmac(seed, b"iqgate mock salt\0" + name.encode("utf-8", "surrogatepass"))
    return ScramVerifier(DEFAULT_ITERATIONS, digest[:16], os.urandom(32), os.urandom(32))


def _attributes(message: str, what: str) -> list[tuple[str, str]]:
    out = []
    for part in message.split(","):
        key, sep, value = part.partition("=")
        if not sep or len(key) != 1:
            raise ScramMalformed(f"malformed SCRAM {what} message: attribute {part[:40]!r}")
        out.append((key, value))
    return out


class ScramExchange:
    """The server's half of one SCRAM-SHA-256 exchange without channel binding, over message texts.

    The PG face frames the messages (SASLInitialResponse, SASLResponse) and
    calls ``server_first`` then ``server_final``; ``ScramMalformed`` is a
    protocol error, ``ScramRejected`` a wrong password (SQLSTATE 28P01).
    ``server_nonce`` is for RFC 7677's test vector only: leave it random.
    """

    def __init__(self, verifier: ScramVerifier, *, server_nonce: str | None = None) -> None:
        self.verifier = verifier
        self._server_nonce = server_nonce or _b64(os.urandom(18))
        self._gs2 = ""
        self._client_first_bare = ""
        self._server_first = ""
        self._nonce = ""

    def server_first(self, client_first: str) -> str:
        gs2_cb, sep1, rest = client_first.partition(",")
        authzid, sep2, bare = rest.partition(",")
        if not (sep1 and sep2) or gs2_cb not in ("n", "y"):
            if gs2_cb.startswith("p="):
                raise ScramMalformed("SCRAM channel binding is not offered by this server (use SCRAM-SHA-256)")
            raise ScramMalformed("malformed SCRAM client-first message: it must start with 'n,,' or 'y,,'")
        if authzid and not authzid.startswith("a="):
            raise ScramMalformed("malformed SCRAM client-first message: bad authorization identity")
        attrs = _attributes(bare, "client-first")
        if len(attrs) < 2 or attrs[0][0] != "n" or attrs[1][0] != "r" or not attrs[1][1]:
            raise ScramMalformed("malformed SCRAM client-first message: it needs n=<user>,r=<nonce>")
        if any(c in attrs[1][1] for c in ",") or not attrs[1][1].isprintable():
            raise ScramMalformed("malformed SCRAM client-first message: the nonce must be printable")
        self._gs2 = f"{gs2_cb},{authzid},"
        self._client_first_bare = bare
        self._nonce = attrs[1][1] + self._server_nonce
        v = self.verifier
        self._server_first = f"r={self._nonce},s={_b64(v.salt)},i={v.iterations}"
        return self._server_first

    def server_final(self, client_final: str) -> str:
        if not self._server_first:
            raise ScramMalformed("SCRAM client-final message before the client-first message")
        without_proof, sep, proof_b64 = client_final.rpartition(",p=")
        if not sep:
            raise ScramMalformed("malformed SCRAM client-final message: no proof")
        attrs = dict(_attributes(without_proof, "client-final"))
        if attrs.get("c") != _b64(self._gs2.encode()):
            raise ScramMalformed("SCRAM channel-binding data does not match the client-first message")
        if attrs.get("r") != self._nonce:
            raise ScramMalformed("SCRAM nonce mismatch")
        proof = _unb64(proof_b64, "the SCRAM proof")
        auth_message = f"{self._client_first_bare},{self._server_first},{without_proof}".encode()
        if not self.verifier.verify_proof(auth_message, proof):
            raise ScramRejected("password authentication failed")
        return "v=" + _b64(self.verifier.server_signature(auth_message))
