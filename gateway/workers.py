"""``iqgate serve --workers N``: N serving processes on one port, over the same state directory.

One Python process answers on one core (the GIL), so a server uses every
core by running several. The first process binds the listening socket and
passes it to N-1 worker processes it starts (``iqgate serve --state-dir DIR
--listen-fd FD``); every process accepts from that ONE socket (pre-fork), so
a new connection goes to a process that is waiting in ``accept`` — a stopped
or busy worker leaves its share to the others instead of holding
connections in a queue of its own (as SO_REUSEPORT would) — and, of those,
to one with the fewest connections (accept_board.py). The
workers read the store files read-only (SQLite WAL: any number of reader
processes beside the one writer); only the first process hosts the pipeline.
Each process runs its HTTP threads (the serving loop and its handlers) on a
CPU of its own (``serving_cpu``; ``ServerThread``'s ``cpu`` says why).

Workers die with the first process (PR_SET_PDEATHSIG, and a parent check);
a worker that exits on its own is started again, at most ``MAX_RESTARTS``
times a minute.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path

__all__ = ["listening_socket", "Workers", "default_workers", "die_with_parent", "serving_cpu", "worker_index",
           "MAX_RESTARTS", "INDEX_ENV"]

INDEX_ENV = "IQGATE_WORKER_INDEX"  # which serving process this is: 0 the first, 1 … N-1 the workers

MAX_RESTARTS = 5  # per worker per minute
_BACKLOG = 1024


def default_workers() -> int:
    """The cores this process may run on (the affinity mask, not every core of the machine)."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):  # pragma: no cover - not Linux
        return max(1, os.cpu_count() or 1)


def worker_index() -> int | None:
    """This worker's index as the first process gave it (``INDEX_ENV``; 1 if unset), None if malformed."""
    try:
        return int(os.environ.get(INDEX_ENV, "1"))
    except ValueError:
        return None


def serving_cpu(index: int) -> int | None:
    """The CPU serving process ``index`` runs its HTTP threads on: the index-th CPU this process may use
    (round robin), or None where there is one CPU or no affinity to set (see ``ServerThread``'s ``cpu``)."""
    try:
        cpus = sorted(os.sched_getaffinity(0))
    except (AttributeError, OSError):  # pragma: no cover - not Linux
        return None
    return cpus[index % len(cpus)] if len(cpus) > 1 else None


def listening_socket(host: str, port: int) -> socket.socket:
    """A bound, listening, inheritable TCP socket (IPv6 when ``host`` is an IPv6 address)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, port))
        sock.listen(_BACKLOG)
    except OSError:
        sock.close()
        raise
    sock.set_inheritable(True)
    return sock


def die_with_parent(stop: Callable[[], None]) -> None:
    """End this worker with the process that started it: Linux SIGTERMs it (PR_SET_PDEATHSIG), and a
    thread calls ``stop`` when the parent is gone (a new parent pid) wherever that signal does not exist."""
    try:  # the pid that started us, as it said (getppid() is already 1 if it died while we started)
        parent = int(os.environ.get("IQGATE_WORKER_OF") or os.getppid())
    except ValueError:
        parent = os.getppid()
    if sys.platform.startswith("linux"):
        with contextlib.suppress(Exception):
            import ctypes

            libc = ctypes.CDLL(None, use_errno=True)
            libc.prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    signal.signal(signal.SIGTERM, lambda *_: stop())
    if os.getppid() != parent:  # died before the call above
        stop()

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(1.0)
        stop()

    threading.Thread(target=watch, name="iqgate-parent-watch", daemon=True).start()


class Workers:
    """The worker processes of one server: started, restarted when they exit, stopped together."""

    def __init__(self, count: int, sock: socket.socket, state_dir: str | Path, options: Sequence[str],
                 env: dict[str, str] | None = None, board_fd: int | None = None) -> None:
        """``board_fd``: the accept board (accept_board.py) every worker shares with the first process."""
        self.count = count
        self._sock = sock
        self._fds = (sock.fileno(),) if board_fd is None else (sock.fileno(), board_fd)
        self._argv = [sys.executable, "-m", "gateway.cli", "serve", "--state-dir", str(state_dir),
                      "--listen-fd", str(sock.fileno()), "--workers", "1", *options]
        if board_fd is not None:
            self._argv += ["--accept-board-fd", str(board_fd)]
        self._env = {**os.environ, **(env or {}), "IQGATE_WORKER_OF": str(os.getpid())}
        root = str(Path(__file__).resolve().parents[1])
        self._env["PYTHONPATH"] = os.pathsep.join(p for p in (root, self._env.get("PYTHONPATH")) if p)
        self._procs: list[subprocess.Popen[bytes] | None] = [None] * count
        self._starts: list[list[float]] = [[] for _ in range(count)]
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._watch, name="iqgate-workers", daemon=True)

    @property
    def pids(self) -> list[int]:
        return [p.pid for p in self._procs if p is not None and p.poll() is None]

    def start(self) -> Workers:
        for i in range(self.count):
            self._spawn(i)
        self._thread.start()
        return self

    def _spawn(self, i: int) -> None:
        now = time.monotonic()
        self._starts[i] = [t for t in self._starts[i] if now - t < 60] + [now]
        self._procs[i] = subprocess.Popen(self._argv, env={**self._env, INDEX_ENV: str(i + 1)},
                                          pass_fds=self._fds, stdin=subprocess.DEVNULL)

    def _watch(self) -> None:
        while not self._stop.wait(0.5):
            for i, p in enumerate(self._procs):
                if p is None or p.poll() is None or self._stop.is_set():
                    continue
                if len(self._starts[i]) >= MAX_RESTARTS:
                    print(f"iqgate: worker {i + 1} exited with {p.returncode} {MAX_RESTARTS} times in a minute; "
                          "not starting it again", file=sys.stderr, flush=True)
                    self._procs[i] = None
                    continue
                print(f"iqgate: worker {i + 1} (pid {p.pid}) exited with {p.returncode}; starting it again",
                      file=sys.stderr, flush=True)
                self._spawn(i)

    def stop(self, timeout_s: float = 10.0) -> None:
        """SIGTERM every worker, wait (bounded), then SIGKILL what is left."""
        self._stop.set()
        live = [p for p in self._procs if p is not None and p.poll() is None]
        for p in live:
            with contextlib.suppress(ProcessLookupError):
                p.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + timeout_s
        for p in live:
            try:
                p.wait(max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait(5)
        self._thread.join(2)
