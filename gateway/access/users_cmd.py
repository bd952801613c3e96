"""``iqgate users --file PATH …``: add and remove users, grant and revoke, set PG passwords and limits, list.

Every edit reads the file, changes it in memory, checks the result as the
server would read it, and replaces the file atomically under an edit lock: a
failed command changes nothing, and two at once do not lose either's change.
A running server picks the new file up by itself. A new token is printed
once, alone on stdout (so ``TOKEN=$(iqgate users … add NAME)`` works); only
a verifier of it is stored. Exit status: 0 done, 1 refused (the message says
why), 2 usage.
"""

from __future__ import annotations

import argparse
import getpass
import sys
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import TextIO

from .principal import LIMIT_NAMES, SYSTEM_GRANT, Limits, check_pattern
from .scram import ScramVerifier
from .tokens import new_token
from .users_file import (
    UserRecord,
    UsersData,
    UsersFileError,
    check_name,
    edit_lock,
    new_mock_seed,
    read_users,
    write_users,
)

__all__ = ["main"]

PROG = "iqgate users"
_MAX_PASSWORD = 1024


class Refused(Exception):
    """The command cannot be carried out as asked (exit 1); the message says why."""


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog=PROG, description="Edit an iqgate users file (a running server reloads it).")
    p.add_argument("--file", required=True, metavar="PATH", help="the users file (TOML; created by add or grant)")
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND")
    a = sub.add_parser("add", help="add a user; prints their token once")
    a.add_argument("name")
    a.add_argument("--role", action="append", default=[], metavar="ROLE", help="a role (repeat for several)")
    r = sub.add_parser("remove", help="remove a user")
    r.add_argument("name")
    t = sub.add_parser("token", help="issue a user a new token (the old one stops working); prints it once")
    t.add_argument("name")
    g = sub.add_parser("grant", help=f"let a role read the stores matching a glob ({SYSTEM_GRANT!r}: the system schema)")
    g.add_argument("role")
    g.add_argument("pattern")
    v = sub.add_parser("revoke", help="take a grant back from a role")
    v.add_argument("role")
    v.add_argument("pattern")
    w = sub.add_parser("password", help="set a user's PG password (prompted on a tty, else one line of stdin)")
    w.add_argument("name")
    w.add_argument("--clear", action="store_true", help="remove it: the token is the PG password again")
    m = sub.add_parser("limit", help="set per-user limits: KEY=N, or KEY=none to lift one "
                                     f"(keys: {', '.join(LIMIT_NAMES)})")
    who = m.add_mutually_exclusive_group(required=True)
    who.add_argument("--user", metavar="NAME", help="the user")
    who.add_argument("--default", action="store_true", help="the defaults of every user")
    m.add_argument("settings", nargs="+", metavar="KEY=VALUE")
    sub.add_parser("list", help="the users, their roles, and the roles' grants (never a token)")
    return p


def _user(data: UsersData, name: str) -> UserRecord:
    if name not in data.users:
        known = ", ".join(sorted(data.users)) or "none"
        raise Refused(f"no user {name!r} in the file (users: {known})")
    return data.users[name]


def _add(data: UsersData, args: argparse.Namespace, out: TextIO) -> UsersData:
    name = check_name(args.name)
    if name in data.users:
        raise Refused(f"user {name!r} exists; `{PROG} --file {args.file} token {name}` issues a new token")
    roles = tuple(dict.fromkeys(args.role))
    missing = [r for r in roles if r not in data.roles]
    if missing:
        known = ", ".join(sorted(data.roles)) or "none yet"
        raise Refused(f"no role {', '.join(map(repr, missing))} (roles: {known}); "
                      f"create one with `{PROG} --file {args.file} grant ROLE PATTERN`")
    token, token_id = new_token({u.token_id for u in data.users.values()})
    user = UserRecord(name, token_id, ScramVerifier.from_password(token), roles)
    args.new_token = token
    return data.with_users({**data.users, name: user})


def _remove(data: UsersData, args: argparse.Namespace, out: TextIO) -> UsersData:
    _user(data, args.name)
    return data.with_users({n: u for n, u in data.users.items() if n != args.name})


def _token(data: UsersData, args: argparse.Namespace, out: TextIO) -> UsersData:
    user = _user(data, args.name)
    token, token_id = new_token({u.token_id for u in data.users.values()})
    args.new_token = token
    return data.with_users({**data.users, user.name: replace(user, token_id=token_id,
                                                             token=ScramVerifier.from_password(token))})


def _grant(data: UsersData, args: argparse.Namespace, out: TextIO) -> UsersData:
    role = check_name(args.role, "role")
    pattern = check_pattern(args.pattern)
    grants = data.roles.get(role, ())
    if pattern in grants:
        print(f"{PROG}: role {role} already has {pattern!r}", file=sys.stderr)
        return data
    return data.with_roles({**data.roles, role: (*grants, pattern)})


def _revoke(data: UsersData, args: argparse.Namespace, out: TextIO) -> UsersData:
    if args.role not in data.roles:
        raise Refused(f"no role {args.role!r} (roles: {', '.join(sorted(data.roles)) or 'none'})")
    grants = data.roles[args.role]
    pattern = args.pattern.lower()
    if pattern not in grants:
        raise Refused(f"role {args.role} has no grant {args.pattern!r} (its grants: "
                      f"{', '.join(map(repr, grants)) or 'none'})")
    return data.with_roles({**data.roles, args.role: tuple(g for g in grants if g != pattern)})


def _read_password(name: str, stdin: TextIO) -> str:
    if stdin.isatty():
        first = getpass.getpass(f"PG password for {name}: ")
        if getpass.getpass("again: ") != first:
            raise Refused("the two passwords differ; nothing changed")
        password = first
    else:
        password = stdin.readline().rstrip("\r\n")
    if not password:
        raise Refused("the password is empty; nothing changed (--clear removes a password)")
    if len(password) > _MAX_PASSWORD:
        raise Refused(f"the password is longer than {_MAX_PASSWORD} characters; nothing changed")
    return password


def _password(data: UsersData, args: argparse.Namespace, out: TextIO) -> UsersData:
    user = _user(data, args.name)
    if args.clear:
        return data.with_users({**data.users, user.name: replace(user, password=None)})
    verifier = ScramVerifier.from_password(_read_password(user.name, args.stdin))
    return data.with_users({**data.users, user.name: replace(user, password=verifier)})


def _limit(data: UsersData, args: argparse.Namespace, out: TextIO) -> UsersData:
    current = data.limits if args.default else _user(data, args.user).limits
    values = current.as_dict()
    for item in args.settings:
        key, sep, value = item.partition("=")
        if not sep or key not in LIMIT_NAMES:
            raise Refused(f"a limit is KEY=N or KEY=none with KEY one of {', '.join(LIMIT_NAMES)}; got {item!r}")
        if value.strip().lower() == "none":
            values.pop(key, None)
        elif value.strip().isdigit() and int(value) > 0:
            values[key] = int(value)
        else:
            raise Refused(f"limit {key} must be a positive integer or none, got {value!r}")
    limits = Limits(**values)
    if args.default:
        return replace(data, limits=limits)
    user = data.users[args.user]
    return data.with_users({**data.users, user.name: replace(user, limits=limits)})


def _list(data: UsersData, out: TextIO) -> None:
    def fmt(limits: Limits) -> str:
        return " ".join(f"{k}={v}" for k, v in limits.as_dict().items()) or "-"

    print(f"default limits: {fmt(data.limits)}", file=out)
    print("roles:", file=out)
    for name in sorted(data.roles):
        print(f"  {name}: {', '.join(data.roles[name]) or '(no grants)'}", file=out)
    print("users:", file=out)
    for name in sorted(data.users):
        u = data.users[name]
        print(f"  {name}: roles {', '.join(u.roles) or '-'}; PG password {'set' if u.password else 'the token'}; "
              f"token id {u.token_id}; limits {fmt(u.limits)}", file=out)


_EDITS: dict[str, tuple[Callable[[UsersData, argparse.Namespace, TextIO], UsersData], bool]] = {
    # command: (edit, may create the file)
    "add": (_add, True), "remove": (_remove, False), "token": (_token, False), "grant": (_grant, True),
    "revoke": (_revoke, False), "password": (_password, False), "limit": (_limit, False),
}


def _run(args: argparse.Namespace, out: TextIO) -> int:
    path = Path(args.file)
    if args.command == "list":
        _list(read_users(path), out)
        return 0
    edit, creates = _EDITS[args.command]
    if not path.parent.is_dir():
        raise Refused(f"directory {path.parent} does not exist")
    with edit_lock(path):
        if path.exists() or not creates:
            data = read_users(path)
        else:
            data = UsersData(mock_seed=new_mock_seed())
        changed = edit(data, args, out)
        if not changed.mock_seed:
            changed = replace(changed, mock_seed=new_mock_seed())
        if changed != data:
            write_users(path, changed)
    token = getattr(args, "new_token", None)
    if token is not None:
        print(f"{PROG}: the token of {args.name} is printed once, below; only its hash is kept", file=sys.stderr)
        print(token, file=out, flush=True)
    return 0


def main(argv: list[str], *, stdin: TextIO | None = None, stdout: TextIO | None = None) -> int:
    """Run ``iqgate users`` with ``argv`` (the words after ``users``); the exit status, never an exception."""
    out = stdout or sys.stdout
    try:
        args = _parser().parse_args(argv)
    except SystemExit as exc:  # argparse: usage errors are 2, --help is 0
        return exc.code if isinstance(exc.code, int) else 2
    args.stdin = stdin or sys.stdin
    try:
        return _run(args, out)
    except (Refused, UsersFileError, ValueError) as exc:
        print(f"{PROG}: {exc}", file=sys.stderr)
    except KeyboardInterrupt:
        print(f"{PROG}: cancelled; nothing changed", file=sys.stderr)
    except OSError as exc:
        print(f"{PROG}: {exc.filename or args.file}: {exc.strerror or exc}", file=sys.stderr)
    return 1
