"""Peak memory: a read-only gateway worker under load, and the whole demo (Spark included).

The worker figure is the one users size machines by (goal ≤ 200 MB): an
``iqgate serve --state-dir`` process over a filled store, measured by the
kernel's high-water mark (VmHWM) after a bounded load of point lookups and
scans, next to the same worker idle right after start. The demo figure sums
the RSS of the demo's whole process tree (Python, the JVM, Python workers),
sampled every 200 ms.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

from benchmarks.common import Figure, scratch_dir
from benchmarks.procs import free_port, status_kb, tree_rss_kb, wait_http

ROOT = Path(__file__).resolve().parents[1]
IQGATE = [sys.executable, "-m", "gateway.cli"]


def _post(port: int, sql: str, params: list | None = None) -> dict:
    body = json.dumps({"sql": sql, "params": params or []}).encode()
    req = urllib.request.Request(f"http://127.0.0.1:{port}/v1/sql", body, {"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=30) as r:
        return json.loads(r.read())


def _fill_state_dir(state_dir: Path, keys: int) -> object:
    """A running app with a filled store: the writer a gateway worker serves beside."""
    from stores import Column, Position, SqlType, StoreKind, StoreSpec
    from stores.app.streams import StoreTopology, StreamsApp
    from stores.engine.change import Change

    spec = StoreSpec("revenue", StoreKind.TIMESTAMPED_KEY_VALUE, Column("key", SqlType.VARCHAR),
                     (Column("revenue", SqlType.DOUBLE), Column("orders", SqlType.BIGINT)),
                     partitions=4, source_topics=("orders",))
    app = StreamsApp(StoreTopology([spec]), application_id="bench-memory", state_dir=state_dir)
    app.start()
    w = app.writer("revenue")
    step = 50_000
    for b, lo in enumerate(range(0, keys, step)):
        changes = [Change(f"c{i:07d}", (float(i), i), 1_700_000_000_000 + i) for i in range(lo, min(keys, lo + step))]
        w.write_batch(b, changes, Position.from_map({"orders": {0: lo + len(changes) - 1}}))
    return app


def worker_figures(quick: bool) -> list[Figure]:
    keys = 20_000 if quick else 1_000_000
    root = scratch_dir("iqgate-bench-mem-")
    app = _fill_state_dir(root / "state", keys)
    port = free_port()
    proc = subprocess.Popen(IQGATE + ["serve", "--state-dir", str(root / "state"), "--port", str(port), "--workers", "1"],
                            cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_http(proc, port, "/v1/health")
        _post(port, "SELECT revenue FROM revenue WHERE key = ?", ["c0000001"])
        idle_kb = status_kb(proc.pid, "VmRSS")
        deadline = time.monotonic() + (15 if quick else 60)
        for i in range(2000 if quick else 20_000):  # bounded in count and time
            _post(port, "SELECT revenue FROM revenue WHERE key = ?", [f"c{(i * 7919) % keys:07d}"])
            if i % 500 == 0:
                _post(port, "SELECT count(*), sum(revenue) FROM revenue")
                _post(port, "SELECT key, revenue FROM revenue WHERE key BETWEEN 'c0001000' AND 'c0002000'")
            if time.monotonic() > deadline:
                break
        peak_kb = status_kb(proc.pid, "VmHWM")
        anon_kb = status_kb(proc.pid, "RssAnon")
    finally:
        proc.terminate()
        proc.wait(30)
        app.close(30)  # type: ignore[attr-defined]
    return [
        Figure(f"peak RSS, gateway worker ({keys:,} keys, lookups + scans)", peak_kb / 1024, "MB",
               baseline=idle_kb / 1024, baseline_name="same worker idle", goal="<= 200 MB",
               met=peak_kb / 1024 <= 200),
        # RSS counts the pages of libarrow/libduckdb a worker has touched; those are shared by every
        # worker process, so the private (anonymous) part is what each extra worker costs.
        Figure("private (anonymous) RSS of that worker after the load", anon_kb / 1024, "MB",
               note="library pages (the rest of RSS) are shared between worker processes"),
    ]


def demo_figure(quick: bool) -> Figure:
    root = scratch_dir("iqgate-bench-demo-")
    orders = 2_000 if quick else 100_000
    proc = subprocess.Popen(IQGATE + ["demo", "--once", "--dir", str(root), "--orders", str(orders),
                                      "--port", str(free_port())],
                            cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    peak_kb = 0
    deadline = time.monotonic() + (240 if quick else 900)
    while proc.poll() is None and time.monotonic() < deadline:
        peak_kb = max(peak_kb, tree_rss_kb(proc.pid))
        time.sleep(0.2)
    if proc.poll() is None:
        proc.terminate()
        proc.wait(30)
        raise RuntimeError("demo --once did not finish in time")
    if proc.returncode != 0:
        raise RuntimeError(f"demo --once failed with exit code {proc.returncode}")
    return Figure(f"peak RSS, whole demo ({orders:,} orders; Python + JVM + workers)", peak_kb / 1024, "MB",
                  note="sum over the process tree, sampled every 200 ms")


def run(quick: bool) -> list[Figure]:
    os.environ.setdefault("PYTHONPATH", str(ROOT))
    return [*worker_figures(quick), demo_figure(quick)]


if __name__ == "__main__":
    from benchmarks.run import script

    script(run)
