"""Store speed: KeyQuery latency and RangeQuery throughput on one SQLite store partition.

Goals (issue 2): KeyQuery on a 1M-key store <= 20 us p50 in-process;
RangeQuery streaming >= 1M rows/s into Python tuples. Each figure is printed
next to a plain dict doing the same work in the same run.

    python -m benchmarks.bench_stores [--quick]
"""

from __future__ import annotations

import random
import tempfile
import time
from pathlib import Path

from benchmarks.common import Figure, percentile, time_calls
from stores.app.reader import StateDirReader
from stores.app.streams import StoreTopology, StreamsApp
from stores.catalog.schema import Column, SqlType, StoreKind, StoreSpec
from stores.engine.change import Change
from stores.iqv2.position import Position, PositionBound
from stores.iqv2.query import KeyQuery, RangeQuery
from stores.iqv2.request import StateQueryRequest

__all__ = ["run"]

US = 1e6


def _load(state_dir: Path, n: int) -> StreamsApp:
    spec = StoreSpec("bench", StoreKind.KEY_VALUE, Column("k", SqlType.BIGINT), (Column("v", SqlType.BIGINT),),
                     partitions=1, source_topics=("t",))
    app = StreamsApp(StoreTopology([spec]), "bench", state_dir, synchronous="NORMAL",
                     coordination_base=state_dir / "coord")
    app.start()
    w = app.writer("bench")
    step = 100_000
    for b, lo in enumerate(range(0, n, step)):
        w.write_batch(b, [Change(k, (k * 3,)) for k in range(lo, min(n, lo + step))], Position.from_map({"t": {0: b}}))
    return app


def _p50_us(fn, n: int) -> float:  # noqa: ANN001
    return percentile(time_calls(fn, n, warmup=200, max_seconds=10.0), 50) * US


def run(quick: bool) -> list[Figure]:
    n = 50_000 if quick else 1_000_000
    calls = 5_000 if quick else 50_000
    figures: list[Figure] = []
    with tempfile.TemporaryDirectory(prefix="bench-stores-") as tmp:
        t0 = time.perf_counter()
        app = _load(Path(tmp) / "state", n)
        load_s = time.perf_counter() - t0
        baseline = {k: (k * 3,) for k in range(n)}
        rng = random.Random(1)
        keys = [rng.randrange(n) for _ in range(4096)]
        it = iter(range(10**12))

        def next_key() -> int:
            return keys[next(it) & 4095]

        dict_us = _p50_us(lambda: baseline.get(next_key()), calls)
        store = app.partition_store("bench", 0)
        unbounded = PositionBound.unbounded()
        bound = PositionBound.at({"t": {0: 0}})
        store_us = _p50_us(lambda: store.query(KeyQuery.with_key(next_key()), bound), calls)
        app_us = _p50_us(lambda: app.query(
            StateQueryRequest.in_store("bench").with_query(KeyQuery.with_key(next_key())).with_partitions({0})
            .with_position_bound(bound)), calls)
        reader = StateDirReader(Path(tmp) / "state")
        reader_us = _p50_us(lambda: reader.query(
            StateQueryRequest.in_store("bench").with_query(KeyQuery.with_key(next_key())).with_partitions({0})), calls)
        assert store.query(KeyQuery.with_key(7), unbounded).result == (21,)
        figures += [
            Figure("KeyQuery p50, partition store", store_us, "us", dict_us, "dict.get p50", "<= 20 us",
                   store_us <= 20, f"{n} keys"),
            Figure("KeyQuery p50, StreamsApp.query", app_us, "us", dict_us, "dict.get p50", "<= 20 us",
                   app_us <= 20, f"{n} keys, whole IQv2 request"),
            Figure("KeyQuery p50, StateDirReader.query", reader_us, "us", dict_us, "dict.get p50", "~10-20 us",
                   reader_us <= 20, f"{n} keys, read-only file"),
        ]

        def rate(fn) -> float:  # noqa: ANN001
            best = float("inf")
            for _ in range(5 if quick else 3):
                t = time.perf_counter()
                rows = fn()
                best = min(best, time.perf_counter() - t)
            assert rows == n, rows
            return n / best

        dict_rate = rate(lambda: len([(k, v[0]) for k, v in baseline.items()]))
        raw_rate = rate(lambda: len(store.query(RangeQuery.with_no_bounds(), unbounded).result.remaining_rows()))
        obj_rate = rate(lambda: sum(1 for _ in store.query(RangeQuery.with_no_bounds(), unbounded).result))
        figures += [
            Figure("RangeQuery rows/s, raw tuples", raw_rate, "rows/s", dict_rate, "dict items -> tuples",
                   ">= 1M rows/s", raw_rate >= 1e6, "RowIterator.remaining_rows()"),
            Figure("RangeQuery rows/s, KeyValue objects", obj_rate, "rows/s", dict_rate, "dict items -> tuples",
                   "", None, "iterating KeyValue(key, value tuple)"),
            Figure("store load (batch writes)", n / load_s, "rows/s", note=f"{n} keys in {load_s:.1f}s, batches of 100k"),
        ]
        reader.close()
        app.close(timeout_s=30)
        figures += _commit_latency(Path(tmp), 30 if quick else 200)
    return figures


def _commit_latency(tmp: Path, batches: int) -> list[Figure]:
    """One batch (100 upserts) into one partition: synchronous=FULL (the default) vs NORMAL."""
    spec = StoreSpec("c", StoreKind.KEY_VALUE, Column("k", SqlType.BIGINT), (Column("v", SqlType.BIGINT),),
                     partitions=1, source_topics=("t",))
    out = {}
    for mode in ("NORMAL", "FULL"):
        app = StreamsApp(StoreTopology([spec]), f"commit-{mode}", tmp / f"commit-{mode}", synchronous=mode,
                         coordination_base=tmp / "coord")
        app.start()
        w = app.writer("c")
        times = []
        for b in range(batches):
            changes = [Change(k, (b,)) for k in range(100)]
            t = time.perf_counter()
            w.write_batch(b, changes, Position.from_map({"t": {0: b}}))
            times.append(time.perf_counter() - t)
        out[mode] = percentile(times, 50) * 1e3
        app.close(timeout_s=30)
    return [Figure("batch commit p50, synchronous=FULL", out["FULL"], "ms", out["NORMAL"], "synchronous=NORMAL",
                   "", None, "100 upserts into one partition; FULL fsyncs the WAL on every commit")]


if __name__ == "__main__":
    from benchmarks.run import script

    script(run)
