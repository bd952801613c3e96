"""``iqgate serve`` answers from the first second (issue 13 item 7) and says RUNNING only when it is (item 8).

A real ``iqgate serve`` process with its own Spark, started on a data dir that
already holds stores: the HTTP port must answer with the stored rows (and
their positions) long before Spark has started, health must say "starting"
with a reason and 503 until every query ran and caught up, the console must
show catch-up progress, and a record produced once it says RUNNING must show
up quickly.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytestmark = [pytest.mark.spark, pytest.mark.slow]
import pyspark  # noqa: E402,F401 - Spark tests run or fail, never skip quietly

from stores import State, StreamsApp  # noqa: E402
from stores.log.eventlog import EventLog  # noqa: E402
from tests.gateway.gwfixtures import Http  # noqa: E402
from tests.stores.pipeline.oracle import caught_up, wait_for_state, wait_until  # noqa: E402
from tests.stores.pipeline.test_pipeline_spark import shop  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
PIPELINE = ROOT / "examples" / "shop_pipeline.py"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_serve_answers_from_the_stores_on_disk_while_spark_starts(spark, tmp_path):
    log = EventLog(tmp_path / "log")
    log.create_topic("orders", partitions=shop.TOPICS["orders"])
    log.append_batch("orders", shop.generate_orders(400, customers=20, seed=41))
    app = StreamsApp(shop.build(spark, log), application_id=shop.APPLICATION_ID, state_dir=tmp_path / "state")
    app.start()
    wait_for_state(app, State.RUNNING)
    wait_until(lambda: caught_up(app, log, ("revenue", "revenue_per_min", "last_order")), "the first load", 60)
    assert app.close(60)
    log.append_batch("orders", shop.generate_orders(100, customers=20, seed=42, start_ts=1_700_050_000_000))

    port = _free_port()
    err = open(tmp_path / "serve.err", "w+")
    t0 = time.monotonic()
    proc = subprocess.Popen([sys.executable, "-m", "gateway.cli", "serve", str(PIPELINE), "--data-dir", str(tmp_path),
                             "--port", str(port), "--threads", "2"], cwd=ROOT, stdout=subprocess.DEVNULL, stderr=err,
                            env={**os.environ, "PYTHONUNBUFFERED": "1"})
    http = Http(f"http://127.0.0.1:{port}")
    try:
        first = None
        for _ in range(600):  # until the port answers (bounded: 60 s)
            try:
                first = http.sql("SELECT count(*) AS n, sum(orders) AS o FROM revenue")
                break
            except OSError:
                time.sleep(0.1)
        answered_s = time.monotonic() - t0
        assert first is not None, "the port never answered"
        status, _, body = first
        assert status == 200, body
        assert body["rows"][0][1] == 400  # the stored rows, at their position, before any new batch
        st, _, raw = http.request("GET", "/v1/health")
        health = json.loads(raw)
        assert st == 503 and health["state"] == "REBALANCING" and health["status"] == "starting", health
        assert health["reason"]
        for _ in range(1200):  # until RUNNING (bounded: 240 s)
            st, _, raw = http.request("GET", "/v1/health")
            if st == 200:
                break
            time.sleep(0.2)
        health = json.loads(raw)
        assert st == 200 and health["status"] == "healthy", health
        running_s = time.monotonic() - t0
        # RUNNING means caught up: the 100 records written while it was down are in, without waiting
        status, _, body = http.sql("SELECT sum(orders) AS o FROM revenue")
        assert body["rows"] == [[500]], body
        p, o = log.append("orders", key="c0001", value={"amount": 1.0, "item": "pen"}, timestamp=1_700_060_000_000)
        t1 = time.monotonic()
        status, _, body = http.sql("SELECT orders FROM revenue WHERE key = 'c0001'",
                                   position={"orders": {str(p): o}}, wait_ms=60_000)
        first_record_s = time.monotonic() - t1
        assert status == 200, body
    finally:
        proc.send_signal(signal.SIGINT)
        try:
            proc.wait(60)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(10)
        err.seek(0)
        console = err.read()
        err.close()
    assert answered_s < running_s
    assert "while Spark starts" in console and "iqgate: RUNNING" in console, console[-3000:]
    print(f"port answered after {answered_s:.1f} s, RUNNING after {running_s:.1f} s, "
          f"first new record visible after {first_record_s:.2f} s")
