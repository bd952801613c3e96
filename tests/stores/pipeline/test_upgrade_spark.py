"""Changing a pipeline without downtime on a real Spark (issue 20): plan, blue/green rebuild, swap, removed stores.

The shop pipeline builds its stores; then the app restarts with ``revenue``
changed (a new column) and a new store, while a producer keeps writing and a
reader runs SQL on every store, passing each answer's Position back as the
next bound. Checked: the plan names exactly one changed and one new store;
the unchanged stores keep their files and checkpoints; no statement fails
during the rebuild; a column only the new version has is
COLUMN_NOT_YET_AVAILABLE until the swap; no answer goes back in time across
the swap; after it ``revenue`` (new column included) equals the oracle.
"""

from __future__ import annotations

import importlib.util
import math
import time
from pathlib import Path
from typing import Any

import duckdb
import pytest

pytestmark = [pytest.mark.spark]
import pyspark  # noqa: E402,F401 - Spark tests run or fail, never skip quietly

from gateway.engine.errors import ColumnNotYetAvailableError, SqlError  # noqa: E402
from gateway.engine.gateway import Gateway  # noqa: E402
from stores import Position, State, StreamsApp  # noqa: E402
from stores.app import layout  # noqa: E402
from stores.app.reader import StateDirReader  # noqa: E402
from stores.app.upgrade import drop_removed, plan_upgrade  # noqa: E402
from stores.log.eventlog import EventLog  # noqa: E402
from tests.background import Background  # noqa: E402
from tests.stores.pipeline.oracle import (  # noqa: E402
    caught_up,
    check_all,
    first_load,
    log_table,
    wait_for_state,
    wait_until,
)  # noqa: E402
from tests.stores.pipeline.test_pipeline_spark import shop  # noqa: E402


def _load(name: str) -> Any:
    spec = importlib.util.spec_from_file_location(name, Path(__file__).parent / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


v2 = _load("shop_v2_pipeline")

STORES = ("revenue", "revenue_per_min", "last_order")
QUERIES = {"revenue": "SELECT key, revenue, orders FROM revenue",
           "revenue_per_min": "SELECT count(*) FROM revenue_per_min",
           "last_order": "SELECT count(*) FROM last_order"}


class SqlClient(Background):
    """Runs SQL on every store in a loop, each with the last Position it saw as its bound; records problems.

    A retryable error (a partition still behind the bound after the statement's
    wait, e.g. one write stalled on a loaded machine) is retried as an IQv2
    client does, for up to ``retry_s``; what still fails then, and every
    error that is not retryable, is a failure (with the store's health then).
    """

    retry_s = 60.0

    def __init__(self, gw: Gateway, queries: dict[str, str], app: StreamsApp) -> None:
        super().__init__()
        self.gw = gw
        self.app = app
        self.queries = queries
        self.failures: list[str] = []
        self.retried: list[str] = []
        self.went_back: list[str] = []
        self.answers = 0
        self.last: dict[str, dict[tuple[str, int], int]] = {}

    def _run(self) -> None:
        for _ in range(100_000):  # bounded; stop() ends it
            if self.stopped(0.02):
                return
            for store, text in self.queries.items():
                self._ask(store, text)

    def _ask(self, store: str, text: str) -> None:
        seen = self.last.get(store, {})
        bound = {t: {str(p): o for (tt, p), o in seen.items() if tt == t} for t, _ in seen}
        give_up = time.monotonic() + self.retry_s
        for _ in range(1000):  # bounded; the clock ends it first
            try:
                res = self.gw.sql(text, position=bound or None, wait_ms=5000)
                break
            except Exception as exc:  # noqa: BLE001 - every failure is a finding
                problem = f"{store}: {type(exc).__name__}: {exc}"
                if getattr(exc, "retryable", False) and time.monotonic() < give_up:
                    self.retried.append(problem)
                    if self.stopped(0.2):
                        return  # the test is over: no verdict on a statement cut short
                    continue
                health = self.app.status()["stores"].get(store)
                self.failures.append(f"{problem} [store health then: {health.to_json() if health else None}]")
                return
        else:
            return
        self.answers += 1
        now = {(t, p): o for t in res.position.topics() for p, o in res.position.partition_positions(t).items()}
        for k, o in seen.items():
            if now.get(k, -1) < o:
                self.went_back.append(f"{store} went back in time at {k}: {o} -> {now.get(k)}")
        self.last[store] = {k: max(o, seen.get(k, -1)) for k, o in now.items()}


class Producer(Background):
    """Appends a few orders every 100 ms until stopped (the pipeline never pauses for an upgrade)."""

    join_s = 10.0

    def __init__(self, log: EventLog, seed: int) -> None:
        super().__init__()
        self.log = log
        self.orders = shop.generate_orders(4000, customers=150, seed=seed, start_ts=1_700_100_000_000)
        self.sent = 0

    def _run(self) -> None:
        while self.sent < len(self.orders) and not self.stopped(0.1):
            self.log.append_batch("orders", self.orders[self.sent:self.sent + 20])
            self.sent += 20


def _metadata(state: Path, store: str) -> str:
    return (layout.checkpoint_dir(state, store) / "metadata").read_text()


def _inodes(state: Path, store: str, partitions: int) -> list[int]:
    return [layout.partition_path(state, store, p).stat().st_ino for p in range(partitions)]


def _check_revenue_v2(gw: Gateway, log: Any) -> int:
    """``revenue`` with its new column against DuckDB over the log up to the answer's Position."""
    res = gw.sql("SELECT key, revenue, orders, avg_amount FROM revenue")
    con = duckdb.connect()
    log_table(con, log, "orders", res.position, ("amount", "item"), "orders_log")
    want = {k: (s, n, a) for k, s, n, a in con.execute(
        "SELECT key, sum(amount), count(*), avg(amount) FROM orders_log GROUP BY key").fetchall()}
    got = {k: (s, n, a) for k, s, n, a in res.rows()}
    # sums in another order differ in the last bits (rounding both to 6 places split 100.9365625 both ways)
    assert got.keys() == want.keys() and all(
        got[k][1] == want[k][1] and math.isclose(got[k][0], want[k][0], rel_tol=1e-9, abs_tol=1e-9)
        and math.isclose(got[k][2], want[k][2], rel_tol=1e-9, abs_tol=1e-9) for k in want), (
        "revenue (with avg_amount) differs from the oracle after the swap",
        sorted((k, got.get(k), want[k]) for k in want if got.get(k) != want[k])[:5])
    return len(got)


def test_a_changed_store_is_rebuilt_beside_the_old_one_and_swapped_without_failed_queries(spark, tmp_path):
    log = EventLog(tmp_path / "log")
    log.create_topic("orders", partitions=shop.TOPICS["orders"])
    log.append_batch("orders", shop.generate_orders(3000, customers=150, seed=20))
    state = tmp_path / "state"
    app = first_load(shop.build(spark, log), log, "shop", state, STORES)
    assert [c.action for c in app.upgrades.plan.changes] == ["new", "new", "new"]
    before = {s: _metadata(state, s) for s in ("revenue_per_min", "last_order")}
    inodes = {s: _inodes(state, s, 4) for s in ("revenue_per_min", "last_order")}
    log.append_batch("orders", shop.generate_orders(300, customers=150, seed=22, start_ts=1_700_050_000_000))

    topology = v2.build(spark, log, max_records_per_batch=400)
    assert [c.line() for c in plan_upgrade(state, {s.name: s for s in topology.store_specs()},
                                           topology.store_definitions()).of("unchanged")] == [
        "revenue_per_min: unchanged", "last_order: unchanged"]
    app = StreamsApp(topology, application_id="shop", state_dir=state)
    gw = Gateway(app)
    try:
        with Producer(log, seed=23) as producer:
            app.start()
            plan = {c.store: c for c in app.upgrades.plan.changes}
            assert {s: c.action for s, c in plan.items()} == {
                "revenue": "changed", "revenue_per_min": "unchanged", "last_order": "unchanged",
                "orders_per_item": "new"}
            assert plan["revenue"].what == ("value columns: + avg_amount DOUBLE",)
            # the old version answers under the name until the swap; the new column says when it arrives
            with pytest.raises(ColumnNotYetAvailableError, match="avg_amount.*arrives when the store's rebuild"):
                gw.sql("SELECT key, avg_amount FROM revenue")
            with pytest.raises(SqlError, match="unknown column 'no_such_column'"):
                gw.sql("SELECT no_such_column FROM revenue")
            with SqlClient(gw, QUERIES, app) as client:
                wait_until(lambda: app.current_generation("revenue") == 1, "the rebuilt revenue swapped in", 240)
                wait_until(lambda: client.answers >= 30, "answers after the swap", 60)
                assert app.status()["stores"]["revenue"].status == "running"
            assert producer.sent > 0
        assert client.failures == [], client.failures[:5]
        assert client.went_back == [], client.went_back[:5]
        wait_until(lambda: caught_up(app, log, (*STORES, "orders_per_item")), "catching up after the swap", 180)
        assert _check_revenue_v2(gw, log) == 150
        sizes = check_all(app, log, profiles=False)
        assert sizes["orders"] == 3300 + producer.sent
        items = dict(gw.sql("SELECT item, orders FROM orders_per_item").rows())
        assert sum(items.values()) == 3300 + producer.sent and len(items) == len(shop.ITEMS)
        # the unchanged stores never noticed: same checkpoint (query id), same files, generation 0
        assert {s: _metadata(state, s) for s in before} == before
        assert {s: _inodes(state, s, 4) for s in inodes} == inodes
        assert app.current_generation("revenue_per_min") == 0
        # the old version's files and checkpoint go once statements that used them are done
        assert not layout.checkpoint_dir(state, "revenue").exists()
        assert layout.checkpoint_dir(state, "revenue", 1).is_dir()
        wait_until(lambda: not layout.partition_path(state, "revenue", 0).exists(), "the old files removed", 10)
        stored = layout.read_store(state, "revenue")
        assert stored[1] == 1 and "avg_amount" in stored[0].value_names()
        assert stored[2]["definition"] == topology.store_definitions()["revenue"]
    finally:
        gw.close()
        assert app.close(60)

    # a removed store: not served (app nor read-only readers), files kept until dropped
    app = StreamsApp(v2.build(spark, log, new_store=False), application_id="shop", state_dir=state)
    try:
        app.start()
        assert [c.store for c in app.upgrades.plan.of("removed")] == ["orders_per_item"]
        assert [c.action for c in app.upgrades.plan.changes if c.store != "orders_per_item"] == ["unchanged"] * 3
        assert "orders_per_item" not in app.catalog()
        wait_for_state(app, State.RUNNING, 240)  # a loaded machine: Python workers can take long
    finally:
        assert app.close(60)
    assert layout.partition_path(state, "orders_per_item", 0).exists()
    reader = StateDirReader(state)
    try:
        assert sorted(reader.catalog()) == sorted(STORES)
    finally:
        reader.close()
    topology = v2.build(spark, log, new_store=False)
    plan = plan_upgrade(state, {s.name: s for s in topology.store_specs()}, topology.store_definitions())
    assert drop_removed(state, plan) == ["orders_per_item"]
    assert not layout.store_dir(state, "orders_per_item").exists()
    assert not layout.checkpoint_dir(state, "orders_per_item").exists()


def test_an_upgrade_over_kafka_swaps_at_the_broker_offsets(spark, tmp_path):
    """The same upgrade with a real Kafka-protocol broker (Tansu) as the source: positions are broker offsets."""
    from stores.log.broker import LocalBroker
    from stores.log.kafka import KafkaSource

    with LocalBroker(log_path=tmp_path / "broker.log") as broker:
        src = KafkaSource(broker.bootstrap_servers)
        try:
            src.create_topic("orders", 4)
            src.append_batch("orders", shop.generate_orders(600, customers=30, seed=24))
            state = tmp_path / "state"
            first_load(shop.build(spark, src), src, "shop-kafka", state, STORES)
            src.append_batch("orders", shop.generate_orders(100, customers=30, seed=25, start_ts=1_700_050_000_000))

            app = StreamsApp(v2.build(spark, src, new_store=False), application_id="shop-kafka", state_dir=state)
            gw = Gateway(app)
            try:
                app.start()
                assert [(c.store, c.action) for c in app.upgrades.plan.changes] == [
                    ("revenue", "changed"), ("revenue_per_min", "unchanged"), ("last_order", "unchanged")]
                with SqlClient(gw, {"revenue": QUERIES["revenue"]}, app) as client:
                    wait_until(lambda: app.current_generation("revenue") == 1, "the swap", 240)
                    src.append_batch("orders", shop.generate_orders(50, customers=30, seed=26,
                                                                    start_ts=1_700_060_000_000))
                    wait_until(lambda: caught_up(app, src, STORES), "catching up after the swap", 180)
                assert client.failures == [] and client.went_back == [], (client.failures + client.went_back)[:5]
                assert client.answers > 0
                assert _check_revenue_v2(gw, src) == 30
                assert check_all(app, src, profiles=False)["orders"] == 750
                assert app.positions()["revenue"] == Position.from_map({"orders": src.last_offsets("orders")})
            finally:
                gw.close()
                assert app.close(60)
        finally:
            src.close()


def test_a_changed_store_that_shared_a_query_is_rebuilt_alone_and_its_query_mate_stays_right(spark, tmp_path):
    """``revenue`` and ``orders_per_item`` share one streaming query (issue 23); then ``revenue`` changes.

    The changed store is rebuilt by a query of its own; its former query-mate cannot keep the shared
    checkpoint (the union's plan changed), so it is rebuilt beside itself too; both answer throughout and
    equal the oracle afterwards.
    """
    from pyspark.sql import functions as F

    from stores.pipeline.shared_query import shared_root

    log = EventLog(tmp_path / "log")
    log.create_topic("orders", partitions=4)
    log.append_batch("orders", shop.generate_orders(600, customers=30, seed=27))
    state = tmp_path / "state"
    first_load(v2.build(spark, log), log, "shop", state, (*STORES, "orders_per_item"))
    assert any(shared_root(state).glob("*/members.json"))  # they did share a query

    t = shop.build(spark, log)
    t.table("orders_per_item", t.stream("orders", value_schema=shop.VALUE_SCHEMA).groupBy("item")
            .agg(F.count("*").alias("orders")), key="item")
    app = StreamsApp(t, application_id="shop", state_dir=state)
    gw = Gateway(app)
    try:
        app.start()
        assert {c.store: c.action for c in app.upgrades.plan.changes} == {
            "revenue": "changed", "revenue_per_min": "unchanged", "last_order": "unchanged",
            "orders_per_item": "unchanged"}
        # the plan says the query-mate is rebuilt all the same
        assert app.upgrades.plan.get("orders_per_item").rebuilt_with == ("revenue",)
        with SqlClient(gw, {"revenue": QUERIES["revenue"],
                            "orders_per_item": "SELECT item, orders FROM orders_per_item"}, app) as client:
            wait_until(lambda: app.current_generation("revenue") == 1, "the swap", 240)
            log.append_batch("orders", shop.generate_orders(40, customers=30, seed=28, start_ts=1_700_060_000_000))
            wait_until(lambda: caught_up(app, log, (*STORES, "orders_per_item")), "catching up", 180)
        assert client.failures == [] and client.went_back == [], (client.failures + client.went_back)[:5]
        assert check_all(app, log, profiles=False)["orders"] == 640
        # the query-mate was rebuilt beside itself (its state was in the abandoned shared query) and swapped in
        assert app.current_generation("orders_per_item") == 1 and not any(shared_root(state).glob("*/members.json"))
        items = dict(gw.sql("SELECT item, orders FROM orders_per_item").rows())
        con = duckdb.connect()
        log_table(con, log, "orders", app.positions()["orders_per_item"], ("amount", "item"), "orders_log")
        assert items == dict(con.execute("SELECT item, count(*) FROM orders_log GROUP BY item").fetchall())
    finally:
        gw.close()
        assert app.close(60)
