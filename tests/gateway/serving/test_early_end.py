"""Answers that end early, in every way, on every output and store kind, scans streamed and not (issue 43 item 2).

One real server (``iqgate serve --state-dir``: a supervisor and two serving processes) with small limits. Each
statement ends early by the row limit, the response-size limit, the statement timeout, an error in the middle
of its rows, the client going away or a cancel, and is read as JSON, NDJSON, CSV and Arrow IPC over HTTP and over
the PG port; the in-process DB-API and ``Gateway.sql(..., arrow=True)`` run the same in a child process. Every
answer is what the README says (a status code while nothing was sent; in-band for JSON and NDJSON after that;
a response cut short for CSV and Arrow, which have no in-band error), and the server stays up: no serving
process crashed, and the ones that served at the start serve at the end.
"""

from __future__ import annotations

import http.client
import json
import socket
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from stores.app.streams import StoreTopology, StreamsApp
from stores.catalog.schema import Column, SqlType, StoreKind, StoreSpec
from stores.engine.change import Change
from stores.iqv2.position import Position
from tests.gateway.serving.served_process import served_process

ROOT = Path(__file__).resolve().parents[3]
N = 40_000  # rows of the key-value store: several Arrow batches of a scan (16,384 rows each)
MINUTE = 60_000
MAX_ROWS = 3_000
SPECS = (
    StoreSpec("kv", StoreKind.KEY_VALUE, Column("k", SqlType.VARCHAR, nullable=False),
              (Column("v", SqlType.DOUBLE), Column("n", SqlType.BIGINT)), partitions=2, source_topics=("t",)),
    StoreSpec("win", StoreKind.WINDOW, Column("k", SqlType.VARCHAR, nullable=False),
              (Column("n", SqlType.BIGINT),), partitions=2, source_topics=("t",), window_size_ms=MINUTE),
    StoreSpec("ver", StoreKind.VERSIONED, Column("k", SqlType.VARCHAR, nullable=False),
              (Column("v", SqlType.DOUBLE),), partitions=2, source_topics=("t",),
              history_retention_ms=10**12),
    StoreSpec("ts", StoreKind.TIMESTAMPED_KEY_VALUE, Column("k", SqlType.VARCHAR, nullable=False),
              (Column("v", SqlType.DOUBLE),), partitions=2, source_topics=("t",)),
)
KEYS = [f"k{i:06d}" for i in range(N)]
IN_LIST = "(" + ", ".join(f"'{k}'" for k in KEYS[: MAX_ROWS + 500]) + ")"


def _statements() -> list[tuple[str, str, str]]:
    """(name, SQL, the error it ends with): every kind, streamed (a scan) and not (a key list: point lookups)."""
    out = []
    for spec in SPECS:
        table = spec.name + (" FOR SYSTEM_TIME ALL" if spec.kind is StoreKind.VERSIONED else "")
        out.append((f"{spec.name}-scan-row-limit", f"SELECT * FROM {table}", "ROW_LIMIT_EXCEEDED"))
        out.append((f"{spec.name}-keys-row-limit", f"SELECT * FROM {table} WHERE k IN {IN_LIST}",
                    "ROW_LIMIT_EXCEEDED"))
    out += [
        ("size-limit", "SELECT k, repeat(k, 400) AS wide FROM kv LIMIT 2500", "RESPONSE_TOO_LARGE"),
        ("timeout", "SELECT count(*) FROM kv a, kv b, kv c WHERE a.v + b.v + c.v > -1", "STATEMENT_TIMEOUT"),
        ("error-mid-rows", "SELECT k, CAST(CASE WHEN n > 2500 THEN 'x' ELSE '1' END AS INTEGER) AS c FROM kv "
                           "WHERE n < 2900 ORDER BY n", "EXECUTION_ERROR"),
    ]
    return out


STATEMENTS = _statements()
FORMATS = ["application/json", "application/x-ndjson", "text/csv", "application/vnd.apache.arrow.stream"]


@pytest.fixture(scope="module")
def state(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("early-end")
    app = StreamsApp(StoreTopology(SPECS), application_id="early", state_dir=root / "state")
    app.start()
    pos = Position.from_map({"t": {0: N}})
    app.writer("kv").write_batch(0, [Change(k, (float(i), i)) for i, k in enumerate(KEYS)], pos)
    app.writer("win").write_batch(0, [Change(k, (i,), window_start=w * MINUTE, window_end=(w + 1) * MINUTE)
                                      for i, k in enumerate(KEYS[:N // 4]) for w in range(2)], pos)
    app.writer("ver").write_batch(0, [Change(k, (float(i),), timestamp=1_000 + v) for i, k in enumerate(KEYS[:N // 4])
                                      for v in range(2)], pos)
    app.writer("ts").write_batch(0, [Change(k, (float(i),), timestamp=1_000 + i) for i, k in enumerate(KEYS)], pos)
    app.close(30)
    return root / "state"


class Server:
    def __init__(self, proc: subprocess.Popen[str], url: str, pg_port: int, err: Path) -> None:
        self.proc, self.url, self.pg_port, self.err = proc, url, pg_port, err
        self.port = int(url.rsplit(":", 1)[1])

    def health(self) -> dict[str, Any]:
        c = http.client.HTTPConnection("127.0.0.1", self.port, timeout=30)
        try:
            c.request("GET", "/v1/health")
            return json.loads(c.getresponse().read())
        finally:
            c.close()


@pytest.fixture(scope="module")
def server(state: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    err = tmp_path_factory.mktemp("early-end-server") / "serve.err"
    flags = ["--workers", "2", "--threads", "4", "--no-pin-cpus", "--max-rows", str(MAX_ROWS),
             "--max-response-size", "512KB", "--statement-timeout-ms", "3000"]
    with served_process(state, err, flags) as (proc, url, pg):
        s = Server(proc, url, pg, err)
        for _ in range(600):  # until a serving process answers
            try:
                if s.health()["status"] == "healthy":
                    break
            except OSError:
                pass
            time.sleep(0.1)
        yield s


def _http(server: Server, sql: str, accept: str) -> tuple[int, bytes, bool]:
    """(status, body, whether the body arrived whole)."""
    c = http.client.HTTPConnection("127.0.0.1", server.port, timeout=60)
    try:
        c.request("POST", "/v1/sql", json.dumps({"sql": sql}), {"Content-Type": "application/json", "Accept": accept})
        r = c.getresponse()
        try:
            return r.status, r.read(), True
        except http.client.IncompleteRead as exc:
            return r.status, exc.partial, False
    finally:
        c.close()


@pytest.mark.parametrize("accept", FORMATS, ids=["json", "ndjson", "csv", "arrow"])
@pytest.mark.parametrize(("name", "sql", "code"), STATEMENTS, ids=[s[0] for s in STATEMENTS])
def test_an_answer_ended_early_over_http_says_why(server: Server, accept: str, name: str, sql: str,
                                                   code: str) -> None:
    status, body, whole = _http(server, sql, accept)
    if status != 200:  # found before anything was sent: the status code and the one error shape
        assert status < 500 or code == "STATEMENT_TIMEOUT", (status, body[:300])
        assert json.loads(body)["error"]["code"] == code
        return
    if accept == "application/json":
        answer = json.loads(body)  # valid JSON, and never looks complete
        assert answer["error"]["code"] == code and "row_count" not in answer
    elif accept == "application/x-ndjson":
        last = json.loads(body.decode().splitlines()[-1])
        assert last["error"]["code"] == code
    else:  # CSV and Arrow: no in-band error; the response is cut short, never a short answer that looks whole
        assert not whole, (name, accept, len(body))
        if accept.endswith("arrow.stream"):
            with pytest.raises(pa.ArrowInvalid):
                pa.ipc.open_stream(body).read_all()


@pytest.mark.parametrize("accept", ["application/x-ndjson", "application/vnd.apache.arrow.stream", "text/csv"])
def test_a_client_that_goes_away_in_the_middle_leaves_the_server_up(server: Server, accept: str) -> None:
    for _ in range(5):
        s = socket.create_connection(("127.0.0.1", server.port), timeout=30)
        body = json.dumps({"sql": "SELECT * FROM kv WHERE n < 2900"}).encode()
        s.sendall(b"POST /v1/sql HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nAccept: " + accept.encode()
                  + b"\r\nContent-Length: " + str(len(body)).encode() + b"\r\n\r\n" + body)
        s.recv(512)
        s.close()
    assert _http(server, "SELECT count(*) FROM kv", "application/json")[0] == 200


@pytest.mark.parametrize(("name", "sql", "code"), STATEMENTS, ids=[s[0] for s in STATEMENTS])
def test_an_answer_ended_early_over_the_pg_port_is_an_error_response(server: Server, name: str, sql: str,
                                                                      code: str) -> None:
    psycopg = pytest.importorskip("psycopg")
    with psycopg.connect(host="127.0.0.1", port=server.pg_port, user="iqgate", dbname="iqgate",
                         connect_timeout=30) as con:
        for binary in (False, True):
            with pytest.raises(psycopg.Error) as info, con.cursor(binary=binary) as cur:
                cur.execute(sql)
                cur.fetchall()
            assert info.value.sqlstate is not None
            assert code in str(info.value) or info.value.sqlstate in ("57014", "54000", "22P02", "22018")
            con.rollback()
        with con.cursor() as cur:  # the connection goes on
            cur.execute("SELECT count(*) FROM kv")
            assert cur.fetchone() == (N,)


def test_a_pg_cancel_in_the_middle_leaves_the_server_up(server: Server) -> None:
    psycopg = pytest.importorskip("psycopg")
    import threading

    with psycopg.connect(host="127.0.0.1", port=server.pg_port, user="iqgate", dbname="iqgate") as con:
        threading.Timer(0.3, con.cancel).start()
        with pytest.raises(psycopg.errors.QueryCanceled), con.cursor() as cur:
            cur.execute(STATEMENTS[-2][1])  # the slow one
        con.rollback()
        with con.cursor() as cur:
            cur.execute("SELECT count(*) FROM kv")
            assert cur.fetchone() == (N,)


IN_PROCESS = textwrap.dedent("""
    import sys
    sys.path.insert(0, {root!r})
    import duckdb
    from gateway import Gateway, connect
    from gateway.engine import errors as ge
    gw = Gateway.open({state!r}, max_rows={max_rows}, max_response_bytes=524288, statement_timeout_ms=3000)
    statements = {statements!r}
    for name, sql, code in statements:
        for way in ("arrow", "stream", "rows", "relation", "dbapi"):
            try:
                if way == "dbapi":
                    cur = connect(gateway=gw).cursor()
                    cur.execute(sql)
                    cur.fetchall()
                elif way == "relation":  # a relation is the caller's to run: no budget of ours, DuckDB's errors
                    if code != "STATEMENT_TIMEOUT":
                        try:
                            gw.sql(sql).relation.arrow().read_all()
                        except duckdb.ConversionException:
                            assert code == "EXECUTION_ERROR", name
                    continue
                elif way == "arrow":
                    result = gw.sql(sql, arrow=True)
                    for _ in result.arrow_batches()[1]:
                        pass
                else:
                    result = gw.sql(sql, stream=way == "stream")
                    for _ in result.iter_batches():
                        pass
            except Exception as exc:  # noqa: BLE001
                got = getattr(exc, "code", type(exc).__name__)
                if code == "RESPONSE_TOO_LARGE" and got != code:  # the size limit is a face's; in process no limit
                    continue
                assert got == code, (name, way, got, exc)
            else:
                assert code == "RESPONSE_TOO_LARGE", (name, way, "did not end early")
    gw.close()
    print("alive")
""")


def test_in_process_answers_ended_early_leave_the_process_alive(state: Path, tmp_path: Path) -> None:
    """The DB-API and the Python API in a child process (a crash there fails this test, not the run)."""
    script = tmp_path / "in_process.py"
    script.write_text(IN_PROCESS.format(root=str(ROOT), state=str(state), max_rows=MAX_ROWS, statements=STATEMENTS))
    proc = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=600, cwd=ROOT)
    assert proc.returncode == 0, (proc.returncode, proc.stderr[-3000:])
    assert proc.stdout.strip().endswith("alive")


# -- the statement fuzzer (issue 43 item 4): Arrow, CSV, NDJSON and the PG port too, under small limits --------
from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

_EXPRS = ["k", "v", "n", "v * 2", "n % 7", "upper(k)", "length(k)", "repeat(k, 60)", "CAST(n AS VARCHAR)", "n / 0",
          "NULL", "count(*)", "sum(v)", "max(k)", "_partition", "_position", "[n, n]", "{'a': n}", "k || k"]
_FROM = ["kv", "ts", "win", "ver FOR SYSTEM_TIME ALL", "kv a JOIN ts b USING (k)", "(SELECT * FROM kv LIMIT 50) s",
         "range(5000) r(n)"]
_WHERE = ["", "WHERE n < 100", "WHERE k > 'k020000'", "WHERE v > 1e6", "WHERE k IN ('k000001', 'k000002')",
          "WHERE n BETWEEN 10 AND 4000", "WHERE CAST(k AS INTEGER) > 0"]
_TAIL = ["", "ORDER BY 1 DESC", "LIMIT 10", "LIMIT 5000", "GROUP BY 1", "ORDER BY 1 LIMIT 3 OFFSET 2"]
STATEMENT = st.one_of(
    st.builds(lambda e, f, w, t: f"SELECT {', '.join(e)} FROM {f} {w} {t}",
              st.lists(st.sampled_from(_EXPRS), min_size=1, max_size=3), st.sampled_from(_FROM),
              st.sampled_from(_WHERE), st.sampled_from(_TAIL)),
    st.text(alphabet="SELECT FROMWHERE()*,'\"?;=<>-+ kvnts0123456789\\\n", max_size=120),
)
_FUZZ = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture,
                                                                        HealthCheck.too_slow])


@pytest.mark.parametrize("accept", FORMATS, ids=["json", "ndjson", "csv", "arrow"])
@_FUZZ
@given(sql=STATEMENT)
def test_fuzz_over_every_http_format_never_breaks_the_server(server: Server, accept: str, sql: str) -> None:
    status, body, _ = _http(server, sql, accept)
    assert status < 500 or status in (503, 504), (status, body[:300])  # a timeout or a full server, said so
    assert b"Traceback" not in body
    if status != 200:
        assert json.loads(body)["error"]["code"]


@_FUZZ
@given(sql=STATEMENT)
def test_fuzz_over_the_pg_port_never_breaks_the_server(server: Server, sql: str) -> None:
    psycopg = pytest.importorskip("psycopg")
    with psycopg.connect(host="127.0.0.1", port=server.pg_port, user="iqgate", dbname="iqgate",
                         connect_timeout=30) as con:
        try:
            with con.cursor(binary=True) as cur:
                cur.execute(sql)
                cur.fetchall()
        except psycopg.Error as exc:
            if exc.sqlstate is None:  # psycopg's own (an empty statement has no rows to fetch), not the server's
                assert isinstance(exc, psycopg.ProgrammingError), exc
                return
            assert not exc.sqlstate.startswith("XX"), (exc.sqlstate, str(exc))
            assert "Traceback" not in str(exc)


def test_the_server_never_crashed(server: Server) -> None:
    """Last in this module: every early end above left every serving process up."""
    health = server.health()
    assert health["crashes"]["count"] == 0, health["crashes"]
    assert server.proc.poll() is None
    assert "killed by" not in server.err.read_text()
