"""Live feeds and live answers (issue 46): ingest with 1,000 subscriptions against none, memory per idle
subscription, and how long after its commit a change reaches a subscriber: below the gateway (``stores.live``
feeds in this process) and through the HTTP face (a real ``iqgate serve`` and HTTP subscribers: ``live_http``).

Goals: 1,000 concurrent subscriptions on one server, each <= 1 MB of server memory, while ingest keeps >= 0.9x
its speed without subscribers; a change delivered p50 <= 1.1x produce -> visible to a pull query.

Measured in one process without Spark, the way the pipeline host writes (ChangelogWriter over the embedded log,
SQLite NORMAL): ingest alternates runs without and with the subscriptions (990 following one key each, as
dashboards do, 10 following the whole store, all read by one thread) and compares medians. Memory is the
tracemalloc growth of opening 1,000 feeds after the first (the shared tail and snapshot are the store's, not a
feed's). Latency: a writer commits small batches at random moments; the baseline is the moment the commit
returns (the earliest a pull query can see the change), the figure the moment a feed hands the change out.
Without Spark there is no micro-batch wait in produce -> visible, so the ratio here is the worst case: with a
pipeline's trigger interval in both, the added milliseconds are what counts (printed beside it).

    python -m benchmarks.bench_live [--quick]
"""

from __future__ import annotations

import collections
import random
import statistics
import threading
import time
import tracemalloc
from pathlib import Path
from typing import Any

from benchmarks.common import Figure, percentile, scratch_dir
from benchmarks.live_http import HttpWatch, http_latency, http_many
from stores.app.streams import StoreTopology, StreamsApp
from stores.catalog.schema import Column, SqlType, StoreKind, StoreSpec
from stores.engine.change import Change
from stores.iqv2.position import Position
from stores.live import Changes, LiveFeeds
from stores.log.eventlog import EventLog
from stores.pipeline.changelogs import ChangelogWriters

__all__ = ["run"]

SPEC = StoreSpec("revenue", StoreKind.KEY_VALUE, Column("k", SqlType.VARCHAR),
                 (Column("total", SqlType.DOUBLE), Column("n", SqlType.BIGINT)), 4, ("orders",))
FEEDS = 1000


class _Topology(StoreTopology):
    changelogs = True
    log: EventLog


def _open(root: Path, name: str) -> tuple[StreamsApp, ChangelogWriters]:
    log = EventLog(root / f"{name}-log")
    t = _Topology([SPEC])
    t.log = log
    app = StreamsApp(t, application_id=name, state_dir=root / f"{name}-state", synchronous="NORMAL",
                     coordination_base=root / "coord")
    app.start()
    return app, ChangelogWriters(t, app)


def _batch(rng: random.Random, keys: int, rows: int, i: int) -> list[Change]:
    return [Change(f"c{rng.randrange(keys):07d}", (float(i), i)) for _ in range(rows)]


def _ingest(root: Path, name: str, batches: int, rows: int, keys: int, feeds: int, full: int) -> float:
    """Rows per second written through the changelog writer, with ``feeds`` subscriptions read meanwhile
    (``full`` of them following the whole store, the others a key each)."""
    app, writers = _open(root, name)
    rng = random.Random(7)
    stop = threading.Event()
    reader: threading.Thread | None = None
    live = LiveFeeds(app)
    try:
        w = writers.get("revenue", None)
        w.write_batch(0, _batch(rng, keys, rows, 0), Position.from_map({"orders": {0: 0}}))
        if feeds:
            subs = [live.open_feed("revenue", snapshot=False, keys=[f"c{i * 97 % keys:07d}"], heartbeat_s=1.0)
                    for i in range(feeds - full)]
            subs += [live.open_feed("revenue", snapshot=False) for _ in range(full)]
            ready: collections.deque[Any] = collections.deque(subs)
            woken = threading.Event()
            for f in subs:  # a server waits on its subscriptions without a thread each: woken when one has news
                f.add_waker(lambda f=f: (ready.append(f), woken.set()))

            def read() -> None:
                while not stop.is_set():
                    woken.wait(0.5)
                    woken.clear()
                    while ready:
                        f = ready.popleft()
                        while f.poll(0) is not None:
                            pass

            reader = threading.Thread(target=read, daemon=True)
            reader.start()
        t0 = time.perf_counter()
        for i in range(1, batches + 1):
            w.write_batch(i, _batch(rng, keys, rows, i), Position.from_map({"orders": {0: i}}))
        return batches * rows / (time.perf_counter() - t0)
    finally:
        stop.set()
        if reader is not None:
            reader.join(10)
        live.close()
        app.close()


def _memory_per_feed(root: Path, keys: int) -> float:
    """Bytes of Python memory one more idle subscription holds."""
    app, writers = _open(root, "mem")
    rng = random.Random(3)
    try:
        w = writers.get("revenue", None)
        for i in range(5):
            w.write_batch(i, _batch(rng, keys, 2000, i), Position.from_map({"orders": {0: i}}))
        with LiveFeeds(app) as live:
            first = live.open_feed("revenue")
            while first.poll(0.5) is not None:  # its snapshot and progress: the store's share, shared by all
                pass
            tracemalloc.start()
            before = tracemalloc.take_snapshot()
            feeds = [live.open_feed("revenue") for _ in range(FEEDS)]
            for f in feeds:  # each takes its snapshot (the shared one) and becomes idle
                while f.poll(0) is not None:
                    pass
            after = tracemalloc.take_snapshot()
            tracemalloc.stop()
            grown = sum(s.size_diff for s in after.compare_to(before, "filename"))
            assert len(feeds) == FEEDS
            return grown / FEEDS
    finally:
        app.close()


def _latency(root: Path, samples: int) -> tuple[list[float], list[float]]:
    """(commit returned, feed handed out) seconds after each small batch's write call began."""
    app, writers = _open(root, "lat")
    rng = random.Random(5)
    try:
        w = writers.get("revenue", None)
        w.write_batch(0, _batch(rng, 1000, 10, 0), Position.from_map({"orders": {0: 0}}))
        with LiveFeeds(app) as live:
            feed = live.open_feed("revenue", snapshot=False)
            delivered: dict[int, float] = {}
            done = threading.Event()

            def read() -> None:
                while not done.is_set():
                    ev = feed.poll(0.2)
                    if isinstance(ev, Changes):
                        delivered[int(ev.position.offset("orders", 0) or 0)] = time.perf_counter()

            t = threading.Thread(target=read, daemon=True)
            t.start()
            started: dict[int, float] = {}
            visible: dict[int, float] = {}
            for i in range(1, samples + 1):
                time.sleep(0.02 + rng.random() * 0.05)
                started[i] = time.perf_counter()
                w.write_batch(i, _batch(rng, 1000, 10, i), Position.from_map({"orders": {0: i}}))
                visible[i] = time.perf_counter()
            deadline = time.monotonic() + 10
            while len(delivered) < samples and time.monotonic() < deadline:
                time.sleep(0.01)
            done.set()
            t.join(5)
        got = [i for i in started if i in delivered]
        return [visible[i] - started[i] for i in got], [delivered[i] - started[i] for i in got]
    finally:
        app.close()


def _spark_latency(root: Path, samples: int, http_visible: list[float], http_delivered: list[float]
                   ) -> tuple[list[float], list[float]]:
    """A Spark pipeline (the revenue aggregation, trigger 100 ms): per appended record, (append -> visible to a
    pull query, append -> delivered by a feed following its key), measured on the same appends; and through the
    HTTP face (``http_visible``, ``http_delivered``: an ``iqgate serve --state-dir`` beside the pipeline)."""
    from benchmarks.bench_pipeline import TOPIC, TRIGGER, _aggregation, _fill, _visible_at, _wait_running
    from stores import Topology
    from stores.pipeline.session import get_or_create

    spark = get_or_create()
    log = EventLog(root / "spark-log")
    log.create_topic(TOPIC, partitions=2)
    _fill(log, 1000, 100)
    t = Topology(spark, log, trigger=TRIGGER)
    t.table("revenue", _aggregation(t), key="key")
    app = StreamsApp(t, application_id="bench-live-spark", state_dir=root / "spark-state", synchronous="NORMAL")
    app.start()
    visible: list[float] = []
    delivered: list[float] = []
    watch = None
    try:
        _wait_running(app)
        watch = HttpWatch(Path(app.state_dir))  # the same appends through the HTTP face
        with LiveFeeds(app) as live:
            rng = random.Random(9)
            for i in range(samples):
                key = f"k{i}"
                feed = live.open_feed("revenue", snapshot=False, keys=[key], heartbeat_s=30)
                got: list[float] = []
                t_reader = threading.Thread(target=lambda f=feed: got.append(_first_change(f)), daemon=True)
                t_reader.start()
                t0 = time.perf_counter()
                [(p, o)] = log.append_batch(TOPIC, [(key, {"amount": 1.0}, None)])
                seen: list[float] = []  # the HTTP pull asks at once, beside the in-process one
                t_http = threading.Thread(target=lambda p=p, o=o, key=key: seen.append(watch.visible(TOPIC, p, o, key)),
                                          daemon=True)
                t_http.start()
                visible.append(_visible_at(app, p, o, key) - t0)
                t_http.join(120)
                http_visible.append(seen[0] - t0 if seen else float("nan"))
                t_reader.join(60)
                delivered.append(got[0] - t0)
                http_delivered.append(watch.delivered(key) - t0)
                feed.close()
                time.sleep(0.05 + rng.random() * 0.1)  # land at random points of the trigger interval
    finally:
        if watch is not None:
            watch.close()
        app.close(60)
    return visible, delivered


def _first_change(feed: Any) -> float:
    for _ in range(10_000):
        if isinstance(feed.poll(1.0), Changes):
            return time.perf_counter()
    return float("nan")


def run(quick: bool) -> list[Figure]:
    root = scratch_dir("bench-live-")
    batches, rows, keys = (20, 5000, 50_000) if quick else (60, 20_000, 500_000)
    rates: dict[str, list[float]] = {"bare": [], "keys": [], "mixed": []}
    for n, (side, full) in enumerate((("bare", 0), ("keys", 0), ("mixed", 10), ("bare", 0)) * (1 if quick else 2)):
        rates[side].append(_ingest(root, f"ingest{n}", batches, rows, keys, FEEDS if side != "bare" else 0, full))
    per_feed = _memory_per_feed(root, keys)
    visible, delivered = _latency(root, 40 if quick else 200)
    v50, d50 = percentile(visible, 50), percentile(delivered, 50)
    hv, hd = http_latency(root, 40 if quick else 150, _open, _batch)
    hv50, hd50 = percentile(hv, 50), percentile(hd, 50)
    many = http_many(root, _open, _batch, batches, rows, keys, FEEDS)
    bare = statistics.median(rates["bare"])
    shape = f"{batches} batches of {rows} rows over {keys} keys, 4 partitions"
    figures = [
        Figure(f"ingest with 1,000 subscriptions ({what})", statistics.median(rates[side]), "rows/s", bare,
               "ingest without", ">= 0.9x", statistics.median(rates[side]) >= 0.9 * bare,
               f"{shape}; runs {[round(r) for r in rates['bare']]} without, {[round(r) for r in rates[side]]} with")
        for side, what in (("keys", "each following a key"), ("mixed", "990 following a key, 10 the whole store"))
    ]
    if not quick:  # the real metric: a Spark pipeline's micro-batch in both
        hv_s: list[float] = []
        hd_s: list[float] = []
        sv, sd = _spark_latency(root, 60, hv_s, hd_s)
        s50v, s50d = percentile(sv, 50), percentile(sd, 50)
        figures.append(Figure("change delivered p50 (append -> feed), Spark pipeline", s50d * 1e3, "ms", s50v * 1e3,
                              "append -> visible to a pull query", "<= 1.1x", s50d <= 1.1 * s50v,
                              f"{len(sd)} appends, trigger 100 ms, a feed following the appended key"))
        h50v, h50d = percentile(hv_s, 50), percentile(hd_s, 50)
        figures.append(Figure("HTTP: change delivered p50 (append -> HTTP subscriber), Spark pipeline", h50d * 1e3,
                              "ms", h50v * 1e3, "append -> visible to an HTTP pull query", "<= 1.1x",
                              h50d <= 1.1 * h50v, f"{len(hd_s)} appends (the same ones), trigger 100 ms; iqgate serve "
                              "--state-dir beside the pipeline; the pull waits for its Position"))
    http_bare = many["bare"]
    figures += [
        Figure(f"HTTP: ingest with 1,000 HTTP subscriptions ({what})", statistics.median(many["rates"][side]),
               "rows/s", http_bare, "ingest without", ">= 0.9x",
               statistics.median(many["rates"][side]) >= 0.9 * http_bare,
               f"{shape}; iqgate serve --state-dir (1 serving process) follows the changelog; runs "
               f"{[round(r) for r in many['rates']['bare']]} without, {[round(r) for r in many['rates'][side]]} with")
        for side, what in (("keys", "each following a key"), ("mixed", "990 following a key, 10 the whole store"))
    ]
    figures += [
        Figure("HTTP: serving process memory per subscription", many["per_sub_kib"], "KiB", None, None,
               "<= 1024 KiB", many["per_sub_kib"] <= 1024,
               f"RSS growth of the serving process with {FEEDS} NDJSON subscriptions / {FEEDS} (thread, connection, "
               f"feed, outbox); {many['rss_mib']:.0f} MiB with them"),
        Figure("HTTP: change delivered p50 (write call -> HTTP subscriber)", hd50 * 1e3, "ms", hv50 * 1e3,
               "write call -> visible to an HTTP pull query", "<= 1.1x", hd50 <= 1.1 * hv50,
               f"{len(hd)} small batches, the same ones both ways; the pull waits for its Position (read your write); "
               f"p90 {percentile(hd, 90) * 1e3:.1f} ms vs {percentile(hv, 90) * 1e3:.1f} ms; no Spark trigger"),
    ]
    return figures + [
        Figure("server memory per idle subscription", per_feed / 1024, "KiB", None, None, "<= 1024 KiB",
               per_feed <= 1 << 20, f"tracemalloc growth of {FEEDS} more feeds / {FEEDS}"),
        Figure("change delivered p50 (write call -> feed)", d50 * 1e3, "ms", v50 * 1e3,
               "write call -> commit (visible)", "<= 1.1x", d50 <= 1.1 * v50,
               f"{len(delivered)} small batches; delivered {1e3 * (d50 - v50):.1f} ms after the commit (p50); no "
               "Spark trigger in either side here"),
    ]


if __name__ == "__main__":
    import sys

    for f in run("--quick" in sys.argv):
        ratio = f"{f.ratio:.2f}x" if f.ratio is not None else "-"
        print(f"{f.name}: {f.value:.1f} {f.unit} (baseline {f.baseline} {f.baseline_name or ''}; {ratio}; "
              f"goal {f.goal} {'met' if f.met else 'NOT met'}) {f.note}")
