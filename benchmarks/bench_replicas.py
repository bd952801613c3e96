"""Read throughput with 1, 2 and 3 replicas (issue 17 item 5): req/s of point lookups spread over the set.

A store of ``keys`` customers in 4 partitions is written through the
changelog writer (embedded log); three ``iqgate replica --log`` processes
restore it. Client processes send ``SELECT … WHERE customer = ?`` over kept-
alive HTTP connections, round-robin over the first N replicas, for a fixed
time; the figure is req/s with N replicas, the baseline req/s with one. On
this 2-core machine clients and servers share the cores, so the ratio says
how much a replica set helps when clients are cheap; on separate machines
each replica adds its own cores.

``python -m benchmarks.bench_replicas [--quick]``
"""

from __future__ import annotations

import http.client
import json
import os
import random
import signal
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

from benchmarks import wrk
from benchmarks.common import Figure
from benchmarks.procs import free_port

ROOT = Path(__file__).resolve().parents[1]


def _write_store(root: Path, keys: int) -> None:
    from stores.app.streams import StoreTopology, StreamsApp
    from stores.catalog.schema import Column, SqlType, StoreKind, StoreSpec
    from stores.changelog import ChangelogWriter, EventLogChangelog
    from stores.engine.change import Change
    from stores.log.eventlog import EventLog

    spec = StoreSpec("revenue", StoreKind.KEY_VALUE, Column("customer", SqlType.VARCHAR),
                     (Column("total", SqlType.DOUBLE),), 4, ("orders",))
    app = StreamsApp(StoreTopology([spec]), application_id="bench", state_dir=root / "active", synchronous="NORMAL")
    app.start()
    try:
        w = ChangelogWriter(app.writer("revenue"), EventLogChangelog(EventLog(root / "log")), "bench")
        step = 5_000
        for b, lo in enumerate(range(0, keys, step)):
            w.write_batch(b, [Change(f"c{k}", (float(k),)) for k in range(lo, min(keys, lo + step))],
                          {"orders": {0: b}})
    finally:
        app.close()


def _healthy(port: int) -> bool:
    try:
        c = http.client.HTTPConnection("127.0.0.1", port, timeout=2)
        c.request("GET", "/v1/health")
        r = c.getresponse()
        body = json.loads(r.read())
        c.close()
        parts = body.get("partitions", [])
        return r.status == 200 and len(parts) == 4 and all(p["offset_lag"] == 0 for p in parts)
    except (OSError, ValueError):
        return False


def _client(ports: list[int], keys: int, seconds: float, seed: int) -> int:
    """Requests answered in ``seconds``, round-robin over ``ports`` (one kept-alive connection each)."""
    rnd = random.Random(seed)
    conns = [http.client.HTTPConnection("127.0.0.1", p, timeout=10) for p in ports]
    n = 0
    deadline = time.monotonic() + seconds
    i = seed
    while time.monotonic() < deadline:
        c = conns[i % len(conns)]
        i += 1
        body = json.dumps({"sql": "SELECT total FROM revenue WHERE customer = ?",
                           "params": [f"c{rnd.randrange(keys)}"]})
        c.request("POST", "/v1/sql", body, {"Content-Type": "application/json"})
        r = c.getresponse()
        r.read()
        if r.status != 200:
            raise RuntimeError(f"replica answered {r.status}")
        n += 1
    for c in conns:
        c.close()
    return n


def _wrk_rate(ports: list[int], keys: int, seconds: float, connections: int = 8) -> tuple[float, int]:
    """(req/s, non-200 answers and socket errors) of point lookups with ``connections`` wrk connections spread
    over ``ports`` (one wrk each, at once)."""
    from concurrent.futures import ThreadPoolExecutor

    rnd = random.Random(len(ports))
    bodies = [json.dumps({"sql": "SELECT total FROM revenue WHERE customer = ?",
                          "params": [f"c{rnd.randrange(keys)}"]}).encode() for _ in range(200)]
    share = [connections // len(ports) + (1 if i < connections % len(ports) else 0) for i in range(len(ports))]
    with ThreadPoolExecutor(len(ports)) as pool:
        runs = list(pool.map(lambda pc: wrk.run_wrk(f"http://127.0.0.1:{pc[0]}/v1/sql", pc[1], seconds, bodies),
                             zip(ports, share)))
    return sum(r.rps for r in runs), sum(r.errors for r in runs)


def _python_rates(ports: list[int], keys: int, seconds: float, clients: int, rates: dict[int, float]) -> None:
    """req/s with 1, 2, 3 replicas from ``clients`` Python client processes (best of two per size) into ``rates``."""
    with ProcessPoolExecutor(clients) as pool:
        list(pool.map(_client, [ports] * clients, [keys] * clients, [0.3] * clients, range(clients)))  # warm
        for n in (1, 2, 3, 3, 2, 1):  # best of two per size, in both orders: shared machines drift
            t0 = time.perf_counter()
            done = sum(pool.map(_client, [ports[:n]] * clients, [keys] * clients, [seconds] * clients,
                                range(clients)))
            rates[n] = max(rates.get(n, 0.0), done / (time.perf_counter() - t0))


def run(quick: bool) -> list[Figure]:
    keys = 2_000 if quick else 20_000
    seconds = 1.0 if quick else 5.0
    clients = 4
    with tempfile.TemporaryDirectory(prefix="bench-replicas-") as tmp:
        root = Path(tmp)
        _write_store(root, keys)
        ports = [free_port() for _ in range(3)]
        procs = []
        logs = []
        try:
            for port in ports:
                out = open(root / f"replica-{port}.log", "wb")  # noqa: SIM115 - closed below
                logs.append(out)
                procs.append(subprocess.Popen(
                    [sys.executable, "-m", "gateway.cli", "replica", "--log", str(root / "log"), "--application-id",
                     "bench", "--state-dir", str(root / f"replica-{port}"), "--port", str(port), "--threads", "4"],
                    cwd=ROOT, stdout=out, stderr=subprocess.STDOUT, start_new_session=True))
            deadline = time.monotonic() + 120
            while not all(_healthy(p) for p in ports):
                if time.monotonic() > deadline or any(p.poll() is not None for p in procs):
                    raise RuntimeError("replicas did not come up: " + (root / f"replica-{ports[0]}.log").read_text())
                time.sleep(0.2)
            rates: dict[int, float] = {}
            errors = 0
            if wrk.available():  # compiled: leaves the cores to the replicas (CI has none: Python clients below)
                _wrk_rate(ports, keys, 1.0)  # warm
                for n in (1, 2, 3, 3, 2, 1):  # best of two per size, in both orders: shared machines drift
                    rate, bad = _wrk_rate(ports[:n], keys, max(1.0, seconds))
                    rates[n], errors = max(rates.get(n, 0.0), rate), errors + bad
            else:
                _python_rates(ports, keys, seconds, clients, rates)
        finally:
            for p in procs:
                if p.poll() is None:
                    os.killpg(p.pid, signal.SIGTERM)
            for p in procs:
                try:
                    p.wait(20)
                except subprocess.TimeoutExpired:
                    os.killpg(p.pid, signal.SIGKILL)
                    p.wait(10)
            for f in logs:
                f.close()
    cpus = os.cpu_count() or 1
    load = "wrk (8 connections over the replicas)" if wrk.available() else f"{clients} Python client processes"
    note = f"{load} and the replicas share {cpus} cores" + (f"; {errors} non-200 or socket errors" if errors else "")
    return [Figure(f"point lookups, {n} replica(s)", rates[n], "req/s", rates[1], "1 replica",
                   goal=">= 1x" if n > 1 else "", met=(rates[n] >= rates[1] * 0.95 and not errors) if n > 1 else None, note=note)
            for n in (1, 2, 3)]


if __name__ == "__main__":
    from benchmarks.run import script

    script(run)
