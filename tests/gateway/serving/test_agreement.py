"""Every serving process of a server tells the same truth (issue 52): one state, one health, one answer rule.

A real server (supervisor + serving processes, ``hosted_server.py``) hosting a real StreamsApp is driven through
start-up, a rebalance, a fault and its recovery, a new batch, ERROR and a close, while keep-alive connections to
every serving process poll health and a query. Every sequence of states a connection observes moves along
KIP-696's edges only (never back, nothing after a final state); after ERROR every process refuses every query
the same way; health and store statuses never contradict each other. With one serving process and with four.
"""

from __future__ import annotations

import http.client
import json
import os
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from gateway.serving.publisher import path_between
from stores.iqv2.state import State

ROOT = Path(__file__).resolve().parents[3]
SQL = json.dumps({"sql": "SELECT count(*) FROM revenue"})


class Served:
    """The server process, its stdin to drive it, and its URL."""

    def __init__(self, proc: subprocess.Popen[str], url: str) -> None:
        self.proc, self.url = proc, url
        self.port = int(url.rsplit(":", 1)[1])

    def do(self, command: str, timeout_s: float = 60.0) -> None:
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.write(command + "\n")
        self.proc.stdin.flush()
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            line = self.proc.stdout.readline()
            if line.strip() == f"DONE {command.split()[0]}":
                return
            assert line, "the server ended"
        raise AssertionError(f"{command} did not finish")


@pytest.fixture(params=[1, 4], ids=["1-worker", "4-workers"])
def served(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Served]:
    err = open(tmp_path / "server.err", "w")  # noqa: SIM115 - closed below; a file: serving processes write on
    proc = subprocess.Popen([sys.executable, "-m", "tests.gateway.serving.hosted_server", str(tmp_path / "state"),
                             str(request.param)], cwd=ROOT, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=err, text=True)
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        assert line.startswith("READY "), (line, (tmp_path / "server.err").read_text()[-3000:])
        served = Served(proc, line.split()[1])
        served.workers = request.param  # type: ignore[attr-defined]
        yield served
    finally:
        proc.terminate()
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
        err.close()


def _connections(served: Served, workers: int) -> dict[int, http.client.HTTPConnection]:
    """One keep-alive connection to each serving process (keyed by its pid, as its health names it)."""
    out: dict[int, http.client.HTTPConnection] = {}
    extra: list[http.client.HTTPConnection] = []
    deadline = time.monotonic() + 60
    while len(out) < workers and time.monotonic() < deadline:
        c = http.client.HTTPConnection("127.0.0.1", served.port, timeout=30)
        status, body = _get(c, "/v1/health")
        pid = body.get("process", {}).get("pid")
        if pid is not None and pid not in out:
            out[pid] = c
        else:
            extra.append(c)  # kept open: the accept board then sends the next one to a process with fewer
    for c in extra:
        c.close()
    assert len(out) == workers, f"reached {len(out)} of {workers} serving processes"
    return out


def _get(c: http.client.HTTPConnection, path: str) -> tuple[int, dict[str, Any]]:
    c.request("GET", path)
    r = c.getresponse()
    return r.status, json.loads(r.read())


def _query(c: http.client.HTTPConnection) -> tuple[int, dict[str, Any]]:
    c.request("POST", "/v1/sql", SQL, {"Content-Type": "application/json"})
    r = c.getresponse()
    return r.status, json.loads(r.read())


class Watcher:
    """Polls health and the query on every connection in a thread, recording what each process said."""

    def __init__(self, conns: dict[int, http.client.HTTPConnection]) -> None:
        self.conns = conns
        self.seen: dict[int, list[tuple[str, int, dict[str, Any], int, dict[str, Any]]]] = {p: [] for p in conns}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> Watcher:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(30)

    def _run(self) -> None:
        for _ in range(100_000):  # bounded; the test ends it
            if self._stop.is_set():
                return
            for pid, c in self.conns.items():
                hs, health = _get(c, "/v1/health")
                qs, answer = _query(c)
                self.seen[pid].append((health["state"], hs, health, qs, answer))
            time.sleep(0.01)


def _check_edges(states: list[str]) -> None:
    """Each observed state follows the one before along KIP-696's edges (a step may be several edges)."""
    for old, new in zip(states, states[1:]):
        assert path_between(State(old), State(new)) is not None, f"{old} -> {new} in {states}"


def _check_consistent(health: dict[str, Any]) -> None:
    """Health and every store's status say the same thing."""
    stopped = health["status"] == "stopped"
    for name, st in health["stores"].items():
        assert (st["status"] == "stopped") == stopped, (name, st, health["status"])


def test_every_process_tells_the_same_state_through_a_lifecycle(served: Served) -> None:
    workers = served.workers  # type: ignore[attr-defined]
    conns = _connections(served, workers)
    with Watcher(conns) as watcher:
        time.sleep(0.3)
        served.do("rebalance")
        time.sleep(0.3)
        served.do("pause revenue")
        time.sleep(0.3)
        served.do("resume revenue")
        served.do("batch")
        time.sleep(0.3)
        served.do("error")
        time.sleep(0.5)
    for pid, seen in watcher.seen.items():
        states = [s for s, *_ in seen]
        _check_edges(states)
        assert states[-1] == "ERROR", (pid, states[-5:])
        degraded = [(health, qs) for _, _, health, qs, _ in seen if health["status"] == "degraded"]
        assert degraded, pid  # the fault: a degraded health on every process, reads answering meanwhile
        for health, qs in degraded:
            assert "No space left on device" in health["reason"] and "partition-0.db" in health["reason"]
            assert "raise " not in health["reason"] and qs == 200
        stopped = ("PENDING_ERROR", "ERROR", "PENDING_SHUTDOWN", "NOT_RUNNING")
        for i, (state, hs, health, qs, answer) in enumerate(seen):
            _check_consistent(health)
            assert health["state"] == state
            if state in stopped:  # health said stopped before the query: the query is refused
                assert qs == 503 and answer["error"]["code"] == "STREAMS_STOPPED", (state, answer)
            if qs != 200:  # refused: by then the app was stopped, as every later health says
                assert answer["error"]["code"] == "STREAMS_STOPPED", answer
                assert all(later[0] in stopped for later in seen[i + 1:]), (pid, states[i:i + 5])
            if state == "RUNNING" and health["status"] == "healthy":
                assert hs == 200
    # after ERROR: every process refuses every query the same way, and says why
    answers = set()
    for c in conns.values():
        for _ in range(3):
            qs, answer = _query(c)
            hs, health = _get(c, "/v1/health")
            assert (qs, answer["error"]["code"]) == (503, "STREAMS_STOPPED"), answer
            assert "MISSING_SOURCE_TOPIC" in answer["error"]["message"]
            assert hs == 503 and health["state"] == "ERROR" and health["status"] == "stopped"
            _check_consistent(health)
            answers.add(json.dumps(answer, sort_keys=True))
    assert len(answers) == 1, answers


def test_a_closed_app_is_refused_alike_and_never_comes_back(served: Served) -> None:
    workers = served.workers  # type: ignore[attr-defined]
    conns = _connections(served, workers)
    with Watcher(conns) as watcher:
        time.sleep(0.2)
        served.do("close")
        time.sleep(0.5)
    for seen in watcher.seen.values():
        states = [s for s, *_ in seen]
        _check_edges(states)
        assert states[-1] == "NOT_RUNNING"
        assert all(s == "NOT_RUNNING" for s in states[states.index("NOT_RUNNING"):])
    for c in conns.values():
        qs, answer = _query(c)
        assert (qs, answer["error"]["code"]) == (503, "STREAMS_STOPPED")


def test_each_process_says_how_old_its_view_is(served: Served) -> None:
    workers = served.workers  # type: ignore[attr-defined]
    for pid, c in _connections(served, workers).items():
        _, health = _get(c, "/v1/health")
        assert health["process"]["pid"] == pid and health["mode"] == "hosted"
        assert 0 <= health["view_age_ms"] < 1000, health["view_age_ms"]  # the supervisor beats every 50 ms


def test_path_between_follows_the_matrix() -> None:
    assert path_between(State.RUNNING, State.ERROR) == [State.PENDING_ERROR, State.ERROR]
    assert path_between(State.CREATED, State.RUNNING) == [State.REBALANCING, State.RUNNING]
    assert path_between(State.NOT_RUNNING, State.REBALANCING) is None  # final
    assert path_between(State.REBALANCING, State.CREATED) is None  # never back
    assert path_between(State.ERROR, State.ERROR) == []
    for a in State:
        for b in State:
            steps = path_between(a, b)
            if steps:
                for x, y in zip([a, *steps], steps):
                    assert x.is_valid_transition(y)


@pytest.mark.skipif(not hasattr(os, "memfd_create"), reason="Linux memfd")
def test_the_board_reads_what_was_published_and_how_old_it_is() -> None:
    from gateway.serving.state_board import StateBoard

    board = StateBoard.create()
    try:
        reader = StateBoard.attach(os.dup(board.fileno()))
        assert reader.read().doc == {}
        board.publish({"state": "RUNNING", "n": 1})
        view = reader.read()
        assert view.doc == {"state": "RUNNING", "n": 1} and view.age_ms < 1000 and not view.stale
        same = reader.read()
        assert same.doc is view.doc  # not parsed again while the sequence stands
        board.publish({"state": "ERROR"})
        assert reader.read().doc == {"state": "ERROR"}
        reader.close()
    finally:
        board.close()
