"""The access flags on the command line: what goes together, what does not, each refusal one line (exit 2).

Run in this process through ``gateway.cli.main.main``: every case here ends before a server would start.
"""

from __future__ import annotations

import io
from pathlib import Path

import pytest

from gateway.cli.main import main
from tests.gateway.access.team import Team, make_team


@pytest.fixture(scope="module")
def small_team(tmp_path_factory: pytest.TempPathFactory) -> Team:
    return make_team(tmp_path_factory.mktemp("cli-team"))


@pytest.mark.parametrize("extra, env, says", [
    (["--token", "abc"], {}, "--users-file and --token do not go together"),
    ([], {"IQGATE_TOKEN": "abc"}, "--users-file and IQGATE_TOKEN do not go together"),
    (["--pg-port", "0", "--pg-auth", "md5"], {}, "--pg-auth md5 needs the password itself"),
    (["--peers", "http://127.0.0.1:1"], {}, "give --peer-token-file PATH"),
    (["--tls-cert", "/nonexistent/cert.pem"], {}, "TLS needs both --tls-cert and --tls-key"),
    (["--tls-cert", "/nonexistent/cert.pem", "--tls-key", "/nonexistent/key.pem"], {},
     "cannot load the TLS certificate --tls-cert /nonexistent/cert.pem"),
])
def test_flags_that_do_not_go_together_are_one_line_usage_errors(small_team: Team, tmp_path: Path,
                                                                 monkeypatch: pytest.MonkeyPatch,
                                                                 capsys: pytest.CaptureFixture[str],
                                                                 extra: list[str], env: dict[str, str],
                                                                 says: str) -> None:
    monkeypatch.delenv("IQGATE_TOKEN", raising=False)
    monkeypatch.delenv("IQGATE_PEER_TOKEN", raising=False)
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    state = tmp_path / "state"
    state.mkdir()
    code = main(["serve", "--state-dir", str(state), "--port", "0", "--users-file", str(small_team.path), *extra])
    err = capsys.readouterr().err.strip()
    assert code == 2 and says in err and err.count("\n") == 0 and "Traceback" not in err, err


def test_a_bad_users_file_is_refused_naming_it(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "users.toml"
    bad.write_text("[users.alice]\nroles = ['nope']\n")
    state = tmp_path / "state"
    state.mkdir()
    code = main(["serve", "--state-dir", str(state), "--port", "0", "--users-file", str(bad)])
    err = capsys.readouterr().err.strip()
    assert code == 2 and err.startswith("iqgate: --users-file:") and str(bad) in err and "Traceback" not in err, err


def test_peer_token_file_goes_with_a_users_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    token = tmp_path / "peer"
    token.write_text("iqg_00000000_" + "p" * 43)
    state = tmp_path / "state"
    state.mkdir()
    code = main(["serve", "--state-dir", str(state), "--port", "0", "--peer-token-file", str(token)])
    err = capsys.readouterr().err.strip()
    assert code == 2 and "--peer-token-file goes with --users-file" in err, err


def test_iqgate_users_runs_from_the_main_command(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "u.toml"
    assert main(["users", "--file", str(path), "grant", "r", "revenue"]) == 0
    assert main(["--debug", "users", "--file", str(path), "add", "ann", "--role", "r"]) == 0
    token = capsys.readouterr().out.strip()
    assert token.startswith("iqg_") and token not in path.read_text()
    monkeypatch.setattr("sys.stdin", io.StringIO("s3cret\n"))
    assert main(["users", "--file", str(path), "password", "ann"]) == 0
    assert main(["users", "--file", str(path), "list"]) == 0
    listing = capsys.readouterr().out
    assert "ann: roles r; PG password set" in listing and token not in listing and "s3cret" not in listing
    assert main(["users", "--file", str(path), "remove", "nobody"]) == 1
    assert "no user 'nobody'" in capsys.readouterr().err
