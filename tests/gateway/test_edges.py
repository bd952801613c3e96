"""Edges of the engine and its faces: configuration checks, value encodings, streaming chunks, broken state dirs."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pyarrow as pa
import pytest

import gateway.engine.errors as ge
from gateway import Gateway, GatewayConfig
from gateway.engine.config import Session
from stores.app.streams import StreamsApp
from tests.gateway.gwfixtures import Http, Shop, serve_gateway


def test_config_rejects_bad_values_and_unknown_names() -> None:
    with pytest.raises(ValueError, match="max_rows must be a positive integer"):
        GatewayConfig(max_rows=0)
    with pytest.raises(ValueError, match="auth_token"):
        GatewayConfig(auth_token="")
    with pytest.raises(TypeError, match="unknown gateway setting\\(s\\) max_row;"):
        GatewayConfig.of(None, max_row=5)
    assert GatewayConfig.of(None, max_rows=5).max_rows == 5


def test_gateway_needs_a_queryable_and_an_existing_state_dir(tmp_path: Path) -> None:
    with pytest.raises(TypeError, match="needs a source"):
        Gateway(object())  # type: ignore[arg-type]
    with pytest.raises(FileNotFoundError):
        Gateway.open(tmp_path / "missing")
    with pytest.raises(TypeError, match="unknown gateway setting"):
        Gateway.open(tmp_path, max_row=1)


def test_session_settings_are_validated() -> None:
    with pytest.raises(ge.BadRequest):
        Session.validated({1: True})  # type: ignore[dict-item]
    with pytest.raises(ge.SqlError) as info:
        Session.validated({"partial_results": "maybe"})
    assert info.value.code == "INVALID_SETTING"
    assert Session.validated({"PARTIAL_RESULTS": "true"}) == {"partial_results": True}


def test_a_null_among_in_values_is_sqls_null_not_an_error(gw: Gateway) -> None:
    """``k IN ('a', NULL)`` finds 'a' (the NULL never matches), as in any SQL database; only a NULL alone
    (``k = NULL``, ``k IN (NULL)``) is refused, since it can match nothing."""
    one = gw.sql("SELECT customer, revenue FROM revenue WHERE customer = 'c01'").rows()
    assert len(one) == 1
    assert gw.sql("SELECT customer, revenue FROM revenue WHERE customer IN ('c01', NULL)").rows() == one
    assert gw.sql("SELECT customer, revenue FROM revenue WHERE customer = 'c01' OR customer = NULL").rows() == one
    assert gw.sql("SELECT customer, revenue FROM revenue WHERE customer IN (?, ?)", params=[None, "c01"]).rows() == one
    assert gw.sql("SELECT customer FROM revenue WHERE customer IN (NULL, NULL)").rows() == []
    assert gw.sql("SELECT count(*) FROM revenue WHERE customer NOT IN ('c01', NULL)").rows() == [(0,)]
    with pytest.raises(ge.SqlError, match=r"with NULL.*\(line 1, column 36\)") as info:
        gw.sql("SELECT customer FROM revenue WHERE customer IN (NULL)")
    assert info.value.code == "TYPE_MISMATCH" and info.value.http_status == 400


def test_sums_are_json_integers_not_strings(server: Http, shop: Shop) -> None:
    status, _, body = server.sql("SELECT sum(orders) AS n, avg(revenue) AS r FROM revenue")
    assert status == 200
    assert body["columns"] == [{"name": "n", "type": "HUGEINT"}, {"name": "r", "type": "DOUBLE"}]
    [[n, r]] = body["rows"]
    assert n == sum(o for _, o in shop.revenue.values()) and isinstance(n, int)
    assert r == pytest.approx(sum(v for v, _ in shop.revenue.values()) / len(shop.revenue))


def test_other_value_encodings(server: Http) -> None:
    status, _, body = server.sql(
        "SELECT CAST(1.25 AS DECIMAL(10,2)) AS d, INTERVAL 90 MINUTE AS i, '\\x61'::BLOB AS b, "
        "[1, 2] AS l, {'x': 1} AS s, DATE '2024-05-01' AS day, 'NaN'::DOUBLE AS nan "
        "FROM revenue LIMIT 1")
    assert status == 200, body
    [[d, i, b, lst, struct, day, nan]] = body["rows"]
    assert (d, lst, struct, day, nan) == ("1.25", [1, 2], {"x": 1}, "2024-05-01", None)
    assert i == "1:30:00" and isinstance(b, str)


def test_ndjson_streams_in_several_chunks(gw: Gateway, shop: Shop) -> None:
    small = Gateway(gw.source, config=GatewayConfig(ndjson_batch_rows=4))
    with serve_gateway(small) as srv:
        status, _, raw = Http(srv.url).sql("SELECT customer FROM revenue ORDER BY customer",
                                           accept="application/x-ndjson")
    lines = [json.loads(x) for x in raw.decode().splitlines()]
    assert status == 200 and [r[0] for r in lines[1:-1]] == sorted(shop.revenue)
    out = small.sql("SELECT customer FROM revenue ORDER BY customer", stream=True)
    assert len(list(out.iter_batches(max_rows=100))) == -(-len(shop.revenue) // 4)


def test_arrow_for_fast_path_and_catalog_statements(server: Http, shop: Shop) -> None:
    c = sorted(shop.revenue)[0]
    for sql in (f"SELECT revenue, orders FROM revenue WHERE customer = '{c}'", "SHOW TABLES", "DESCRIBE revenue"):
        status, _, raw = server.sql(sql, accept="application/vnd.apache.arrow.stream")
        assert status == 200
        table = pa.ipc.open_stream(raw).read_all()
        _, _, js = server.sql(sql)
        assert [list(r.values()) for r in table.to_pylist()] == js["rows"]


def test_result_relation_for_fast_path_and_close(gw: Gateway, shop: Shop) -> None:
    c = sorted(shop.revenue)[0]
    out = gw.sql("SELECT revenue, orders FROM revenue WHERE customer = ?", params=[c])
    assert out.relation.fetchall() == [shop.revenue[c]]
    assert out.to_arrow().num_rows == 1 and len(out) == 1
    out.close()


def test_a_corrupt_state_dir_is_an_internal_error(shop_app: StreamsApp, tmp_path: Path) -> None:
    copy = tmp_path / "state"
    shutil.copytree(shop_app.state_dir, copy, ignore=shutil.ignore_patterns("*.lock"))
    spec_file = next(copy.rglob("store.json"))
    spec_file.write_text("{not json")
    ro = Gateway.open(copy)
    try:
        with pytest.raises(ge.GatewayInternalError, match="store catalog"):
            ro.sql("SELECT 1")
        with serve_gateway(ro) as srv:
            status, _, body = Http(srv.url).sql("SHOW TABLES")
        assert status == 500 and body["error"]["code"] == "INTERNAL"
        assert set(body["error"]) == {"code", "message", "retryable", "line", "col", "partitions"}
    finally:
        ro.close()


def test_bad_python_api_arguments(gw: Gateway) -> None:
    with pytest.raises(ge.BadRequest, match="session must be"):
        gw.sql("SHOW TABLES", session=42)  # type: ignore[arg-type]
    with pytest.raises(ge.BadRequest, match="max_rows"):
        gw.sql("SELECT * FROM revenue", max_rows=-1)
    with pytest.raises(ge.BadRequest, match="wait_ms"):
        gw.sql("SELECT * FROM revenue", wait_ms=-5)


def test_body_over_the_limit_without_content_length_is_refused() -> None:
    from gateway.http.limits import parse_sql_request

    with pytest.raises(ge.RequestTooLarge, match="11 bytes; the limit is 10"):
        parse_sql_request(b'{"sql": 1}'.ljust(11), 10)


def test_ndjson_reports_an_unencodable_value_in_band(gw: Gateway) -> None:
    from flask import Flask

    from gateway.engine.result import Result
    from gateway.http.renderers import render_ndjson
    from planner.plan import StatementKind
    from stores.iqv2.position import Position

    res = Result.in_hand([("x", "VARCHAR")], [("fine",), (object(),)], Position.empty(), [], StatementKind.SELECT)
    with Flask("t").test_request_context():
        resp = render_ndjson(res, 10_000)
        lines = [json.loads(x) for x in "".join(resp.response).splitlines()]
    assert lines[0]["columns"] == [{"name": "x", "type": "VARCHAR"}]
    assert lines[-1]["error"]["code"] == "INTERNAL" and "object" in lines[-1]["error"]["message"]
