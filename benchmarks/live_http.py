"""Live answers through the HTTP face, as ``bench_live`` measures them (issue 46 item 6).

The writer is this process (the way the pipeline host writes: changelog, then the store); the server is a real
``iqgate serve --state-dir`` (a supervisor and a serving process) over the same state dir, following the store's
changelog from where ``app.json`` says it is; subscribers are HTTP clients (NDJSON), 1,000 of them in a process of
their own (``live_clients``). Measured:

- latency: per small batch, write call → a pull query over HTTP (``position`` bound + ``wait_ms``: read your
  write) answered, and write call → the change delivered to an HTTP subscriber, on the same batches;
- 1,000 subscriptions on one server: the serving process's memory per subscription (RSS growth / 1,000), and
  ingest (rows/s written) with them against without, alternating runs in one go.
"""

from __future__ import annotations

import http.client
import json
import random
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

from benchmarks.procs import ROOT, start_serve, status_kb, stop_serve
from stores.iqv2.position import Position

__all__ = ["http_latency", "http_many", "HttpWatch"]


def _pid_of_serving(port: int) -> int:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    try:
        conn.request("GET", "/v1/health")
        return int(json.loads(conn.getresponse().read())["process"]["pid"])
    finally:
        conn.close()


def http_latency(root: Path, samples: int, open_app: Any, batch: Any) -> tuple[list[float], list[float]]:
    """(write call → visible to an HTTP pull query, write call → delivered to an HTTP subscriber) per batch."""
    app, writers = open_app(root, "httplat")
    rng = random.Random(11)
    proc = None
    try:
        w = writers.get("revenue", None)
        w.write_batch(0, batch(rng, 1000, 10, 0), Position.from_map({"orders": {0: 0}}))
        proc, port = start_serve(Path(app.state_dir), workers=1)
        delivered: dict[int, float] = {}
        sub = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
        sub.request("POST", "/v1/sql", json.dumps({"sql": "SUBSCRIBE revenue WITH (SNAPSHOT = false)"}),
                    {"Content-Type": "application/json", "Accept": "application/x-ndjson"})
        resp = sub.getresponse()
        resp.readline()  # the columns line
        done = threading.Event()

        def read() -> None:
            while not done.is_set():
                try:
                    line = resp.readline()
                except (AttributeError, OSError, ValueError):  # closed under it at the end
                    return
                if not line:
                    return
                msg = json.loads(line)
                if msg.get("op") == "upsert":
                    delivered.setdefault(int(msg["position"]["orders"]["0"]), time.perf_counter())

        reader = threading.Thread(target=read, daemon=True)
        reader.start()
        time.sleep(1.5)  # the subscription follows the store (its first progress went out)
        started: dict[int, float] = {}
        visible: dict[int, float] = {}
        for i in range(1, samples + 1):
            time.sleep(0.03 + rng.random() * 0.05)
            rows = batch(rng, 1000, 10, i)
            pull = threading.Thread(target=_pull_visible, args=(port, i, rows[0].key, visible))
            started[i] = time.perf_counter()
            pull.start()
            w.write_batch(i, rows, Position.from_map({"orders": {0: i}}))
            pull.join(30)
        deadline = time.monotonic() + 10
        while len(delivered) < samples and time.monotonic() < deadline:
            time.sleep(0.01)
        done.set()
        resp.close()
        sub.close()
        got = [i for i in started if i in delivered and i in visible]
        return [visible[i] - started[i] for i in got], [delivered[i] - started[i] for i in got]
    finally:
        if proc is not None:
            stop_serve(proc)
        app.close()


def _pull_visible(port: int, i: int, key: str, out: dict[int, float]) -> None:
    """A read-your-writes pull: answered once the store is at batch ``i`` (the server waits for the bound)."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    try:
        conn.request("POST", "/v1/sql", json.dumps({"sql": "SELECT total FROM revenue WHERE k = ?", "params": [key],
                                                    "position": {"orders": {"0": i}}, "wait_ms": 10_000}),
                     {"Content-Type": "application/json"})
        resp = conn.getresponse()
        body = resp.read()
        if resp.status == 200 and json.loads(body)["rows"]:
            out[i] = time.perf_counter()
    finally:
        conn.close()


class _Clients:
    """``live_clients`` in a process of its own: started, ready once every subscription sent a progress."""

    def __init__(self, url: str, keyed: int, full: int, keys: int) -> None:
        self.proc = subprocess.Popen([sys.executable, "-m", "benchmarks.live_clients", url, str(keyed), str(full),
                                      str(keys)], cwd=ROOT, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        assert self.proc.stdout is not None
        deadline = time.monotonic() + 300
        while True:
            line = self.proc.stdout.readline()
            if line.startswith("READY"):
                return
            if not line or time.monotonic() > deadline or line.startswith("STUCK"):
                self.proc.kill()
                raise RuntimeError(f"the subscribers did not all start: {line!r}")

    def stop(self) -> str:
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.close()
        out = self.proc.stdout.read()
        self.proc.wait(30)
        return out.strip()


def http_many(root: Path, open_app: Any, batch: Any, batches: int, rows: int, keys: int, feeds: int
              ) -> dict[str, Any]:
    """Ingest rows/s without subscribers and with ``feeds`` HTTP subscriptions (all following a key, then all but
    10 following a key and 10 the whole store), alternating; the serving process's memory per subscription."""
    app, writers = open_app(root, "httpmany")
    rng = random.Random(13)
    proc = None
    rates: dict[str, list[float]] = {"bare": [], "keys": [], "mixed": []}
    done = [1]
    try:
        w = writers.get("revenue", None)
        w.write_batch(0, batch(rng, keys, rows, 0), Position.from_map({"orders": {0: 0}}))
        proc, port = start_serve(Path(app.state_dir), workers=1)
        url = f"http://127.0.0.1:{port}"
        pid = _pid_of_serving(port)

        def ingest() -> float:
            t0 = time.perf_counter()
            for i in range(done[0], done[0] + batches):
                w.write_batch(i, batch(rng, keys, rows, i), Position.from_map({"orders": {0: i}}))
            done[0] += batches
            return batches * rows / (time.perf_counter() - t0)

        _Clients(url, 1, 0, keys).stop()  # warm: the tail, the pump and their buffers exist before measuring
        time.sleep(1.0)
        rates["bare"].append(ingest())
        rss0 = status_kb(pid, "VmRSS")
        clients = _Clients(url, feeds, 0, keys)
        rss1 = status_kb(pid, "VmRSS")
        rates["keys"].append(ingest())
        clients.stop()
        time.sleep(1.0)
        rates["bare"].append(ingest())
        clients = _Clients(url, feeds - 10, 10, keys)
        rates["mixed"].append(ingest())
        clients.stop()
        time.sleep(1.0)
        rates["bare"].append(ingest())
        return {"rates": rates, "bare": statistics.median(rates["bare"]),
                "per_sub_kib": (rss1 - rss0) / feeds, "rss_mib": rss1 / 1024}
    finally:
        if proc is not None:
            stop_serve(proc)
        app.close()


class HttpWatch:
    """A server (``iqgate serve --state-dir``) over a running app's state dir and an NDJSON subscriber of its
    ``revenue`` store: when each key's change reached the subscriber, and when a pull query saw it (read your
    write over HTTP: the ``position`` bound with ``wait_ms``). For a Spark pipeline's appends (bench_live full)."""

    def __init__(self, state_dir: Path) -> None:
        self.proc, self.port = start_serve(state_dir, workers=1)
        self.arrived: dict[str, float] = {}
        self._conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=600)
        self._conn.request("POST", "/v1/sql", json.dumps({"sql": "SUBSCRIBE revenue WITH (SNAPSHOT = false)"}),
                           {"Content-Type": "application/json", "Accept": "application/x-ndjson"})
        self._resp = self._conn.getresponse()
        self._resp.readline()
        self._thread = threading.Thread(target=self._read, daemon=True)
        self._thread.start()

    def _read(self) -> None:
        while True:
            try:
                line = self._resp.readline()
            except (AttributeError, OSError, ValueError):
                return
            if not line:
                return
            msg = json.loads(line)
            if msg.get("op") == "upsert":
                self.arrived.setdefault(msg["row"][0], time.perf_counter())

    def visible(self, topic: str, partition: int, offset: int, key: str) -> float:
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=120)
        try:
            conn.request("POST", "/v1/sql", json.dumps({"sql": "SELECT * FROM revenue WHERE key = ?", "params": [key],
                                                        "position": {topic: {str(partition): offset}},
                                                        "wait_ms": 60_000}),
                         {"Content-Type": "application/json"})
            resp = conn.getresponse()
            resp.read()
            return time.perf_counter()
        finally:
            conn.close()

    def delivered(self, key: str, timeout_s: float = 60.0) -> float:
        deadline = time.monotonic() + timeout_s
        while key not in self.arrived and time.monotonic() < deadline:
            time.sleep(0.002)
        return self.arrived.get(key, float("nan"))

    def close(self) -> None:
        self._resp.close()
        self._conn.close()
        stop_serve(self.proc)
