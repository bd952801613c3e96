"""A server's supervisor and its serving processes (issue 43 item 3; issue 14 item 4; issue 45 item 4).

The process that owns the port runs no statement: a native crash in a statement (here a SIGSEGV sent to the
serving process while it runs one) loses only what was in flight there. The supervisor logs the crash with the
statement, counts it in /metrics, shows it in /v1/health, and starts a new process that accepts on the same
port. Also: processes share the port fairly, each pinned to a CPU of its own; a stopped process leaves its
share to the others; SIGTERM ends them all; a read-only server is healthy, says so, and gives each store's
Position and age; Flight SQL is served beside HTTP.
"""

from __future__ import annotations

import http.client
import json
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from stores.app.streams import StreamsApp
from tests.gateway.gwfixtures import Shop

ROOT = Path(__file__).resolve().parents[3]
pytestmark = pytest.mark.skipif(not Path("/proc/self/task").exists(), reason="Linux /proc")
SLOW = ("SELECT count(*) FROM revenue a, revenue b, revenue c, revenue d, revenue e, revenue f, revenue g "
        "WHERE a.revenue + b.revenue + c.revenue + d.revenue + e.revenue + f.revenue + g.revenue > -1")


class Served:
    def __init__(self, proc: subprocess.Popen[str], url: str, err: Path) -> None:
        self.proc, self.url, self.err = proc, url, err
        self.port = int(url.rsplit(":", 1)[1])

    def conn(self) -> http.client.HTTPConnection:
        return http.client.HTTPConnection("127.0.0.1", self.port, timeout=60)

    def get(self, path: str, c: http.client.HTTPConnection | None = None) -> tuple[int, Any]:
        own = c is None
        c = c or self.conn()
        try:
            c.request("GET", path)
            r = c.getresponse()
            body = r.read()
            return r.status, json.loads(body) if path != "/metrics" else body.decode()
        finally:
            if own:
                c.close()

    def sql(self, text: str, c: http.client.HTTPConnection | None = None) -> tuple[int, Any]:
        own = c is None
        c = c or self.conn()
        try:
            c.request("POST", "/v1/sql", json.dumps({"sql": text}), {"Content-Type": "application/json"})
            r = c.getresponse()
            return r.status, json.loads(r.read())
        finally:
            if own:
                c.close()

    def pids(self) -> set[int]:
        """The serving processes now (children of the supervisor)."""
        out: set[int] = set()
        for task in Path(f"/proc/{self.proc.pid}/task").iterdir():
            try:
                out.update(int(x) for x in (task / "children").read_text().split())
            except OSError:
                continue
        return {p for p in out if _alive(p)}


def _alive(pid: int) -> bool:
    try:
        return "zombie" not in Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return False


def _serve(state_dir: Path, tmp_path: Path, *extra: str) -> Iterator[Served]:
    err = tmp_path / "serve.err"  # a file, not a pipe: serving processes write to it after the test stops reading
    with open(err, "w") as f:
        proc = subprocess.Popen([sys.executable, "-m", "gateway.cli", "serve", "--state-dir", str(state_dir),
                                 "--port", "0", "--workers", "2", "--threads", "2", *extra],
                                cwd=ROOT, stdout=subprocess.DEVNULL, stderr=f, text=True)
    try:
        m = None
        for _ in range(600):  # bounded: 60 s
            m = re.search(r"on (http://127\.0\.0\.1:\d+) \(2 serving processes", err.read_text())
            if m or proc.poll() is not None:
                break
            time.sleep(0.1)
        assert m, f"the server did not start: {err.read_text()[-2000:]}"
        served = Served(proc, m.group(1), err)
        deadline = time.monotonic() + 60
        while len(served.pids()) < 2 and time.monotonic() < deadline:
            time.sleep(0.1)
        yield served
    finally:
        for pid in [proc.pid, *_children(proc.pid)]:
            try:
                os.kill(pid, signal.SIGCONT)
            except ProcessLookupError:
                pass
        proc.terminate()
        proc.wait(30)


def _children(pid: int) -> list[int]:
    out = []
    try:
        for task in Path(f"/proc/{pid}/task").iterdir():
            try:
                out += [int(x) for x in (task / "children").read_text().split()]
            except OSError:
                continue
    except OSError:
        pass
    return out


@pytest.fixture()
def served(shop_app: StreamsApp, tmp_path: Path) -> Iterator[Served]:
    yield from _serve(shop_app.state_dir, tmp_path)


def _conn_to(served: Served, pid: int) -> http.client.HTTPConnection:
    """A keep-alive connection that the serving process ``pid`` answers (as its health says). Bounded in time: a
    process that is still starting does not accept yet (the others take every connection until it does)."""
    spare: list[http.client.HTTPConnection] = []
    deadline = time.monotonic() + 30
    try:
        while time.monotonic() < deadline:
            c = served.conn()
            if served.get("/v1/health", c)[1]["process"]["pid"] == pid:
                return c
            spare.append(c)  # held open: the fair accept board then prefers the process with fewer connections
            if len(spare) > 8:
                spare.pop(0).close()
            time.sleep(0.05)
        raise AssertionError(f"no connection reached serving process {pid} in 30 s")
    finally:
        for c in spare:
            c.close()


def test_a_crash_in_a_statement_loses_only_that_statement(served: Served, shop: Shop) -> None:
    victim = min(served.pids())
    c = _conn_to(served, victim)
    got: dict[str, Any] = {}

    def run() -> None:
        try:
            got["answer"] = served.sql(SLOW, c)
        except (OSError, http.client.HTTPException) as exc:
            got["error"] = exc

    t = threading.Thread(target=run)
    t.start()
    time.sleep(0.5)  # the statement is running in the victim
    os.kill(victim, signal.SIGSEGV)
    t.join(60)
    assert "error" in got, got  # the request in flight on the crashed process is lost ...
    for _ in range(20):  # ... and nothing else: the port answers all along
        assert served.sql("SELECT count(*) FROM revenue")[1]["rows"] == [[len(shop.revenue)]]
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and (victim in served.pids() or len(served.pids()) < 2):
        time.sleep(0.1)
    assert victim not in served.pids() and len(served.pids()) == 2  # started again
    text = served.err.read_text()
    assert re.search(rf"serving process \d \(pid {victim}\) killed by SIGSEGV; it was running: " + re.escape(SLOW[:200]),
                     text), text[-2000:]
    status, health = served.get("/v1/health")
    assert status == 200 and health["crashes"]["count"] == 1
    (crash,) = health["crashes"]["recent"]
    assert crash["how"] == "killed by SIGSEGV" and crash["pid"] == victim and SLOW in crash["statements"]
    assert "iqgate_serving_process_crashes_total 1" in served.get("/metrics")[1]


def test_a_stopped_process_leaves_its_share_and_sigterm_ends_them_all(served: Served, shop: Shop) -> None:
    a, b = sorted(served.pids())
    os.kill(a, signal.SIGSTOP)  # a hung process: new connections go to the other one
    try:
        time.sleep(1.2)  # past the accept board's staleness
        for _ in range(5):
            assert served.sql("SELECT count(*) FROM revenue")[1]["rows"] == [[len(shop.revenue)]]
    finally:
        os.kill(a, signal.SIGCONT)
    os.kill(b, signal.SIGKILL)  # died: started again, not counted as a crash of a statement... but as a signal
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and (b in served.pids() or len(served.pids()) < 2):
        time.sleep(0.1)
    kids = served.pids()
    assert b not in kids and len(kids) == 2
    served.proc.send_signal(signal.SIGTERM)
    assert served.proc.wait(30) == 0
    assert "SIGTERM: stopping" in served.err.read_text()
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline and any(_alive(p) for p in kids):
        time.sleep(0.2)
    assert not any(_alive(p) for p in kids)


def test_a_read_only_server_is_healthy_and_says_what_it_serves(served: Served, shop_app: StreamsApp) -> None:
    """Issue 45 item 4: the files answer, so health is 200 (a load balancer keeps the server), says read-only,
    names the files' writer as app.json has it, and gives each store's Position and how old it is."""
    status, health = served.get("/v1/health")
    assert status == 200 and health["healthy"] and health["mode"] == "read-only", health
    assert health["writer"]["application_id"] == shop_app.application_id
    positions = health["positions"]
    assert set(positions) == set(shop_app.catalog())
    for name, p in positions.items():
        assert p["position"] == shop_app.positions()[name].to_json_map()
        assert p["age_s"] is not None and p["age_s"] >= 0


def _pinned(pid: int) -> list[frozenset[int]]:
    """The CPU sets of ``pid``'s threads restricted to one CPU."""
    one = []
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            text = re.search(r"^Cpus_allowed_list:\s*(\S+)", (task / "status").read_text(), re.M).group(1)  # type: ignore[union-attr]
        except (OSError, AttributeError):
            continue
        cpus: set[int] = set()
        for part in text.split(","):
            lo, _, hi = part.partition("-")
            cpus.update(range(int(lo), int(hi or lo) + 1))
        if len(cpus) == 1:
            one.append(frozenset(cpus))
    return one


@pytest.mark.skipif(len(getattr(os, "sched_getaffinity", lambda _: {0})(0)) < 2, reason="needs 2 CPUs")
def test_each_serving_process_runs_its_http_threads_on_a_cpu_of_its_own(served: Served) -> None:
    deadline = time.monotonic() + 60
    pinned: dict[int, list[frozenset[int]]] = {}
    while time.monotonic() < deadline:
        pinned = {p: _pinned(p) for p in served.pids()}
        if len(pinned) == 2 and all(len(v) >= 3 for v in pinned.values()):  # the loop and 2 handler threads each
            break
        time.sleep(0.2)
    sets = [set().union(*v) for v in pinned.values()]
    assert len(sets) == 2 and all(len(s) == 1 for s in sets) and sets[0] != sets[1], pinned
    assert not _pinned(served.proc.pid)  # the supervisor (a hosted pipeline, Spark) is not pinned


def test_connections_opened_together_are_shared_out_evenly(served: Served) -> None:
    """Eight keep-alive connections opened at once land 4/4 (5/3 at worst) on the two processes."""
    deadline = time.monotonic() + 60
    seen: set[int] = set()
    while len(seen) < 2 and time.monotonic() < deadline:  # both serving loops accept (they start beside each other)
        conns = [served.conn() for _ in range(2)]
        seen = {served.get("/v1/health", c)[1]["process"]["pid"] for c in conns}
        for c in conns:
            c.close()
    time.sleep(0.5)
    splits = []
    for _ in range(5):
        conns = [served.conn() for _ in range(8)]
        try:
            owners = [served.get("/v1/health", c)[1]["process"]["pid"] for c in conns]
            splits.append(sorted(owners.count(p) for p in set(owners)))
        finally:
            for c in conns:
                c.close()
        time.sleep(0.3)  # the processes see the closes and publish their counts
    assert all(len(s) == 2 and s[0] >= 3 for s in splits), splits


def test_flight_sql_is_served_beside_http(shop_app: StreamsApp, shop: Shop, tmp_path: Path) -> None:
    fs = pytest.importorskip("adbc_driver_flightsql.dbapi")
    for served in _serve(shop_app.state_dir, tmp_path, "--flight-port", "0"):
        m = re.search(r"Arrow Flight SQL on (grpc://127\.0\.0\.1:\d+)", served.err.read_text())
        assert m, served.err.read_text()[-2000:]
        deadline = time.monotonic() + 30
        while True:
            try:
                with fs.connect(m.group(1)) as con, con.cursor() as cur:
                    cur.execute("SELECT count(*) FROM revenue")
                    assert cur.fetchall() == [(len(shop.revenue),)]
                break
            except Exception:  # noqa: BLE001 - serving process 1 is starting its Flight port
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.2)


def test_a_port_in_use_is_one_line_at_once(tmp_path: Path, shop_app: StreamsApp) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        out = subprocess.run([sys.executable, "-m", "gateway.cli", "serve", "--state-dir", str(shop_app.state_dir),
                              "--port", str(port)], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert out.returncode == 1, out.stderr
    assert f"cannot listen on 127.0.0.1:{port}" in out.stderr and "Traceback" not in out.stderr
