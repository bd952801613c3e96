"""Two processes on one state directory: a writer process and readers, plus kill -9 mid-batch.

Batch b sets every key to value b and the position to {src: {0: b}}, so any
snapshot where a value differs from the position's offset, or where values
disagree, is a torn read or a half-applied batch.
"""

from __future__ import annotations

import os
import random
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from stores.app import layout
from stores.app.reader import StateDirReader
from stores.catalog.schema import StoreSpec
from stores.engine import open_partition
from stores.iqv2.position import PositionBound
from stores.iqv2.query import KeyQuery, RangeQuery
from stores.iqv2.request import StateQueryRequest

PROCS = Path(__file__).with_name("store_procs.py")
TOPIC = "src"


def spawn_writer(state_dir: Path, batches: int, keys: int, max_s: float) -> subprocess.Popen[str]:
    child = subprocess.Popen(
        [sys.executable, str(PROCS), "write", str(state_dir), "procs", str(batches), str(keys), str(max_s)],
        stdout=subprocess.PIPE, text=True,
    )
    assert child.stdout is not None
    line = child.stdout.readline().strip()
    assert line == "started", line
    return child


def check_snapshot(res: Any, keys: int) -> dict[int, int]:
    """Every partition: values all equal the batch its position names. Returns partition -> batch."""
    seen = {}
    for p, r in res.partition_results.items():
        assert r.is_success, r
        b = r.position.offset(TOPIC, 0)
        values = {kv.value[0] for kv in r.result}
        if b is None:
            assert values == set()
        else:
            assert values == {b}, f"partition {p}: position says batch {b}, data says {values}"
        seen[p] = b if b is not None else -1
    return seen


@pytest.mark.slow
def test_reader_process_never_sees_data_and_position_out_of_step(tmp_path: Path) -> None:
    state_dir = tmp_path / "state"
    keys = 200
    child = spawn_writer(state_dir, batches=5000, keys=keys, max_s=4.0)
    try:
        reader = StateDirReader(state_dir)
        last: dict[int, int] = {}
        batches_seen: set[int] = set()
        deadline = time.monotonic() + 30
        reads = 0
        while child.poll() is None and time.monotonic() < deadline and reads < 100_000:
            for p in (0, 1):
                bound = PositionBound.at({TOPIC: {0: last[p]}}) if last.get(p, -1) >= 0 else PositionBound.unbounded()
                req = (StateQueryRequest.in_store("kv").with_query(RangeQuery.with_no_bounds())
                       .with_partitions({p}).with_position_bound(bound))
                seen = check_snapshot(reader.query(req), keys)  # never NOT_UP_TO_BOUND: snapshots never go back
                assert seen[p] >= last.get(p, -1)
                last[p] = seen[p]
                batches_seen.add(seen[p])
                one = reader.query(StateQueryRequest.in_store("kv").with_query(KeyQuery.with_key(7))
                                   .with_partitions({p}).with_position_bound(bound))
                for r in one.partition_results.values():
                    assert r.is_success
                    if r.result is not None:
                        assert r.result[0] == r.position.offset(TOPIC, 0)
                reads += 1
        assert child.wait(timeout=60) == 0
        assert reads > 0 and len(batches_seen - {-1}) >= 2, batches_seen
        final = reader.query(StateQueryRequest.in_store("kv").with_query(RangeQuery.with_no_bounds()))
        assert len(set(check_snapshot(final, keys).values())) == 1
        reader.close()
    finally:
        if child.poll() is None:
            child.kill()
            child.wait(timeout=10)


def _verify_files(state_dir: Path, keys: int) -> int:
    """Open every partition read-write (recovering the WAL), check integrity and that no batch is torn."""
    spec = StoreSpec.from_json(layout.spec_path(state_dir, "kv").read_text())
    batches = set()
    for p in range(spec.partitions):
        path = layout.partition_path(state_dir, "kv", p)
        con = sqlite3.connect(path)
        assert con.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
        con.close()
        store = open_partition(spec, p, path)
        meta = store.meta()
        b = meta["last_batch_id"]
        assert meta["position"].offset(TOPIC, 0) == b
        values = {kv.value[0] for kv in store.query(RangeQuery.with_no_bounds(), PositionBound.unbounded()).result}
        assert values == ({b} if b is not None else set()), f"partition {p}: batch {b} but values {values}"
        batches.add(b)
        store.close()
    return min(b for b in batches if b is not None) if any(batches) else 0


@pytest.mark.slow
def test_kill_minus_9_mid_batch_leaves_old_or_new_batch(tmp_path: Path) -> None:
    state_dir = tmp_path / "state"
    keys = 5000
    rng = random.Random(7)
    progress = []
    for _round in range(3):
        child = spawn_writer(state_dir, batches=10_000, keys=keys, max_s=20.0)
        try:
            reader = StateDirReader(state_dir)
            deadline = time.monotonic() + 20
            start = None
            while time.monotonic() < deadline:  # wait until this round has committed a couple of batches
                pos = reader.positions().get("kv")
                b = pos.offset(TOPIC, 0) if pos else None
                start = b if start is None else start
                if b is not None and b >= (start or 0) + 2:
                    break
                time.sleep(0.01)
            reader.close()
            time.sleep(rng.uniform(0, 0.05))
            os.kill(child.pid, signal.SIGKILL)
            assert child.wait(timeout=10) == -signal.SIGKILL
        finally:
            if child.poll() is None:
                child.kill()
                child.wait(timeout=10)
        progress.append(_verify_files(state_dir, keys))
    assert progress == sorted(progress) and progress[-1] > progress[0]


@pytest.mark.slow
def test_read_only_reader_opens_files_of_a_killed_writer(tmp_path: Path) -> None:
    state_dir = tmp_path / "state"
    child = spawn_writer(state_dir, batches=10_000, keys=2000, max_s=20.0)
    try:
        deadline = time.monotonic() + 20
        reader = StateDirReader(state_dir)
        while time.monotonic() < deadline:
            pos = reader.positions().get("kv")
            if pos and (pos.offset(TOPIC, 0) or 0) >= 2:
                break
            time.sleep(0.01)
        reader.close()
        os.kill(child.pid, signal.SIGKILL)
        child.wait(timeout=10)
    finally:
        if child.poll() is None:
            child.kill()
            child.wait(timeout=10)
    fresh = StateDirReader(state_dir)  # first opener after the crash is read-only
    res = fresh.query(StateQueryRequest.in_store("kv").with_query(RangeQuery.with_no_bounds()))
    assert len(set(check_snapshot(res, 2000).values())) >= 1
    assert fresh.state.name == "NOT_RUNNING"  # app.json says RUNNING but the pid is dead
    fresh.close()
