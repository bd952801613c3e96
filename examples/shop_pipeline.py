"""The demo pipeline: orders per customer → revenue, revenue per minute, and each customer's order history.

This file follows the convention ``iqgate serve <file>`` and ``iqgate demo``
load: ``APPLICATION_ID``, ``TOPICS`` (created if missing) and
``build(spark, log) -> Topology``. ``generate_orders`` makes the same
synthetic events for the demo, the tests and the benchmarks.

Stores:

- ``revenue`` (timestamped key-value): ``revenue`` = sum(amount) and
  ``orders`` = count per customer; the record time is the latest order's.
- ``revenue_per_min`` (window store, 1-minute tumbling windows): ``revenue``
  and ``orders`` per customer and minute. The 10-minute watermark is wider
  than the lateness ``generate_orders`` produces, so no order is dropped.
- ``last_order`` (versioned): every order of a customer by event time, so
  ``FOR SYSTEM_TIME AS OF`` finds the order current at any instant.
"""

from __future__ import annotations

import random
from typing import Any

APPLICATION_ID = "shop"
TOPICS: dict[str, int] = {"orders": 4}
VALUE_SCHEMA = "amount DOUBLE, item STRING"
ITEMS = ("book", "lamp", "mug", "pen", "plant", "shirt", "tea", "umbrella")
WATERMARK = "10 minutes"
MAX_LATENESS_MS = 3 * 60_000


def build(spark: Any, log: Any, *, trigger: str = "100 milliseconds") -> Any:
    """Declare the shop's three stores over the ``orders`` topic."""
    from pyspark.sql import functions as F

    from stores import Topology

    t = Topology(spark, log, trigger=trigger)
    orders = t.stream("orders", value_schema=VALUE_SCHEMA)
    t.table("revenue",
            orders.groupBy("key").agg(F.sum("amount").alias("revenue"), F.count("*").alias("orders"),
                                      F.max("timestamp").alias("last_ts")),
            key="key", timestamp="last_ts")
    t.table("revenue_per_min",
            orders.withWatermark("timestamp", WATERMARK)
                  .groupBy(F.window("timestamp", "1 minute"), "key")
                  .agg(F.sum("amount").alias("revenue"), F.count("*").alias("orders")),
            key="key", window="window")
    t.versioned_table("last_order", orders, key="key", timestamp="timestamp")
    return t


def customer_id(i: int) -> str:
    return f"c{i:04d}"


def generate_orders(n: int, customers: int = 100, seed: int = 0, start_ts: int = 1_700_000_000_000,
                    *, step_ms: int = 1_000, late_fraction: float = 0.1) -> list[tuple[str, dict[str, Any], int]]:
    """``n`` deterministic orders as ``(key, value, timestamp)`` tuples ready for ``EventLog.append_batch``.

    Event time advances ``step_ms`` per order; ``late_fraction`` of the
    orders are stamped up to ``MAX_LATENESS_MS`` in the past, so the stream
    is out of order the way real event streams are.
    """
    if n < 0 or customers < 1:
        raise ValueError(f"need n >= 0 and customers >= 1, got n={n}, customers={customers}")
    rng = random.Random(seed)
    out = []
    for i in range(n):
        ts = start_ts + i * step_ms
        if rng.random() < late_fraction:
            ts -= rng.randint(1, MAX_LATENESS_MS)
        key = customer_id(rng.randrange(customers))
        value = {"amount": round(rng.uniform(1, 200), 2), "item": rng.choice(ITEMS)}
        out.append((key, value, ts))
    return out
