"""The benchmarks' process-tree memory: a spawn child that still shares its parent's memory is not counted twice."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from benchmarks.procs import is_parents_copy, process_tree, status_kb, tree_rss_kb

_PARENT = """
import subprocess, sys, time
ballast = bytearray(64 * 1024 * 1024)
for i in range(0, len(ballast), 4096):
    ballast[i] = 1
subprocess.Popen([sys.executable, "-c", "import time; b = bytearray(32 * 1024 * 1024)\\n"
                  "for i in range(0, len(b), 4096): b[i] = 1\\n"
                  "print('child', flush=True); time.sleep(30)"])
time.sleep(30)
"""


def test_the_jvms_spawn_child_is_its_parents_copy_a_grown_worker_or_an_execd_process_is_not() -> None:
    # what the 100-store run sampled: a java child (not exec'd) with exactly the JVM's 1,124 MB
    assert is_parents_copy(1_124_000, True, 1_124_000)
    assert is_parents_copy(1_124_000, True, 1_140_000)  # the JVM's other threads went on allocating
    assert not is_parents_copy(146_000, True, 47_000)  # a pyspark.daemon worker that grew apart: its own memory
    assert not is_parents_copy(1_124_000, False, 1_124_000)  # exec'd: a process of its own whatever its size
    assert not is_parents_copy(0, True, 0)


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="Linux /proc")
def test_an_execd_child_is_counted_with_its_parent() -> None:
    proc = subprocess.Popen([sys.executable, "-c", _PARENT], stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None and proc.stdout.readline().strip() == "child"
        deadline = time.monotonic() + 20
        while len(process_tree(proc.pid)) < 2 and time.monotonic() < deadline:
            time.sleep(0.05)
        pids = process_tree(proc.pid)
        assert len(pids) == 2, pids
        parent, child = status_kb(proc.pid, "VmRSS"), status_kb(pids[1], "VmRSS")
        assert parent > 64 * 1024 and child > 32 * 1024
        assert tree_rss_kb(proc.pid) >= 0.95 * (parent + child)
    finally:
        for p in process_tree(proc.pid)[::-1]:
            try:
                os.kill(p, 9)
            except ProcessLookupError:
                pass
        proc.wait(10)
