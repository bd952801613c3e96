"""Password authentication on the PG port: the password is the server's token (``--token``).

Three methods, as PostgreSQL has them: ``scram-sha-256`` (the default: the
token never crosses the wire, RFC 5802/7677), ``md5`` (``md5(md5(token +
user) + salt)``) and ``password`` (cleartext; use it only over TLS). Without
a token the port trusts every client, like the HTTP port without one. A wrong
password is SQLSTATE 28P01 and the connection ends, for every method alike.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import os
from collections.abc import Callable

from .wire import Buffer, ProtocolError

__all__ = ["AuthFailed", "Authenticator", "METHODS"]

METHODS = ("scram-sha-256", "md5", "password")
_ITERATIONS = 4096
_AUTH_OK, _CLEARTEXT, _MD5, _SASL, _SASL_CONTINUE, _SASL_FINAL = 0, 3, 5, 10, 11, 12


class AuthFailed(Exception):
    """The client's password is not the token (or it gave up); SQLSTATE 28P01."""


def _hmac(key: bytes, msg: bytes) -> bytes:
    return hmac.new(key, msg, hashlib.sha256).digest()


class Authenticator:
    """One server's credentials: the token, and the SCRAM keys derived from it once (PBKDF2 is slow on purpose)."""

    def __init__(self, token: str | None, method: str = "scram-sha-256") -> None:
        if method not in METHODS:
            raise ValueError(f"unknown PG auth method {method!r}; choose one of {', '.join(METHODS)}")
        self.token = token
        self.method = method
        self._salt = os.urandom(16)
        if token is not None:
            salted = hashlib.pbkdf2_hmac("sha256", token.encode(), self._salt, _ITERATIONS)
            self._stored_key = hashlib.sha256(_hmac(salted, b"Client Key")).digest()
            self._server_key = _hmac(salted, b"Server Key")

    def authenticate(self, user: str, send: Callable[[int, bytes], None],
                     receive: Callable[[], tuple[bytes, bytes]]) -> None:
        """Run the exchange: ``send(auth_code, extra)`` writes an Authentication message and flushes,
        ``receive()`` reads the next (type, payload). Returns on success (AuthenticationOk is the caller's)."""
        if self.token is None:
            return
        if self.method == "password":
            send(_CLEARTEXT, b"")
            self._check(hmac.compare_digest(self._password(receive()).encode(), self.token.encode()))
        elif self.method == "md5":
            salt = os.urandom(4)
            send(_MD5, salt)
            inner = hashlib.md5((self.token + user).encode()).hexdigest().encode()  # noqa: S324 - the protocol's
            want = b"md5" + hashlib.md5(inner + salt).hexdigest().encode()  # noqa: S324
            self._check(hmac.compare_digest(self._password(receive()).encode(), want))
        else:
            self._scram(send, receive)

    @staticmethod
    def _check(ok: bool) -> None:
        if not ok:
            raise AuthFailed("password authentication failed: the password must be the server's token")

    @staticmethod
    def _password(message: tuple[bytes, bytes]) -> str:
        kind, payload = message
        if kind != b"p":
            raise ProtocolError(f"expected a password message, got message type {kind!r}")
        return Buffer(payload).cstring()

    def _scram(self, send: Callable[[int, bytes], None], receive: Callable[[], tuple[bytes, bytes]]) -> None:
        send(_SASL, b"SCRAM-SHA-256\0\0")
        kind, payload = receive()
        if kind != b"p":
            raise ProtocolError(f"expected a SASLInitialResponse, got message type {kind!r}")
        buf = Buffer(payload)
        mechanism = buf.cstring()
        if mechanism != "SCRAM-SHA-256":
            raise ProtocolError(f"unsupported SASL mechanism {mechanism!r}; this server offers SCRAM-SHA-256", "28000")
        size = buf.int32()
        client_first = buf.take(size).decode("utf-8", "replace") if size >= 0 else ""
        gs2, _, bare = client_first.partition(",,") if client_first[:1] in ("n", "y") else ("", "", "")
        attrs = dict(p.split("=", 1) for p in bare.split(",") if "=" in p)
        if not gs2 or "r" not in attrs:
            raise ProtocolError("malformed SCRAM client-first message", "28000")
        nonce = attrs["r"] + base64.b64encode(os.urandom(18)).decode()
        server_first = f"r={nonce},s={base64.b64encode(self._salt).decode()},i={_ITERATIONS}"
        send(_SASL_CONTINUE, server_first.encode())
        kind, payload = receive()
        if kind != b"p":
            raise ProtocolError(f"expected a SASLResponse, got message type {kind!r}")
        client_final = payload.decode("utf-8", "replace")
        without_proof, _, proof_b64 = client_final.rpartition(",p=")
        final = dict(p.split("=", 1) for p in without_proof.split(",") if "=" in p)
        if final.get("r") != nonce:
            raise AuthFailed("password authentication failed: SCRAM nonce mismatch")
        auth_message = f"{bare},{server_first},{without_proof}".encode()
        try:
            proof = base64.b64decode(proof_b64, validate=True)
        except ValueError:
            raise AuthFailed("password authentication failed: malformed SCRAM proof") from None
        signature = _hmac(self._stored_key, auth_message)
        if len(proof) != len(signature):
            raise AuthFailed("password authentication failed: malformed SCRAM proof")
        client_key = bytes(a ^ b for a, b in zip(proof, signature))
        self._check(hmac.compare_digest(hashlib.sha256(client_key).digest(), self._stored_key))
        send(_SASL_FINAL, b"v=" + base64.b64encode(_hmac(self._server_key, auth_message)))
