"""End to end: the demo pipeline on real Spark, queried with SQL over HTTP, against an oracle (DuckDB over the log).

The oracle never looks at the stores: it recomputes every answer from the
raw events in the log, so this test checks the whole chain
log → Spark → store writer → stores → planner → engine → HTTP.
"""

from __future__ import annotations

import json
from datetime import datetime, timezone
from pathlib import Path

import duckdb
import pyarrow as pa
import pytest

from gateway import Gateway
from gateway.cli.demo import PIPELINE, example_queries
from gateway.http import create_app
from gateway.serving.hosting import load_pipeline, start_pipeline, wait_caught_up
from gateway.serving.http_server import ServerThread
from stores.iqv2.position import Position
from stores.log.eventlog import EventLog
from tests.gateway.gwfixtures import Http

pytestmark = [pytest.mark.spark, pytest.mark.slow]

MINUTE = 60_000


def _oracle(log: EventLog) -> duckdb.DuckDBPyConnection:
    rows = [r for p in range(log.partitions("orders")) for r in log.read("orders", p)]
    table = pa.table({
        "key": [r.key for r in rows],
        "amount": [r.value["amount"] for r in rows],
        "item": [r.value["item"] for r in rows],
        "ts": [r.timestamp for r in rows],
        "partition": [r.partition for r in rows],
        "offset": [r.offset for r in rows],
    })
    con = duckdb.connect()
    con.register("events", table)
    return con


def _iso(ms: int) -> str:
    return datetime.fromtimestamp(ms / 1000, tz=timezone.utc).isoformat()


def test_demo_pipeline_over_http_matches_the_oracle(spark, tmp_path: Path) -> None:  # noqa: ANN001
    module = load_pipeline(PIPELINE)
    log = EventLog(tmp_path / "log")
    for topic, n in module.TOPICS.items():
        log.create_topic(topic, partitions=n)
    orders = module.generate_orders(400, customers=20, seed=5)
    log.append_batch("orders", orders)
    app = start_pipeline(module, log, tmp_path / "state", spark=spark)
    try:
        wait_caught_up(app, log, timeout_s=600)
        with ServerThread(create_app(Gateway(app)), threads=4) as srv:
            http = Http(srv.url)
            oracle = _oracle(log)

            # revenue: a full scan, ordered by key
            status, _, body = http.sql("SELECT key, revenue, orders FROM revenue ORDER BY key")
            assert status == 200, body
            want = oracle.execute("SELECT key, sum(amount), count(*) FROM events GROUP BY key ORDER BY key").fetchall()
            assert [r[0] for r in body["rows"]] == [w[0] for w in want]
            assert [r[2] for r in body["rows"]] == [w[2] for w in want]
            assert [r[1] for r in body["rows"]] == pytest.approx([w[1] for w in want])
            last = {str(p): o for p, o in log.last_offsets("orders").items()}
            assert Position.from_map(body["position"]) == Position.from_map({"orders": last})

            # a point lookup (KeyQuery) and the residual aggregate agree with the oracle
            k = want[3][0]
            status, _, one = http.sql("SELECT orders FROM revenue WHERE key = ?", params=[k])
            assert one["rows"] == [[want[3][2]]] and len(one["partitions"]) == 1

            # revenue_per_min: every (customer, minute) window
            status, _, win = http.sql("SELECT key, window_start, window_end, orders, revenue FROM revenue_per_min "
                                      "ORDER BY key, window_start")
            assert status == 200, win
            wwant = oracle.execute(
                "SELECT key, ts // 60000 * 60000 AS ws, count(*), sum(amount) FROM events GROUP BY ALL "
                "ORDER BY key, ws").fetchall()
            assert [(r[0], r[1], r[2], r[3]) for r in win["rows"]] == [
                (w[0], _iso(w[1]), _iso(w[1] + MINUTE), w[2]) for w in wwant]
            assert [r[4] for r in win["rows"]] == pytest.approx([w[3] for w in wwant])

            # last_order: the version current at an instant, for customers without ties at that instant
            picks = oracle.execute(
                "SELECT key, ts FROM (SELECT key, ts, count(*) OVER (PARTITION BY key, ts) AS n, "
                "row_number() OVER (PARTITION BY key ORDER BY ts) AS i FROM events) WHERE n = 1 AND i = 3 "
                "ORDER BY key LIMIT 5").fetchall()
            assert picks
            for key, ts in picks:
                at = datetime.fromtimestamp((ts + 1) / 1000, tz=timezone.utc).strftime("%Y-%m-%d %H:%M:%S.%f")[:-3]
                status, _, ver = http.sql(f"SELECT amount, item FROM last_order FOR SYSTEM_TIME AS OF "
                                          f"TIMESTAMP '{at}' WHERE key = ?", params=[key])
                expect = oracle.execute("SELECT amount, item FROM events WHERE key = ? AND ts <= ? "
                                        "ORDER BY ts DESC LIMIT 1", [key, ts + 1]).fetchall()
                assert status == 200 and ver["rows"] == [list(expect[0])], (key, ts, ver)

            # the demo's example queries all run
            for _, sql in example_queries(orders):
                status, _, res = http.sql(sql)
                assert status == 200 and res["row_count"] > 0, (sql, res)

            # read your own write: append, then read with its offset as the bound
            p, o = log.append("orders", key=k, value={"amount": 1000.0, "item": "tea"},
                              timestamp=max(ts for _, _, ts in orders))
            status, _, mine = http.sql("SELECT orders, revenue FROM revenue WHERE key = ?", params=[k],
                                       position={"orders": {str(p): o}}, wait_ms=300_000)
            assert status == 200, mine
            assert mine["rows"][0][0] == want[3][2] + 1
            assert mine["rows"][0][1] == pytest.approx(want[3][1] + 1000.0)
    finally:
        app.close()


def test_demo_command_loads_serves_and_answers(spark, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:  # noqa: ANN001
    """``iqgate demo --once``: events appended, pipeline caught up, server up, example answers printed."""
    from gateway.cli.main import main

    rc = main(["demo", "--dir", str(tmp_path / "demo"), "--orders", "300", "--customers", "15", "--once",
               "--port", "0", "--timeout", "600"])
    captured = capsys.readouterr()
    assert rc == 0, captured.err[-3000:]
    assert "loading events: 300/300" in captured.err
    assert "stores caught up with 300/300 events" in captured.err
    log = EventLog(tmp_path / "demo" / "log")
    assert sum(log.end_offsets("orders").values()) == 300
    # every example printed a table with at least one row, and the position of the whole log
    assert captured.out.count("-- ") == 5
    assert "(0 rows)" not in captured.out
    last = {str(p): o for p, o in log.last_offsets("orders").items()}
    assert f"position: {json.dumps({'orders': last}, separators=(',', ':'))}" in captured.out
    assert "curl -s http://127.0.0.1:" in captured.out


def test_serve_command_runs_a_pipeline_file(spark, tmp_path: Path) -> None:  # noqa: ANN001
    """``iqgate serve examples/shop_pipeline.py``: the app goes RUNNING, produced events become queryable."""
    import socket
    import threading
    import time

    from gateway.cli import main, request_stop

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    rc: list[int] = []
    t = threading.Thread(target=lambda: rc.append(main(["serve", str(PIPELINE), "--data-dir", str(tmp_path),
                                                         "--port", str(port), "--threads", "2"])))
    t.start()
    try:
        http = Http(f"http://127.0.0.1:{port}")
        deadline = time.monotonic() + 300
        health = None
        while time.monotonic() < deadline and t.is_alive():
            try:
                status, _, raw = http.request("GET", "/v1/health")
                health = json.loads(raw)
                if status == 200:
                    break
            except OSError:
                pass
            time.sleep(0.5)
        assert health is not None and (health["state"], health["healthy"], health["status"]) == ("RUNNING", True, "healthy"), health
        log = EventLog(tmp_path / "log")
        p, o = log.append("orders", key="c0001", value={"amount": 12.5, "item": "pen"}, timestamp=1_700_000_000_000)
        status, _, body = http.sql("SELECT revenue, orders FROM revenue WHERE key = 'c0001'",
                                   position={"orders": {str(p): o}}, wait_ms=240_000)
        assert status == 200 and body["rows"] == [[12.5, 1]], body
    finally:
        request_stop()
        t.join(120)
    assert rc == [0]
