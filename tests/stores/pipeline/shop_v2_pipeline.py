"""The shop pipeline one week later (issue 20): ``revenue`` gains ``avg_amount``, a new store ``orders_per_item``.

``revenue_per_min`` and ``last_order`` are declared exactly as in
examples/shop_pipeline.py, so an upgrade from that file must leave them
alone. A pipeline file of its own (the ``iqgate serve`` convention), so the
CLI tests can serve it on a data dir the original pipeline built.
"""

from __future__ import annotations

from typing import Any

APPLICATION_ID = "shop"
TOPICS: dict[str, int] = {"orders": 4}
VALUE_SCHEMA = "amount DOUBLE, item STRING"
WATERMARK = "10 minutes"


def build(spark: Any, log: Any, *, trigger: str = "100 milliseconds", max_records_per_batch: int | None = None,
          new_store: bool = True) -> Any:
    from pyspark.sql import functions as F

    from stores import Topology

    t = Topology(spark, log, trigger=trigger)
    orders = t.stream("orders", value_schema=VALUE_SCHEMA, max_records_per_batch=max_records_per_batch)
    t.table("revenue",
            orders.groupBy("key").agg(F.sum("amount").alias("revenue"), F.count("*").alias("orders"),
                                      F.max("timestamp").alias("last_ts"), F.avg("amount").alias("avg_amount")),
            key="key", timestamp="last_ts")
    t.table("revenue_per_min",
            orders.withWatermark("timestamp", WATERMARK)
                  .groupBy(F.window("timestamp", "1 minute"), "key")
                  .agg(F.sum("amount").alias("revenue"), F.count("*").alias("orders")),
            key="key", window="window")
    t.versioned_table("last_order", orders, key="key", timestamp="timestamp")
    if new_store:
        t.table("orders_per_item", orders.groupBy("item").agg(F.count("*").alias("orders")), key="item")
    return t
