"""The pipeline's cost over bare Spark: freshness (append → visible through app.query) and ingest rate.

Baseline, measured in the same run on the same session: the same iqlog
source and the same aggregation, with a foreachBatch that only executes the
batch (``noop`` write) and notes its end offsets: Spark's floor for that
pipeline. Goals: freshness p50/p99 ≤ 1.25× the floor, ingest ≥ 0.8×.
Peak memory is the RSS of this process and all its children (the JVM and
Python workers), sampled while the benchmark runs.

``python -m benchmarks.bench_pipeline [--quick]``
"""

from __future__ import annotations

import os
import random
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from benchmarks.common import Figure, percentile

TOPIC = "orders"
TRIGGER = "100 milliseconds"


class TreeMemory:
    """Samples the summed RSS of this process and its descendants (the JVM is a child of Python)."""

    def __init__(self, every_s: float = 0.2) -> None:
        self.peak = 0
        self._stop = threading.Event()
        self._t = threading.Thread(target=self._loop, args=(every_s,), daemon=True)

    def __enter__(self) -> TreeMemory:
        self._t.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._t.join(5)

    def _loop(self, every_s: float) -> None:
        while not self._stop.wait(every_s):
            self.peak = max(self.peak, _tree_rss(os.getpid()))


def _tree_rss(root: int) -> int:
    children: dict[int, list[int]] = {}
    rss: dict[int, int] = {}
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            with open(f"/proc/{d}/stat") as f:
                parts = f.read().rsplit(")", 1)[1].split()
            children.setdefault(int(parts[1]), []).append(int(d))
            rss[int(d)] = int(parts[21]) * os.sysconf("SC_PAGE_SIZE")
        except (OSError, IndexError, ValueError):
            continue
    total, stack = 0, [root]
    while stack:
        pid = stack.pop()
        total += rss.get(pid, 0)
        stack.extend(children.get(pid, ()))
    return total


def _fill(log: Any, events: int, keys: int, seed: int = 7) -> None:
    rng = random.Random(seed)
    batch = []
    for i in range(events):
        batch.append((f"c{rng.randrange(keys):06d}", {"amount": float(i % 100)}, 1_700_000_000_000 + i))
        if len(batch) == 50_000:
            log.append_batch(TOPIC, batch)
            batch = []
    if batch:
        log.append_batch(TOPIC, batch)


def _aggregation(t: Any) -> Any:
    from pyspark.sql import functions as F

    orders = t.stream(TOPIC, value_schema="amount DOUBLE")
    return orders.groupBy("key").agg(F.sum("amount").alias("revenue"), F.count("*").alias("orders"))


class BareQuery:
    """The baseline: same source and aggregation, foreachBatch executes the batch and records its end offsets."""

    def __init__(self, spark: Any, t: Any, checkpoint: Path) -> None:
        from stores.pipeline.materializer import (
            position_from_offsets,
            read_batch_offsets,
        )

        self.done: list[tuple[float, Any]] = []  # (time, Position) after each batch
        self._cv = threading.Condition()

        def sink(df: Any, batch_id: int) -> None:
            df.write.format("noop").mode("overwrite").save()
            pos = position_from_offsets(read_batch_offsets(checkpoint, batch_id)[0])
            with self._cv:
                self.done.append((time.perf_counter(), pos))
                self._cv.notify_all()

        self.query = (_aggregation(t).writeStream.outputMode("update").foreachBatch(sink)
                      .option("checkpointLocation", str(checkpoint)).trigger(processingTime=TRIGGER).start())

    def wait_for(self, partition: int, offset: int, timeout_s: float = 120.0) -> float:
        """perf_counter time of the first batch whose end covers ``offset`` of ``partition``."""
        deadline = time.perf_counter() + timeout_s
        with self._cv:
            while True:
                for at, pos in self.done:
                    o = pos.offset(TOPIC, partition)
                    if o is not None and o >= offset:
                        return at
                left = deadline - time.perf_counter()
                if left <= 0:
                    raise TimeoutError(f"bare query did not reach offset {offset} of partition {partition}")
                self._cv.wait(min(left, 0.05))

    def stop(self) -> None:
        self.query.stop()


def _visible_at(app: Any, partition: int, offset: int, key: str, timeout_s: float = 120.0) -> float:
    from stores import KeyQuery, Position, PositionBound, StateQueryRequest

    req = (StateQueryRequest.in_store("revenue").with_query(KeyQuery.with_key(key)).with_partitions({partition})
           .with_position_bound(PositionBound.at(Position.from_map({TOPIC: {partition: offset}}))))
    deadline = time.perf_counter() + timeout_s
    while time.perf_counter() < deadline:
        if app.query(req).partition_results[partition].is_success:
            return time.perf_counter()
        time.sleep(0.02)
    raise TimeoutError(f"offset {offset} of partition {partition} never became visible")


def event_log(root: Path, name: str) -> Any:
    from stores import EventLog

    return EventLog(root / name)


def _freshness(spark: Any, root: Path, samples: int, source: Any = event_log) -> tuple[list[float], list[float]]:
    """Append → visible, ours then bare; a bare warm-up round first so neither side pays the JIT's warm-up."""
    from stores import StreamsApp, Topology

    log = source(root, "fresh-log")
    log.create_topic(TOPIC, partitions=2)
    _fill(log, 1000, 100)
    _bare_samples(spark, log, root / "fresh-warmup-ck", max(3, samples // 4))
    t = Topology(spark, log, trigger=TRIGGER)
    t.table("revenue", _aggregation(t), key="key")
    app = StreamsApp(t, application_id=f"bench-fresh-{root.name}", state_dir=root / "fresh-state", synchronous="NORMAL")
    ours: list[float] = []
    app.start()
    try:
        _wait_running(app)
        for i in range(samples):
            t0 = time.perf_counter()
            [(p, o)] = log.append_batch(TOPIC, [(f"k{i % 10}", {"amount": 1.0}, None)])
            ours.append(_visible_at(app, p, o, f"k{i % 10}") - t0)
            time.sleep(0.05 + random.random() * 0.1)  # land at random points of the trigger interval
    finally:
        app.close(60)
    return ours, _bare_samples(spark, log, root / "fresh-bare-ck", samples)


def _bare_samples(spark: Any, log: Any, checkpoint: Path, samples: int) -> list[float]:
    from stores import Topology

    bare = BareQuery(spark, Topology(spark, log, trigger=TRIGGER), checkpoint)
    out = []
    try:
        for p, o in log.last_offsets(TOPIC).items():
            bare.wait_for(p, o)
        for i in range(samples):
            t0 = time.perf_counter()
            [(p, o)] = log.append_batch(TOPIC, [(f"k{i % 10}", {"amount": 1.0}, None)])
            out.append(bare.wait_for(p, o) - t0)
            time.sleep(0.05 + random.random() * 0.1)
    finally:
        bare.stop()
    return out


def _wait_running(app: Any, timeout_s: float = 300.0) -> None:
    from stores import State

    deadline = time.monotonic() + timeout_s
    while app.state is not State.RUNNING:
        if app.state.has_completed_shutdown() or time.monotonic() > deadline:
            raise RuntimeError(f"app did not reach RUNNING (state {app.state})")
        time.sleep(0.05)


def _ingest(spark: Any, root: Path, events: int, keys: int, source: Any = event_log) -> tuple[float, float, float]:
    """(ours rec/s, bare rec/s, append rec/s): each query starts on the full backlog and runs to its end."""
    from stores import StreamsApp, Topology

    log = source(root, "ingest-log")
    log.create_topic(TOPIC, partitions=4)
    t0 = time.perf_counter()
    _fill(log, events, keys)
    append_rate = events / (time.perf_counter() - t0)
    end = log.last_offsets(TOPIC)

    tb = Topology(spark, log, trigger=TRIGGER)
    t0 = time.perf_counter()
    bare = BareQuery(spark, tb, root / "ingest-bare-ck")
    try:
        done = max(bare.wait_for(p, o, 900) for p, o in end.items())
    finally:
        bare.stop()
    bare_rate = events / (done - t0)

    t = Topology(spark, log, trigger=TRIGGER)
    t.table("revenue", _aggregation(t), key="key")
    app = StreamsApp(t, application_id=f"bench-ingest-{root.name}", state_dir=root / "ingest-state", synchronous="NORMAL")
    t0 = time.perf_counter()
    app.start()
    try:
        _wait_running(app, 900)  # RUNNING = caught up with the log as it was at start
        ours_rate = events / (time.perf_counter() - t0)
    finally:
        app.close(60)
    return ours_rate, bare_rate, append_rate


def run(quick: bool) -> list[Figure]:
    from stores.pipeline.session import get_or_create

    samples = 8 if quick else 60
    events, keys = (50_000, 5_000) if quick else (1_000_000, 100_000)
    root = Path(tempfile.mkdtemp(prefix="iqgate-bench-pipeline-"))
    with TreeMemory() as mem:
        spark = get_or_create()
        ours, bare = _freshness(spark, root, samples)
        ours_rate, bare_rate, append_rate = _ingest(spark, root, events, keys)
    figs = []
    for p in (50, 99):
        v, b = percentile(ours, p) * 1000, percentile(bare, p) * 1000
        figs.append(Figure(f"pipeline freshness p{p} (append -> visible in app.query)", v, "ms", b,
                           "bare Spark foreachBatch (noop)", "<= 1.25x", v <= 1.25 * b,
                           note=f"{len(ours)} samples, trigger {TRIGGER}"))
    figs.append(Figure(f"pipeline ingest, {events:,} events / {keys:,} keys", ours_rate, "records/s", bare_rate,
                       "bare Spark aggregation (noop sink)", ">= 0.8x", ours_rate >= 0.8 * bare_rate,
                       note="from query start until caught up, start-up included on both sides"))
    figs.append(Figure("EventLog append_batch (fsync per partition)", append_rate, "records/s"))
    figs.append(Figure("pipeline benchmark peak memory (process tree)", mem.peak / 2**20, "MB",
                       note="this process + JVM + Python workers"))
    return figs


if __name__ == "__main__":
    from benchmarks.run import script

    script(run)
