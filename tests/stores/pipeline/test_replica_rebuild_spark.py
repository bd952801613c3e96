"""A standby replica follows its store through a rebuild (issue 17 with issue 20), on a real Spark.

The shop pipeline builds its stores (changelogged on the embedded log) and a
replica restores ``revenue``; then the pipeline is upgraded (``revenue``
gains ``avg_amount``): the active rebuilds it into generation 1, logged to
``shop-revenue.g1-changelog`` from its batch 0. A SQL client on the
replica's gateway passes each answer's Position back as the next bound the
whole time. Checked: no statement fails, no answer goes back in time; the
replica restores generation 1 beside its copy, swaps to it, and then serves
the new column, equal to DuckDB over the log up to the replica's Position;
generation 0's topic is gone once generation 1 is current.
"""

from __future__ import annotations

import pytest

pytestmark = [pytest.mark.spark]
import pyspark  # noqa: E402,F401 - Spark tests run or fail, never skip quietly

from gateway.engine.gateway import Gateway  # noqa: E402
from stores import Position, StreamsApp  # noqa: E402
from stores.changelog import EventLogChangelog, changelog_topic  # noqa: E402
from stores.log.eventlog import EventLog  # noqa: E402
from stores.replica import Replica, ReplicaSource  # noqa: E402
from tests.stores.pipeline.oracle import caught_up, first_load, wait_until  # noqa: E402
from tests.stores.pipeline.test_pipeline_spark import shop  # noqa: E402
from tests.stores.pipeline.test_upgrade_spark import QUERIES, SqlClient, _check_revenue_v2  # noqa: E402

STORES = ("revenue",)


def _build(spark, log, *, avg: bool):
    """Only the shop's ``revenue`` (one query: seconds), as in shop_pipeline.py; ``avg``: as in shop_v2_pipeline.py."""
    from pyspark.sql import functions as F

    from stores import Topology

    t = Topology(spark, log, trigger="100 milliseconds")
    orders = t.stream("orders", value_schema=shop.VALUE_SCHEMA, max_records_per_batch=200 if avg else None)
    aggs = [F.sum("amount").alias("revenue"), F.count("*").alias("orders"), F.max("timestamp").alias("last_ts")]
    t.table("revenue", orders.groupBy("key").agg(*aggs, *([F.avg("amount").alias("avg_amount")] if avg else [])),
            key="key", timestamp="last_ts")
    return t


def test_a_replica_follows_a_rebuilt_store_to_its_new_generation_without_going_back(spark, tmp_path):
    log = EventLog(tmp_path / "log")
    log.create_topic("orders", partitions=shop.TOPICS["orders"])
    log.append_batch("orders", shop.generate_orders(600, customers=30, seed=31))
    first_load(_build(spark, log, avg=False), log, "shop", tmp_path / "state", STORES)
    old_topic, new_topic = changelog_topic("shop", "revenue"), changelog_topic("shop", "revenue", 1)

    rep = Replica(EventLogChangelog(log), "shop", tmp_path / "replica", stores=["revenue"]).start()
    src = ReplicaSource(rep)
    rgw = Gateway(src)
    try:
        wait_until(rep.caught_up, "the replica restored revenue", 60)
        assert rep.generations()["revenue"]["serving"] == old_topic
        log.append_batch("orders", shop.generate_orders(100, customers=30, seed=32, start_ts=1_700_050_000_000))
        app = StreamsApp(_build(spark, log, avg=True), application_id="shop", state_dir=tmp_path / "state")
        try:
            app.start()
            assert [(c.store, c.action) for c in app.upgrades.plan.changes] == [("revenue", "changed")]
            with SqlClient(rgw, {"revenue": QUERIES["revenue"]}, app) as client:
                wait_until(lambda: app.current_generation("revenue") == 1, "the active's swap", 240)
                log.append_batch("orders", shop.generate_orders(50, customers=30, seed=33,
                                                                start_ts=1_700_060_000_000))
                wait_until(lambda: rep.generations()["revenue"]["serving"] == new_topic, "the replica's swap", 120)
                wait_until(lambda: caught_up(app, log, STORES), "the active caught up", 180)
                # every partition: the answer's Position is the merge of the partitions', so one partition at
                # the end would make it look caught up while another still lacks the last batch
                wait_until(lambda: rep.caught_up() and _all_at(rep, app.positions()["revenue"]),
                           "every partition of the replica caught up with the active", 60)
                wait_until(lambda: old_topic not in log.list_topics(), "generation 0's changelog deleted", 30)
            assert client.failures == [] and client.went_back == [], (client.failures + client.went_back)[:5]
            assert client.answers > 0
            # the replica serves the new column, equal to the oracle over the log up to the replica's Position
            assert _check_revenue_v2(rgw, log) == 30
            assert rep.generations()["revenue"] == {"serving": new_topic, "local_generation": 1, "swaps": 1,
                                                    "building": None, "building_lag": None}
        finally:
            assert app.close(60)
    finally:
        rgw.close()
        src.close()  # the replica and its reader


def _all_at(rep: Replica, position: Position) -> bool:
    """Every partition the replica hosts answers at ``position`` (the active's, where every partition is alike)."""
    lags = rep.lags()
    return bool(lags) and all(lag.position == position for lag in lags)
