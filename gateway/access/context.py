"""What every face of one serving process asks about access: who this is, may they run one more, write it down.

``AccessContext`` bundles a process's ``Users``, its ``AuditLog`` (or none)
and its ``Admission`` (or none), so the faces share one of each and need
no knowledge of how they are configured. A face:

1. authenticates the caller (``bearer`` for an HTTP ``Authorization``
   header; the PG and Flight faces run their own exchanges against the same
   ``users``) — a refusal is audited as a failed login;
2. brackets each statement with ``begin(...)`` → ``AuditedStatement``: the
   admission ticket is taken there (a user over their share is refused at
   once, and that refusal is audited too) and released by ``end(...)``,
   which writes the audit line: when the answer has been sent, so rows,
   bytes and the status are what the client got.

Without a users file (``of_token``) there is one user with every grant and
no admission: the statement path is what it was before users existed.
"""

from __future__ import annotations

import threading
import time
from typing import Any

from iqgate_client.errors import TooManyStatements, Unauthorized

from .admission import Admission, Ticket
from .audit import AuditLog
from .principal import Principal
from .users import SINGLE_TOKEN_USER, Users

__all__ = ["AccessContext", "AuditedStatement", "error_code"]


def error_code(exc: BaseException | None) -> str | None:
    """The wire code an error reaches the client as (what the audit line records)."""
    if exc is None:
        return None
    code = getattr(exc, "code", None)
    return code if isinstance(code, str) else "INTERNAL"


class AuditedStatement:
    """One admitted statement: ``end`` once its answer was sent (idempotent; thread-safe)."""

    __slots__ = ("_access", "principal", "face", "client", "sql", "params", "_ticket", "_t0", "_ended", "_lock")

    def __init__(self, access: AccessContext, principal: Principal, face: str, client: str | None, sql: str,
                 params: Any, ticket: Ticket | None) -> None:
        self._access = access
        self.principal = principal
        self.face = face
        self.client = client
        self.sql = sql
        self.params = params
        self._ticket = ticket
        self._t0 = time.perf_counter()
        self._ended = False
        self._lock = threading.Lock()

    def withdraw(self) -> None:
        """Release the slot and write no line: the statement was not run here and will be asked again (a
        serving loop handing it to a handler thread, serving/inline.py)."""
        self._release()

    def _release(self) -> bool:
        """End it and free its slot; False when it had ended already."""
        with self._lock:
            if self._ended:
                return False
            self._ended = True
        if self._ticket is not None:
            self._ticket.release()
        return True

    def end(self, *, result: Any = None, error: BaseException | None = None, code: str | None = None,
            rows: int | None = None, response_bytes: int | None = None, stores: Any = None) -> None:
        """Release the slot and write the line: ``result`` (an engine Result) gives the stores read, the Position
        and the rows handed out; ``error`` (or ``code``) makes the status "error"."""
        if not self._release():
            return
        audit = self._access.audit
        if audit is None:
            return
        position = None
        if result is not None:
            if stores is None:
                stores = {p.store for p in result.partitions}
            position = result.position
            if rows is None:
                rows = result.rows_out
        code = code or error_code(error)
        audit.statement(user=self.principal.name, face=self.face, client=self.client, sql=self.sql,
                        stores=stores or (), status="error" if code else "ok", error_code=code, rows=rows,
                        response_bytes=response_bytes, duration_ms=(time.perf_counter() - self._t0) * 1000,
                        position=position, params=self.params)


class AccessContext:
    """A serving process's users, audit log and admission: one object shared by all its faces."""

    def __init__(self, users: Users, *, audit: AuditLog | None = None, admission: Admission | None = None) -> None:
        self.users = users
        self.audit = audit
        self.admission = admission
        # without a users file every caller has every grant: one Principal per name, made once (the hot path)
        self._everyone: dict[str | None, Principal] = {}

    @classmethod
    def of_token(cls, token: str | None) -> AccessContext:
        """The access of a server without a users file: one shared token (every grant), or none at all."""
        return cls(Users.single_token(token) if token else Users.anonymous())

    @property
    def requires_auth(self) -> bool:
        return self.users.requires_auth

    @property
    def plain(self) -> bool:
        """Nothing to do per statement: no audit, no admission (the faces then skip ``begin`` entirely)."""
        return self.audit is None and self.admission is None

    def bearer(self, header: str | None, *, face: str, client: str | None, may_hash: bool = True) -> Principal:
        """The user an ``Authorization: Bearer <token>`` header names, or Unauthorized (audited as a failed login);
        ``may_hash=False``: TokenNeedsHash, not audited, where that needs a password hash (users.py)."""
        users = self.users
        if not users.requires_auth:
            return self._unrestricted(None)
        if not header:
            self.login_failed(None, face, client, "no Authorization header")
            raise Unauthorized("this server requires an Authorization: Bearer <token> header")
        scheme, _, given = header.partition(" ")
        given = given.strip()
        if scheme.lower() != "bearer" or not given:
            self.login_failed(None, face, client, "the Authorization header is not 'Bearer <token>'")
            raise Unauthorized("the Authorization header must be 'Bearer <token>'")
        principal = users.authenticate_token(given, may_hash=may_hash)
        if principal is None:
            self.login_failed(users.token_owner(given), face, client, "the bearer token is not valid")
            raise Unauthorized("the bearer token is not valid")
        return principal if users.mode == "file" else self._unrestricted(None)

    def principal(self, name: str) -> Principal | None:
        """The user called ``name`` as of now (a users file is re-read when it changed), or None."""
        if self.users.mode == "file":
            return self.users.principal(name)
        return self._unrestricted(name)

    def _unrestricted(self, name: str | None) -> Principal:
        found = self._everyone.get(name)
        if found is None:
            found = self.users.authenticate_token(None) if name is None and not self.users.requires_auth else (
                self.users.principal(name or SINGLE_TOKEN_USER))
            assert found is not None
            if len(self._everyone) > 1024:
                self._everyone.clear()
            self._everyone[name] = found
        return found

    def login_failed(self, user: str | None, face: str, client: str | None, reason: str) -> None:
        if self.audit is not None:
            self.audit.login_failed(user=user, face=face, client=client, reason=reason)

    def begin(self, principal: Principal, *, face: str, client: str | None, sql: Any,
              params: Any = None, may_wait: bool = True) -> AuditedStatement:
        """Admit one statement of ``principal`` (TooManyStatements, audited, when over their share; with
        ``may_wait=False`` WouldWait, not audited, where admission would wait for one of theirs to end)."""
        text = sql if isinstance(sql, str) else repr(sql)
        ticket = None
        if self.admission is not None:
            try:
                ticket = self.admission.admit(principal.name, principal.limits.concurrent_statements,
                                              may_wait=may_wait)
            except TooManyStatements as exc:
                AuditedStatement(self, principal, face, client, text, params, None).end(error=exc)
                raise
        return AuditedStatement(self, principal, face, client, text, params, ticket)

    def close(self) -> None:
        if self.audit is not None:
            self.audit.close()
