"""kill -9 of a process writing big columnar batches: every partition holds the old or the new batch, whole.

The child (columnar_child.py) writes Arrow batches into a store of every kind
with partitions in parallel threads and rows staged through ADBC into
``partition-<n>.db.stage`` files. It is killed while a staging file exists
(mid-staging or mid-merge) or at a random moment, restarted from the smallest
applied batch (replaying it where some partitions already hold it), and
killed again. After each kill every partition is opened as the writer opens
it and compared with what its batch must have left: data, tombstones,
versions and Position all of one batch, the file sound, no staging file left.
"""

from __future__ import annotations

import functools
import os
import random
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from stores.catalog.partitioner import partition_for_key
from stores.catalog.schema import SqlType, StoreKind, StoreSpec
from stores.engine import open_partition
from tests.stores.engine import columnar_child as child_mod

pytestmark = pytest.mark.slow

CHILD = Path(__file__).with_name("columnar_child.py")
KEYS = 9_000  # ~5,000 rows a partition: above ADBC_MIN_ROWS, so batches are staged through the ADBC file
PAD = "x" * 48


def _spawn(root: Path, batches: int, max_s: float) -> subprocess.Popen[str]:
    proc = subprocess.Popen([sys.executable, str(CHILD), str(root), str(batches), str(KEYS), str(max_s)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    line = proc.stdout.readline().strip()
    assert line == "started", f"child did not start: {line!r} {proc.stderr.read() if proc.poll() is not None else ''}"
    return proc


def _kill(proc: subprocess.Popen[str]) -> None:
    os.kill(proc.pid, signal.SIGKILL)
    assert proc.wait(timeout=30) == -signal.SIGKILL


def _kill_when_staging(root: Path, proc: subprocess.Popen[str], timeout_s: float = 60) -> bool:
    """Kill the child as soon as a staging file exists (True), or at the timeout (False)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline and proc.poll() is None:
        if any(root.glob("*.db.stage")):
            _kill(proc)
            return True
        time.sleep(0.002)
    _kill(proc)
    return False


def _kill_after_batches(proc: subprocess.Popen[str], batches: int, rng: random.Random) -> None:
    assert proc.stdout is not None
    for _ in range(batches):
        assert proc.stdout.readline().startswith("batch"), f"child died (exit {proc.poll()})"
    time.sleep(rng.uniform(0, 0.3))
    _kill(proc)


def _expected(spec: StoreSpec, p: int, b: int) -> list[tuple]:
    """The rows batch b (after batches 1..b) leaves in partition p of ``spec``, as the table lists them."""
    if b == 0:
        return []  # killed before its first batch committed
    mine = _keys_of(p)
    if spec.kind is StoreKind.VERSIONED:
        dead = {j: child_mod.deleted(j, KEYS) for j in range(1, b + 1)}
        return [(k, j, j + 1 if j < b else None, int(dead[j][k]), None if dead[j][k] else j,
                 None if dead[j][k] else PAD) for k in mine for j in range(1, b + 1)]
    dead_now = child_mod.deleted(b, KEYS)
    live = [k for k in mine if not dead_now[k]]
    if spec.kind in (StoreKind.WINDOW, StoreKind.SESSION):
        end = child_mod.WINDOW_MS if spec.kind is StoreKind.WINDOW else 10
        return [(k, 0, end, b, b, PAD) for k in live]
    return [(k, b, b, PAD) for k in live]


@functools.lru_cache(maxsize=None)
def _keys_of(p: int) -> list[int]:
    return [k for k in range(KEYS) if partition_for_key(k, child_mod.PARTITIONS, SqlType.BIGINT) == p]


_SELECT = {
    StoreKind.KEY_VALUE: "SELECT k, ts, v0, v1 FROM kv ORDER BY k",
    StoreKind.TIMESTAMPED_KEY_VALUE: "SELECT k, ts, v0, v1 FROM kv ORDER BY k",
    StoreKind.WINDOW: "SELECT k, ws, we, ts, v0, v1 FROM win ORDER BY k, ws, we",
    StoreKind.SESSION: "SELECT k, ws, we, ts, v0, v1 FROM win ORDER BY k, ws, we",
    StoreKind.VERSIONED: "SELECT k, vf, vt, tomb, v0, v1 FROM ver ORDER BY k, vf",
}


def _verify(root: Path) -> dict[tuple[str, int], int]:
    """Open every partition as the writer would and check it holds one whole batch; (store, partition) -> batch."""
    seen = {}
    for spec in child_mod.specs():
        for p in range(child_mod.PARTITIONS):
            f = child_mod.path(root, spec, p)
            store = open_partition(spec, p, f)  # the writer's open: WAL recovered, a leftover staging file removed
            try:
                meta = store.meta()
            finally:
                store.close()
            assert not Path(f"{f}.stage").exists(), f"{f}: the staging file outlived the writer's open"
            b = meta["last_batch_id"] or 0
            assert (meta["position"].offset(child_mod.TOPIC, 0) or 0) == b, f"{f}: position and batch differ"
            con = sqlite3.connect(f)
            try:
                assert con.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
                rows = con.execute(_SELECT[spec.kind]).fetchall()
            finally:
                con.close()
            want = _expected(spec, p, b)
            assert rows == want, (f"{spec.name} partition {p} at batch {b}: {len(rows)} rows, {len(want)} expected;"
                                  f" first difference {next((r, w) for r, w in zip(rows + [None] * len(want), want) if r != w)}")
            seen[(spec.name, p)] = b
    return seen


def test_kill_9_while_columnar_batches_stage_and_merge(tmp_path: Path) -> None:
    rng = random.Random(22)
    caught_staging = 0
    progress = []
    for round_ in range(3):
        proc = _spawn(tmp_path, batches=200, max_s=60)
        try:
            if round_ % 2 == 0:
                caught_staging += _kill_when_staging(tmp_path, proc)
            else:
                _kill_after_batches(proc, 1, rng)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait(timeout=30)
        seen = _verify(tmp_path)
        assert max(seen.values()) - min(seen.values()) <= 1  # one batch in flight at most, store by store
        progress.append(min(seen.values()))
    assert caught_staging >= 1, "no kill landed while a batch was being staged"
    proc = _spawn(tmp_path, batches=2, max_s=60)  # a clean run: replays the partial batch, then one more
    assert proc.wait(timeout=120) == 0, proc.stderr.read() if proc.stderr else ""
    final = _verify(tmp_path)
    assert len(set(final.values())) == 1 and min(final.values()) == progress[-1] + 2
    assert progress == sorted(progress)


def test_child_batches_are_what_the_test_expects(tmp_path: Path) -> None:
    """The oracle itself: two batches written in-process leave exactly ``_expected`` (so a kill test can fail)."""
    for b in (1, 2):
        for spec in child_mod.specs():
            stores = {p: open_partition(spec, p, child_mod.path(tmp_path, spec, p), synchronous="OFF")
                      for p in range(child_mod.PARTITIONS)}
            from stores.engine.writer import PartitionedWriter
            from stores.iqv2.position import Position

            PartitionedWriter(spec, stores, threads=2, parallel_min_rows=0).write_table(
                b, child_mod.table(spec, b, KEYS), Position.from_map({child_mod.TOPIC: {0: b}}))
            for s in stores.values():
                s.close()
    seen = _verify(tmp_path)
    assert set(seen.values()) == {2}
    assert np.count_nonzero(child_mod.deleted(2, KEYS)) > 0
