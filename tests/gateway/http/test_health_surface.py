"""Health beside the KIP-696 state (issue 21): a paused or failed store shows in /v1/health, /v1/stores,
/metrics, app.json (so read-only gateways show it too), and in the message of a bounded read it cannot answer.

The statuses are set the way the Spark runtime sets them (``app.health``); the
runtime's side is tested on a real Spark in tests/stores/pipeline/test_faults_spark.py.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gateway import Gateway
from stores.app.reader import StateDirReader
from tests.gateway.gwfixtures import Http, make_app, make_shop, serve_gateway, write_shop


@pytest.fixture
def running(tmp_path: Path):
    app = make_app(tmp_path / "state")
    app.start()
    shop = make_shop()
    write_shop(app, shop)
    yield app, shop
    app.close(10)


def _ahead(shop) -> dict:
    return {"orders": {"0": shop.position.offset("orders", 0) + 5}}


def test_a_paused_store_makes_health_degraded_everywhere_and_reads_go_on(running, tmp_path):
    app, shop = running
    with serve_gateway(Gateway(app)) as srv:
        http = Http(srv.url)
        st, _, raw = http.request("GET", "/v1/health")
        assert st == 200 and json.loads(raw)["status"] == "healthy"

        app.health.set("revenue", "paused", "disk full: sqlite3.OperationalError: database or disk is full",
                       retry_s=2.0)
        st, _, raw = http.request("GET", "/v1/health")
        body = json.loads(raw)
        assert st == 200 and body["state"] == "RUNNING" and body["healthy"] is False
        assert body["status"] == "degraded" and body["retry_s"] == 2.0 and body["since"].endswith("Z")
        assert body["reason"].startswith("ingest paused: store revenue: disk full")
        assert body["stores"]["revenue"]["status"] == "paused" and body["stores"]["accounts"]["status"] == "running"

        st, _, raw = http.request("GET", "/v1/stores")
        by_name = {s["name"]: s for s in json.loads(raw)["stores"]}
        assert by_name["revenue"]["status"]["status"] == "paused"
        assert "database or disk is full" in by_name["revenue"]["status"]["reason"]

        _, _, raw = http.request("GET", "/metrics")
        text = raw.decode()
        assert 'iqgate_health{status="degraded"} 1' in text
        assert 'iqgate_store_ingest_paused{store="revenue"} 1' in text
        assert 'iqgate_store_ingest_paused{store="accounts"} 0' in text
        assert 'iqgate_store_status{store="revenue",status="paused",reason="disk full: ' in text
        files = {ln.split()[0]: int(ln.split()[1]) for ln in text.splitlines()
                 if ln.startswith(("iqgate_open_files", "iqgate_store_partitions_open", "iqgate_store_read_"))}
        assert files["iqgate_open_files"] > 0 and files["iqgate_open_files_limit"] >= files["iqgate_open_files"]
        assert files["iqgate_store_partitions_open"] >= 13  # the 5 stores' partitions of this app
        assert files["iqgate_store_read_connections"] >= 0

        # existing data answers; a bound past the frozen position is NOT_UP_TO_BOUND naming the fault
        st, _, body = http.sql("SELECT count(*) AS n FROM revenue")
        assert st == 200 and body["rows"] == [[len(shop.revenue)]]
        st, _, body = http.sql("SELECT * FROM revenue", position=_ahead(shop))
        err = body["error"]
        assert st == 503 and err["code"] == "NOT_UP_TO_BOUND" and err["retryable"] is True
        assert "ingest of this store is paused: disk full" in err["message"] and "retrying every 2 s" in err["message"]

        app.health.set("revenue", "running")
        st, _, raw = http.request("GET", "/v1/health")
        assert json.loads(raw)["status"] == "healthy"


def test_a_read_only_gateway_shows_the_writers_health(running, tmp_path):
    app, shop = running
    app.health.set("per_min", "failed", "StreamsException: STATE_STORE_VALUE_SCHEMA_NOT_COMPATIBLE")
    raw = json.loads((tmp_path / "state" / "app.json").read_text())
    assert raw["stores"]["per_min"]["status"] == "failed"
    reader = StateDirReader(tmp_path / "state")
    try:
        status = reader.status()
        assert status["health"]["status"] == "degraded"
        assert status["health"]["reason"] == ("store failed: store per_min: StreamsException: "
                                              "STATE_STORE_VALUE_SCHEMA_NOT_COMPATIBLE")
        with serve_gateway(Gateway(reader)) as srv:
            body = json.loads(Http(srv.url).request("GET", "/v1/health")[2])
            assert body["status"] == "degraded" and body["stores"]["per_min"]["status"] == "failed"
            st, _, body = Http(srv.url).sql("SELECT * FROM per_min", position=_ahead(shop))
            assert "this store failed and no longer advances" in body["error"]["message"]
    finally:
        reader.close()


def test_health_of_a_stopped_app_is_stopped(tmp_path):
    app = make_app(tmp_path / "state")
    app.start()
    app.close(10)
    assert app.status()["health"]["status"] == "stopped"
    reader = StateDirReader(tmp_path / "state")
    try:
        assert reader.status()["health"]["status"] == "stopped"
    finally:
        reader.close()
