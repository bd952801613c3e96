"""Many stores in one app (issue 23 item 6): the curve for 1, 10, 50 and 100 stores over one topic.

As a user would run it: a pipeline file of N key-value stores
(``groupBy(key).agg(...)``, three kinds of aggregation in turn) over one
4-partition topic that already holds the orders, served by ``iqgate serve``
on this machine. Per N:

- time from ``serve`` to RUNNING (Spark started, every store caught up),
  against 1 store's time (goal: 50 stores ≤ 10×);
- peak RSS of the whole process tree (Python, JVM, Spark's Python workers),
  sampled every 0.5 s, and the memory each store adds over 1 store's;
- peak open files of the server process (goal ≤ 4 × stores × partitions + 100);
- point-lookup p50 over HTTP once RUNNING, and a check that the stores are
  right (one store's rows against the orders: count of keys, sum of amounts).

``--quick`` runs 2 stores over 2,000 orders (one start of Spark); the full run
1, 10, 50 and 100 stores over 100,000 orders (tens of minutes on 2 cores).
"""

from __future__ import annotations

import json
import os
import random
import shutil
import subprocess
import sys
import tempfile
import textwrap
import threading
import time
import urllib.request
from pathlib import Path

from benchmarks.common import Figure, percentile
from benchmarks.procs import free_port, tree_rss_kb

ROOT = Path(__file__).resolve().parents[1]
IQGATE = [sys.executable, "-m", "gateway.cli"]
PARTITIONS = 4
CUSTOMERS = 1000

PIPELINE = '''
APPLICATION_ID = "many"
TOPICS = {{"orders": {partitions}}}


def build(spark, log):
    from pyspark.sql import functions as F

    from stores import Topology

    t = Topology(spark, log)
    aggs = [lambda: F.sum("amount").alias("total"), lambda: F.count("*").alias("n"),
            lambda: F.max("amount").alias("top")]
    for i in range({stores}):
        orders = t.stream("orders", value_schema="amount DOUBLE, item STRING")
        t.table(f"s{{i}}", orders.groupBy("key").agg(aggs[i % 3]()), key="key")
    return t
'''


def _open_files(pid: int) -> int:
    try:
        return len(os.listdir(f"/proc/{pid}/fd"))
    except OSError:
        return 0


class _Sampler(threading.Thread):
    """Peak RSS of the process tree and peak open files of the server, every 0.5 s until stopped."""

    def __init__(self, pid: int) -> None:
        super().__init__(daemon=True)
        self.pid = pid
        self.peak_rss_kb = 0
        self.peak_files = 0
        self.done = threading.Event()

    def run(self) -> None:
        while not self.done.wait(0.5):
            self.peak_rss_kb = max(self.peak_rss_kb, tree_rss_kb(self.pid))
            self.peak_files = max(self.peak_files, _open_files(self.pid))


def _post(port: int, sql: str, params: list | None = None) -> dict:
    body = json.dumps({"sql": sql, "params": params or []}).encode()
    req = urllib.request.Request(f"http://127.0.0.1:{port}/v1/sql", body, {"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=60) as r:
        return json.loads(r.read())


def _orders(n: int) -> list[tuple[str, dict, int]]:
    rng = random.Random(7)
    return [(f"c{rng.randrange(CUSTOMERS):05d}", {"amount": float(rng.randrange(1, 20_000)) / 100, "item": "x"},
             1_700_000_000_000 + i) for i in range(n)]


def one_run(stores: int, orders: list[tuple[str, dict, int]], timeout_s: float) -> dict[str, float]:
    """Serve a pipeline of ``stores`` stores over the orders; measure until RUNNING, then look keys up."""
    from stores.log.eventlog import EventLog

    root = Path(tempfile.mkdtemp(prefix=f"iqgate-bench-stores{stores}-"))
    try:
        log = EventLog(root / "data" / "log")
        log.create_topic("orders", partitions=PARTITIONS)
        for i in range(0, len(orders), 20_000):
            log.append_batch("orders", orders[i:i + 20_000])
        pipeline = root / "many.py"
        pipeline.write_text(textwrap.dedent(PIPELINE.format(partitions=PARTITIONS, stores=stores)))
        port = free_port()
        err = root / "serve.err"
        t0 = time.monotonic()
        with open(err, "wb") as err_f:
            proc = subprocess.Popen(IQGATE + ["serve", str(pipeline), "--data-dir", str(root / "data"),
                                              "--port", str(port)], cwd=ROOT, stdout=subprocess.DEVNULL,
                                    stderr=err_f, start_new_session=True)
        sampler = _Sampler(proc.pid)
        sampler.start()
        try:
            while "iqgate: RUNNING" not in err.read_text(errors="replace"):
                if proc.poll() is not None:
                    raise RuntimeError(f"serve exited with {proc.returncode}: {err.read_text()[-2000:]}")
                if time.monotonic() - t0 > timeout_s:
                    raise RuntimeError(f"{stores} stores not RUNNING within {timeout_s:.0f} s: "
                                       f"{err.read_text()[-1000:]}")
                time.sleep(0.2)
            running_s = time.monotonic() - t0
            text = err.read_text(errors="replace")
            if "failed to connect back" in text:
                raise RuntimeError(f"{stores} stores: a Spark Python worker failed to connect back at start-up")
            rng = random.Random(1)
            lat = []
            for i in range(300):
                key = f"c{rng.randrange(CUSTOMERS):05d}"
                t1 = time.perf_counter()
                _post(port, f"SELECT * FROM s{i % stores} WHERE key = ?", [key])
                lat.append(time.perf_counter() - t1)
            want_keys = len({k for k, _, _ in orders})
            want_sum = round(sum(v["amount"] for _, v, _ in orders), 2)
            got = _post(port, "SELECT count(*) AS n, round(sum(total), 2) AS s FROM s0")["rows"][0]
            if list(got) != [want_keys, want_sum]:
                raise RuntimeError(f"store s0 holds {got}, the orders say {want_keys} keys, sum {want_sum}")
            time.sleep(1.0)  # one more sample while serving
        finally:
            sampler.done.set()
            sampler.join(5)
            os.killpg(proc.pid, 15)
            try:
                proc.wait(60)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, 9)
                proc.wait(30)
        return {"running_s": running_s, "rss_mb": sampler.peak_rss_kb / 1024, "files": sampler.peak_files,
                "lookup_p50_ms": percentile(lat, 50) * 1000}
    finally:
        shutil.rmtree(root, ignore_errors=True)


def run(quick: bool) -> list[Figure]:
    os.environ.setdefault("PYTHONPATH", str(ROOT))
    sizes = (2,) if quick else (1, 10, 50, 100)
    orders = _orders(2_000 if quick else 100_000)
    results = {n: one_run(n, orders, 600 if quick else 1800) for n in sizes}
    first = min(results)
    base = results[first]
    base_name = f"{first} store{'s' if first > 1 else ''}"
    figures: list[Figure] = []
    for n, r in results.items():
        what = f"{n} store{'s' if n > 1 else ''}, {len(orders):,} orders"
        goal_t = "<= 10x" if n == 50 else ""
        figures.append(Figure(f"{what}: serve to RUNNING (all caught up)", r["running_s"], "s",
                              baseline=base["running_s"], baseline_name=base_name, goal=goal_t,
                              met=(r["running_s"] <= 10 * base["running_s"]) if goal_t else None))
        figures.append(Figure(f"{what}: peak RSS, process tree", r["rss_mb"], "MB", baseline=base["rss_mb"],
                              baseline_name=base_name, goal="<= 4096 MB" if n == 100 else "",
                              met=(r["rss_mb"] <= 4096) if n == 100 else None))
        if n > first:
            per = (r["rss_mb"] - base["rss_mb"]) / (n - first)
            figures.append(Figure(f"{what}: memory each store adds", per, "MB", goal="tens of MB", met=per < 100))
        cap = 4 * n * PARTITIONS + 100
        figures.append(Figure(f"{what}: peak open files, server", r["files"], "files", baseline=base["files"],
                              baseline_name=base_name, goal=f"<= {cap}", met=r["files"] <= cap))
        figures.append(Figure(f"{what}: point lookup p50 over HTTP", r["lookup_p50_ms"], "ms",
                              baseline=base["lookup_p50_ms"], baseline_name=base_name))
    return figures


if __name__ == "__main__":
    from benchmarks.run import script

    script(run)
