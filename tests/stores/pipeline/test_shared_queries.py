"""Stores over one stream share one streaming query (issue 23 item 4), and stay right store by store.

One app of six stores over ``orders``: four aggregations (update mode) share
one query, two tables of records (append mode) another. Checked against
DuckDB over the log: after catch-up, after a restart that must find the same
groups again, and after a member's file is deleted while running (that
member leaves its shared query and is rebuilt alone; the others go on).
"""

from __future__ import annotations

from pathlib import Path

import duckdb
import pytest

pytestmark = [pytest.mark.spark, pytest.mark.slow]
import pyspark  # noqa: E402,F401 - Spark tests run or fail, never skip quietly
from pyspark.sql import functions as F  # noqa: E402

from stores import State, StreamsApp, TimestampedRangeQuery, Topology  # noqa: E402
from stores.app import layout  # noqa: E402
from stores.log.eventlog import EventLog  # noqa: E402
from stores.pipeline.shared_query import shared_root  # noqa: E402
from tests.stores.pipeline.oracle import _all, caught_up, log_table, wait_for_state, wait_until  # noqa: E402

AGGREGATES = {  # store -> (Spark aggregation over orders, the oracle's SQL)
    "by_customer": (lambda o: o.groupBy("key").agg(F.sum("amount").alias("total")),
                    "SELECT key, round(sum(amount), 6) FROM orders GROUP BY key"),
    "by_item": (lambda o: o.groupBy("item").agg(F.count("*").alias("n")),
                "SELECT item, count(*) FROM orders GROUP BY item"),
    "max_amount": (lambda o: o.groupBy("key").agg(F.max("amount").alias("top")),
                   "SELECT key, round(max(amount), 6) FROM orders GROUP BY key"),
    "item_revenue": (lambda o: o.groupBy("item").agg(F.sum("amount").alias("revenue")),
                     "SELECT item, round(sum(amount), 6) FROM orders GROUP BY item"),
}
LATEST = {  # store -> the oracle's SQL (the last record of each key in log order)
    "last_amount": "SELECT key, amount FROM orders QUALIFY row_number() OVER (PARTITION BY key, part ORDER BY off DESC) = 1",
    "last_item": "SELECT key, item FROM orders QUALIFY row_number() OVER (PARTITION BY key, part ORDER BY off DESC) = 1",
}
STORES = tuple(AGGREGATES) + tuple(LATEST)


def build(spark, log, state_dir: Path) -> StreamsApp:
    t = Topology(spark, log)
    for name, (agg, _) in AGGREGATES.items():
        orders = t.stream("orders", value_schema="amount DOUBLE, item STRING")  # the same DataFrame each time
        t.table(name, agg(orders), key="item" if "item" in name else "key")
    orders = t.stream("orders", value_schema="amount DOUBLE, item STRING")
    t.table("last_amount", orders.select("key", "amount", "timestamp", "topic", "partition", "offset", "tombstone"), key="key")
    t.table("last_item", orders.select("key", "item", "timestamp", "topic", "partition", "offset", "tombstone"), key="key")
    return StreamsApp(t, application_id=f"shared-{state_dir.name}", state_dir=state_dir)


def orders(n: int, seed: int) -> list[tuple]:
    import random

    rng = random.Random(seed)
    return [(f"c{rng.randrange(40)}", {"amount": round(rng.uniform(1, 100), 2), "item": rng.choice("abcdefg")},
             1_700_000_000_000 + i) for i in range(n)]


def check_oracle(app: StreamsApp, log: EventLog) -> None:
    for store in STORES:
        pos, rows = _all(app, store, TimestampedRangeQuery.with_no_bounds())
        con = duckdb.connect()
        log_table(con, log, "orders", pos, ("amount", "item"), "orders")
        sql = AGGREGATES[store][1] if store in AGGREGATES else LATEST[store]
        want = {k: v for k, v in con.execute(sql).fetchall()}
        got = {}
        for kv in rows:
            v = next(iter(kv.value.value._asdict().values()))
            got[kv.key] = round(v, 6) if isinstance(v, float) else v
        assert got == want, f"store {store} at {pos}: {sorted(set(got.items()) ^ set(want.items()))[:6]}"


def shared_queries(spark, app: StreamsApp) -> list:
    return [q for q in spark.streams.active if q.name and q.name.startswith(f"{app.application_id}-shared-")]


def test_stores_over_one_stream_share_a_query_and_match_the_oracle(spark, tmp_path):
    log = EventLog(tmp_path / "log")
    log.create_topic("orders", partitions=4)
    log.append_batch("orders", orders(3000, seed=1))
    state = tmp_path / "state"
    app = build(spark, log, state)
    app.start()
    try:
        wait_for_state(app, State.RUNNING, 120)
        shared = shared_queries(spark, app)
        assert len(shared) == 2, [q.name for q in spark.streams.active]  # 4 aggregations + 2 tables of records
        ids = {q.id for q in shared}
        assert not [q.name for q in spark.streams.active if q.name and q.name.startswith(app.application_id)
                    and q.id not in ids], "every store of this app is in a shared query"
        log.append_batch("orders", orders(1000, seed=2))
        wait_until(lambda: caught_up(app, log, STORES), "the stores to catch up", 90)
        for q in shared:
            assert len(q.lastProgress["sources"]) == 1, "one source per shared query"
        check_oracle(app, log)

        # a member's file deleted while running: it leaves the shared query, is rebuilt alone; the others go on
        lost = layout.partition_path(state, "max_amount", 1, app.current_generation("max_amount"))
        for suffix in ("", "-wal", "-shm"):
            Path(f"{lost}{suffix}").unlink(missing_ok=True)
        log.append_batch("orders", orders(500, seed=4))
        wait_until(lambda: app.current_generation("max_amount") == 1, "max_amount rebuilt and swapped in", 120)
        wait_until(lambda: caught_up(app, log, STORES), "everything to catch up after the rebuild", 90)
        assert len(_own_queries(spark, app, "max_amount")) == 1
        assert len(shared_queries(spark, app)) == 2  # the others still share their queries
        check_oracle(app, log)
    finally:
        app.close(60)
    groups = sorted(p.parent.name for p in shared_root(state).glob("*/members.json"))
    assert len(groups) == 2

    # restarted: the same groups (their checkpoints hold the aggregations' state; the rebuilt store stays in
    # the union, detached, and keeps its own query), more records, still right
    log.append_batch("orders", orders(800, seed=3))
    app = build(spark, log, state)
    app.start()
    try:
        wait_for_state(app, State.RUNNING, 120)
        assert sorted(p.parent.name for p in shared_root(state).glob("*/members.json")) == groups
        assert len(shared_queries(spark, app)) == 2 and len(_own_queries(spark, app, "max_amount")) == 1
        log.append_batch("orders", orders(300, seed=5))
        wait_until(lambda: caught_up(app, log, STORES), "the restarted stores to catch up", 90)
        check_oracle(app, log)
        assert app.status()["health"]["status"] == "healthy"
    finally:
        app.close(60)


def _own_queries(spark, app: StreamsApp, store: str) -> list:
    return [q for q in spark.streams.active if q.name and q.name.startswith(f"{app.application_id}-{store}-")]
