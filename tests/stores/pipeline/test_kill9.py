"""kill -9 of the pipeline process at an arbitrary point, then a restart: no batch lost, none applied twice.

On the embedded log and on a real Kafka broker (Tansu): the checkpoint's offsets mean the same on both.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytestmark = [pytest.mark.spark, pytest.mark.slow]
import pyspark  # noqa: E402,F401 - Spark tests run or fail, never skip quietly

from stores import State, StreamsApp  # noqa: E402
from stores.log.eventlog import EventLog  # noqa: E402
from stores.pipeline.materializer import last_committed_batch  # noqa: E402
from tests.stores.pipeline.oracle import (  # noqa: E402
    caught_up,
    check_all,
    wait_for_state,
    wait_until,
)
from tests.stores.pipeline.test_pipeline_spark import shop  # noqa: E402

SHOP_STORES = ("revenue", "revenue_per_min", "last_order")


def _planned(ck: Path) -> int:
    d = ck / "offsets"
    return max((int(p.name) for p in d.iterdir() if p.name.isdigit()), default=-1) if d.is_dir() else -1


@pytest.fixture(params=["embedded", "kafka"])
def source(request, tmp_path):
    """(the source log, how the child process names it): the embedded log, or a fresh real Kafka broker."""
    if request.param == "embedded":
        yield EventLog(tmp_path / "log"), str(tmp_path / "log")
        return
    from stores import KafkaSource
    from stores.log.broker import LocalBroker

    with LocalBroker(log_path=tmp_path / "broker.log") as broker:
        src = KafkaSource(broker.bootstrap_servers)
        yield src, f"kafka:{broker.bootstrap_servers}"
        src.close()


def test_kill_9_mid_stream_then_restart_matches_the_oracle(spark, tmp_path, source):
    log, named = source
    log.create_topic("orders", partitions=shop.TOPICS["orders"])
    log.append_batch("orders", shop.generate_orders(300, customers=20, seed=11))
    state = tmp_path / "state"
    child = subprocess.Popen([sys.executable, str(Path(__file__).with_name("pipeline_child.py")), named, str(state)],
                             stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    try:
        assert child.stdout is not None
        line = child.stdout.readline()  # blocks until RUNNING (or the child dies: empty line)
        assert line.strip() == "RUNNING", f"child did not reach RUNNING (exit {child.poll()})"
        ck = state / "checkpoints" / "revenue"
        seed = 12
        for _ in range(40):  # keep producing in small chunks until a new batch is in flight, then kill
            log.append_batch("orders", shop.generate_orders(25, customers=20, seed=seed,
                                                            start_ts=1_700_000_000_000 + seed * 60_000))
            seed += 1
            if _planned(ck) > (last_committed_batch(ck) or -1) and _planned(ck) >= 3:
                break
            time.sleep(0.05)
        os.kill(child.pid, signal.SIGKILL)
        child.wait(30)
    finally:
        if child.poll() is None:
            child.kill()
            child.wait(30)
    assert child.returncode == -signal.SIGKILL
    log.append_batch("orders", shop.generate_orders(50, customers=20, seed=999, start_ts=1_700_100_000_000))
    total = sum(log.end_offsets("orders").values())

    app = StreamsApp(shop.build(spark, log), application_id="shop-restarted", state_dir=state)
    try:
        app.start()
        wait_for_state(app, State.RUNNING)
        wait_until(lambda: caught_up(app, log, SHOP_STORES), "the restarted stores to catch up", 60)
        sizes = check_all(app, log, profiles=False)
        assert sizes["orders"] == total  # every record counted exactly once
    finally:
        assert app.close(60)


def test_kill_9_while_a_big_batch_is_staged_then_restart_matches_the_oracle(spark, tmp_path):
    """A big batch takes the columnar path's ADBC staging (``partition-<n>.db.stage``): kill -9 right in it.

    20,000 orders in one append give ``last_order`` (versioned: a version per
    order) ~5,000 rows per partition in one micro-batch, above ADBC_MIN_ROWS;
    the pipeline process is killed as soon as a staging file appears, then a
    new app on the same state dir must catch up to exactly the oracle.
    """
    log = EventLog(tmp_path / "log")
    log.create_topic("orders", partitions=shop.TOPICS["orders"])
    log.append_batch("orders", shop.generate_orders(300, customers=50, seed=11))
    state = tmp_path / "state"
    child = subprocess.Popen([sys.executable, str(Path(__file__).with_name("pipeline_child.py")), str(tmp_path / "log"),
                              str(state)], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    caught = False
    try:
        assert child.stdout is not None
        line = child.stdout.readline()
        assert line.strip() == "RUNNING", f"child did not reach RUNNING (exit {child.poll()})"
        log.append_batch("orders", shop.generate_orders(20_000, customers=500, seed=12, start_ts=1_700_050_000_000))
        deadline = time.monotonic() + 180
        while time.monotonic() < deadline and child.poll() is None:
            if any(state.glob("stores/*/*/partition-*.db.stage")) or any(state.glob("stores/*/partition-*.db.stage")):
                caught = True
                break
            time.sleep(0.003)
        os.kill(child.pid, signal.SIGKILL)
        child.wait(30)
    finally:
        if child.poll() is None:
            child.kill()
            child.wait(30)
    assert caught, "the big batch was never seen staging"
    assert child.returncode == -signal.SIGKILL
    total = sum(log.end_offsets("orders").values())
    app = StreamsApp(shop.build(spark, log), application_id="shop-restarted", state_dir=state)
    try:
        app.start()
        wait_for_state(app, State.RUNNING, 300)  # a busy machine's Python workers may need the fault retries
        wait_until(lambda: caught_up(app, log, SHOP_STORES), "the restarted stores to catch up", 300)
        sizes = check_all(app, log, profiles=False)
        assert sizes["orders"] == total  # every record counted exactly once
        assert not any(state.glob("stores/**/*.db.stage"))
    finally:
        assert app.close(60)
