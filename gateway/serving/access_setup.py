"""A server's access set up from its typed options: one ``AccessContext`` per serving process, and its checks.

Each serving process has its own ``Users`` (it re-reads the users file when
the file changes, and on SIGHUP, which the supervisor forwards), its own
audit log file (one writer per file: ``PATH.<index>`` when there are
several processes) and its own ``Admission`` over its HTTP threads, shared
by all its faces. The supervisor checks all of it once before any serving
process starts (``check_access``), so a bad users file or an audit path that
cannot be written is one clear error at start, not processes dying in a loop.
"""

from __future__ import annotations

import signal
import sys
from typing import Any

from ..access import AccessContext, Admission, AuditLog, Users, UsersFileError
from .options import ServeOptions

__all__ = ["access_context", "check_access", "reload_on_sighup", "AccessSetupError"]


class AccessSetupError(ValueError):
    """The users file or the audit log cannot be used as given (the message says which and why)."""


def _users(opts: ServeOptions) -> Users:
    if opts.access.users_file is not None:
        return Users.load(opts.access.users_file)
    token = opts.config.auth_token
    return Users.single_token(token) if token else Users.anonymous()


def access_context(opts: ServeOptions, index: int, count: int) -> AccessContext:
    """Serving process ``index`` of ``count``'s access (UsersFileError / ValueError when it cannot be used)."""
    users = _users(opts)
    target = opts.access.audit_target(index, count)
    audit = AuditLog(target, mask=opts.access.audit_mask) if target is not None else None
    # fair share matters between users: one user (a token, or none) keeps the engine's own limits only
    admission = Admission(opts.http.threads) if users.mode == "file" else None
    return AccessContext(users, audit=audit, admission=admission)


def check_access(opts: ServeOptions, count: int) -> None:
    """What the serving processes will use, tried once now: AccessSetupError naming what is wrong."""
    try:
        users = _users(opts)
    except UsersFileError as exc:
        raise AccessSetupError(str(exc)) from None
    for i in range(count):
        target = opts.access.audit_target(i, count)
        if target is None or target == "-":
            continue
        try:
            AuditLog(target).close()
        except ValueError as exc:
            raise AccessSetupError(f"--audit-log: {exc}") from None
    if users.mode == "file":
        print(f"iqgate: users file {opts.access.users_file}: {len(users.names())} user(s); it is re-read when it "
              "changes (or on SIGHUP)", file=sys.stderr, flush=True)


def reload_on_sighup(access: AccessContext, say: bool) -> None:
    """SIGHUP (forwarded by the supervisor) re-reads the users file now; a bad file is one line (``say``: this
    process is the one that says it), and the version in force stays."""
    users = access.users

    def reload(*_: Any) -> None:
        try:
            users.reload()
        except UsersFileError as exc:
            if say:
                text = " ".join(str(exc).split())
                print(f"iqgate: users file not reloaded (the last good version stays in force): {text}",
                      file=sys.stderr, flush=True)
            return
        if say and users.mode == "file":
            print(f"iqgate: users file {users.path} reloaded: {len(users.names())} user(s)", file=sys.stderr,
                  flush=True)

    signal.signal(signal.SIGHUP, reload)
