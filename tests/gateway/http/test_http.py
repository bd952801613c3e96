"""The HTTP face over real sockets on 127.0.0.1: formats, catalog, health, metrics, OpenAPI, concurrency."""

from __future__ import annotations

import csv
import io
import json
import threading
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime, timezone

import pyarrow as pa

from gateway import Gateway
from gateway.http import create_app
from stores.iqv2.position import Position
from tests.gateway.gwfixtures import Http, Shop, serve_gateway


def test_json_result_shape(server: Http, shop: Shop) -> None:
    c = sorted(shop.revenue)[2]
    status, hdrs, body = server.sql("SELECT customer, revenue, orders FROM revenue WHERE customer = ?", params=[c])
    assert status == 200
    assert body["columns"] == [{"name": "customer", "type": "VARCHAR"}, {"name": "revenue", "type": "DOUBLE"},
                               {"name": "orders", "type": "BIGINT"}]
    assert body["rows"] == [[c, *shop.revenue[c]]]
    assert body["row_count"] == 1 and body["statement"] == "select"
    assert Position.from_map(body["position"]) == shop.position
    assert Position.from_json(hdrs["x-iq-position"]) == shop.position
    [part] = body["partitions"]
    assert part["store"] == "revenue" and part["failure_reason"] is None
    assert Position.from_map(part["position"]) == shop.position


def test_timestamps_are_iso_8601_with_offset(server: Http, shop: Shop) -> None:
    k = sorted(shop.accounts)[1]
    _, _, body = server.sql("SELECT opened FROM accounts WHERE id = ?", params=[k])
    [[text]] = body["rows"]
    assert datetime.fromisoformat(text) == datetime.fromtimestamp(shop.accounts[k][3] / 1000, tz=timezone.utc)
    assert text.endswith("+00:00")


def test_named_params_and_position_token_round_trip(server: Http, shop: Shop) -> None:
    c = sorted(shop.revenue)[0]
    _, _, first = server.sql("SELECT orders FROM revenue WHERE customer = :c", params={"c": c})
    status, _, again = server.sql("SELECT orders FROM revenue WHERE customer = :c", params={"c": c},
                                  position=first["position"])
    assert status == 200 and again["rows"] == first["rows"] == [[shop.revenue[c][1]]]


def test_a_list_parameter_is_an_array(server: Http, shop: Shop) -> None:
    """``= ANY(?)`` with a JSON list (refused as "parameters are single values" before s19)."""
    customers = sorted(shop.revenue)[:3] + ["nobody"]
    status, _, body = server.sql("SELECT customer, orders FROM revenue WHERE customer = ANY(?) ORDER BY customer",
                                 params=[customers])
    assert status == 200, body
    assert body["rows"] == [[c, shop.revenue[c][1]] for c in customers[:3]]
    status, _, body = server.sql("SELECT orders FROM revenue WHERE customer = :c", params={"c": customers})
    assert status == 400 and body["error"]["code"] == "TYPE_MISMATCH", body


def test_ndjson_streams_header_rows_trailer(server: Http, shop: Shop) -> None:
    status, hdrs, raw = server.sql("SELECT customer, orders FROM revenue ORDER BY customer",
                                   accept="application/x-ndjson")
    assert status == 200 and hdrs["content-type"].startswith("application/x-ndjson")
    lines = [json.loads(x) for x in raw.decode().splitlines()]
    assert lines[0]["columns"] == [{"name": "customer", "type": "VARCHAR"}, {"name": "orders", "type": "BIGINT"}]
    assert lines[1:-1] == [[k, shop.revenue[k][1]] for k in sorted(shop.revenue)]
    assert lines[-1]["row_count"] == len(shop.revenue)
    assert Position.from_map(lines[-1]["position"]) == shop.position
    assert "x-iq-position" in hdrs


def test_ndjson_error_in_the_first_chunk_keeps_its_status(server: Http, shop: Shop) -> None:
    """The first chunk is read before anything is sent (as for JSON): a limit met there is the status code.
    One met later, after the status line went out, comes in-band (test_streaming_formats.py)."""
    status, _, body = server.sql("SELECT customer FROM revenue ORDER BY customer", accept="application/x-ndjson",
                                 max_rows=3)
    assert status == 422 and body["error"]["code"] == "ROW_LIMIT_EXCEEDED"
    assert set(body["error"]) == {"code", "message", "retryable", "line", "col", "partitions"}


def test_csv(server: Http, shop: Shop) -> None:
    status, hdrs, raw = server.sql("SELECT customer, revenue, orders FROM revenue ORDER BY customer",
                                   accept="text/csv")
    assert status == 200 and hdrs["content-type"].startswith("text/csv")
    rows = list(csv.reader(io.StringIO(raw.decode())))
    assert rows[0] == ["customer", "revenue", "orders"]
    assert [(r[0], float(r[1]), int(r[2])) for r in rows[1:]] == [(k, *shop.revenue[k]) for k in sorted(shop.revenue)]
    assert Position.from_json(hdrs["x-iq-position"]) == shop.position


def test_arrow_ipc_stream(server: Http, gw: Gateway) -> None:
    sql = "SELECT id, name, opened, active FROM accounts WHERE id > 0 ORDER BY id"
    status, hdrs, raw = server.sql(sql, accept="application/vnd.apache.arrow.stream")
    assert status == 200 and hdrs["content-type"] == "application/vnd.apache.arrow.stream"
    table = pa.ipc.open_stream(raw).read_all()
    assert [tuple(r.values()) for r in table.to_pylist()] == gw.sql(sql).rows()
    assert json.loads(table.schema.metadata[b"iqgate.position"]) == json.loads(hdrs["x-iq-position"])


def test_accept_with_quality_values_picks_the_best(server: Http) -> None:
    status, hdrs, _ = server.sql("SELECT customer FROM revenue WHERE customer = 'c01'",
                                 accept="application/json;q=0.5, text/csv;q=0.9")
    assert status == 200 and hdrs["content-type"].startswith("text/csv")


def test_set_returns_settings_the_client_keeps(server: Http, shop: Shop) -> None:
    status, _, body = server.sql("SET max_rows = 2")
    assert status == 200 and body["statement"] == "set" and body["settings"]["max_rows"] == 2
    status, _, err = server.sql("SELECT * FROM revenue", session=body["settings"])
    assert status == 422 and err["error"]["code"] == "ROW_LIMIT_EXCEEDED"
    status, _, ok = server.sql("SELECT * FROM revenue")
    assert status == 200 and ok["row_count"] == len(shop.revenue)


def test_stores_catalog_with_positions(server: Http, gw: Gateway, shop: Shop) -> None:
    status, _, raw = server.request("GET", "/v1/stores")
    body = json.loads(raw)
    assert status == 200
    cat = gw.catalog()
    assert [s["name"] for s in body["stores"]] == sorted(cat)
    for s in body["stores"]:
        spec = cat[s["name"]]
        assert s["kind"] == spec.kind.value and s["partitions"] == spec.partitions
        assert [c["name"] for c in s["columns"]] == [c.name for c in spec.columns()]
        assert sorted(int(p) for p in s["positions"]) == list(range(spec.partitions))
        assert all(Position.from_map(p) == shop.position for p in s["positions"].values())


def test_health_reports_the_app_state(server: Http) -> None:
    status, _, raw = server.request("GET", "/v1/health")
    body = json.loads(raw)
    assert status == 200 and body["state"] == "RUNNING" and body["healthy"] is True and body["status"] == "healthy"
    assert body["reason"] is None and "revenue" in body["stores"]
    assert all(s["status"] == "running" for s in body["stores"].values()), body["stores"]


def test_metrics_count_requests_failures_and_positions(server: Http, shop: Shop) -> None:
    server.sql("SELECT * FROM revenue WHERE customer = 'c03'")
    ahead = {"orders": {"0": shop.position.offset("orders", 0) + 10}}
    server.sql("SELECT * FROM revenue", position=ahead)
    status, hdrs, raw = server.request("GET", "/metrics")
    text = raw.decode()
    assert status == 200 and hdrs["content-type"].startswith("text/plain")
    assert 'iqgate_requests_total{endpoint="/v1/sql",status="200"}' in text
    assert 'iqgate_requests_total{endpoint="/v1/sql",status="503"}' in text
    assert 'iqgate_request_seconds_bucket{endpoint="/v1/sql",le="+Inf"}' in text
    assert 'iqgate_partition_failures_total{reason="NOT_UP_TO_BOUND"}' in text
    off = shop.position.offset("orders", 0)
    assert f'iqgate_store_position{{store="revenue",store_partition="0",topic="orders",partition="0"}} {off}' in text
    assert 'iqgate_app_state{state="RUNNING"} 1' in text


def test_openapi_documents_every_route(gw: Gateway, server: Http) -> None:
    status, _, raw = server.request("GET", "/v1/openapi.json")
    doc = json.loads(raw)
    assert status == 200 and doc["openapi"].startswith("3.")
    app = create_app(gw)
    for rule in app.url_map.iter_rules():
        if rule.endpoint == "static":
            continue
        assert rule.rule in doc["paths"], rule.rule
        for method in rule.methods - {"HEAD", "OPTIONS"}:
            assert method.lower() in doc["paths"][rule.rule], (rule.rule, method)


def test_concurrent_clients_get_their_own_answers(server: Http, shop: Shop) -> None:
    keys = sorted(shop.revenue)

    def ask(i: int) -> tuple[str, list]:
        k = keys[i % len(keys)]
        q = ("SELECT orders FROM revenue WHERE customer = ?" if i % 2 else
             "SELECT max(orders) FROM revenue WHERE customer = ?")
        _, _, body = server.sql(q, params=[k])
        return k, body["rows"]

    with ThreadPoolExecutor(8) as pool:
        results = list(pool.map(ask, range(160), timeout=120))
    assert all(rows == [[shop.revenue[k][1]]] for k, rows in results)


def test_wait_ms_over_http_reads_your_write(tmp_path, shop: Shop) -> None:  # noqa: ANN001
    from stores.engine.change import Change
    from tests.gateway.gwfixtures import REVENUE, make_app

    app = make_app(tmp_path / "w", (REVENUE,), app_id="http-wait")
    app.start()
    try:
        app.writer("revenue").write_batch(0, [Change("a", (1.0, 1))], shop.position)
        nxt = shop.position.with_component("orders", 1, shop.position.offset("orders", 1) + 3)
        timer = threading.Timer(0.2, lambda: app.writer("revenue").write_batch(1, [Change("a", (2.0, 2))], nxt))
        with serve_gateway(Gateway(app)) as srv:
            http = Http(srv.url)
            timer.start()
            status, _, body = http.sql("SELECT revenue FROM revenue WHERE customer = 'a'",
                                       position=nxt.to_json_map(), wait_ms=20_000)
            timer.join(10)
        assert status == 200 and body["rows"] == [[2.0]]
        assert Position.from_map(body["position"]).offset("orders", 1) >= nxt.offset("orders", 1)
    finally:
        app.close()
