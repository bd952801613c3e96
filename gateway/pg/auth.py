"""Password authentication on the PG port: the startup user name selects the user, checked against ``Users``.

With a users file, the password is the user's PG password (``iqgate users
password NAME``, stored as a SCRAM verifier) or, without one, their token;
with a single ``--token`` the password is that token, whatever the name.
Three methods, as PostgreSQL has them: ``scram-sha-256`` (the default: the
password never crosses the wire, RFC 5802/7677, run by
``gateway.access.ScramExchange`` against the stored verifier; a name that is
no user runs the whole exchange against a mock verifier and fails like a
wrong password), ``md5`` (``md5(md5(token + user) + salt)``: it needs the
password itself, so only the single token can use it) and ``password``
(cleartext; use it only over TLS). Without authentication the port trusts
every client, like the HTTP port. A wrong password is SQLSTATE 28P01 and the
connection ends, for every method alike.
"""

from __future__ import annotations

import hashlib
import hmac
import os
from collections.abc import Callable

from ..access.principal import Principal
from ..access.scram import ScramExchange, ScramMalformed, ScramRejected
from ..access.users import Users
from .wire import Buffer, ProtocolError

__all__ = ["AuthFailed", "Authenticator", "METHODS"]

METHODS = ("scram-sha-256", "md5", "password")
_AUTH_OK, _CLEARTEXT, _MD5, _SASL, _SASL_CONTINUE, _SASL_FINAL = 0, 3, 5, 10, 11, 12


class AuthFailed(Exception):
    """The client's password is not the user's (or it gave up); SQLSTATE 28P01."""


class Authenticator:
    """One server's credentials: its ``Users`` (and, for ``md5``, the single token itself)."""

    def __init__(self, users: Users | str | None, method: str = "scram-sha-256", *, token: str | None = None) -> None:
        """``users``: the server's Users; a string is a single token (None: no authentication), as before users.
        ``token``: the single token itself, for ``md5`` (Users keeps only its verifier)."""
        if method not in METHODS:
            raise ValueError(f"unknown PG auth method {method!r}; choose one of {', '.join(METHODS)}")
        self._token = users if isinstance(users, str) else token
        if not isinstance(users, Users):
            users = Users.single_token(users) if users else Users.anonymous()
        if method == "md5" and users.mode == "file":
            raise ValueError("--pg-auth md5 needs the password itself, which a users file does not store: use "
                             "scram-sha-256 (or password over TLS)")
        self.users = users
        self.method = method

    def _failed(self, user: str) -> AuthFailed:
        if self.users.mode == "token":
            return AuthFailed("password authentication failed: the password must be the server's token")
        return AuthFailed(f'password authentication failed for user "{user}"')

    def authenticate(self, user: str, send: Callable[[int, bytes], None],
                     receive: Callable[[], tuple[bytes, bytes]]) -> Principal:
        """Run the exchange: ``send(auth_code, extra)`` writes an Authentication message and flushes,
        ``receive()`` reads the next (type, payload). Returns the user (AuthenticationOk is the caller's)."""
        users = self.users
        if not users.requires_auth:
            return users.principal(user)  # type: ignore[return-value] - every name, every grant
        if self.method == "password":
            send(_CLEARTEXT, b"")
            found = users.check_password(user, self._password(receive()))
        elif self.method == "md5":
            found = self._md5(user, send, receive)
        else:
            found = self._scram(user, send, receive)
        if found is None:
            raise self._failed(user)
        return found

    def _md5(self, user: str, send: Callable[[int, bytes], None],
             receive: Callable[[], tuple[bytes, bytes]]) -> Principal | None:
        token = self._token or ""
        salt = os.urandom(4)
        send(_MD5, salt)
        inner = hashlib.md5((token + user).encode()).hexdigest().encode()  # noqa: S324 - the protocol's
        want = b"md5" + hashlib.md5(inner + salt).hexdigest().encode()  # noqa: S324
        ok = bool(token) and hmac.compare_digest(self._password(receive()).encode(), want)
        return self.users.principal(user) if ok else None

    @staticmethod
    def _password(message: tuple[bytes, bytes]) -> str:
        kind, payload = message
        if kind != b"p":
            raise ProtocolError(f"expected a password message, got message type {kind!r}")
        return Buffer(payload).cstring()

    def _scram(self, user: str, send: Callable[[int, bytes], None],
               receive: Callable[[], tuple[bytes, bytes]]) -> Principal | None:
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
        exchange = ScramExchange(self.users.scram_verifier(user))  # a mock one for a name that is no user
        try:
            server_first = exchange.server_first(client_first)
        except ScramMalformed as exc:
            raise ProtocolError(str(exc), "28000") from None
        send(_SASL_CONTINUE, server_first.encode())
        kind, payload = receive()
        if kind != b"p":
            raise ProtocolError(f"expected a SASLResponse, got message type {kind!r}")
        try:
            server_final = exchange.server_final(payload.decode("utf-8", "replace"))
        except (ScramMalformed, ScramRejected):
            return None
        found = self.users.principal(user)
        if found is not None:
            send(_SASL_FINAL, server_final.encode())
        return found
