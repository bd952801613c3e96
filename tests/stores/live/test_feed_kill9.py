"""kill -9 of the process writing a store: a feed following it from another process goes on exactly (the
changelog is exactly-once: a replayed batch applies its logged record, never a second one), and a feed dropped
at the kill resumes exactly from its Position once the pipeline is back."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from stores.app.reader import StateDirReader
from stores.live import LiveFeeds

from .workload import SPECS, Model, Subscriber, batch_of, drain, workload

pytestmark = pytest.mark.slow
CHILD = Path(__file__).with_name("writer_child.py")
BATCHES = 60


def _spawn(tmp: Path, kind: str, pause_s: float) -> subprocess.Popen[str]:
    proc = subprocess.Popen([sys.executable, str(CHILD), str(tmp / "state"), str(tmp / "log"), kind, str(BATCHES),
                             str(pause_s)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    line = proc.stdout.readline().strip()
    assert line.startswith("started"), f"the writer did not start: {line!r} {proc.stderr.read() if proc.poll() else ''}"
    return proc


def _wrote(proc: subprocess.Popen[str], at_least: int, timeout_s: float = 60) -> int:
    deadline = time.monotonic() + timeout_s
    assert proc.stdout is not None
    while time.monotonic() < deadline:
        line = proc.stdout.readline().strip()
        if line.startswith("wrote ") and int(line.split()[1]) >= at_least:
            return int(line.split()[1])
        if not line and proc.poll() is not None:
            break
    raise AssertionError(f"the writer did not write batch {at_least}: {proc.stderr.read() if proc.stderr else ''}")


@pytest.mark.parametrize("kind", ["kv", "ver"])
def test_a_feed_survives_kill_9_of_the_writer_and_a_dropped_one_resumes(tmp_path, kind) -> None:
    spec = SPECS[kind]
    changes = workload(kind, BATCHES, seed=5)
    model, answers = Model(spec), {}
    for i, b in enumerate(changes):
        model.apply(b)
        answers[i] = model.answer()
    topic = f"shop-{kind}-changelog"
    proc = _spawn(tmp_path, kind, 0.004)
    reader = StateDirReader(tmp_path / "state")
    checks: list[int] = []

    def exact(sub: Subscriber, upto: int):
        def there() -> bool:
            if sub.position is None or sub.position.is_empty():
                return False
            b = batch_of(sub.position, topic)
            if not checks or checks[-1] != b:
                assert sub.answer() == answers[b], f"batch {b}"
                checks.append(b)
            return b >= upto
        return there

    try:
        _wrote(proc, 3)
        with LiveFeeds(reader) as feeds:
            follower, dropped = Subscriber(spec), Subscriber(spec)
            feed, other = feeds.open_feed(kind, timeout_s=30), feeds.open_feed(kind, timeout_s=30)
            drain(feed, follower, exact(follower, 3))
            drain(other, dropped, lambda: dropped.position is not None)
            killed_at = _wrote(proc, 15)
            os.kill(proc.pid, signal.SIGKILL)  # mid-batch or between batches, wherever it was
            assert proc.wait(timeout=30) == -signal.SIGKILL
            at = dropped.position
            other.close()  # its client went away with the pipeline
            drain(feed, follower, exact(follower, killed_at))
            proc = _spawn(tmp_path, kind, 0.0)  # the restarted pipeline replays and goes on
            drain(feed, follower, exact(follower, BATCHES - 1), timeout_s=60)
            assert proc.wait(timeout=60) == 0
            resumed = feeds.open_feed(kind, at, snapshot=False)
            drain(resumed, dropped, lambda: dropped.position is not None and batch_of(dropped.position, topic)
                  == BATCHES - 1, timeout_s=60)
            assert dropped.answer() == answers[BATCHES - 1]
        assert checks == sorted(checks) and checks[-1] == BATCHES - 1
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)
        reader.close()
