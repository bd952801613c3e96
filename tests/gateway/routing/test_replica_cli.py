"""``iqgate replica`` as real processes on the embedded log: restores, serves, finds its peer through the heartbeat
topic (no --peers), routes to it; usage errors are one line each."""

from __future__ import annotations

import subprocess
import sys
import time

from gateway.routing.heartbeats import HeartbeatDiscovery, heartbeat_topic
from gateway.routing.membership import Membership
from stores.changelog import EventLogChangelog
from stores.log.eventlog import EventLog
from tests.gateway.routing.cluster import ROOT, Proc, free_port, get, post
from tests.stores.changelog.helpers import APP, batch, logged_writer, open_app, position


def _wait(cond, what: str, timeout_s: float = 60.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not cond():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.1)


def test_heartbeat_discovery_finds_the_others_not_itself(tmp_path) -> None:
    log = EventLog(tmp_path / "log")
    a, b = Membership([], interval_s=60), Membership([], interval_s=60)
    da = HeartbeatDiscovery(log, APP, a, "http://127.0.0.1:1", interval_s=60).start()
    db = HeartbeatDiscovery(log, APP, b, "http://127.0.0.1:2/", interval_s=60).start()
    try:
        da.beat()
        assert set(a.peers) == {"http://127.0.0.1:2"} and set(b.peers) == {"http://127.0.0.1:1"}
        assert log.partitions(heartbeat_topic(APP)) == 1
        assert da.recent() == ["http://127.0.0.1:1", "http://127.0.0.1:2"]
    finally:
        for x in (da, db, a, b):
            x.close()


def test_replicas_from_the_command_line_find_each_other_and_route(tmp_path) -> None:
    log = EventLog(tmp_path / "log")
    app = open_app(tmp_path / "active")
    w = logged_writer(app, EventLogChangelog(log))
    for i in range(3):
        w.write_batch(i, batch(i), position(i))
    ports = [free_port(), free_port()]
    procs = [Proc(["replica", "--log", str(tmp_path / "log"), "--application-id", APP, "--state-dir",
                   str(tmp_path / f"r{port}"), "--port", str(port), "--heartbeat-topic", "--heartbeat-ms", "200",
                   *(["--partitions", "revenue=0"] if i == 0 else [])],
                  tmp_path / f"r{port}.log", port) for i, port in enumerate(ports)]
    try:
        for p in procs:
            p.wait_healthy(60, f"replica on {p.port}")
        _wait(lambda: all(len(get(p.url, "/v1/health")[1].get("peers", [])) == 1 for p in procs), "peers found")
        w.write_batch(3, batch(3), position(3))
        # the first replica hosts only partition 0: its peer answers 1 and 2, at the bound the client asks for
        status, out = post(procs[0].url, {"sql": "SELECT count(*) FROM revenue", "position": position(3),
                                          "wait_ms": 20_000})
        assert status == 200, out
        hosts = {p["partition"]: p["host"] for p in out["partitions"]}
        # partition 0 from its own copy, or from the peer if the own copy had not yet reached the bound
        assert hosts[1] == hosts[2] == procs[1].url and hosts[0] in (procs[0].url, procs[1].url), hosts
        assert {p["partition"]: p["active"] for p in out["partitions"]} == {0: False, 1: False, 2: False}
        assert out["rows"] == post(procs[1].url, {"sql": "SELECT count(*) FROM revenue"})[1]["rows"]
        status, out = post(procs[1].url, {"sql": "SELECT count(*) FROM revenue"})
        assert status == 200 and out["rows"] == post(procs[0].url, {"sql": "SELECT count(*) FROM revenue"})[1]["rows"]
    finally:
        for p in procs:
            p.stop()
        app.close()


def test_replica_usage_errors_are_one_line(tmp_path) -> None:
    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "gateway.cli", "replica", *args], cwd=ROOT, text=True,
                              capture_output=True, timeout=60)

    r = run("--log", str(tmp_path / "nolog"), "--application-id", "shop", "--port", "0")
    assert r.returncode != 0 and "is not an event log" in r.stderr and "Traceback" not in r.stderr
    r = run("--application-id", "shop", "--partitions", "revenue=x", "--log", str(tmp_path), "--port", "0")
    assert r.returncode != 0 and "Traceback" not in r.stderr
    r = run("--log", str(tmp_path), "--port", "0")
    assert r.returncode == 2 and "--application-id" in r.stderr
    EventLog(tmp_path / "log")
    r = run("--log", str(tmp_path / "log"), "--application-id", "shop", "--partitions", "revenue=x",
            "--state-dir", str(tmp_path / "s"), "--port", "0")
    assert r.returncode != 0 and "--partitions must be STORE=P" in r.stderr and "Traceback" not in r.stderr
    r = run("--log", str(tmp_path / "log"), "--application-id", "shop", "--peers", "ftp://x",
            "--state-dir", str(tmp_path / "s2"), "--port", "0")
    assert r.returncode != 0 and "not an http:// or https:// URL" in r.stderr
