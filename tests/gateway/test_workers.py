"""``iqgate serve --workers N`` (issue 14 item 4): N processes accept on one port over one state dir; a stopped
process leaves its share to the others, a dead worker is started again, and they all end with the first."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from stores.app.streams import StreamsApp
from tests.gateway.gwfixtures import Shop

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.skipif(not Path("/proc/self/task").exists(), reason="Linux /proc")


def _children(pid: int) -> list[int]:
    """Children of every thread of ``pid`` (a restarted worker is a child of the thread that watches them)."""
    out = []
    try:
        for task in Path(f"/proc/{pid}/task").iterdir():
            try:
                out += [int(x) for x in (task / "children").read_text().split()]
            except OSError:
                continue
    except OSError:
        return []
    return out


def _count(url: str, timeout: float = 10.0) -> int:
    body = json.dumps({"sql": "SELECT count(*) FROM revenue"}).encode()
    req = urllib.request.Request(f"{url}/v1/sql", body, {"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=timeout) as r:
        return json.loads(r.read())["rows"][0][0]


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return Path(f"/proc/{pid}").exists() and "zombie" not in Path(f"/proc/{pid}/status").read_text()


@pytest.fixture()
def served(shop_app: StreamsApp, tmp_path: Path) -> Iterator[tuple[subprocess.Popen[str], str]]:
    yield from _serve(shop_app, tmp_path)


@pytest.fixture()
def served_unpinned(shop_app: StreamsApp, tmp_path: Path) -> Iterator[tuple[subprocess.Popen[str], str]]:
    yield from _serve(shop_app, tmp_path, "--no-pin-cpus")


def _serve(shop_app: StreamsApp, tmp_path: Path, *extra: str) -> Iterator[tuple[subprocess.Popen[str], str]]:
    err = tmp_path / "serve.err"  # a file, not a pipe: workers keep writing to it after the test stops reading
    with open(err, "w") as f:
        proc = subprocess.Popen([sys.executable, "-m", "gateway.cli", "serve", "--state-dir",
                                 str(shop_app.state_dir), "--port", "0", "--workers", "2", "--threads", "2", *extra],
                                cwd=ROOT, stdout=subprocess.DEVNULL, stderr=f, text=True)
    try:
        m = None
        for _ in range(600):  # bounded: 60 s
            m = re.search(r"on (http://127\.0\.0\.1:\d+) \(2 processes", err.read_text())
            if m or proc.poll() is not None:
                break
            time.sleep(0.1)
        assert m, f"the server did not say it serves with 2 processes: {err.read_text()[-2000:]}"
        yield proc, m.group(1)
    finally:
        with_children = [proc.pid, *_children(proc.pid)]
        for pid in with_children:
            try:
                os.kill(pid, signal.SIGCONT)
            except ProcessLookupError:
                pass
        proc.terminate()
        proc.wait(20)


def test_workers_share_the_port_and_the_state_dir(served: tuple[subprocess.Popen[str], str], shop: Shop,
                                                  tmp_path: Path) -> None:
    proc, url = served
    deadline = time.monotonic() + 60
    while len(_children(proc.pid)) < 1 and time.monotonic() < deadline:
        time.sleep(0.1)
    (worker,) = _children(proc.pid)
    assert _count(url) == len(shop.revenue)
    # The first process stopped (SIGSTOP): new connections are answered by the worker, not queued behind it.
    os.kill(proc.pid, signal.SIGSTOP)
    try:
        time.sleep(0.3)
        for _ in range(5):
            assert _count(url, timeout=10) == len(shop.revenue)
    finally:
        os.kill(proc.pid, signal.SIGCONT)
    # A worker that dies is started again.
    os.kill(worker, signal.SIGKILL)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and not [p for p in _children(proc.pid) if p != worker and _alive(p)]:
        time.sleep(0.2)
    (again,) = [p for p in _children(proc.pid) if _alive(p)]
    assert again != worker
    # The first process ends on SIGTERM, cleanly (exit 0, as on Ctrl-C): every worker ends with it.
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(30) == 0
    assert "SIGTERM: stopping" in (tmp_path / "serve.err").read_text()
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline and _alive(again):
        time.sleep(0.2)
    assert not _alive(again), Path(f"/proc/{again}/status").read_text()[:300]


def test_a_worker_started_alone_refuses_no_flag(shop_app: StreamsApp) -> None:
    """``--workers`` is validated like every other number: a usage error, not a traceback."""
    out = subprocess.run([sys.executable, "-m", "gateway.cli", "serve", "--state-dir", str(shop_app.state_dir),
                          "--workers", "0"], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert out.returncode == 2 and "--workers: must be at least 1, got 0" in out.stderr


def _pinned_cpus(pid: int) -> tuple[set[int], list[frozenset[int]]]:
    """(the CPUs of ``pid``'s main thread, the CPU sets of its threads restricted to one CPU)."""
    def cpus(status: str) -> frozenset[int]:
        text = re.search(r"^Cpus_allowed_list:\s*(\S+)", status, re.M).group(1)  # type: ignore[union-attr]
        out: set[int] = set()
        for part in text.split(","):
            lo, _, hi = part.partition("-")
            out.update(range(int(lo), int(hi or lo) + 1))
        return frozenset(out)

    main: set[int] = set()
    one: list[frozenset[int]] = []
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            got = cpus((task / "status").read_text())
        except OSError:
            continue
        if task.name == str(pid):
            main = set(got)
        elif len(got) == 1:
            one.append(got)
    return main, one


@pytest.mark.skipif(len(getattr(os, "sched_getaffinity", lambda _: {0})(0)) < 2, reason="needs 2 CPUs")
def test_each_serving_process_runs_its_http_threads_on_a_cpu_of_its_own(
        served: tuple[subprocess.Popen[str], str], shop: Shop) -> None:
    proc, url = served
    allowed = os.sched_getaffinity(0)
    deadline = time.monotonic() + 60
    pinned: dict[int, list[frozenset[int]]] = {}
    while time.monotonic() < deadline:
        kids = [p for p in _children(proc.pid) if _alive(p)]
        pinned = {p: _pinned_cpus(p)[1] for p in [proc.pid, *kids]}
        if len(pinned) == 2 and all(len(v) >= 3 for v in pinned.values()):  # the loop and 2 handler threads each
            break
        time.sleep(0.2)
    assert len(pinned) == 2, pinned
    first, worker = (set().union(*pinned[p]) for p in pinned)
    assert len(first) == 1 and len(worker) == 1 and first != worker and first | worker <= allowed, pinned
    assert _pinned_cpus(proc.pid)[0] == allowed  # the rest of the process (a hosted pipeline, Spark) is not pinned
    assert _count(url) == len(shop.revenue)


def test_no_pin_cpus_leaves_every_thread_to_the_scheduler(served_unpinned: tuple[subprocess.Popen[str], str],
                                                          shop: Shop) -> None:
    proc, url = served_unpinned
    allowed = os.sched_getaffinity(0)
    deadline = time.monotonic() + 60
    kids: list[int] = []
    while time.monotonic() < deadline and not kids:
        kids = [p for p in _children(proc.pid) if _alive(p)]
        time.sleep(0.2)
    assert len(kids) == 1, kids
    assert _count(url) == len(shop.revenue)

    def threads(pid: int) -> int:
        try:
            return len(os.listdir(f"/proc/{pid}/task"))
        except OSError:
            return 0

    # the accept loop and the 2 handler threads exist in both processes (the pinned test sees 3 pinned each),
    # so an empty "pinned" list below means not pinned, not not yet started
    while time.monotonic() < deadline and min(threads(proc.pid), threads(kids[0])) < 4:
        time.sleep(0.2)
    for pid in (proc.pid, kids[0]):
        assert threads(pid) >= 4, pid
        main, one = _pinned_cpus(pid)
        assert main == allowed and (len(allowed) < 2 or not one), (pid, main, one)
