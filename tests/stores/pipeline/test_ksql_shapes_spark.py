"""What ksqlDB users expect, on a real Spark (issue 16): composite keys and nested values, end to end.

One app, started once: ``sales`` is ``groupBy("region", "product")`` with
``collect_list``, a STRUCT and a MAP built from the aggregates; each store's
content is checked at its own Position against DuckDB over the raw records
of the event log, and through SQL (key lookups, key-prefix ranges, DuckDB's
nested functions) against the same oracle.
"""

from __future__ import annotations

import random
from pathlib import Path

import duckdb
import pytest

pytestmark = [pytest.mark.spark]
import pyspark  # noqa: E402,F401 - Spark tests run or fail, never skip quietly
from pyspark.sql import functions as F  # noqa: E402

from gateway.engine import Gateway  # noqa: E402
from stores import RangeQuery, State, StateQueryRequest, StreamsApp, Topology  # noqa: E402
from stores.log.eventlog import EventLog  # noqa: E402
from tests.stores.pipeline.oracle import caught_up, wait_for_state, wait_until  # noqa: E402

REGIONS = ("eu", "us", "asia", "e")


def sale_events(n: int, seed: int, start_ts: int) -> list[tuple]:
    rnd = random.Random(seed)
    out = []
    for i in range(n):
        region = rnd.choice(REGIONS)
        value = {"region": region, "product": rnd.randrange(6), "units": rnd.randrange(1, 20),
                 "item": rnd.choice("abcdef")}
        out.append((f"{region}-{i}", value, start_ts + i * 1000))
    return out


def build(spark, log: EventLog) -> Topology:  # noqa: ANN001
    t = Topology(spark, log)
    sales = t.stream("sales", value_schema="region STRING, product BIGINT, units BIGINT, item STRING")
    agg = (sales.groupBy("region", "product")
           .agg(F.sum("units").alias("units"), F.count("*").alias("orders"), F.collect_list("item").alias("items"),
                F.max("timestamp").alias("last_ts"))
           .withColumn("summary", F.struct(F.col("units").alias("units"), F.col("orders").alias("orders")))
           .withColumn("stats", F.create_map(F.lit("units"), F.col("units"), F.lit("orders"), F.col("orders"))))
    t.table("sales", agg, key=["region", "product"], timestamp="last_ts")
    return t


def _oracle(log: EventLog, position) -> duckdb.DuckDBPyConnection:  # noqa: ANN001
    con = duckdb.connect()
    con.execute("CREATE TABLE ev (region VARCHAR, product BIGINT, units BIGINT, item VARCHAR, ts BIGINT)")
    rows = []
    for p in range(log.partitions("sales")):
        last = position.offset("sales", p)
        if last is not None:
            rows += [(r.value["region"], r.value["product"], r.value["units"], r.value["item"], r.timestamp)
                     for r in log.read("sales", p, 0, last + 1)]
    con.executemany("INSERT INTO ev VALUES (?, ?, ?, ?, ?)", rows)
    con.execute("""CREATE TABLE want AS SELECT region, product, sum(units)::BIGINT AS units, count(*) AS orders,
                   list_sort(list(item)) AS items, max(ts) AS last_ts FROM ev GROUP BY ALL""")
    return con


def _store_rows(app: StreamsApp):  # noqa: ANN202
    res = app.query(StateQueryRequest.in_store("sales").with_query(RangeQuery.with_no_bounds()))
    rows = {}
    for qr in res.partition_results.values():
        assert qr.is_success, qr.failure_message
        for kv in qr.result:
            rows[kv.key] = kv.value
    return res.position, rows


def test_composite_keys_and_nested_values_match_the_oracle(spark, tmp_path: Path) -> None:  # noqa: ANN001
    log = EventLog(tmp_path / "log")
    log.create_topic("sales", partitions=3)
    log.append_batch("sales", sale_events(300, seed=1, start_ts=1_700_000_000_000))
    app = StreamsApp(build(spark, log), application_id="ksql-shapes", state_dir=tmp_path / "state")
    try:
        app.start()
        wait_for_state(app, State.RUNNING)
        spec = app.catalog()["sales"]
        assert [c.name for c in spec.key_columns()] == ["region", "product"]
        assert {c.name: c.type.value for c in spec.values} == {
            "units": "BIGINT", "orders": "BIGINT", "items": "VARCHAR[]",
            "summary": "STRUCT(units BIGINT, orders BIGINT)", "stats": "MAP(VARCHAR, BIGINT)"}
        for round_ in range(2):
            if round_:  # more records: the updated aggregates replace the old ones, nested values included
                log.append_batch("sales", sale_events(150, seed=2, start_ts=1_700_001_000_000))
                wait_until(lambda: caught_up(app, log, ("sales",)), "sales to catch up", 90)
            position, rows = _store_rows(app)
            con = _oracle(log, position)
            want = {(r, p): (u, o, items, ts) for r, p, u, o, items, ts in con.execute("SELECT * FROM want").fetchall()}
            got = {k: (v.units, v.orders, sorted(v.items), None) for k, v in rows.items()}
            assert {k: g[:3] for k, g in got.items()} == {k: w[:3] for k, w in want.items()}
            for k, v in rows.items():
                assert v.summary == {"units": v.units, "orders": v.orders}
                assert v.stats == {"units": v.units, "orders": v.orders}

            gw = Gateway(app)
            con.execute("CREATE TABLE sales AS SELECT region, product, units, orders, items FROM want")
            for sql in ["SELECT region, product, units, orders, list_sort(items) FROM sales WHERE region = 'eu' AND product = 3",
                        "SELECT region, product, units FROM sales WHERE region = 'asia'",
                        "SELECT region, product, units FROM sales WHERE region = 'us' AND product BETWEEN 1 AND 4",
                        "SELECT region, sum(units), count(*) FROM sales GROUP BY region",
                        "SELECT region, product, unnest(items) AS item FROM sales WHERE region = 'e'"]:
                got_sql = sorted(gw.sql(sql, position=position).rows(), key=repr)
                assert got_sql == sorted(con.execute(sql).fetchall(), key=repr), sql
            nested = gw.sql("SELECT summary.units, stats['orders'], len(items) FROM sales WHERE region = 'eu' AND "
                            "product = 3", position=position).rows()
            k = ("eu", 3)
            assert nested == ([(want[k][0], want[k][1], want[k][1])] if k in want else [])
            plan = "\n".join(r[0] for r in gw.sql("EXPLAIN SELECT * FROM sales WHERE region = 'eu' AND product = 3").rows())
            assert "KeyQuery{key=('eu', 3)" in plan
    finally:
        app.close()
