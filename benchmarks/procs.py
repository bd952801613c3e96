"""Processes the benchmarks start and measure: free ports, /proc status fields, a process tree's memory."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

__all__ = ["free_port", "status_kb", "process_tree", "tree_rss_kb", "is_parents_copy", "wait_http", "start_serve", "stop_serve"]

ROOT = Path(__file__).resolve().parents[1]


def free_port() -> int:
    """A port on 127.0.0.1 that was free a moment ago (for a server the benchmark starts)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def status_kb(pid: int, field: str) -> int:
    """A ``/proc/<pid>/status`` figure in kB (``VmRSS``, ``VmHWM``, ``RssAnon``…); 0 once the process is gone."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith(field + ":"):
                return int(line.split()[1])
    except OSError:
        pass
    return 0


def process_tree(pid: int) -> list[int]:
    """``pid`` and all its descendants, children of every thread included.

    Why every thread: the JVM forks Spark's Python workers from its own threads, and
    ``/proc/<pid>/task/<pid>/children`` lists only the main thread's children.
    """
    return [p for p, _ in _tree_with_parents(pid)]


def _tree_with_parents(pid: int) -> list[tuple[int, int | None]]:
    out: list[tuple[int, int | None]] = []
    todo: list[tuple[int, int | None]] = [(pid, None)]
    while todo:
        p, parent = todo.pop()
        out.append((p, parent))
        try:
            for task in Path(f"/proc/{p}/task").iterdir():
                todo += [(int(k), p) for k in (task / "children").read_text().split()]
        except OSError:
            continue
    return out


_PF_FORKNOEXEC = 0x40  # include/linux/sched.h: forked but not yet exec'd
_PAGE_KB = os.sysconf("SC_PAGE_SIZE") // 1024


def _stat_rss_kb(pid: int) -> tuple[int, bool]:
    """(resident kB, forked-but-not-exec'd) from one read of ``/proc/<pid>/stat``; (0, False) once gone."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        return int(fields[21]) * _PAGE_KB, bool(int(fields[6]) & _PF_FORKNOEXEC)
    except (OSError, IndexError, ValueError):
        return 0, False


def tree_rss_kb(pid: int) -> int:
    """The summed resident memory of ``pid`` and its descendants, in kB.

    A child that has not exec'd since it was forked and is still its parent's size (within 2%) is not counted: it is
    the moment between the JVM's ``posix_spawn`` (a vfork: the child *shares* the parent's memory) and the
    exec of the Python worker it starts, and /proc reports the shared memory for both. Counting it doubled
    the JVM in a sample now and then: 100-store runs of bench_many_stores peaked at 4.2–4.7 GB with a child
    of the JVM (``java``, or already named ``jspawnhelper``) holding exactly the JVM's 1.1–1.4 GB. Forked
    workers that have grown apart from their parent (pyspark.daemon's) are counted as they are.
    """
    tree = _tree_with_parents(pid)
    stat = {p: _stat_rss_kb(p) for p, _ in tree}
    total = 0
    for p, parent in tree:
        rss, not_execd = stat[p]
        if parent is not None and is_parents_copy(rss, not_execd, stat[parent][0]):
            continue
        total += rss
    return total


def is_parents_copy(rss_kb: int, not_execd: bool, parent_rss_kb: int) -> bool:
    """A child that has not exec'd since its fork and is its parent's size (within 2%): its memory is the parent's."""
    return not_execd and parent_rss_kb > 0 and abs(rss_kb - parent_rss_kb) <= 0.02 * parent_rss_kb


def wait_http(proc: subprocess.Popen[bytes], port: int, path: str = "/v1/ping", seconds: float = 60.0) -> None:
    """Wait until the server ``proc`` started answers ``path`` on 127.0.0.1:``port``; raise if it exits or times out."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"iqgate serve exited with {proc.returncode}")
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=2):
                return
        except OSError:
            time.sleep(0.1)
    raise RuntimeError(f"iqgate serve did not answer {path} in {seconds:.0f} s")


def start_serve(state: Path, workers: int | None = None, threads: int | None = None) -> tuple[subprocess.Popen[bytes], int]:
    """``iqgate serve --state-dir state`` on a free port, answering; ``None`` leaves a flag at the command's default."""
    port = free_port()
    argv = [sys.executable, "-m", "gateway.cli", "serve", "--state-dir", str(state), "--port", str(port)]
    if workers is not None:
        argv += ["--workers", str(workers)]
    if threads is not None:
        argv += ["--threads", str(threads)]
    proc = subprocess.Popen(argv, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_http(proc, port)
    except RuntimeError:
        stop_serve(proc)
        raise
    return proc, port


def stop_serve(proc: subprocess.Popen[bytes]) -> None:
    """SIGTERM (the server stops its workers), bounded; SIGKILL if it does not end."""
    proc.terminate()
    try:
        proc.wait(30)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(10)
