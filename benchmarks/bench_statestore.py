"""SQL point lookup through iqgate vs Spark's State Data Source reader (``format("statestore")``).

The statestore reader is what a Spark user has today to look into streaming
state: it has no filter pushdown, so a point lookup is a Spark batch job over
every state partition. Both read the same pipeline's state: the reader from
the checkpoint, iqgate from its stores (``Gateway.open`` over the state dir,
as a separate gateway worker would). Goal: iqgate ≥ 200× faster.
"""

from __future__ import annotations

import random
import time

from benchmarks.common import Figure, median, scratch_dir, time_calls

TOPIC = "orders"


def _fill(log: object, events: int, keys: int) -> None:
    rng = random.Random(7)
    batch = []
    for i in range(events):
        batch.append((f"c{rng.randrange(keys):06d}", {"amount": float(i % 100)}, 1_700_000_000_000 + i))
        if len(batch) == 50_000:
            log.append_batch(TOPIC, batch)  # type: ignore[attr-defined]
            batch = []
    if batch:
        log.append_batch(TOPIC, batch)  # type: ignore[attr-defined]


def run(quick: bool) -> list[Figure]:
    from pyspark.sql import functions as F

    from gateway import Gateway
    from stores import EventLog, State, StreamsApp
    from stores.pipeline.materializer import last_committed_batch
    from stores.pipeline.session import get_or_create
    from stores.pipeline.topology import Topology

    events, keys = (20_000, 5_000) if quick else (1_000_000, 100_000)
    root = scratch_dir("iqgate-bench-statestore-")
    log = EventLog(root / "log")
    log.create_topic(TOPIC, partitions=4)
    _fill(log, events, keys)

    spark = get_or_create()
    t = Topology(spark, log)
    orders = t.stream(TOPIC, value_schema="amount DOUBLE")
    t.table("revenue", orders.groupBy("key").agg(F.sum("amount").alias("revenue")), key="key")
    app = StreamsApp(t, application_id="bench-statestore", state_dir=root / "state")
    app.start()
    deadline = time.monotonic() + (300 if quick else 1200)
    checkpoint = str(root / "state" / "checkpoints" / "revenue")
    # RUNNING means the store applied the batch; Spark writes the batch's commit (what the statestore reader
    # needs) only after foreachBatch returns, so wait for that too before stopping the query
    while app.state is not State.RUNNING or last_committed_batch(checkpoint) is None:
        if app.state in (State.ERROR, State.PENDING_ERROR) or time.monotonic() > deadline:
            raise RuntimeError(f"pipeline did not reach RUNNING with a committed batch (state {app.state})")
        time.sleep(0.2)
    app.close(60)

    probe_keys = [f"c{random.Random(i).randrange(keys):06d}" for i in range(20)]

    def reader_lookup(k: str) -> list:
        return spark.read.format("statestore").load(checkpoint).filter(F.col("key.key") == k).collect()

    reader_lookup(probe_keys[0])  # warm the reader's code path
    reader_times = []
    for k in probe_keys[: 5 if quick else 10]:
        t0 = time.perf_counter()
        rows = reader_lookup(k)
        reader_times.append(time.perf_counter() - t0)
        assert len(rows) == 1, f"statestore reader found {len(rows)} rows for {k}"

    gw = Gateway.open(root / "state")
    it = iter(probe_keys * 1000)
    check = gw.sql("SELECT revenue FROM revenue WHERE key = ?", params=[probe_keys[0]]).fetchall()
    assert len(check) == 1, check
    iq_times = time_calls(lambda: gw.sql("SELECT revenue FROM revenue WHERE key = ?", params=[next(it)]).fetchall(),
                          2000 if quick else 10_000, max_seconds=20)
    gw.close()

    reader_p50, iq_p50 = median(reader_times), median(iq_times)
    speedup = reader_p50 / iq_p50
    return [
        Figure(f"SQL point lookup, {keys:,} keys (Gateway.open) p50", iq_p50 * 1e6, "us",
               baseline=reader_p50 * 1e6, baseline_name="statestore reader + filter",
               goal=">= 200x faster", met=speedup >= 200,
               note=f"speed-up {speedup:,.0f}x"),
    ]


if __name__ == "__main__":
    from benchmarks.run import script

    script(run)
