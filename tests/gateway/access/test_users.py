"""The users file (strict reading, round trips, atomic writes) and ``Users``: tokens, principals, reloads, modes."""

from __future__ import annotations

import hashlib
import io
import os
import threading
from pathlib import Path

import pytest

from gateway.access import ANONYMOUS, SINGLE_TOKEN_USER, Limits, ScramVerifier, Users, UsersFileError
from gateway.access.tokens import token_id_of
from gateway.access.users import TokenNeedsHash
from gateway.access.users_cmd import main as users_main
from gateway.access.users_file import UserRecord, UsersData, edit_lock, parse_users, render_users, write_users


def _cli(path: Path, *argv: str, stdin: str | None = None) -> tuple[int, str]:
    out = io.StringIO()
    rc = users_main(["--file", str(path), *argv], stdout=out, stdin=io.StringIO(stdin) if stdin is not None else None)
    return rc, out.getvalue().strip()


@pytest.fixture()
def team(tmp_path: Path) -> tuple[Path, dict[str, str]]:
    """finance reads revenue*, support reads last_order and the system schema; alice, bob, carol."""
    path = tmp_path / "users.toml"
    for role, pattern in (("finance", "revenue*"), ("support", "last_order"), ("support", "system")):
        assert _cli(path, "grant", role, pattern)[0] == 0
    tokens = {}
    for name, roles in (("alice", ["finance"]), ("bob", ["support"]), ("carol", ["finance", "support"])):
        rc, tokens[name] = _cli(path, "add", name, *[x for r in roles for x in ("--role", r)])
        assert rc == 0
    return path, tokens


# -- the file --------------------------------------------------------------------------------------------------
def _data() -> UsersData:
    v = ScramVerifier.from_password("t")
    users = {
        "alice": UserRecord("alice", "0123abcd", v, ("finance",), ScramVerifier.from_password("pw"),
                            Limits(max_rows=5)),
        "svc.report@x": UserRecord("svc.report@x", "89abcdef", v, ()),
    }
    return UsersData(users, {"finance": ("revenue*", "system"), "empty": ()}, Limits(concurrent_statements=2), "s")


def test_the_file_round_trips() -> None:
    data = _data()
    text = render_users(data)
    assert parse_users(text) == data
    assert render_users(parse_users(text)) == text
    assert '[users."svc.report@x"]' in text


def test_write_is_atomic_and_private(tmp_path: Path) -> None:
    path, data = tmp_path / "users.toml", _data()
    write_users(path, data)
    assert parse_users(path.read_text()) == data
    assert (path.stat().st_mode & 0o777) == 0o600
    assert sorted(p.name for p in tmp_path.iterdir()) == ["users.toml"]  # no temporary file left behind


def test_an_unwritable_directory_leaves_the_old_file(tmp_path: Path) -> None:
    path = tmp_path / "users.toml"
    write_users(path, _data())
    before = path.read_bytes()
    with pytest.raises(FileNotFoundError):
        write_users(tmp_path / "missing" / "users.toml", _data())
    assert path.read_bytes() == before


BASE = ('mock_seed = "s"\n[roles.r]\ngrants = ["x"]\n[users.u]\nroles = ["r"]\ntoken_id = "0123abcd"\n'
        f'token = "{ScramVerifier.from_password("t")}"\n')


@pytest.mark.parametrize("text, says", [
    ("[users", "is not valid TOML"),
    ("extra = 1\n", "unknown top-level key(s) extra"),
    ("mock_seed = 3\n", "mock_seed must be a string"),
    ("[limits]\nmax_rows = -1\n", "[limits]: limit max_rows must be a positive integer"),
    ("[roles.r]\ngrant = ['x']\n", "unknown key(s) grant"),
    ("[roles.r]\ngrants = 'x'\n", "grants must be a list of strings"),
    ("[roles.r]\ngrants = ['a b']\n", "store-name glob"),
    ('[roles."bad name"]\ngrants = []\n', "a role name is"),
    ("roles = 3\n", "[roles] must be a table"),
    (BASE.replace('roles = ["r"]', 'roles = ["nope"]'), "role(s) nope are not defined under [roles]"),
    (BASE.replace('token_id = "0123abcd"', 'token_id = "XYZ"'), "token_id must be 8-32 lower-case hex"),
    (BASE.replace("token = ", "tokn = "), "unknown key(s) tokn"),
    (BASE.replace('token = "SCRAM', 'token = "MD5'), "[users.u] token: a SCRAM verifier is"),
    (BASE + 'password = "x"\n', "[users.u] password: a SCRAM verifier is"),
    (BASE + "limits = { max_rows = 0 }\n", "[users.u] limits: limit max_rows"),
    (BASE + '[users.v]\nroles = []\ntoken_id = "0123abcd"\ntoken = "x"\n', "token_id 0123abcd is also u's"),
    ('[users.v]\nroles = []\ntoken_id = "0123abcd"\n', "no token"),
    ('[users."-v"]\ntoken_id = "0123abcd"\n', "a user name is"),
])
def test_every_mistake_is_named_with_where_it_is(text: str, says: str) -> None:
    with pytest.raises(UsersFileError) as err:
        parse_users(text, "/etc/iqgate/users.toml")
    assert says in str(err.value) and str(err.value).startswith("/etc/iqgate/users.toml")


def test_a_missing_file_says_how_to_make_one(tmp_path: Path) -> None:
    with pytest.raises(UsersFileError, match="does not exist; create it with `iqgate users --file"):
        Users.load(tmp_path / "nope.toml")
    (tmp_path / "bin.toml").write_bytes(b"\xff\xfe")
    with pytest.raises(UsersFileError, match="cannot read users file"):
        Users.load(tmp_path / "bin.toml")


def test_edits_are_serialized(tmp_path: Path) -> None:
    path = tmp_path / "users.toml"
    waited: list[bool] = []
    with edit_lock(path):
        def other() -> None:
            with pytest.raises(UsersFileError, match="being edited by another"):
                with edit_lock(path, timeout_s=0.2):
                    pass
            waited.append(True)
        t = threading.Thread(target=other)
        t.start()
        t.join(10)
    assert waited == [True]
    with edit_lock(path, timeout_s=0.2):  # free again
        pass


# -- Users -----------------------------------------------------------------------------------------------------
def test_tokens_authenticate_their_user_with_the_roles_grants(team: tuple[Path, dict[str, str]]) -> None:
    path, tokens = team
    users = Users.load(path)
    assert users.mode == "file" and users.requires_auth
    alice, bob, carol = (users.authenticate_token(tokens[n]) for n in ("alice", "bob", "carol"))
    assert alice is not None and alice.name == "alice" and alice.roles == ("finance",)
    assert alice.can_read("revenue") and alice.can_read("revenue_per_min") and not alice.can_read("last_order")
    assert not alice.can_read_system()
    assert bob is not None and bob.can_read("last_order") and bob.can_read_system() and not bob.can_read("revenue")
    assert carol is not None and carol.can_read("revenue") and carol.can_read("last_order") and carol.can_read_system()
    assert users.principal("bob") == bob and users.principal("nobody") is None
    assert users.names() == ["alice", "bob", "carol"]
    assert users.token_owner(tokens["alice"]) == "alice" and users.token_owner("junk") is None


@pytest.mark.parametrize("bad", ["", "junk", "iqg_00000000_" + "A" * 43, "Bearer x"])
def test_bad_tokens_authenticate_nobody(team: tuple[Path, dict[str, str]], bad: str) -> None:
    users = Users.load(team[0])
    assert users.authenticate_token(bad) is None and users.authenticate_token(None) is None


@pytest.mark.parametrize("secret", ["_" + "A" * 42, "__" + "b" * 41, "-" + "C" * 42, "d" * 42 + "_", "e_-_" * 11])
def test_a_secret_that_begins_or_ends_with_url_safe_punctuation_is_one_token(tmp_path: Path, secret: str) -> None:
    """A token's secret is base64url, so 1 in 32 new tokens begins with ``_`` or ``-``: the id is still the part
    between the first two underscores, the whole rest is the secret, and such a token authenticates its user."""
    token = f"iqg_0123abcd_{secret}"
    assert token_id_of(token) == "0123abcd"
    path = tmp_path / "users.toml"
    write_users(path, UsersData({"u": UserRecord("u", "0123abcd", ScramVerifier.from_password(token), ())}, {}))
    users = Users.load(path)
    who = users.authenticate_token(token)  # the secret checked (token_owner reads only the id)
    assert who is not None and who.name == "u" and users.token_owner(token) == "u"
    assert users.authenticate_token(f"iqg_0123abcd{secret}") is None  # the id's closing "_" is not optional
    assert users.authenticate_token(f"iqg_0123abcd_{secret[1:]}") is None


def test_a_wrong_secret_under_a_real_token_id_fails(team: tuple[Path, dict[str, str]]) -> None:
    path, tokens = team
    users = Users.load(path)
    forged = tokens["alice"][:-4] + ("AAAA" if not tokens["alice"].endswith("AAAA") else "BBBB")
    assert users.authenticate_token(forged) is None
    assert users.authenticate_token(tokens["alice"][:-1]) is None


def test_a_caller_that_may_not_hash_is_told_so_until_the_token_was_verified(team: tuple[Path, dict[str, str]]) -> None:
    """``may_hash=False`` (a serving loop): TokenNeedsHash for any token not verified since the file was read,
    right or wrong alike; once verified the usual way, the user at once."""
    path, tokens = team
    users = Users.load(path)
    for token in (tokens["alice"], "iqg_00000000_" + "A" * 43):
        with pytest.raises(TokenNeedsHash):
            users.authenticate_token(token, may_hash=False)
    alice = users.authenticate_token(tokens["alice"])
    assert alice is not None and users.authenticate_token(tokens["alice"], may_hash=False) == alice
    assert users.authenticate_token(None, may_hash=False) is None  # no token: nothing to hash


def test_unknown_and_wrong_tokens_cost_one_pbkdf2_each(team: tuple[Path, dict[str, str]],
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    """The same work whether the token's user exists or not: one PBKDF2 of the same iterations (counted, not timed)."""
    path, tokens = team
    users = Users.load(path)
    calls: list[int] = []
    real = hashlib.pbkdf2_hmac

    def counting(name: str, password: bytes, salt: bytes, iterations: int, dklen: int | None = None) -> bytes:
        calls.append(iterations)
        return real(name, password, salt, iterations, dklen)

    monkeypatch.setattr(hashlib, "pbkdf2_hmac", counting)
    for token in ("iqg_00000000_" + "A" * 43, tokens["alice"][:-2] + "zz", "not-a-token", tokens["bob"]):
        calls.clear()
        users.authenticate_token(token)
        assert calls == [4096], token
    calls.clear()
    assert users.authenticate_token(tokens["bob"]) is not None and calls == []  # verified once, then remembered


def test_the_file_is_reloaded_when_it_changes(team: tuple[Path, dict[str, str]]) -> None:
    path, tokens = team
    users = Users.load(path)
    assert users.authenticate_token(tokens["alice"]) is not None
    assert _cli(path, "grant", "finance", "last_order")[0] == 0
    assert users.principal("alice").can_read("last_order")  # type: ignore[union-attr]
    assert _cli(path, "remove", "alice")[0] == 0
    assert users.authenticate_token(tokens["alice"]) is None  # the remembered verification went with the old file
    assert users.principal("alice") is None


def test_a_bad_edit_keeps_the_last_good_version(team: tuple[Path, dict[str, str]],
                                               caplog: pytest.LogCaptureFixture) -> None:
    path, tokens = team
    users = Users.load(path)
    good = path.read_text()
    path.write_text(good + "\n[users.alice]\nbroken = true\n")
    assert users.authenticate_token(tokens["alice"]) is not None
    assert users.last_error is not None and "is not valid TOML" in users.last_error
    assert "users file not reloaded" in caplog.text and caplog.text.count("users file not reloaded") == 1
    users.principal("bob")  # the same bad version is not re-read and re-logged at every statement
    assert caplog.text.count("users file not reloaded") == 1
    with pytest.raises(UsersFileError):
        users.reload()  # SIGHUP: the error is the caller's to print
    path.write_text(good.replace('grants = ["revenue*"]', 'grants = ["revenue"]'))
    assert not users.principal("alice").can_read("revenue_per_min")  # type: ignore[union-attr]
    assert users.last_error is None


def test_a_vanished_file_keeps_the_last_version(team: tuple[Path, dict[str, str]]) -> None:
    path, tokens = team
    users = Users.load(path)
    os.unlink(path)
    assert users.authenticate_token(tokens["bob"]) is not None
    assert users.last_error is not None and "cannot be read" in users.last_error


def test_reload_on_demand_sees_an_edit_with_the_same_stat(team: tuple[Path, dict[str, str]]) -> None:
    """An edit that keeps size and mtime (a restored backup) is still picked up by an explicit reload (SIGHUP)."""
    path, tokens = team
    users = Users.load(path)
    st = path.stat()
    text = path.read_text()
    edited = text.replace('grants = ["revenue*"]', 'grants = ["revenueX"]')
    assert len(edited) == len(text)
    with open(path, "r+") as f:
        f.write(edited)
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))
    users.reload()
    assert not users.principal("alice").can_read("revenue")  # type: ignore[union-attr]


def test_pg_verifiers_are_the_password_else_the_token(team: tuple[Path, dict[str, str]]) -> None:
    path, tokens = team
    assert _cli(path, "password", "bob", stdin="hunter2\n")[0] == 0
    users = Users.load(path)
    assert users.scram_verifier("alice").verify_password(tokens["alice"])
    assert users.scram_verifier("bob").verify_password("hunter2")
    assert not users.scram_verifier("bob").verify_password(tokens["bob"])
    assert users.check_password("bob", "hunter2") == users.principal("bob")
    assert users.check_password("bob", tokens["bob"]) is None and users.check_password("mallory", "x") is None
    mock = users.scram_verifier("mallory")
    assert mock.salt == users.scram_verifier("mallory").salt  # a stable mock salt per name
    assert mock.salt != users.scram_verifier("eve").salt and mock.iterations == 4096
    assert Users.load(path).scram_verifier("mallory").salt == mock.salt  # across restarts too


def test_single_token_mode_is_one_user_with_every_grant() -> None:
    users = Users.single_token("s3cret-token")
    assert users.mode == "token" and users.requires_auth
    p = users.authenticate_token("s3cret-token")
    assert p is not None and p.name == SINGLE_TOKEN_USER and p.can_read("anything") and p.can_read_system()
    assert users.authenticate_token("s3cret-tokeN") is None and users.authenticate_token(None) is None
    assert users.principal("psql-user").name == "psql-user"  # type: ignore[union-attr]
    assert users.scram_verifier("any").verify_password("s3cret-token")
    assert users.check_password("x", "s3cret-token") is not None and users.check_password("x", "no") is None


def test_anonymous_mode_lets_everyone_read_everything() -> None:
    users = Users.anonymous()
    assert users.mode == "anonymous" and not users.requires_auth
    p = users.authenticate_token(None)
    assert p is not None and p.name == ANONYMOUS and p.can_read("x") and p.can_read_system()
    assert users.principal("bi").can_read_system()  # type: ignore[union-attr]
    with pytest.raises(ValueError, match="unauthenticated"):
        users.scram_verifier("x")


def test_file_and_token_together_are_refused(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="not both"):
        Users(path=tmp_path / "u.toml", token="t")
    with pytest.raises(ValueError, match="empty"):
        Users.single_token("")


def test_defaults_apply_under_each_users_limits(team: tuple[Path, dict[str, str]]) -> None:
    path, _ = team
    assert _cli(path, "limit", "--default", "concurrent_statements=4", "max_rows=1000")[0] == 0
    assert _cli(path, "limit", "--user", "alice", "max_rows=10")[0] == 0
    users = Users.load(path)
    assert users.principal("alice").limits == Limits(concurrent_statements=4, max_rows=10)  # type: ignore[union-attr]
    assert users.principal("bob").limits == Limits(concurrent_statements=4, max_rows=1000)  # type: ignore[union-attr]
