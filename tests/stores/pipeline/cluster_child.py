"""Runs the shop pipeline over Kafka on a Spark standalone cluster, checks it against the oracle, prints OK.

Usage: python cluster_child.py <spark master url> <bootstrap servers> <state dir>. Its own process, because
a SparkContext is one per process and the test run shares a local one. Exit 0 only if every store equals
the oracle at its Position and the work really ran in the cluster's executors.
"""

from __future__ import annotations

import importlib.util
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(ROOT))


def main() -> None:
    from stores import KafkaSource, State, StreamsApp
    from stores.pipeline.session import get_or_create
    from tests.stores.pipeline.oracle import caught_up, check_all

    master, servers, state_dir = sys.argv[1:4]
    spec = importlib.util.spec_from_file_location("shop_pipeline", ROOT / "examples" / "shop_pipeline.py")
    shop = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(shop)
    spark = get_or_create(master=master, conf={
        "spark.executor.memory": "512m", "spark.cores.max": "1", "spark.pyspark.python": sys.executable})
    src = KafkaSource(servers)
    app = StreamsApp(shop.build(spark, src), application_id="shop-cluster", state_dir=state_dir)
    app.start()
    deadline = time.monotonic() + 240
    while time.monotonic() < deadline and not (app.state is State.RUNNING
                                                and caught_up(app, src, ("revenue", "revenue_per_min", "last_order"))):
        if app.state.has_completed_shutdown():
            break
        time.sleep(0.5)
    assert app.state is State.RUNNING, f"the app is {app.state}"
    sizes = check_all(app, src, profiles=False)
    # counted after the work, not at start-up: an executor registers with the driver a moment after the
    # session exists (CI once counted 0 there although the pipeline then ran in the executor)
    executors = len(spark.sparkContext._jsc.sc().statusTracker().getExecutorInfos()) - 1  # minus the driver
    app.close(60)
    print(f"OK orders={sizes['orders']} executors={executors}", flush=True)
    print(f"UPGRADED revenue_keys={_upgrade(spark, src, state_dir)}", flush=True)
    spark.stop()


def _upgrade(spark: object, src: object, state_dir: str) -> int:
    """Issue 20 item 7 on the cluster: restart with ``revenue`` changed; it is rebuilt, swapped, and right."""
    import duckdb

    from gateway import Gateway
    from stores import StreamsApp
    from tests.stores.pipeline.oracle import caught_up, check_all, log_table, wait_until

    spec = importlib.util.spec_from_file_location("shop_v2", Path(__file__).with_name("shop_v2_pipeline.py"))
    v2 = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(v2)
    app = StreamsApp(v2.build(spark, src, new_store=False), application_id="shop-cluster", state_dir=state_dir)
    app.start()
    gw = Gateway(app)
    try:
        assert [(c.store, c.action) for c in app.upgrades.plan.changes if c.action != "unchanged"] == [
            ("revenue", "changed")], app.upgrades.plan.lines()
        wait_until(lambda: app.current_generation("revenue") == 1
                   and caught_up(app, src, ("revenue", "revenue_per_min", "last_order")), "the rebuild's swap", 240)
        check_all(app, src, profiles=False)
        res = gw.sql("SELECT key, avg_amount FROM revenue")
        con = duckdb.connect()
        log_table(con, src, "orders", res.position, ("amount", "item"), "orders_log")
        want = dict(con.execute("SELECT key, avg(amount) FROM orders_log GROUP BY key").fetchall())
        got = dict(res.rows())
        assert got.keys() == want.keys() and all(abs(got[k] - want[k]) <= 1e-9 * max(1.0, abs(want[k]))
                                                 for k in want), (got, want)
        return len(got)
    finally:
        gw.close()
        app.close(60)


if __name__ == "__main__":
    main()
