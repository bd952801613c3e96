"""The users file: its TOML schema, strict reading (every mistake named with where it is), writing, atomic replace.

The file is meant to be edited by ``iqgate users`` and read by a running
server, which reloads it when it changes; a hand edit works too. Layout::

    mock_seed = "…"                  # salts of the mock verifiers for names that are no user
    [limits]                          # defaults for every user (optional)
    concurrent_statements = 8
    [roles.finance]
    grants = ["revenue*", "system"]
    [users.alice]
    roles = ["finance"]
    token_id = "3f9c0a1b"             # the public part of alice's token, to find her without trying every hash
    token = "SCRAM-SHA-256$4096:…"    # a verifier of the token: the token itself is never stored
    password = "SCRAM-SHA-256$4096:…" # optional: the PG password (without one the token is the password)
    [users.alice.limits]
    max_rows = 10000

Reading is strict (an unknown key is refused, not ignored) because a typo in
an access file must not silently grant or drop anything. Writes go to a
temporary file in the same directory, are fsynced and renamed over the old
file, so a reader sees the old file or the new one, never half of one.
Comments in a hand-edited file are not kept by a rewrite.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import re
import secrets
import tempfile
import time
import tomllib
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from .principal import Limits, check_pattern
from .scram import ScramMalformed, ScramVerifier

__all__ = ["UsersData", "UserRecord", "UsersFileError", "read_users", "parse_users", "render_users",
           "write_users", "edit_lock", "check_name"]

_NAME = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.@-]{0,62}$")  # PostgreSQL's 63-byte identifiers, shell-safe
_TOKEN_ID = re.compile(r"^[0-9a-f]{8,32}$")
_BARE_KEY = re.compile(r"^[A-Za-z0-9_-]+$")


class UsersFileError(Exception):
    """The users file cannot be used: unreadable, not TOML, or not a users file (the message says where)."""


def check_name(name: str, what: str = "user") -> str:
    if not isinstance(name, str) or not _NAME.match(name):
        raise ValueError(f"a {what} name is 1-63 characters: letters, digits, _ . @ - (not first: . @ -); "
                         f"got {name!r}")
    return name


@dataclass(frozen=True, slots=True)
class UserRecord:
    name: str
    token_id: str
    token: ScramVerifier
    roles: tuple[str, ...] = ()
    password: ScramVerifier | None = None
    limits: Limits = field(default_factory=Limits)


@dataclass(frozen=True, slots=True)
class UsersData:
    """One version of the file, validated: every user's roles exist, token ids are unique."""

    users: Mapping[str, UserRecord] = field(default_factory=dict)
    roles: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    limits: Limits = field(default_factory=Limits)
    mock_seed: str = ""

    def with_users(self, users: Mapping[str, UserRecord]) -> UsersData:
        return replace(self, users=dict(users))

    def with_roles(self, roles: Mapping[str, tuple[str, ...]]) -> UsersData:
        return replace(self, roles=dict(roles))


def _where(path: object, key: str) -> str:
    return f"{path}: {key}"


def _table(raw: Any, where: str) -> dict[str, Any]:
    if not isinstance(raw, dict):
        raise UsersFileError(f"{where} must be a table, got {type(raw).__name__}")
    return raw


def _strings(raw: Any, where: str) -> list[str]:
    if not isinstance(raw, list) or not all(isinstance(x, str) for x in raw):
        raise UsersFileError(f"{where} must be a list of strings, got {raw!r}")
    return raw


def _verifier(raw: Any, where: str) -> ScramVerifier:
    try:
        return ScramVerifier.parse(raw)
    except ScramMalformed as exc:
        raise UsersFileError(f"{where}: {exc}") from None


def _limits(raw: Any, where: str) -> Limits:
    try:
        return Limits.from_mapping(_table(raw, where), where)
    except ValueError as exc:
        raise UsersFileError(str(exc)) from None


def parse_users(text: str, path: object = "<users file>") -> UsersData:
    """``text`` as a users file, or UsersFileError naming the file, the key and what is wrong with it."""
    try:
        raw = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise UsersFileError(f"{path} is not valid TOML: {exc}") from None
    unknown = sorted(set(raw) - {"mock_seed", "limits", "roles", "users"})
    if unknown:
        raise UsersFileError(f"{path}: unknown top-level key(s) {', '.join(unknown)}; "
                             "a users file has mock_seed, [limits], [roles.NAME] and [users.NAME]")
    seed = raw.get("mock_seed", "")
    if not isinstance(seed, str):
        raise UsersFileError(f"{path}: mock_seed must be a string")
    limits = _limits(raw.get("limits", {}), _where(path, "[limits]"))
    roles: dict[str, tuple[str, ...]] = {}
    for name, body in _table(raw.get("roles", {}), _where(path, "[roles]")).items():
        where = _where(path, f"[roles.{name}]")
        try:
            check_name(name, "role")
        except ValueError as exc:
            raise UsersFileError(f"{where}: {exc}") from None
        body = _table(body, where)
        if set(body) - {"grants"}:
            raise UsersFileError(f"{where}: unknown key(s) {', '.join(sorted(set(body) - {'grants'}))}; "
                                 "a role has only grants = [...]")
        grants = []
        for g in _strings(body.get("grants", []), f"{where} grants"):
            try:
                grants.append(check_pattern(g))
            except ValueError as exc:
                raise UsersFileError(f"{where}: {exc}") from None
        roles[name] = tuple(dict.fromkeys(grants))
    users: dict[str, UserRecord] = {}
    seen_ids: dict[str, str] = {}
    keys = {"roles", "token_id", "token", "password", "limits"}
    for name, body in _table(raw.get("users", {}), _where(path, "[users]")).items():
        where = _where(path, f"[users.{name}]")
        try:
            check_name(name)
        except ValueError as exc:
            raise UsersFileError(f"{where}: {exc}") from None
        body = _table(body, where)
        if set(body) - keys:
            raise UsersFileError(f"{where}: unknown key(s) {', '.join(sorted(set(body) - keys))}; "
                                 f"a user has {', '.join(sorted(keys))}")
        user_roles = tuple(_strings(body.get("roles", []), f"{where} roles"))
        missing = [r for r in user_roles if r not in roles]
        if missing:
            raise UsersFileError(f"{where}: role(s) {', '.join(missing)} are not defined under [roles]")
        token_id = body.get("token_id")
        if not isinstance(token_id, str) or not _TOKEN_ID.match(token_id):
            raise UsersFileError(f"{where}: token_id must be 8-32 lower-case hex digits, got {token_id!r}")
        if token_id in seen_ids:
            raise UsersFileError(f"{where}: token_id {token_id} is also {seen_ids[token_id]}'s")
        seen_ids[token_id] = name
        if "token" not in body:
            raise UsersFileError(f"{where}: no token (a SCRAM-SHA-256 verifier); add users with `iqgate users add`")
        password = _verifier(body["password"], f"{where} password") if "password" in body else None
        users[name] = UserRecord(name, token_id, _verifier(body["token"], f"{where} token"),
                                 tuple(dict.fromkeys(user_roles)), password,
                                 _limits(body.get("limits", {}), f"{where} limits"))
    return UsersData(users, roles, limits, seed)


def read_users(path: str | os.PathLike[str]) -> UsersData:
    try:
        text = Path(path).read_text(encoding="utf-8")
    except FileNotFoundError:
        raise UsersFileError(f"users file {path} does not exist; create it with "
                             f"`iqgate users --file {path} add NAME`") from None
    except (OSError, UnicodeDecodeError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        raise UsersFileError(f"cannot read users file {path}: {reason}") from None
    return parse_users(text, path)


# -- writing -----------------------------------------------------------------------------------------------
def _string(value: str) -> str:
    """A TOML basic string: backslash escapes for what TOML forbids raw (quote, backslash, controls, DEL)."""
    out = ['"']
    for c in value:
        if c in '"\\':
            out.append("\\" + c)
        elif c == "\n":
            out.append("\\n")
        elif c == "\t":
            out.append("\\t")
        elif ord(c) < 0x20 or ord(c) == 0x7F:
            out.append(f"\\u{ord(c):04x}")
        else:
            out.append(c)
    out.append('"')
    return "".join(out)


def _key(name: str) -> str:
    return name if _BARE_KEY.match(name) else _string(name)


def _array(values: tuple[str, ...] | list[str]) -> str:
    return "[" + ", ".join(_string(v) for v in values) + "]"


def render_users(data: UsersData) -> str:
    """``data`` as the file's text; ``parse_users(render_users(d))`` gives ``d`` back."""
    lines = ["# iqgate users file: edit it with `iqgate users --file PATH ...` (a running server reloads it).",
             "# Tokens and passwords are stored as SCRAM-SHA-256 verifiers only.",
             f"mock_seed = {_string(data.mock_seed)}", ""]
    if data.limits.as_dict():
        lines.append("[limits]")
        lines += [f"{k} = {v}" for k, v in data.limits.as_dict().items()]
        lines.append("")
    for name in sorted(data.roles):
        lines += [f"[roles.{_key(name)}]", f"grants = {_array(data.roles[name])}", ""]
    for name in sorted(data.users):
        u = data.users[name]
        lines += [f"[users.{_key(name)}]", f"roles = {_array(u.roles)}", f"token_id = {_string(u.token_id)}",
                  f"token = {_string(str(u.token))}"]
        if u.password is not None:
            lines.append(f"password = {_string(str(u.password))}")
        if u.limits.as_dict():
            lines.append(f"limits = {{ {', '.join(f'{k} = {v}' for k, v in u.limits.as_dict().items())} }}")
        lines.append("")
    return "\n".join(lines)


def new_mock_seed() -> str:
    return secrets.token_hex(16)


def write_users(path: str | os.PathLike[str], data: UsersData) -> None:
    """Replace the file with ``data`` atomically (temp file, fsync, rename, fsync the directory); mode 0600."""
    path = Path(path)
    text = render_users(data)
    parse_users(text, path)  # never write a file the server would refuse
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    dir_fd = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)


@contextlib.contextmanager
def edit_lock(path: str | os.PathLike[str], timeout_s: float = 10.0) -> Iterator[None]:
    """Serialize read-modify-write edits of ``path`` (two ``iqgate users`` at once must not lose one's change).

    The lock is on a sidecar ``.<name>.lock`` (the file itself is replaced by
    every write, so a lock on it would not outlive the first edit).
    """
    path = Path(path)
    lock = path.parent / f".{path.name}.lock"
    fd = os.open(lock, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() >= deadline:
                    raise UsersFileError(f"{path} is being edited by another `iqgate users` "
                                         f"(waited {timeout_s:g} s for {lock})") from None
                time.sleep(0.05)
        yield
    finally:
        os.close(fd)
