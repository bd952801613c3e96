"""Issue 51's stores against what they replace, each caught up from a backlog on the same Spark session.

- a foreign-key join (``join_table(orders, users, on="user")``, KIP-213) and a
  stream-table join (``stream_table_join``, as of each order's time) against
  tables of records over the same two streams (``t.table`` of each: the
  inputs materialized, no join): what joining costs on top of reading;
- a table aggregate (count, sum, collect_list and topk per group, with
  retraction, over the users table) against Spark's own aggregation of the
  same stream into a store (no retraction, no lists): what exactness costs.

Each side starts on the whole backlog and runs until every store's Position
covers the log's end; start-up counts on both sides (as in bench_pipeline).
Goal for the joins ≥ 0.5× of the tables of records (a join reads both inputs
and writes a row per touched key), for the table aggregate ≥ 0.5× of
Spark's aggregation.

``python -m benchmarks.bench_joins [--quick]``
"""

from __future__ import annotations

import random
import time
from pathlib import Path
from typing import Any

from benchmarks.common import Figure, scratch_dir

QUICK = (20_000, 60_000)  # users, orders
FULL = (200_000, 1_000_000)


def _log(root: Path, users: int, orders: int) -> Any:
    from stores import EventLog

    log = EventLog(root / "log")
    log.create_topic("users", partitions=2)
    log.create_topic("orders", partitions=2)
    rnd = random.Random(7)
    ts = 1_700_000_000_000
    batch = 50_000
    for i in range(0, users * 2, batch):  # every user twice: an update (region moves) and some deletes
        log.append_batch("users", [(f"u{j % users}", None if rnd.random() < 0.03 else
                                    {"name": f"n{j}", "region": f"r{rnd.randrange(50)}", "amount": rnd.randrange(100)},
                                    ts + j) for j in range(i, min(i + batch, users * 2))])
    for i in range(0, orders, batch):
        log.append_batch("orders", [(f"o{j}", {"user": f"u{rnd.randrange(users)}", "price": rnd.randrange(1000)},
                                     ts + rnd.randrange(users * 2)) for j in range(i, min(i + batch, orders))])
    return log


def _catch_up(spark: Any, log: Any, root: Path, tag: str, declare: Any) -> float:
    """Seconds from start to every store covering the log's end."""
    from stores import State, StreamsApp, Topology
    from stores.iqv2.position import Position

    t = Topology(spark, log)
    users = t.stream("users", value_schema="name STRING, region STRING, amount BIGINT")
    orders = t.stream("orders", value_schema="user STRING, price BIGINT")
    names = declare(t, users, orders)
    end = Position.from_map({tp: log.last_offsets(tp) for tp in ("users", "orders")})
    app = StreamsApp(t, application_id=f"bench-joins-{tag}", state_dir=root / f"state-{tag}")
    t0 = time.perf_counter()
    app.start()
    try:
        deadline = t0 + 1800
        while time.perf_counter() < deadline:
            if app.state is State.ERROR:
                raise RuntimeError(f"{tag}: the app failed")
            pos = app.positions()
            done = all(all((pos[n].offset(tp, p) or -1) >= o for tp in app.catalog()[n].source_topics
                           for p, o in end.partition_positions(tp).items()) for n in names)
            if done:
                return time.perf_counter() - t0
            time.sleep(0.1)
        raise RuntimeError(f"{tag}: not caught up after 30 minutes")
    finally:
        app.close(60)


def run(quick: bool = False) -> list[Figure]:
    from pyspark.sql import functions as F

    from stores.pipeline.session import get_or_create

    users, orders = QUICK if quick else FULL
    root = scratch_dir("iqgate-bench-joins-")
    log = _log(root, users, orders)
    spark = get_or_create()
    total = users * 2 + orders

    def tables(t: Any, u: Any, o: Any) -> list[str]:
        t.table("users_t", u, key="key")
        t.table("orders_t", o, key="key")
        return ["users_t", "orders_t"]

    def fk(t: Any, u: Any, o: Any) -> list[str]:
        t.join_table("orders_users", o, u, on="user", how="left")
        return ["orders_users"]

    def as_of(t: Any, u: Any, o: Any) -> list[str]:
        t.stream_table_join("orders_asof", o, u, on="user", how="left")
        return ["orders_asof"]

    def spark_agg(t: Any, u: Any, o: Any) -> list[str]:
        t.table("by_region_spark", u.groupBy("region").agg(F.count("*").alias("n"), F.sum("amount").alias("total")),
                key="region")
        return ["by_region_spark"]

    def table_agg(t: Any, u: Any, o: Any) -> list[str]:
        t.table_aggregate("by_region", u, group_by="region", count="n", sums={"total": "amount"},
                          collect_lists={"names": "name"}, topks={"top": ("amount", 3)})
        return ["by_region"]

    _catch_up(spark, log, root, "warmup", tables)  # the first Spark runs of a JVM are slower
    secs = {tag: _catch_up(spark, log, root, tag, fn) for tag, fn in
            (("tables", tables), ("fk", fk), ("asof", as_of), ("spark_agg", spark_agg), ("table_agg", table_agg))}
    rate = {k: total / v for k, v in secs.items()}
    agg_rate = {k: users * 2 / secs[k] for k in ("spark_agg", "table_agg")}
    note = f"{users:,} users (each twice, 3% deletes), {orders:,} orders; start -> caught up, start-up included"
    return [
        Figure("foreign-key join (join_table, KIP-213) ingest", rate["fk"], "records/s", rate["tables"],
               "tables of records of both inputs", ">= 0.5x", rate["fk"] >= 0.5 * rate["tables"], note=note),
        Figure("stream-table join (as of each record's time) ingest", rate["asof"], "records/s", rate["tables"],
               "tables of records of both inputs", ">= 0.5x", rate["asof"] >= 0.5 * rate["tables"], note=note),
        Figure("table aggregate (count, sum, collect_list, topk; retraction) ingest", agg_rate["table_agg"],
               "records/s", agg_rate["spark_agg"], "Spark's aggregation (count, sum; no retraction)", ">= 0.5x",
               agg_rate["table_agg"] >= 0.5 * agg_rate["spark_agg"], note=note),
    ]


if __name__ == "__main__":
    from benchmarks.run import script

    script(run)
