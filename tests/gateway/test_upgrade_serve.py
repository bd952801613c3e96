"""``iqgate serve`` restarted on a changed pipeline file (issue 20), over real HTTP, as a user would do it.

The shop pipeline built its stores; ``serve`` then starts on the same data
dir with ``revenue`` changed (a new column) and a new store, while a producer
keeps writing and a client queries the three shop stores over HTTP, passing
each answer's Position back as its bound. Checked: the plan printed at start
names exactly one changed and one new store; no statement fails, none goes
back in time; ``/v1/stores`` shows the old columns and the rebuild until the
swap, then the new ones; health is never "healthy" while a store rebuilds;
after the swap ``revenue`` equals the oracle, new column included.

The server runs in this process (``main`` in a thread) so it reuses the
test run's Spark session instead of starting a second JVM.
"""

from __future__ import annotations

import json
import re
import socket
import threading
import time
from pathlib import Path
from typing import Any

import duckdb
import pytest

pytestmark = [pytest.mark.spark]
import pyspark  # noqa: E402,F401 - Spark tests run or fail, never skip quietly

from gateway.cli import main, request_stop  # noqa: E402
from stores import Position  # noqa: E402
from stores.log.eventlog import EventLog  # noqa: E402
from tests.background import Background  # noqa: E402
from tests.gateway.gwfixtures import Http  # noqa: E402
from tests.stores.pipeline.oracle import first_load, log_table, wait_until  # noqa: E402
from tests.stores.pipeline.test_pipeline_spark import shop  # noqa: E402
from tests.stores.pipeline.test_upgrade_spark import Producer  # noqa: E402

V2 = Path(__file__).resolve().parents[1] / "stores" / "pipeline" / "shop_v2_pipeline.py"
QUERIES = {"revenue": "SELECT key, revenue, orders FROM revenue",
           "revenue_per_min": "SELECT key, window_start, revenue FROM revenue_per_min",
           "last_order": "SELECT key, amount, valid_from FROM last_order"}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class HttpClient(Background):
    """Queries each store over HTTP in a loop with its last Position as the bound; records failures and regressions."""

    def __init__(self, http: Http) -> None:
        super().__init__()
        self.http = http
        self.failures: list[str] = []
        self.went_back: list[str] = []
        self.answers = 0
        self.health: set[tuple[str, bool]] = set()
        self.last: dict[str, dict[str, dict[str, int]]] = {}

    def _run(self) -> None:
        for _ in range(100_000):  # bounded; stop() ends it
            if self.stopped(0.02):
                return
            for store, text in QUERIES.items():
                bound = self.last.get(store)
                status, _, body = self.http.sql(text, **({"position": bound, "wait_ms": 5000} if bound else {}))
                if status != 200:
                    self.failures.append(f"{store}: HTTP {status}: {str(body)[:300]}")
                    continue
                self.answers += 1
                now = body["position"]
                for t, parts in (bound or {}).items():
                    for p, o in parts.items():
                        if now.get(t, {}).get(p, -1) < o:
                            self.went_back.append(f"{store} went back in time at {t}/{p}: {o} -> {now.get(t)}")
                self.last[store] = now


def _stores(http: Http) -> dict[str, Any]:
    status, _, body = http.request("GET", "/v1/stores")
    assert status == 200
    return {s["name"]: s for s in json.loads(body)["stores"]}


def _columns(http: Http) -> list[str]:
    return [c["name"] for c in _stores(http)["revenue"]["columns"]]


def test_serve_on_a_changed_pipeline_rebuilds_beside_and_swaps_without_failed_queries(spark, tmp_path, capsys):
    log = EventLog(tmp_path / "log")
    log.create_topic("orders", partitions=shop.TOPICS["orders"])
    log.append_batch("orders", shop.generate_orders(2000, customers=120, seed=50))
    first_load(shop.build(spark, log), log, shop.APPLICATION_ID, tmp_path / "state", tuple(QUERIES))
    capsys.readouterr()

    port = _free_port()
    http = Http(f"http://127.0.0.1:{port}")
    rc: list[int] = []
    server = threading.Thread(target=lambda: rc.append(main(["serve", str(V2), "--data-dir", str(tmp_path),
                                                             "--port", str(port), "--threads", "4"])), daemon=True)
    server.start()
    printed = ""
    try:
        def port_open() -> bool:
            try:
                return http.request("GET", "/v1/health")[0] in (200, 503)
            except OSError:  # not listening yet
                return False
        wait_until(port_open, "the HTTP port", 60)
        with Producer(log, seed=51) as producer, HttpClient(http) as client:
            def plan_printed() -> bool:
                nonlocal printed
                printed += capsys.readouterr().err
                return "iqgate: upgrade plan" in printed
            wait_until(plan_printed, "the upgrade plan on the console", 240)
            for _ in range(3000):  # until the swap; bounded
                if "avg_amount" in _columns(http):
                    break
                _, _, health = http.request("GET", "/v1/health")
                if json.loads(health)["healthy"]:  # only once the rebuilt store answers
                    assert "avg_amount" in _columns(http), health
                time.sleep(0.1)
            else:
                raise AssertionError("revenue was never swapped to its new version")
            wait_until(lambda: client.answers >= 20, "answers after the swap", 60)
        assert client.failures == [], client.failures[:5]
        assert client.went_back == [], client.went_back[:5]
        plan = dict(re.findall(r"^iqgate:   (\w+): (\w+)", printed, re.MULTILINE))
        assert plan == {"revenue": "changed", "revenue_per_min": "unchanged", "last_order": "unchanged",
                        "orders_per_item": "new"}, printed
        assert "revenue: changed (value columns: + avg_amount DOUBLE)" in printed

        # after the swap, with the producer stopped: revenue (new column included) equals the oracle
        total = 2000 + producer.sent

        def all_applied() -> bool:
            status, _, body = http.sql("SELECT sum(orders) AS n FROM revenue")
            return status == 200 and body["rows"][0][0] == total
        wait_until(all_applied, "every order in revenue", 90)
        status, _, body = http.sql("SELECT key, revenue, orders, avg_amount FROM revenue")
        assert status == 200
        con = duckdb.connect()
        log_table(con, log, "orders", Position.from_map(body["position"]), ("amount", "item"), "orders_log")
        want = {k: (s, n, a) for k, s, n, a in con.execute(
            "SELECT key, round(sum(amount), 6), count(*), round(avg(amount), 6) FROM orders_log GROUP BY key"
        ).fetchall()}
        assert {k: (round(s, 6), n, round(a, 6)) for k, s, n, a in body["rows"]} == want
        assert _stores(http)["revenue"]["status"]["status"] == "running"
    finally:
        request_stop()
        server.join(90)
    assert rc == [0]
