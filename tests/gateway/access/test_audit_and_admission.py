"""Every statement is audited when its answer ends, on every face; a user over their share is refused at once.

The audit lines are checked against what the client received (status, rows, bytes), and never hold a token or a
password. Fair share is shown under real load: alice's statements wait for a bound nobody reaches, holding their
slots, while bob still gets in at once; a user's own concurrency limit queues, then refuses.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from gateway.access import AccessContext, Admission, AuditLog, Users
from gateway.engine.config import GatewayConfig
from gateway.engine.gateway import Gateway
from gateway.http import create_app
from gateway.pg import PgServer
from gateway.serving.http_server import ServerThread
from tests.gateway.access.team import CAROL_PASSWORD, CountingApp, Team, users
from tests.gateway.gwfixtures import Http, Shop

FAR = {"orders": {"0": 10**12}}  # a bound no store reaches: a statement waiting for it holds its slot


def _lines(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


@pytest.fixture
def audited(team: Team, team_gw: Gateway, tmp_path: Path) -> Iterator[tuple[str, Path, AccessContext]]:
    path = tmp_path / "audit.log"
    access = AccessContext(Users.load(team.path), audit=AuditLog(str(path)), admission=Admission(8))
    with ServerThread(create_app(team_gw, access=access), threads=4) as srv:
        yield srv.url, path, access
    access.close()


def test_http_statements_are_audited_as_the_client_received_them(audited: tuple[str, Path, AccessContext],
                                                                 team: Team, shop: Shop) -> None:
    url, path, _ = audited
    alice = Http(url, team.tokens["alice"])
    status, hdrs, point = alice.request("POST", "/v1/sql", {"sql": "SELECT * FROM revenue WHERE customer = ?",
                                                            "params": ["c01"]})
    assert status == 200
    status, _, big = alice.request("POST", "/v1/sql", {"sql": "SELECT * FROM accounts, revenue"},
                                   {"Accept": "application/x-ndjson"})
    assert status == 200
    status, _, _ = alice.request("POST", "/v1/sql", {"sql": "SELECT * FROM last_order"})
    assert status == 404
    status, _, cut = alice.request("POST", "/v1/sql", {"sql": "SELECT * FROM accounts, revenue, revenue r2",
                                                       "max_rows": 2500})
    assert status == 200 and b'"error":{"code":"ROW_LIMIT_EXCEEDED"' in cut  # ended in-band, after rows went out
    lines = [r for r in _lines(path) if r["event"] == "statement"]
    assert [r["status"] for r in lines] == ["ok", "ok", "error", "error"]
    first, second, third, fourth = lines
    assert first["user"] == "alice" and first["face"] == "http" and first["client"] == "127.0.0.1"
    assert first["statement"] == "SELECT * FROM revenue WHERE customer = ?" and first["params"] == ["c01"]
    assert first["stores"] == ["revenue"] and first["rows"] == 1 and first["bytes"] == len(point)
    assert first["position"] == json.loads(hdrs["x-iq-position"]) and first["duration_ms"] >= 0
    assert second["rows"] == len(shop.accounts) * len(shop.revenue) and second["bytes"] == len(big)
    assert sorted(second["stores"]) == ["accounts", "revenue"]
    assert third["error_code"] == "UNKNOWN_STORE" and third["stores"] == []
    assert fourth["error_code"] == "ROW_LIMIT_EXCEEDED" and fourth["bytes"] == len(cut)


def test_failed_logins_are_audited_and_no_line_ever_holds_a_token(audited: tuple[str, Path, AccessContext],
                                                                  team: Team) -> None:
    url, path, _ = audited
    token = team.tokens["alice"]
    wrong = token[:-4] + ("AAAA" if not token.endswith("AAAA") else "BBBB")  # alice's token id, a wrong secret
    assert Http(url, wrong).sql("SELECT 1")[0] == 401
    assert Http(url).sql("SELECT 1")[0] == 401
    # a token pasted into a statement and a parameter: written, but never the token
    Http(url, token).sql(f"SELECT '{token}' AS t", params=None)
    Http(url, token).sql("SELECT ? AS t", params=[team.tokens["bob"]])
    text = path.read_text(encoding="utf-8")
    assert all(t not in text for t in team.tokens.values()), "a token reached the audit log"
    logins = [r for r in _lines(path) if r["event"] == "login_failed"]
    assert [(r["user"], r["face"], r["reason"]) for r in logins] == [
        ("alice", "http", "the bearer token is not valid"), (None, "http", "no Authorization header")]
    assert "iqg_…" in text


def test_masked_audit_keeps_no_literal(team: Team, team_gw: Gateway, tmp_path: Path) -> None:
    path = tmp_path / "masked.log"
    access = AccessContext(Users.load(team.path), audit=AuditLog(str(path), mask=True))
    with ServerThread(create_app(team_gw, access=access), threads=2) as srv:
        alice = Http(srv.url, team.tokens["alice"])
        assert alice.sql("SELECT * FROM revenue WHERE customer = 'c01' AND revenue > 12.5")[0] == 200
        assert alice.sql("SELECT * FROM revenue WHERE customer = ?", params=["c02"])[0] == 200
    access.close()
    a, b = _lines(path)
    assert a["statement"] == "SELECT * FROM revenue WHERE customer = ? AND revenue > ?" and a["masked"] is True
    assert "params" not in b and "c02" not in path.read_text()


def test_pg_statements_and_logins_are_audited(team: Team, team_gw: Gateway, tmp_path: Path) -> None:
    import psycopg

    path = tmp_path / "pg.log"
    access = AccessContext(Users.load(team.path), audit=AuditLog(str(path)))
    with PgServer(team_gw, access=access) as pg:
        with psycopg.connect(host=pg.host, port=pg.port, user="carol", password=CAROL_PASSWORD, dbname="iqgate",
                             connect_timeout=10, autocommit=True) as con:
            rows = con.execute("SELECT * FROM accounts WHERE id > %s", [0]).fetchall()
            with con.cursor().copy("COPY accounts TO STDOUT") as copy:
                copied = sum(1 for _ in copy.rows())
        with pytest.raises(psycopg.OperationalError):
            psycopg.connect(host=pg.host, port=pg.port, user="carol", password="guess", dbname="iqgate",
                            connect_timeout=10)
    access.close()
    lines = _lines(path)
    stmts = [r for r in lines if r["event"] == "statement"]
    assert [(r["face"], r["user"], r["status"], r["stores"]) for r in stmts] == [
        ("pg", "carol", "ok", ["accounts"]), ("pg", "carol", "ok", ["accounts"])]
    assert stmts[0]["rows"] == len(rows) and stmts[0]["bytes"] > 0 and stmts[0]["params"] == [0]
    assert stmts[1]["rows"] == copied
    fails = [r for r in lines if r["event"] == "login_failed"]
    assert [(r["user"], r["face"]) for r in fails] == [("carol", "pg")]
    assert CAROL_PASSWORD not in path.read_text() and "guess" not in path.read_text()


def test_flight_statements_are_audited(team: Team, team_gw: Gateway, tmp_path: Path) -> None:
    import pyarrow.flight as fl

    from gateway.flight import start_flight
    from tests.gateway.flight.conftest import Raw

    path = tmp_path / "flight.log"
    access = AccessContext(Users.load(team.path), audit=AuditLog(str(path)))
    with start_flight(team_gw, access=access) as handle:
        raw = Raw(fl.FlightClient(handle.location), team.tokens["alice"])
        try:
            _, table = raw.sql("SELECT * FROM accounts")
        finally:
            raw.close()
    access.close()
    (line,) = [r for r in _lines(path) if r["event"] == "statement"]
    assert (line["face"], line["user"], line["stores"], line["rows"]) == ("flight", "alice", ["accounts"],
                                                                            table.num_rows)
    assert line["client"] and line["client"].startswith("ipv") and line["bytes"] > 0


# -- fair share -------------------------------------------------------------------------------------------------------
@pytest.fixture
def busy(counting: CountingApp, team: Team) -> Iterator[tuple[str, AccessContext, Gateway]]:
    """4 statement slots (1 kept for newcomers) over 8 HTTP threads: admission, not threads, is what runs out."""
    gw = Gateway(counting, config=GatewayConfig(max_waiters=16))
    access = AccessContext(Users.load(team.path), admission=Admission(4, wait_s=0.3))
    with ServerThread(create_app(gw, access=access), threads=8) as srv:
        yield srv.url, access, gw
    gw.close()


def _hold(url: str, token: str, n: int, wait_ms: int) -> list[threading.Thread]:
    """n statements that wait ``wait_ms`` for a bound nobody reaches (each holds a slot meanwhile)."""
    threads = [threading.Thread(target=Http(url, token).sql, args=("SELECT * FROM revenue",),
                                kwargs={"position": FAR, "wait_ms": wait_ms}, daemon=True) for _ in range(n)]
    for t in threads:
        t.start()
    return threads


def _until(cond: Any, what: str, timeout_s: float = 10.0) -> None:
    deadline = time.monotonic() + timeout_s
    for _ in range(100_000):  # bounded; the clock ends it
        if cond():
            return
        if time.monotonic() > deadline:
            break
        time.sleep(0.01)
    raise AssertionError(f"{what} within {timeout_s} s")


def test_one_users_load_cannot_starve_another(busy: tuple[str, AccessContext, Gateway], team: Team) -> None:
    url, access, _ = busy
    assert access.admission is not None
    held = _hold(url, team.tokens["alice"], 3, 4000)
    _until(lambda: access.admission.usage().get("alice", (0, 0))[0] == 3, "alice holds her 3 slots")
    status, hdrs, body = Http(url, team.tokens["alice"]).sql("SELECT count(*) FROM revenue")
    assert status == 429 and body["error"]["code"] == "TOO_MANY_STATEMENTS" and body["error"]["retryable"]
    assert hdrs.get("retry-after") is not None
    t0 = time.monotonic()
    status, _, body = Http(url, team.tokens["carol"]).sql("SELECT count(*) FROM accounts")
    assert status == 200, body  # the slot kept for newcomers: carol is not starved by alice's load
    assert time.monotonic() - t0 < 3.5  # not after alice's statements ended (they wait 4 s)
    for t in held:
        t.join(15)
    _until(lambda: not access.admission.usage(), "every slot is given back")
    assert Http(url, team.tokens["alice"]).sql("SELECT count(*) FROM revenue")[0] == 200


def test_a_users_concurrency_limit_queues_then_refuses(busy: tuple[str, AccessContext, Gateway], team: Team,
                                                       tmp_path: Path) -> None:
    url, access, gw = busy
    path = tmp_path / "limited.toml"
    users(path, "grant", "r", "revenue")
    token = users(path, "add", "lim", "--role", "r")
    users(path, "limit", "--user", "lim", "concurrent_statements=1")
    limited = AccessContext(Users.load(path), admission=Admission(4, wait_s=0.3))
    with ServerThread(create_app(gw, access=limited), threads=4) as srv:
        held = _hold(srv.url, token, 1, 2000)
        _until(lambda: limited.admission.usage().get("lim", (0, 0))[0] == 1, "lim runs one statement")
        t0 = time.monotonic()
        status, _, body = Http(srv.url, token).sql("SELECT count(*) FROM revenue")
        assert status == 429 and "may run 1 statement(s) at once" in body["error"]["message"]
        assert 0.25 <= time.monotonic() - t0 < 1.9  # it queued for its wait, then was refused
        for t in held:
            t.join(10)
        assert Http(srv.url, token).sql("SELECT count(*) FROM revenue")[0] == 200


def test_the_pg_port_shares_the_users_share(busy: tuple[str, AccessContext, Gateway], team: Team) -> None:
    import psycopg

    url, access, gw = busy
    with PgServer(gw, access=access) as pg:
        held = _hold(url, team.tokens["alice"], 3, 3000)
        _until(lambda: access.admission.usage().get("alice", (0, 0))[0] == 3, "alice holds her 3 slots")
        with psycopg.connect(host=pg.host, port=pg.port, user="alice", password=team.tokens["alice"],
                             dbname="iqgate", connect_timeout=10, autocommit=True) as con:
            with pytest.raises(psycopg.errors.TooManyConnections) as err:  # SQLSTATE 53300
                con.execute("SELECT count(*) FROM revenue")
            assert "TOO_MANY_STATEMENTS" in str(err.value)
        for t in held:
            t.join(15)
