"""The supervisor's serving processes: started, restarted when they die, stopped together.

The process that owns a server's listening sockets runs no statement
(issue 43 item 3): a native crash in a statement (a driver's segfault) can
only take down the serving process that ran it. The supervisor starts N
serving processes (``python -m gateway.serving.child``), each inheriting the
sockets, the state board, the accept board and its activity slots; when one
dies it logs why with the statements it was running (``activity.py``),
counts a crash if a signal killed it, and starts a new one, which accepts on
the same sockets at once: only the requests in flight on the dead process
are lost. A process that dies ``MAX_RESTARTS`` times in a minute is not
started again (its failure is not a passing one); when none is left, the
supervisor says so and ``alive`` turns False (the server then exits
non-zero, for its own supervisor to restart).

Serving processes die with the supervisor (PR_SET_PDEATHSIG, and a parent
check: ``die_with_parent``).
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from .activity import Activity
from .publisher import Crashes

__all__ = ["ServingProcesses", "die_with_parent", "default_workers", "MAX_RESTARTS", "SPEC_ENV", "TOKEN_ENV",
           "PEER_TOKEN_ENV"]

log = logging.getLogger(__name__)

SPEC_ENV = "IQGATE_SERVING"  # a serving process's spec (JSON: what it serves, its sockets, its options)
TOKEN_ENV = "IQGATE_TOKEN"  # the server's token, by environment (never on a command line)
PEER_TOKEN_ENV = "IQGATE_PEER_TOKEN"  # with a users file: this server's credential towards its peers
MAX_RESTARTS = 5  # per serving process per minute


def default_workers() -> int:
    """The cores this process may run on (the affinity mask, not every core of the machine)."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):  # pragma: no cover - not Linux
        return max(1, os.cpu_count() or 1)


def die_with_parent(stop: Callable[[], None]) -> None:
    """End this serving process with its supervisor: Linux SIGTERMs it (PR_SET_PDEATHSIG), and a thread calls
    ``stop`` when the parent is gone (a new parent pid) wherever that signal does not exist."""
    try:  # the pid that started us, as it said (getppid() is already 1 if it died while we started)
        parent = int(os.environ.get("IQGATE_SUPERVISOR") or os.getppid())
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


class ServingProcesses:
    """``count`` serving processes of one server (see the module doc)."""

    def __init__(self, count: int, spec: dict[str, Any], fds: tuple[int, ...], activity: Activity,
                 crashes: Crashes, token: str | None, on_crash: Callable[[], None] | None = None,
                 peer_token: str | None = None) -> None:
        self.count = count
        self._spec = spec
        self._fds = fds
        self._activity = activity
        self._crashes = crashes
        self._on_crash = on_crash
        env = {**os.environ, "IQGATE_SUPERVISOR": str(os.getpid())}
        root = str(Path(__file__).resolve().parents[2])
        env["PYTHONPATH"] = os.pathsep.join(p for p in (root, env.get("PYTHONPATH")) if p)
        env.pop(TOKEN_ENV, None)
        env.pop(PEER_TOKEN_ENV, None)
        if token:
            env[TOKEN_ENV] = token  # by environment, never on a command line
        if peer_token:
            env[PEER_TOKEN_ENV] = peer_token
        self._env = env
        self._procs: list[subprocess.Popen[bytes] | None] = [None] * count
        self._starts: list[list[float]] = [[] for _ in range(count)]
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._watch, name="iqgate-serving-processes", daemon=True)

    @property
    def pids(self) -> list[int]:
        return [p.pid for p in self._procs if p is not None and p.poll() is None]

    @property
    def alive(self) -> bool:
        """False once every serving process has died and none is started again."""
        return any(p is not None for p in self._procs)

    def start(self) -> ServingProcesses:
        for i in range(self.count):
            self._spawn(i)
        self._thread.start()
        return self

    def signal(self, sig: int) -> None:
        """Send ``sig`` to every serving process (SIGHUP: re-read the users file now)."""
        for p in list(self._procs):
            if p is not None and p.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    p.send_signal(sig)

    def _spawn(self, i: int) -> None:
        now = time.monotonic()
        self._starts[i] = [t for t in self._starts[i] if now - t < 60] + [now]
        spec = json.dumps({**self._spec, "index": i, "count": self.count})
        self._procs[i] = subprocess.Popen([sys.executable, "-m", "gateway.serving.child"],
                                          env={**self._env, SPEC_ENV: spec}, pass_fds=self._fds,
                                          stdin=subprocess.DEVNULL)

    def _watch(self) -> None:
        while not self._stop.wait(0.1):
            for i, p in enumerate(self._procs):
                if p is None or p.poll() is None or self._stop.is_set():
                    continue
                self._ended(i, p)

    def _ended(self, i: int, p: subprocess.Popen[bytes]) -> None:
        code = p.returncode
        running = self._activity.running(i)
        self._activity.clear(i)
        if code < 0:
            try:
                how = f"killed by {signal.Signals(-code).name}"
            except ValueError:
                how = f"killed by signal {-code}"
            self._crashes.record(i, p.pid, how, running)
            what = ("; it was running: " + " | ".join(s[:300] for s in running)) if running else \
                "; no statement was running"
            print(f"iqgate: serving process {i + 1} (pid {p.pid}) {how}{what}", file=sys.stderr, flush=True)
            if self._on_crash is not None:
                self._on_crash()
        else:
            print(f"iqgate: serving process {i + 1} (pid {p.pid}) exited with {code}", file=sys.stderr, flush=True)
        if len(self._starts[i]) >= MAX_RESTARTS:
            print(f"iqgate: serving process {i + 1} ended {MAX_RESTARTS} times within a minute; not starting it "
                  "again", file=sys.stderr, flush=True)
            self._procs[i] = None
            if not self.alive:
                print("iqgate: no serving process is left", file=sys.stderr, flush=True)
            return
        self._spawn(i)
        print(f"iqgate: started serving process {i + 1} again (pid {self._procs[i].pid})",  # type: ignore[union-attr]
              file=sys.stderr, flush=True)

    def stop(self, timeout_s: float = 10.0) -> None:
        """SIGTERM every serving process, wait (bounded), then SIGKILL what is left."""
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
        if self._thread.is_alive():
            self._thread.join(2)
