"""``iqgate serve --state-dir … --pg-port`` as a user runs it: a real process with a token, its PG answers
compared with its HTTP answers (the same engine, limits and read-only checks behind both)."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest
from psycopg import errors as pe

from tests.gateway.gwfixtures import Http, make_app, make_shop, write_shop

ROOT = Path(__file__).resolve().parents[3]
TOKEN = "serve-pg-token"


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Http, int]]:
    tmp = tmp_path_factory.mktemp("serve-pg")
    app = make_app(tmp / "state")
    app.start()
    write_shop(app, make_shop())
    app.close(10)
    (tmp / "token").write_text(TOKEN + "\n")
    proc = subprocess.Popen([sys.executable, "-m", "gateway.cli", "serve", "--state-dir", str(tmp / "state"),
                             "--port", "0", "--pg-port", "0", "--token-file", str(tmp / "token"), "--max-rows", "50"],
                            cwd=ROOT, stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True)
    try:
        assert proc.stderr is not None
        lines: list[str] = []
        http = pg_port = None
        deadline = time.monotonic() + 60
        while (http is None or pg_port is None) and time.monotonic() < deadline:
            lines.append(proc.stderr.readline())
            if not lines[-1]:
                break
            if m := re.search(r"on (http://127\.0\.0\.1:\d+)", lines[-1]):
                http = m.group(1)
            if m := re.search(r"PostgreSQL protocol on 127\.0\.0\.1:(\d+)", lines[-1]):
                pg_port = int(m.group(1))
        assert http and pg_port, f"the server did not start: {''.join(lines)}"
        yield Http(http, token=TOKEN), pg_port
    finally:
        proc.terminate()
        try:
            proc.wait(20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(10)


def _connect(port: int, password: str = TOKEN) -> psycopg.Connection:
    return psycopg.connect(host="127.0.0.1", port=port, user="bi", password=password, dbname="iqgate",
                           autocommit=True, connect_timeout=10)


def test_pg_and_http_answer_alike(served: tuple[Http, int]) -> None:
    http, port = served
    queries = ["SELECT customer, revenue, orders FROM revenue WHERE customer = 'c03'",
               "SELECT customer, sum(orders) AS n FROM per_min GROUP BY customer ORDER BY n DESC, customer LIMIT 5",
               "SELECT id, name, active FROM accounts WHERE id BETWEEN -50 AND 50 ORDER BY id"]
    with _connect(port) as con:
        for sql in queries:
            status, _, body = http.sql(sql)
            assert status == 200, body
            assert [list(r) for r in con.execute(sql).fetchall()] == body["rows"]
        assert json.loads(con.execute("SHOW last_position").fetchone()[0]) == body["position"]
        tables = con.execute("SELECT table_name FROM information_schema.tables WHERE table_schema = 'public' "
                             "ORDER BY 1").fetchall()
        _, _, shown = http.sql("SHOW TABLES")
        assert [t[0] for t in tables] == sorted(r[0] for r in shown["rows"])


def test_same_limits_and_failures(served: tuple[Http, int]) -> None:
    http, port = served
    with _connect(port) as con:
        with pytest.raises(pe.ProgramLimitExceeded) as info:  # --max-rows 50 on both faces
            con.execute("SELECT * FROM accounts")
        assert "ROW_LIMIT_EXCEEDED" in str(info.value)
        assert http.sql("SELECT * FROM accounts")[0] == 422
        with pytest.raises(pe.UndefinedTable):
            con.execute("SELECT * FROM nope")
        with pytest.raises(pe.ReadOnlySqlTransaction):
            con.execute("UPDATE revenue SET orders = 0")
        con.execute("""SET position_bound = '{"orders": {"0": 999999}}'""")
        with pytest.raises(pe.SerializationFailure) as nub:
            con.execute("SELECT * FROM revenue WHERE customer = 'c03'")
        assert "NOT_UP_TO_BOUND" in str(nub.value) and "partition" in (nub.value.diag.message_detail or "")


def test_the_token_is_the_password(served: tuple[Http, int]) -> None:
    _, port = served
    with pytest.raises(psycopg.OperationalError) as info:
        _connect(port, password="not-the-token")
    assert "password authentication failed" in str(info.value)
