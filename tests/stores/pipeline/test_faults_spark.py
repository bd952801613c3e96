"""Ingest faults on a real Spark pipeline (issue 21): reads keep answering, health says why, ingest heals itself.

Two ways to fill the disk: a real size-limited tmpfs under the state dir
(needs root: skipped with the reason elsewhere), and SQLite's own size limit
on the store files (``PRAGMA max_page_count``: SQLITE_FULL, "database or disk
is full"), which runs everywhere. Both end with the stores equal to the
DuckDB oracle of everything produced: nothing lost, nothing applied twice.
"""

from __future__ import annotations

import struct
import threading
import time
from pathlib import Path

import pytest

pytestmark = [pytest.mark.spark, pytest.mark.slow]
import pyspark  # noqa: E402,F401 - Spark tests run or fail, never skip quietly

from stores import (  # noqa: E402
    FailureReason,
    PositionBound,
    RangeQuery,
    State,
    StateQueryRequest,
    StreamsApp,
    TimestampedRangeQuery,
    VersionedKeyQuery,
)
from stores.iqv2.position import Position  # noqa: E402
from stores.log.eventlog import EventLog, LogWriteError  # noqa: E402
from tests.fault_fs import fill, mount_tmpfs  # noqa: E402
from tests.stores.pipeline.oracle import caught_up, check_all, wait_for_state, wait_until  # noqa: E402
from tests.stores.pipeline.test_pipeline_spark import shop  # noqa: E402

SHOP_STORES = ("revenue", "revenue_per_min", "last_order")


class Readers:
    """Clients reading existing data the whole time; every failed read is kept (the goal is none)."""

    def __init__(self, app: StreamsApp) -> None:
        self.app = app
        self.failures: list[str] = []
        self.reads = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        queries = {"revenue": TimestampedRangeQuery.with_no_bounds(), "last_order": VersionedKeyQuery.with_key("c0001")}
        for _ in range(100_000):  # bounded; stop() ends it
            if self._stop.wait(0.02):
                return
            for store, q in queries.items():
                try:
                    res = self.app.query(StateQueryRequest.in_store(store).with_query(q))
                except Exception as exc:  # noqa: BLE001 - counted, never expected
                    self.failures.append(f"{store}: {type(exc).__name__}: {exc}")
                    continue
                self.reads += 1
                for p, qr in res.partition_results.items():
                    if not qr.is_success:
                        self.failures.append(f"{store} partition {p}: {qr.failure_reason} {qr.failure_message}")

    def __enter__(self) -> Readers:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(10)


def _bounded_failure(app: StreamsApp, log: EventLog) -> str:
    """The message of a read bounded at the log's end, which the paused stores cannot reach."""
    bound = PositionBound.at(Position.from_map({"orders": log.last_offsets("orders")}))
    res = app.query(StateQueryRequest.in_store("revenue").with_query(RangeQuery.with_no_bounds())
                    .with_position_bound(bound))
    failed = [qr for qr in res.partition_results.values() if qr.is_failure]
    assert failed, "a bound past the frozen position was answered"
    assert {qr.failure_reason for qr in failed} == {FailureReason.NOT_UP_TO_BOUND}
    return failed[0].failure_message


def _start(spark, log: EventLog, state: Path) -> StreamsApp:
    app = StreamsApp(shop.build(spark, log), application_id=f"faults-{state.name}", state_dir=state)
    app.start()
    wait_for_state(app, State.RUNNING)
    wait_until(lambda: caught_up(app, log, SHOP_STORES), "the stores to catch up", 60)
    return app


def test_a_full_disk_pauses_ingest_keeps_reads_answering_and_heals_by_itself(spark, tmp_path):
    """The whole data dir (log and state) on a small tmpfs that fills up while producers and readers go on."""
    fs = mount_tmpfs(tmp_path, 48 << 20)
    if isinstance(fs, str):
        pytest.skip(fs)
    log = EventLog(fs.path / "log")
    log.create_topic("orders", partitions=shop.TOPICS["orders"])
    log.append_batch("orders", shop.generate_orders(300, customers=20, seed=1))
    app = None
    try:
        app = _start(spark, log, fs.path / "state")
        check_all(app, log, profiles=False)
        with Readers(app) as readers:
            reserve = fs.path / "reserve"
            reserve.write_bytes(b"\0" * 16384)
            filler = fill(fs)
            with pytest.raises(LogWriteError, match="No space left on device; nothing was written"):
                log.append_batch("orders", shop.generate_orders(200, customers=20, seed=2, start_ts=1_700_010_000_000))
            reserve.unlink()  # a little room: enough for a few records, not for a micro-batch's files
            log.append_batch("orders", shop.generate_orders(10, customers=20, seed=3, start_ts=1_700_020_000_000),
                             partition=0)
            wait_until(lambda: app.health.get("revenue").status == "paused", "revenue's ingest to pause", 60)
            health = app.status()["health"]
            assert health["status"] == "degraded", health
            assert "ingest paused" in health["reason"] and "disk full" in health["reason"], health
            assert health["retry_s"] and health["since"]
            assert app.state is State.RUNNING  # the client state machine is untouched: reads go on
            msg = _bounded_failure(app, log)
            assert "ingest of this store is paused: disk full" in msg and "retrying every" in msg, msg
            time.sleep(3)  # a few retries against the still-full disk
            assert app.status()["health"]["status"] == "degraded"
            filler.unlink()
            freed = time.monotonic()
            log.append_batch("orders", shop.generate_orders(90, customers=20, seed=4, start_ts=1_700_030_000_000))
            wait_until(lambda: caught_up(app, log, SHOP_STORES), "ingest to resume by itself", 30)
            wait_until(lambda: app.status()["health"]["status"] == "healthy", "health to recover", 30)
            resumed_s = time.monotonic() - freed
        assert readers.reads > 20 and readers.failures == [], readers.failures[:5]
        sizes = check_all(app, log, profiles=False)
        assert sizes["orders"] == 400, sizes  # every acknowledged record once: nothing lost, nothing twice
        assert resumed_s < 30
    finally:
        if app is not None:
            app.close(60)
        fs.unmount()


def test_a_restart_on_a_log_with_a_zero_filled_tail_cuts_it_and_goes_on(spark, tmp_path):
    """What a power loss can leave: the header counts records whose bytes never reached the disk."""
    log = EventLog(tmp_path / "log")
    log.create_topic("orders", partitions=shop.TOPICS["orders"])
    log.append_batch("orders", shop.generate_orders(200, customers=20, seed=5))
    d = tmp_path / "log" / "topics" / "orders"
    n = log.end_offsets("orders")[0]
    size = (d / "0.rec").stat().st_size
    with open(d / "0.rec", "ab") as f:
        f.write(b"\0" * 4096)
    with open(d / "0.ix", "r+b") as f:
        f.seek(0, 2)
        f.write(b"".join(struct.pack(">Q", size + 50 * i) for i in range(1, 4)))
        f.seek(0)
        f.write(b"IQLOGIX2" + struct.pack(">QQ", n + 3, (n + 3) ^ ((1 << 64) - 1)))
    app = _start(spark, log, tmp_path / "state")  # the runtime repairs the log before any query reads it
    try:
        assert log.end_offsets("orders")[0] == n
        log.append_batch("orders", shop.generate_orders(50, customers=20, seed=6, start_ts=1_700_040_000_000))
        wait_until(lambda: caught_up(app, log, SHOP_STORES), "the new records", 60)
        assert check_all(app, log, profiles=False)["orders"] == 250
    finally:
        app.close(60)


def test_store_files_that_cannot_grow_pause_that_ingest_until_they_can(spark, tmp_path):
    """Fault injection that runs everywhere: SQLite's own size limit makes the store writes fail (SQLITE_FULL)."""
    log = EventLog(tmp_path / "log")
    log.create_topic("orders", partitions=shop.TOPICS["orders"])
    log.append_batch("orders", shop.generate_orders(200, customers=30, seed=3))
    app = _start(spark, log, tmp_path / "state")
    try:
        stores = [app.partition_store("last_order", p) for p in range(shop.TOPICS["orders"])]
        for s in stores:  # no page beyond the ones each file has now
            pages = s._wconn.execute("PRAGMA page_count").fetchone()[0]
            s._wconn.execute(f"PRAGMA max_page_count = {pages}")
        with Readers(app) as readers:
            log.append_batch("orders", shop.generate_orders(400, customers=400, seed=4, start_ts=1_700_020_000_000))
            wait_until(lambda: app.health.get("last_order").status == "paused", "last_order to pause", 60)
            st = app.health.get("last_order")
            assert "disk full" in st.reason and "database or disk is full" in st.reason, st.reason
            assert app.status()["health"]["status"] == "degraded"
            assert app.health.get("revenue").status == "running"  # the other stores are not affected
            wait_until(lambda: caught_up(app, log, ("revenue", "revenue_per_min")), "the others to go on", 60)
            for s in stores:
                s._wconn.execute("PRAGMA max_page_count = 1073741823")
            wait_until(lambda: caught_up(app, log, SHOP_STORES), "last_order to resume by itself", 30)
            wait_until(lambda: app.status()["health"]["status"] == "healthy", "health to recover", 30)
        assert readers.failures == [], readers.failures[:5]
        assert check_all(app, log, profiles=False)["orders"] == 600
    finally:
        app.close(60)
