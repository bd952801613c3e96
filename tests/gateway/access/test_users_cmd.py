"""``iqgate users``: every subcommand, every refusal (exit 1, file unchanged), usage (exit 2), never a traceback."""

from __future__ import annotations

import io
import os
import pty
import select
import subprocess
import sys
import time
from pathlib import Path

import pytest

from gateway.access import Users
from gateway.access.users_cmd import main
from gateway.access.users_file import read_users

ROOT = Path(__file__).resolve().parents[3]
RUN = [sys.executable, "-c", "import sys; from gateway.access.users_cmd import main; sys.exit(main(sys.argv[1:]))"]


def run(path: Path, *argv: str, stdin: str = "") -> tuple[int, str]:
    out = io.StringIO()
    return main(["--file", str(path), *argv], stdout=out, stdin=io.StringIO(stdin)), out.getvalue()


@pytest.fixture()
def path(tmp_path: Path) -> Path:
    p = tmp_path / "users.toml"
    assert run(p, "grant", "finance", "revenue*")[0] == 0
    assert run(p, "grant", "support", "system")[0] == 0
    assert run(p, "add", "alice", "--role", "finance")[0] == 0
    return p


def test_add_prints_a_token_once_and_stores_only_a_verifier(path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rc, out = run(path, "add", "bob", "--role", "finance", "--role", "support")
    token = out.strip()
    assert rc == 0 and token.startswith("iqg_") and out.count("\n") == 1
    assert "printed once" in capsys.readouterr().err
    text = path.read_text()
    secret = token.split("_", 2)[2]  # base64url: it may itself begin with or hold "_"
    assert len(secret) >= 43 and token not in text and secret not in text
    bob = Users.load(path).authenticate_token(token)
    assert bob is not None and bob.roles == ("finance", "support") and bob.can_read_system()


def test_add_without_roles_reads_nothing(path: Path) -> None:
    rc, token = run(path, "add", "nobody")
    p = Users.load(path).authenticate_token(token.strip())
    assert rc == 0 and p is not None and not p.can_read("revenue") and not p.can_read_system()


def test_remove(path: Path) -> None:
    assert run(path, "remove", "alice")[0] == 0
    assert Users.load(path).principal("alice") is None


def test_token_reissues_and_the_old_one_stops_working(path: Path) -> None:
    rc, out = run(path, "add", "bob")
    old = out.strip()
    rc, out = run(path, "token", "bob")
    new = out.strip()
    users = Users.load(path)
    assert rc == 0 and new != old and users.authenticate_token(new) is not None
    assert users.authenticate_token(old) is None


def test_grant_and_revoke(path: Path) -> None:
    assert run(path, "grant", "finance", "Orders_*")[0] == 0
    assert read_users(path).roles["finance"] == ("revenue*", "orders_*")
    assert run(path, "revoke", "finance", "ORDERS_*")[0] == 0
    assert run(path, "revoke", "finance", "revenue*")[0] == 0
    assert read_users(path).roles["finance"] == ()  # the role stays (alice still has it), with no grants
    assert not Users.load(path).principal("alice").can_read("revenue")  # type: ignore[union-attr]


def test_granting_what_is_granted_changes_nothing(path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    before = path.stat().st_mtime_ns, path.read_bytes()
    assert run(path, "grant", "finance", "revenue*")[0] == 0
    assert "already has" in capsys.readouterr().err
    assert (path.stat().st_mtime_ns, path.read_bytes()) == before


def test_password_from_stdin_and_clear(path: Path) -> None:
    assert run(path, "password", "alice", stdin="hunter2\nignored\n")[0] == 0
    users = Users.load(path)
    assert users.scram_verifier("alice").verify_password("hunter2")
    assert "hunter2" not in path.read_text()
    assert run(path, "password", "alice", "--clear")[0] == 0
    assert read_users(path).users["alice"].password is None


def test_limit(path: Path) -> None:
    assert run(path, "limit", "--user", "alice", "max_rows=10", "concurrent_statements=2")[0] == 0
    assert read_users(path).users["alice"].limits.as_dict() == {"concurrent_statements": 2, "max_rows": 10}
    assert run(path, "limit", "--user", "alice", "max_rows=none")[0] == 0
    assert read_users(path).users["alice"].limits.as_dict() == {"concurrent_statements": 2}
    assert run(path, "limit", "--default", "statement_timeout_ms=5000")[0] == 0
    assert read_users(path).limits.as_dict() == {"statement_timeout_ms": 5000}


def test_list_shows_roles_users_and_no_secret(path: Path) -> None:
    run(path, "password", "alice", stdin="hunter2\n")
    rc, out = run(path, "list")
    assert rc == 0
    assert "finance: revenue*" in out and "support: system" in out
    assert "alice: roles finance; PG password set" in out
    assert "SCRAM" not in out and "hunter2" not in out


@pytest.mark.parametrize("argv, says", [
    (["add", "alice"], "user 'alice' exists"),
    (["add", "bad name"], "a user name is"),
    (["add", "bob", "--role", "nope"], "no role 'nope' (roles: finance, support)"),
    (["remove", "bob"], "no user 'bob' in the file (users: alice)"),
    (["token", "bob"], "no user 'bob'"),
    (["grant", "finance", "re venue"], "store-name glob"),
    (["grant", "-x", "revenue"], None),  # argparse: an option it does not know (usage, exit 2)
    (["grant", "bad role", "revenue"], "a role name is"),
    (["revoke", "nope", "revenue*"], "no role 'nope'"),
    (["revoke", "finance", "last_order"], "role finance has no grant 'last_order' (its grants: 'revenue*')"),
    (["password", "bob"], "no user 'bob'"),
    (["password", "alice"], "the password is empty"),
    (["limit", "--user", "alice", "max_rowz=1"], "a limit is KEY=N or KEY=none"),
    (["limit", "--user", "alice", "max_rows"], "a limit is KEY=N or KEY=none"),
    (["limit", "--user", "alice", "max_rows=0"], "must be a positive integer or none"),
    (["limit", "--user", "alice", "max_rows=-3"], "must be a positive integer or none"),
    (["limit", "--user", "bob", "max_rows=3"], "no user 'bob'"),
])
def test_refusals_exit_1_and_change_nothing(path: Path, argv: list[str], says: str | None,
                                            capsys: pytest.CaptureFixture[str]) -> None:
    before = path.read_bytes()
    rc, out = run(path, *argv)
    err = capsys.readouterr().err
    assert path.read_bytes() == before and out == ""
    if says is None:
        assert rc == 2
        return
    assert rc == 1 and err.startswith("iqgate users: ") and says in err, err


def test_a_long_password_is_refused(path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert run(path, "password", "alice", stdin="x" * 2000 + "\n")[0] == 1
    assert "longer than 1024" in capsys.readouterr().err


@pytest.mark.parametrize("argv", [[], ["list"], ["--file", "f"], ["--file", "f", "frobnicate"],
                                  ["--file", "f", "add"], ["--file", "f", "limit", "max_rows=1"],
                                  ["--file", "f", "limit", "--user", "a", "--default", "max_rows=1"]])
def test_usage_errors_exit_2(argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    assert main(argv) == 2
    assert "usage: iqgate users" in capsys.readouterr().err


def test_help_exits_0(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--help"]) == 0
    assert "grant" in capsys.readouterr().out


@pytest.mark.parametrize("argv", [["list"], ["remove", "alice"], ["password", "alice"], ["revoke", "r", "x"]])
def test_a_missing_file(tmp_path: Path, argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    """Only add and grant create the file; the rest say it is not there (and how to make one)."""
    assert run(tmp_path / "none.toml", *argv)[0] == 1
    assert "does not exist; create it with `iqgate users --file" in capsys.readouterr().err
    assert not (tmp_path / "none.toml").exists()


@pytest.mark.parametrize("argv", [["list"], ["add", "alice"], ["grant", "r", "x"]])
def test_a_missing_directory(tmp_path: Path, argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    assert run(tmp_path / "no" / "dir.toml", *argv)[0] == 1
    assert "does not exist" in capsys.readouterr().err


def test_a_broken_file_is_named_and_left_alone(path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path.write_text(path.read_text() + "\n[users.zed\n")
    before = path.read_bytes()
    for argv in (["list"], ["add", "bob"], ["grant", "x", "y"]):
        assert run(path, *argv)[0] == 1
        err = capsys.readouterr().err
        assert "is not valid TOML" in err and str(path) in err
    assert path.read_bytes() == before


def test_a_directory_given_as_the_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert run(tmp_path, "list")[0] == 1
    assert "cannot read users file" in capsys.readouterr().err


def test_an_unwritable_place_is_an_error_not_a_traceback(capsys: pytest.CaptureFixture[str]) -> None:
    assert run(Path("/proc/self/users.toml"), "grant", "r", "x")[0] == 1
    assert capsys.readouterr().err.startswith("iqgate users: ")


# -- as a process: what an operator sees -------------------------------------------------------------------
def _proc(*argv: str, stdin: str = "") -> subprocess.CompletedProcess[str]:
    return subprocess.run([*RUN, *argv], input=stdin, capture_output=True, text=True, timeout=60, cwd=ROOT)


def test_as_a_process_token_alone_on_stdout_and_no_traceback_anywhere(tmp_path: Path) -> None:
    f = str(tmp_path / "u.toml")
    assert _proc("--file", f, "grant", "r", "x").returncode == 0
    added = _proc("--file", f, "add", "alice", "--role", "r")
    assert added.returncode == 0 and added.stdout.count("\n") == 1 and added.stdout.startswith("iqg_")
    for argv, rc in ((["--file", f, "add", "alice"], 1), (["--file", f], 2)):
        done = _proc(*argv)
        assert done.returncode == rc and "Traceback" not in done.stderr and done.stderr.strip(), (argv, done.stderr)


def _pty_session(argv: list[str], replies: list[bytes], timeout_s: float = 60) -> tuple[int, str]:
    """Run the command on a terminal of its own (getpass reads /dev/tty), answering each prompt in turn.

    Bounded: a child still running at the deadline is killed and the test fails with what the terminal showed.
    """
    pid, fd = pty.fork()
    if pid == 0:  # the child: its controlling terminal is the pty; it must never return into pytest
        try:
            os.chdir(ROOT)
            os.execv(sys.executable, [*RUN, *argv])
        finally:
            os._exit(127)
    seen, answered = b"", 0
    replies = list(replies)
    deadline = time.monotonic() + timeout_s
    try:
        while time.monotonic() < deadline:
            done, status = os.waitpid(pid, os.WNOHANG)
            if done:
                return os.waitstatus_to_exitcode(status), seen.decode(errors="replace")
            ready, _, _ = select.select([fd], [], [], 0.1)
            if ready:
                try:
                    chunk = os.read(fd, 4096)
                except OSError:  # the child closed the terminal: it is exiting
                    chunk = b""
                seen += chunk
            prompts = seen.count(b"password for") + seen.count(b"again:")
            if replies and prompts > answered and seen.rstrip().endswith(b":"):
                os.write(fd, replies.pop(0))
                answered += 1
        os.kill(pid, 9)
        os.waitpid(pid, 0)
        raise AssertionError(f"the command did not finish in {timeout_s} s; the terminal showed {seen!r}")
    finally:
        os.close(fd)


def test_password_prompts_twice_on_a_terminal(path: Path) -> None:
    rc, screen = _pty_session(["--file", str(path), "password", "alice"], [b"s3cr\xc3\xa9t\n", b"s3cr\xc3\xa9t\n"])
    assert rc == 0, screen
    assert "PG password for alice:" in screen and "again:" in screen and "s3cr" not in screen  # no echo
    assert Users.load(path).scram_verifier("alice").verify_password("s3cr\u00e9t")


def test_password_prompts_that_differ_change_nothing(path: Path) -> None:
    before = path.read_bytes()
    rc, screen = _pty_session(["--file", str(path), "password", "alice"], [b"one\n", b"two\n"])
    assert rc == 1 and "the two passwords differ" in screen and "Traceback" not in screen
    assert path.read_bytes() == before


def test_ctrl_c_at_the_prompt_changes_nothing(path: Path) -> None:
    before = path.read_bytes()
    rc, screen = _pty_session(["--file", str(path), "password", "alice"], [b"\x03"])
    assert rc == 1 and "cancelled; nothing changed" in screen and "Traceback" not in screen
    assert path.read_bytes() == before
