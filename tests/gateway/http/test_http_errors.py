"""Every error class over real HTTP: one body shape, the right status, Retry-After where waiting helps,
and a body the client rebuilds into the same exception class."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

import gateway.engine.errors as ge
from gateway import Gateway, GatewayConfig
from stores.app.streams import StoreTopology, StreamsApp
from tests.gateway.gwfixtures import REVENUE, Http, Shop, make_app, serve_gateway

SHAPE = {"code", "message", "retryable", "line", "col", "partitions"}


def check(status: int, hdrs: dict[str, str], body: object, want_status: int, want_code: str,
          cls: type[ge.GatewayError]) -> dict:
    assert isinstance(body, dict), body
    assert status == want_status, body
    assert set(body) == {"error"} and set(body["error"]) == SHAPE, body
    err = body["error"]
    assert err["code"] == want_code and err["message"]
    assert hdrs["content-type"].startswith("application/json")
    rebuilt = ge.GatewayError.from_error_body(status, body)
    assert isinstance(rebuilt, cls) and rebuilt.code == want_code
    if status == 503 and err["retryable"]:
        assert int(hdrs["retry-after"]) >= 0
    else:
        assert "retry-after" not in hdrs
    return err


@pytest.mark.parametrize(("sql", "status", "code", "cls"), [
    ("SELEC * FROM revenue", 400, "SQL_SYNTAX_ERROR", ge.SqlError),
    ("SELECT nope FROM revenue", 400, "UNKNOWN_COLUMN", ge.SqlError),
    ("SELECT * FROM revenue WHERE customer = 1 + TRUE", 400, None, ge.ProgrammingError),
    ("SELECT * FROM nowhere", 404, "UNKNOWN_STORE", ge.UnknownStoreError),
    ("INSERT INTO revenue VALUES ('x', 1, 1)", 400, "READ_ONLY", ge.SqlError),
    ("SELECT * FROM read_csv('/etc/passwd')", 400, "FORBIDDEN_FUNCTION", ge.SqlError),
    ("SELECT * FROM read_parquet('http://127.0.0.1:9/x.parquet')", 400, "FORBIDDEN_FUNCTION", ge.SqlError),
    ("SELECT * FROM 'data.csv'", 404, "UNKNOWN_STORE", ge.UnknownStoreError),
    ("COPY revenue TO '/tmp/out.csv'", 400, "READ_ONLY", ge.SqlError),
    ("SET max_rows = 'lots'", 400, "INVALID_SETTING", ge.SqlError),
    ("SELECT * FROM revenue AS OF POSITION '{bad'", 400, "INVALID_POSITION", ge.SqlError),
    # an offset of 5,001 digits (Python's int() refuses past 4,300: was an INTERNAL 500), one past a long
    ("SELECT * FROM revenue AS OF POSITION '{\"orders\": {\"0\": 1" + "0" * 5000 + "}}'", 400, "INVALID_POSITION",
     ge.SqlError),
    ("SELECT * FROM revenue AS OF POSITION '{\"orders\": {\"0\": 9223372036854775808}}'", 400, "INVALID_POSITION",
     ge.SqlError),
    ("SELECT * FROM revenue WHERE customer = ?", 400, "PARAMETER_ERROR", ge.SqlError),
])
def test_sql_errors(server: Http, sql: str, status: int, code: str | None, cls: type) -> None:
    st, hdrs, body = server.sql(sql)
    got = body["error"]["code"] if isinstance(body, dict) and "error" in body else None
    err = check(st, hdrs, body, status, code or got, cls)
    assert err["retryable"] is False


def test_syntax_error_points_at_line_and_column(server: Http) -> None:
    st, hdrs, body = server.sql("SELECT customer\nFROM revenue\nWHERE customer = = 'x'")
    err = check(st, hdrs, body, 400, "SQL_SYNTAX_ERROR", ge.SqlError)
    assert err["line"] == 3 and isinstance(err["col"], int)


@pytest.mark.parametrize(("raw", "needle"), [
    (b"{not json", "not valid JSON"),
    (b"[1, 2]", "JSON object"),
    (b"", "empty"),
    (json.dumps({"params": []}).encode(), '"sql"'),
    (json.dumps({"sql": "SELECT 1", "partial": "yes"}).encode(), '"partial"'),
    (json.dumps({"sql": "SELECT 1", "wait_ms": -1}).encode(), '"wait_ms"'),
    (json.dumps({"sql": "SELECT 1", "max_rows": 1.5}).encode(), '"max_rows"'),
    (json.dumps({"sql": "SELECT 1", "params": "x"}).encode(), '"params"'),
    (json.dumps({"sql": "SELECT 1", "position": {"t": {"0": "x"}}}).encode(), '"position"'),
    (json.dumps({"sql": "SELECT 1", "session": [1]}).encode(), '"session"'),
    (json.dumps({"sql": "SELECT 1", "sqll": "x"}).encode(), "sqll"),
    (b'{"sql": "SELECT 1", "params": [' + b"[" * 100_000 + b"]" * 100_000 + b"]}", "nests JSON too deeply"),
    (b'{"sql": "SELECT ?", "params": [1' + b"0" * 5000 + b"]}", "not usable JSON"),
])
def test_malformed_requests(server: Http, raw: bytes, needle: str) -> None:
    st, hdrs, body = server.request("POST", "/v1/sql", raw=raw)
    err = check(st, hdrs, json.loads(body), 400, "BAD_REQUEST", ge.InterfaceError)
    assert needle in err["message"]


def test_bad_session_setting_in_request(server: Http) -> None:
    st, hdrs, body = server.sql("SELECT 1", session={"max_rowz": 5})
    err = check(st, hdrs, body, 400, "INVALID_SETTING", ge.SqlError)
    assert "max_rows" in err["message"]  # the hint names the setting meant


def test_unknown_route_and_method(server: Http) -> None:
    st, hdrs, body = server.request("GET", "/v1/nothing")
    check(st, hdrs, json.loads(body), 404, "NOT_FOUND", ge.InterfaceError)
    st, hdrs, body = server.request("GET", "/v1/sql")
    check(st, hdrs, json.loads(body), 405, "METHOD_NOT_ALLOWED", ge.InterfaceError)


def test_not_acceptable(server: Http) -> None:
    st, hdrs, body = server.request("POST", "/v1/sql", {"sql": "SELECT 1"}, {"Accept": "image/png"})
    check(st, hdrs, json.loads(body), 406, "NOT_ACCEPTABLE", ge.InterfaceError)


def test_row_limit(server: Http) -> None:
    st, hdrs, body = server.sql("SELECT * FROM revenue", max_rows=1)
    check(st, hdrs, body, 422, "ROW_LIMIT_EXCEEDED", ge.OperationalError)


def test_statement_timeout(server: Http) -> None:
    sql = ("SELECT count(*) FROM revenue a, revenue b, revenue c, revenue d, revenue e, revenue f, revenue g "
           "WHERE a.revenue + b.revenue + c.revenue + d.revenue + e.revenue + f.revenue + g.revenue > -1")
    st, hdrs, body = server.sql(sql, session={"statement_timeout_ms": 100})
    check(st, hdrs, body, 504, "STATEMENT_TIMEOUT", ge.StatementTimeout)


def test_not_up_to_bound_is_503_with_retry_after(server: Http, shop: Shop) -> None:
    ahead = {"orders": {"1": shop.position.offset("orders", 1) + 1}}
    st, hdrs, body = server.sql("SELECT * FROM revenue", position=ahead)
    err = check(st, hdrs, body, 503, "NOT_UP_TO_BOUND", ge.NotUpToBoundError)
    assert err["retryable"] is True
    assert sorted(p["partition"] for p in err["partitions"]) == list(range(REVENUE.partitions))
    assert all(set(p) == {"store", "partition", "failure_reason", "failure_message", "retryable"}
               for p in err["partitions"])


def test_request_too_large(gw: Gateway) -> None:
    with serve_gateway(gw, GatewayConfig(max_request_bytes=200)) as srv:
        st, hdrs, body = Http(srv.url).sql("SELECT * FROM revenue WHERE customer = '" + "x" * 500 + "'")
    check(st, hdrs, body, 413, "REQUEST_TOO_LARGE", ge.RequestTooLarge)


def test_bearer_token(gw: Gateway) -> None:
    with serve_gateway(gw, GatewayConfig(auth_token="s3cret")) as srv:
        anon = Http(srv.url)
        st, hdrs, body = anon.sql("SELECT 1")
        check(st, hdrs, body, 401, "UNAUTHORIZED", ge.Unauthorized)
        assert hdrs["www-authenticate"].startswith("Bearer")
        st, hdrs, body = Http(srv.url, token="wrong").sql("SELECT 1")
        check(st, hdrs, body, 401, "UNAUTHORIZED", ge.Unauthorized)
        st, hdrs, body = anon.request("GET", "/metrics", headers={"Authorization": "Basic czNjcmV0"})
        check(st, hdrs, json.loads(body), 401, "UNAUTHORIZED", ge.Unauthorized)
        assert Http(srv.url, token="s3cret").sql("SHOW TABLES")[0] == 200
        assert anon.request("GET", "/v1/health")[0] == 200  # probes need no token


@pytest.fixture()
def created_app(tmp_path: Path) -> Iterator[StreamsApp]:
    app = make_app(tmp_path / "c", (REVENUE,), app_id="created")
    yield app
    app.close()


def test_app_not_started_and_stopped(created_app: StreamsApp) -> None:
    with serve_gateway(Gateway(created_app)) as srv:
        http = Http(srv.url)
        st, hdrs, body = http.sql("SELECT * FROM revenue WHERE customer = 'x'")
        err = check(st, hdrs, body, 503, "STREAMS_NOT_STARTED", ge.StreamsNotStartedError)
        assert err["retryable"] is True
        st, hdrs, raw = http.request("GET", "/v1/health")
        assert st == 503 and json.loads(raw)["state"] == "CREATED" and "retry-after" in hdrs
        created_app.start()
        created_app.close()
        st, hdrs, body = http.sql("SELECT * FROM revenue WHERE customer = 'x'")
        err = check(st, hdrs, body, 503, "STREAMS_STOPPED", ge.StreamsStoppedError)
        assert err["retryable"] is False


def test_partition_failures(tmp_path: Path) -> None:
    app = StreamsApp(StoreTopology((REVENUE,)), application_id="http-half", state_dir=str(tmp_path / "h"),
                     hosted_partitions={"revenue": {0}})
    app.start()
    try:
        with serve_gateway(Gateway(app)) as srv:
            http = Http(srv.url)
            st, hdrs, body = http.sql("SELECT * FROM revenue")
            err = check(st, hdrs, body, 503, "PARTITION_FAILURE", ge.PartitionFailureError)
            assert err["retryable"] and {p["failure_reason"] for p in err["partitions"]} == {"NOT_PRESENT"}
            st, hdrs, body = http.sql("SELECT * FROM revenue WHERE _partition = 7")
            err = check(st, hdrs, body, 404, "PARTITION_FAILURE", ge.PartitionFailureError)
            assert err["partitions"][0]["failure_reason"] == "DOES_NOT_EXIST" and not err["retryable"]
            st, _, ok = http.sql("SELECT * FROM revenue", partial=True)
            assert st == 200 and [p["partition"] for p in ok["partitions"] if p["failure_reason"]] == [1, 2, 3]
    finally:
        app.close()
