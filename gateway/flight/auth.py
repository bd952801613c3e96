"""Who calls: the server's token as a Bearer header or as the password of basic auth, and the session it is in.

A client proves it holds the token one of three ways: ``Authorization:
Bearer <token>``, ``Authorization: Basic`` with any user name and the token
as password, or the Flight handshake with basic auth (what
``adbc_driver_flightsql.dbapi.connect(uri, db_kwargs={"username": …,
"password": …})`` does). Without a configured token every caller is let in,
as on the HTTP port. A call without a valid credential is UNAUTHENTICATED
before any handler runs.

Flight calls have no connection to hang SET settings on, so the server
issues sessions: a call that does not present a session token gets one back
in its ``authorization`` response header (``Bearer iqs1.…``), which the ADBC
driver adopts for the rest of the connection and a pyarrow client can send
itself. Session tokens are signed by this server instance (HMAC, a key made
at start) and name the user, so checking one needs no state; what a session
holds (its settings) lives in ``sessions``.

Who may do what is asked of one hook object (``authenticate``): ``TokenAuth``
(the single token) or ``UsersAuth`` (a users file: a user's token as Bearer,
or their name and PG password / token as basic auth). Its Principal carries
the user's grants (``access``), re-read at every call of a session, so a
revoke takes effect at the next statement.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import logging
import os
import secrets
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

import pyarrow.flight as fl

__all__ = ["Principal", "FlightAuth", "TokenAuth", "UsersAuth", "SessionTokens", "CallState",
           "AuthMiddlewareFactory", "HandshakeAuth", "MIDDLEWARE"]

log = logging.getLogger("iqgate.flight")

MIDDLEWARE = "iqgate"  # the key handlers find their CallState under (ServerCallContext.get_middleware)
_PREFIX = "iqs1."


@dataclass(frozen=True, slots=True)
class Principal:
    """The authenticated caller: the user name and (``access``) their grants and limits (``gateway.access``);
    None there is a caller with every grant. Tickets and prepared statements are bound to the name."""

    user: str
    access: Any = field(default=None, compare=False)


class FlightAuth(Protocol):
    """The hook deciding who may call: ``authenticate`` returns the Principal, or None to refuse."""

    def authenticate(self, user: str | None, secret: str | None) -> Principal | None: ...


class TokenAuth:
    """The server's one token (``--token``), with any user name; no token configured lets everyone in."""

    def __init__(self, token: str | None) -> None:
        if token is not None and not token:
            raise ValueError("the Flight token must be a non-empty string or None")
        self._token = None if token is None else token.encode()

    @property
    def open(self) -> bool:
        return self._token is None

    def authenticate(self, user: str | None, secret: str | None) -> Principal | None:
        name = user or "iqgate"
        if self._token is None:
            return Principal(name)
        if secret is None or not hmac.compare_digest(secret.encode(), self._token):
            return None
        return Principal(name)


class UsersAuth:
    """The users of an ``AccessContext``: Bearer is a user's token; basic auth is a user name with their PG password
    (or, without one, their token). With a single token, any user name with that token; without authentication,
    everyone. Refusals are written to the audit log."""

    def __init__(self, access: Any) -> None:
        self.access = access
        self.users = access.users

    @property
    def open(self) -> bool:
        return not self.users.requires_auth

    def authenticate(self, user: str | None, secret: str | None) -> Principal | None:
        users = self.users
        if not users.requires_auth:
            name = user or "iqgate"
            return Principal(name, users.principal(name))
        if secret is None:
            self.access.login_failed(user, "flight", None, "no credential")
            return None
        found = users.authenticate_token(secret) if user is None else users.check_password(user, secret)
        if found is None:
            self.access.login_failed(user if user is not None else users.token_owner(secret), "flight", None,
                                     "the credential is not valid")
            return None
        return Principal(found.name if users.mode == "file" else (user or found.name), found)

    def refresh(self, principal: Principal) -> Principal | None:
        """The same user as of now (a session token names them; their grants may have changed), or None."""
        found = self.users.principal(principal.user)
        return None if found is None else Principal(principal.user, found)


class SessionTokens:
    """Signed session tokens ``iqs1.<session id>.<user, base64url>.<mac>``: minted by this server, checked
    without state; a token of another server instance (or a restarted one) does not verify."""

    def __init__(self) -> None:
        self._key = os.urandom(32)
        self._verified: dict[str, tuple[str, Principal]] = {}  # every call presents its token: checked once

    def _mac(self, body: str) -> str:
        return hmac.new(self._key, body.encode(), hashlib.sha256).hexdigest()[:32]

    def mint(self, principal: Principal) -> tuple[str, str]:
        """(a new session id, its token)."""
        sid = secrets.token_hex(16)
        user = base64.urlsafe_b64encode(principal.user.encode()).decode().rstrip("=")
        body = f"{_PREFIX}{sid}.{user}"
        return sid, f"{body}.{self._mac(body)}"

    @staticmethod
    def looks_like(token: str) -> bool:
        return token.startswith(_PREFIX)

    def verify(self, token: str) -> tuple[str, Principal] | None:
        known = self._verified.get(token)
        if known is not None:
            return known
        found = self._check(token)
        if found is not None:
            if len(self._verified) >= 65_536:
                self._verified.clear()
            self._verified[token] = found
        return found

    def _check(self, token: str) -> tuple[str, Principal] | None:
        body, _, mac = token.rpartition(".")
        parts = body[len(_PREFIX):].split(".")
        if len(parts) != 2 or not hmac.compare_digest(mac.encode(), self._mac(body).encode()):
            return None
        sid, user = parts
        try:
            name = base64.urlsafe_b64decode(user + "=" * (-len(user) % 4)).decode()
        except (binascii.Error, UnicodeDecodeError):
            return None
        return sid, Principal(name)


class CallState(fl.ServerMiddleware):
    """One RPC: its caller, session, headers, and (while a handler runs) its context, for ``gone``.

    ``gone`` is polled by the engine's statement guard from another thread while a statement runs: the
    context is only touched under the lock, and forgotten when the call completes, before pyarrow frees it.
    """

    def __init__(self, principal: Principal, session_id: str | None, issued: str | None,
                 headers: Mapping[str, list[Any]], method: Any) -> None:
        self.principal = principal
        self.session_id = session_id  # None: the client presented no session token (this call's is ``issued``)
        self.issued = issued
        self.headers = headers
        self.method = method
        self._lock = threading.Lock()
        self._context: Any = None
        self._done = False
        self._on_complete: list[Callable[[], None]] = []

    def sending_headers(self) -> dict[str, str]:
        return {"authorization": f"Bearer {self.issued}"} if self.issued else {}

    def on_complete(self, action: Callable[[], None]) -> None:
        """Run ``action`` when the call ends, however it ends (a DoGet's stream may never be started)."""
        self._on_complete.append(action)

    def call_completed(self, exception: Any) -> None:
        with self._lock:
            self._context = None
            self._done = True
        actions, self._on_complete = self._on_complete, []
        for action in actions:
            try:
                action()
            except Exception:  # noqa: BLE001 - ending one statement must not stop ending the others
                log.exception("ending a Flight call's statement failed")

    def attach(self, context: Any) -> None:
        with self._lock:
            if not self._done:
                self._context = context

    def detach(self) -> None:
        with self._lock:
            self._context = None

    def peer(self) -> str | None:
        """The client's address as gRPC names it (``ipv4:127.0.0.1:50432``), while the call runs."""
        with self._lock:
            context = self._context
        try:
            return str(context.peer()) if context is not None else None
        except Exception:  # noqa: BLE001 - the call just completed
            return None

    def gone(self) -> bool:
        """The client cancelled this call or went away (False once the call is over: nobody is waiting)."""
        with self._lock:
            return self._context is not None and bool(self._context.is_cancelled())

    def header(self, name: str) -> str | None:
        values = self.headers.get(name)
        if not values:
            return None
        value = values[-1]
        return value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value)


class AuthMiddlewareFactory(fl.ServerMiddlewareFactory):
    """Checks every call's credential (``start_call``) and hands its handler a CallState."""

    def __init__(self, auth: FlightAuth, tokens: SessionTokens) -> None:
        self.auth = auth
        self.tokens = tokens

    def start_call(self, info: Any, headers: Mapping[str, list[Any]]) -> CallState:
        values = headers.get("authorization") or []
        header = values[-1].decode("latin-1") if values and isinstance(values[-1], bytes) else (values[-1] if values else "")
        scheme, _, credential = header.strip().partition(" ")
        scheme, credential = scheme.lower(), credential.strip()
        if scheme == "bearer" and self.tokens.looks_like(credential):
            found = self.tokens.verify(credential)
            if found is None:
                raise fl.FlightUnauthenticatedError(
                    "UNAUTHENTICATED: the session token is not one this server issued (it restarted?): connect again")
            sid, principal = found
            refresh = getattr(self.auth, "refresh", None)
            if refresh is not None:
                principal = refresh(principal)
                if principal is None:
                    raise fl.FlightUnauthenticatedError(
                        "UNAUTHENTICATED: the session's user no longer exists on this server: connect as another user")
            return CallState(principal, sid, None, headers, info.method)
        user: str | None = None
        secret: str | None = None
        if scheme == "bearer" and credential:
            secret = credential
        elif scheme == "basic" and credential:
            try:
                # Go's Flight client leaves the padding off (RawStdEncoding)
                padded = credential + "=" * (-len(credential) % 4)
                user, sep, secret = base64.b64decode(padded, validate=True).decode("utf-8").partition(":")
            except (binascii.Error, UnicodeDecodeError):
                sep = ""
            if not sep:
                raise fl.FlightUnauthenticatedError(
                    "UNAUTHENTICATED: the Basic credential must be base64 of 'user:password' (the password is the "
                    "server's token)")
        elif header:
            raise fl.FlightUnauthenticatedError(
                "UNAUTHENTICATED: the authorization header must be 'Bearer <token>' or 'Basic <user:token>'")
        principal = self.auth.authenticate(user, secret)
        if principal is None:
            raise fl.FlightUnauthenticatedError(
                "UNAUTHENTICATED: this server requires its token: as 'authorization: Bearer <token>', or basic auth "
                "with any user name and the token as password" if secret is None else
                "UNAUTHENTICATED: the token is not valid")
        _, issued = self.tokens.mint(principal)
        return CallState(principal, None, issued, headers, info.method)


class HandshakeAuth(fl.ServerAuthHandler):
    """The Flight handshake itself: credentials travel in its headers (checked by the middleware), so the
    handshake exchanges no messages; its response header carries the session token."""

    def authenticate(self, outgoing: Any, incoming: Any) -> None:
        return None

    def is_valid(self, token: Any) -> str:
        return ""
