"""``Users``: who may connect, as whom, and what each may read; the one object every face asks.

Three modes, so the faces need no special cases:

- a users file (``Users.load``): users with tokens, optional PG passwords,
  roles with grants and limits; reloaded when the file changes (a ``stat``
  per call: cheap) or on demand (``reload``, what the CLI does on SIGHUP);
- one shared token (``Users.single_token``), the ``--token`` of before:
  whoever has it is a user with every grant;
- no authentication (``Users.anonymous``): everyone is a user with every grant.

Checking a token costs the same whether its user exists or not (an unknown
token id is checked against a dummy verifier), and a PG login for a name that
is no user runs the whole SCRAM exchange against a mock verifier whose salt
is stable per name, as PostgreSQL does, so neither timing nor the salt tells
an attacker which names exist. A token once verified is remembered (by a
keyed hash, never the token) until the file changes, so a busy HTTP client
pays one PBKDF2, not one per request.

A file that turns bad while serving (a hand edit with a typo) is refused and
the last good version stays in force; ``last_error`` says why.
"""

from __future__ import annotations

import hashlib
import hmac
import logging
import os
import secrets
import threading
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from .principal import SYSTEM_GRANT, Principal
from .scram import ScramVerifier, mock_verifier
from .tokens import token_id_of
from .users_file import UsersData, UsersFileError, read_users

__all__ = ["Users", "TokenNeedsHash", "ANONYMOUS", "SINGLE_TOKEN_USER"]

log = logging.getLogger("iqgate.access")

ANONYMOUS = "anonymous"  # the user of a server without authentication
SINGLE_TOKEN_USER = "iqgate"  # the user a --token's bearer is on HTTP
_CACHE_MAX = 10_000


@dataclass(frozen=True)
class _State:
    data: UsersData
    principals: Mapping[str, Principal]
    by_token_id: Mapping[str, str]
    signature: tuple[int, ...] | None
    seed: bytes
    verified: dict[bytes, str] = field(default_factory=dict)  # keyed hash of a good token -> user


def _signature(st: os.stat_result) -> tuple[int, ...]:
    return (st.st_ino, st.st_dev, st.st_size, st.st_mtime_ns, st.st_ctime_ns)


def _principals(data: UsersData) -> dict[str, Principal]:
    out = {}
    for name, user in data.users.items():
        grants = [g for r in user.roles for g in data.roles[r]]
        out[name] = Principal(name, tuple(dict.fromkeys(g for g in grants if g != SYSTEM_GRANT)),
                              SYSTEM_GRANT in grants, user.limits.over(data.limits), roles=user.roles)
    return out


class TokenNeedsHash(Exception):
    """``authenticate_token(may_hash=False)``: this token's check needs a password hash (not an error)."""


class Users:
    """Authentication and grants for one server; thread-safe (a reload swaps one immutable state)."""

    def __init__(self, *, path: str | os.PathLike[str] | None = None, token: str | None = None) -> None:
        if path is not None and token is not None:
            raise ValueError("give a users file or a single token, not both")
        if token is not None and not token:
            raise ValueError("the token must not be empty")
        self.path = Path(path) if path is not None else None
        self._token = token
        self._key = secrets.token_bytes(32)  # keys the cache of verified tokens; never leaves the process
        self._dummy = ScramVerifier.from_password(secrets.token_urlsafe(32))
        self._token_verifier = ScramVerifier.from_password(token) if token is not None else None
        self._lock = threading.Lock()
        self._failed_signature: tuple[int, ...] | None = None
        self.last_error: str | None = None
        self._state: _State | None = None
        # immutable: made once, not per request (the single token's and no authentication's one user)
        self._anonymous = Principal.all_grants(ANONYMOUS)
        self._token_user = Principal.all_grants(SINGLE_TOKEN_USER)
        if self.path is not None:
            self._state = self._read()

    # -- construction -------------------------------------------------------------------------------------
    @classmethod
    def load(cls, path: str | os.PathLike[str]) -> Users:
        """The users in ``path``; UsersFileError (naming the file and key) when it cannot be used."""
        return cls(path=path)

    @classmethod
    def single_token(cls, token: str) -> Users:
        return cls(token=token)

    @classmethod
    def anonymous(cls) -> Users:
        return cls()

    @property
    def mode(self) -> str:
        return "file" if self.path is not None else "token" if self._token is not None else "anonymous"

    @property
    def requires_auth(self) -> bool:
        return self.mode != "anonymous"

    # -- reloading ----------------------------------------------------------------------------------------
    def _read(self) -> _State:
        assert self.path is not None
        try:
            before = _signature(os.stat(self.path))
        except OSError:
            before = None
        data = read_users(self.path)
        seed = data.mock_seed.encode() if data.mock_seed else self._key
        return _State(data, _principals(data), {u.token_id: n for n, u in data.users.items()}, before, seed)

    def reload(self) -> None:
        """Read the file now (SIGHUP). On UsersFileError the version in force stays, and the error is raised."""
        if self.path is None:
            return
        with self._lock:
            try:
                self._state = self._read()
            except UsersFileError as exc:
                self.last_error = str(exc)
                raise
            self.last_error = None
            self._failed_signature = None
        log.info("iqgate: users file %s loaded: %d user(s), %d role(s)", self.path,
                 len(self._state.data.users), len(self._state.data.roles))

    def refresh(self) -> None:
        """Reload if the file changed since it was read (one stat); a bad new version is logged and skipped."""
        if self.path is None or self._state is None:
            return
        try:
            now = _signature(os.stat(self.path))
        except OSError as exc:
            if self._failed_signature != ():  # () marks "gone": say it once, not at every statement
                self._failed_signature = ()
                self.last_error = (f"users file {self.path} cannot be read ({exc.strerror or exc}); "
                                   "the last version read stays in force")
                log.error("iqgate: %s", self.last_error)
            return
        if now == self._state.signature or now == self._failed_signature:
            return
        try:
            self.reload()
        except UsersFileError as exc:
            self._failed_signature = now
            log.error("iqgate: users file not reloaded, the last good version stays in force: %s", exc)

    def _current(self) -> _State | None:
        self.refresh()
        return self._state

    # -- asking -------------------------------------------------------------------------------------------
    def authenticate_token(self, token: str | None, *, may_hash: bool = True) -> Principal | None:
        """The user a bearer token belongs to, or None; the same cost for an unknown and a wrong token.
        ``may_hash=False``: TokenNeedsHash instead of a password hash (~1.3 ms of PBKDF2) for a token not verified
        since the file was read (a serving loop hands such a request to a handler thread: serving/inline.py)."""
        if self.mode == "anonymous":
            return self._anonymous
        if not token:
            return None
        if self._token is not None:
            ok = hmac.compare_digest(token.encode("utf-8", "surrogatepass"), self._token.encode())
            return self._token_user if ok else None
        state = self._current()
        assert state is not None
        key = hmac.new(self._key, token.encode("utf-8", "surrogatepass"), hashlib.sha256).digest()
        name = state.verified.get(key)
        if name is not None:
            return state.principals.get(name)
        if not may_hash:
            raise TokenNeedsHash()
        token_id = token_id_of(token)
        name = state.by_token_id.get(token_id) if token_id is not None else None
        verifier = state.data.users[name].token if name is not None else self._dummy
        ok = verifier.verify_password(token) and name is not None
        if not ok:
            return None
        if len(state.verified) >= _CACHE_MAX:
            state.verified.clear()
        state.verified[key] = name
        return state.principals.get(name)

    def principal(self, name: str) -> Principal | None:
        """The user called ``name`` as of now, or None. Without a users file every name has every grant."""
        if self.path is None:
            return Principal.all_grants(name)
        state = self._current()
        assert state is not None
        return state.principals.get(name)

    def scram_verifier(self, name: str) -> ScramVerifier:
        """What the PG port runs SCRAM against for a login as ``name``: the user's password, else their token.

        A name that is no user gets a mock verifier (stable salt per name) and
        fails like a wrong password. Without a users file it is the single
        token's verifier whatever the name. Not for an unauthenticated server.
        """
        if self._token_verifier is not None:
            return self._token_verifier
        if self.path is None:
            raise ValueError("an unauthenticated server has no verifiers: check requires_auth first")
        state = self._current()
        assert state is not None
        user = state.data.users.get(name)
        if user is None:
            return mock_verifier(state.seed, name)
        return user.password if user.password is not None else user.token

    def check_password(self, name: str, password: str) -> Principal | None:
        """A cleartext PG password (``--pg-auth password``, over TLS) checked as SCRAM would: same cost if unknown."""
        if self.mode == "anonymous":
            return Principal.all_grants(name)
        ok = self.scram_verifier(name).verify_password(password)
        return self.principal(name) if ok else None

    def token_owner(self, token: str | None) -> str | None:
        """The user whose token id ``token`` carries (for a failed login's audit record), never checking it."""
        if self.path is None or not token:
            return None
        state = self._current()
        token_id = token_id_of(token)
        return state.by_token_id.get(token_id) if state is not None and token_id is not None else None

    def names(self) -> list[str]:
        """Every user's name (a users file), else []."""
        state = self._current()
        return sorted(state.data.users) if state is not None else []
