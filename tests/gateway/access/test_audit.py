"""The audit log: one JSON line per statement and failed login, literals masked on demand, never a secret."""

from __future__ import annotations

import io
import json
import os
import threading
from pathlib import Path
from typing import Any

import pytest
from sqlglot.dialects.postgres import Postgres

from gateway.access import AuditLog, Users, mask_literals
from gateway.access.audit import _LITERALS
from gateway.access.users_cmd import main as users_main
from stores.iqv2.position import Position


def lines(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


def test_a_statement_record_has_every_field(tmp_path: Path) -> None:
    log = AuditLog(str(tmp_path / "audit.log"))
    pos = Position.from_map({"orders": {0: 41, 1: 7}})
    log.statement(user="alice", face="http", client="127.0.0.1:5050", sql="SELECT * FROM revenue WHERE k = 'c1'",
                  stores=["revenue", "revenue"], rows=1, response_bytes=120, duration_ms=1.23456, position=pos,
                  params=[1, "x"])
    log.statement(user="bob", face="pg", client="10.0.0.2:4000", sql="SELECT nope", status="error",
                  error_code="UNKNOWN_COLUMN", duration_ms=0.5)
    log.close()
    ok, err = lines(tmp_path / "audit.log")
    assert ok["time"].endswith("Z") and "T" in ok["time"]
    assert {k: ok[k] for k in ok if k != "time"} == {
        "event": "statement", "user": "alice", "face": "http", "client": "127.0.0.1:5050",
        "statement": "SELECT * FROM revenue WHERE k = 'c1'", "masked": False, "params": [1, "x"],
        "stores": ["revenue"], "status": "ok", "error_code": None, "rows": 1, "bytes": 120, "duration_ms": 1.235,
        "position": {"orders": {"0": 41, "1": 7}}}
    assert err["status"] == "error" and err["error_code"] == "UNKNOWN_COLUMN" and err["position"] is None
    assert (tmp_path / "audit.log").stat().st_mode & 0o777 == 0o600


def test_masked_statements_keep_no_literal_and_no_parameter(tmp_path: Path) -> None:
    log = AuditLog(str(tmp_path / "a.log"), mask=True)
    log.statement(user="u", face="http", client=None, sql="SELECT v FROM s WHERE k = 'secret-42' AND n > 1234",
                  params=["p-secret"], position={"orders": {0: 3}})
    log.close()
    (rec,) = lines(tmp_path / "a.log")
    assert rec["statement"] == "SELECT v FROM s WHERE k = ? AND n > ?" and rec["masked"] is True
    assert "params" not in rec and rec["position"] == {"orders": {"0": 3}}
    text = (tmp_path / "a.log").read_text()
    assert "secret-42" not in text and "1234" not in text and "p-secret" not in text


@pytest.mark.parametrize("sql, masked", [
    ("SELECT 'a''b', 42, -1.5e3 FROM t", "SELECT ?, ?, -? FROM t"),
    ("SELECT E'x\\'y', $$dollar$$, $tag$ a $tag$, X'ff', B'101', U&'d\\0061t', N'n'", "SELECT ?, ?, ?, ?, ?, ?, ?"),
    ("SELECT * FROM t WHERE k = $1 AND j = ? AND x = $12", "SELECT * FROM t WHERE k = $1 AND j = ? AND x = $12"),
    ('SELECT "col 1", "x\'y" FROM "my store" -- k = \'secret\'\nWHERE a = 1', 'SELECT "col 1", "x\'y" FROM "my store" WHERE a = ?'),
    ("SELECT /* 'hidden' 99 */ v FROM s", "SELECT v FROM s"),
    ("SELECT v FROM s AS OF POSITION '{\"orders\": {\"0\": 5}}'", "SELECT v FROM s AS OF POSITION ?"),
    ("SELECT v\n  FROM s\n WHERE k IN (1, 2)", "SELECT v\n  FROM s\n WHERE k IN (?, ?)"),
    ("SELECT TRUE, NULL, INTERVAL '1 day', DATE '2024-01-01'", "SELECT TRUE, NULL, INTERVAL ?, DATE ?"),
])
def test_mask_literals(sql: str, masked: str) -> None:
    assert mask_literals(sql) == masked


@pytest.mark.parametrize("sql", ["SELECT 'unterminated", "SELECT $$never closed", "SELECT \"x"])
def test_a_statement_that_does_not_tokenize_is_not_written_when_masking(sql: str) -> None:
    out = mask_literals(sql)
    assert out.startswith("<statement not tokenizable") and "never" not in out and "unterminated" not in out


@pytest.mark.parametrize("sql", [
    "SELECT a + 1 FROM t WHERE b = 'x' OR c BETWEEN 3 AND 4.5",
    "WITH w AS (SELECT 'q' AS v) SELECT * FROM w UNION ALL SELECT 'r'",
    "SELECT json_extract(v, '$.a[0]') FROM s LIMIT 10 OFFSET 20",
])
def test_masked_text_tokenizes_to_no_literal(sql: str) -> None:
    masked = mask_literals(sql)
    assert not [t for t in Postgres().tokenize(masked) if t.token_type in _LITERALS]


def test_failed_logins_are_recorded(tmp_path: Path) -> None:
    log = AuditLog(str(tmp_path / "a.log"))
    log.login_failed(user="mallory", face="pg", client="10.1.1.1:999", reason="password authentication failed")
    log.close()
    (rec,) = lines(tmp_path / "a.log")
    assert rec["event"] == "login_failed" and rec["user"] == "mallory" and rec["face"] == "pg"
    assert rec["reason"] == "password authentication failed" and rec["client"] == "10.1.1.1:999"


def test_never_a_token_or_a_password(tmp_path: Path) -> None:
    """Through the real path: a users file, tokens checked and refused, a password set; the log holds neither."""
    path = tmp_path / "users.toml"
    users_main(["--file", str(path), "grant", "r", "*"])
    out = io.StringIO()
    users_main(["--file", str(path), "add", "alice", "--role", "r"], stdout=out)
    token = out.getvalue().strip()
    users_main(["--file", str(path), "password", "alice"], stdin=io.StringIO("pa55-w0rd!\n"))
    users = Users.load(path)
    log = AuditLog(str(tmp_path / "audit.log"))
    wrong = token[:-3] + ("abc" if not token.endswith("abc") else "xyz")  # a secret is random: it may end so
    for presented in (wrong, "iqg_00000000_" + "Z" * 43):
        assert users.authenticate_token(presented) is None
        log.login_failed(user=users.token_owner(presented), face="http", client="127.0.0.1:1", reason="bad token")
    log.login_failed(user=token, face="pg", client=None, reason="token pasted as the user name")
    principal = users.authenticate_token(token)
    assert principal is not None
    log.statement(user=principal.name, face="http", client=None, sql=f"SELECT '{token}' AS oops, 1",
                  params=[token, wrong])
    log.close()
    text = (tmp_path / "audit.log").read_text()
    secret = token.split("_", 2)[2]
    assert token not in text and secret not in text and wrong.split("_", 2)[2] not in text
    assert "pa55-w0rd!" not in text and "SCRAM" not in text
    recs = lines(tmp_path / "audit.log")
    assert recs[0]["user"] == "alice" and recs[1]["user"] is None and recs[2]["user"] == "iqg_…"
    assert recs[3]["statement"] == "SELECT 'iqg_…' AS oops, 1" and recs[3]["params"] == ["iqg_…", "iqg_…"]


def test_the_file_rotates_by_size(tmp_path: Path) -> None:
    log = AuditLog(str(tmp_path / "a.log"), max_bytes=2_000, backups=2)
    for i in range(100):
        log.statement(user="u", face="http", client=None, sql=f"SELECT {i} AS n", rows=1)
    log.close()
    files = sorted(p.name for p in tmp_path.iterdir())
    assert files == ["a.log", "a.log.1", "a.log.2"]
    kept = [r for f in files for r in lines(tmp_path / f)]
    assert all(r["event"] == "statement" for r in kept) and all((tmp_path / f).stat().st_size <= 2_000 for f in files)
    assert lines(tmp_path / "a.log")[-1]["statement"] == "SELECT 99 AS n"  # the newest, last in the live file


def test_dash_is_stdout(capsys: pytest.CaptureFixture[str]) -> None:
    log = AuditLog("-", mask=True)
    log.statement(user="u", face="pg", client=None, sql="SELECT 1")
    log.close()
    rec = json.loads(capsys.readouterr().out)
    assert rec["statement"] == "SELECT ?" and rec["user"] == "u"


def test_a_long_statement_is_cut_and_says_so(tmp_path: Path) -> None:
    log = AuditLog(str(tmp_path / "a.log"))
    log.statement(user="u", face="http", client=None, sql="SELECT " + "x, " * 40_000 + "1")
    log.close()
    (rec,) = lines(tmp_path / "a.log")
    assert len(rec["statement"]) == 64 * 1024 and rec["statement_truncated"] == 7 + 3 * 40_000 + 1


def test_an_unopenable_path_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match=r"cannot open the audit log .*/no/such/dir/a.log: No such file"):
        AuditLog(str(tmp_path / "no" / "such" / "dir" / "a.log"))
    with pytest.raises(ValueError, match="max_bytes"):
        AuditLog(str(tmp_path / "a.log"), max_bytes=0)


def test_concurrent_writers_never_interleave_lines(tmp_path: Path) -> None:
    log = AuditLog(str(tmp_path / "a.log"))

    def write(n: int) -> None:
        for i in range(200):
            log.statement(user=f"u{n}", face="http", client=None, sql=f"SELECT '{'v' * 500}', {i}")

    threads = [threading.Thread(target=write, args=(n,)) for n in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    log.close()
    recs = lines(tmp_path / "a.log")
    assert len(recs) == 800 and {r["user"] for r in recs} == {"u0", "u1", "u2", "u3"}


def test_a_full_disk_drops_lines_without_failing_the_statement(caplog: pytest.LogCaptureFixture) -> None:
    log = AuditLog("/dev/full")  # every write: ENOSPC
    for _ in range(3):
        log.statement(user="u", face="http", client=None, sql="SELECT 1")
    assert log.dropped == 3
    assert caplog.text.count("a line could not be written") == 1 and "No space left" in caplog.text
    log.close()
    log.close()  # idempotent
    log.statement(user="u", face="http", client=None, sql="SELECT 1")  # after close: dropped, never a stray fd
    assert log.dropped == 4


def test_a_live_file_removed_under_the_log_is_started_again(tmp_path: Path) -> None:
    log = AuditLog(str(tmp_path / "a.log"), max_bytes=300, backups=1)
    log.statement(user="u", face="http", client=None, sql="SELECT 1")
    os.unlink(tmp_path / "a.log")
    for i in range(5):
        log.statement(user="u", face="http", client=None, sql=f"SELECT {i}")
    log.close()
    assert log.dropped == 0 and lines(tmp_path / "a.log")[-1]["statement"] == "SELECT 4"


def test_values_json_cannot_hold_natively_are_written_as_text(tmp_path: Path) -> None:
    import datetime
    import decimal

    log = AuditLog(str(tmp_path / "a.log"))
    log.statement(user="u", face="dbapi", client=None, sql="SELECT ?, ?, ?",
                  params=[2**70, decimal.Decimal("1.50"), datetime.date(2024, 1, 2)])
    log.close()
    (rec,) = lines(tmp_path / "a.log")
    assert rec["params"] == [2**70, "1.50", "2024-01-02"]
